"""How a plan judges one probe's run beyond its latencies: the window a probe needs, the flags a
longer run can clear (:func:`rerun_scenario`), the runs that failed whatever they measured, and
the point at which a run has certainly failed and may stop (:func:`certain_failure`). Used by
:func:`kvsim.plan.planner.run_probe`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kvsim.plan.slo import Objective, slo_verdict
from kvsim.scenario.load import Scenario

__all__ = ["WINDOW_MARGIN", "RESOLVE_FLAGS", "RESOLVE_TRIES", "LENGTHEN_MAX", "WARMUP_MARGIN", "untrusted",
           "certain_failure", "rerun_scenario"]

WINDOW_MARGIN = 1.5
"""A probe's window holds this many times the completions per instance (per client, for a closed
loop) below which a run is flagged too short (:mod:`kvsim.metrics.steady_state`)."""
RESOLVE_FLAGS = ("too_short", "warmup_short")
"""Flags a longer window or warm-up can clear (:mod:`kvsim.metrics.steady_state`). A probe that
meets the SLO under one of them is run again until the flag clears or :data:`RESOLVE_TRIES` re-runs
are spent; one that still carries it then meets the SLO *unconfirmed* (``detail["unconfirmed"]``),
never fails for it: a plan never concludes "fails" from a probe that did not fail the SLO."""
RESOLVE_TRIES = 3
"""Re-runs of one probe to clear its flags: the budget (each at most :data:`LENGTHEN_MAX` times
the window before it, so at most 512 times the first window)."""
LENGTHEN_MAX = 8.0
"""Most a probe's window grows in one re-run."""
WARMUP_MARGIN = 1.5
"""A re-run of a probe flagged ``warmup_short`` warms up this many times the warm-up MSER-5 found."""


def untrusted(summary: dict) -> bool:
    """The run failed whatever else it measured: its backlog grew, it rejected requests, or it was
    stopped once its failure was certain."""
    return bool(summary.get("stopped_early")) or any(flag in ("unstable", "rejected")
                                                     for flag in summary.get("flags") or ())


_MILESTONE = {"ttft_s": "first_token_s", "e2e_s": "finish_s"}
_QUANTILE = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


def certain_failure(objectives: Sequence[Objective], warmup_s: float) -> Callable[[Any, float, int], str | None] | None:
    """A stop check (:data:`kvsim.sim.run.StopCheck`) that ends a probe's run as soon as it has
    certainly failed a percentile objective on TTFT, TPOT or end-to-end latency.

    Of the ``N`` requests arriving in the window (from ``warmup_s``), more than ``(1 - q) * N + 1``
    are already over the limit, so the ``q``-quantile over the window's requests exceeds it whatever
    the rest of the run does (the summary's quantile is over at most ``N`` values, interpolated
    linearly: ``c`` values over the limit put it over once ``c - 1 > (1 - q) * (M - 1)`` for ``M``
    values, which ``c > (1 - q) * N + 1`` implies for every ``M <= N``). Over the limit: for TTFT
    (end-to-end), those that got their first (last) token late and those still waiting past the
    limit; for TPOT, only requests already finished with more than one output token whose time per
    output token exceeds it -- a request still decoding may never finish inside the run and then
    does not count. An overloaded probe is the dearest to simulate (its backlog and its drain grow
    with it); this stops it once the verdict cannot change. None when no objective can be decided
    so (means need the whole run)."""
    checks = [(o, _MILESTONE[o.metric], 1.0 - _QUANTILE[o.statistic]) for o in objectives
              if o.metric in _MILESTONE and o.statistic in _QUANTILE]
    per_token = [(o, 1.0 - _QUANTILE[o.statistic]) for o in objectives
                 if o.metric == "tpot_s" and o.statistic in _QUANTILE]
    if not checks and not per_token:
        return None

    def stop(records: Any, now_s: float, window_arrivals: int) -> str | None:
        if window_arrivals <= 0:
            return None
        arrival = records.column("arrival_s")
        in_window = arrival >= warmup_s
        for objective, column, share in checks:
            reached = records.column(column)
            late = np.where(np.isnan(reached), now_s, reached) - arrival > objective.limit_s
            over = int(np.count_nonzero(late & in_window))
            if over > share * window_arrivals + 1:
                return (f"stopped at {now_s:.4g} s: {over} of the window's {window_arrivals} arrivals already took over "
                        f"{objective.limit_s:g} s to their {'first' if column == 'first_token_s' else 'last'} token, "
                        f"so {objective.metric.removesuffix('_s')} {objective.statistic} > {objective.limit_s:g} s")
        if per_token:
            outputs = records.column("output_tokens")
            steps = outputs - 1.0
            decoded = in_window & (steps > 0.0) & ~np.isnan(records.column("finish_s"))
            with np.errstate(invalid="ignore", divide="ignore"):
                tpot = (records.column("finish_s") - records.column("first_token_s")) / steps
            for objective, share in per_token:
                over = int(np.count_nonzero(decoded & (tpot > objective.limit_s)))
                if over > share * window_arrivals + 1:
                    return (f"stopped at {now_s:.4g} s: {over} of the window's {window_arrivals} arrivals already "
                            f"finished at over {objective.limit_s * 1e3:g} ms per output token, so "
                            f"tpot {objective.statistic} > {objective.limit_s * 1e3:g} ms")
        return None

    return stop


