"""Statistics across replications: the mean and a Student-t confidence interval per metric.

``replications: N`` runs each sweep point with N independent seeds. The replicas' values of a
metric are N independent, identically distributed draws of that point's result, so with
:math:`\\bar x` their mean and :math:`s` their sample standard deviation (``ddof=1``), the
two-sided interval at confidence :math:`1-\\alpha` is

.. math:: \\bar x \\pm t_{1-\\alpha/2,\\,N-1}\\, s / \\sqrt N

(Student t with N - 1 degrees of freedom, ``scipy.stats.t``). It assumes the metric is roughly
normal across seeds, which holds for means over many requests; for a tail percentile of a short
run it is an approximation, and an interval from 2 or 3 replicas is wide by construction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from kvsim.metrics.summary import LATENCY_KEYS, SCALAR_KEYS

__all__ = ["CONFIDENCE", "LATENCY_STATS", "headline_metrics", "t_interval", "replica_statistics"]

CONFIDENCE = 0.95
LATENCY_STATS = ("mean", "p50", "p90", "p99")


def t_interval(values: Iterable[float | None], confidence: float = CONFIDENCE) -> dict[str, float | int | None]:
    """Mean and two-sided Student-t interval of ``values``.

    Returns
    -------
    dict
        ``n``, ``mean``, ``std`` (sample, ddof=1), ``half_width``, ``ci_low``, ``ci_high``, in
        the values' unit. With fewer than two values the spread is unknown: ``std``,
        ``half_width`` and the bounds are None (``mean`` is the value, or None without any).
    """
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    n = int(x.size)
    if n == 0:
        return {"n": 0, "mean": None, "std": None, "half_width": None, "ci_low": None, "ci_high": None}
    mean = float(x.mean())
    if n < 2:
        return {"n": n, "mean": mean, "std": None, "half_width": None, "ci_low": None, "ci_high": None}
    std = float(x.std(ddof=1))
    from scipy import stats  # here, not at the top: importing it costs every kvsim command ~0.6 s

    half = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n))
    return {"n": n, "mean": mean, "std": std, "half_width": half, "ci_low": mean - half, "ci_high": mean + half}


def headline_metrics(summary: dict[str, Any]) -> dict[str, float | None]:
    """The headline scalars of one run's summary, flat: every key of
    :data:`kvsim.metrics.summary.SCALAR_KEYS` it holds, and ``ttft_s_p99``-style latency
    statistics (:data:`~kvsim.metrics.summary.LATENCY_KEYS` x mean/p50/p90/p99, named as in
    :meth:`kvsim.sim.result.RunResult.summary_frame`)."""
    out: dict[str, float | None] = {}
    for key in SCALAR_KEYS:
        value = summary.get(key)
        if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = None if value is None else float(value)
    for key in LATENCY_KEYS:
        block = summary.get(key) or {}
        for stat in LATENCY_STATS:
            value = block.get(stat)
            out[f"{key}_{stat}"] = None if value is None else float(value)
    return out


def replica_statistics(summaries: Sequence[dict[str, Any]],
                       confidence: float = CONFIDENCE) -> dict[str, dict[str, float | int | None]]:
    """Per headline metric (:func:`headline_metrics`), :func:`t_interval` over the replicas'
    summaries of one system at one point."""
    flat = [headline_metrics(s) for s in summaries]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    return {key: t_interval([f.get(key) for f in flat], confidence) for key in keys}
