"""Steady-state guards: is a point's window a steady-state measurement, and how long is its warm-up?

A summary number (throughput, a latency percentile) describes the system only if the window
measured a steady state. Two things break that, and each is flagged in the summary's ``flags``:

``unstable``
    The backlog grows through the window: requests arrive faster than they are served, so the
    number in the system has no steady state and every window-based number depends on how long
    the window was. Criterion: the least-squares slope of the number of requests in the system,
    ``N(t)``, over the window, times the window's length (the backlog the trend adds over the
    window, in requests), exceeds :data:`UNSTABLE_SHARE` of the requests that arrived in the
    window *and* :data:`UNSTABLE_MIN_GROWTH` requests. The share reads directly as "the system
    served less than 95 % of what was offered" (the trend's slope is the arrival rate minus the
    service rate); the fit uses the whole window, not its two end points, so one burst at either
    edge does not decide it; the absolute floor keeps a window with a handful of arrivals from
    being called unstable on one or two requests. ``N(t)`` is exact, from the records: a request
    is in the system from its arrival until its client has the last token or gives up.
    A closed loop cannot grow (at most one request per client); its failure is ``too_short``.

``too_short``
    The window holds too little to average over. Criteria (any one):

    - fewer than :data:`MIN_COMPLETIONS_PER_INSTANCE` completions per instance in the window
      (open-loop and session workloads), or fewer than :data:`MIN_COMPLETIONS_PER_CLIENT` per
      client (closed loop): each instance's (each client's) work must turn over many times for a
      window total to be a rate rather than the phase of a few long requests;
    - the median end-to-end latency of the window's requests exceeds :data:`LATENCY_SHARE` of
      the window (TTFT is shorter than end-to-end, so this covers it): fewer than ten median
      request lifetimes fit in the window, so the requests that straddle its edges (counted on
      one side, their work done on the other) and the start from an empty system weigh on every
      number. A closed loop whose TTFT (400 s) exceeds its window (200 s) is flagged by both.

``warmup_short``
    The warm-up MSER-5 detects (:func:`mser5_warmup_s`) is longer than the configured warm-up
    *and* cutting there moves the window's mean number of requests in the system by more than
    :data:`WARMUP_BIAS_SHARE` and by more than :data:`WARMUP_BIAS_MIN` requests: the window starts
    inside the initial transient. The floor is for lightly loaded systems, where a few requests
    are in the system and a 5 % shift is a fraction of one request. The shift condition is there because on a stationary but strongly autocorrelated series (a stable
    system near saturation) MSER's minimum wanders far into the run while the means either side
    agree within a few per cent; what matters is the bias, and by Little's law a bias in the mean
    number in the system is the same relative bias in the mean time in the system at the same
    arrival rate. The detected length is reported as ``mser5_warmup_s``; the window itself stays
    the configured one (its counters are fixed before the run starts).

The thresholds are conventions, stated here so a reader can weigh a flag; a point that passes
is not proven steady, and one that fails is a number to re-run longer (or at a lower load),
not to quote.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvsim.metrics.records import RequestRecords

__all__ = ["mser", "mser_statistic", "in_system_integral", "in_system_slope", "mser5_warmup_s",
           "steady_state", "request_ends_s", "UNSTABLE_SHARE", "UNSTABLE_MIN_GROWTH", "MIN_COMPLETIONS_PER_INSTANCE",
           "MIN_COMPLETIONS_PER_CLIENT", "LATENCY_SHARE", "WARMUP_BIAS_SHARE", "WARMUP_BIAS_MIN", "MSER_BATCH", "MSER_OBSERVATIONS", "FLAGS"]

UNSTABLE_SHARE = 0.05
"""Backlog growth over the window, as a share of the window's arrivals, above which a point is
``unstable`` (the service rate is more than 5 % below the arrival rate)."""
UNSTABLE_MIN_GROWTH = 10.0
"""...and at least this many requests of growth (a floor for windows with few arrivals)."""
MIN_COMPLETIONS_PER_INSTANCE = 20
"""Completions in the window per instance below which an open-loop point is ``too_short``."""
MIN_COMPLETIONS_PER_CLIENT = 10
"""Completions in the window per client below which a closed-loop point is ``too_short``."""
LATENCY_SHARE = 0.1
"""Median end-to-end latency, as a share of the window, above which a point is ``too_short``."""
WARMUP_BIAS_SHARE = 0.05
"""Relative change of the window's mean number in the system, from the configured warm-up to
MSER-5's, above which a point is ``warmup_short``."""
WARMUP_BIAS_MIN = 1.0
"""...and by more than this many requests."""
MSER_BATCH = 5
"""Observations per batch mean in MSER-5 (White, Cobb and Spratt 2000)."""
MSER_OBSERVATIONS = 500
"""Equal time bins of ``[0, duration]`` whose mean number in the system MSER-5 reads (100 batches)."""
FLAGS = ("unstable", "too_short", "warmup_short")