def rerun_scenario(scenario: Scenario, summary: dict, objectives: Sequence[Objective],
                   by_clients: bool = False) -> Scenario | None:
    """The scenario to run a probe again with, to clear a flag a longer run can clear, or None.

    A probe is run again when it is flagged ``too_short`` or ``warmup_short`` (and neither
    ``unstable`` nor ``rejected``) and either its latencies met the SLO (its verdict then rests on
    the flag) or it is ``warmup_short`` with a window more crowded than after MSER-5's warm-up
    (the transient overstates its latencies, so a failure could be the start-up's). A failure on
    latency from a window that starts too empty, or that is merely short, stands: a longer window
    only adds to what it measured.

    ``too_short``: the window grows by the factor that would hold :data:`WINDOW_MARGIN` times the
    completions per instance (per client) the flag asks for, and keep the median request within
    :data:`~kvsim.metrics.steady_state.LATENCY_SHARE` of it with the same margin: between 2 and
    :data:`LENGTHEN_MAX`. ``warmup_short``: the warm-up becomes :data:`WARMUP_MARGIN` times the
    one MSER-5 found, the window keeping its length.
    """
    from kvsim.metrics.steady_state import LATENCY_SHARE, MIN_COMPLETIONS_PER_CLIENT, MIN_COMPLETIONS_PER_INSTANCE

    flags = summary.get("flags") or ()
    if not any(flag in RESOLVE_FLAGS for flag in flags) or untrusted(summary):
        return None
    state = summary.get("steady_state") or {}
    latencies_meet = slo_verdict({**summary, "flags": []}, objectives)[0]
    crowded_start = "warmup_short" in flags and (state.get("warmup_bias_share") or 0.0) > 0.0
    if not (latencies_meet or crowded_start):
        return None
    spec = scenario.spec
    window_s = spec.duration - spec.warmup
    factor = 1.0
    if "too_short" in flags:
        per, minimum = ((state.get("completions_per_client"), MIN_COMPLETIONS_PER_CLIENT) if by_clients
                        else (state.get("completions_per_instance"), MIN_COMPLETIONS_PER_INSTANCE))
        share = state.get("e2e_p50_window_share")
        factor = max(WINDOW_MARGIN * minimum / max(per or 0.0, 0.5),
                     WINDOW_MARGIN * share / LATENCY_SHARE if share else 1.0)
        factor = min(LENGTHEN_MAX, max(2.0, factor))
    changes: dict[str, Any] = {}
    warmup_s = spec.warmup
    if "warmup_short" in flags and not spec.warmup_auto:
        warmup_s = max(spec.warmup, float(math.ceil(WARMUP_MARGIN * (state.get("mser5_warmup_s") or 0.0))))
        changes["warmup"] = warmup_s
    start_s = 0.0 if spec.warmup_auto else warmup_s
    changes["duration"] = float(math.ceil(start_s + factor * window_s))
    if changes["duration"] <= spec.duration and warmup_s == spec.warmup:
        return None  # nothing a re-run would change
    return scenario.with_changes(changes)
