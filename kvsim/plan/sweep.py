"""Run a scenario's sweep as independent, resumable tasks (``kvsim run`` / ``kvsim sweep``).

Each (sweep point, replica) is a task (:mod:`kvsim.plan.tasks`) keyed by a content hash. Tasks
already stored in ``OUT/points/`` are read back instead of run; the others run where asked
(:mod:`kvsim.plan.executor`) and each is stored as soon as it finishes (:mod:`kvsim.plan.store`),
so a sweep killed at any moment loses at most the tasks that were running. The result is the
same :class:`~kvsim.sim.result.RunResult` that :func:`kvsim.sim.run_scenario` returns, runs in
the same order, whatever ran them.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path

from kvsim.plan.executor import ExecutorError, default_workers, execute, in_process
from kvsim.plan.progress import SweepProgress
from kvsim.plan.run_cost import point_requests
from kvsim.plan.store import PointStore, store_root_problem
from kvsim.plan.tasks import SweepTask, code_fingerprint, sweep_tasks, task_inputs
from kvsim.scenario.load import Scenario
from kvsim.sim.result import RunResult, SystemRun
from kvsim.sim.run import check_scenario

__all__ = ["run_sweep", "SweepStats", "IncompleteSweepError"]

SHOWN_MISSING = 20
"""Missing tasks named, at most, in :class:`IncompleteSweepError`'s message."""


class IncompleteSweepError(RuntimeError):
    """The executor returned, yet some tasks have no result (a bug: it raises when it gives up)."""


