"""Fit named parameters to measurements: bounded least squares on log-ratio residuals, with
leave-one-out errors.

The residual of a measured value ``y`` predicted as ``f(theta)`` is ``log(f(theta) / y)``: a
relative error that treats a 10 % miss on a 20 ms TTFT like one on a 20 s E2E, and is symmetric
in over- and under-prediction. The optimizer is ``scipy.optimize.least_squares`` (trust-region
reflective, so bounds hold at every step) with finite-difference Jacobians; the prediction may be
a full simulation, so the number of evaluations is bounded (``max_nfev``).

Leave-one-out: for each unit (a measured run, or a step-table point), refit without it, starting
from the full fit, and predict it; its error is what a new measurement of the same family would
likely see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from kvsim.calibration.parameters import parameter

__all__ = ["FitProblem", "FitResult", "fit", "leave_one_out", "relative_errors"]

Predictor = Callable[[Mapping[str, float], Sequence[str]], dict[str, dict[str, float]]]
"""``predict(values, unit ids) -> {unit id: {metric: predicted}}``."""


@dataclass(frozen=True)
class FitProblem:
    """What to fit: measured values per unit and metric, a predictor, and the parameters.

    Attributes
    ----------
    measured : dict
        ``{unit id: {metric: measured value}}`` (None or missing: not compared).
    metrics : tuple of str
        The metrics the fit uses (others may be reported but do not steer it).
    predict : callable
        See :data:`Predictor`.
    names : tuple of str
        Parameters fitted (see :data:`kvsim.calibration.parameters.PARAMETERS`).
    start : dict
        Starting (datasheet) value of each parameter.
    """

    measured: dict[str, dict[str, float | None]]
    metrics: tuple[str, ...]
    predict: Predictor
    names: tuple[str, ...]
    start: dict[str, float]
    max_nfev: int = 60
    diff_step: float = 0.02

    def pairs(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        return [(i, m) for i in ids for m in self.metrics if self.measured[i].get(m)]


@dataclass
class FitResult:
    """Fitted values, residuals and their summary."""

    values: dict[str, float]
    residuals: dict[str, dict[str, float]]  # unit -> metric -> log(pred / measured)
    predictions: dict[str, dict[str, float]]
    cost: float
    evaluations: int
    success: bool
    message: str
    at_bounds: list[str] = field(default_factory=list)


def _bounds(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    lower = np.array([parameter(n).lower for n in names], dtype=float)
    upper = np.array([parameter(n).upper for n in names], dtype=float)
    return lower, upper


def fit(problem: FitProblem, ids: Sequence[str] | None = None, start: Mapping[str, float] | None = None) -> FitResult:
    """Least-squares fit of ``problem.names`` over units ``ids`` (default: all measured units)."""
    ids = list(problem.measured) if ids is None else list(ids)
    names = list(problem.names)
    start = dict(problem.start if start is None else start)
    lower, upper = _bounds(names)
    # Optimize in units of the parameter's range, so a fraction and a time in seconds are
    # steered alike and the relative finite-difference step means the same for both.
    span = upper - lower
    x0 = np.clip((np.array([start[n] for n in names]) - lower) / span, 1e-3, 1 - 1e-3)
    pairs = problem.pairs(ids)
    if not pairs:
        raise ValueError("nothing to fit: no unit states any of the fitted metrics")
    cache: dict[tuple, dict] = {}

    def values_at(x: np.ndarray) -> dict[str, float]:
        return {n: float(lower[k] + span[k] * x[k]) for k, n in enumerate(names)}

    def predictions(x: np.ndarray) -> dict[str, dict[str, float]]:
        key = tuple(np.round(x, 12))
        if key not in cache:
            cache[key] = problem.predict(values_at(x), ids)
        return cache[key]

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = predictions(x)
        return np.array([np.log(pred[i][m] / problem.measured[i][m]) for i, m in pairs])

    if names:
        solution = least_squares(residuals, x0, bounds=(0.0, 1.0), method="trf", diff_step=problem.diff_step,
                                 max_nfev=problem.max_nfev, x_scale=1.0)
        x, nfev, success, message = solution.x, solution.nfev, bool(solution.success), str(solution.message)
    else:
        x, nfev, success, message = x0, 1, True, "no parameters to fit: the starting values are the result"
    values = values_at(x)
    pred = predictions(x)
    res = {i: {m: float(np.log(pred[i][m] / problem.measured[i][m])) for m in problem.metrics
               if problem.measured[i].get(m)} for i in ids}
    flat = np.array([r for d in res.values() for r in d.values()])
    at_bounds = [n for k, n in enumerate(names) if x[k] <= 1e-3 or x[k] >= 1 - 1e-3]
    return FitResult(values, res, pred, float(0.5 * np.sum(flat**2)), int(nfev), success, message, at_bounds)


def leave_one_out(problem: FitProblem, full: FitResult, ids: Sequence[str] | None = None,
                  progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """For each unit: refit without it (from the full fit) and predict it.

    Returns ``{unit: {"values": fitted without it, "predicted": {metric: value}}}``.
    """
    ids = list(problem.measured) if ids is None else list(ids)
    out = {}
    for left in ids:
        rest = [i for i in ids if i != left]
        if not problem.pairs(rest):
            continue
        refit = fit(problem, rest, start=full.values)
        out[left] = {"values": refit.values, "predicted": problem.predict(refit.values, [left])[left]}
        if progress is not None:
            progress(left)
    return out


def relative_errors(predicted: Mapping[str, float], measured: Mapping[str, float | None]) -> dict[str, float]:
    """``predicted / measured - 1`` for each metric measured."""
    return {m: float(predicted[m] / v - 1.0) for m, v in measured.items() if v and m in predicted}
