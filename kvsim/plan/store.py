"""Finished sweep tasks on disk: ``OUT/points/<key>/``, one folder per task (docs/results.md).

A folder holds

- ``requests.parquet``: the task's request records, one row per request, ``system`` first;
- ``summary.parquet``: one row per system, the flat metrics of ``RunResult.summary_frame``;
- ``point.json``: what the task was (point index, params, replica, seed, key, kvsim version)
  and each system's summary as in ``summary.json``;
- ``inputs.json``: everything hashed into the key (the resolved point scenario, catalog parts,
  trace digests, seed), so two keys can be diffed to see why a point ran again;
- ``runs.pickle``: the runs without their records (sizing, time series, links, ...), to rebuild
  the full result (tables, studies) without running again; written by the same kvsim version
  that reads it, since the version is part of the key;
- ``done.json``: the completion marker, written last.

Every file is written to a temporary file in the same folder and renamed into place
(``os.replace``, atomic on POSIX), and the marker only after all of them: a folder without
the marker is unfinished (its process was killed) and the task runs again, overwriting it.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim._version import __version__
from kvsim.atomic import write_atomic
from kvsim.metrics.records import RequestRecords
from kvsim.plan.tasks import SweepTask
from kvsim.sim.result import RunResult, SystemRun

__all__ = ["PointStore", "MARKER"]

MARKER = "done.json"


def _write_text(path: Path, text: str) -> None:
    write_atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


class PointStore:
    """The ``points/`` folder of a results folder."""

    def __init__(self, out: str | Path):
        self.root = Path(out) / "points"

    def folder(self, key: str) -> Path:
        return self.root / key

    def relative(self, key: str) -> str:
        return f"points/{key}"

    def done(self, key: str) -> bool:
        """The task's folder is complete (its marker exists)."""
        return (self.folder(key) / MARKER).is_file()

    def save(self, scenario, task: SweepTask, runs: list[SystemRun], inputs: dict[str, Any] | None = None) -> Path:
        """Write a finished task's folder; the marker last."""
        folder = self.folder(task.key)
        folder.mkdir(parents=True, exist_ok=True)
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
        bare = [dataclasses.replace(r, records=None) for r in runs]
        write_atomic(folder / "runs.pickle", lambda p: p.write_bytes(pickle.dumps(bare, protocol=5)))
        _write_text(folder / MARKER, json.dumps({"key": task.key, "finished": time.time()}) + "\n")
        return folder

    def try_load(self, task: SweepTask) -> list[SystemRun] | None:
        """:meth:`load`, or None if the folder cannot be read back (damaged files, removed
        by hand): the task then runs again."""
        try:
            return self.load(task)
        except Exception:  # noqa: BLE001 - any unreadable folder is one to recompute, not to fail on
            return None

    def load(self, task: SweepTask) -> list[SystemRun]:
        """The runs of a finished task, records read back from ``requests.parquet`` bit for bit,
        labelled with ``task``'s point index and params (a reordered sweep keeps its points)."""
        folder = self.folder(task.key)
        runs: list[SystemRun] = pickle.loads((folder / "runs.pickle").read_bytes())
        requests = pd.read_parquet(folder / "requests.parquet")
        by_system = {name: frame for name, frame in requests.groupby("system", sort=False)}
        for run in runs:
            run.records = _records(by_system.get(run.system, requests.iloc[:0]))
            run.point_index, run.params, run.replica, run.seed = task.index, dict(task.params), task.replica, task.seed
        return runs

    def stale_temporaries(self) -> list[Path]:
        """Temporary files left by a process killed while writing (safe to delete: the marker
        of their folder is missing or was written after them from complete files)."""
        return sorted(self.root.glob("*/.*.tmp")) if self.root.is_dir() else []


def _records(frame: pd.DataFrame) -> RequestRecords:
    records = RequestRecords(len(frame))
    records.n = len(frame)
    for name in RequestRecords.fields:
        column = getattr(records, name)
        setattr(records, name, np.ascontiguousarray(frame[name].to_numpy(dtype=column.dtype)))
    return records


def _parquet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """Nested summary values (routing, layout search, PD blocks: dicts and lists) as JSON text, so
    any summary writes to Parquet (an empty dict has no Parquet type); numbers stay columns."""
    frame = frame.copy()
    for column in frame.columns:
        if frame[column].dtype == object and frame[column].map(lambda v: isinstance(v, (dict, list, tuple))).any():
            frame[column] = frame[column].map(lambda v: json.dumps(v, default=str) if v is not None else None)
    return frame
