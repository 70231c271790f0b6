"""Run operations of the KV layer (kvsim/kv/runs.py, KVIndex.insert_run and the prefix queries) are
the per-block operations applied in order: on random access sequences a store driven by runs and a
store driven block by block (the reference) end with the same contents, recency order, counters,
pins, readers, LRU stamps and heap, return the same evictions and refusals, and an index tells its
watchers of the same changes in the same order. The sequences include partial hits, evictions
inside a run, refusals part-way and blocks read by several sequences at once."""

from __future__ import annotations

import random
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.kv import store as store_module
from kvsim.kv.eviction import EVICTION_POLICIES
from kvsim.kv.index import KVIndex
from kvsim.kv.store import BlockStore
from kvsim.serving.cache.domain_pool import DomainPool, DomainStore

KINDS = sorted(EVICTION_POLICIES)
UNIVERSE = 14  # few distinct ids, so runs overlap what is stored (partial hits) and repeat

_id = st.integers(0, UNIVERSE - 1)
# a prompt's run has distinct blocks; repeats test the definition (the per-block calls in order)
blocks_st = st.one_of(st.lists(_id, unique=True, max_size=9), st.lists(_id, max_size=9))
insert_st = st.tuples(st.just("insert_run"), blocks_st, st.booleans(), st.booleans())
release_st = st.tuples(st.sampled_from(["release", "unpin_some"]), st.integers(0, 4))
op_st = st.one_of(
    insert_st, insert_st, insert_st, release_st, release_st,
    st.tuples(st.just("read_run"), blocks_st),
    st.tuples(st.just("lookup_pin_run"), blocks_st),
    st.tuples(st.just("touch_run"), blocks_st),
    st.tuples(st.just("add_reader_each"), blocks_st),
    st.tuples(st.just("drop_reader_each"), blocks_st),
    st.tuples(st.just("pin_each"), blocks_st),
    st.tuples(st.just("unpin_each"), blocks_st),
    st.tuples(st.just("evict_one")),
    st.tuples(st.just("evict_run"), st.integers(-1, 6)),
    st.tuples(st.just("missing"), blocks_st),
    st.tuples(st.just("unheld"), blocks_st, st.integers(-1, 5)),
    st.tuples(st.just("lookup"), st.integers(0, UNIVERSE - 1)),
    st.tuples(st.just("remove"), st.integers(0, UNIVERSE - 1)),
)


def state(s: BlockStore) -> tuple:
    """Everything a later decision of ``s`` can depend on, orders included."""
    policy = s._policy
    if s.policy_kind == "lru":
        order = list(policy.in_order())
    elif s.policy_kind == "lfu":
        order = [(f, list(bucket)) for f, bucket in policy._buckets.items()], dict(policy._freq), \
            dict(policy._next), dict(policy._prev)
    else:
        order = list(policy._small.items()), list(policy._main.items()), list(policy._ghost)
    counters = (s.hits, s.misses, s.insertions, s.evictions, s.removals, s.rejections)
    holds = (list(s._pins.items()), list(s._readers.items()), list(s._held.items()), s._reader_refs)
    # the LRU heap's valid entries (current stamp, block unheld): what the victim search takes;
    # a run may leave fewer stale ones (see RunOps._stamp), which it skips
    valid = sorted(e for e in set(s._unheld) if s._stamps.get(e[1]) == e[0] and e[1] not in s._held)
    if s._heap_on:  # every unheld stored block has its entry
        assert [b for _, b in valid] == sorted((b for b in s._stamps if b not in s._held), key=s._stamps.get)
    heap = (s._heap_on, s._clock, list(s._stamps.items()), valid)
    return order, counters, holds, heap


def held_op(s: BlockStore, op: tuple) -> tuple:
    """``release`` / ``unpin_some``: drop a reader of / unpin the first ``k`` blocks that have one
    (a sequence leaving, a transfer landing), as an explicit run of blocks."""
    if op[0] == "release":
        return ("drop_reader_each", sorted(s._readers)[:op[1]])
    if op[0] == "unpin_some":
        return ("unpin_each", sorted(s._pins)[:op[1]])
    return op


