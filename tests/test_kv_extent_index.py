"""The extent index (kvsim/kv/extent_index.py) is the per-block KVIndex over stretches: on random
access sequences over three stores -- filing runs (with victims), reads, releases, evictions
forgotten as runs, removals -- an :class:`ExtentIndex` over :class:`ExtentStore`\\ s and a
:class:`KVIndex` over :class:`BlockStore`\\ s (LRU, blocks named ``(chain, position)``) give the
same locations for every block, in order, the same answers to the prefix queries (with the same
errors), and watchers the same news of every block in the same order."""

from __future__ import annotations

import random
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.kv import store as store_module
from kvsim.kv.extent_index import ExtentIndex, IntervalMap
from kvsim.kv.extents import ExtentStore
from kvsim.kv.index import KVIndex
from kvsim.kv.store import BlockStore

CHAINS = ("a", "b")
LENGTH = 10
STORES = 3

_chain = st.sampled_from(CHAINS)
_range = st.tuples(st.integers(0, LENGTH), st.integers(0, LENGTH)).map(sorted)
_seg = st.tuples(_chain, _range)
_store = st.integers(0, STORES - 1)
op_st = st.one_of(
    st.tuples(st.just("insert_run"), _store, _seg, st.booleans(), st.booleans()),
    st.tuples(st.just("insert_run"), _store, _seg, st.booleans(), st.booleans()),
    st.tuples(st.just("read_run"), _store, _seg),
    st.tuples(st.just("release"), _store, _chain),
    st.tuples(st.just("evict_run"), _store, st.integers(0, 6)),
    st.tuples(st.just("remove"), _store, _chain, st.integers(0, LENGTH - 1)),
    st.tuples(st.just("query"), st.lists(_seg, min_size=1, max_size=3), st.integers(0, 2 * LENGTH)),
)


class Pair:
    """The two indexes, their stores and what their watchers heard, driven together."""

    def __init__(self, capacities, usable, ranks):
        self.ref_stores = [BlockStore(f"s{k}", c * 2.0, 2.0, "lru") for k, c in enumerate(capacities)]
        self.ext_stores = [ExtentStore(f"s{k}", c) for k, c in enumerate(capacities)]
        self.ref, self.ext = KVIndex(), ExtentIndex()
        self.ref_heard, self.ext_heard = [], []
        self.ref.watch(lambda block, store, added: self.ref_heard.append((block, store.name, added)))
        self.ext.watch(lambda chain, s, e, store, added: self.ext_heard.extend(
            ((chain, p), store.name, added) for p in range(s, e)))
        self.usable_names, self.ranks = usable, ranks

    def usable(self, store) -> bool:
        return store.name in self.usable_names

    def rank(self, store) -> int:
        return self.ranks[store.name]

    def step(self, op: tuple) -> None:
        name = op[0]
        ref_out = ext_out = None
        if name == "insert_run":
            _, k, (chain, (a, b)), read, touch = op
            done, new_at, evicted = self.ref.insert_run(self.ref_stores[k], [(chain, p) for p in range(a, b)],
                                                        read, touch)
            ref_out = done, new_at, evicted
            done, new, ev = self.ext.insert_run(self.ext_stores[k], chain, a, b, read, touch)
            ext_out = (done, [p - a for s, e in new for p in range(s, e)],
                       [(c + i - a, (vc, vs + i)) for c, vc, vs, ve in ev for i in range(ve - vs)])
        elif name == "read_run":
            _, k, (chain, (a, b)) = op
            ref_out = self.ref_stores[k].read_run([(chain, p) for p in range(a, b)])
            ext_out = self.ext_stores[k].read_run(chain, a, b)
        elif name == "release":  # a sequence letting go: every reader of the chain's first stretch
            _, k, chain = op
            held = sorted(p for c, p in self.ref_stores[k]._readers if c == chain)
            end = held[0] + 1 if held else 0
            while end in held:
                end += 1
            start = held[0] if held else 0
            self.ref_stores[k].drop_reader_each([(chain, p) for p in range(start, end)])
            self.ext_stores[k].drop_reader_each(chain, start, end)
        elif name == "evict_run":  # a store's victims, then forgotten by the index (CacheWriter.reclaim)
            _, k, n = op
            victims = self.ref_stores[k].evict_run(n)
            self.ref.discard_run(victims, self.ref_stores[k])
            ref_out = victims
            runs = self.ext_stores[k].evict_run(n)
            for chain, s, e in runs:
                self.ext.discard_run(chain, s, e, self.ext_stores[k])
            ext_out = [(chain, p) for chain, s, e in runs for p in range(s, e)]
        elif name == "remove":
            _, k, chain, p = op
            ref_out = outcome(lambda: self.ref.remove(self.ref_stores[k], (chain, p)))
            ext_out = outcome(lambda: self.ext.remove(self.ext_stores[k], (chain, p)))
        elif name == "query":
            _, segments, n = op
            segments = [(chain, a, b) for chain, (a, b) in segments]
            blocks = [(chain, p) for chain, a, b in segments for p in range(a, b)]
            for usable in (None, self.usable):
                ref_n = self.ref.longest_prefix(blocks, usable)
                assert self.ext.longest_prefix(segments, usable) == ref_n
                for want in (ref_n, min(n, len(blocks))):
                    # B023: called within this iteration, never after it
                    ref_out = outcome(lambda: self.ref.tier_breakdown(blocks, want, self.rank, usable))  # noqa: B023
                    ext_out = outcome(lambda: [store for store, count in
                                               self.ext.tier_breakdown(segments, want, self.rank, usable)  # noqa: B023
                                               for _ in range(count)])
                    ref_out = (ref_out[0], [s.name for s in ref_out[1]] if ref_out[0] == "ok" else ref_out[1])
                    ext_out = (ext_out[0], [s.name for s in ext_out[1]] if ext_out[0] == "ok" else ext_out[1])
                    assert ext_out == ref_out, (segments, want)
        assert ext_out == ref_out, op
        self.same()

    def same(self) -> None:
        for chain in CHAINS:
            for p in range(LENGTH):
                assert [s.name for s in self.ext.locations(chain, p)] == \
                    [s.name for s in self.ref.locations((chain, p))], (chain, p)
        for ref_store, ext_store in zip(self.ref_stores, self.ext_stores):
            assert ext_store.blocks() == list(ref_store._policy.in_order())
        # every block's news, in order (across blocks, a stretch's victims may come before it)
        assert per_block(self.ext_heard) == per_block(self.ref_heard)
        for m in self.ext._maps.values():  # joined where the tuple is the same, never empty
            assert len(m) and all(m.ends[i] < m.starts[i + 1] or m.values[i] is not m.values[i + 1]
                                  for i in range(len(m) - 1))
            assert all(s < e for s, e in zip(m.starts, m.ends))


