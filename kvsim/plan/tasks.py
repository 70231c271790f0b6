"""Sweep tasks: one per (sweep point, replica), named by a content hash of what it computes.

A task runs every system of one point (they share the point's drawn request stream) with one
seed (:func:`kvsim.sim.run.point_seed`). Its key hashes everything that decides its result: the
resolved point scenario (every field, defaults filled in), the catalog parts its systems use,
the contents of trace files it reads, its seed and replica, and the kvsim version and a digest
of kvsim's own code (:func:`code_fingerprint`). Equal keys
mean equal results, so a finished task is never run twice, and a task whose inputs changed gets
a new key and runs again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim._version import __version__
from kvsim.escape import terminal_text
from kvsim.scenario.load import Scenario, ScenarioPoint
from kvsim.sim.result import SystemRun
from kvsim.sim.run import RunProgress, point_seed, run_point

__all__ = ["SweepTask", "sweep_tasks", "task_inputs", "code_fingerprint", "run_task", "KEY_CHARS"]

KEY_CHARS = 20
"""Hex characters of a task key (80 bits: collisions are not a concern at any sweep size)."""


@dataclass(frozen=True)
class SweepTask:
    """One unit of work: every system of point ``index``, replica ``replica``, seed ``seed``."""

    index: int
    replica: int
    seed: int
    key: str
    params: dict[str, Any]
    weight: float  # relative cost, for the ETA (simulated seconds x systems, or requests x systems)

    def label(self) -> str:
        """``point 3 [rate=20/s] replica 1`` (the replica only when there are several)."""
        # a swept text may hold control characters: shown escaped in every line that names the task
        shown = terminal_text(", ".join(f"{k.split('.')[-1]}={v}" for k, v in self.params.items()))
        text = f"point {self.index}" + (f" [{shown}]" if shown else "")
        return text + (f" replica {self.replica}" if self.replica else "")


def _catalog_parts(scenario: Scenario, point: ScenarioPoint) -> dict[str, dict[str, Any]]:
    """The catalog entries the point's systems use, as JSON data."""
    spec, catalogs = point.spec, scenario.catalogs_for(point)
    parts: dict[str, dict[str, Any]] = {"models": {}, "nodes": {}, "accelerators": {}, "pool_nodes": {}}

    def add(family: str, catalog, name: str) -> None:
        if name in catalog and name not in parts[family]:
            parts[family][name] = catalog[name].model_dump(mode="json")

    for name, system in spec.systems.items():
        add("models", catalogs.models, spec.system_model(name))
        for pool in system.pool_specs().values():
            add("nodes", catalogs.nodes, pool.node)
            if pool.node in catalogs.nodes:
                add("accelerators", catalogs.accelerators, catalogs.nodes[pool.node].accelerator)
        cache = system.kv_cache
        if cache is not None and cache.remote is not None:
            add("pool_nodes", catalogs.pool_nodes, cache.remote.pool_node)
    return parts


def _file_digests(scenario: Scenario, spec_json: dict[str, Any], cache: dict[Path, str]) -> dict[str, str]:
    """SHA-256 of every trace file the point reads (their contents decide the requests); each file
    is read once per ``cache``."""
    arrival = spec_json.get("workload", {}).get("arrival", {})
    files = [a.get("file") for a in [arrival, *[p.get("arrival", {}) for p in arrival.get("phases", []) or []]]
             if isinstance(a, dict) and a.get("kind") == "trace"]
    digests = {}
    for name in files:
        if not name:
            continue
        path = Path(name)
        if not path.is_absolute() and scenario.base_dir is not None:
            path = scenario.base_dir / path
        if path not in cache:
            digest = hashlib.sha256()
            try:
                with open(path, "rb") as handle:
                    for chunk in iter(lambda: handle.read(1 << 20), b""):
                        digest.update(chunk)
            except OSError:
                continue  # the run reports an unreadable trace with its file and line
            cache[path] = digest.hexdigest()
        digests[str(name)] = cache[path]
    return digests


def code_fingerprint() -> str:
    """SHA-256 over the kvsim package's own source and data files (``*.py``, ``*.yaml``), by path.

    The version string alone does not change while the code does (a development checkout, a merge
    that moves numbers), and a stored point must not outlive the code that computed it.
    """
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(p for pattern in ("*.py", "*.yaml") for p in root.rglob(pattern)):
        digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def task_inputs(scenario: Scenario, point: ScenarioPoint, seed: int, replica: int,
                file_cache: dict[Path, str] | None = None, code: str | None = None) -> dict[str, Any]:
    """Everything a task's result depends on, as JSON data (hashed into its key).

    ``file_cache`` (path -> SHA-256) saves reading a trace again for each point that uses it;
    ``code`` is :func:`code_fingerprint` (computed here if not given).
    """
    spec_json = point.spec.model_dump(mode="json")
    return {
        "kvsim_version": __version__,
        "kvsim_code": code if code is not None else code_fingerprint(),
        "scenario": spec_json,
        "catalog": _catalog_parts(scenario, point),
        "files": _file_digests(scenario, spec_json, file_cache if file_cache is not None else {}),
        "seed": seed,
        "replica": replica,
    }


def task_key(inputs: dict[str, Any]) -> str:
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:KEY_CHARS]


def sweep_tasks(scenario: Scenario, seed: int | None = None, requests: dict[int, float | None] | None = None,
                file_cache: dict[Path, str] | None = None, cpu_s: dict[int, float] | None = None) -> list[SweepTask]:
    """Every task of ``scenario``, in (point, replica) order.

    ``seed`` overrides every point's root seed (``kvsim run --seed``). A task's weight (its share
    of the ETA) is, when every point has one, its CPU seconds by the cost model (``cpu_s``: point
    index -> CPU seconds of all its systems and replicas, :attr:`kvsim.plan.run_cost.RunCost.per_point_cpu_s`);
    else its estimated requests (``requests``: point index -> requests per system) x systems; else
    its simulated seconds x systems.
    """
    tasks = []
    file_cache = file_cache if file_cache is not None else {}
    code = code_fingerprint()
    priced = cpu_s is not None and all((cpu_s.get(p.index) or 0.0) > 0.0 for p in scenario.points)
    known = requests is not None and all(requests.get(p.index) is not None for p in scenario.points)
    for point in scenario.points:
        if priced:
            weight = cpu_s[point.index] / point.spec.replications
        else:
            per_system = requests[point.index] if known else point.spec.duration
            weight = max(float(per_system), 1e-9) * len(point.spec.systems)
        for replica in range(point.spec.replications):
            run_seed = point_seed(point, seed, replica)
            key = task_key(task_inputs(scenario, point, run_seed, replica, file_cache, code))
            tasks.append(SweepTask(point.index, replica, run_seed, key, dict(point.params), weight))
    return tasks


def run_task(scenario: Scenario, task: SweepTask, seed: int | None = None,
             tracker: RunProgress | None = None) -> list[SystemRun]:
    """Run one task (in whichever process or Dask worker it was sent to); ``seed`` is the
    sweep's root-seed override, if any (the task's own seed follows from it)."""
    point = scenario.points[task.index]
    return run_point(scenario, point, seed, task.replica, tracker=tracker)