def per_block(s: BlockStore, op: tuple):
    """The reference: ``op`` done with the per-block API, returning what the run call returns."""
    op = held_op(s, op)
    name = op[0]
    if name == "insert_run":
        _, blocks, read, touch = op
        new_at, evicted = [], []
        done = 0
        for pos, block in enumerate(blocks):
            if touch or block not in s:
                was_in = block in s
                out = s.insert(block)
                if out is None:
                    break
                evicted += [(pos, victim) for victim in out]
                if not was_in:
                    new_at.append(pos)
            if read:
                s.add_reader(block)
            done += 1
        return done, new_at, evicted
    if name == "read_run":
        hits = 0
        for block in op[1]:
            if s.lookup(block):
                s.add_reader(block)
                hits += 1
        return hits
    if name == "lookup_pin_run":
        for block in op[1]:
            s.lookup(block)
            s.pin(block)
        return None
    if name == "touch_run":  # a resident block re-inserted is touched (no counter); others skipped
        touched = 0
        for block in op[1]:
            if block in s:
                assert s.insert(block) == []
                touched += 1
        return touched
    if name == "evict_run":
        victims = []
        for _ in range(op[1]):
            victim = s.evict_one()
            if victim is None:
                break
            victims.append(victim)
        return victims
    if name == "missing":
        return [block for block in op[1] if block not in s]
    if name == "unheld":  # (DomainPool's search for blocks it may move, as it was written)
        found = []
        for block in op[1]:
            if s.is_evictable(block):
                found.append(block)
                if len(found) == op[2]:
                    break
        return found
    single = {"add_reader_each": s.add_reader, "drop_reader_each": s.drop_reader,
              "pin_each": s.pin, "unpin_each": s.unpin}
    if name in single:
        for block in op[1]:
            single[name](block)
        return None
    return by_run(s, op)


def by_run(s: BlockStore, op: tuple):
    op = held_op(s, op)
    name = op[0]
    if name == "insert_run":
        return tuple(s.insert_run(op[1], read=op[2], touch=op[3]))
    if name in ("read_run", "lookup_pin_run", "touch_run", "add_reader_each", "drop_reader_each", "pin_each", "unpin_each"):
        return getattr(s, name)(op[1])
    if name == "evict_one":
        return s.evict_one()
    if name in ("evict_run", "missing"):
        return getattr(s, name)(op[1])
    if name == "unheld":
        return s.unheld(op[1], op[2])
    if name == "lookup":
        return s.lookup(op[1])
    return s.remove(op[1])


def apply(fn, s, op):
    try:
        return ("ok", fn(s, op))
    except (KeyError, ValueError) as exc:
        return (type(exc).__name__,)


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(KINDS), capacity=st.integers(0, 8), heap_after=st.sampled_from([0, 1, 64]),
       ops=st.lists(op_st, min_size=5, max_size=60))
def test_store_runs_equal_the_per_block_operations(kind, capacity, heap_after, ops):
    with mock.patch.object(store_module, "HEAP_AFTER", heap_after):
        ref, run = BlockStore("ref", capacity, 1.0, kind), BlockStore("run", capacity, 1.0, kind)
        for op in ops:
            assert apply(per_block, ref, op) == apply(by_run, run, op), op
            assert state(ref) == state(run), op


def _random_ops(rng: random.Random) -> list:
    ops = []
    for _ in range(rng.randint(5, 60)):
        r = rng.random()
        blocks = rng.sample(range(UNIVERSE), rng.randint(0, 9))
        if r < 0.4:
            ops.append(("insert_run", blocks, rng.random() < 0.5, rng.random() < 0.5))
        elif r < 0.6:
            ops.append((rng.choice(["release", "unpin_some"]), rng.randint(0, 4)))
        elif r < 0.7:
            ops.append(("read_run", blocks))
        elif r < 0.75:
            ops.append(("pin_each", blocks))
        elif r < 0.77:
            ops.append(("lookup_pin_run", blocks))
        elif r < 0.8:
            ops.append(("touch_run", blocks))
        elif r < 0.85:
            ops.append(("evict_one",))
        elif r < 0.9:
            ops.append(("evict_run", rng.randint(0, 6)))
        else:
            ops.append(("lookup", rng.randrange(UNIVERSE)))
    return ops


