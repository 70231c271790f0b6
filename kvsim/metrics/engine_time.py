"""Engine time and windowed totals: what the instances of one system spent their iterations on.

Engine time is kept per instance (:class:`EngineTime`), so an instance that applies many steps
at once (a coalesced decode run, :mod:`kvsim.serving.decode_run`) adds them in the same order as
one that applies them one by one, and the totals do not depend on how events interleave across
instances; :class:`SystemCounters` sums them in instance order when asked.

A kernel of the compiled backend (:mod:`kvsim.backend`): the ``cython`` declarations type the
fields and locals when compiled and do nothing in the pure-Python reference.
"""

from __future__ import annotations

import cython
import numpy as np

from kvsim.metrics.levels import WindowCounter
from kvsim.models.step_time import exposed_host_s

__all__ = ["EngineTime", "SystemCounters"]


class EngineTime:
    """One instance's engine time: in all, inside the window, and split by what it was spent on
    (the roofline's binding side, TP all-reduce, kernel launches, the host's per-step work).

    Kept per instance, so an instance that applies many steps at once adds them in the same
    order as one that applies them one by one (the sums are the same bit for bit).
    """

    __slots__ = ("busy_s", "busy_in_window_s", "by_cause_s", "window_start_s", "window_end_s")  # engine_time.pxd

    def __init__(self, window_start_s: float, window_end_s: float):
        self.window_start_s = window_start_s
        self.window_end_s = window_end_s
        self.busy_s = 0.0
        self.busy_in_window_s = 0.0      # engine time of iterations ending inside the window
        self.by_cause_s = {"compute": 0.0, "memory": 0.0, "tp_comm": 0.0, "kernels": 0.0, "overhead": 0.0}

    @cython.locals(end_s=cython.double, duration_s=cython.double, compute_s=cython.double, memory_s=cython.double,
                   comm_s=cython.double, kernels_s=cython.double, overhead_s=cython.double)
    def add(self, end_s: float, duration_s: float, compute_s: float, memory_s: float, comm_s: float,
            kernels_s: float, overhead_s: float) -> None:
        """An iteration of ``duration_s`` ended at ``end_s`` (``memory_s``: the longer of the local
        and the remote reads)."""
        self.busy_s += duration_s
        if self.window_start_s <= end_s <= self.window_end_s:
            self.busy_in_window_s += duration_s
            causes = self.by_cause_s
            causes["compute" if compute_s >= memory_s else "memory"] += max(compute_s, memory_s)
            causes["tp_comm"] += comm_s
            causes["kernels"] += kernels_s
            causes["overhead"] += overhead_s

    @cython.locals(buf=cython.p_double, n=cython.Py_ssize_t, k=cython.Py_ssize_t)
    def add_each(self, ends_s: list[float], durations_s: list[float], compute_s: list[float], memory_s: list[float],
                 comm_s: float, kernels_s: float, overhead_s: float, host_overlap: bool = False) -> None:
        """:meth:`add` for each iteration in order (same collective, launch and host times), to
        the bit, in one call. With ``host_overlap``, ``overhead_s`` is the host's whole per-step
        time and each iteration adds the part its GPU time does not hide
        (:func:`~kvsim.models.step_time.exposed_host_s`), as :meth:`add` is given it step by step."""
        n = len(ends_s)
        if cython.compiled:  # the C loop reads C arrays: copy the lists in
            buf = _doubles(4 * n)  # noqa: F821 (a C function of the .pxd, compiled only)
            for k in range(n):
                buf[k], buf[n + k], buf[2 * n + k], buf[3 * n + k] = ends_s[k], durations_s[k], compute_s[k], memory_s[k]
            self.add_steps(buf, buf + n, buf + 2 * n, buf + 3 * n, n, comm_s, kernels_s, overhead_s, host_overlap)
            free(buf)  # noqa: F821
        else:
            self.add_steps(ends_s, durations_s, compute_s, memory_s, n, comm_s, kernels_s, overhead_s, host_overlap)

    @cython.locals(ws=cython.double, we=cython.double, busy=cython.double, in_window=cython.double,
                   compute=cython.double, memory=cython.double, comm=cython.double, kernels=cython.double,
                   overhead=cython.double, t=cython.double, d=cython.double, c=cython.double, m=cython.double,
                   k=cython.Py_ssize_t, overlap=cython.bint)
    def add_steps(self, ends_s, durations_s, compute_s, memory_s, n: int, comm_s: float, kernels_s: float,
                  overhead_s: float, host_overlap: bool = False) -> None:
        """:meth:`add_each` over the first ``n`` items of each sequence: lists in the pure-Python
        reference, C arrays compiled (where a decode run keeps its steps; this is a C method
        there, ``engine_time.pxd``)."""
        ws, we = self.window_start_s, self.window_end_s
        busy, in_window = self.busy_s, self.busy_in_window_s
        causes = self.by_cause_s
        compute, memory = causes["compute"], causes["memory"]
        comm, kernels, overhead = causes["tp_comm"], causes["kernels"], causes["overhead"]
        overlap = host_overlap
        for k in range(n):
            t, d, c, m = ends_s[k], durations_s[k], compute_s[k], memory_s[k]
            busy += d
            if ws <= t <= we:
                in_window += d
                if c >= m:
                    compute += c
                else:
                    memory += m
                comm += comm_s
                kernels += kernels_s
                overhead += exposed_host_s(overhead_s, c, m, comm_s, kernels_s) if overlap else overhead_s
        self.busy_s, self.busy_in_window_s = busy, in_window
        causes["compute"], causes["memory"] = compute, memory
        causes["tp_comm"], causes["kernels"], causes["overhead"] = comm, kernels, overhead

    def add_each_array(self, ends_s: np.ndarray, durations_s: np.ndarray, compute_s: np.ndarray,
                       memory_s: np.ndarray, comm_s: float, kernels_s: float, overhead_s: float,
                       host_overlap: bool = False) -> None:
        """:meth:`add_each` with numpy arrays (``ends_s`` increasing): each total is accumulated
        in the same order, adding 0.0 where a step adds nothing (``x + 0.0 == x``), so the totals
        are the same to the bit."""
        if self.window_start_s <= ends_s[0] and ends_s[-1] <= self.window_end_s:
            lo, hi = 0, len(ends_s)  # all inside the window (most runs)
        else:
            lo = int(np.searchsorted(ends_s, self.window_start_s, side="left"))
            hi = int(np.searchsorted(ends_s, self.window_end_s, side="right"))
        causes = self.by_cause_s
        rows = np.zeros((7, len(ends_s) + 1))
        rows[:, 0] = (self.busy_s, self.busy_in_window_s, causes["compute"], causes["memory"], causes["tp_comm"],
                      causes["kernels"], causes["overhead"])
        rows[0, 1:] = durations_s
        if hi > lo:
            inside = slice(lo + 1, hi + 1)
            c, m = compute_s[lo:hi], memory_s[lo:hi]
            bound = c >= m
            rows[1, inside] = durations_s[lo:hi]
            rows[2, inside] = np.where(bound, c, 0.0)
            rows[3, inside] = np.where(bound, 0.0, m)
            rows[4:, inside] = np.array((comm_s, kernels_s, overhead_s))[:, None]
            if host_overlap:  # exposed_host_s element-wise: the same operations, so the same bits
                gpu = np.where(bound, c, m) + comm_s + kernels_s
                rows[6, inside] = np.where(overhead_s > gpu, overhead_s - gpu, 0.0)
        totals = np.add.accumulate(rows, axis=1)[:, -1].tolist()
        self.busy_s, self.busy_in_window_s = totals[0], totals[1]
        causes["compute"], causes["memory"], causes["tp_comm"], causes["kernels"], causes["overhead"] = totals[2:]

    def add_time_only(self, end_s: float, duration_s: float) -> None:
        """An iteration whose step model gives no breakdown."""
        self.busy_s += duration_s
        if self.window_start_s <= end_s <= self.window_end_s:
            self.busy_in_window_s += duration_s


class SystemCounters:
    """Windowed totals shared by the instances of one system."""

    def __init__(self, window_start_s: float, window_end_s: float):
        self.output_tokens = WindowCounter(window_start_s, window_end_s)
        self.input_tokens = WindowCounter(window_start_s, window_end_s)
        self.iterations = 0
        self.window_start_s = window_start_s
        self.window_end_s = window_end_s
        self.engine_times: list[EngineTime] = []  # one per instance, in instance order

    def engine_time(self) -> EngineTime:
        """A new instance's engine-time account."""
        account = EngineTime(self.window_start_s, self.window_end_s)
        self.engine_times.append(account)
        return account

    @property
    def busy_s(self) -> float:
        """Engine time of every iteration, summed over instances, seconds."""
        return sum(account.busy_s for account in self.engine_times)

    @property
    def busy_in_window_s(self) -> float:
        """Engine time of iterations ending inside the window, summed over instances, seconds."""
        return sum(account.busy_in_window_s for account in self.engine_times)

    @property
    def time_by_cause_s(self) -> dict[str, float]:
        """:attr:`busy_in_window_s` split by what it was spent on, seconds."""
        totals = {"compute": 0.0, "memory": 0.0, "tp_comm": 0.0, "kernels": 0.0, "overhead": 0.0}
        for account in self.engine_times:
            for cause, seconds in account.by_cause_s.items():
                totals[cause] += seconds
        return totals
