"""Whether one run met a service-level objective, read from its summary.

An objective is a limit on one statistic of one latency (``ttft_s``, ``tpot_s`` or ``e2e_s``:
its ``mean``, ``p50``, ``p90`` or ``p99`` over the requests that arrived in the window, as
:func:`kvsim.metrics.summary.summarize` reports them). A run meets the SLO if it meets every
objective *and* its numbers can be trusted: a run flagged ``unstable`` (its backlog grows
through the window) does not meet any SLO whatever its latencies, since they would keep growing
with a longer window; one flagged ``too_short`` is not taken as meeting it either (the window
could not tell).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Objective", "slo_verdict", "objectives_from_slo", "BLOCKING_FLAGS"]

METRICS = ("ttft_s", "tpot_s", "e2e_s")
STATISTICS = ("mean", "p50", "p90", "p99")
BLOCKING_FLAGS = ("unstable", "too_short", "rejected")  # rejected: requests it could never hold
"""Flags of a run (see :mod:`kvsim.metrics.summary`) under which it does not count as meeting an SLO."""


@dataclass(frozen=True)
class Objective:
    """``statistic`` of ``metric`` must not exceed ``limit_s`` seconds."""

    metric: str
    statistic: str
    limit_s: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown latency {self.metric!r}; known: {', '.join(METRICS)}")
        if self.statistic not in STATISTICS:
            raise ValueError(f"unknown statistic {self.statistic!r}; known: {', '.join(STATISTICS)}")
        if not self.limit_s > 0:
            raise ValueError(f"the limit of {self.metric} {self.statistic} must be > 0 s, got {self.limit_s!r}")

    def label(self) -> str:
        return f"{self.metric.removesuffix('_s')} {self.statistic} <= {_seconds(self.limit_s)}"


def objectives_from_slo(slo: Any) -> list[Objective]:
    """The objectives of a scenario's ``slo:`` (:class:`~kvsim.scenario.schema.SloSpec`: p99 limits)."""
    found = []
    for metric in METRICS:
        limit = getattr(slo, metric.replace("_s", "_p99"), None)
        if limit is not None:
            found.append(Objective(metric, "p99", float(limit)))
    return found


def slo_verdict(summary: Mapping[str, Any], objectives: Sequence[Objective]) -> tuple[bool, str]:
    """Whether the run summarised by ``summary`` meets every objective, and why not.

    Parameters
    ----------
    summary : mapping
        One system's summary: latency statistics under ``ttft_s`` / ``tpot_s`` / ``e2e_s``
        (seconds, None when no request measured them) and optionally ``flags``.
    objectives : sequence of Objective

    Returns
    -------
    (bool, str)
        True and ``""`` if every objective is met by a run that can be trusted; else False and
        the reasons, in words.
    """
    reasons = []
    for flag in summary.get("flags") or ():
        if flag in BLOCKING_FLAGS:
            reasons.append(f"run flagged {flag}")
    for objective in objectives:
        value = (summary.get(objective.metric) or {}).get(objective.statistic)
        if value is None:
            reasons.append(f"no {objective.metric.removesuffix('_s')} measured")
        elif not value <= objective.limit_s:
            reasons.append(f"{objective.metric.removesuffix('_s')} {objective.statistic} {_seconds(value)}"
                           f" > {_seconds(objective.limit_s)}")
    return not reasons, "; ".join(reasons)


def _seconds(value: float) -> str:
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
