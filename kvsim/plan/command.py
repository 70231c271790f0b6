"""``kvsim plan SCENARIO --out DIR``: run a plan with probes in parallel worker processes, keep
every finished probe on disk so an interrupted plan resumes where it stopped, and write the
answer and its report.

A probe is stored as ``DIR/probes/<hash>.json``, the hash taken over everything that decides its
outcome, as a sweep keys its points: the probe's own resolved scenario (the system scaled, the
load set, the SLO), the catalog parts and trace files it reads, and kvsim's version and code. Re-running the plan reads the probes it finds instead of running them again; a probe
whose inputs changed has another hash and runs. Each file is written to a temporary name and
renamed, so a killed worker leaves no half-written probe.
"""

from __future__ import annotations

import copy
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from kvsim.atomic import write_atomic
from kvsim.crash import note_where
from kvsim.escape import terminal_text
from kvsim.input_files import InputFileError, read_json
from kvsim.plan.answer import catalog_unit_cost, plan_answer
from kvsim.plan.executor import MAX_ATTEMPTS, ExecutorError, dask_client, default_workers, watched_map, worker_pool
from kvsim.plan.planner import Probe, load_unit, plan, probe_scenario
from kvsim.plan.search import ProbeOutcome
from kvsim.plan.store import json_default, store_root_problem
from kvsim.plan.tasks import code_fingerprint, task_inputs, task_key
from kvsim.scenario.load import Scenario

__all__ = ["run_plan", "probe_key"]


def probe_key(scenario: Scenario, probe: Probe, code: str | None = None,
              file_cache: dict[Path, str] | None = None) -> str:
    """Content hash of everything that decides ``probe``'s outcome: the key a sweep gives its
    point (:func:`kvsim.plan.tasks.task_inputs`: the resolved scenario of the probe, SLO
    included, the catalog parts and trace files it reads, kvsim's version and its own code)."""
    scaled = probe_scenario(scenario, probe)
    point = scaled.points[0]
    return task_key(task_inputs(scaled, point, point.spec.seed, 0, file_cache, code))


