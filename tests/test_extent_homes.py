"""A domain's homes as extents (kvsim/serving/cache/extent_homes.py) are DomainPool's per-block
``home`` and ``resident`` bookkeeping: on random sequences of homing runs, hits refreshing homes,
blocks forgotten, single moves and reclaim's batches (moved most recent first, so a stretch
arrives reversed: extents that run backwards), every member's order and every block's home are
the per-block ones after every step."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.serving.cache.extent_homes import ExtentHomes

CHAINS, LENGTH, HOMES = ("a", "b"), 12, ("h0", "h1", "h2")

_chain = st.sampled_from(CHAINS)
_range = st.tuples(st.integers(0, LENGTH), st.integers(0, LENGTH)).map(sorted)
_home = st.sampled_from(HOMES)
op_st = st.one_of(
    st.tuples(st.just("homed_run"), _chain, _range, _home),
    st.tuples(st.just("homed_run"), _chain, _range, _home),
    st.tuples(st.just("touched_run"), _chain, _range),
    st.tuples(st.just("forget"), _chain, st.integers(0, LENGTH - 1)),
    st.tuples(st.just("move"), _chain, st.integers(0, LENGTH - 1), _home),
    st.tuples(st.just("move_batch"), _home, st.integers(1, 8), _home),
    st.tuples(st.just("forget_run"), _chain, _range),
    st.tuples(st.just("move_run"), _chain, _range, st.sampled_from((1, -1)), _home),
    st.tuples(st.just("homed_in"), _chain, _range, _home),
)


class Reference:
    """DomainPool's dicts, as it changes them."""

    def __init__(self):
        self.home, self.resident = {}, {h: {} for h in HOMES}

    def homed(self, block, cache):
        self.home[block] = cache
        self.resident[cache][block] = None

    def touched(self, block):
        resident = self.resident[self.home[block]]
        del resident[block]
        resident[block] = None


def step(ref: Reference, ext: ExtentHomes, op: tuple) -> None:
    name = op[0]
    if name == "homed_run":  # the first stretch of the range homed nowhere (only new blocks are homed)
        _, chain, (a, b), home = op
        while a < b and (chain, a) in ref.home:
            a += 1
        stop = a
        while stop < b and (chain, stop) not in ref.home:
            stop += 1
        for p in range(a, stop):
            ref.homed((chain, p), home)
        ext.homed_run(chain, a, stop, home)
    elif name == "touched_run":
        _, chain, (a, b) = op
        for p in range(a, b):
            if (chain, p) in ref.home:
                ref.touched((chain, p))
        ext.touched_run(chain, a, b)
    elif name == "forget":
        _, chain, p = op
        if (chain, p) not in ref.home:
            return
        home = ref.home.pop((chain, p))
        del ref.resident[home][(chain, p)]
        assert ext.forget(chain, p) == home
    elif name == "move":
        _, chain, p, target = op
        if (chain, p) not in ref.home:
            return
        del ref.resident[ref.home[(chain, p)]][(chain, p)]
        ref.homed((chain, p), target)
        ext.move(chain, p, target)
    elif name == "move_batch":  # DomainPool.reclaim: the batch's most recent block first
        _, source, k, target = op
        if source == target:
            return
        batch = list(ref.resident[source])[:k]
        while batch:
            block = batch.pop()
            del ref.resident[source][block]
            ref.homed(block, target)
            ext.move(block[0], block[1], target)
    elif name in ("forget_run", "move_run"):  # the first stretch of the range that is all homed
        _, chain, (a, b) = op[:3]
        while a < b and (chain, a) not in ref.home:
            a += 1
        stop = a
        while stop < b and (chain, stop) in ref.home:
            stop += 1
        if name == "forget_run":
            lost = [(p, ref.home.pop((chain, p))) for p in range(a, stop)]
            for p, home in lost:
                del ref.resident[home][(chain, p)]
            got = ext.forget_run(chain, a, stop)
            assert [(p, h) for s, e, h in got for p in range(s, e)] == lost
        else:
            step_, target = op[3], op[4]
            order = list(range(a, stop)) if step_ > 0 else list(range(stop - 1, a - 1, -1))
            for p in order:
                del ref.resident[ref.home[(chain, p)]][(chain, p)]
                ref.homed((chain, p), target)
            if order:
                ext.move_run(chain, order[0], len(order), step_, target)
    elif name == "homed_in":
        _, chain, (a, b), home = op
        want = [p for p in range(a, b) if ref.home.get((chain, p)) == home]
        got = ext.homed_in(chain, a, b, home)
        assert [p for s, e in got for p in range(s, e)] == want
        assert all(x[1] < y[0] for x, y in zip(got, got[1:]))  # joined where they touch
    for home in HOMES:
        assert ext.order(home) == list(ref.resident[home]), home
    for chain in CHAINS:
        for p in range(LENGTH):
            if (chain, p) in ref.home:
                assert ext.home(chain, p) == ref.home[(chain, p)]
            else:
                try:
                    ext.home(chain, p)
                    raise AssertionError("homed nowhere, yet found")
                except KeyError:
                    pass
    for chain in CHAINS:  # the map by position: disjoint, sorted, each extent in it once
        lows, exts = ext._chains.get(chain, ([], []))
        assert lows == sorted(lows) == [e.low for e in exts]
        assert all(x.low + x.count <= y.low for x, y in zip(exts, exts[1:]))
    for home in HOMES:  # normal form: no two neighbours in an order spell one extent
        order = ext.extents(home)
        for x, y in zip(order, order[1:]):
            both = list(x.positions()) + list(y.positions())
            steps = {q - p for p, q in zip(both, both[1:])}
            assert not (x.chain == y.chain and len(steps) == 1 and steps <= {1, -1}), (x, y)