@pytest.mark.parametrize("seed", range(4))
def test_store_runs_equal_the_per_block_operations_seeded(seed):
    """The same check on seeded random sequences (uniform draws reach the LRU heap, switched on
    and off part-way, more often than hypothesis's shrink-friendly ones)."""
    rng = random.Random(seed)
    for _ in range(150):
        check = test_store_runs_equal_the_per_block_operations.hypothesis.inner_test
        check(rng.choice(KINDS), rng.randint(0, 8), rng.choice([0, 1, 64]), _random_ops(rng))


def test_a_run_refused_part_way_keeps_the_blocks_before_it():
    s = BlockStore("hbm", 3.0, 1.0)
    s.insert(9)
    s.add_reader(9)
    done, new_at, evicted = s.insert_run([1, 2, 3, 4], read=True)
    # 9 and the run's own blocks are held as soon as they are read: block 3 finds no victim
    assert (done, new_at, evicted) == (2, [0, 1], [])
    assert s.rejections == 1 and s.reader_refs == 3 and 3 not in s
    # unheld, the run's first blocks are evicted by its later ones (least recent first)
    s.drop_reader_each([1, 2])
    assert tuple(s.insert_run([5, 6])) == (2, [0, 1], [(0, 1), (1, 2)])


def test_readers_of_a_run_are_counted_per_sequence():
    s = BlockStore("hbm", 8.0, 1.0)
    s.insert_run([1, 2, 3], read=True)
    assert s.read_run([1, 2, 3, 4]) == 3 and s.misses == 1  # a second sequence, a partial hit
    assert (s.reader_refs, s.read_blocks, s.logical_bytes, s.physical_bytes) == (6, 3, 6.0, 3.0)
    s.drop_reader_each([1, 2, 3])
    assert s.evictable_blocks == 0
    s.drop_reader_each([1, 2, 3])
    assert s.evictable_blocks == 3 and s.reader_refs == 0
    with pytest.raises(ValueError):
        s.drop_reader_each([1])


class _Pool:
    def __init__(self):
        self.calls = []

    def touched(self, block):
        self.calls.append(block)

    def touched_run(self, blocks, stored):  # (its definition: DomainPool's is checked below)
        for block in blocks:
            if block in stored:
                self.touched(block)


@given(ops=st.lists(st.one_of(st.tuples(st.just("insert_run"), blocks_st, st.just(True), st.booleans()),
                              st.tuples(st.just("read_run"), blocks_st),
                              st.tuples(st.just("lookup_pin_run"), blocks_st),
                              release_st, st.tuples(st.just("evict_run"), st.integers(0, 3))), max_size=20),
       heap_after=st.sampled_from([0, 64]))
@settings(max_examples=200, deadline=None)
def test_domain_store_runs_refresh_homes_in_the_same_order(ops, heap_after):
    with mock.patch.object(store_module, "HEAP_AFTER", heap_after):
        ref, run = (DomainStore(name, 6.0, 1.0, "lru", _Pool()) for name in ("ref", "run"))
        for op in ops:
            assert apply(per_block, ref, op) == apply(by_run, run, op)
            assert state(ref) == state(run) and ref.pool.calls == run.pool.calls


