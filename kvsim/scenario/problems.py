"""Problems found at several sweep points, each reported once with the points it holds at.

A sweep of six loads over a system whose model does not fit its node finds the same problem six
times; the reader needs it once, with where it holds::

    s.yaml:14: systems.l20.node: at every sweep point (6): qwen3-235b-a22b does not fit ...
    s.yaml:20: sweep.systems.h20.instance.tp: at sweep points [tp=3] and [tp=5]: ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvsim.yaml_io import Path

__all__ = ["PointProblems", "point_label"]

SHOWN = 3
"""Most sweep points named in one message (the rest are counted)."""


LABEL_CHARS = 200
"""Longest point label before it is cut (a point may set thousands of fields)."""


def point_label(params: dict[str, Any]) -> str:
    """``rate=5/s, tp=2``: a sweep point as written in the file (cut after :data:`LABEL_CHARS`)."""
    parts: list[str] = []
    length = 0
    for k, v in params.items():
        if length > LABEL_CHARS:
            return ", ".join(parts) + f", ... ({len(params) - len(parts):,} more)"
        parts.append(f"{k}={v}")
        length += len(parts[-1]) + 2
    return ", ".join(parts)


class PointProblems:
    """Collects ``(field path, message)`` problems per sweep point; :meth:`lines` merges repeats.

    Parameters
    ----------
    n_points : int
        Points in the sweep grid (to say "at every sweep point" when a problem holds at all).
    problem : callable
        ``problem(path, message) -> "file:line: field: message"`` (e.g. :meth:`Located.problem`).
    """

    def __init__(self, n_points: int, problem: Callable[[Path, str], str]):
        self.n_points = n_points
        self.problem = problem
        self._points: dict[tuple[Path, str], dict[str | None, None]] = {}  # labels in the order added
        self._last: tuple[Any, str | None] = (None, None)  # the last params and their label

    def add(self, path: Path, message: str, params: dict[str, Any] | None = None) -> None:
        """Record ``message`` about field ``path`` at the sweep point with ``params`` (None or
        empty: the scenario has no sweep, or the problem does not depend on the point)."""
        labels = self._points.setdefault((tuple(path), message), {})
        if self._last[0] is not params:  # a point's problems come together: label it once
            self._last = (params, point_label(params) if params else None)
        labels[self._last[1]] = None

    def __bool__(self) -> bool:
        return bool(self._points)

    def lines(self) -> list[str]:
        """One ``file:line: field: message`` per distinct problem, in the order first found."""
        out = []
        for (path, message), labels in self._points.items():
            named = [label for label in labels if label is not None]
            if len(named) < len(labels) or not named:
                out.append(self.problem(path, message))  # holds without a sweep point too
            else:
                out.append(self.problem(path, f"{self._where(named)}: {message}"))
        return out

    def _where(self, labels: list[str]) -> str:
        if len(labels) == 1:
            return f"at sweep point [{labels[0]}]"
        if len(labels) == self.n_points:
            return f"at every sweep point ({self.n_points})"
        shown = [f"[{label}]" for label in labels[:SHOWN]]
        if len(labels) > SHOWN:
            return f"at {len(labels)} of {self.n_points} sweep points ({', '.join(shown)}, ...)"
        return f"at sweep points {', '.join(shown[:-1])} and {shown[-1]}"