class _StoredMap:
    """``map_probes`` for the planner: probes already on disk are read back, the others run in a
    pool of worker processes (or in this process with one worker) and are stored as they finish."""

    def __init__(self, scenario: Scenario, folder: Path, workers: int, dask: bool = False,
                 scheduler: str | None = None):
        self.scenario = scenario
        self.folder = folder
        self.workers = workers
        self.on_dask = dask or scheduler is not None
        self.scheduler = scheduler
        self._dask: Any = None  # the dask_client context, while open
        self._client: Any = None
        self.reused = 0
        self.ran = 0
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()  # the planner calls from one thread per candidate
        self._code = code_fingerprint()  # once: it reads every source file
        self._files: dict[Path, str] = {}

    def __enter__(self) -> _StoredMap:
        problem = store_root_problem(self.folder, "probes")
        if problem is not None:
            raise ExecutorError(problem)
        if self.on_dask:
            self._dask = dask_client(self.workers, self.scheduler)
            self._client = self._dask.__enter__()
        elif self.workers > 1:
            # forkserver (the sweep's context): the planner's threads must not be forked; the
            # workers exit when this process dies
            self._pool = worker_pool(self.workers)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        if self._dask is not None:
            self._dask.__exit__(*exc)

    def __call__(self, function: Callable[[Probe], ProbeOutcome], probes: Sequence[Probe],
                 scenario: Scenario | None = None) -> Iterable[ProbeOutcome]:
        """Outcomes of ``probes`` of the plan's scenario, or of ``scenario`` (the plan's with one
        figure changed: :mod:`kvsim.plan.sensitivity`), stored and read back in the same folder."""
        scenario = scenario or self.scenario
        keys = [probe_key(scenario, p, self._code, self._files) for p in probes]
        outcomes: dict[int, ProbeOutcome] = {}
        todo = []
        for k, key in enumerate(keys):
            path = self.folder / f"{key}.json"
            if path.is_file():
                try:
                    outcomes[k] = self._read(path, key, probes[k], scenario)
                except _StoredProbeError as exc:  # never recompute silently: say which probe and why
                    print(f"kvsim plan: stored probe {path} cannot be read: {exc}; recomputing", file=sys.stderr,
                          flush=True)
                    todo.append(k)
                    continue
                with self._lock:
                    self.reused += 1
            else:
                todo.append(k)
        if self._client is not None:  # a lost worker's probe is run again by the scheduler
            futures = [self._client.submit(function, probes[k], pure=False, retries=MAX_ATTEMPTS - 1) for k in todo]
            results: Iterable[ProbeOutcome] = (future.result() for future in futures)
        elif self._pool is not None:  # even one probe: other candidates' threads share this process
            results = watched_map(self._pool, function, [probes[k] for k in todo])  # never waits for ever
        else:
            results = map(function, [probes[k] for k in todo])
        results = iter(results)
        for k in todo:
            try:
                outcome = next(results)
            except BrokenProcessPool:  # killed (out of memory?): not a bug, and nothing finished is lost
                raise ExecutorError(f"a worker process died (out of memory? killed?) while running probes of "
                                    f"{probes[k].system}; finished probes are kept in {self.folder}: run the same "
                                    f"command again to resume") from None
            except Exception as exc:  # a bug in a probe: say which (the worker's traceback comes with it)
                probe = probes[k]
                note_where(exc, f"probe {probe.system} x{probe.units} at {probe.load:.6g} {load_unit(scenario)}")
                raise
            self._store(keys[k], probes[k], outcome, scenario)
            outcomes[k] = outcome
            with self._lock:
                self.ran += 1
        return [outcomes[k] for k in range(len(probes))]

    def _store(self, key: str, probe: Probe, outcome: ProbeOutcome, scenario: Scenario | None = None) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        record = {"format": PROBE_FORMAT, "key": key, "system": probe.system, "units": probe.units,
                  "load": outcome.load, "unit": load_unit(scenario or self.scenario), "meets": outcome.meets,
                  "reason": outcome.reason, "detail": outcome.detail}
        text = json.dumps(record, indent=1, allow_nan=False, default=json_default) + "\n"
        write_atomic(self.folder / f"{key}.json", lambda path: path.write_text(text, encoding="utf-8"))


    def _read(self, path: Path, key: str, probe: Probe, scenario: Scenario | None = None) -> ProbeOutcome:
        """A stored probe's outcome, checked against the format and ``probe`` (a results folder is
        data from anywhere: a file that is not what this kvsim wrote for ``probe`` is refused)."""
        try:
            stored = read_json(path, "probe", _MAX_PROBE_BYTES)
        except InputFileError as exc:
            raise _StoredProbeError(exc.problem + (f" (line {exc.line})" if exc.line else "")) from None
        if not isinstance(stored, dict):
            raise _StoredProbeError("not an object")
        if stored.get("format") != PROBE_FORMAT:
            raise _StoredProbeError(f"format {stored.get('format')!r}, this kvsim reads format {PROBE_FORMAT}")
        expected = {"key": key, "system": probe.system, "units": probe.units,
                    "unit": load_unit(scenario or self.scenario)}
        for name, value in expected.items():
            if stored.get(name) != value:
                raise _StoredProbeError(f"{name} is {stored.get(name)!r}, the probe's is {value!r}")
        load, meets, reason, detail = (stored.get(n) for n in ("load", "meets", "reason", "detail"))
        if isinstance(load, bool) or not isinstance(load, (int, float)) or load != probe.load:
            raise _StoredProbeError(f"load is {load!r}, the probe's is {probe.load!r}")
        if not isinstance(meets, bool) or not isinstance(reason, str) or not isinstance(detail, dict):
            raise _StoredProbeError("meets, reason or detail of the wrong type")
        problem = _detail_problem(detail)
        if problem is not None:
            raise _StoredProbeError(f"detail: {problem}")
        return ProbeOutcome(load, meets, reason, detail)


class _StoredProbeError(Exception):
    """A stored probe that cannot be used; the message says why."""


PROBE_FORMAT = 1
"""Version of a stored probe's layout (``probes/<key>.json``)."""
_MAX_PROBE_BYTES = 16 * 2**20


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _detail_problem(detail: dict[str, Any]) -> str | None:
    """What is wrong with a stored probe's ``detail`` (:func:`kvsim.plan.planner.probe`'s keys),
    or None: the answer and its report read every one of them."""
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        stats = detail.get(key)
        if stats is not None and not (isinstance(stats, dict) and all(
                isinstance(k, str) and (v is None or _number(v)) for k, v in stats.items())):
            return f"{key} is not a set of latency statistics"
    flags = detail.get("flags")
    if flags is not None and not (isinstance(flags, list) and all(isinstance(f, str) for f in flags)):
        return "flags is not a list of flags"
    for key in ("requests_per_s", "output_tokens_per_s", "requests_unfinished", "duration_s", "warmup_s", "replicas",
                "reruns", "wall_s", "stopped_at_s"):
        if detail.get(key) is not None and not _number(detail[key]):
            return f"{key} is not a number"
    if detail.get("unconfirmed") is not None and not isinstance(detail["unconfirmed"], str):
        return "unconfirmed is not text"
    return None


