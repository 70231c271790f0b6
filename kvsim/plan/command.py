"""``kvsim plan SCENARIO --out DIR``: run a plan with probes in parallel worker processes, keep
every finished probe on disk so an interrupted plan resumes where it stopped, and write the
answer and its report.

A probe is stored as ``DIR/probes/<hash>.json``, the hash taken over everything that decides its
outcome: the probe's own scenario (the system scaled, the rate set), the SLO and the kvsim
version. Re-running the plan reads the probes it finds instead of running them again; a probe
whose inputs changed has another hash and runs. Each file is written to a temporary name and
renamed, so a killed worker leaves no half-written probe.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from kvsim._version import __version__
from kvsim.plan.answer import catalog_unit_cost, plan_answer
from kvsim.plan.planner import Probe, plan, probe_scenario
from kvsim.plan.search import ProbeOutcome
from kvsim.scenario.load import Scenario

__all__ = ["run_plan", "probe_key"]


def probe_key(scenario: Scenario, probe: Probe) -> str:
    """Content hash of everything that decides ``probe``'s outcome (hex, 24 characters)."""
    scaled = probe_scenario(scenario, probe)
    text = json.dumps({"scenario": scaled.raw, "slo": scenario.spec.slo.model_dump(mode="json"),
                       "kvsim": __version__}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class _StoredMap:
    """``map_probes`` for the planner: probes already on disk are read back, the others run in a
    pool of worker processes (or in this process with one worker) and are stored as they finish."""

    def __init__(self, scenario: Scenario, folder: Path, workers: int):
        self.scenario = scenario
        self.folder = folder
        self.workers = workers
        self.reused = 0
        self.ran = 0
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()  # the planner calls from one thread per candidate

    def __enter__(self) -> "_StoredMap":
        if self.workers > 1:
            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def __call__(self, function: Callable[[Probe], ProbeOutcome], probes: Sequence[Probe]) -> Iterable[ProbeOutcome]:
        keys = [probe_key(self.scenario, p) for p in probes]
        outcomes: dict[int, ProbeOutcome] = {}
        todo = []
        for k, key in enumerate(keys):
            path = self.folder / f"{key}.json"
            if path.is_file():
                stored = json.loads(path.read_text(encoding="utf-8"))
                outcomes[k] = ProbeOutcome(stored["rate_per_s"], stored["meets"], stored["reason"], stored["detail"])
                with self._lock:
                    self.reused += 1
            else:
                todo.append(k)
        if self._pool is not None:  # even one probe: other candidates' threads share this process
            results = self._pool.map(function, [probes[k] for k in todo])
        else:
            results = map(function, [probes[k] for k in todo])
        for k, outcome in zip(todo, results):
            self._store(keys[k], probes[k], outcome)
            outcomes[k] = outcome
            with self._lock:
                self.ran += 1
        return [outcomes[k] for k in range(len(probes))]

    def _store(self, key: str, probe: Probe, outcome: ProbeOutcome) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {"system": probe.system, "units": probe.units, "rate_per_s": outcome.rate_per_s,
                  "meets": outcome.meets, "reason": outcome.reason, "detail": outcome.detail}
        temporary = self.folder / f".{key}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(record, indent=1, allow_nan=False, default=_plain) + "\n", encoding="utf-8")
        os.replace(temporary, self.folder / f"{key}.json")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON-able")


def run_plan(scenario: Scenario, out_dir: str | Path, workers: int | None = None,
             log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the plan of ``scenario``, store its probes under ``out_dir/probes`` and write
    ``plan.json``, ``plan.md`` and ``plan.html`` (with figures) into ``out_dir``.

    Parameters
    ----------
    scenario : Scenario
        A validated scenario with a ``plan:`` section.
    out_dir : path
        Where the results go; probes found there from an earlier run with the same inputs are reused.
    workers : int, optional
        Worker processes (default: all cores). Up to this many candidates are planned at once.
    log : callable, optional
        Receives one line per finished probe (default: standard error).

    Returns
    -------
    dict
        The plan's answer (the content of ``plan.json``).
    """
    from kvsim.report.plan_report import write_plan_report

    out = Path(out_dir)
    workers = max(1, workers if workers is not None else (os.cpu_count() or 1))
    emit = log or (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.monotonic()
    count = 0

    def on_probe(probe: Probe, outcome: ProbeOutcome) -> None:
        nonlocal count
        count += 1
        verdict = "meets the SLO" if outcome.meets else f"fails: {outcome.reason}"
        emit(f"[{time.monotonic() - started:7.1f} s] probe {count}: {probe.system} x{probe.units} at "
             f"{probe.rate_per_s:.4g} requests/s {verdict}")

    with _StoredMap(scenario, out / "probes", workers) as stored:
        # candidates in parallel, and each rate search probes as many rates a round as there are
        # workers: the queue stays full to the last candidate, and the probes depend on the
        # number of workers only, never on timing (a rerun reuses every probe)
        result = plan(scenario, map_probes=stored, on_probe=on_probe, concurrent=workers, parallel=workers)
    answer = plan_answer(result, catalog_unit_cost(scenario))
    write_plan_report(answer, out)
    emit(f"plan done in {time.monotonic() - started:.1f} s: {_count(stored.ran, 'probe')} run, "
         f"{stored.reused} reused from {out / 'probes'}")
    return answer
