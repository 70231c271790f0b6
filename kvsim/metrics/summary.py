"""Per-system summary metrics over the measurement window ``[warmup, duration]``.

Conventions (all times in seconds, rates per second of simulated time):

- Latency statistics cover requests that *arrived* in the window; the run drains after the
  window, so slow requests are included, not censored. ``requests_unfinished`` counts window
  arrivals still unfinished when the window closed (the backlog: a sign of saturation);
  ``requests_undrained`` those the drain limit cut off (their latencies are missing);
  ``requests_aborted`` those whose client gave up (``workload.timeout``): they have no finish
  time, so they are missing from the latency statistics and count against goodput.
  ``requests_rejected`` those refused at arrival because they could never fit an instance's KV
  pool (a trace's longest requests): they are missing from every other number, and the point is
  flagged ``rejected``.
- Throughput, three ways (all per second of the window):

  - ``requests_per_s`` (and ``goodput_requests_per_s``, those within every SLO threshold)
    count requests *completed* in the window. Past saturation this number is not the work the
    system did: while a backlog builds, the engine spends time on requests that finish after the
    window (prefills first, then decode steps), so completions can fall as load rises.
  - ``output_tokens_per_s`` counts every output token *emitted* in the window, whichever request
    it belongs to; ``input_tokens_per_s`` the prompt tokens *processed* in the window,
    chunk by chunk: each prefill chunk counts when its batch ends, so a long prompt chunked
    across the window's edge counts on both sides (cached prefix tokens count with the first
    chunk: that part of the prompt was served by a load; a prompt served whole from the cache
    counts when it completes; a prompt recomputed after a preemption counts once).
  - ``total_tokens_per_s`` is their sum, the tokens processed in the window (vLLM's
    ``benchmark_serving`` reports the same "total token throughput"); it is the measure of work
    done that does not fall when load rises past saturation.

- ``flags`` lists what makes the point not a steady-state number (``unstable``, ``too_short``,
  ``warmup_short``), or not the whole workload (``rejected``), and ``steady_state`` the figures
  the first three were judged on; see
  :mod:`kvsim.metrics.steady_state` for the criteria and thresholds.
- TPOT of a request is ``(finish - first token) / (output tokens - 1)``; one-token requests have none.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvsim.metrics.records import RequestRecords
from kvsim.metrics.steady_state import steady_state

__all__ = ["latency_stats", "summarize", "request_latencies", "slo_met", "LATENCY_KEYS", "SCALAR_KEYS"]

LATENCY_KEYS = ("ttft_s", "tpot_s", "e2e_s")
SCALAR_KEYS = (
    "requests_completed", "output_tokens_per_s", "input_tokens_per_s", "total_tokens_per_s", "requests_per_s",
    "goodput_requests_per_s", "kv_utilization_mean",
)


def latency_stats(values: np.ndarray) -> dict[str, float | None]:
    """Mean, p50, p90, p99 of ``values`` (seconds); None when there are none."""
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def request_latencies(records: RequestRecords) -> dict[str, np.ndarray]:
    """Per request: ``ttft_s``, ``tpot_s`` (NaN for one-token outputs) and ``e2e_s``, seconds
    (NaN where the milestone was not reached)."""
    arrival = records.column("arrival_s")
    first = records.column("first_token_s")
    finish = records.column("finish_s")
    outputs = records.column("output_tokens")
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs > 1, (finish - first) / (outputs - 1), np.nan)
    return {"ttft_s": first - arrival, "tpot_s": tpot, "e2e_s": finish - arrival}


def slo_met(records: RequestRecords, slo: dict[str, float | None],
            latencies: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Per request: finished within every threshold of ``slo`` (``ttft_s``, ``tpot_s``,
    ``e2e_s``; None = no limit). A one-token request has no TPOT to miss."""
    latencies = request_latencies(records) if latencies is None else latencies
    met: np.ndarray = ~np.isnan(records.column("finish_s"))
    for key, values in latencies.items():
        limit = slo.get(key)
        if limit is not None:
            met &= np.nan_to_num(values, nan=0.0) <= limit
    return met


def summarize(
    records: RequestRecords,
    window_start_s: float,
    window_end_s: float,
    output_tokens_in_window: int,
    input_tokens_in_window: int,
    kv_utilization_mean: float,
    slo: dict[str, float | None],
    instances: int = 1,
    clients: int | None = None,
) -> dict[str, Any]:
    """The summary metrics of one system run.

    Parameters
    ----------
    records : RequestRecords
    window_start_s, window_end_s : float
        Measurement window, seconds.
    output_tokens_in_window, input_tokens_in_window : int
        Tokens counted inside the window.
    kv_utilization_mean : float
        Time-weighted mean fraction of KV blocks in use over the window (all instances).
    slo : dict
        Per-request thresholds in seconds: ``ttft_s``, ``tpot_s``, ``e2e_s`` (None = no limit).
    instances : int
        Instances of the system (the ``too_short`` completion count is per instance).
    clients : int, optional
        Closed-loop clients: the completion count is then per client, and the point cannot be
        ``unstable``.
    """
    span = window_end_s - window_start_s
    arrival = records.column("arrival_s")
    finish = records.column("finish_s")
    done = ~np.isnan(finish)
    aborted = ~np.isnan(records.column("aborted_s"))
    rejected = ~np.isnan(records.column("rejected_s"))
    arrived = arrival >= window_start_s
    measured = done & arrived
    latencies = request_latencies(records)
    ttft, tpot, e2e = latencies["ttft_s"], latencies["tpot_s"], latencies["e2e_s"]
    completed_in_window = done & (finish >= window_start_s) & (finish <= window_end_s)
    meets = completed_in_window & slo_met(records, slo, latencies)
    summary: dict[str, Any] = {
        "requests_arrived": int(np.count_nonzero(arrived)),
        "requests_completed": int(np.count_nonzero(completed_in_window)),
        "requests_unfinished": int(np.count_nonzero(arrived & ~rejected & ~(finish <= window_end_s))),
        "requests_undrained": int(np.count_nonzero(arrived & ~done & ~aborted & ~rejected)),
        "requests_aborted": int(np.count_nonzero(arrived & aborted)),
        "requests_rejected": int(np.count_nonzero(arrived & rejected)),
        "output_tokens_per_s": output_tokens_in_window / span,
        "input_tokens_per_s": input_tokens_in_window / span,
        "total_tokens_per_s": (input_tokens_in_window + output_tokens_in_window) / span,
        "requests_per_s": int(np.count_nonzero(completed_in_window)) / span,
        "goodput_requests_per_s": int(np.count_nonzero(meets)) / span,
        "ttft_s": latency_stats(ttft[measured]),
        "tpot_s": latency_stats(tpot[measured]),
        "e2e_s": latency_stats(e2e[measured]),
        "kv_utilization_mean": kv_utilization_mean,
        "preemptions": int(records.column("preemptions")[measured].sum()),
    }
    p99_met = {}
    for key in LATENCY_KEYS:
        limit = slo.get(key)
        if limit is not None:
            p99 = summary[key]["p99"]
            p99_met[key.replace("_s", "_p99")] = p99 is not None and p99 <= limit
    summary["slo_met"] = p99_met
    per, units = ("client", clients) if clients is not None else ("instance", instances)
    state = steady_state(records, window_start_s, window_end_s, summary["e2e_s"]["p50"],
                         summary["requests_completed"], units, per)
    summary["flags"] = state.pop("flags")
    if summary["requests_rejected"]:
        summary["flags"].append("rejected")  # the numbers leave out requests the system could never serve
    summary["steady_state"] = state
    return summary
