"""Where sweep tasks run: this process, a pool of local processes, or a Dask cluster.

Every executor calls the same :func:`kvsim.plan.tasks.run_task` with the same task (point,
replica, seed), so results do not depend on which one ran them. Results come back to this
process, which stores them (:mod:`kvsim.plan.store`) as each finishes; a Dask worker therefore
needs kvsim installed (same version) but no access to the results folder.

Retries: a local worker process that dies (killed, out of memory), or one that cannot be started
(its forkserver was killed), breaks its pool; the tasks not yet finished are sent to a fresh pool
(up to :data:`MAX_ATTEMPTS` breaks in a row, then :class:`ExecutorError` names the tasks left
without results and how the workers died). A pool that stops answering counts as broken too: a
worker killed while it sends its result leaves ``concurrent.futures`` waiting for the rest of the
message for ever (this process holds the pipe's write end, so no end of file comes) and none of
its tasks would finish; it is watched for (:func:`_stall`) and unblocked (:func:`_abandon`). On
Dask the scheduler reschedules a lost worker's task (``retries``). A task that *raises* (bad input
found while running, or a bug) is not retried: the error comes back to this process as the
exception the worker raised, its traceback the worker's, noting the task
(:func:`kvsim.crash.note_where`), so the command line reports it as it reports one raised here.

No orphans: local workers exit as soon as the process that started them dies, even by SIGKILL
(:func:`_tie_to`), so nothing keeps computing, or holds the parent's standard error open (a CI
job reading it would wait), after the ``kvsim`` process is gone. The forkserver and
multiprocessing's resource tracker then exit on their own: each ends when the last process
holding its pipe has (the workers hold both).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import wait as wait_ready
from typing import Any

from kvsim.crash import note_where
from kvsim.plan.tasks import SweepTask, run_task
from kvsim.sim.result import SystemRun
from kvsim.sim.run import RunProgress

__all__ = ["ExecutorError", "execute", "default_workers", "in_process", "worker_pool", "watched_map", "dask_client", "MAX_ATTEMPTS"]

MAX_ATTEMPTS = 3
"""Broken pools in a row (a worker died, or could not be started), no task finishing in between,
before a local sweep gives up; the retries a Dask task gets are one fewer."""

RETRY_PAUSE_S = 0.2
"""Wall seconds to wait before a fresh pool, times the breaks so far: a forkserver killed with its
workers has then been reaped, so the fresh pool starts a new one instead of calling the dead one."""

REAP_TIMEOUT_S = 10.0
"""Wall seconds to wait for a broken pool to reap its workers (their exit statuses name the signal
that killed one); a worker stuck in the kernel must not hang the sweep."""

WATCH_S = 1.0
"""Wall seconds between checks, while a pool's tasks run and none finishes, that the pool can still
finish them (:func:`_stall`)."""

STUCK_S = 5.0
"""Wall seconds a pool may go on with a worker known to have died before it is taken for stuck: the
pool notices a death within milliseconds unless its manager thread is blocked (a result cut off
mid-message), and this margin keeps a slow but sound pool from being abandoned."""

SHOWN_TASKS = 20
"""Tasks named, at most, in the message of a sweep that gave up (then "and N more")."""

Done = Callable[[SweepTask, list[SystemRun]], None]
Note = Callable[[str], None]


class ExecutorError(RuntimeError):
    """The sweep cannot run as asked (Dask missing, a task's worker died too often)."""


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def execute(scenario, tasks: Sequence[SweepTask], on_done: Done, *, seed: int | None = None, workers: int = 1,
            dask: bool = False, scheduler: str | None = None, inline_bar: bool = False,
            note: Note | None = None) -> None:
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
    note : callable, optional
        Called with one line when local workers died and their tasks are retried.

    Raises
    ------
    ExecutorError
        Dask missing or unreachable, or local workers died :data:`MAX_ATTEMPTS` times in a row; the
        message names the tasks left without results. Tasks finished before are passed to
        ``on_done`` all the same.
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
        _execute_processes(scenario, tasks, on_done, seed, workers, note)


def _where(task: SweepTask) -> str:
    return f"{task.label()} (run seed {task.seed})"


def in_process(workers: int, tasks: int) -> bool:
    """Local tasks run in this process: one worker asked for, or a single task to run."""
    return workers <= 1 or tasks <= 1


# --------------------------------------------------------------------------- local processes

_WORKER_SCENARIO = None

PR_SET_PDEATHSIG = 1
"""prctl(2) option (linux/prctl.h): the signal this process gets when its parent thread exits."""

LIVENESS_POLL_S = 0.5
"""Wall seconds between checks that the main process lives, where a pidfd cannot be waited on."""

EXIT_ORPHANED = 75
"""Exit status of a worker whose main process died (nobody is left to read it)."""


def worker_pool(workers: int, initializer: Callable | None = None, initargs: tuple = ()) -> ProcessPoolExecutor:
    """A pool of ``workers`` local processes (:func:`_context`) that exit when this process dies.

    ``initializer(*initargs)`` runs in each worker after it is tied to this process.
    """
    return ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=_start_worker,
                               initargs=(os.getpid(), initializer, initargs))


