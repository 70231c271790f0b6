"""A domain's homes as extents (kvsim/serving/cache/extent_homes.py) are DomainPool's per-block
``home`` and ``resident`` bookkeeping: on random sequences of homing runs, hits refreshing homes,
blocks forgotten, single moves and reclaim's batches (moved most recent first, so a stretch
arrives reversed: extents that run backwards), every member's order and every block's home are
the per-block ones after every step."""

from __future__ import annotations

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
