"""Request routers: which instance of a system serves an arriving request.

Ties are broken by the lowest instance index, so routing is deterministic.
"""

from __future__ import annotations

from typing import Protocol, Sequence as Seq

__all__ = ["Router", "RoundRobinRouter", "LeastOutstandingRouter", "ROUTERS"]


class HasOutstanding(Protocol):
    @property
    def outstanding(self) -> int: ...


class Router(Protocol):
    def choose(self, instances: Seq[HasOutstanding]) -> int: ...


class RoundRobinRouter:
    """Instances in turn: 0, 1, ..., n-1, 0, ..."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, instances: Seq[HasOutstanding]) -> int:
        index = self._next % len(instances)
        self._next = index + 1
        return index


class LeastOutstandingRouter:
    """The instance with the fewest unfinished requests (lowest index on ties)."""

    def choose(self, instances: Seq[HasOutstanding]) -> int:
        best, best_load = 0, instances[0].outstanding
        for index in range(1, len(instances)):
            load = instances[index].outstanding
            if load < best_load:
                best, best_load = index, load
        return best


ROUTERS = {"round_robin": RoundRobinRouter, "least_outstanding": LeastOutstandingRouter}
"""Router ``kind`` in a scenario -> class."""