def watched_map(pool: ProcessPoolExecutor, function: Callable, items: Sequence) -> Iterator:
    """``pool.map(function, items)`` that never waits for ever: its results in order, and
    ``BrokenProcessPool`` (the pool abandoned, its workers stopped) once the pool stops answering
    (:func:`_stall`: a worker killed while it sent a result leaves ``pool.map`` waiting for good)."""
    futures = [pool.submit(function, item) for item in items]
    dead_since: float | None = None
    try:
        for future in futures:
            while True:
                try:
                    result = future.result(timeout=WATCH_S)
                    break
                except TimeoutError:
                    dead_since, why = _stall(pool, dead_since)
                    if why:
                        _abandon(pool, died=True, stuck=True)
                        raise BrokenProcessPool(why) from None
            yield result
    finally:
        for future in futures:
            future.cancel()


def _start_worker(main_pid: int, initializer: Callable | None, initargs: tuple) -> None:
    _tie_to(main_pid)
    if initializer is not None:
        initializer(*initargs)


def _tie_to(main_pid: int) -> None:
    """Make this worker process exit when process ``main_pid`` (the one running the sweep) does.

    A thread waits for ``main_pid`` to end (on a pidfd where Linux has one, which wakes when the
    process exits; polling ``os.kill(pid, 0)`` elsewhere) and then ends this process at once:
    its task's result has nobody left to take it. A worker started by the forkserver also asks
    the kernel (``PR_SET_PDEATHSIG``) for SIGKILL when the forkserver dies: its pool is broken
    then (the exit statuses come through the forkserver), and the task is re-run elsewhere.
    ``PR_SET_PDEATHSIG`` is not used when the parent is ``main_pid`` itself (spawn, fork): it fires
    when the parent *thread* ends, and a pool may start workers from a thread that ends before
    the pool does (``kvsim plan`` submits from one thread per candidate); the forkserver forks
    from its main thread, which lives as long as it does.
    """
    parent = os.getppid()
    if parent != main_pid and _kill_me_with_parent() and (os.getppid() != parent
                                                          or not _parent_is(parent, main_pid)):
        # the forkserver died before the kernel was asked (even before ``parent`` was read: then it
        # is the reaper that adopted this process); a worker left alive would hold its pool's pipes
        os._exit(EXIT_ORPHANED)
    if os.name != "posix":
        return  # os.kill(pid, 0) would terminate the process on Windows
    try:
        handle = os.pidfd_open(main_pid)
    except ProcessLookupError:
        os._exit(EXIT_ORPHANED)
    except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
        handle = None
    threading.Thread(target=_exit_when_gone, args=(main_pid, handle), name="kvsim-main-watch", daemon=True).start()


