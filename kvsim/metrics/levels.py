"""Time-weighted levels and windowed counters, updated once per event (never per token).

A kernel of the compiled backend (:mod:`kvsim.backend`): the ``cython`` declarations type the
fields and locals when compiled and do nothing in the pure-Python reference.
"""

from __future__ import annotations

from functools import reduce
from operator import add, mul, sub

import cython
import numpy as np

__all__ = ["TimeWeightedLevel", "WindowCounter"]


class TimeWeightedLevel:
    """Integral of a piecewise-constant signal over the window ``[window_start_s, window_end_s]``.

    Parameters
    ----------
    window_start_s : float
        Time from which the integral counts (the end of warm-up), seconds.
    window_end_s : float
        Time after which it no longer counts (the end of the measured run), seconds.
    initial : float
        Value at time 0.
    """

    __slots__ = ("window_start_s", "window_end_s", "value", "_t", "_area", "_peak")  # C doubles compiled (levels.pxd)

    def __init__(self, window_start_s: float = 0.0, window_end_s: float = float("inf"), initial: float = 0.0):
        self.window_start_s = window_start_s
        self.window_end_s = window_end_s
        self.value = initial
        self._t = 0.0
        self._area = 0.0
        self._peak = float("-inf")

    def _area_until(self, t: float) -> float:
        start = max(self._t, self.window_start_s)
        end = min(t, self.window_end_s)
        return self.value * (end - start) if end > start else 0.0

    @cython.locals(start=cython.double, end=cython.double)  # t, value: C doubles (levels.pxd)
    def set(self, t: float, value: float) -> None:
        """The signal becomes ``value`` at time ``t`` (seconds, non-decreasing)."""
        # _area_until(t), written out: every engine iteration sets a level twice
        start = self._t if self._t > self.window_start_s else self.window_start_s
        end = t if t < self.window_end_s else self.window_end_s
        self._area += self.value * (end - start) if end > start else 0.0
        if t > self.window_start_s and self._t <= self.window_end_s:
            self._peak = max(self._peak, self.value)  # the old value was held inside the window
        if self.window_start_s <= t <= self.window_end_s:
            self._peak = max(self._peak, value)
        self._t = t
        self.value = value

    @cython.locals(buf=cython.p_double, n=cython.Py_ssize_t, k=cython.Py_ssize_t)
    def set_at_each(self, times_s: list[float], first: list[float], then: list[float]) -> None:
        """At each time ``times_s[k]`` (non-decreasing) the signal becomes ``first[k]`` and at once
        ``then[k]``: the same as ``set(t, first[k]); set(t, then[k])`` for each ``k`` in order, to
        the bit, in one call (a coalesced run of engine steps, each ending and allocating the next)."""
        ws, we = self.window_start_s, self.window_end_s
        if not cython.compiled and len(times_s) >= 12 and self._t > ws and times_s[-1] <= we:
            # all inside the window (most runs; a short one is quicker in the loop below): every
            # value held counts, every product is added in order (a left fold, not sum(), whose
            # float sum may compensate). Compiled, the loop below is quicker: the same additions.
            helds = [self.value] + then[:-1]
            spans = map(sub, times_s, [self._t] + times_s[:-1])
            self._area = reduce(add, map(mul, helds, spans), self._area)
            self._peak = max(self._peak, self.value, max(first), max(then))
            self.value, self._t = then[-1], times_s[-1]
            return
        n = len(times_s)
        if cython.compiled:  # the C loop reads C arrays: copy the lists in
            buf = _doubles(3 * n)
            for k in range(n):
                buf[k], buf[n + k], buf[2 * n + k] = times_s[k], first[k], then[k]
            self.set_steps(buf, buf + n, buf + 2 * n, n)
            free(buf)  # noqa: F821
        else:
            self.set_steps(times_s, first, then, n)

    @cython.locals(ws=cython.double, we=cython.double, area=cython.double, peak=cython.double,
                   held=cython.double, last=cython.double, t=cython.double, a=cython.double, b=cython.double,
                   start=cython.double, end=cython.double, k=cython.Py_ssize_t)
    def set_steps(self, times_s, first, then, n: int) -> None:
        """:meth:`set_at_each` over the first ``n`` items of ``times_s``, ``first`` and ``then``:
        lists in the pure-Python reference, C arrays compiled (where a decode run keeps its
        steps; this is a C method there, ``levels.pxd``)."""
        ws, we = self.window_start_s, self.window_end_s
        area, peak, held, last = self._area, self._peak, self.value, self._t
        for k in range(n):
            t, a, b = times_s[k], first[k], then[k]
            start = last if last > ws else ws
            end = t if t < we else we
            if end > start:
                area += held * (end - start)
            if t > ws and last <= we and held > peak:
                peak = held
            if ws <= t <= we:
                if a > peak:
                    peak = a
                if b > peak:
                    peak = b
            held, last = b, t
        self._area, self._peak, self.value, self._t = area, peak, held, last

    def set_at_each_array(self, times_s: np.ndarray, first: np.ndarray, then: np.ndarray) -> None:
        """:meth:`set_at_each` with numpy arrays: the same products, added in the same order."""
        ws, we = self.window_start_s, self.window_end_s
        before = np.concatenate(([self._t], times_s[:-1]))
        held = np.concatenate(([self.value], then[:-1]))
        if self._t > ws and times_s[-1] <= we:  # all inside the window (most runs): every value counts
            self._area = float(np.add.accumulate(np.concatenate(([self._area], held * (times_s - before))))[-1])
            self._peak = max(self._peak, self.value, float(first.max()), float(then.max()))
            self.value, self._t = float(then[-1]), float(times_s[-1])
            return
        start = np.where(before > ws, before, ws)
        end = np.where(times_s < we, times_s, we)
        spans = end > start
        if spans.any():
            self._area = float(np.add.accumulate(np.concatenate(([self._area], held[spans] * (end - start)[spans])))[-1])
        peak = self._peak
        was_held = (times_s > ws) & (before <= we)
        if was_held.any():
            peak = max(peak, float(held[was_held].max()))
        inside = (times_s >= ws) & (times_s <= we)
        if inside.any():
            peak = max(peak, float(first[inside].max()), float(then[inside].max()))
        self._peak = peak
        self.value, self._t = float(then[-1]), float(times_s[-1])

    def peak(self) -> float:
        """Highest value held inside the window (NaN if the window saw none)."""
        best = self._peak
        if self._t <= self.window_end_s:  # the value now is held from its change into the window
            best = max(best, self.value)
        return best if best > float("-inf") else float("nan")

    def mean(self, until_s: float | None = None) -> float:
        """Time-weighted mean over ``[window_start_s, min(until_s, window_end_s)]``."""
        end = min(until_s if until_s is not None else self.window_end_s, self.window_end_s)
        span = end - self.window_start_s
        return (self._area + self._area_until(end)) / span if span > 0 else float("nan")


