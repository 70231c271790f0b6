"""Concrete open-loop requests, columnar."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RequestArrays"]


@dataclass(frozen=True)
class RequestArrays:
    """Open-loop requests, columnar: arrival times (s, ascending) and token counts.

    ``hash_ids`` (optional) holds one ``int64`` array per request: the prompt's prefix-chained block
    ids, ``ceil(input_tokens / block_tokens)`` of them (see :mod:`kvsim.workload.prefix`); equal ids
    mean equal blocks *and* equal prefixes. ``block_tokens`` is the block size those ids were made
    with; it is set exactly when ``hash_ids`` is. ``hash_ids is None`` means the workload has no
    prefix structure: every prompt is unique and shares no block with any other.

    ``adapter`` (optional, int64) names each request's LoRA adapter (-1: the base model) and
    ``shared_tokens`` (int64) how many of its leading prompt tokens are shared context (a shared
    document or prefix): see :mod:`kvsim.workload.adapters`. They go together.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list[np.ndarray] | None = None
    block_tokens: int | None = None
    adapter: np.ndarray | None = None
    shared_tokens: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if len(self.input_tokens) != n or len(self.output_tokens) != n:
            raise ValueError(f"column lengths differ: {n} arrivals, {len(self.input_tokens)} inputs, "
                             f"{len(self.output_tokens)} outputs")
        if (self.hash_ids is None) != (self.block_tokens is None):
            raise ValueError("hash_ids and block_tokens go together: give both or neither")
        if self.hash_ids is not None and len(self.hash_ids) != n:
            raise ValueError(f"hash_ids has {len(self.hash_ids)} entries for {n} requests")
        if (self.adapter is None) != (self.shared_tokens is None):
            raise ValueError("adapter and shared_tokens go together: give both or neither")
        if self.adapter is not None and self.shared_tokens is not None and (
                len(self.adapter) != n or len(self.shared_tokens) != n):
            raise ValueError(f"adapter / shared_tokens have {len(self.adapter)} / {len(self.shared_tokens)} "
                             f"entries for {n} requests")
        if self.block_tokens is not None and self.block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1 (got {self.block_tokens})")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def select(self, which: np.ndarray | slice) -> RequestArrays:
        """The requests picked by a boolean mask, an index array or a slice, in that order."""
        if isinstance(which, slice):
            index = np.arange(len(self))[which]
        else:
            which = np.asarray(which)
            index = np.flatnonzero(which) if which.dtype == bool else which.astype(np.int64)
        hashes = None if self.hash_ids is None else [self.hash_ids[i] for i in index.tolist()]
        adapter = None if self.adapter is None else self.adapter[index]
        shared = None if self.shared_tokens is None else self.shared_tokens[index]
        return RequestArrays(self.arrival_s[index], self.input_tokens[index], self.output_tokens[index],
                             hashes, self.block_tokens, adapter, shared)
