"""A pool of worker processes that stops answering is taken for broken (issue 22): the sweep goes
on on fresh workers and ends with every point, once each.

``kvsim run --workers 2`` once hung after its forkserver and workers were killed
(tests/test_orphans.py): a worker killed in the middle of sending its result leaves the pool's
manager thread reading the rest of the message for ever (the ``kvsim`` process holds the pipe's
write end, so no end of file comes), no future completes, and the sweep waited on them; a pool
abandoned with its manager so blocked also keeps the process from exiting (it joins the thread).
Each test puts a pool in such a state on purpose, in a child process (a hang then fails the test
instead of hanging the test session), and checks the sweep finishes, with the results of an
undisturbed run, and its process exits.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kvsim
from kvsim.plan import executor as executor_module
from kvsim.plan import run_sweep

needs_fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="the injected failure reaches the workers through fork")

SCENARIO = """\
name: pool-stalls
seed: 5
duration: 10 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: lognormal, median: 200, sigma: 0.5, max: 800}
  output_tokens: {kind: lognormal, median: 40, sigma: 0.5, max: 160}
systems:
  h20: {node: h20-8x, instances: 1}
sweep:
  workload.arrival.rate: [1/s, 2/s, 4/s]
"""

HANG_GUARD_S = 240.0
"""Wall seconds the child sweep gets (it needs a few): past them it hung."""

ANNOUNCED_BYTES = 1 << 20
"""The length the cut-off result announces; fewer bytes follow."""


def _send_part_of_a_result() -> None:
    """In a worker: start sending a result as ``concurrent.futures`` does, holding the results
    queue's write lock, and stop before the message ends."""
    results = sys._getframe(2).f_locals["result_queue"]  # concurrent.futures.process._process_worker's
    results._wlock.acquire()
    os.write(results._writer.fileno(), struct.pack("!i", ANNOUNCED_BYTES) + b"\x80\x05")


def _cut_off_result(folder: Path) -> None:
    """Patch the worker function (fork carries the patch to the workers): the first attempt at
    point 1 starts sending a result and its process is SIGKILLed before the message ends."""
    real = executor_module._run_in_worker

    def cut_off(task, seed):
        if task.index == 1 and not (folder / "cut").exists():
            (folder / "cut").touch()
            _send_part_of_a_result()
            os.kill(os.getpid(), signal.SIGKILL)
        (folder / f"ran-{task.index}-{os.getpid()}").touch()
        return real(task, seed)

    # pickled by reference: the name the worker looks up must lead to this function
    cut_off.__module__, cut_off.__qualname__ = executor_module.__name__, "_run_in_worker"
    executor_module._run_in_worker = cut_off
    executor_module._context = lambda: multiprocessing.get_context("fork")


class _SecondWorkerRefused:
    """The forkserver context, but its second worker cannot be started (as when the forkserver had
    died), once the first has started sending a result: the sweep then stops that worker in the
    middle of the message."""

    def __init__(self, real, folder: Path):
        self.real, self.folder, self.started = real, folder, 0

    def __getattr__(self, name):
        return getattr(self.real, name)

    def Process(self, *args, **kwargs):  # noqa: N802 - the context's own name
        process = self.real.Process(*args, **kwargs)
        self.started += 1
        if self.started == 2:
            def refused():
                deadline = time.monotonic() + 60
                while not (self.folder / "cut").exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(0.2)  # the manager thread is reading the message
                raise ConnectionRefusedError(111, "Connection refused")

            process.start = refused
        return process


FOLDER_VARIABLE = "KVSIM_TEST_STALLS_FOLDER"


def _patched_worker(scenario) -> None:
    """The workers' initializer (pickled by reference, so the forkserver's workers import this
    module): the usual one, then the worker function replaced with one whose first attempt (in
    the sweep) sends part of its result and waits."""
    executor_module._init_worker(scenario)
    folder = Path(os.environ[FOLDER_VARIABLE])
    real = executor_module._run_in_worker

    def waits(task, seed):
        if not (folder / "cut").exists():
            _send_part_of_a_result()
            (folder / "cut").touch()
            time.sleep(HANG_GUARD_S)
        (folder / f"ran-{task.index}-{os.getpid()}").touch()
        return real(task, seed)

    executor_module._run_in_worker = waits  # what the tasks' reference to it finds in this worker


def _stopped_mid_result(folder: Path) -> None:
    """The first attempt at a point sends part of its result and waits; the second worker cannot
    be started, so the sweep stops the first (SIGTERM) with the message unfinished. On the
    forkserver: with fork, a pool starts all its workers before it hands out a task."""
    os.environ[FOLDER_VARIABLE] = str(folder)
    context = _SecondWorkerRefused(executor_module._context(), folder)
    executor_module._context = lambda: context
    executor_module._init_worker = _patched_worker


def _manager_ends(folder: Path) -> None:
    """Make the pool's manager thread (in this process) end with an error at the first result it
    reads, leaving that task's future and the others unfinished."""
    import concurrent.futures.process as futures_process

    real = futures_process._ExecutorManagerThread.process_result_item

    def fails_once(self, result_item):
        if not (folder / "cut").exists():
            (folder / "cut").touch()
            raise RuntimeError("injected: the manager thread ends")
        return real(self, result_item)

    futures_process._ExecutorManagerThread.process_result_item = fails_once
    real_run = executor_module._run_in_worker

    def counted(task, seed):
        (folder / f"ran-{task.index}-{os.getpid()}").touch()
        return real_run(task, seed)

    counted.__module__, counted.__qualname__ = executor_module.__name__, "_run_in_worker"
    executor_module._run_in_worker = counted
    executor_module._context = lambda: multiprocessing.get_context("fork")


