"""The router's side of the extents (issue 23, item 1): a prompt walked as segments gives each
candidate the reach and credit of the per-block walk, and a delayed view of the extent index
shows what the per-block view shows, after every refresh.

- :func:`~kvsim.serving.prefix_reach.reach_segments` against
  :func:`~kvsim.serving.prefix_reach.reach` on random layouts: stores shared by several
  candidates (an addressing domain's), fractional credits (summed block by block), stretches
  held by nobody, empty segments, a cut short of the prompt;
- :class:`~kvsim.serving.index_view.ExtentIndexView` against
  :class:`~kvsim.serving.index_view.IndexView` under random filings and discards with a clock
  that moves and refreshes at random.
"""

from __future__ import annotations

import random

import pytest

from kvsim.kv import KVIndex
from kvsim.kv.extent_index import ExtentIndex
from kvsim.serving.index_view import ExtentIndexView, IndexView
from kvsim.serving.prefix_reach import CacheLayout, reach, reach_segments


class _Store:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


def _random_prompt(rng: random.Random):
    stores = [_Store(f"s{i}") for i in range(rng.randint(1, 5))]
    candidates = rng.randint(1, 6)
    layout = CacheLayout(hbm=[rng.choice(stores + [None]) for _ in range(candidates)], nodes=[None] * candidates,
                         node_stores={}, remote=[], hbm_credit=rng.choice([1.0, 0.1, 0.7, 1.3, 2.0]),
                         remote_credit=0.5)
    tuples = [()] + [tuple(rng.sample(stores, rng.randint(1, len(stores)))) for _ in range(4)]
    segments, blocks, where = [], [], {}
    for c in range(rng.randint(1, 3)):
        length = rng.randint(0, 30)
        segments.append((f"c{c}", 0, length))
        held = rng.choice(tuples[1:])
        for p in range(length):
            if rng.random() < 0.15:
                held = rng.choice(tuples)
            where[(f"c{c}", p)] = held
            blocks.append((f"c{c}", p))

    def pieces(chain, start, end):
        out: list[list] = []
        for p in range(start, end):
            held = where[(chain, p)]
            if out and out[-1][2] is held and out[-1][1] == p:
                out[-1][1] = p + 1
            else:
                out.append([p, p + 1, held])
        return [tuple(x) for x in out]

    return layout, segments, blocks, where, pieces


@pytest.mark.parametrize("seed", range(40))
def test_a_walk_by_stretches_equals_the_walk_by_blocks(seed):
    rng = random.Random(seed)
    for _ in range(100):
        layout, segments, blocks, where, pieces = _random_prompt(rng)
        n = rng.randint(0, len(blocks) + 2)
        by_block = reach(blocks, n, where.__getitem__, layout)
        assert reach_segments(segments, min(n, len(blocks)), pieces, layout) == by_block


def test_every_candidate_sharing_a_store_owns_its_blocks():
    """A domain's members share one store: each reads it in place, so each is credited with it."""
    domain, other = _Store("domain"), _Store("other")
    layout = CacheLayout(hbm=[domain, domain, other], nodes=[None] * 3, node_stores={}, remote=[],
                         hbm_credit=1.0, remote_credit=0.5)
    where = {("d", p): (domain,) for p in range(8)}
    blocks, credit = reach([("d", p) for p in range(8)], 8, where.__getitem__, layout)
    assert blocks == [8, 8, 0] and credit == [8.0, 8.0, 0.0]
    assert reach_segments([("d", 0, 8)], 8, lambda c, s, e: [(s, e, (domain,))], layout) == (blocks, credit)


@pytest.mark.parametrize("seed", range(30))
def test_a_delayed_view_by_stretches_shows_what_the_per_block_view_shows(seed):
    rng = random.Random(seed)
    for _ in range(20):
        stores = [_Store(f"s{i}") for i in range(3)]
        now = [0.0]
        # B023: called within this iteration, never after it
        clock = lambda: now[0]  # noqa: E731, B023
        blocks_index, extent_index = KVIndex(), ExtentIndex()
        refresh_s = rng.choice([0.01, 0.05, 0.3])
        by_block, by_stretch = IndexView(blocks_index, clock, refresh_s), ExtentIndexView(extent_index, clock, refresh_s)
        for _step in range(60):
            now[0] += rng.choice([0.0, 0.0, 0.004, 0.02, 0.1])
            chain, store = rng.choice("ab"), rng.choice(stores)
            start = rng.randint(0, 15)
            end = start + rng.randint(0, 6)
            op = rng.random()
            if op < 0.5:
                extent_index.add_run(chain, start, end, store)
                for p in range(start, end):
                    blocks_index.add((chain, p), store)
            elif op < 0.8:
                extent_index.discard_run(chain, start, end, store)
                blocks_index.discard_run([(chain, p) for p in range(start, end)], store)
            else:
                by_block.refresh()
                by_stretch.refresh()
                for c in "ab":
                    shown = [(p, held) for s, e, held in by_stretch.pieces(c, 0, 25) for p in range(s, e)]
                    assert shown == [(p, by_block.locations((c, p))) for p in range(25)]
