"""How well a router placed the requests: token hit rate against the infinite-cache bound of the
same request stream, and how evenly the instances were loaded.

The bound is what a cache that keeps every block it has ever seen (no eviction, no capacity
limit, visible to every instance at once) would hit on the same requests in the same order. It
is computed in closed form from the workload's block hashes: a prompt's block counts as a hit
when some earlier request already held it, and the hits of one prompt are its leading run of
such blocks (a prefix cache cannot use block k without blocks 0..k-1). The rules of kvsim's
caches apply, so that the bound is one a router could actually reach: only whole blocks are
cached, and at least one prompt token is always computed (the last prompt block is never a hit,
as in :class:`~kvsim.serving.cache.prefix_loader.PrefixLoader`). A request "holds" its prompt's
blocks, or with ``sequence_hashes`` its prompt's and output's (what kvsim files after decode).

Units: tokens and fractions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kvsim.metrics.records import RequestRecords
from kvsim.workload.reuse import prompt_segments

__all__ = ["infinite_cache_hit_blocks", "cacheable_blocks", "load_ratios", "routing_summary"]


def cacheable_blocks(prompt_tokens: np.ndarray, block_tokens: int) -> np.ndarray:
    """Leading blocks of each prompt a prefix cache may serve: whole blocks, and never the one
    holding the last prompt token (at least one token is computed to produce the first output)."""
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    return np.maximum(np.minimum(prompt // block_tokens, (prompt - 1) // block_tokens), 0)


def infinite_cache_hit_blocks(lookups: Sequence[Any], holds: Sequence[Any] | None = None,
                              block_tokens: int | None = None, documents: bool = False) -> np.ndarray:
    """Per request, the leading blocks of its prompt already held by an earlier request.

    Parameters
    ----------
    lookups : sequence of int arrays
        Each request's prompt block ids (prefix-chained), in arrival order; ``None`` or empty for
        a request without hashes.
    holds : sequence of int arrays, optional
        The blocks each request leaves in the cache (default: its prompt's, ``lookups``).
    block_tokens : int, optional
        The ids' block size. Given, prompts made of document chains (``shared_documents``) are
        counted per segment of a chain (:func:`_hits_by_segments`) instead of per block.
    documents : bool
        Every prompt is a ``shared_documents`` one: a prompt that starts with no document chain
        (its document is shorter than a block) is a chain of its own.

    Returns
    -------
    numpy.ndarray of int64
        One count per request (not capped to the cacheable blocks; see :func:`cacheable_blocks`).
    """
    n = len(lookups)
    holds = lookups if holds is None else holds
    if len(holds) != n:
        raise ValueError(f"holds has {len(holds)} entries for {n} requests")
    if block_tokens is not None:
        by_segments = _hits_by_segments(lookups, holds, block_tokens, documents)
        if by_segments is not None:
            return by_segments

    def flat(arrays: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        # a request without hashes adds nothing to the values: no empty array made for it (a
        # workload without hashes has only those, tens of thousands of them)
        parts, lengths = [], [0] * n
        for index, array in enumerate(arrays):
            if array is not None:
                part = np.asarray(array, dtype=np.int64).ravel()
                parts.append(part)
                lengths[index] = part.size
        values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return values, np.array(lengths, dtype=np.int64)

    held, held_len = flat(holds)
    asked, asked_len = flat(lookups)
    out = np.zeros(n, dtype=np.int64)
    if asked.size == 0:
        return out
    owner = np.repeat(np.arange(n, dtype=np.int64), asked_len)
    if held.size:
        # the first request to hold each distinct block (np.unique's first index, over arrival order)
        unique, first = np.unique(held, return_index=True)
        first_request = np.repeat(np.arange(n, dtype=np.int64), held_len)[first]
        where = np.minimum(np.searchsorted(unique, asked), unique.size - 1)
        seen = (unique[where] == asked) & (first_request[where] < owner)
    else:
        seen = np.zeros(asked.size, dtype=bool)
    # leading run of seen blocks per request: the first unseen position in each segment
    starts = np.concatenate(([0], np.cumsum(asked_len)[:-1]))
    positions = np.arange(asked.size, dtype=np.int64)
    unseen_at = np.where(seen, asked.size, positions)
    nonempty = asked_len > 0
    first_unseen = np.minimum.reduceat(unseen_at, starts[nonempty])
    ends = starts[nonempty] + asked_len[nonempty]
    out[nonempty] = np.minimum(first_unseen, ends) - starts[nonempty]
    return out


def _hits_by_segments(lookups: Sequence[Any], holds: Sequence[Any], block_tokens: int,
                      documents: bool = False) -> np.ndarray | None:
    """:func:`infinite_cache_hit_blocks` where every prompt is segments of chains from their start
    (:func:`kvsim.workload.reuse.prompt_segments`: a document's chain and one of its own) and
    holds what it looks up: one address per block, so an earlier request holds blocks ``0 ..
    e - 1`` of a chain when one of its segments of that chain ends at ``e``, and a prompt's
    leading run of held blocks is read off per segment. None where that does not apply (ids
    from no document chain, unless ``documents`` says the prompt is then a chain of its own;
    holds other than the prompt's): the caller counts per block."""
    counts = np.zeros(len(lookups), dtype=np.int64)
    held_to: dict[Any, int] = {}
    for r, (ids, kept) in enumerate(zip(lookups, holds)):
        if ids is None or not len(ids):
            if kept is not None and len(kept):
                return None
            continue
        if kept is not ids:
            return None
        segments = prompt_segments(ids, block_tokens)
        if segments is None:
            if not documents:
                return None
            segments = [(int(ids[0]), ids, 0, len(ids))]  # (no other prompt has its first block)
        hits = 0
        for key, _, start, end in segments:
            if start != 0:
                return None
            reach = min(held_to.get(key, 0), end)
            hits += reach
            if reach < end:
                break
        counts[r] = hits
        for key, _, _, end in segments:
            if held_to.get(key, 0) < end:
                held_to[key] = end
    return counts


def load_ratios(counts: np.ndarray) -> dict[str, float]:
    """``max_over_mean`` and ``min_over_mean`` of per-instance counts (1.0 when all are zero)."""
    counts = np.asarray(counts, dtype=float)
    mean = counts.mean() if counts.size else 0.0
    if not mean > 0:
        return {"max_over_mean": 1.0, "min_over_mean": 1.0}
    return {"max_over_mean": float(counts.max() / mean), "min_over_mean": float(counts.min() / mean)}


def routing_summary(records: RequestRecords, window_start_s: float, lookups: Sequence[Any],
                    holds: Sequence[Any] | None, block_tokens: int, instance_column: str,
                    instances: Sequence[int], token_hit_rate: float, documents: bool = False) -> dict[str, Any]:
    """Routing metrics of one system run.

    Parameters
    ----------
    records : RequestRecords
    window_start_s : float
        Requests arriving from here on are measured (the bound still counts the blocks the
        earlier ones left).
    lookups, holds : sequences of int arrays
        Every submitted request's prompt block ids, and what it leaves cached (see
        :func:`infinite_cache_hit_blocks`), indexed by request id.
    block_tokens : int
        Tokens per cache block.
    instance_column : str
        The records column naming where each request entered (``instance``, or
        ``prefill_instance`` when disaggregated).
    instances : sequence of int
        The indices of the instances the router chose among (those that got nothing count too;
        an instance that took requests after a role switch is added).
    token_hit_rate : float
        The run's achieved token hit rate (``cache.hit_rate.total``; 0 for a system without a KV
        cache), for the gap.
    documents : bool
        The prompts are ``shared_documents`` ones (see :func:`infinite_cache_hit_blocks`).

    Returns
    -------
    dict
        ``token_hit_rate`` (achieved), ``token_hit_rate_infinite_cache`` (the bound) and
        ``token_hit_rate_gap`` (bound minus achieved), as fractions of prompt tokens;
        ``requests_per_instance`` and ``prompt_tokens_per_instance`` ``max_over_mean`` /
        ``min_over_mean`` over the instances; ``instances``, their number.
    """
    n = records.n
    measured = records.column("arrival_s") >= window_start_s
    prompt = records.column("input_tokens")
    hit_blocks = np.minimum(infinite_cache_hit_blocks(list(lookups)[:n], None if holds is None else list(holds)[:n],
                                                      block_tokens, documents),
                            cacheable_blocks(prompt, block_tokens))
    inputs = float(prompt[measured].sum())
    bound = float((hit_blocks[measured] * block_tokens).sum()) / inputs if inputs else 0.0
    where = records.column(instance_column)[measured]
    routed = where >= 0
    size = max(int(where.max(initial=-1)), max(instances, default=-1)) + 1
    per_requests = np.bincount(where[routed], minlength=size)
    per_tokens = np.bincount(where[routed], weights=prompt[measured][routed].astype(float), minlength=size)
    candidates = np.zeros(size, dtype=bool)
    candidates[list(instances)] = True
    candidates |= per_requests > 0
    per_requests, per_tokens = per_requests[candidates], per_tokens[candidates]
    return {
        "token_hit_rate": token_hit_rate,
        "token_hit_rate_infinite_cache": bound,
        "token_hit_rate_gap": bound - token_hit_rate,
        "requests_per_instance": load_ratios(per_requests),
        "prompt_tokens_per_instance": load_ratios(per_tokens),
        "instances": int(candidates.sum()),
    }
