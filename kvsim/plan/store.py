"""Finished sweep tasks on disk: ``OUT/points/<key>/``, one folder per task (docs/results.md).

A folder holds

- ``requests.parquet``: the task's request records, one row per request, ``system`` first;
- ``summary.parquet``: one row per system, the flat metrics of ``RunResult.summary_frame``;
- ``point.json``: what the task was (point index, params, replica, seed, key, kvsim version)
  and each system's summary as in ``summary.json``;
- ``inputs.json``: everything hashed into the key (the resolved point scenario, catalog parts,
  trace digests, seed), so two keys can be diffed to see why a point ran again;
- ``runs.json``: what rebuilds the full result (tables, studies) without running again, as
  data (:data:`RUNS_FORMAT`): each system's summary, counters and its small sampled tables
  (tier occupancy, links, storage, controller decisions and switches: a few hundred rows at
  most); the request records, the one large table, stay in ``requests.parquet``. A run's
  sizing is not stored: it is worked out again from the scenario (for ``layout: best``, at the
  layout the summary names), as it was before the run;
- ``done.json``: the completion marker, written last: the task's key and the SHA-256 of every
  other file, so a file changed or damaged since (a bit flip, a copy from another point, an
  edit) is caught before anything is read from it.

Every file is written to a temporary file in the same folder and renamed into place
(``os.replace``, atomic on POSIX), and the marker only after all of them: a folder without
the marker is unfinished (its process was killed) and the task runs again, overwriting it.

A results folder is data that may come from elsewhere (shared, copied, edited): nothing in it
is executed or unpickled. Reading a point back checks every file against the format and the
task; a point that fails is reported (:class:`StoredPointError`, one line) and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim._version import __version__
from kvsim.atomic import TEMPORARY, sha256_of, write_atomic
from kvsim.input_files import InputFileError, read_json
from kvsim.metrics.records import RequestRecords
from kvsim.metrics.summary import LATENCY_KEYS
from kvsim.plan.tasks import SweepTask
from kvsim.scenario.load import Scenario
from kvsim.sim.layout_search import resolve_choice, searches_layout
from kvsim.sim.result import RunResult, SystemRun
from kvsim.sim.sizing import SizingError, SystemSizing, size_system

__all__ = ["PointStore", "StoredPointError", "MARKER", "RUNS_FORMAT", "seal", "store_root_problem", "json_default"]

MARKER = "done.json"
_KEY = re.compile(r"[0-9a-f]{8,64}")  # a task key (kvsim.plan.tasks.KEY_CHARS hex digits)
RUNS_FORMAT = 1
"""Version of ``runs.json``'s layout. 1: ``{"format", "kvsim_version", "key", "runs": [...]}``,
each run its ``system``, ``summary``, counters and :data:`TABLES`."""

TABLES = ("timeseries", "links", "storage", "decisions", "switches")
"""The per-run tables kept in ``runs.json``: lists of rows (objects of scalars)."""

_COUNTERS = {"in_system_mean": float, "iterations": int, "busy_s": float, "wall_s": float}
class StoredPointError(Exception):
    """A stored point cannot be read back; the message says which file and why."""


def _write_text(path: Path, text: str) -> None:
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def store_root_problem(root: Path, what: str) -> str | None:
    """Why kvsim cannot keep its ``what`` (points, probes) in the folder ``root``, or None: it
    exists and is not a folder, or it is a link (which could lead outside the results folder)."""
    if root.is_symlink() or (root.exists() and not root.is_dir()):
        kind = "a link" if root.is_symlink() else "not a folder"
        return (f"cannot keep {what} in {root}: it is {kind} (kvsim keeps each finished one there, in a folder of "
                f"its own): move it away, or give another --out")
    return None


def json_default(value: Any) -> Any:
    """numpy scalars as Python numbers (``json`` knows float64 but not int64 or bool_)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON data")


