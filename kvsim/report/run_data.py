"""The saved results of ``kvsim run`` read back for a report (docs/results.md): ``summary.json``
(format 2), the resolved ``scenario.yaml`` and ``requests.parquet``. Nothing is re-run.

Also the figures a report derives from them: the swept load (an arrival rate or a client
count), each system's rows along it, and its saturation point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvsim.input_files import InputFileError, read_json

__all__ = ["ReportInputError", "RunResults", "load_results", "LoadAxis", "load_axis", "Row", "rows",
           "saturation", "metric", "finite", "run_windows", "window_phrase"]


class ReportInputError(ValueError):
    """A results folder that cannot be reported on: a file missing, unreadable or of another shape.
    The message is one line, for the command line."""


@dataclass(frozen=True)
class RunResults:
    """A results folder as saved: ``summary`` (summary.json), ``scenario`` (the resolved
    scenario.yaml, ``{}`` when absent), ``folder`` (where they were read)."""

    folder: Path
    summary: dict[str, Any]
    scenario: dict[str, Any] = field(default_factory=dict)

    @property
    def systems(self) -> list[str]:
        return list(self.summary["system_names"])

    @property
    def points(self) -> list[dict[str, Any]]:
        return list(self.summary["points"])

    def requests(self):
        """``requests.parquet`` as a pandas frame, or None when the folder has none."""
        path = self.folder / "requests.parquet"
        if not path.is_file():
            return None
        import pandas as pd

        try:
            return pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise ReportInputError(f"cannot read {path}: {exc}") from None


def load_results(folder: str | Path) -> RunResults:
    """Read a results folder of ``kvsim run``.

    Raises
    ------
    ReportInputError
        When ``summary.json`` is missing, unreadable or not format 2, or ``scenario.yaml`` is
        unreadable.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportInputError(f"{folder} is not a folder")
    path = folder / "summary.json"
    if not (path.exists() or path.is_symlink()):
        raise ReportInputError(f"{folder} holds no plan.json nor summary.json: give the results folder of "
                               f"kvsim plan or kvsim run")
    try:
        summary = read_json(path, "run summary")
    except InputFileError as exc:
        raise ReportInputError(f"cannot read {exc}") from None
    if not isinstance(summary, dict) or summary.get("format") != 2:
        raise ReportInputError(f"{path} is not a run summary of format 2 (docs/results.md); "
                               f"re-run the scenario with this kvsim to write one")
    for key in ("scenario", "system_names", "points", "duration_s", "warmup_s"):
        if key not in summary:
            raise ReportInputError(f"{path}: the summary has no {key!r}")
    points = summary["points"]
    if not isinstance(points, list) or not points or not all(
            isinstance(p, dict) and isinstance(p.get("systems"), dict) for p in points):
        raise ReportInputError(f"{path}: 'points' must be a non-empty list of points with their systems")
    for p in points:
        missing = [s for s in summary["system_names"] if s not in p["systems"]]
        if missing:
            raise ReportInputError(f"{path}: point {p.get('index')} has no results for {', '.join(missing)}")
    scenario: dict[str, Any] = {}
    resolved = folder / "scenario.yaml"
    if resolved.is_file():
        from kvsim.yaml_io import SpecError, load_yaml, read_utf8

        try:  # the scenario files' reader: its limits on size, values and nesting hold here too
            scenario = load_yaml(read_utf8(resolved, "scenario file")[1], str(resolved)).data or {}
        except SpecError as exc:
            raise ReportInputError(f"cannot read {resolved}: {'; '.join(exc.problems[:3])}") from None
        if not isinstance(scenario, dict):
            raise ReportInputError(f"{resolved} is not a scenario (a mapping)")
    return RunResults(folder, summary, scenario)


