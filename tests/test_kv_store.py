"""BlockStore: capacity, counters, pins, readers, refusal when full of held blocks; property tests
of conservation (no block lost or double-counted) and of LRU/LFU against brute-force models."""

from __future__ import annotations

import copy
from collections import Counter, OrderedDict
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvsim.kv import store as store_module
from kvsim.kv.eviction import EVICTION_POLICIES
from kvsim.kv.store import BlockStore

KINDS = sorted(EVICTION_POLICIES)


def test_capacity_is_whole_blocks():
    assert BlockStore("a", 10.5 * 4, 4).capacity_blocks == 10
    # 0.3 / 0.1 is 2.9999999999999996 in floating point; three blocks still fit.
    assert BlockStore("b", 0.3, 0.1).capacity_blocks == 3
    s = BlockStore("c", 3.9, 1.0)
    assert s.capacity_blocks == 3 and s.capacity_bytes == 3.0
    with pytest.raises(ValueError):
        BlockStore("d", 10, 0)
    with pytest.raises(ValueError):
        BlockStore("e", -1, 1)
    with pytest.raises(ValueError, match="unknown eviction policy"):
        BlockStore("f", 10, 1, policy="mru")


def test_zero_capacity_refuses_everything():
    s = BlockStore("none", 1.0, 2.0)
    assert s.capacity_blocks == 0
    assert s.insert(7) is None
    assert s.rejections == 1 and s.used_blocks == 0 and not s.contains(7)


def test_counters_bytes_and_lru_eviction():
    s = BlockStore("hbm", 2 * 1000.0, 1000.0)
    assert s.insert(1) == [] and s.insert(2) == []
    assert (s.used_blocks, s.used_bytes, s.physical_bytes, s.free_blocks) == (2, 2000.0, 2000.0, 0)
    assert s.lookup(1) is True and s.lookup(3) is False
    assert (s.hits, s.misses) == (1, 1)
    assert s.insert(2) == []  # resident: a touch, not an insertion; recency is now 1, 2
    assert s.insertions == 2
    assert s.insert(3) == [1]
    assert s.contains(2) and s.contains(3) and not s.contains(1)
    assert (s.insertions, s.evictions, s.used_blocks) == (3, 1, 2)
    # contains() is not a hit: it must not change recency (2 stays the oldest).
    assert s.contains(2)
    assert s.insert(4) == [2]
    assert (s.hits, s.misses) == (1, 1)


def test_pinned_blocks_are_never_evicted_and_pins_are_counted():
    s = BlockStore("dram", 3.0, 1.0)
    for b in (1, 2, 3):
        s.insert(b)
    s.pin(1)
    s.pin(1)
    s.pin(2)
    assert s.pinned_blocks == 2 and s.pins(1) == 2
    assert s.insert(4) == [3]
    s.pin(4)
    # Full, and 1, 2, 4 all pinned: refuse, change nothing.
    assert s.insert(5) is None
    assert s.rejections == 1 and s.evictions == 1 and s.insertions == 4
    assert [s.contains(b) for b in (1, 2, 4, 5)] == [True, True, True, False]
    s.unpin(1)
    assert s.insert(5) is None  # 1 still holds one pin
    s.unpin(1)
    assert s.insert(5) == [1]
    with pytest.raises(ValueError):
        s.unpin(1)
    with pytest.raises(KeyError):
        s.pin(1)  # gone


def test_readers_count_logical_bytes_and_hold_the_block():
    s = BlockStore("pool", 2 * 8.0, 8.0)
    s.insert("p")
    s.insert("q")
    for _ in range(3):
        s.add_reader("p")  # three sequences read one physical copy
    assert s.readers("p") == 3
    assert (s.physical_bytes, s.logical_bytes) == (16.0, 24.0)
    # A block with readers is in use: the other one is evicted, and p cannot be removed.
    assert s.insert("r") == ["q"]
    with pytest.raises(ValueError):
        s.remove("p")
    s.add_reader("r")
    assert s.insert("t") is None
    assert s.logical_bytes == 32.0
    s.drop_reader("r")
    assert s.insert("t") == ["r"]
    for _ in range(3):
        s.drop_reader("p")
    assert s.logical_bytes == 0.0 and s.physical_bytes == 16.0
    with pytest.raises(ValueError):
        s.drop_reader("p")
    with pytest.raises(KeyError):
        s.add_reader("absent")