class PointStore:
    """The ``points/`` folder of a results folder."""

    def __init__(self, out: str | Path):
        self.root = Path(out) / "points"

    def folder(self, key: str) -> Path:
        return self.root / key

    def relative(self, key: str) -> str:
        return f"points/{key}"

    def done(self, key: str) -> bool:
        """The task's folder says it is complete: its marker exists (whether it holds up is
        :meth:`load`'s to say; a folder without one is unfinished, its writer killed)."""
        marker = self.folder(key) / MARKER
        return marker.exists() or marker.is_symlink()

    def save(self, scenario, task: SweepTask, runs: list[SystemRun], inputs: dict[str, Any] | None = None) -> Path:
        """Write a finished task's folder; the marker last."""
        folder = self.folder(task.key)
        _make_room(folder)
        frames = []
        for run in runs:
            frame = run.records.to_frame()
            frame.insert(0, "system", run.system)
            frames.append(frame)
        requests = pd.concat(frames, ignore_index=True)
        write_atomic(folder / "requests.parquet", lambda p: requests.to_parquet(p, index=False))
        summary = _parquet_safe(RunResult.from_runs(scenario, task.seed, runs).summary_frame(replicas=True))
        write_atomic(folder / "summary.parquet", lambda p: summary.to_parquet(p, index=False))
        identity = {"key": task.key, "kvsim_version": __version__, "index": task.index, "params": task.params,
                    "replica": task.replica, "seed": task.seed, "systems": [r.system for r in runs],
                    "wall_s": sum(r.wall_s for r in runs), "summaries": {r.system: r.summary for r in runs}}
        _write_text(folder / "point.json", json.dumps(identity, indent=1, default=str) + "\n")
        if inputs is not None:
            _write_text(folder / "inputs.json", json.dumps(inputs, indent=1, sort_keys=True, default=str) + "\n")
        stored = {"format": RUNS_FORMAT, "kvsim_version": __version__, "key": task.key,
                  "runs": [_run_data(r) for r in runs]}
        # NaN and infinities stay numbers (Python's JSON tokens): a sampled table may hold them
        _write_text(folder / "runs.json", json.dumps(stored, default=json_default, separators=(",", ":")) + "\n")
        seal(folder, task.key)
        return folder

    def try_load(self, scenario: Scenario, task: SweepTask) -> tuple[list[SystemRun] | None, str | None]:
        """:meth:`load`, or ``(None, why)`` if the folder cannot be read back (damaged, foreign,
        removed by hand): the task then runs again, and the caller says so."""
        try:
            return self.load(scenario, task), None
        except StoredPointError as exc:
            return None, str(exc)

    def load(self, scenario: Scenario, task: SweepTask) -> list[SystemRun]:
        """The runs of a finished task, records read back from ``requests.parquet`` bit for bit,
        labelled with ``task``'s point index and params (a reordered sweep keeps its points).

        Raises
        ------
        StoredPointError
            A file is missing, unreadable or not what this kvsim writes for ``task``.
        """
        folder = self.folder(task.key)
        point = scenario.points[task.index]
        _check_seal(folder, task.key)
        data = _read_json(folder / "runs.json")
        _check_header(data, task)
        systems = list(point.spec.systems)
        stored_systems = [r.get("system") if isinstance(r, dict) else None for r in data["runs"]]
        if stored_systems != systems:
            raise StoredPointError(f"runs.json: holds systems {stored_systems}, the point has {systems}")
        try:
            requests = pd.read_parquet(folder / "requests.parquet")
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds for a damaged file
            raise StoredPointError(f"requests.parquet: {_reason(exc)}") from None
        by_system = _records_by_system(requests, systems)
        runs = []
        for entry in data["runs"]:
            name = entry["system"]
            if _records_sha256(by_system[name]) != entry["records_sha256"]:
                raise StoredPointError(f"requests.parquet: the records of system {name!r} are not the ones its run "
                                       f"wrote (their SHA-256 is not runs.json's)")
            run = _run_from_data(entry, self._sizing(scenario, task, name, entry), by_system[name])
            run.point_index, run.params, run.replica, run.seed = task.index, dict(task.params), task.replica, task.seed
            runs.append(run)
        return runs

    @staticmethod
    def _sizing(scenario: Scenario, task: SweepTask, name: str, entry: dict[str, Any]) -> SystemSizing:
        """System ``name``'s sizing at the task's point, as the run had it."""
        point = scenario.points[task.index]
        catalogs = scenario.catalogs_for(point)
        try:
            if not searches_layout(point.spec, name):
                return size_system(point.spec, name, catalogs)
            search = entry["summary"].get("layout_search")
            chosen = search.get("chosen") if isinstance(search, dict) else None
            sizing = resolve_choice(point.spec, name, chosen, catalogs) if isinstance(chosen, str) else None
            if sizing is not None:
                return sizing
        except SizingError as exc:
            raise StoredPointError(f"system {name!r} cannot be sized: {exc.message}") from None
        raise StoredPointError(f"runs.json: system {name!r} names no layout it could run ({chosen!r})")

    def stale_temporaries(self) -> list[Path]:
        """Temporary files left by a process killed while writing (safe to delete: the marker
        of their folder is missing or was written after them from complete files): regular
        files named as :func:`kvsim.atomic.write_atomic` names them, in point folders that are
        folders, not links (a link could lead anywhere outside the results folder)."""
        found: list[Path] = []
        if self.root.is_symlink() or not self.root.is_dir():
            return found
        for folder in os.scandir(self.root):
            if not _KEY.fullmatch(folder.name) or not folder.is_dir(follow_symlinks=False):
                continue
            found += [Path(entry.path) for entry in os.scandir(folder.path)
                      if TEMPORARY.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)]
        return sorted(found)


