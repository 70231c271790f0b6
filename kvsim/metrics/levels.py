"""Time-weighted levels and windowed counters, updated once per event (never per token)."""

from __future__ import annotations

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

    def set(self, t: float, value: float) -> None:
        """The signal becomes ``value`` at time ``t`` (seconds, non-decreasing)."""
        self._area += self._area_until(t)
        if t > self.window_start_s and self._t <= self.window_end_s:
            self._peak = max(self._peak, self.value)  # the old value was held inside the window
        if self.window_start_s <= t <= self.window_end_s:
            self._peak = max(self._peak, value)
        self._t = t
        self.value = value

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

    def __init__(self, window_start_s: float = 0.0, window_end_s: float = float("inf")):
        self.window_start_s = window_start_s
        self.window_end_s = window_end_s
        self.total = 0
        self.in_window = 0

    def add(self, t: float, amount: int) -> None:
        self.total += amount
        if self.window_start_s <= t <= self.window_end_s:
            self.in_window += amount
