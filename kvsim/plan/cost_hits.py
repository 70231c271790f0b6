"""What a run's caches find, before it runs: the hit and miss arithmetic of :mod:`kvsim.plan.cost_model`.

A workload's shared contexts (its documents, or with LoRA adapters that do not share KV its
(document, adapter) pairs) are drawn by popularity; caches start empty (a prewarmed system's lower
tiers full). Over a run of ``n`` requests a request misses when it is its context's first, or when
the working set has outgrown the caches and its context is not one of those they hold (the most
popular first: the LRU upper bound).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from kvsim.workload.reuse import FixedHit, SharedDocuments

if TYPE_CHECKING:
    from kvsim.plan.cost_model import WorkloadShape

__all__ = ["zipf_popularity", "workload_reuse", "hit_fraction", "distinct_contexts", "missed_requests", "cached_contexts",
           "run_hit_fraction", "refused_share"]


def zipf_popularity(documents: int, zipf_s: float) -> np.ndarray:
    """Probabilities of ``documents`` ranked documents, ``P(d) ∝ 1 / (d + 1)**zipf_s``."""
    weights = 1.0 / np.arange(1, documents + 1, dtype=float) ** zipf_s
    return weights / weights.sum()


def workload_reuse(workload) -> tuple[float, float, np.ndarray | None]:
    """``(shared_fraction, document_tokens, popularity)`` of ``workload``'s prefix structure."""
    prefix = workload.prefix
    if isinstance(prefix, SharedDocuments):
        doc = prefix.document_tokens.mean
        return doc / (doc + prefix.suffix_tokens.mean), doc, zipf_popularity(prefix.documents, prefix.zipf_s)
    if isinstance(prefix, FixedHit):
        return float(prefix.hit_ratio), 0.0, None
    return 0.0, 0.0, None


def hit_fraction(shape: WorkloadShape, cached_tokens: float) -> float:
    """Share of prompt tokens found in caches holding ``cached_tokens`` tokens of shared context
    (the most popular documents first: an upper bound for LRU)."""
    if shape.shared_fraction <= 0.0:
        return 0.0
    if shape.popularity is None:
        return shape.shared_fraction
    held = int(min(len(shape.popularity), cached_tokens / max(shape.document_tokens, 1.0)))
    return shape.shared_fraction * float(shape.popularity[:held].sum())


def distinct_contexts(popularity: np.ndarray, draws: float) -> float:
    """Expected distinct contexts among ``draws`` requests drawn by ``popularity``."""
    p = np.minimum(popularity, 1.0 - 1e-12)
    return float(-np.expm1(draws * np.log1p(-p)).sum())


def missed_requests(popularity: np.ndarray, held: float, draws: float, fills: dict | None = None) -> float:
    """Expected requests of ``draws`` whose context is not in a cache that starts empty and holds
    ``held`` contexts: each context's first request misses, and once the cache is full (the
    working set beyond its capacity) so does every request outside the ``held`` most popular
    contexts (the LRU upper bound of :func:`hit_fraction`). ``fills`` memoises, per number of
    contexts held, the request at which the cache fills (it does not depend on ``draws``)."""
    if draws <= 0.0:
        return 0.0
    k = int(min(len(popularity), max(held, 0.0)))
    seen = distinct_contexts(popularity, draws)
    if seen <= k:  # the cache never fills: only first sights miss
        return seen
    fill = None if fills is None else fills.get(k)
    if fill is None:
        # the request at which the k-th distinct context arrives (bisection on its logarithm, to
        # 1e-6 of it, up to 1e12 requests)
        lo, hi = 0.0, math.log1p(1e12)
        for _ in range(26):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if distinct_contexts(popularity, math.expm1(mid)) < k else (lo, mid)
        fill = math.expm1(hi)
        if fills is not None:
            fills[k] = fill
    return k + max(draws - fill, 0.0) * (1.0 - float(popularity[:k].sum()))


def run_hit_fraction(shape: WorkloadShape, cached_tokens: float, draws: float,
                     popularity: np.ndarray | None = None, fills: dict | None = None) -> float:
    """Share of prompt tokens found in cache over a run of ``draws`` requests into caches that
    start empty and hold ``cached_tokens`` tokens of shared context; ``popularity`` the contexts'
    (default: the documents'; per adapter when adapters do not share KV)."""
    p = shape.popularity if popularity is None else popularity
    if shape.shared_fraction <= 0.0 or p is None:
        return hit_fraction(shape, cached_tokens)
    held = cached_tokens / max(shape.document_tokens, 1.0)
    return shape.shared_fraction * max(0.0, 1.0 - missed_requests(p, held, draws, fills) / max(draws, 1.0))


def cached_contexts(shape: WorkloadShape, system) -> np.ndarray | None:
    """The popularity of the distinct cached contexts: the documents', or (document, adapter)
    pairs when each adapter caches its own KV (``lora.kv_sharing: none``)."""
    if shape.popularity is None or shape.adapters is None:
        return shape.popularity
    sharing = system.lora.kv_sharing if system.lora is not None else "none"
    if sharing != "none":
        return shape.popularity
    return np.sort(np.outer(shape.popularity, shape.adapters).ravel())[::-1]


def refused_share(shape: WorkloadShape, pool, requests: float, duration: float, latency: float,
                  instances: int) -> float:
    """1 if value reuse's copies in flight overflow an instance's KV, else 0: the KV the requests
    in an instance hold -- one copy per (document, adapter) among them, and each one's own
    suffix and output -- against the instance's KV.

    While they overflow, the request at the head of the queue is refused at a steady share of
    the engine's steps (it may try only when the step's token budget is not taken by prompt
    chunks: a third of the steps in both runs measured, 127 of 352 and 102 of 304) and scans its
    keys again each time; that share is in the fitted rate, so the count is the iterations.
    """
    if shape.popularity is None or shape.adapters is None:
        return 0.0
    if shape.requests is None:
        in_flight = shape.clients * latency / max(latency + shape.think_s, 1e-9) / max(instances, 1)
    else:
        in_flight = requests / duration * latency / max(instances, 1)
    pairs = np.outer(shape.popularity, shape.adapters).ravel()
    own = shape.input_tokens * (1.0 - shape.shared_fraction) + shape.output_tokens
    demand = distinct_contexts(pairs, in_flight) * shape.document_tokens + in_flight * own
    return 1.0 if demand > pool.kv_tokens_per_instance else 0.0