def _kill_me_with_parent() -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux); whether it was set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0), ctypes.c_ulong(0),
                          ctypes.c_ulong(0)) == 0
    except (OSError, AttributeError):
        return False


def _parent_is(pid: int, parent: int) -> bool:
    """Whether process ``pid``'s parent is ``parent`` (a forkserver's is the main process); true
    where ``/proc`` does not say."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1]) == parent
    except (OSError, IndexError, ValueError):
        return True


def _exit_when_gone(main_pid: int, handle: int | None) -> None:
    if handle is not None:
        poller = select.poll()
        poller.register(handle, select.POLLIN)
        while not poller.poll():  # readable once the process has exited
            pass
    else:
        while _alive(main_pid):
            time.sleep(LIVENESS_POLL_S)
    os._exit(EXIT_ORPHANED)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's: our main process's pid was reused
        return False
    return True


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


START_ERRORS = (OSError, EOFError)
"""What starting a worker raises when its forkserver died (a refused connection, a broken pipe, the
end of file before the new worker's pid)."""


def _execute_processes(scenario, tasks, on_done: Done, seed, workers: int, note: Note | None = None) -> None:
    pending = list(tasks)
    breaks = 0  # pools broken in a row with no task finishing in between
    why = ""
    while pending:
        if breaks >= MAX_ATTEMPTS:
            raise ExecutorError(_gave_up(breaks, why, pending))
        if breaks:
            if note is not None:
                note(f"kvsim: {why}; running the {len(pending)} unfinished point run(s) on fresh worker processes "
                     f"(attempt {breaks + 1} of {MAX_ATTEMPTS})")
            time.sleep(RETRY_PAUSE_S * breaks)
        pool = worker_pool(min(workers, len(pending)), _init_worker, (scenario,))
        why, died, stuck = "", False, False
        try:
            futures = {}
            try:
                for task in pending:
                    futures[pool.submit(_run_in_worker, task, seed)] = task
            except BrokenProcessPool:  # a worker died while the tasks were being sent
                why, died = "a worker process died", True
            except START_ERRORS as exc:
                why = f"a worker process could not be started ({type(exc).__name__}: {exc})"
            dead_since = None  # when a dead worker was first seen while the pool was not broken
            while futures and not why:
                # bounded: a pool whose manager thread is blocked would never complete a future
                finished, _ = wait(futures, timeout=WATCH_S, return_when=FIRST_COMPLETED)
                if not finished:
                    dead_since, why = _stall(pool, dead_since)
                    if why and any(f.done() for f in futures):
                        why = ""  # finished meanwhile: take those results first
                    died = stuck = bool(why)
                    continue
                for future in finished:
                    task = futures.pop(future)
                    try:
                        runs = future.result()
                    except BrokenProcessPool:
                        why, died = "a worker process died", True
                        continue
                    except Exception as exc:
                        note_where(exc, _where(task))
                        raise
                    on_done(task, runs)
                    pending.remove(task)
                    breaks = 0
        finally:
            if why:
                why += _abandon(pool, died, stuck)
            else:
                pool.shutdown(wait=True, cancel_futures=True)
        if why:
            breaks += 1


def _stall(pool: ProcessPoolExecutor, dead_since: float | None) -> tuple[float | None, str]:
    """Whether a pool with unfinished tasks can no longer finish them by itself: ``(dead_since,
    why)``, ``why`` empty while it may.

    Its manager thread (the one that completes the futures) has ended; or a worker died (its
    sentinel is ready: what the manager waits for) at least :data:`STUCK_S` ago, ``dead_since``
    being when that was first seen, and the manager has not noticed, which it does within
    milliseconds unless it is blocked reading a result that its worker was killed in the middle
    of sending.
    """
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None and not manager.is_alive():
        return dead_since, "the pool of worker processes stopped (its manager thread ended)"
    # the readiness of the sentinels, not Process.is_alive(): that reads the exit status from the
    # forkserver's pipe, which the manager thread may be reading at the same time
    sentinels = [p.sentinel for p in list((getattr(pool, "_processes", None) or {}).values())]
    if not wait_ready(sentinels, timeout=0):
        return None, ""
    now = time.monotonic()
    if dead_since is None:
        return now, ""
    return dead_since, "a worker process died" if now - dead_since >= STUCK_S else ""


def _abandon(pool: ProcessPoolExecutor, died: bool, stuck: bool = False) -> str:
    """Shut down a pool that broke (``died``: a worker died), could not start all its workers (its
    healthy workers are stopped, or their tasks would run twice) or is ``stuck`` (:func:`_stall`:
    its workers are stopped and its manager thread unblocked); how its workers ended, when that
    says something: ``: killed by signal 9 (SIGKILL)``."""
    # the pool's own workers, its results pipe and the thread that reaps them (private, hence
    # getattr): a broken pool has no public way to say how its workers ended, nor to be unblocked
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)  # shutdown() forgets it
    if not died or stuck:
        for process in processes:
            if process.exitcode is None:
                process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    if results is not None:
        # a manager blocked in the middle of a result (its worker killed, by anyone or by the
        # terminate() above, while sending it) reads the end of file once no write end is left:
        # the workers' go with them, this process's is closed here (nothing in this process writes
        # to it; the manager thread never touches it). A manager left blocked would hang this
        # process's exit, which joins it.
        writer = getattr(results, "_writer", None)
        if writer is not None:
            writer.close()
    if manager is not None:
        manager.join(timeout=REAP_TIMEOUT_S)
    return _how_they_died(processes) if died else ""