class WindowCounter:
    """Counts events (e.g. tokens) that happen inside ``[window_start_s, window_end_s]``."""

    __slots__ = ("window_start_s", "window_end_s", "total", "in_window")  # typed compiled (levels.pxd)

    def __init__(self, window_start_s: float = 0.0, window_end_s: float = float("inf")):
        self.window_start_s = window_start_s
        self.window_end_s = window_end_s
        self.total = 0
        self.in_window = 0

    def add(self, t: float, amount: int) -> None:  # t: a C double (levels.pxd)
        self.total += amount
        if self.window_start_s <= t <= self.window_end_s:
            self.in_window += amount

    def add_at_each_array(self, times_s: np.ndarray, amount: int) -> None:
        """``add(t, amount)`` at each of the increasing ``times_s``."""
        self.total += amount * len(times_s)
        if self.window_start_s <= times_s[0] and times_s[-1] <= self.window_end_s:
            self.in_window += amount * len(times_s)
            return
        inside = np.searchsorted(times_s, self.window_end_s, side="right") - np.searchsorted(
            times_s, self.window_start_s, side="left")
        self.in_window += amount * int(inside)

    @cython.locals(buf=cython.p_double, n=cython.Py_ssize_t, k=cython.Py_ssize_t)
    def add_at_each(self, times_s: list[float], amount: int) -> None:
        """``add(t, amount)`` at each of the non-decreasing ``times_s``."""
        n = len(times_s)
        if n and self.window_start_s <= times_s[0] and times_s[-1] <= self.window_end_s:
            self.total += amount * n
            self.in_window += amount * n
            return
        if cython.compiled:  # the C loop reads a C array: copy the list in
            buf = _doubles(n)
            for k in range(n):
                buf[k] = times_s[k]
            self.add_at_steps(buf, n, amount)
            free(buf)  # noqa: F821
        else:
            self.add_at_steps(times_s, n, amount)

    @cython.locals(ws=cython.double, we=cython.double, t=cython.double, k=cython.Py_ssize_t, inside=cython.Py_ssize_t)
    def add_at_steps(self, times_s, n: int, amount: int) -> None:
        """:meth:`add_at_each` at the first ``n`` of the non-decreasing ``times_s`` (a list in the
        pure-Python reference, a C array compiled: a C method there, ``levels.pxd``)."""
        ws, we = self.window_start_s, self.window_end_s
        self.total += amount * n
        inside = 0
        for k in range(n):
            t = times_s[k]
            if ws <= t <= we:
                inside += 1
        self.in_window += amount * inside


def _doubles(n):
    """Room for ``n`` C doubles (compiled only; the caller frees it)."""
    if cython.compiled:
        buf = cython.cast(cython.p_double, malloc((n if n > 0 else 1) * cython.sizeof(cython.double)))  # noqa: F821
        if buf == cython.NULL:
            raise MemoryError()
        return buf