def test_remove():
    s = BlockStore("nvme", 4.0, 1.0)
    s.insert(1)
    s.pin(1)
    with pytest.raises(ValueError):
        s.remove(1)
    s.unpin(1)
    s.remove(1)
    assert s.removals == 1 and s.used_blocks == 0
    with pytest.raises(KeyError):
        s.remove(1)


# --- property tests ----------------------------------------------------------------------------

OPS = st.sampled_from(
    ["insert", "insert", "insert", "lookup", "pin", "unpin", "remove", "add_reader", "drop_reader"]
)
UNIVERSE = range(12)


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    capacity=st.integers(0, 7),
    ops=st.lists(st.tuples(OPS, st.sampled_from(UNIVERSE)), max_size=120),
)
def test_store_conserves_blocks(kind, capacity, ops):
    block_bytes = 3.0
    s = BlockStore("s", capacity * block_bytes, block_bytes, kind)
    present: dict[int, None] = {}
    pins: Counter[int] = Counter()
    readers: Counter[int] = Counter()
    stored: Counter[int] = Counter()  # times each block was newly stored
    left: Counter[int] = Counter()  # times it was reported evicted or removed
    rejections = 0
    for op, b in ops:
        if op == "insert":
            out = s.insert(b)
            if out is None:
                rejections += 1
                # Refusal only when full and every block is held.
                assert b not in present and len(present) == capacity
                assert all(pins[x] or readers[x] for x in present)
            elif b in present:
                assert out == []
            else:
                assert len(out) == (1 if len(present) == capacity else 0)
                for e in out:
                    assert e in present and not pins[e] and not readers[e]
                    del present[e]
                    left[e] += 1
                present[b] = None
                stored[b] += 1
        elif op == "lookup":
            assert s.lookup(b) == (b in present)
        elif op in ("pin", "add_reader"):
            holds = pins if op == "pin" else readers
            if b in present:
                getattr(s, op)(b)
                holds[b] += 1
            else:
                with pytest.raises(KeyError):
                    getattr(s, op)(b)
        elif op in ("unpin", "drop_reader"):
            holds = pins if op == "unpin" else readers
            if holds[b]:
                getattr(s, op)(b)
                holds[b] -= 1
            else:
                with pytest.raises(ValueError):
                    getattr(s, op)(b)
        elif op == "remove":
            if b not in present:
                with pytest.raises(KeyError):
                    s.remove(b)
            elif pins[b] or readers[b]:
                with pytest.raises(ValueError):
                    s.remove(b)
            else:
                s.remove(b)
                del present[b]
                left[b] += 1
        assert s.used_blocks == len(present) <= s.capacity_blocks == capacity
        assert s.physical_bytes == s.used_bytes == len(present) * block_bytes
        assert s.logical_bytes == sum(readers.values()) * block_bytes
        for x in UNIVERSE:
            assert s.contains(x) == (x in present)
            # Every stored block is either still here or was reported gone exactly once.
            assert stored[x] - left[x] == (1 if x in present else 0)
        assert s.insertions - s.evictions - s.removals == s.used_blocks
        assert s.rejections == rejections


def _expected_victim(kind, order, freq, held):
    """Brute force: LRU = oldest access; LFU = lowest count, then oldest access."""
    candidates = [b for b in order if not held(b)]  # ``order`` is oldest access first
    if not candidates:
        return None
    if kind == "lru":
        return candidates[0]
    return min(candidates, key=lambda b: freq[b])  # min keeps the first (oldest) of equals