def _how_they_died(processes) -> str:
    """``: killed by signal 9 (SIGKILL)``: how the workers of a broken pool ended, those the pool
    itself stopped with SIGTERM left out when others say more; empty when none is known."""
    codes = [code for code in (p.exitcode for p in processes) if code not in (None, 0)]
    shown = [c for c in codes if c != -signal.SIGTERM] or codes
    if not shown:
        return ""
    texts = []
    for code in dict.fromkeys(shown):  # each once, in order
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "unknown signal"
            texts.append(f"killed by signal {-code} ({name})")
        else:
            # 255 is also what a worker reports whose forkserver died: its status went with it
            texts.append(f"exit status {code}" + (" (or its forkserver died)" if code == 255 else ""))
    return f": {', '.join(texts)}"


def _gave_up(breaks: int, why: str, pending: Sequence[SweepTask]) -> str:
    shown = ", ".join(t.label() for t in pending[:SHOWN_TASKS])
    more = f" and {len(pending) - SHOWN_TASKS} more" if len(pending) > SHOWN_TASKS else ""
    return (f"worker processes failed {breaks} times in a row with no point finishing in between (out of memory? "
            f"killed?); the last time {why}. {len(pending)} point run(s) have no results: {shown}{more}. "
            f"The finished points are kept: re-run the same command to resume")


# --------------------------------------------------------------------------- Dask


@contextlib.contextmanager
def dask_client(workers: int, scheduler: str | None) -> Iterator[Any]:
    """A ``distributed.Client``: on a ``LocalCluster`` of ``workers`` single-threaded processes
    started for it (``scheduler`` None), or on the running cluster whose scheduler is at
    ``scheduler``; closed (and the local cluster stopped) on exit.

    Raises
    ------
    ExecutorError
        dask.distributed is not installed, or the scheduler cannot be reached.
    """
    try:
        from distributed import Client, LocalCluster
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
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _execute_dask(scenario, tasks, on_done: Done, seed, workers: int, scheduler: str | None) -> None:
    with dask_client(workers, scheduler) as client:
        from distributed import as_completed  # installed: dask_client says how to get it otherwise

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
