"""A router's delayed view of the cluster KV index.

Production KV-aware routers do not read the engines' caches directly: the engines publish KV
events (block stored, block removed) that reach the router's index some time later (NVIDIA
Dynamo's KV router and llm-d's KV-cache indexer both work this way), so a routing decision sees
the caches as they were a little while ago. :class:`IndexView` models that as a periodic
refresh: at time ``t`` the view holds every change of the live :class:`~kvsim.kv.KVIndex` made
up to the last refresh instant ``floor(t / refresh_s) * refresh_s``, and none after it. The view
is therefore between 0 and ``refresh_s`` old.

It is kept from the index's change notifications (:meth:`KVIndex.watch`) and brought up to date
lazily, when a routing decision reads it: the result is the same as a refresh process that woke
every ``refresh_s`` and applied what had changed, without one simulation event per refresh (or
per block). Applying the log costs O(changes) in total over a run.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable

from kvsim.kv import BlockStore, KVIndex
from kvsim.kv.extent_index import ExtentIndex, IntervalMap

__all__ = ["IndexView", "ExtentIndexView"]


class IndexView:
    """The live index as of the last refresh instant (see the module docstring).

    Parameters
    ----------
    index : KVIndex
        The live index; it must still be empty (the view follows it from its first change).
    clock : callable
        ``clock()``: the simulated time now, seconds.
    refresh_s : float
        Seconds between refreshes (positive).
    """

    def __init__(self, index: KVIndex, clock: Callable[[], float], refresh_s: float):
        if not refresh_s > 0 or not math.isfinite(refresh_s):
            raise ValueError(f"refresh_s must be positive and finite, got {refresh_s!r}")
        if len(index):
            raise ValueError("attach the view before anything is cached: it follows the index's changes")
        self.clock = clock
        self.refresh_s = refresh_s
        self._where: dict[Hashable, dict[BlockStore, None]] = {}
        self._log: deque[tuple[float, Hashable, BlockStore, bool]] = deque()
        self.applied = 0  # changes applied so far
        index.watch(self._changed)

    def __len__(self) -> int:
        """Distinct blocks the view holds somewhere."""
        return len(self._where)

    def _changed(self, block: Hashable, store: BlockStore, added: bool) -> None:
        self._log.append((self.clock(), block, store, added))

    def last_refresh_s(self, now_s: float) -> float:
        """The refresh instant the view shows at ``now_s``."""
        # the small slack keeps 0.03 / 0.01 = 2.9999999999999996 on the refresh at 0.03
        return math.floor(now_s / self.refresh_s + 1e-9) * self.refresh_s

    def refresh(self) -> None:
        """Apply every logged change made up to the last refresh instant."""
        log = self._log
        if not log:
            return
        until = self.last_refresh_s(self.clock())
        where_of = self._where
        while log and log[0][0] <= until:
            _, block, store, added = log.popleft()
            where = where_of.get(block)
            if added:
                if where is None:
                    where_of[block] = {store: None}
                else:
                    where[store] = None
            elif where is not None:
                where.pop(store, None)
                if not where:
                    del where_of[block]
            self.applied += 1

    def locations(self, block: Hashable) -> tuple[BlockStore, ...]:
        """Stores holding ``block`` in the view, in the order they acquired it (as
        :meth:`KVIndex.locations`); call :meth:`refresh` first to bring the view to now."""
        where = self._where.get(block)
        return tuple(where) if where else ()


class ExtentIndexView:
    """:class:`IndexView` of an :class:`~kvsim.kv.extent_index.ExtentIndex`: the same delayed
    view, kept per stretch (the index tells a stretch's news in one call; the view keeps, per
    chain, stretches with the stores holding them in the order they acquired them)."""

    def __init__(self, index: ExtentIndex, clock: Callable[[], float], refresh_s: float):
        if not refresh_s > 0 or not math.isfinite(refresh_s):
            raise ValueError(f"refresh_s must be positive and finite, got {refresh_s!r}")
        if index.blocks():
            raise ValueError("attach the view before anything is cached: it follows the index's changes")
        self.clock = clock
        self.refresh_s = refresh_s
        self._maps: dict[Hashable, IntervalMap] = {}
        self._sets: dict[tuple, tuple] = {}
        self._log: deque[tuple[float, Hashable, int, int, BlockStore, bool]] = deque()
        self.applied = 0  # stretches of changes applied so far
        index.watch(self._changed)

    def _changed(self, chain: Hashable, start: int, end: int, store: BlockStore, added: bool) -> None:
        self._log.append((self.clock(), chain, start, end, store, added))

    last_refresh_s = IndexView.last_refresh_s

    def refresh(self) -> None:
        """Apply every logged change made up to the last refresh instant."""
        log = self._log
        if not log:
            return
        until = self.last_refresh_s(self.clock())
        maps, sets = self._maps, self._sets
        while log and log[0][0] <= until:
            _, chain, start, end, store, added = log.popleft()
            m = maps.get(chain)
            if m is None:
                m = maps[chain] = IntervalMap()
            memo: dict[int, tuple | None] = {}

            def change(where, store=store, added=added, memo=memo):
                key = id(where)
                if key not in memo:
                    if added:
                        memo[key] = sets.setdefault((store,), (store,)) if where is None else (
                            where if store in where else sets.setdefault(where + (store,), where + (store,)))
                    elif where is None or store not in where:
                        memo[key] = where
                    else:
                        rest = tuple(s for s in where if s is not store)
                        memo[key] = sets.setdefault(rest, rest) if rest else None
                return memo[key]

            m.assign(start, end, change)
            if not m:
                del maps[chain]
            self.applied += 1

    def pieces(self, chain: Hashable, start: int, end: int) -> list[tuple[int, int, tuple]]:
        """:meth:`ExtentIndex.pieces` as the view holds it (call :meth:`refresh` first)."""
        m = self._maps.get(chain)
        if m is None:
            return [(start, end, ())] if start < end else []
        return [(s, e, v or ()) for s, e, v in m.pieces(start, end)]
