"""Closed-form costs of collective operations between the cards of one instance.

The alpha-beta (Hockney) model: sending ``n`` bytes over one hop costs ``alpha + n * beta``, with
``alpha`` the hop latency (seconds) and ``beta = 1 / bandwidth`` (seconds per byte). Libraries
pick the algorithm by message size (Thakur, Rabenseifner and Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 2005; NCCL and vLLM's custom all-reduce do the same):

- short messages, recursive doubling: ``ceil(log2 p)`` steps, each sending the whole message:
  ``ceil(log2 p) * (alpha + n * beta)``;
- long messages, ring (reduce-scatter then all-gather): ``2 (p - 1)`` steps of ``n / p`` bytes:
  ``2 (p - 1) * alpha + 2 (p - 1) / p * n * beta``.

The cost of an all-reduce is the cheaper of the two, so a decode step's small activations pay
latency and a long prefill chunk pays bandwidth.
"""

from __future__ import annotations

import math

__all__ = ["allreduce_s", "recursive_doubling_s", "ring_allreduce_s"]


def recursive_doubling_s(nbytes: float, ranks: int, latency_s: float, bandwidth_Bps: float) -> float:
    """All-reduce of ``nbytes`` over ``ranks`` cards by recursive doubling, seconds."""
    if ranks <= 1:
        return 0.0
    return math.ceil(math.log2(ranks)) * (latency_s + nbytes / bandwidth_Bps)


def ring_allreduce_s(nbytes: float, ranks: int, latency_s: float, bandwidth_Bps: float) -> float:
    """All-reduce of ``nbytes`` over ``ranks`` cards by a ring, seconds."""
    if ranks <= 1:
        return 0.0
    steps = 2 * (ranks - 1)
    return steps * latency_s + steps / ranks * nbytes / bandwidth_Bps


def allreduce_s(nbytes: float, ranks: int, latency_s: float, bandwidth_Bps: float) -> float:
    """All-reduce of ``nbytes`` (each card's buffer) over ``ranks`` cards, the cheaper algorithm, seconds.

    Parameters
    ----------
    nbytes : float
        Size of the buffer every card contributes, bytes.
    ranks : int
        Cards taking part.
    latency_s : float
        One hop's latency, seconds.
    bandwidth_Bps : float
        One hop's achieved bandwidth per direction, bytes/s.
    """
    return min(recursive_doubling_s(nbytes, ranks, latency_s, bandwidth_Bps),
               ring_allreduce_s(nbytes, ranks, latency_s, bandwidth_Bps))