class SweepStats:
    """What a sweep did: tasks ``ran`` here and ``reused`` from the store (their keys)."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.reused: list[str] = []


def run_sweep(scenario: Scenario, out: str | Path, *, seed: int | None = None, workers: int | None = None,
              dask: bool = False, scheduler: str | None = None, bar: bool = False, log: bool = True,
              stats: SweepStats | None = None) -> RunResult:
    """Run (or resume) every task of ``scenario``, storing each in ``out/points/``.

    Parameters
    ----------
    out : path
        The results folder (created if needed).
    seed : int, optional
        Overrides every point's root seed.
    workers : int, optional
        Local processes (default: every core; 1 runs in this process); with ``dask``, the
        LocalCluster's workers.
    dask, scheduler
        Run on a Dask LocalCluster, or on the cluster whose scheduler is at this address.
    bar, log
        A tqdm bar over tasks (for a terminal); one line per finished task on standard error.
    stats : SweepStats, optional
        Filled with the keys of the tasks run and reused.

    Raises
    ------
    kvsim.plan.ExecutorError
        Worker processes died too often (or Dask is missing); names the tasks left without results.
    IncompleteSweepError
        A task has no result although its executor said nothing (a bug).

    Notes
    -----
    Worker processes start with ``forkserver`` (``spawn`` where it does not exist), which
    imports the calling script again in each worker: a script calling this with ``workers`` > 1
    must do so under ``if __name__ == "__main__":`` (the usual multiprocessing rule; the
    ``kvsim`` command and notebooks need nothing).
    """
    check_scenario(scenario)
    stats = stats if stats is not None else SweepStats()
    store = PointStore(out)
    problem = store_root_problem(store.root, "points")
    if problem is not None:
        raise ExecutorError(problem)
    store.root.mkdir(parents=True, exist_ok=True)
    for leftover in store.stale_temporaries():
        leftover.unlink(missing_ok=True)
    requests = {p.index: point_requests(scenario, p, read_files=False) for p in scenario.points}
    cpu_s = _estimated_cpu_s(scenario) if log or bar else None
    file_cache: dict = {}
    code = code_fingerprint()
    tasks = sweep_tasks(scenario, seed, requests, file_cache, cpu_s)
    finished: dict[str, list[SystemRun]] = {}
    todo: list[SweepTask] = []
    for task in tasks:
        if task.key in finished or task.key in {t.key for t in todo}:
            continue
        stored, why = store.try_load(scenario, task) if store.done(task.key) else (None, None)
        if stored is not None:
            finished[task.key] = stored
            stats.reused.append(task.key)
            continue
        if why is not None:  # never recompute silently: the folder was damaged, edited or foreign
            _warn(f"kvsim: stored {task.label()} ({store.relative(task.key)}) cannot be read: {why}; recomputing",
                  log)
        todo.append(task)
    workers = default_workers() if workers is None else max(1, int(workers))
    inline = not dask and scheduler is None and in_process(workers, len(todo))
    progress = None
    if log or bar:
        priced = cpu_s is not None  # then every task's weight is its CPU seconds (sweep_tasks)
        progress = SweepProgress(scenario.name, todo, stored=len(finished), bar=bar and not inline,
                                 stream=None if log else _Discard(),
                                 workers=1 if inline else workers,
                                 estimated_cpu_s=sum(t.weight for t in todo) if priced else None)
        where = (f"on the Dask scheduler at {scheduler}" if scheduler else
                 f"on a Dask LocalCluster of {workers} worker(s)" if dask else
                 "in this process" if inline else f"on {min(workers, len(todo))} local worker processes")
        progress.begin(where)

    def on_done(task: SweepTask, runs: list[SystemRun]) -> None:
        inputs = task_inputs(scenario, scenario.points[task.index], task.seed, task.replica, file_cache, code)
        store.save(scenario, task, runs, inputs)
        finished[task.key] = runs
        stats.ran.append(task.key)
        if progress is not None:
            progress.finished(task, sum(r.wall_s for r in runs))

    try:
        execute(scenario, todo, on_done, seed=seed, workers=workers, dask=dask, scheduler=scheduler,
                inline_bar=bar and inline, note=None if progress is None else progress.note)
    finally:
        if progress is not None:
            progress.close()
    # never a result without every task: a summary missing points would read as a finished sweep
    missing = [t for t in tasks if t.key not in finished]
    if missing:
        shown = ", ".join(t.label() for t in missing[:SHOWN_MISSING])
        more = f" and {len(missing) - SHOWN_MISSING} more" if len(missing) > SHOWN_MISSING else ""
        raise IncompleteSweepError(f"the sweep ended with {len(missing)} of {len(tasks)} point run(s) without "
                                   f"results and no error to say why: {shown}{more}")
    runs: list[SystemRun] = []
    stored: dict[int, list[str]] = {}
    for task in tasks:
        # two points may resolve to the same inputs (5/s and 300/min): one run, labelled for each
        runs += [dataclasses.replace(r, point_index=task.index, params=dict(task.params), replica=task.replica,
                                     seed=task.seed) for r in finished[task.key]]
        stored.setdefault(task.index, []).append(store.relative(task.key))
    root_seed = scenario.spec.seed if seed is None else int(seed)
    return RunResult.from_runs(scenario, root_seed, runs, stored)


def _estimated_cpu_s(scenario: Scenario) -> dict[int, float] | None:
    """The cost model's CPU seconds of each point, all systems and replicas (:mod:`kvsim.plan.run_cost`,
    at the rates of the backend that runs it), for the progress lines' ETA; None when a point has
    none."""
    from kvsim.backend import resolve
    from kvsim.plan.run_cost import run_cost

    try:
        backend = resolve(scenario.spec.system_engine(next(iter(scenario.spec.systems))).backend)
        per_point = run_cost(scenario, backend=backend).per_point_cpu_s
    except Exception:  # an estimate for progress lines only: it must never stop a run that check_scenario passed
        return None
    if not all(per_point.get(p.index, 0.0) > 0.0 for p in scenario.points):
        return None
    return per_point


def _warn(line: str, log: bool) -> None:
    """One line on standard error (``log``), or a warning a Python caller sees."""
    if log:
        print(line, file=sys.stderr, flush=True)
    else:
        warnings.warn(line, RuntimeWarning, stacklevel=3)


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass
