"""The extent store (kvsim/kv/extents.py) is the per-block LRU store applied block by block: on
random access sequences over a few chains -- runs that partly hit, evictions inside an extent,
refusals part-way, several sequences reading the same blocks, pins, releases, removals -- an
:class:`ExtentStore` and a :class:`BlockStore` (LRU, its heap on or off, blocks named
``(chain, position)``) end every operation with the same recency order, readers, pins and
counters, and return the same hits, victims (with the block that caused each), refusals and
errors. The extent store's own invariants (no two neighbours that spell one extent, chain maps
in step with the order, counts summed right) are checked too."""

from __future__ import annotations

import random
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.kv import store as store_module
from kvsim.kv.extents import ExtentStore
from kvsim.kv.store import BlockStore

CHAINS = ("a", "b", "c")
LENGTH = 12  # positions per chain: few, so runs overlap what is stored

_chain = st.sampled_from(CHAINS)
_range = st.tuples(st.integers(0, LENGTH), st.integers(0, LENGTH)).map(sorted)
_seg = st.tuples(_chain, _range)
op_st = st.one_of(
    st.tuples(st.just("insert_run"), _seg, st.booleans(), st.booleans()),
    st.tuples(st.just("insert_run"), _seg, st.just(True), st.just(False)),  # a prompt filed
    st.tuples(st.just("read_run"), _seg),
    st.tuples(st.just("lookup_pin_run"), _seg),
    st.tuples(st.just("add_reader_each"), _seg),
    st.tuples(st.just("pin_each"), _seg),
    st.tuples(st.just("drop_reader_each"), _seg),
    st.tuples(st.just("unpin_each"), _seg),
    st.tuples(st.sampled_from(["release", "unpin_some"]), _chain, st.integers(1, 6)),
    st.tuples(st.sampled_from(["release", "unpin_some"]), _chain, st.integers(1, 6)),
    st.tuples(st.just("evict_run"), st.integers(-1, 7)),
    st.tuples(st.just("evict_one")),
    st.tuples(st.just("missing"), _seg),
    st.tuples(st.just("touch_run"), _seg),  # a lookup's touch below HBM (phase 6)
    st.tuples(st.sampled_from(["lookup", "remove"]), _chain, st.integers(0, LENGTH - 1)),
)


def ids(chain, start, end) -> list:
    return [(chain, p) for p in range(start, end)]


def concrete(ref: BlockStore, op: tuple) -> tuple:
    """``release`` / ``unpin_some``: the first stretch of consecutive positions of ``chain`` that
    have a reader / a pin, up to ``k`` blocks (a sequence leaving, a transfer landing)."""
    if op[0] not in ("release", "unpin_some"):
        return op
    _, chain, k = op
    counts = ref._readers if op[0] == "release" else ref._pins
    held = sorted(p for c, p in counts if c == chain)
    if not held:
        return ("drop_reader_each" if op[0] == "release" else "unpin_each", (chain, (0, 0)))
    end = held[0] + 1
    while end in held and end - held[0] < k:
        end += 1
    return ("drop_reader_each" if op[0] == "release" else "unpin_each", (chain, (held[0], end)))


def outcome(call):
    try:
        return "ok", call()
    except (KeyError, ValueError) as exc:
        return type(exc).__name__, str(exc)


def by_block(ref: BlockStore, op: tuple):
    """The reference: the per-block store's calls (its run calls, held equal to the per-block
    ones by tests/test_kv_runs.py), answers in per-block form."""
    name = op[0]
    if name in ("evict_run", "evict_one"):
        return outcome(lambda: ref.evict_run(op[1]) if name == "evict_run" else ref.evict_one())
    if name in ("lookup", "remove"):
        return outcome(lambda: getattr(ref, name)((op[1], op[2])))
    chain, (start, end) = op[1]
    blocks = ids(chain, start, end)
    if name == "insert_run":
        return outcome(lambda: tuple(ref.insert_run(blocks, op[2], op[3])))
    return outcome(lambda: getattr(ref, name)(blocks))


def by_extent(ext: ExtentStore, op: tuple):
    """The same operation on the extent store, its answer turned into the per-block form."""
    name = op[0]
    if name == "evict_run":
        return outcome(lambda: [(c, p) for c, a, b in ext.evict_run(op[1]) for p in range(a, b)])
    if name == "evict_one":
        return outcome(ext.evict_one)
    if name in ("lookup", "remove"):
        return outcome(lambda: getattr(ext, name)((op[1], op[2])))
    chain, (start, end) = op[1]
    if name == "insert_run":
        def insert():
            done, new, evicted = ext.insert_run(chain, start, end, op[2], op[3])
            new_at = [p - start for a, b in new for p in range(a, b)]
            victims = [(cause + k - start, (vchain, vstart + k))
                       for cause, vchain, vstart, vstop in evicted for k in range(vstop - vstart)]
            return done, new_at, victims
        return outcome(insert)
    if name == "missing":
        return outcome(lambda: [(chain, p) for a, b in ext.missing(chain, start, end) for p in range(a, b)])
    return outcome(lambda: getattr(ext, name)(chain, start, end))


