"""Evictions and membership as runs (issue 23, item 1, part 2): ``BlockStore.evict_run`` with
``KVIndex.discard_run`` is ``evict_one`` then ``discard`` block by block, watchers included; the
index's run insert shares location tuples without changing them; ``SystemCache.missing_below``
groups a run's missing blocks by lower store in the order the per-block loop met them."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.kv import store as store_module
from kvsim.kv.eviction import EVICTION_POLICIES
from kvsim.kv.index import KVIndex
from kvsim.kv.store import BlockStore
from kvsim.serving.cache.tiers import SystemCache
from test_kv_runs import state

KINDS = sorted(EVICTION_POLICIES)
_id = st.integers(0, 11)
_blocks = st.lists(_id, max_size=8)
_op = st.one_of(
    st.tuples(st.just("insert_run"), st.integers(0, 2), _blocks, st.booleans()),
    st.tuples(st.just("evict"), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("discard"), st.integers(0, 2), _blocks),
    st.tuples(st.just("release"), st.integers(0, 2), st.integers(0, 4)),
)


def _world(kind, capacities, watched):
    index = KVIndex()
    stores = [BlockStore(f"s{i}", c, 1.0, kind) for i, c in enumerate(capacities)]
    log = []
    if watched:
        index.watch(lambda block, store, added: log.append((block, store.name, added)))
    return index, stores, log


def _removed(store, blocks):
    """``blocks`` removed from ``store`` where they can be (stored, unheld), and the others not
    stored: what the index may then discard (repeats included)."""
    for block in dict.fromkeys(blocks):
        if block in store and store.is_evictable(block):
            store.remove(block)
    return [block for block in blocks if block not in store]


def _per_block(index, stores, op):
    name, which = op[0], op[1]
    store = stores[which]
    if name == "insert_run":
        for block in op[2]:
            if index.insert(store, block) is None:
                break
            if op[3]:
                store.add_reader(block)
        return None
    if name == "evict":
        victims = []
        for _ in range(op[2]):
            victim = store.evict_one()
            if victim is None:
                break
            index.discard(victim, store)
            victims.append(victim)
        return victims
    if name == "discard":
        for block in _removed(store, op[2]):
            index.discard(block, store)
        return None
    store.drop_reader_each(sorted(store._readers)[:op[2]])
    return None


def _by_run(index, stores, op):
    name, which = op[0], op[1]
    store = stores[which]
    if name == "insert_run":
        index.insert_run(store, op[2], read=op[3])
        return None
    if name == "evict":
        victims = store.evict_run(op[2])
        index.discard_run(victims, store)
        return victims
    if name == "discard":
        index.discard_run(_removed(store, op[2]), store)
        return None
    store.drop_reader_each(sorted(store._readers)[:op[2]])
    return None


def _where(index):
    return [(block, [s.name for s in where]) for block, where in index._where.items()]


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(KINDS), capacities=st.tuples(*[st.integers(0, 6)] * 3),
       heap_after=st.sampled_from([0, 1, 64]), watched=st.booleans(), ops=st.lists(_op, max_size=30))
def test_evictions_and_discards_as_runs_equal_the_per_block_calls(kind, capacities, heap_after, watched, ops):
    with mock.patch.object(store_module, "HEAP_AFTER", heap_after):
        (ref_index, ref_stores, ref_log), (run_index, run_stores, run_log) = (
            _world(kind, capacities, watched) for _ in range(2))
        for op in ops:
            assert _per_block(ref_index, ref_stores, op) == _by_run(run_index, run_stores, op), op
            assert ref_log == run_log
            assert _where(ref_index) == _where(run_index)
            assert [state(s) for s in ref_stores] == [state(s) for s in run_stores]
            # the location tuples stay interned: equal tuples are one object
            tuples = list(run_index._where.values())
            assert all(run_index._sets[w] is w for w in tuples)


def test_evict_run_walks_past_held_blocks_and_stops_when_none_is_left():
    s = BlockStore("hbm", 6.0, 1.0)
    s.insert_run([1, 2, 3, 4, 5])
    s.add_reader_each([1, 3])
    assert s.evict_run(2) == [2, 4]
    assert s.evict_run(5) == [5]
    assert s.evict_run(1) == [] and s.evictions == 3 and list(s._policy.in_order()) == [1, 3]


def _system(dram, nvme, remote):
    """A SystemCache with only the stores ``missing_below`` reads (one node, ``n0``)."""
    system = SystemCache.__new__(SystemCache)
    system.dram = {"n0": dram} if dram is not None else {}
    system.nvme = {"n0": nvme} if nvme is not None else {}
    system.remote = remote
    return system


def _missing_reference(system, blocks, first_only):
    targets: dict[int, tuple] = {}
    for block in blocks:
        lower = system.lower_stores("n0", block)
        for store in (lower[:1] if first_only else lower):
            if block not in store:
                targets.setdefault(id(store), (store, []))[1].append(block)
    return [(store.name, group) for store, group in targets.values()]


@settings(max_examples=300, deadline=None)
@given(tiers=st.tuples(st.booleans(), st.booleans(), st.integers(0, 3)),
       held=st.lists(st.tuples(st.integers(0, 4), _id), max_size=25), blocks=_blocks, first_only=st.booleans())
def test_missing_below_groups_as_the_per_block_walk(tiers, held, blocks, first_only):
    dram = BlockStore("dram", 100.0, 1.0) if tiers[0] else None
    nvme = BlockStore("nvme", 100.0, 1.0) if tiers[1] else None
    remote = [BlockStore(f"r{i}", 100.0, 1.0) for i in range(tiers[2])]
    system = _system(dram, nvme, remote)
    stores = [dram, nvme] + remote
    for where, block in held:
        if where < len(stores) and stores[where] is not None:
            stores[where].insert(block)
    got = [(store.name, group) for store, group in system.missing_below("n0", blocks, first_only)]
    assert got == _missing_reference(system, blocks, first_only)