def mser_statistic(batch_means: np.ndarray) -> np.ndarray:
    """MSER of every truncation ``d = 0 .. m-1`` of ``m`` batch means ``Z`` (White 1997):

    ``MSER(d) = sum_{j>d} (Z_j - mean(Z_{d+1..m}))^2 / (m - d)^2``

    the squared standard error of the mean of what is kept, up to a constant factor. White, K. P.
    (1997), "An effective truncation heuristic for bias reduction in simulation output",
    *Simulation* 69(6), 323-334.
    """
    z = np.asarray(batch_means, dtype=float)
    m = len(z)
    if m == 0:
        return np.zeros(0)
    # suffix sums: kept = z[d:], n = m - d
    n = np.arange(m, 0, -1, dtype=float)
    s1 = np.cumsum(z[::-1])[::-1]
    s2 = np.cumsum((z * z)[::-1])[::-1]
    ss = np.maximum(s2 - s1 * s1 / n, 0.0)  # sum of squared deviations (clipped rounding)
    statistic: np.ndarray = ss / (n * n)
    return statistic


def mser(values: np.ndarray, batch: int = MSER_BATCH) -> int:
    """Truncation point, in observations, by MSER-``batch`` (MSER-5 by default).

    The observations are averaged in consecutive batches of ``batch`` (a trailing partial batch
    is dropped); the truncation ``d`` batches that minimises :func:`mser_statistic` is searched
    over the first half of the batches only, ``d <= m // 2`` -- a minimum later than that means
    the run is too short to tell (White, Cobb and Spratt 2000, "A comparison of five steady-state
    truncation heuristics for simulation", Proc. 2000 Winter Simulation Conference). Ties go
    to the smallest ``d``. Returns ``d * batch``.
    """
    values = np.asarray(values, dtype=float)
    m = len(values) // batch
    if m < 2:
        return 0
    means = values[: m * batch].reshape(m, batch).mean(axis=1)
    statistic = mser_statistic(means)[: m // 2 + 1]
    return int(np.argmin(statistic)) * batch


def request_ends_s(records: RequestRecords) -> np.ndarray:
    """When each request left the system (its client has the answer, or gave up); inf if never."""
    finish = records.column("finish_s")
    aborted = records.column("aborted_s")
    end = np.where(np.isnan(finish), aborted, finish)
    end = np.where(np.isnan(end), records.column("rejected_s"), end)  # refused at arrival: never in it
    return np.where(np.isnan(end), np.inf, end)


def in_system_integral(arrival_s: np.ndarray, end_s: np.ndarray, times_s: np.ndarray) -> np.ndarray:
    """``I(t) = integral_0^t N(u) du`` at each of ``times_s`` (request-seconds), where ``N(u)``
    counts requests with ``arrival_s <= u < end_s``. Exact:
    ``I(t) = sum_{a_i < t} (t - a_i) - sum_{e_i < t} (t - e_i)``."""
    times_s = np.asarray(times_s, dtype=float)
    out = np.zeros(len(times_s))
    for points, sign in ((np.sort(arrival_s), 1.0), (np.sort(end_s[np.isfinite(end_s)]), -1.0)):
        before = np.searchsorted(points, times_s, side="left")
        prefix = np.concatenate(([0.0], np.cumsum(points)))
        out += sign * (before * times_s - prefix[before])
    return out


def in_system_slope(arrival_s: np.ndarray, end_s: np.ndarray, start_s: float, stop_s: float) -> float:
    """Least-squares slope of ``N(t)`` over ``[start_s, stop_s]``, requests per second.

    The continuous fit of a line to the piecewise-constant ``N``:
    ``slope = integral (t - t_mid) N(t) dt / (T^3 / 12)``; each request contributes
    ``((hi - t_mid)^2 - (lo - t_mid)^2) / 2`` over its stay ``[lo, hi]`` clipped to the window.
    """
    span = stop_s - start_s
    if not span > 0:
        return 0.0
    mid = (start_s + stop_s) / 2
    lo = np.maximum(arrival_s, start_s)
    hi = np.minimum(end_s, stop_s)
    inside = hi > lo
    moment = 0.5 * float(np.sum((hi[inside] - mid) ** 2 - (lo[inside] - mid) ** 2))
    return moment / (span ** 3 / 12.0)


def mser5_warmup_s(arrival_s: np.ndarray, end_s: np.ndarray, duration_s: float,
                   observations: int = MSER_OBSERVATIONS) -> float:
    """Warm-up detected by MSER-5 on the mean number of requests in the system, seconds.

    ``[0, duration_s]`` is cut into ``observations`` equal bins; each bin's time-averaged
    ``N(t)`` is one observation (exact, from :func:`in_system_integral`). The number in the
    system is the quantity whose start from empty is the warm-up bias (by Little's law it moves
    with the mean time in system).
    """
    edges = np.linspace(0.0, duration_s, observations + 1)
    width = duration_s / observations
    level = np.diff(in_system_integral(arrival_s, end_s, edges)) / width
    return mser(level) * width


def steady_state(records: RequestRecords, window_start_s: float, window_end_s: float, e2e_p50_s: float | None,
                 completed: int, units: int, per: str) -> dict[str, Any]:
    """The steady-state section of a summary: ``flags`` and the figures they were judged on.

    Parameters
    ----------
    records : RequestRecords
    window_start_s, window_end_s : float
        The measurement window, seconds (the run starts at 0).
    e2e_p50_s : float or None
        Median end-to-end latency of the window's requests, seconds.
    completed : int
        Requests completed in the window.
    units : int
        Instances (``per="instance"``) or closed-loop clients (``per="client"``).
    per : str
        ``instance`` or ``client``.

    Returns
    -------
    dict
        ``flags`` (a list, see :data:`FLAGS`), ``in_system_growth`` (requests the backlog's trend
        adds over the window), ``in_system_growth_share`` (that, over the window's arrivals),
        ``completions_per_instance`` or ``completions_per_client``, ``e2e_p50_window_share``
        (median end-to-end latency / window; None without completions), ``mser5_warmup_s`` and
        ``warmup_bias_share`` (the relative shift of the mean number in the system, configured
        window against the MSER-5 truncated one).
    """
    span = window_end_s - window_start_s
    arrival = records.column("arrival_s")
    end = request_ends_s(records)
    arrived = int(np.count_nonzero((arrival >= window_start_s) & (arrival <= window_end_s)))
    growth = in_system_slope(arrival, end, window_start_s, window_end_s) * span
    share = growth / arrived if arrived else 0.0
    per_unit = completed / units if units else 0.0
    latency_share = e2e_p50_s / span if e2e_p50_s is not None else None
    detected = mser5_warmup_s(arrival, end, window_end_s) if records.n else 0.0
    bias, shift = _mean_shift(arrival, end, window_start_s, detected, window_end_s)
    flags = []
    if per == "instance" and growth > UNSTABLE_SHARE * arrived and growth > UNSTABLE_MIN_GROWTH:
        flags.append("unstable")
    minimum = MIN_COMPLETIONS_PER_CLIENT if per == "client" else MIN_COMPLETIONS_PER_INSTANCE
    if per_unit < minimum or latency_share is None or latency_share > LATENCY_SHARE:
        flags.append("too_short")
    if detected > window_start_s and abs(bias) > WARMUP_BIAS_SHARE and abs(shift) > WARMUP_BIAS_MIN:
        flags.append("warmup_short")
    return {
        "flags": flags,
        "in_system_growth": growth,
        "in_system_growth_share": share,
        f"completions_per_{per}": per_unit,
        "e2e_p50_window_share": latency_share,
        "mser5_warmup_s": detected,
        "warmup_bias_share": bias,
    }


def _mean_shift(arrival_s: np.ndarray, end_s: np.ndarray, configured_s: float, detected_s: float,
                stop_s: float) -> tuple[float, float]:
    """Difference of the mean ``N(t)`` over ``[configured_s, stop_s]`` from that over
    ``[detected_s, stop_s]``: relative, and in requests (0 when the detected warm-up is not
    longer, or nothing is in the system)."""
    if not detected_s > configured_s or not stop_s > detected_s:
        return 0.0, 0.0
    area = in_system_integral(arrival_s, end_s, np.array([configured_s, detected_s, stop_s]))
    configured = (area[2] - area[0]) / (stop_s - configured_s)
    detected = (area[2] - area[1]) / (stop_s - detected_s)
    if not detected > 0:
        return 0.0, 0.0
    return float(configured / detected - 1.0), float(configured - detected)
