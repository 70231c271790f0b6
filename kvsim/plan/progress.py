"""Sweep progress that reads well in a log: one line per finished task, with elapsed time and ETA.

Lines go to standard error always (a study run under ``nohup`` or CI says how far it is); on a
terminal a tqdm bar over the tasks runs beside them (lines are written through the bar, so they
do not tear it). The ETA assumes the remaining tasks cost what the finished ones did per unit of
:attr:`~kvsim.plan.tasks.SweepTask.weight` (estimated requests x systems, or simulated seconds
x systems): rough while few tasks have finished, and with several workers it counts wall time.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Sequence

from kvsim.plan.tasks import SweepTask

__all__ = ["SweepProgress", "format_duration"]


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
                 stream: IO[str] | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.total = len(tasks)
        self.stored = stored
        self.weight_left = sum(t.weight for t in tasks)
        self.weight_done = 0.0
        self.done = 0
        self.started = time.perf_counter()
        self.bar = None
        if bar and self.total:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit="point", desc=name, leave=False, dynamic_ncols=True,
                            file=self.stream)

    def begin(self, workers_text: str) -> None:
        """The opening line: how many tasks run, how many were found stored, on what."""
        kept = f", {self.stored} already stored (skipped)" if self.stored else ""
        self._write(f"kvsim: {self.total} point run(s) to do{kept}, {workers_text}")

    def finished(self, task: SweepTask, wall_s: float) -> None:
        """One line for ``task``, finished after ``wall_s`` seconds of its own."""
        self.done += 1
        self.weight_done += task.weight
        self.weight_left -= task.weight
        elapsed = time.perf_counter() - self.started
        if self.done < self.total:
            eta = elapsed / self.weight_done * max(self.weight_left, 0.0) if self.weight_done > 0 else float("nan")
            tail = f"ETA {format_duration(eta)}" if eta == eta else "ETA unknown"
        else:
            tail = "all done"
        self._write(f"kvsim: [{self.done}/{self.total}] {task.label()} done in {format_duration(wall_s)}; "
                    f"elapsed {format_duration(elapsed)}, {tail}")
        if self.bar is not None:
            self.bar.update(1)

    def note(self, line: str) -> None:
        """Any other line about the sweep (a retry after workers died), through the bar."""
        self._write(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _write(self, line: str) -> None:
        from tqdm import tqdm

        tqdm.write(line, file=self.stream)  # clears and redraws any bar on the terminal
        self.stream.flush()