def _write_deployments(scenario: Scenario, answer: dict[str, Any], out: Path,
                       emit: Callable[[str], None]) -> list[dict[str, Any]]:
    """Write the deployment files (:func:`kvsim.plan.deploy.deployment_files`) of the cheapest
    candidate at each target load, at the units it needs there, under ``out/deploy/at-<load>/``;
    returns what was written, per target (``load``, ``system``, ``units``, ``files`` relative to
    ``out``, or ``problem`` where the system cannot be written as deployment files)."""
    from kvsim.plan.deploy import DeployError, deployment_files
    from kvsim.report.document import write_files

    written: list[dict[str, Any]] = []
    by_clients = load_unit(scenario) == "clients"
    for row in answer["answers"]:
        system = row["cheapest"]
        if system is None:
            continue
        chosen = next(t for c in answer["candidates"] if c["system"] == system for t in c["targets"]
                      if t["load"] == row["load"])
        units, pool_nodes = chosen["units"], chosen.get("pool_nodes")  # pool_nodes: a shared pool's size
        folder = f"deploy/at-{row['load']:g}-clients" if by_clients else f"deploy/at-{row['load']:g}-per-s"
        try:
            files = deployment_files(scenario, system, units, pool_nodes)
        except DeployError as exc:
            emit(f"deployment files for {system} at {row['load']:g}: {exc}")
            written.append({"load": row["load"], "system": system, "units": units, "files": [], "problem": str(exc)})
            continue
        # the system's name is the scenario's (data from anywhere): a folder name of safe characters only
        safe = re.sub(r"[^A-Za-z0-9_-]+", "_", system).strip("_") or "system"
        named = [(f"{folder}/{safe}/{name.split('/')[-1]}", data) for name, data in files]
        target = out / folder / safe
        if any(p.is_symlink() for p in (out / "deploy", out / folder, target)):  # a link would lead outside
            emit(f"deployment files for {system} at {row['load']:g}: {target} is a symbolic link; not written")
            written.append({"load": row["load"], "system": system, "units": units, "files": [],
                            "problem": f"{target} is a symbolic link"})
            continue
        target.mkdir(parents=True, exist_ok=True)
        write_files(out, named)
        written.append({"load": row["load"], "system": system, "units": units,
                        "files": [name for name, _ in named], "problem": None})
    return written