def finite(value: Any) -> bool:
    """A real number that is neither NaN nor infinite (booleans and None are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metric(summary: dict[str, Any], name: str) -> float | None:
    """A metric of one system's summary by its flat name (``ttft_s_p99``, ``cost.usd_per_million_output_tokens``);
    None when absent or not finite."""
    value: Any = summary
    if "." in name:
        for key in name.split("."):
            value = value.get(key) if isinstance(value, dict) else None
    else:
        for stem in ("ttft_s", "tpot_s", "e2e_s"):
            if name.startswith(stem + "_"):
                inner = summary.get(stem)
                value = inner.get(name[len(stem) + 1:]) if isinstance(inner, dict) else None
                break
        else:
            value = summary.get(name)
    return float(value) if finite(value) else None


@dataclass(frozen=True)
class LoadAxis:
    """The swept load: ``key`` the sweep field, ``label`` for an axis, ``kind`` "rate" or "clients"."""

    key: str
    label: str
    kind: str

    def value(self, raw: Any) -> float | None:
        """The swept value as a number (requests/s or clients), None when unreadable."""
        if self.kind == "clients":
            return float(raw) if finite(raw) else None
        from kvsim.units import UnitError, parse_quantity

        try:
            return parse_quantity(raw, "rate")
        except (UnitError, TypeError, ValueError):
            return None


def load_axis(results: RunResults) -> LoadAxis | None:
    """The swept field that sets the load (an arrival rate or a closed loop's clients), if any."""
    keys = {k for p in results.points for k in p.get("params", {})}
    for key in sorted(keys):
        last = key.strip().split(".")[-1]
        if "arrival" in key and last == "rate":
            return LoadAxis(key, "arrival rate (requests/s)", "rate")
        if "arrival" in key and last == "clients":
            return LoadAxis(key, "clients (closed loop)", "clients")
    return None


@dataclass(frozen=True)
class Row:
    """One system at one sweep point: ``params`` as written, ``load`` the swept load as a number
    (None without one), ``group`` the other swept fields (a label, "" when none), ``flags``."""

    point: int
    system: str
    params: dict[str, Any]
    load: float | None
    group: str
    summary: dict[str, Any]

    @property
    def flags(self) -> list[str]:
        return list(self.summary.get("flags") or [])

    @property
    def slo_met(self) -> bool | None:
        """All SLO thresholds met (None: the scenario sets none)."""
        met = self.summary.get("slo_met") or {}
        return all(bool(v) for v in met.values()) if met else None


def rows(results: RunResults) -> list[Row]:
    """Every (point, system), in sweep order then system order."""
    axis = load_axis(results)
    out = []
    for k, p in enumerate(results.points):
        params = dict(p.get("params") or {})
        load = axis.value(params.get(axis.key)) if axis else None
        group = ", ".join(f"{key} = {v}" for key, v in params.items() if axis is None or key != axis.key)
        for system in results.systems:
            out.append(Row(int(p.get("index", k)), system, params, load, group, p["systems"][system]))
    return out


def run_windows(results: RunResults) -> dict[tuple[str, int], tuple[float, float]]:
    """Each (system, point)'s measurement window, seconds, from its summary (``window``), or the
    run's configured one for results written before summaries carried their own."""
    s = results.summary
    default = (float(s["warmup_s"]), float(s["duration_s"]))
    out = {}
    for k, p in enumerate(results.points):
        for system, summary in p["systems"].items():
            window = summary.get("window") or {}
            out[(system, int(p.get("index", k)))] = (float(window.get("start_s", default[0])),
                                                     float(window.get("end_s", default[1])))
    return out


def window_phrase(results: RunResults) -> str:
    """The window in words (:func:`kvsim.sim.result.window_phrase`), from the saved summaries."""
    from kvsim.sim.result import window_phrase as phrase

    s = results.summary
    windows = list(run_windows(results).values())
    return phrase(float(s["warmup_s"]), float(s["duration_s"]), s.get("warmup") == "mser5",
                  [start for start, _ in windows], [end for _, end in windows])


def saturation(series: list[Row]) -> Row | None:
    """The first row, in increasing load, that is flagged ``unstable`` or misses its SLO: where the
    system stops keeping up. ``series`` is one system's rows of one group."""
    for row in sorted((r for r in series if r.load is not None), key=lambda r: r.load):
        if "unstable" in row.flags or row.slo_met is False:
            return row
    return None