FAILURES = {"cut-off": _cut_off_result, "manager-ends": _manager_ends, "stopped-mid-result": _stopped_mid_result}


def child(folder: str, failure: str) -> None:
    """In the child process: the sweep with ``failure`` injected, then its results against an
    undisturbed run, as one line of JSON on standard output."""
    folder = Path(folder)
    FAILURES[failure](folder)
    executor_module.RETRY_PAUSE_S = 0.0
    executor_module.WATCH_S = 0.2
    executor_module.STUCK_S = 1.0
    scenario = kvsim.parse_scenario(SCENARIO, "pool-stalls.yaml")
    result = run_sweep(scenario, folder / "out", workers=2, log=True)
    reference = kvsim.run(scenario)
    print(json.dumps({"same_records": result.records_digest() == reference.records_digest(),
                      "points": [p["index"] for p in result.summary_dict()["points"]]}))


def _run_child(tmp_path: Path, failure: str) -> tuple[dict, str]:
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
            f"import {Path(__file__).stem} as t; t.child({str(tmp_path)!r}, {failure!r})")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=tmp_path)
    try:
        out, err = process.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        process.kill()  # its workers exit with it (executor._tie_to)
        out, err = process.communicate()
        raise AssertionError(f"the sweep hung ({HANG_GUARD_S:g} s):\n{err}") from None
    assert process.returncode == 0, err
    assert (tmp_path / "cut").exists(), "the failure was injected"
    return json.loads(out.strip().splitlines()[-1]), err


def _attempts(tmp_path: Path, index: int) -> int:
    return len(list(tmp_path.glob(f"ran-{index}-*")))


@needs_fork
def test_a_worker_killed_while_sending_its_result_does_not_hang_the_sweep(tmp_path):
    """The pool's manager waits for the rest of the cut-off result for ever; the sweep sees the dead
    worker, abandons the pool and runs the unfinished points on fresh workers, once each."""
    got, err = _run_child(tmp_path, "cut-off")
    assert got == {"same_records": True, "points": [0, 1, 2]}, err
    notes = [line for line in err.splitlines() if "fresh worker processes" in line]
    assert len(notes) == 1, err
    assert notes[0].startswith("kvsim: a worker process died: killed by signal 9 (SIGKILL); running the ")
    assert "unfinished point run(s) on fresh worker processes (attempt 2 of 3)" in notes[0]
    assert _attempts(tmp_path, 1) == 1  # the cut-off attempt is not counted: it never ran the point
    assert "] point 1 [rate=2/s] done" in err and err.count("] point 1 ") == 1


@needs_fork
def test_a_pool_whose_manager_thread_ended_does_not_hang_the_sweep(tmp_path):
    """The manager thread ends (an error in concurrent.futures) with futures unfinished: the sweep
    takes the pool for broken and runs what has no result on fresh workers."""
    got, err = _run_child(tmp_path, "manager-ends")
    assert got == {"same_records": True, "points": [0, 1, 2]}, err
    notes = [line for line in err.splitlines() if "fresh worker processes" in line]
    assert len(notes) == 1 and "the pool of worker processes stopped (its manager thread ended)" in notes[0], err
    assert sum(_attempts(tmp_path, i) for i in range(3)) >= 4  # the lost result's point ran again
    assert all(err.count(f"] point {i} ") == 1 for i in range(3)), err


@pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(), reason="uses the forkserver")
def test_a_worker_stopped_while_sending_its_result_does_not_hang_the_exit(tmp_path):
    """A pool abandoned because its second worker could not be started stops its first worker in
    the middle of a result: the pool's manager thread must not stay blocked on that message, or
    the process could not exit (it joins the thread). The sweep ends with every point, the
    process exits."""
    got, err = _run_child(tmp_path, "stopped-mid-result")
    assert got == {"same_records": True, "points": [0, 1, 2]}, err
    notes = [line for line in err.splitlines() if "fresh worker processes" in line]
    assert len(notes) == 1 and "could not be started (ConnectionRefusedError" in notes[0], err
    assert all(_attempts(tmp_path, i) == 1 for i in range(3)), err


WATCHED = """
import multiprocessing, os, signal, sys
sys.path.insert(0, {tests!r})
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from kvsim.plan.executor import watched_map
import test_pool_stalls


def work(x):
    if x == {cut}:
        test_pool_stalls._send_part_of_a_result()
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork"))
got = []
try:
    for result in watched_map(pool, work, [0, 1, 2, 3]):
        got.append(result)
    print("done", got)
except BrokenProcessPool as error:
    print("broken", got, error)
pool.shutdown(cancel_futures=True)
"""


@needs_fork
@pytest.mark.parametrize("cut", [-1, 1])
def test_a_watched_map_says_a_pool_that_stops_answering_is_broken(cut):
    """``kvsim plan`` and ``kvsim calibrate`` map their probes over a pool (``watched_map``): a
    worker killed while it sends its result is a broken pool (which ``plan`` reports and resumes
    from), not a wait for ever; the process exits. Undisturbed, the results come back in order."""
    code = WATCHED.format(tests=str(Path(__file__).resolve().parent), cut=cut)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    if cut < 0:
        assert done.stdout.strip() == "done [0, 1, 4, 9]"
    else:
        assert done.stdout.startswith("broken ["), done.stdout + done.stderr
        assert "a worker process died" in done.stdout or "stopped" in done.stdout
