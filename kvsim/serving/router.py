"""Request routers: which instance of a role (mixed, prefill or decode) serves a request.

Every router has one method, ``choose(instances, seq=None) -> index`` into the list it is given
(the instances currently in that role), ``seq`` being the request to place. Ties are broken by
the lowest index, so routing is deterministic. The ``cache_aware`` router, which reads the
cluster KV index, lives in :mod:`kvsim.serving.cache_router`; :func:`make_router` builds any kind.

Cost per arrival. ``least_outstanding`` is O(log n) in the instances of the role: its key moves
only when a request arrives, finishes, leaves or is handed off, and instances report those moves
to the system's :class:`~kvsim.serving.load_board.LoadBoard`. The others scan, O(n): their keys
move inside the engine loop on every iteration -- ``pending_prompt_tokens`` with each prefill
chunk computed and at each admission that finds a cached prefix or parks to load one (not all
of which reach a scheduler event), ``free_kv_tokens`` whenever a page is allocated or freed
while forming a batch -- so keeping them in a heap would mean a notification from inside the
batch scheduler on every iteration of every instance, not just per request; and
``prefix_aware`` (like ``cache_aware``) depends on the request being placed, so no order of the
instances can be kept ahead of it.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import Any, Protocol

import numpy as np

from kvsim.serving.cache_router import CacheAwareRouter
from kvsim.serving.load_board import LeastOutstandingRouter, LoadBoard, least_outstanding_scan
from kvsim.serving.specs import CacheAwareSpec

__all__ = [
    "Router", "RoundRobinRouter", "RandomRouter", "LeastOutstandingRouter", "LeastPromptTokensRouter", "MostFreeKVRouter",
    "PrefixAwareRouter", "ROUTERS", "make_router", "least_outstanding_scan",
]


class Routable(Protocol):
    @property
    def outstanding(self) -> int: ...

    @property
    def pending_prompt_tokens(self) -> int: ...

    @property
    def free_kv_tokens(self) -> int: ...

    @property
    def held_kv_tokens(self) -> int: ...

    def cached_prefix_tokens(self, seq: Any) -> int: ...


class Router(Protocol):
    def choose(self, instances: Seq[Routable], seq: Any = None) -> int: ...


class RoundRobinRouter:
    """Instances in turn: 0, 1, ..., n-1, 0, ..."""

    def __init__(self) -> None:
        self._next = 0

    def choose(self, instances: Seq[Routable], seq: Any = None) -> int:
        index = self._next % len(instances)
        self._next = index + 1
        return index


class RandomRouter:
    """An instance drawn uniformly at random, from the named stream ``router.random`` (the
    baseline of load balancers; also what makes a system of ``k`` instances ``k`` independent
    queues, each fed a Poisson stream of ``1 / k`` the rate: Poisson thinning)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng

    def choose(self, instances: Seq[Routable], seq: Any = None) -> int:
        return int(self._rng.integers(len(instances)))


class LeastPromptTokensRouter:
    """The instance with the fewest prompt tokens still to compute (then fewest outstanding):
    for prefill instances, whose work is prompt tokens, not requests."""

    def choose(self, instances: Seq[Routable], seq: Any = None) -> int:
        keys = [(inst.pending_prompt_tokens, inst.outstanding) for inst in instances]
        return min(range(len(instances)), key=keys.__getitem__)


class MostFreeKVRouter:
    """The instance with the most free KV tokens (then fewest outstanding): for decode instances,
    whose capacity is the KV they can hold."""

    def choose(self, instances: Seq[Routable], seq: Any = None) -> int:
        keys = [(-inst.free_kv_tokens, inst.outstanding) for inst in instances]
        return min(range(len(instances)), key=keys.__getitem__)


class PrefixAwareRouter:
    """The instance where the request's prompt costs least: prompt tokens still queued there,
    minus the leading prompt tokens already in its HBM prefix cache (then fewest outstanding).
    Without prefix hashes it is :class:`LeastPromptTokensRouter`. Scans the prompt's blocks on
    each instance: a cost per arrival that grows with instances and prompt length."""

    def choose(self, instances: Seq[Routable], seq: Any = None) -> int:
        keys = [(inst.pending_prompt_tokens - inst.cached_prefix_tokens(seq), inst.outstanding)
                for inst in instances]
        return min(range(len(instances)), key=keys.__getitem__)


ROUTERS: dict[str, Callable[[], Router]] = {
    "round_robin": RoundRobinRouter, "least_outstanding": LeastOutstandingRouter,
    "least_prompt_tokens": LeastPromptTokensRouter, "most_free_kv": MostFreeKVRouter,
    "prefix_aware": PrefixAwareRouter,
}
"""Router ``kind`` in a scenario -> class, for the kinds that need nothing to be built."""


def make_router(kind: str, cache: Any = None, spec: Any = None, clock: Any = None,
                board: LoadBoard | None = None, rng: np.random.Generator | None = None) -> Router:
    """A router of ``kind``; ``cache_aware`` needs the system's cache (a
    :class:`~kvsim.serving.cache.SystemCache`), its spec (default settings if None) and the clock;
    ``least_outstanding`` reads the system's ``board`` if given (it scans otherwise); ``random``
    draws from ``rng`` (the point's ``router.random`` stream)."""
    if kind == "random":
        if rng is None:
            raise ValueError("the random router draws from a named stream: pass rng")
        return RandomRouter(rng)
    if kind == "cache_aware":
        if cache is None:
            raise ValueError("the cache_aware router reads the cluster KV index: the system needs a kv_cache")
        return CacheAwareRouter(cache, spec if spec is not None else CacheAwareSpec(), clock)
    if kind == "least_outstanding":
        # the board's own: compiled, a C class reading the compiled board
        return board.router() if board is not None else LeastOutstandingRouter()
    return ROUTERS[kind]()