SEALED = ("requests.parquet", "summary.parquet", "point.json", "runs.json")
"""The files of a folder whose SHA-256 the marker holds (with ``inputs.json`` when written)."""
MARKER_FORMAT = 1


def _make_room(folder: Path) -> None:
    """``folder`` as a folder kvsim can write its files into: no marker (until the new one), and
    nothing in the way of a file it writes (a folder, a pipe or a device of that name, left by
    hand or by another tool, is removed; a file or a link is replaced by the rename itself)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / MARKER
    if marker.is_file() or marker.is_symlink():  # first: a folder being rewritten is unfinished
        marker.unlink()
    for name in (*SEALED, "inputs.json", MARKER):
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() and not path.is_file() and not path.is_symlink():
            path.unlink()


def seal(folder: Path, key: str) -> None:
    """Write ``folder``'s marker: ``key`` and the SHA-256 of its files, the last file written."""
    names = [n for n in (*SEALED, "inputs.json") if (folder / n).is_file()]
    marker = {"format": MARKER_FORMAT, "key": key, "finished": time.time(),
              "sha256": {name: sha256_of(folder / name) for name in names}}
    _write_text(folder / MARKER, json.dumps(marker, indent=1) + "\n")


def _check_seal(folder: Path, key: str) -> None:
    marker = _read_json(folder / MARKER)
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT or not isinstance(
            marker.get("sha256"), dict):
        raise StoredPointError(f"{MARKER}: not a marker this kvsim writes (format {MARKER_FORMAT})")
    if marker.get("key") != key:
        raise StoredPointError(f"{MARKER}: the marker of point {marker.get('key')!r}, not {key}")
    sealed = marker["sha256"]
    for name in SEALED:
        if name not in sealed:
            raise StoredPointError(f"{MARKER}: no SHA-256 of {name}")
    for name, expected in sealed.items():
        if name not in (*SEALED, "inputs.json"):  # never a path from the file: only kvsim's own names
            raise StoredPointError(f"{MARKER}: names a file kvsim does not write ({str(name)[:60]!r})")
        path = folder / name
        if not path.is_file():
            raise StoredPointError(f"{name}: missing")
        try:
            actual = sha256_of(path)
        except OSError as exc:
            raise StoredPointError(f"{name}: cannot be read ({_reason(exc)})") from None
        if actual != expected:
            raise StoredPointError(f"{name}: changed since it was written (its SHA-256 is not the marker's)")


def _run_data(run: SystemRun) -> dict[str, Any]:
    """What ``runs.json`` keeps of ``run``: everything but its records (only their digest),
    sizing and labels."""
    return {"system": run.system, "summary": run.summary, "records_sha256": _records_sha256(run.records),
            **{name: getattr(run, name) for name in _COUNTERS}, **{name: getattr(run, name) for name in TABLES}}


def _records_sha256(records: RequestRecords) -> str:
    """SHA-256 over the records, bit for bit: the records read back must be the run's own (not
    another point's, not edited), whatever the marker says."""
    digest = hashlib.sha256(str(records.n).encode())
    for name in RequestRecords.fields:
        column = records.column(name)
        if column.dtype.kind == "f":  # Parquet keeps a NaN as a null: any NaN's bits come back as np.nan's
            column = np.where(np.isnan(column), np.nan, column)
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(column).tobytes())
    return digest.hexdigest()


def _read_json(path: Path) -> Any:
    """The data of one of a point's JSON files (a regular file within a size limit, parsed
    without a crash: :func:`kvsim.input_files.read_json`), or :class:`StoredPointError`."""
    try:
        return read_json(path, "file kvsim writes")
    except InputFileError as exc:
        raise StoredPointError(f"{path.name}: {exc.problem}" + (f" (line {exc.line})" if exc.line else "")) from None


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _check_header(data: Any, task: SweepTask) -> None:
    if not isinstance(data, dict):
        raise StoredPointError("runs.json: not an object")
    if data.get("format") != RUNS_FORMAT:
        raise StoredPointError(f"runs.json: format {data.get('format')!r}, this kvsim reads format {RUNS_FORMAT}")
    if data.get("kvsim_version") != __version__:
        raise StoredPointError(f"runs.json: written by kvsim {data.get('kvsim_version')!r}, this is {__version__}")
    if data.get("key") != task.key:
        raise StoredPointError(f"runs.json: the runs of point {data.get('key')!r}, not {task.key}")
    if not isinstance(data.get("runs"), list):
        raise StoredPointError("runs.json: no list of runs")
    for k, entry in enumerate(data["runs"]):
        problem = _run_problem(entry)
        if problem is not None:
            raise StoredPointError(f"runs.json: run {k}: {problem}")