@settings(max_examples=150, deadline=None)
@given(
    kind=st.sampled_from(["lru", "lfu"]),
    capacity=st.integers(1, 6),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert", "insert", "lookup", "pin", "unpin"]), st.integers(0, 9)
        ),
        max_size=120,
    ),
)
def test_lru_and_lfu_match_brute_force(kind, capacity, ops):
    s = BlockStore("s", capacity, 1.0, kind)
    order: OrderedDict[int, None] = OrderedDict()  # resident blocks, oldest access first
    freq: Counter[int] = Counter()
    pins: Counter[int] = Counter()
    for op, b in ops:
        if op == "insert":
            if b in order:
                assert s.insert(b) == []
                order.move_to_end(b)
                freq[b] += 1
                continue
            want = None
            if len(order) == capacity:
                want = _expected_victim(kind, order, freq, lambda x: pins[x] > 0)
                if want is None:
                    assert s.insert(b) is None
                    continue
            assert s.insert(b) == ([] if want is None else [want])
            if want is not None:
                del order[want]
                freq[want] = 0
            order[b] = None
            freq[b] = 1
        elif op == "lookup":
            assert s.lookup(b) == (b in order)
            if b in order:
                order.move_to_end(b)
                freq[b] += 1
        elif op == "pin" and b in order:
            s.pin(b)
            pins[b] += 1
        elif op == "unpin" and pins[b]:
            s.unpin(b)
            pins[b] -= 1


def test_evictable_blocks_counts_unheld_blocks():
    from kvsim.kv.store import BlockStore

    store = BlockStore("s", 4.0, 1.0)
    for block in (1, 2, 3):
        store.insert(block)
    store.pin(1)
    store.add_reader(1)
    store.add_reader(2)
    assert store.evictable_blocks == 1
    store.unpin(1)
    assert store.evictable_blocks == 1  # 1 still has a reader
    store.drop_reader(1)
    store.drop_reader(2)
    assert store.evictable_blocks == 3


BATCH_OPS = st.sampled_from(["insert", "insert", "pin_each", "unpin_each", "add_reader", "drop_reader_each"])


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    capacity=st.integers(0, 4),
    ops=st.lists(st.tuples(BATCH_OPS, st.lists(st.sampled_from(range(6)), max_size=4)), max_size=60),
    heap=st.booleans(),
)
# a block held when the heap starts is not on it: releasing it must push it back
@example(kind="lru", capacity=2, heap=True,
         ops=[("insert", [1, 2]), ("add_reader", [1]), ("insert", [3]), ("drop_reader_each", [1])])
@example(kind="lru", capacity=2, heap=True,
         ops=[("insert", [1, 2]), ("pin_each", [1]), ("insert", [3]), ("unpin_each", [1])])
def test_batch_holds_equal_one_call_per_block(kind, capacity, ops, heap):
    """pin_each, unpin_each and drop_reader_each leave the store as the calls one block at a time
    would, errors included (a refused block stops both where it stands); ``heap``: LRU's victim
    heap from the first held block stepped over (its releases push blocks back on it)."""
    with mock.patch.object(store_module, "HEAP_AFTER", 0 if heap else store_module.HEAP_AFTER):
        _batch_against_single(kind, capacity, ops)


def _batch_against_single(kind, capacity, ops):
    bulk, single = (BlockStore("s", capacity * 3.0, 3.0, kind) for _ in range(2))
    for op, blocks in ops:
        outcomes = []
        for store, batch in ((bulk, True), (single, False)):
            try:
                if op in ("insert", "add_reader"):
                    result = [getattr(store, op)(b) for b in blocks]
                elif batch:
                    result = getattr(store, op)(blocks)
                else:
                    for b in blocks:
                        getattr(store, op.removesuffix("_each"))(b)
                    result = None
            except (KeyError, ValueError) as error:
                result = type(error)
            outcomes.append(result)
        assert outcomes[0] == outcomes[1]
        for b in UNIVERSE:
            assert (bulk.contains(b), bulk.pins(b), bulk.readers(b)) == (
                single.contains(b), single.pins(b), single.readers(b))
        assert (bulk.evictable_blocks, bulk.logical_bytes, bulk.read_blocks, bulk.pinned_blocks) == (
            single.evictable_blocks, single.logical_bytes, single.read_blocks, single.pinned_blocks)
        # the same victims from here on (evicted from copies, so the run goes on)
        assert _victims(copy.deepcopy(bulk)) == _victims(copy.deepcopy(single))


def _victims(store):
    return [store.evict_one() for _ in range(store.capacity_blocks + 1)]