@pytest.mark.parametrize("heap_after", [0, 64])
def test_releasing_a_run_that_names_a_block_twice_stops_where_the_per_block_calls_do(heap_after):
    """The release of blocks each held once (one delete per block, no counts read) meets a
    repeated block as drop_reader does: ValueError at its second time, the blocks before it let
    go of (their heap entries pushed), the rest still read."""
    with mock.patch.object(store_module, "HEAP_AFTER", heap_after):
        ref, run = BlockStore("ref", 8.0, 1.0), BlockStore("run", 8.0, 1.0)
        for s in (ref, run):
            s.insert_run(list(range(8)))
            s.read_run([2, 3, 4, 5, 6])
            # evicts 0, 1 and 7, then meets only held blocks: the heap goes on with HEAP_AFTER 0
            assert s.evict_run(4) == [0, 1, 7] and s._heap_on == (heap_after == 0)
        release = [3, 4, 5, 4, 6]
        with pytest.raises(ValueError, match="block 4 in ref has no readers"):
            for block in release:
                ref.drop_reader(block)
        with pytest.raises(ValueError, match="block 4 in run has no readers"):
            run.drop_reader_each(release)
        assert state(ref) == state(run)
        assert run.reader_refs == 2 and sorted(run._readers) == [2, 6]
        # a block held once by a pin, not a reader: the release stops at it
        for s in (ref, run):
            s.read_run([3, 4])
            s.pin(5)
        with pytest.raises(ValueError, match="block 5 in ref has no readers"):
            for block in [3, 4, 5, 6]:
                ref.drop_reader(block)
        with pytest.raises(ValueError, match="block 5 in run has no readers"):
            run.drop_reader_each([3, 4, 5, 6])
        assert state(ref) == state(run) and sorted(run._readers) == [2, 6]
        # and unpins: one block held by a reader stops a release of pins
        with pytest.raises(ValueError, match="block 6 in run is not pinned"):
            run.unpin_each([5, 6])
        with pytest.raises(ValueError, match="block 6 in ref is not pinned"):
            for block in [5, 6]:
                ref.unpin(block)
        assert state(ref) == state(run) and not run._pins


@settings(max_examples=200, deadline=None)
@given(homes=st.lists(st.tuples(_id, st.integers(0, 2)), max_size=20), blocks=blocks_st,
       stored=st.sets(_id))
def test_domain_pool_touched_run_is_touched_for_each_stored_block(homes, blocks, stored):
    pools = []
    for _ in range(2):
        pool = DomainPool.__new__(DomainPool)
        members = [object() for _ in range(3)]
        pool.home, pool.resident = {}, {id(m): {} for m in members}
        for block, member in homes:
            pool.resident[id(pool.home.pop(block, members[member]))].pop(block, None)
            pool.home[block] = members[member]
            pool.resident[id(members[member])][block] = None
        pools.append((pool, members))
    (ref, ref_members), (run, run_members) = pools
    stored = {b for b in stored if b in ref.home}
    for block in blocks:
        if block in stored:
            ref.touched(block)
    run.touched_run(blocks, stored)
    assert [list(ref.resident[id(m)]) for m in ref_members] == [list(run.resident[id(m)]) for m in run_members]


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(KINDS), capacities=st.tuples(st.integers(0, 6), st.integers(0, 6)),
       ops=st.lists(st.tuples(st.integers(0, 1), blocks_st, st.booleans(), st.booleans(), st.booleans()),
                    max_size=25),
       watched=st.booleans())
def test_index_runs_tell_watchers_the_same_changes_in_order(kind, capacities, ops, watched):
    worlds = []
    for _ in range(2):
        index = KVIndex()
        stores = [BlockStore(f"s{i}", c, 1.0, kind) for i, c in enumerate(capacities)]
        log = []
        if watched:
            index.watch(lambda block, store, added, log=log: log.append((block, store.name, added)))
        worlds.append((index, stores, log))
    (ref_index, ref_stores, ref_log), (run_index, run_stores, run_log) = worlds
    for which, blocks, read, touch, release in ops:
        ref, run = ref_stores[which], run_stores[which]
        expected = []
        done = 0
        for pos, block in enumerate(blocks):
            if touch or block not in ref:
                was_in = block in ref
                out = ref_index.insert(ref, block)
                if out is None:
                    break
                if not was_in:
                    expected.append(pos)
            if read:
                ref.add_reader(block)
            done += 1
        got = run_index.insert_run(run, blocks, read=read, touch=touch)
        assert (got.done, got.new_at) == (done, expected)
        if read and release:  # the sequence leaves: its blocks become evictable
            ref.drop_reader_each(blocks[:done])
            run.drop_reader_each(blocks[:done])
        assert ref_log == run_log
        assert [(b, [s.name for s in w]) for b, w in ref_index._where.items()] == \
            [(b, [s.name for s in w]) for b, w in run_index._where.items()]
        assert [state(s) for s in ref_stores] == [state(s) for s in run_stores]