def per_block(heard: list) -> dict:
    out: dict = {}
    for block, store, added in heard:
        out.setdefault(block, []).append((store, added))
    return out


def outcome(call):
    try:
        return "ok", call()
    except (KeyError, ValueError) as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=300, deadline=None)
@given(st.lists(op_st, max_size=30), st.tuples(*[st.integers(0, 12)] * STORES),
       st.sets(st.sampled_from(["s0", "s1", "s2"])), st.tuples(*[st.integers(0, 2)] * STORES),
       st.sampled_from([0, 64]))
def test_extent_index_equals_kv_index(ops, capacities, usable, ranks, heap_after):
    with mock.patch.object(store_module, "HEAP_AFTER", heap_after):
        pair = Pair(capacities, usable, {f"s{k}": r for k, r in enumerate(ranks)})
        for op in ops:
            pair.step(op)


@pytest.mark.parametrize("seed", range(8))
def test_extent_index_equals_kv_index_seeded(seed):
    rng = random.Random(seed)
    pair = Pair([rng.choice([3, 8, 15]) for _ in range(STORES)], {"s0", "s2"}, {"s0": 1, "s1": 0, "s2": 1})
    for _ in range(300):
        chain = rng.choice(CHAINS)
        a = rng.randrange(LENGTH + 1)
        seg = (chain, (a, rng.randrange(a, LENGTH + 1)))
        k = rng.randrange(STORES)
        r = rng.random()
        if r < 0.4:
            op = ("insert_run", k, seg, rng.random() < 0.5, rng.random() < 0.5)
        elif r < 0.55:
            op = ("read_run", k, seg)
        elif r < 0.75:
            op = ("release", k, chain)
        elif r < 0.85:
            op = ("evict_run", k, rng.randrange(6))
        elif r < 0.9:
            op = ("remove", k, chain, rng.randrange(LENGTH))
        else:
            op = ("query", [seg, (rng.choice(CHAINS), (0, rng.randrange(LENGTH + 1)))], rng.randrange(2 * LENGTH))
        pair.step(op)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 3)), max_size=40))
def test_interval_map_equals_a_dict(changes):
    """IntervalMap.assign against a dict of positions: the same values, and ``changed`` names
    exactly the positions whose value changed, in order."""
    values = [None, "x", "y", "z"]
    m, ref = IntervalMap(), {}
    for a, b, v in changes:
        a, b = min(a, b), max(a, b)
        new = values[v]
        expect = [p for p in range(a, b) if ref.get(p) is not new]
        # B023: called within this iteration, never after it
        changed = m.assign(a, b, lambda old: new)  # noqa: B023
        assert [p for s, e, _, _ in changed for p in range(s, e)] == expect
        for p in range(a, b):
            if new is None:
                ref.pop(p, None)
            else:
                ref[p] = new
        assert {p: m.get(p) for p in range(32) if m.get(p) is not None} == ref
        for i in range(len(m) - 1):  # normal form: touching stretches differ
            assert m.ends[i] < m.starts[i + 1] or m.values[i] is not m.values[i + 1]
