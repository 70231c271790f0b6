"""Where sweep tasks run: this process, a pool of local processes, or a Dask cluster.

Every executor calls the same :func:`kvsim.plan.tasks.run_task` with the same task (point,
replica, seed), so results do not depend on which one ran them. Results come back to this
process, which stores them (:mod:`kvsim.plan.store`) as each finishes; a Dask worker therefore
needs kvsim installed (same version) but no access to the results folder.

Retries: a local worker process that dies (killed, out of memory) breaks its pool; the tasks
not yet finished are sent to a fresh pool (up to :data:`MAX_ATTEMPTS` breaks in a row). On Dask the
scheduler reschedules a lost worker's task (``retries``). A task that *raises* (bad input found
while running, or a bug) is not retried: the error comes back to this process as the exception
the worker raised, its traceback the worker's, noting the task (:func:`kvsim.crash.note_where`),
so the command line reports it as it reports one raised here.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Sequence

from kvsim.crash import note_where
from kvsim.plan.tasks import SweepTask, run_task
from kvsim.sim.result import SystemRun
from kvsim.sim.run import RunProgress

__all__ = ["ExecutorError", "execute", "default_workers", "in_process", "MAX_ATTEMPTS"]

MAX_ATTEMPTS = 3
"""Worker deaths in a row (no task finishing in between) before a local sweep gives up; the
retries a Dask task gets are one fewer."""

Done = Callable[[SweepTask, list[SystemRun]], None]


class ExecutorError(RuntimeError):
    """The sweep cannot run as asked (Dask missing, a task's worker died too often)."""


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def execute(scenario, tasks: Sequence[SweepTask], on_done: Done, *, seed: int | None = None, workers: int = 1,
            dask: bool = False, scheduler: str | None = None, inline_bar: bool = False) -> None:
    """Run ``tasks`` and call ``on_done(task, runs)`` in this process as each finishes.

    Parameters
    ----------
    workers : int
        Local processes (1: run in this process, one task after another). With ``dask`` the
        number of LocalCluster workers; ignored with ``scheduler``.
    dask : bool
        Run on a Dask ``LocalCluster`` started for this sweep.
    scheduler : str, optional
        Address of a running Dask scheduler (``tcp://host:8786``).
    inline_bar : bool
        When the tasks run in this process, a tqdm bar over simulated seconds (it moves within a
        long point, which a bar over points cannot).
    """
    if not tasks:
        return
    if dask or scheduler is not None:
        _execute_dask(scenario, tasks, on_done, seed, workers, scheduler)
    elif in_process(workers, len(tasks)):
        tracker = RunProgress()
        if inline_bar:
            from tqdm import tqdm

            total = sum(p.spec.duration * len(p.spec.systems) for p in (scenario.points[t.index] for t in tasks))
            tracker.bar = tqdm(total=round(total, 3), unit="sim-s", desc=scenario.name, leave=False,
                               dynamic_ncols=True)
        try:
            for task in tasks:
                try:
                    runs = run_task(scenario, task, seed, tracker)
                except Exception as exc:
                    note_where(exc, _where(task))
                    raise
                on_done(task, runs)
        finally:
            if tracker.bar is not None:
                tracker.bar.close()
    else:
        _execute_processes(scenario, tasks, on_done, seed, workers)


def _where(task: SweepTask) -> str:
    return f"{task.label()} (run seed {task.seed})"


def in_process(workers: int, tasks: int) -> bool:
    """Local tasks run in this process: one worker asked for, or a single task to run."""
    return workers <= 1 or tasks <= 1


# --------------------------------------------------------------------------- local processes

_WORKER_SCENARIO = None


def _init_worker(scenario) -> None:
    global _WORKER_SCENARIO
    _WORKER_SCENARIO = scenario


def _run_in_worker(task: SweepTask, seed: int | None) -> list[SystemRun]:
    return run_task(_WORKER_SCENARIO, task, seed)


def _context():
    """``forkserver`` where it exists (no fork of a process with threads; kvsim imported once in
    the server, not in every worker), ``spawn`` elsewhere."""
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["kvsim.plan.tasks"])
        return context
    return multiprocessing.get_context("spawn")


def _execute_processes(scenario, tasks, on_done: Done, seed, workers: int) -> None:
    pending = list(tasks)
    breaks = 0  # pools broken in a row with no task finishing in between
    context = _context()
    while pending:
        if breaks >= MAX_ATTEMPTS:
            raise ExecutorError(f"worker processes died {breaks} times in a row (out of memory? killed?) while "
                                f"running {', '.join(t.label() for t in pending[:3])}"
                                f"{' ...' if len(pending) > 3 else ''}; finished points are kept, re-run to resume")
        pool = ProcessPoolExecutor(max_workers=min(workers, len(pending)), mp_context=context,
                                   initializer=_init_worker, initargs=(scenario,))
        broken = False
        try:
            futures = {pool.submit(_run_in_worker, task, seed): task for task in pending}
            while futures and not broken:
                finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in finished:
                    task = futures.pop(future)
                    try:
                        runs = future.result()
                    except BrokenProcessPool:
                        broken = True
                        continue
                    except Exception as exc:
                        note_where(exc, _where(task))
                        raise
                    on_done(task, runs)
                    pending.remove(task)
                    breaks = 0
        finally:
            pool.shutdown(wait=not broken, cancel_futures=True)
        if broken:
            breaks += 1


# --------------------------------------------------------------------------- Dask


def _execute_dask(scenario, tasks, on_done: Done, seed, workers: int, scheduler: str | None) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ExecutorError("running on Dask (--dask or --scheduler) needs dask.distributed, which is not "
                            "installed: pip install 'kvsim[dask]'") from None
    cluster = None
    if scheduler is None:
        cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                               dashboard_address=None)
    try:
        client = Client(cluster if cluster is not None else scheduler)
    except OSError as exc:
        if cluster is not None:
            cluster.close()
        raise ExecutorError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    try:
        shared = client.scatter(scenario, broadcast=True)
        futures = {client.submit(run_task, shared, task, seed, key=f"kvsim-task-{task.key}", pure=False,
                                 retries=MAX_ATTEMPTS - 1): task for task in tasks}
        by_key = {future.key: task for future, task in futures.items()}
        for future in as_completed(list(futures)):
            task = by_key[future.key]
            try:
                runs = future.result()
            except Exception as exc:
                note_where(exc, _where(task))
                raise
            on_done(task, runs)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