def _run_problem(entry: Any) -> str | None:
    """What is wrong with one stored run's data (None: nothing)."""
    if not isinstance(entry, dict):
        return "not an object"
    expected = {"system", "summary", "records_sha256", *_COUNTERS, *TABLES}
    if set(entry) != expected:
        return f"fields {sorted(set(entry) ^ expected)} missing or unknown"
    if not isinstance(entry["system"], str) or not isinstance(entry["summary"], dict) or not isinstance(
            entry["records_sha256"], str):
        return "system, summary or records_sha256 of the wrong type"
    problem = summary_problem(entry["summary"])
    if problem is not None:
        return f"summary: {problem}"
    for name, kind in _COUNTERS.items():
        value = entry[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
            return f"{name} is not a number of the right kind"
        if not math.isfinite(value) or value < 0:
            return f"{name} is {value!r}"
    for name in TABLES:
        rows = entry[name]
        if not isinstance(rows, list) or not all(isinstance(row, dict) and all(
                value is None or isinstance(value, (str, int, float)) for value in row.values()) for row in rows):
            return f"{name} is not a list of rows of scalars"
    return None


_SUMMARY_NUMBERS = ("goodput_requests_per_s", "gpu_busy_fraction", "input_tokens_per_s", "kv_bytes_peak",
                    "kv_utilization_mean", "kv_utilization_peak", "output_tokens_per_s", "requests_per_s",
                    "total_tokens_per_s")
_SUMMARY_COUNTS = ("preemptions", "requests_aborted", "requests_arrived", "requests_completed", "requests_rejected",
                   "requests_undrained", "requests_unfinished")
_SUMMARY_BLOCKS = ("cost", "gpu_time_share", "routing", "slo_met", "steady_state", "window")
_SUMMARY_OPTIONAL = {"cache": dict, "engine_backend": str, "failures": dict, "layout_search": dict, "lora": dict,
                     "pd": dict, "rejected_note": str}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def summary_problem(summary: dict[str, Any]) -> str | None:
    """What is wrong with a stored system summary, or None: the keys every summary has
    (:mod:`kvsim.metrics.summary`, :func:`kvsim.sim.collect.collect`) with their types, the
    optional blocks as objects, nothing else. A summary sealed again over an edit still reaches
    the tables, reports and studies only in the shape they read."""
    expected = {*_SUMMARY_NUMBERS, *_SUMMARY_COUNTS, *_SUMMARY_BLOCKS, *LATENCY_KEYS, "flags", "bound"}
    missing = sorted(expected - set(summary))
    unknown = sorted(set(summary) - expected - set(_SUMMARY_OPTIONAL))
    if missing or unknown:
        return f"{'no ' + ', '.join(missing[:3]) if missing else 'unknown ' + ', '.join(map(repr, unknown[:3]))}"
    for key in _SUMMARY_NUMBERS:
        if not _number(summary[key]):
            return f"{key} is not a number"
    for key in _SUMMARY_COUNTS:
        if not isinstance(summary[key], int) or isinstance(summary[key], bool) or summary[key] < 0:
            return f"{key} is not a count"
    for key in LATENCY_KEYS:
        stats = summary[key]
        if not isinstance(stats, dict) or set(stats) != {"mean", "p50", "p90", "p99"} or not all(
                v is None or _number(v) for v in stats.values()):
            return f"{key} is not mean, p50, p90 and p99 in seconds"
    if not isinstance(summary["flags"], list) or not all(isinstance(f, str) for f in summary["flags"]):
        return "flags is not a list of flags"
    if not isinstance(summary["bound"], str):
        return "bound is not a text"
    for key in _SUMMARY_BLOCKS:
        if not isinstance(summary[key], dict):
            return f"{key} is not an object"
    window = summary["window"]
    if not (_number(window.get("start_s")) and _number(window.get("end_s")) and isinstance(window.get("warmup"), str)):
        return "window is not its start_s, end_s and warmup"
    if not all(isinstance(v, bool) for v in summary["slo_met"].values()):
        return "slo_met is not a verdict per objective"
    for key, kind in _SUMMARY_OPTIONAL.items():
        if key in summary and not isinstance(summary[key], kind):
            return f"{key} is not {'an object' if kind is dict else 'a text'}"
    return None


def _records_by_system(requests: pd.DataFrame, systems: list[str]) -> dict[str, RequestRecords]:
    missing = [name for name in ("system", *RequestRecords.fields) if name not in requests.columns]
    if missing:
        raise StoredPointError(f"requests.parquet: no column {missing[0]!r}")
    unknown = sorted(set(map(str, requests["system"].unique())) - set(systems))
    if unknown:
        raise StoredPointError(f"requests.parquet: rows of systems the point does not have: {unknown}")
    by_system = {name: frame for name, frame in requests.groupby("system", sort=False)}
    return {name: _records(by_system.get(name, requests.iloc[:0])) for name in systems}


def _records(frame: pd.DataFrame) -> RequestRecords:
    records = RequestRecords(len(frame))
    records.n = len(frame)
    for name in RequestRecords.fields:
        column = getattr(records, name)
        try:
            setattr(records, name, np.ascontiguousarray(frame[name].to_numpy(dtype=column.dtype)))
        except (TypeError, ValueError) as exc:
            raise StoredPointError(f"requests.parquet: column {name!r} is not {column.dtype} ({_reason(exc)})") from None
    if "retries" in frame.columns and "retry_lost_s" in frame.columns and frame["retries"].notna().all() \
            and len(frame):  # a run with node failures (kvsim.sim.failures): its two more columns
        records.track_retries()
        try:
            records.retries = np.ascontiguousarray(frame["retries"].to_numpy(dtype=np.int64))
            records.retry_lost_s = np.ascontiguousarray(frame["retry_lost_s"].to_numpy(dtype=np.float64))
        except (TypeError, ValueError) as exc:
            raise StoredPointError(f"requests.parquet: the retry columns are not numbers ({_reason(exc)})") from None
    if "migrations" in frame.columns and frame["migrations"].notna().all() and len(frame):
        records.track_migrations()  # a run that migrated KV on a switch (kvsim.serving.migration)
        try:
            records.migrations = np.ascontiguousarray(frame["migrations"].to_numpy(dtype=np.int64))
        except (TypeError, ValueError) as exc:
            raise StoredPointError(f"requests.parquet: column 'migrations' is not int64 ({_reason(exc)})") from None
    return records


def _run_from_data(entry: dict[str, Any], sizing: SystemSizing, records: RequestRecords) -> SystemRun:
    return SystemRun(system=entry["system"], point_index=0, params={}, sizing=sizing, records=records,
                     summary=entry["summary"], **{name: _COUNTERS[name](entry[name]) for name in _COUNTERS},
                     **{name: entry[name] for name in TABLES})


def _parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Nested summary values (routing, layout search, PD blocks: dicts and lists) as JSON text, so
    any summary writes to Parquet (an empty dict has no Parquet type); numbers stay columns."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object and frame[column].map(lambda v: isinstance(v, (dict, list, tuple))).any():
            frame[column] = frame[column].map(lambda v: json.dumps(v, default=str) if v is not None else None)
    return frame
