"""Time-weighted levels and windowed counters, updated once per event (never per token)."""

from __future__ import annotations

__all__ = ["TimeWeightedLevel", "WindowCounter"]


class TimeWeightedLevel:
    """Integral of a piecewise-constant signal over ``[window_start_s, ...)``.

    Parameters
    ----------
    window_start_s : float
        Time from which the integral counts (the end of warm-up), seconds.
    initial : float
        Value at time 0.
    """

    def __init__(self, window_start_s: float = 0.0, initial: float = 0.0):
        self.window_start_s = window_start_s
        self.value = initial
        self._t = 0.0
        self._area = 0.0

    def set(self, t: float, value: float) -> None:
        """The signal becomes ``value`` at time ``t`` (seconds, non-decreasing)."""
        start = self._t if self._t > self.window_start_s else self.window_start_s
        if t > start:
            self._area += self.value * (t - start)
        self._t = t
        self.value = value

    def mean(self, until_s: float) -> float:
        """Time-weighted mean over ``[window_start_s, until_s]``."""
        start = self._t if self._t > self.window_start_s else self.window_start_s
        area = self._area + (self.value * (until_s - start) if until_s > start else 0.0)
        span = until_s - self.window_start_s
        return area / span if span > 0 else float("nan")


class WindowCounter:
    """Counts events (e.g. tokens) that happen at or after ``window_start_s``."""

    def __init__(self, window_start_s: float = 0.0):
        self.window_start_s = window_start_s
        self.total = 0
        self.in_window = 0

    def add(self, t: float, amount: int) -> None:
        self.total += amount
        if t >= self.window_start_s:
            self.in_window += amount
