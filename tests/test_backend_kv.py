"""The KV layer's kernels of both backends give the same answers and keep the same state (issue 23).

:mod:`kvsim.kv.runs`, :mod:`kvsim.kv.store` and :mod:`kvsim.kv.index` are kernels of the
compiled backend: the same sources compiled with their hot loops' locals typed (dicts, lists, C
counters). A compiled store and a reference store driven by the same random access sequences --
through the run calls and through the per-block calls, with the LRU heap switched on part-way --
must return the same values and errors and end every step with the same contents, recency order,
counters, pins, readers, stamps and valid heap entries; a compiled index and a reference index
over compiled and reference stores must hold the same location tuples, tell their watchers the
same changes in the same order and answer the prefix queries alike. ``test_kv_runs.py`` holds the
reference's run calls to its per-block calls; this file holds the compiled ones to the reference.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim import backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_kv_runs import KINDS, UNIVERSE, _random_ops, apply, blocks_st, by_run, op_st, per_block, state

PURE_INSTALL = bool(os.environ.get("KVSIM_NO_COMPILE"))
pytestmark = pytest.mark.skipif(PURE_INSTALL, reason="the compiled backend is not built (KVSIM_NO_COMPILE)")


def _kernels():
    return backend.kernels("python"), backend.kernels("compiled")


def test_the_compiled_kv_modules_are_compiled_and_distinct():
    py, c = _kernels()
    for name in ("runs", "store", "index"):
        assert getattr(c, name).__file__.endswith(".so"), name
        assert getattr(c, name) is not getattr(py, name)
    assert c.store.BlockStore is not py.store.BlockStore
    assert issubclass(c.store.BlockStore, c.runs.RunOps)  # the compiled store runs the compiled run calls


def _heap_after(value):
    py, c = _kernels()
    return mock.patch.object(py.store, "HEAP_AFTER", value), mock.patch.object(c.store, "HEAP_AFTER", value)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(KINDS), capacity=st.integers(0, 8), heap_after=st.sampled_from([0, 1, 64]),
       ops=st.lists(op_st, min_size=5, max_size=60), per=st.lists(st.booleans(), min_size=60, max_size=60))
def test_compiled_store_equals_the_reference(kind, capacity, heap_after, ops, per):
    """Each op through the run call or (``per``) the per-block calls on both stores alike."""
    py, c = _kernels()
    patch_py, patch_c = _heap_after(heap_after)
    with patch_py, patch_c:
        ref, comp = py.store.BlockStore("s", capacity, 1.0, kind), c.store.BlockStore("s", capacity, 1.0, kind)
        for op, one_by_one in zip(ops, per):
            fn = per_block if one_by_one else by_run
            assert apply(fn, ref, op) == apply(fn, comp, op), op
            assert state(ref) == state(comp), op


@pytest.mark.parametrize("seed", range(4))
def test_compiled_store_equals_the_reference_seeded(seed):
    """Seeded uniform draws (they reach the LRU heap, and evictions with it, more often)."""
    rng = random.Random(seed)
    check = test_compiled_store_equals_the_reference.hypothesis.inner_test
    for _ in range(150):
        check(rng.choice(KINDS), rng.randint(0, 8), rng.choice([0, 1, 64]), _random_ops(rng),
              [rng.random() < 0.3 for _ in range(60)])


def _world(kernels, kind, capacities, watched):
    index = kernels.index.KVIndex()
    stores = [kernels.store.BlockStore(f"s{i}", cap, 1.0, kind) for i, cap in enumerate(capacities)]
    log: list = []
    if watched:
        index.watch(lambda block, store, added: log.append((block, store.name, added)))
    return index, stores, log


def _where(index) -> list:
    return [(b, [s.name for s in w]) for b, w in index._where.items()]


index_op_st = st.one_of(
    st.tuples(st.just("insert_run"), st.integers(0, 2), blocks_st, st.booleans(), st.booleans()),
    st.tuples(st.just("insert"), st.integers(0, 2), st.integers(0, UNIVERSE - 1)),
    st.tuples(st.just("release"), st.integers(0, 2), st.integers(0, 5)),
    st.tuples(st.just("evict_discard"), st.integers(0, 2), st.integers(0, 4)),
    st.tuples(st.just("discard"), st.integers(0, 2), blocks_st),
    st.tuples(st.just("remove"), st.integers(0, 2), st.integers(0, UNIVERSE - 1)),
    st.tuples(st.just("query"), blocks_st, st.sets(st.integers(0, 2)), st.lists(st.integers(0, 2), min_size=3,
                                                                                 max_size=3)),
)


def _index_op(index, stores, op):
    name = op[0]
    if name == "query":
        _, hashes, banned, ranks = op

        def usable(store):
            return int(store.name[1]) not in banned

        def rank(store):
            return ranks[int(store.name[1])]
        n = index.longest_prefix(hashes, usable)
        return n, [s.name for s in index.tier_breakdown(hashes, n, rank, usable)], index.longest_prefix(hashes)
    store = stores[op[1]]
    if name == "insert_run":
        return tuple(index.insert_run(store, op[2], read=op[3], touch=op[4]))
    if name == "insert":
        return index.insert(store, op[2])
    if name == "release":
        store.drop_reader_each(sorted(store._readers)[:op[2]])
        return None
    if name == "evict_discard":  # CacheWriter.reclaim's two calls
        victims = store.evict_run(op[2])
        index.discard_run(victims, store)
        return victims
    if name == "discard":
        return index.discard_run(op[2], store)
    return index.remove(store, op[2])


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(KINDS), capacities=st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)),
       ops=st.lists(index_op_st, max_size=30), watched=st.booleans(), heap_after=st.sampled_from([0, 64]),
       mixed=st.booleans())
def test_compiled_index_equals_the_reference(kind, capacities, ops, watched, heap_after, mixed):
    """Location tuples in acquisition order, watcher calls in order, the prefix queries' answers
    and every store's state; with ``mixed`` the compiled index keeps reference stores (a domain
    store is the reference's subclass in either backend)."""
    py, c = _kernels()
    patch_py, patch_c = _heap_after(heap_after)
    with patch_py, patch_c:
        ref_index, ref_stores, ref_log = _world(py, kind, capacities, watched)
        comp_index, comp_stores, comp_log = _world(c, kind, capacities, watched)
        if mixed:
            comp_stores = [py.store.BlockStore(f"s{i}", cap, 1.0, kind) for i, cap in enumerate(capacities)]
        for op in ops:
            assert apply(lambda _, o: _index_op(ref_index, ref_stores, o), None, op) == \
                apply(lambda _, o: _index_op(comp_index, comp_stores, o), None, op), op
            assert ref_log == comp_log, op
            assert _where(ref_index) == _where(comp_index), op
            assert [state(s) for s in ref_stores] == [state(s) for s in comp_stores], op
