"""``kvsim calibrate``: read measurement files, fit the parameters of one card family, measure
in-sample residuals and leave-one-out errors, and build the ``calib.yaml`` document.

Units of the fit are measured vLLM runs (predicted by simulating each run, see
:mod:`kvsim.calibration.runs`) and step-table points (predicted from the step-time model, see
:mod:`kvsim.calibration.steps`). During the fit a run is simulated with its stages shortened by
``fit_time_scale`` (the stages keep their rates and their share of requests), for speed; every
number reported (datasheet, fitted, leave-one-out) is a full-length simulation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvsim.calibration.checks import capped
from kvsim.calibration.fit import FitProblem, FitResult, fit, leave_one_out
from kvsim.calibration.measurements import MeasurementError, Measurements, StepPoint, VllmRun, read_measurements
from kvsim.calibration.parameters import DEFAULT_FIT, PARAMETERS, default_values, parameter
from kvsim.calibration.runs import catalog_model, gpu_node, predict_run
from kvsim.calibration.steps import STEP_METRICS, predict_step, step_measured, supported
from kvsim.hardware import accelerator_catalog, node_catalog
from kvsim.plan.executor import watched_map, worker_pool

__all__ = ["FIT_METRICS", "Unit", "Calibrated", "load_units", "calibrate", "summarise_errors"]

FIT_METRICS = ("ttft_mean_s", "tpot_mean_s", "e2e_mean_s")
"""Request-level metrics that steer a fit (p90s are reported, not fitted)."""


@dataclass(frozen=True)
class Unit:
    """One fitted unit: a measured run or a step-table point, with its source file."""

    uid: str
    kind: str  # "vllm_run" | "step"
    row: VllmRun | StepPoint
    source: int  # index into the measurement files

    @property
    def measured(self) -> dict[str, float | None]:
        return dict(self.row.measured) if self.kind == "vllm_run" else step_measured(self.row)

    @property
    def fit_metrics(self) -> tuple[str, ...]:
        return FIT_METRICS if self.kind == "vllm_run" else STEP_METRICS


def load_units(paths: Sequence[str | Path], accelerator: str) -> tuple[list[Measurements], list[Unit], list[str]]:
    """The measurement files, the units of them on ``accelerator``, and notes on rows left out.

    Raises
    ------
    MeasurementError
        A file that cannot be read, or a row on ``accelerator`` that kvsim cannot reproduce: a
        model not in the catalog, or more cards than the one node it is reproduced on holds
        (``file:line: column: message`` each).
    """
    files = [read_measurements(p) for p in paths]
    units: list[Unit] = []
    notes: list[str] = []
    problems: list[str] = []
    for k, m in enumerate(files):
        skipped: dict[str, int] = {}
        for run in m.runs:
            try:
                card = gpu_node(run.gpu)[0]
            except ValueError as exc:
                skipped[str(exc)] = skipped.get(str(exc), 0) + 1
                continue
            if card == accelerator:
                try:
                    catalog_model(run.model)
                except ValueError as exc:
                    hint = " (or state model: in its sidecar)" if m.kind == "bench_runs" else ""
                    problems.append(f"{_at(m.path, run.line)}: model: {exc}{hint}")
                    continue
                if _fits_node(m.path, run.line, "tp", run.tp, run.gpu, problems):
                    units.append(Unit(f"{run.run_id}", "vllm_run", run, k))
        for point in m.steps:
            why = supported(point)
            if why is None and gpu_node(point.hardware)[0] != accelerator:
                why = f"hardware {point.hardware} is not {accelerator}"
            if why is None:
                if _fits_node(m.path, point.lines[0], "tensor_parallel", point.tp, point.hardware, problems):
                    units.append(Unit(point.point_id, "step", point, k))
            else:
                skipped[why] = skipped.get(why, 0) + 1
        notes += [f"{m.path}: {n} row(s) left out: {why}" for why, n in skipped.items()]
    if problems:
        raise MeasurementError(capped(problems))
    ids = [u.uid for u in units]
    if len(set(ids)) != len(ids):
        raise ValueError("two measured units share an id: give each file once")
    return files, units, notes


def _fits_node(path: str, line: int, column: str, tp: int, gpu: str, problems: list[str]) -> bool:
    """Whether ``tp`` cards fit the one node a measurement on ``gpu`` is reproduced on; if not,
    the problem is added."""
    node = gpu_node(gpu)[1]
    cards = node_catalog()[node].accelerators_per_node
    if tp <= cards:
        return True
    problems.append(f"{_at(path, line)}: {column}: {tp} cards, but the reproduction runs on one {node} node of "
                    f"{cards} cards")
    return False


def _at(path: str, line: int) -> str:
    """``file:line``, or the file alone for a run of a JSON result file (line 0)."""
    return f"{path}:{line}" if line else path


def _predict_one(args: tuple) -> tuple[str, dict[str, float]]:
    unit, values, time_scale = args
    if unit.kind == "vllm_run":
        return unit.uid, predict_run(unit.row, values, time_scale=time_scale)
    return unit.uid, predict_step(unit.row, values, dtype="bf16")


class _Predictor:
    """Predictions of many units, simulated in ``workers`` processes when there are several."""

    def __init__(self, units: Sequence[Unit], time_scale: float, workers: int):
        self.units = {u.uid: u for u in units}
        self.time_scale = time_scale
        # workers that exit with this process, even when it is killed (kvsim.plan.executor)
        self.pool = worker_pool(workers) if workers > 1 else None

    def __call__(self, values: Mapping[str, float] | None, ids: Sequence[str]) -> dict[str, dict[str, float]]:
        jobs = [(self.units[i], dict(values or {}), self.time_scale) for i in ids]
        sims = [j for j in jobs if j[0].kind == "vllm_run"]
        rest = [j for j in jobs if j[0].kind != "vllm_run"]
        out = dict(map(_predict_one, rest))
        if self.pool is not None and len(sims) > 1:
            out.update(watched_map(self.pool, _predict_one, sims))  # never waits for ever
        else:
            out.update(map(_predict_one, sims))
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


@dataclass
class Calibrated:
    """Everything a calibration produced (see :func:`calibrate`)."""

    accelerator: str
    names: tuple[str, ...]
    files: list[Measurements]
    units: list[Unit]
    notes: list[str]
    defaults: dict[str, float]
    fitted: FitResult
    datasheet: dict[str, dict[str, float]]  # full-length predictions, datasheet values
    calibrated: dict[str, dict[str, float]]  # full-length predictions, fitted values
    loo: dict[str, dict] = field(default_factory=dict)  # unit -> {values, predicted (full length)}
    fit_time_scale: float = 1.0


def calibrate(paths: Sequence[str | Path], accelerator: str = "h100-sxm", names: Sequence[str] = DEFAULT_FIT,
              fit_time_scale: float = 0.1, with_loo: bool = True, workers: int = 1, max_nfev: int = 40,
              progress: Callable[[str], None] | None = None) -> Calibrated:
    """Fit ``names`` for ``accelerator`` to the measurements in ``paths``."""
    for n in names:
        parameter(n)
    catalog = accelerator_catalog()
    if accelerator not in catalog:
        raise ValueError(catalog.unknown_message(accelerator))
    say = progress or (lambda message: None)
    files, units, notes = load_units(paths, accelerator)
    for unit in units:  # how a run of a benchmark result file is reproduced (kvsim.calibration.bench_files)
        if getattr(unit.row, "notes", ()):
            say(f"{unit.uid}: " + "; ".join(unit.row.notes))
    if not units:
        raise ValueError(f"no measurement in {', '.join(map(str, paths))} is for {accelerator}")
    defaults = default_values(list(names), catalog[accelerator])
    measured = {u.uid: {m: u.measured.get(m) for m in u.fit_metrics} for u in units}
    metrics = tuple(dict.fromkeys(m for u in units for m in u.fit_metrics))
    fast = _Predictor(units, fit_time_scale, workers)
    full = _Predictor(units, 1.0, workers)
    try:
        problem = FitProblem(measured, metrics, fast, tuple(names), defaults, max_nfev=max_nfev)
        ids = [u.uid for u in units]
        say(f"datasheet predictions of {len(ids)} unit(s)")
        datasheet = full(None, ids)
        say(f"fitting {', '.join(names)}")
        fitted = fit(problem)
        say(f"fitted after {fitted.evaluations} evaluations: "
            + ", ".join(f"{n} {v:.4g}" for n, v in fitted.values.items()))
        calibrated = full(fitted.values, ids)
        loo: dict[str, dict] = {}
        if with_loo and len(ids) > 1:
            loo_problem = FitProblem(measured, metrics, fast, tuple(names), defaults, max_nfev=max(8, max_nfev // 3))
            for uid, entry in leave_one_out(loo_problem, fitted, ids, progress=lambda i: say(f"left out {i}")).items():
                loo[uid] = {"values": entry["values"], "predicted": full(entry["values"], [uid])[uid]}
    finally:
        fast.close()
        full.close()
    return Calibrated(accelerator, tuple(names), files, units, notes, defaults, fitted, datasheet, calibrated,
                      loo, fit_time_scale)


def summarise_errors(errors: Mapping[str, Mapping[str, float]], metrics: Sequence[str]) -> dict[str, dict]:
    """Median and p90 of |relative error| per metric over units (``errors[unit][metric]``)."""
    out = {}
    for m in metrics:
        values = np.array([abs(e[m]) for e in errors.values() if e.get(m) is not None])
        if values.size:
            out[m] = {"median_abs": float(np.median(values)), "p90_abs": float(np.percentile(values, 90)),
                      "n": int(values.size)}
    return out


def parameter_table(result: Calibrated) -> dict[str, dict]:
    """``fitted:`` of ``calib.yaml``: value, datasheet default, bounds, unit, meaning."""
    return {n: {"value": float(result.fitted.values[n]), "datasheet": float(result.defaults[n]),
                "lower": PARAMETERS[n].lower, "upper": PARAMETERS[n].upper,
                "unit": PARAMETERS[n].unit or ("tokens" if n.endswith("_tokens") else "fraction"),
                "at_bound": n in result.fitted.at_bounds, "meaning": PARAMETERS[n].meaning}
            for n in result.names}