@settings(max_examples=400, deadline=None)
@given(st.lists(op_st, max_size=40))
def test_extent_homes_equal_per_block_homes(ops):
    ref, ext = Reference(), ExtentHomes()
    for op in ops:
        step(ref, ext, op)


def test_a_batch_moved_arrives_reversed_as_one_extent():
    ref, ext = Reference(), ExtentHomes()
    step(ref, ext, ("homed_run", "a", (0, 10), "h0"))
    step(ref, ext, ("move_batch", "h0", 6, "h1"))
    assert [(e.first, e.count, e.step) for e in ext.extents("h1")] == [(5, 6, -1)]
    assert [(e.first, e.count, e.step) for e in ext.extents("h0")] == [(6, 4, 1)]
    step(ref, ext, ("touched_run", "a", (2, 8)))  # a hit: forwards again, per home
    assert [(e.first, e.count, e.step) for e in ext.extents("h1")] == [(1, 2, -1), (2, 4, 1)]
    assert [(e.first, e.count, e.step) for e in ext.extents("h0")] == [(8, 2, 1), (6, 2, 1)]
    assert ext.homes("a", 0, 10) == [(0, 6, "h1"), (6, 10, "h0")]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("file"), _chain, _range, _home),
    st.tuples(st.just("read"), _chain, _range),
    st.tuples(st.just("release"), _chain),
    st.tuples(st.just("release"), _chain),
    st.tuples(st.just("move_batch"), _home, st.integers(1, 8), _home),
    st.tuples(st.just("touched_run"), _chain, _range),
    st.tuples(st.just("unheld"), _home, st.integers(-1, 9)),
    st.tuples(st.just("unheld"), _home, st.integers(-1, 9)),
), max_size=40))
def test_unheld_equals_the_per_block_search(ops):
    """``unheld(home, count, store)`` is DomainPool._unheld: the home's blocks in its order that the
    store holds by neither reader nor pin, the first ``count`` of them, with the store's holds
    changed by filing, reads and releases, and homes by moves and hits."""
    _replay_unheld(ops)


@pytest.mark.parametrize("seed", range(6))
def test_unheld_equals_the_per_block_search_seeded(seed):
    rng = random.Random(seed)
    ops = []
    for _ in range(300):
        chain, a = rng.choice(CHAINS), rng.randrange(LENGTH)
        span = (a, rng.randrange(a, LENGTH + 1))
        ops.append(rng.choice([("file", chain, span, rng.choice(HOMES)), ("read", chain, span),
                               ("release", chain), ("release", chain),
                               ("move_batch", rng.choice(HOMES), rng.randrange(1, 9), rng.choice(HOMES)),
                               ("touched_run", chain, span), ("unheld", rng.choice(HOMES), rng.randrange(-1, 10)),
                               ("forget_unheld", chain)]))
    _replay_unheld(ops)


def _replay_unheld(ops):
    from kvsim.kv.extents import ExtentStore
    from kvsim.kv.store import BlockStore

    ref, ext = Reference(), ExtentHomes()
    ref_store, ext_store = BlockStore("s", 1000.0, 1.0), ExtentStore("s", 1000)
    for op in ops:
        if op[0] == "file":  # a prompt filed where computed: stored, read, homed
            _, chain, (a, b), home = op
            new = [p for p in range(a, b) if (chain, p) not in ref.home]
            if not new:
                continue
            a, b = new[0], new[0]
            while b < LENGTH and (chain, b) not in ref.home and b < op[2][1]:
                b += 1
            ref_store.insert_run([(chain, p) for p in range(a, b)], read=True, touch=False)
            ext_store.insert_run(chain, a, b, read=True, touch=False)
            step(ref, ext, ("homed_run", chain, (a, b), home))
        elif op[0] == "read":
            _, chain, (a, b) = op
            ref_store.read_run([(chain, p) for p in range(a, b)])
            ext_store.read_run(chain, a, b)
            step(ref, ext, ("touched_run", chain, (a, b)))
        elif op[0] == "release":  # a reader off every block of the chain that has one, stretch by stretch
            held = sorted(p for c, p in ref_store._readers if c == op[1])
            while held:
                end = held[0] + 1
                while end in held:
                    end += 1
                ref_store.drop_reader_each([(op[1], p) for p in range(held[0], end)])
                ext_store.drop_reader_each(op[1], held[0], end)
                held = [p for p in held if p >= end]
        elif op[0] == "forget_unheld":  # an eviction: the store's victim leaves its home too
            victim = ref_store.evict_one()
            got = ext_store.evict_one()
            assert got == victim
            if victim is not None:
                step(ref, ext, ("forget", victim[0], victim[1]))
        elif op[0] == "unheld":
            _, home, count = op
            want = ref_store.unheld(ref.resident[home], count)
            got = [(c, first + k * s) for c, first, n, s in ext.unheld(home, count, ext_store) for k in range(n)]
            assert got == want
        else:
            step(ref, ext, op)
