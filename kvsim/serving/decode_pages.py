"""The pages a coalesced decode run's steps allocate, for the pure-Python reference
(:mod:`kvsim.serving.decode_run`; the compiled backend counts them in C, ``_plan_compiled``).
Both forms give the same pages (``tests/test_coalesce.py``)."""

from __future__ import annotations

import numpy as np

__all__: list[str] = []


def _new_pages(firsts: list[int], block: int, steps: int, free: int) -> list[int]:
    """Pages allocated by steps 2..i, for i = 0..m: sequence k needs one at step ``firsts[k]`` and
    every ``block`` steps after; ``m <= steps`` is the last step before they outgrow ``free``."""
    per_step = [0] * (steps + 1)
    for first in firsts:
        for i in range(first, steps + 1, block):
            per_step[i] += 1
    new_blocks = [0] * (steps + 1)
    total = 0
    for i in range(2, steps + 1):
        total += per_step[i]
        if total > free:
            return new_blocks[:i]
        new_blocks[i] = total
    return new_blocks


def _new_pages_array(firsts: list[int], block: int, steps: int, free: int) -> np.ndarray:
    """:func:`_new_pages` with numpy: first needs counted per step, then carried ``block`` steps on."""
    if len(firsts) == 1:
        # one sequence, first needing a page at step f (>= 2): by step i it has taken
        # max(0, floor((i - f) / block) + 1) of them (half the array operations of the general case)
        new_blocks = np.maximum((np.arange(steps + 1) + (block - firsts[0])) // block, 0)
        return new_blocks[:int(np.searchsorted(new_blocks, free, side="right"))]
    first = np.asarray(firsts, dtype=np.int64)
    counts = np.bincount(first[first <= steps], minlength=steps + 1)
    pad = -(steps + 1) % block
    per_step = np.concatenate((counts, np.zeros(pad, dtype=counts.dtype))).reshape(-1, block).cumsum(axis=0).ravel()
    new_blocks = np.cumsum(per_step[:steps + 1])
    over = int(np.searchsorted(new_blocks, free, side="right"))  # first step they outgrow ``free``
    return new_blocks[:over]