def _longest_prefix_reference(where_of, hashes, usable):
    for i, block in enumerate(hashes):
        where = where_of.get(block)
        if not where:
            return i
        if usable is not None and not any(usable(store) for store in where):
            return i
    return len(hashes)


def _tier_breakdown_reference(where_of, hashes, n, rank, usable):
    best = []
    for block in hashes[:n]:
        candidates = [s for s in where_of.get(block, ()) if usable is None or usable(s)]
        if not candidates:
            raise KeyError(block)
        best.append(min(candidates, key=rank))
    return best


@settings(max_examples=200, deadline=None)
@given(placed=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3)), max_size=30),
       hashes=st.lists(st.integers(0, 9), max_size=12), banned=st.sets(st.integers(0, 3)),
       ranks=st.lists(st.integers(0, 2), min_size=4, max_size=4), filtered=st.booleans())
def test_prefix_queries_give_the_per_block_answers(placed, hashes, banned, ranks, filtered):
    """The same answers as the per-block definitions, asking ``usable`` and ``rank`` (functions of
    the store alone) nothing the definitions do not ask, and no more often: blocks at one location
    tuple share the answers worked out for the first of them."""
    index = KVIndex()
    stores = [BlockStore(f"s{i}", 100.0, 1.0) for i in range(4)]
    for block, where in placed:
        index.insert(stores[where], block)
    calls, ref_calls = [], []

    def make(log):
        def usable(store):
            log.append(("usable", store.name))
            return int(store.name[1]) not in sorted(banned)

        def rank(store):
            log.append(("rank", store.name))
            return ranks[int(store.name[1])]
        return (usable if filtered else None), rank

    usable, rank = make(calls)
    ref_usable, ref_rank = make(ref_calls)
    n = index.longest_prefix(hashes, usable)
    assert n == _longest_prefix_reference(index._where, hashes, ref_usable)
    assert index.tier_breakdown(hashes, n, rank, usable) == \
        _tier_breakdown_reference(index._where, hashes, n, ref_rank, ref_usable)
    assert set(calls) <= set(ref_calls) and len(calls) <= len(ref_calls)


def test_prefix_queries_ask_once_per_location_tuple():
    index = KVIndex()
    hbm, dram = BlockStore("hbm", 100.0, 1.0), BlockStore("dram", 100.0, 1.0)
    index.insert_run(hbm, list(range(8)))
    index.insert_run(dram, list(range(4, 12)))  # 0-3 in hbm, 4-7 in both, 8-11 in dram
    asked = []

    def usable(store):
        asked.append(("usable", store.name))
        return True

    def rank(store):
        asked.append(("rank", store.name))
        return {"hbm": 0, "dram": 1}[store.name]

    hashes = list(range(12))
    assert index.longest_prefix(hashes, usable) == 12
    assert asked == [("usable", "hbm"), ("usable", "hbm"), ("usable", "dram")]
    asked.clear()
    assert [s.name for s in index.tier_breakdown(hashes, 12, rank, usable)] == ["hbm"] * 8 + ["dram"] * 4
    assert asked == [("usable", "hbm"), ("usable", "hbm"), ("usable", "dram"), ("rank", "hbm"),
                     ("rank", "dram"), ("usable", "dram")]