def _sensitivity(scenario: Scenario, answer: dict[str, Any], stored: _StoredMap, emit: Callable[[str], None],
                 started: float, workers: int) -> dict[str, Any] | None:
    """The answer's sensitivity section (:mod:`kvsim.plan.sensitivity`), its physics probes run and
    stored by ``stored`` beside the plan's, one progress line each."""
    from functools import partial

    from kvsim.plan.sensitivity import plan_sensitivity

    count = 0

    def on_probe(label: str, probe: Probe, outcome: ProbeOutcome) -> None:
        nonlocal count
        count += 1
        verdict = "meets the SLO" if outcome.meets else f"fails: {terminal_text(outcome.reason)}"
        emit(f"[{time.monotonic() - started:7.1f} s] sensitivity probe {count} ({terminal_text(label)}): "
             f"{terminal_text(probe.system)} x{probe.units} at {probe.load:.4g} {load_unit(scenario)} {verdict}")

    parallel = workers > 1 or stored.on_dask
    return plan_sensitivity(scenario, answer, map_for=lambda changed: partial(stored, scenario=changed),
                            on_probe=on_probe, concurrent=max(1, workers) * 2 if parallel else 1)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def run_plan(scenario: Scenario, out_dir: str | Path, workers: int | None = None,
             log: Callable[[str], None] | None = None, dask: bool = False,
             scheduler: str | None = None) -> dict[str, Any]:
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
    dask : bool
        Run the probes on a Dask ``LocalCluster`` of ``workers`` processes started for the plan.
    scheduler : str, optional
        Run the probes on the Dask cluster whose scheduler is at this address (``tcp://host:8786``).

    Returns
    -------
    dict
        The plan's answer (the content of ``plan.json``).
    """
    from kvsim.report.plan_report import write_plan_report

    out = Path(out_dir)
    workers = max(1, workers if workers is not None else default_workers())
    emit = log or (lambda line: print(line, file=sys.stderr, flush=True))
    started = time.monotonic()
    count = 0
    from kvsim.plan.first_guess import plan_cost
    from kvsim.plan.progress import HEARTBEAT_S, format_duration, start_heartbeat

    expected = plan_cost(scenario)
    from kvsim.plan.sensitivity import sensitivity_cost

    sensitivity_line = sensitivity_cost(scenario)  # a figure that cannot be varied is refused before any probe
    expected_probes = sum(expected.probes) / 2 if expected is not None else None
    if expected is not None:
        emit(f"expected: {expected.describe()}" + (f"; {sensitivity_line}" if sensitivity_line else ""))

    def remaining(done: int) -> str:
        """The time the plan may still take: the probes expected (the middle of validate's range,
        at least one more while the search runs) at the mean elapsed time per finished probe."""
        if expected_probes is None or done == 0:
            return ""
        left = max(1.0, expected_probes - done)
        eta = (time.monotonic() - started) / done * left
        return f"; ~{left:.0f} more probes expected, about {format_duration(eta)} left"

    last_line = [started]
    said = threading.Lock()  # the heartbeat's thread and the probes' callbacks write whole lines

    def say(line: str) -> None:
        with said:
            last_line[0] = time.monotonic()
            emit(line)

    def heartbeat() -> None:
        """A line when a probe has run for HEARTBEAT_S with nothing said (a long probe is not a hang)."""
        now = time.monotonic()
        if now - last_line[0] >= HEARTBEAT_S:
            say(f"[{now - started:7.1f} s] still running: {count} probe{'' if count == 1 else 's'} done, the "
                f"longest in flight for at least {format_duration(now - last_line[0])}{remaining(count)}")

    def on_probe(probe: Probe, outcome: ProbeOutcome) -> None:
        nonlocal count
        count += 1
        verdict = "meets the SLO" if outcome.meets else f"fails: {terminal_text(outcome.reason)}"
        if outcome.meets and outcome.detail.get("unconfirmed"):
            verdict += f", unconfirmed: {terminal_text(outcome.detail['unconfirmed'])}"
        reruns = outcome.detail.get("reruns")
        if isinstance(reruns, int) and reruns > 0:
            verdict += f" ({reruns} longer run{'' if reruns == 1 else 's'} to clear its flags)"
        cost = outcome.detail.get("wall_s")
        took = f" ({cost:.1f} s)" if isinstance(cost, float) else ""
        seed = f" (seed {probe.seed})" if probe.seed is not None else ""
        pool = f" + {probe.pool_nodes} shared pool node{'s' if probe.pool_nodes != 1 else ''}" \
            if probe.pool_nodes is not None else ""
        say(f"[{time.monotonic() - started:7.1f} s] probe {count}: {terminal_text(probe.system)} x{probe.units}{pool} at "
             f"{probe.load:.4g} {load_unit(scenario)}{seed} {verdict}{took}{remaining(count)}")

    with _StoredMap(scenario, out / "probes", workers, dask=dask, scheduler=scheduler) as stored:
        # every candidate at once (its own thread), and each load search probes as many rates a
        # round as there are workers: the queue stays full to the last candidate, and the probes
        # depend on the number of workers only, never on timing (a rerun reuses every probe)
        candidates = len(scenario.spec.plan.chosen(list(scenario.spec.systems)))
        # (one worker runs probes in this process: candidates one after another, not in threads
        # that would only contend for the interpreter)
        parallel_probes = workers > 1 or stored.on_dask
        costs = catalog_unit_cost(scenario)
        quiet = threading.Event()
        beating = start_heartbeat(quiet, heartbeat, HEARTBEAT_S)
        try:
            result = plan(scenario, map_probes=stored, on_probe=on_probe,
                          concurrent=candidates if parallel_probes else 1, parallel=max(1, workers // candidates),
                          unit_cost=lambda system: (costs(system) or {}).get("cost_per_hour_usd"))
        finally:
            quiet.set()
            beating.join()
        answer = plan_answer(result, costs)
        if sensitivity_line:  # the answer is known: say it now, not after the re-plans of what it hinges on
            from kvsim.report.plan_report import summary_paragraph

            emit(f"[{time.monotonic() - started:7.1f} s] answer, before what it hinges on: "
                 f"{terminal_text(summary_paragraph(answer))}")
        # the sensitivity probes: the same workers, a folder of their own (sensitivity/), counted apart
        extra = copy.copy(stored)
        extra.folder, extra.ran, extra.reused = out / "sensitivity", 0, 0
        problem = store_root_problem(extra.folder, "sensitivity probes")
        if problem is not None:
            raise ExecutorError(problem)
        answer["sensitivity"] = _sensitivity(scenario, answer, extra, emit, started, workers)
    answer["deployment"] = _write_deployments(scenario, answer, out, emit)
    write_plan_report(answer, out)
    more = ""
    if extra.ran + extra.reused:
        more = f"; sensitivity: {_count(extra.ran, 'probe')} run, {extra.reused} reused from {extra.folder}"
    emit(f"plan done in {time.monotonic() - started:.1f} s: {_count(stored.ran, 'probe')} run, "
         f"{stored.reused} reused from {out / 'probes'}{more}")
    return answer
