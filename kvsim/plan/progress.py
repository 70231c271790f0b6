"""Sweep progress that reads well in a log: one line per finished task, with elapsed time and ETA,
and a line now and then while tasks run longer than that.

Lines go to standard error always (a study run under ``nohup`` or CI says how far it is); on a
terminal a tqdm bar over the tasks runs beside them (lines are written through the bar, so they
do not tear it).

The ETA. Each task has a :attr:`~kvsim.plan.tasks.SweepTask.weight`: its CPU seconds by the cost
model (:mod:`kvsim.plan.run_cost`) where it has one, else estimated requests x systems or simulated
seconds x systems. Before any task finishes the ETA is the cost model's own (its CPU seconds over
the workers), said to be an estimate. Once tasks finish, each worker's pace is measured as weight
done per second of the finished tasks' *own* wall time -- not per second elapsed, which counts the
tasks still in flight as if no work had been done on them, and with ``W`` workers made the first
ETA about ``W`` times too high -- and the work left is shared over the workers that still have
tasks. A task that runs longer than :data:`HEARTBEAT_S` without any line says so (a heartbeat), so
a long point never leaves a log silent; its ETA counts down from the one the last finished task
gave, and says when the points in flight have run past it.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO

from kvsim.plan.tasks import SweepTask

__all__ = ["SweepProgress", "format_duration", "HEARTBEAT_S", "start_heartbeat"]

HEARTBEAT_S = 30.0
"""Seconds without a line after which a running sweep writes one (what runs, for how long)."""


def format_duration(seconds: float) -> str:
    """``4.2 s``, ``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    seconds = max(0.0, seconds)
    if seconds < 0.1:
        return "under 0.1 s"
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def start_heartbeat(stop: threading.Event, check: Callable[[], object], every_s: float) -> threading.Thread:
    """A daemon thread calling ``check()`` about every ``min(every_s, 5)`` seconds until ``stop`` is
    set; ``check`` decides whether a line is due (it writes it)."""
    def loop() -> None:
        while not stop.wait(max(0.01, min(every_s, 5.0))):
            check()

    thread = threading.Thread(target=loop, name="kvsim-heartbeat", daemon=True)
    thread.start()
    return thread


class SweepProgress:
    """Reports tasks as they finish.

    Parameters
    ----------
    name : str
        Scenario name (the bar's label).
    tasks : sequence of SweepTask
        The tasks that will run (not those already stored).
    stored : int
        Tasks found finished in the results folder (skipped).
    bar : bool
        Show a tqdm bar too (on a terminal).
    stream : file
        Where lines go (standard error).
    """

    def __init__(self, name: str, tasks: Sequence[SweepTask], stored: int = 0, bar: bool = False,
                 stream: IO[str] | None = None, workers: int = 1, estimated_cpu_s: float | None = None,
                 heartbeat_s: float = HEARTBEAT_S):
        self.stream = stream if stream is not None else sys.stderr
        self.total = len(tasks)
        self.stored = stored
        self.workers = max(1, int(workers))
        self.estimated_cpu_s = estimated_cpu_s  # the cost model's CPU seconds of every task (None: none)
        self.weight_left = sum(t.weight for t in tasks)
        self.weight_done = 0.0
        self.own_wall_s = 0.0  # the finished tasks' own wall seconds
        self.done = 0
        self.started = time.perf_counter()
        self.last_finish: float | None = None  # when the last task finished (the pace's ETA dates from then)
        self.last_line = self.started
        self.bar = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat_s = heartbeat_s
        self._beat: threading.Thread | None = None
        if bar and self.total:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit="point", desc=name, leave=False, dynamic_ncols=True,
                            file=self.stream)

    def begin(self, workers_text: str) -> None:
        """The opening line: how many tasks run, how many were found stored, on what, and the cost
        model's estimate of how long; then the heartbeat starts."""
        kept = f", {self.stored} already stored (skipped)" if self.stored else ""
        estimate = ""
        if self.estimated_cpu_s is not None and self.total:
            wall = self.estimated_cpu_s / min(self.workers, self.total)
            estimate = f"; estimated {format_duration(wall)} (cost model)"
        self._write(f"kvsim: {self.total} point run(s) to do{kept}, {workers_text}{estimate}")
        if self.total and self._heartbeat_s > 0:
            self._beat = start_heartbeat(self._stop, self.beat, self._heartbeat_s)

    def eta_s(self) -> float:
        """Seconds until every task is done, by the pace of the finished ones (see the module
        docstring); NaN before any has finished."""
        if self.done >= self.total:
            return 0.0
        if self.weight_done <= 0 or self.own_wall_s <= 0:
            return float("nan")
        pace = self.weight_done / self.own_wall_s  # weight per second of one worker
        return max(self.weight_left, 0.0) / (pace * min(self.workers, self.total - self.done))

    def finished(self, task: SweepTask, wall_s: float, now: float | None = None) -> None:
        """One line for ``task``, finished after ``wall_s`` seconds of its own (``now``:
        ``time.perf_counter()`` by default)."""
        with self._lock:
            self.last_finish = time.perf_counter() if now is None else now
            self.done += 1
            self.weight_done += task.weight
            self.weight_left -= task.weight
            self.own_wall_s += max(wall_s, 0.0)
            elapsed = time.perf_counter() - self.started
            if self.done < self.total:
                eta = self.eta_s()
                tail = "ETA unknown" if math.isnan(eta) else f"ETA {format_duration(eta)}"
            else:
                tail = "all done"
        self._write(f"kvsim: [{self.done}/{self.total}] {task.label()} done in {format_duration(wall_s)}; "
                    f"elapsed {format_duration(elapsed)}, {tail}")
        if self.bar is not None:
            self.bar.update(1)

    def beat(self, now: float | None = None) -> bool:
        """Write a line if none was written for :data:`HEARTBEAT_S` (``now``: ``time.perf_counter()``
        by default) while tasks run; returns whether it wrote one."""
        now = time.perf_counter() if now is None else now
        with self._lock:
            if now - self.last_line < self._heartbeat_s or self.done >= self.total:
                return False
            eta = self.eta_s()
            if math.isnan(eta) and self.estimated_cpu_s is not None:
                left = self.estimated_cpu_s / min(self.workers, self.total) - (now - self.started)
                tail = (f"about {format_duration(left)} left by the cost model" if left > 0 else
                        "longer than the cost model's estimate")
            elif math.isnan(eta) or self.last_finish is None:
                tail = "ETA unknown"
            else:  # the pace's ETA was right when the last task finished: count down from then
                eta -= now - self.last_finish
                tail = f"ETA {format_duration(eta)}" if eta > 0 else "past the ETA the finished points' pace gave"
            running = min(self.workers, self.total - self.done)
        self._write(f"kvsim: still running: {self.done}/{self.total} done, {running} in flight; "
                    f"elapsed {format_duration(now - self.started)}, {tail}")
        self.last_line = max(self.last_line, now)
        return True

    def note(self, line: str) -> None:
        """Any other line about the sweep (a retry after workers died), through the bar."""
        self._write(line)

    def close(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _write(self, line: str) -> None:
        from tqdm import tqdm

        self.last_line = time.perf_counter()
        tqdm.write(line, file=self.stream)  # clears and redraws any bar on the terminal
        self.stream.flush()
