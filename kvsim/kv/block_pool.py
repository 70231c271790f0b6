"""A paged KV block pool in one instance's device memory.

Sequences hold whole blocks of ``block_size_tokens`` tokens, as paged-attention engines do.
The engine asks the pool to grow a sequence's allocation to cover a token count and releases
it when the sequence finishes or is preempted. The pool only counts blocks (one integer per
sequence, kept on the sequence as ``kv_blocks``), never individual block objects: one call per
sequence per iteration at most, never per block.

This is the seam where later work adds prefix-addressed blocks, host/NVMe/remote tiers and
sharing; the engine only relies on :meth:`grow`, :meth:`release` and the counters.

A kernel of the compiled backend (:mod:`kvsim.backend`): ``block_pool.pxd`` types its counts.
"""

from __future__ import annotations

import math
from typing import Callable, Protocol

__all__ = ["BlockPool", "HoldsBlocks", "PoolObserver"]


class PoolObserver(Protocol):
    """An engine fast-forwarding through decode steps it has not yet applied to the pool."""

    def settle(self) -> None:
        """Apply the steps that have started by now (the pool's counts become exact)."""

    def interrupt(self) -> None:
        """Settle, and stop fast-forwarding: the pool is about to change from outside."""


class HoldsBlocks(Protocol):
    kv_blocks: int       # pages the holder owns
    shared_tokens: int   # leading tokens it reads from shared cached pages it does not own


class BlockPool:
    """Fixed-capacity pool of KV blocks.

    Parameters
    ----------
    num_blocks : int
        Blocks that fit in the instance's KV budget.
    block_size_tokens : int
        Tokens per block.
    reclaim : callable, optional
        Called with a page shortfall: may free cached pages via :meth:`give` / :meth:`take`.
    resident : callable, optional
        ``resident(tokens)``: the KV tokens (averaged over layers) a sequence of ``tokens`` own
        tokens keeps, when sliding-window layers drop what left their window; None keeps all.
    """

    def __init__(self, num_blocks: int, block_size_tokens: int, reclaim: Callable[[int], None] | None = None,
                 resident: Callable[[int], float] | None = None):
        if num_blocks < 1 or block_size_tokens < 1:
            raise ValueError("a block pool needs at least one block of at least one token")
        self.num_blocks = num_blocks
        self.block_size_tokens = block_size_tokens
        self._free = num_blocks
        self.reclaim = reclaim  # called with a page shortfall: may free cached pages via give/take
        self.resident = resident
        # set while the instance's engine advances decode steps in one event (see
        # kvsim.serving.decode_run): reads settle those steps first, changes end the run
        self.observer: PoolObserver | None = None

    @property
    def free_blocks(self) -> int:
        """Blocks not held by any sequence or cache."""
        if self.observer is not None:
            self.observer.settle()
        return self._free

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self.free_blocks

    @property
    def utilization(self) -> float:
        """Fraction of blocks in use, 0..1."""
        if self.observer is not None:
            self.observer.settle()
        return (self.num_blocks - self._free) / self.num_blocks

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens."""
        return -(-tokens // self.block_size_tokens)

    def grow(self, holder: HoldsBlocks, tokens: int) -> bool:
        """Make ``holder`` own enough blocks for its first ``tokens`` tokens (beyond the
        ``shared_tokens`` it reads from cached pages); False (and no change) if the pool is full."""
        if self.observer is not None:
            self.observer.interrupt()
        own = tokens - holder.shared_tokens
        if self.resident is not None:
            own = math.ceil(self.resident(own))
        extra = -(-own // self.block_size_tokens) - holder.kv_blocks
        if extra <= 0:
            return True
        if extra > self._free and self.reclaim is not None:
            self.reclaim(extra - self._free)
        if extra > self._free:
            return False
        self._free -= extra
        holder.kv_blocks += extra
        return True

    def release(self, holder: HoldsBlocks) -> None:
        """Return all of ``holder``'s blocks to the pool."""
        if self.observer is not None:
            self.observer.interrupt()
        self._free += holder.kv_blocks
        holder.kv_blocks = 0

    def take(self, pages: int) -> bool:
        """Reserve ``pages`` for a cache outside any sequence (False, no change, if short)."""
        if self.observer is not None:
            self.observer.interrupt()
        if pages > self._free and self.reclaim is not None:
            self.reclaim(pages - self._free)
        if pages > self._free:
            return False
        self._free -= pages
        return True

    def give(self, pages: int) -> None:
        """Return ``pages`` reserved with :meth:`take`."""
        if self.observer is not None:
            self.observer.interrupt()
        self._free += pages
        if self._free > self.num_blocks:
            raise RuntimeError("block pool released more pages than it holds")
