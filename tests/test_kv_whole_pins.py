"""Pins kept whole (``BlockStore(..., whole_pins=True)``, an instance's HBM store) are the per-block
pins they stand for: a run pinned while every block of it is held already (a sequence writing
down the blocks it reads) is kept as one entry until one of its blocks is let go of otherwise,
and is then pinned block by block. On random access sequences a store keeping pins whole and one
pinning block by block, given the same operations, return the same values and errors and keep
the same contents, recency order, counters, readers, stamps and valid heap entries, the same held
blocks, and -- counting the whole runs in -- the same pins and holds per block; ``pins()`` and
``pinned_blocks`` agree at every step. Both backends' stores are checked."""

from __future__ import annotations

import os
import random
import sys
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim import backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_kv_runs import KINDS, UNIVERSE, state  # noqa: E402

BACKENDS = ["python"] + ([] if os.environ.get("KVSIM_NO_COMPILE") else ["compiled"])


def eager_holds(s) -> tuple[dict, dict]:
    """The store's pins and holds per block, with its whole runs counted in block by block."""
    pins, held = Counter(s._pins), Counter(s._held)
    for key, (times, _) in (s._whole_pins or {}).items():
        for block in key:
            pins[block] += times
            held[block] += times
    return dict(pins), dict(held)


def same(eager, whole) -> None:
    order, counters, holds, heap = state(eager)
    w_order, w_counters, w_holds, w_heap = state(whole)
    assert (order, counters, heap) == (w_order, w_counters, w_heap)
    assert holds[1] == w_holds[1] and holds[3] == w_holds[3]  # readers (in order) and reader references
    assert eager_holds(eager) == eager_holds(whole)
    assert set(eager._held) == set(whole._held)  # the same blocks held: every decision reads only this
    assert eager.pinned_blocks == whole.pinned_blocks and eager.evictable_blocks == whole.evictable_blocks
    assert [eager.pins(b) for b in range(UNIVERSE)] == [whole.pins(b) for b in range(UNIVERSE)]
    assert [eager.is_evictable(b) for b in range(UNIVERSE)] == [whole.is_evictable(b) for b in range(UNIVERSE)]


def _random_ops(rng: random.Random, n: int) -> list:
    ops = []
    for _ in range(n):
        blocks = rng.sample(range(UNIVERSE), rng.randint(0, 7))
        if rng.random() < 0.2:
            blocks = blocks + blocks[:2]  # a block named twice
        ops.append(rng.choice([
            ("insert_run", blocks, True), ("insert_run", blocks, True), ("insert_run", blocks, False),
            ("read_run", blocks), ("pin_each", blocks), ("pin_each", blocks), ("pin_read", rng.random()),
            ("pin_read", rng.random()), ("unpin_pinned", rng.random()), ("unpin_pinned", rng.random()),
            ("unpin_some", rng.randint(0, 4)), ("release", rng.randint(0, 4)), ("drop_reader", rng.randrange(UNIVERSE)),
            ("unpin", rng.randrange(UNIVERSE)), ("pin", rng.randrange(UNIVERSE)), ("evict_run", rng.randint(0, 5)),
            ("lookup_pin_run", blocks), ("remove", rng.randrange(UNIVERSE)), ("lookup", rng.randrange(UNIVERSE)),
        ]))
    return ops


def concrete(eager, op: tuple, pinned: list) -> tuple:
    """The operation with its blocks chosen from the eager store's state (the same for both)."""
    name = op[0]
    if name == "pin_read":  # a run the store's readers hold: what a write-down pins
        read = sorted(eager._readers)
        return ("pin_each", read[: int(op[1] * (len(read) + 1))])
    if name == "unpin_pinned":  # a run pinned before, let go of as it was pinned (a copy landing)
        return ("unpin_each", pinned.pop(int(op[1] * len(pinned)))) if pinned else ("lookup", 0)
    if name == "unpin_some":
        return ("unpin_each", sorted(eager_holds(eager)[0])[: op[1]])
    if name == "release":
        return ("drop_reader_each", sorted(eager._readers)[: op[1]])
    return op


def play(s, op: tuple):
    name = op[0]
    if name == "insert_run":
        return tuple(s.insert_run(op[1], read=op[2], touch=True))
    if name in ("evict_run", "lookup", "remove", "drop_reader", "unpin", "pin"):
        return getattr(s, name)(op[1])
    return getattr(s, name)(list(op[1]))


def outcome(s, op):
    try:
        return "ok", play(s, op)
    except (KeyError, ValueError) as exc:
        return type(exc).__name__, str(exc).replace(s.name, "")


def check(name: str, kind: str, capacity: int, heap_after: int, ops: list) -> None:
    kernels = backend.kernels(name)
    with mock.patch.object(kernels.store, "HEAP_AFTER", heap_after):
        eager = kernels.store.BlockStore("eager", capacity, 1.0, kind)
        whole = kernels.store.BlockStore("whole", capacity, 1.0, kind, whole_pins=True)
        pinned: list = []
        for op in ops:
            op = concrete(eager, op, pinned)
            got = outcome(eager, op)
            assert got == outcome(whole, op), op
            if op[0] == "pin_each" and got[0] == "ok" and op[1]:
                pinned.append(list(op[1]))
            same(eager, whole)


@pytest.mark.parametrize("name", BACKENDS)
@pytest.mark.parametrize("seed", range(6))
def test_whole_pins_equal_pins_per_block(name, seed):
    rng = random.Random(seed)
    for _ in range(120):
        check(name, rng.choice(KINDS), rng.randint(0, 9), rng.choice([0, 1, 64]), _random_ops(rng, rng.randint(5, 60)))


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(BACKENDS), kind=st.sampled_from(KINDS), capacity=st.integers(0, 9),
       heap_after=st.sampled_from([0, 64]), seed=st.integers(0, 2**32 - 1))
def test_whole_pins_equal_pins_per_block_drawn(name, kind, capacity, heap_after, seed):
    rng = random.Random(seed)
    check(name, kind, capacity, heap_after, _random_ops(rng, rng.randint(5, 60)))


@pytest.mark.parametrize("name", BACKENDS)
def test_a_run_read_and_pinned_is_kept_whole_until_its_reader_leaves(name):
    s = backend.kernels(name).store.BlockStore("hbm", 8.0, 1.0, whole_pins=True)
    s.insert_run([1, 2, 3], read=True)
    s.pin_each([1, 2, 3])
    s.pin_each([1, 2, 3])  # (DRAM and NVMe copies of the same run)
    assert not s._pins and s.pins(2) == 2 and s.pinned_blocks == 3 and s.evictable_blocks == 0
    s.unpin_each([1, 2, 3])  # one copy landed: let go of as one
    assert not s._pins and s.pins(2) == 1
    s.drop_reader_each([1, 2, 3])  # the reader leaves first: the pins are taken block by block
    assert s._pins == {1: 1, 2: 1, 3: 1} and s.evictable_blocks == 0 and not s._whole_pins
    s.unpin_each([1, 2, 3])
    assert s.evictable_blocks == 3 and s.pinned_blocks == 0
    s.pin_each([1, 2])  # not held: pinned block by block at once
    assert s._pins == {1: 1, 2: 1}