def check_invariants(ext: ExtentStore) -> None:
    """The extent store's own bookkeeping: normal form, maps and counts."""
    order = ext.extents()
    for a, b in zip(order, order[1:]):
        assert not ext._joinable(a, b), (a, b)  # neighbours that spell one extent are joined
    for e in order:
        assert e.start < e.end and e.readers >= 0 and e.pins >= 0
    mapped = sorted((c, s, id(e)) for c, m in ext._chains.items() for s, e in zip(m.starts, m.extents))
    assert mapped == sorted((e.chain, e.start, id(e)) for e in order)
    for m in ext._chains.values():
        assert m.starts == sorted(m.starts) and all(s == e.start for s, e in zip(m.starts, m.extents))
        assert all(a.end <= b.start for a, b in zip(m.extents, m.extents[1:]))
    n = [e.end - e.start for e in order]
    assert ext.extent_count == len(order)
    assert ext.used_blocks == sum(n) <= ext.capacity_blocks
    assert ext.read_blocks == sum(k for k, e in zip(n, order) if e.readers)
    assert ext.pinned_blocks == sum(k for k, e in zip(n, order) if e.pins)
    assert ext.evictable_blocks == sum(k for k, e in zip(n, order) if not (e.readers or e.pins))
    assert ext.reader_refs == sum(k * e.readers for k, e in zip(n, order))


def same_state(ref: BlockStore, ext: ExtentStore) -> None:
    assert ext.blocks() == list(ref._policy.in_order())
    readers = {(e.chain, p): e.readers for e in ext.extents() if e.readers for p in range(e.start, e.end)}
    pins = {(e.chain, p): e.pins for e in ext.extents() if e.pins for p in range(e.start, e.end)}
    assert readers == ref._readers and pins == ref._pins
    for name in ("hits", "misses", "insertions", "evictions", "removals", "rejections",
                 "used_blocks", "evictable_blocks", "reader_refs", "read_blocks", "pinned_blocks"):
        assert getattr(ext, name) == getattr(ref, name), name


def replay(ops, capacity: int, heap_after: int) -> ExtentStore:
    with mock.patch.object(store_module, "HEAP_AFTER", heap_after):
        ref = BlockStore("s", capacity * 2.0, 2.0, "lru")
        ext = ExtentStore("s", capacity)
        for op in ops:
            op = concrete(ref, op)
            expected = by_block(ref, op)
            got = by_extent(ext, op)
            assert got == expected, op
            same_state(ref, ext)
            check_invariants(ext)
    return ext


@settings(max_examples=400, deadline=None)
@given(st.lists(op_st, max_size=40), st.integers(0, 20), st.sampled_from([0, 1, 64]))
def test_extents_equal_per_block_lru(ops, capacity, heap_after):
    replay(ops, capacity, heap_after)


def _uniform_ops(rng: random.Random, n: int) -> list:
    ops = []
    for _ in range(n):
        chain = rng.choice(CHAINS)
        a = rng.randrange(LENGTH + 1)
        seg = (chain, (a, rng.randrange(a, LENGTH + 1)))
        kind = rng.random()
        if kind < 0.35:
            ops.append(("insert_run", seg, rng.random() < 0.6, rng.random() < 0.4))
        elif kind < 0.5:
            ops.append(("read_run", seg))
        elif kind < 0.55:
            ops.append(("lookup_pin_run", seg))
        elif kind < 0.6:
            ops.append(("touch_run", seg))
        elif kind < 0.82:
            ops.append((rng.choice(["release", "release", "unpin_some"]), chain, rng.randrange(1, 8)))
        elif kind < 0.9:
            ops.append(("evict_run", rng.randrange(0, 6)))
        else:
            ops.append((rng.choice(["lookup", "remove", "lookup"]), chain, rng.randrange(LENGTH)))
    return ops


@pytest.mark.parametrize("seed", range(12))
def test_extents_equal_per_block_lru_seeded(seed):
    """Seeded uniform draws, longer than hypothesis's, with full stores and many readers at once."""
    rng = random.Random(seed)
    replay(_uniform_ops(rng, 400), rng.choice([4, 9, 16, 30]), rng.choice([0, 64]))


def test_documents_stay_few_extents():
    """The domain pattern: documents filed whole, read by several sequences, released: one extent
    per document (not one entry per block), split only where a partial hit or an eviction fell."""
    ext = ExtentStore("domain", 10_000)
    for doc in range(4):
        ext.insert_run(doc, 0, 2048, read=True, touch=False)
    for doc in (1, 2, 1):
        assert ext.read_run(doc, 0, 2048) == 2048
    assert ext.extent_count == 4
    ext.read_run(0, 0, 1000)  # a partial hit: the hit part becomes the most recent
    assert [(e.chain, e.start, e.end) for e in ext.extents()][-1] == (0, 0, 1000)
    for doc, times in ((0, 1), (1, 3), (2, 2), (3, 1)):
        for _ in range(times):
            ext.drop_reader_each(doc, 0, 2048)
    assert ext.evictable_blocks == 4 * 2048 - 1000  # document 0's first 1,000 blocks are still read
    # (documents 3, 2, 1 join nothing: other chains; document 0's pieces lie apart in the order)
    assert ext.extent_count == 5
    victims = ext.evict_run(3000)  # the least recent unheld blocks: the front of each extent
    assert victims == [(0, 1000, 2048), (3, 0, 1952)]
    assert ext.extent_count == 4 and ext.used_blocks == 4 * 2048 - 3000


def test_a_wrong_join_is_caught():
    """The comparison can fail: joining neighbours whose reader counts differ (one wrong rule)
    gives a different store, and the replay says so."""
    def loose(self, a, b):
        return a is not self._head and b is not self._head and a.chain == b.chain and a.end == b.start

    ops = [("insert_run", ("a", (0, 4)), False, True), ("add_reader_each", ("a", (2, 4))),
           ("insert_run", ("a", (4, 6)), False, True), ("evict_run", 3)]
    replay(ops, 8, 64)
    with mock.patch.object(ExtentStore, "_joinable", loose), pytest.raises(AssertionError):
        replay(ops, 8, 64)
