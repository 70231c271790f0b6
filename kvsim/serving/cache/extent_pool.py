"""One addressing domain's HBM pool kept as extents (issue 23, item 1; docs/extents.md).

The same pool as :mod:`kvsim.serving.cache.domain_pool` -- one store, many homes, readers
not copies, domain-wide capacity and eviction, reclaim in runs -- with every structure kept per
*extent* (a stretch of consecutive blocks of one chain) instead of per block: the store is an
:class:`~kvsim.kv.extents.ExtentStore`, the homes an
:class:`~kvsim.serving.cache.extent_homes.ExtentHomes`, the blocks still landing an
:class:`InflightMap`. Every call takes stretches ``(chain, start, end)`` and does what
:class:`~kvsim.serving.cache.domain_pool.DomainPool` does on those blocks in order, so a system
gives the same records either way (``tests/test_extent_domains.py`` runs both on the same
scenarios). A system keeps its domains this way when every prompt's blocks have addresses
(:mod:`kvsim.serving.cache.segments`) and nothing else needs per-block state: see
:func:`kvsim.sim.build.kv_extents`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kv.extent_index import IntervalMap
from kvsim.kv.extents import ExtentStore
from kvsim.kv.store import whole_blocks
from kvsim.serving.cache.domain_pool import DomainPoolBase
from kvsim.serving.cache.extent_homes import ExtentHomes
from kvsim.serving.cache.member import CacheMember

if TYPE_CHECKING:
    import simpy

    from kvsim.serving.cache.tiers import SystemCache

__all__ = ["ExtentHbmStore", "ExtentDomainStore", "ExtentDomainPool", "InflightMap"]


class ExtentHbmStore(ExtentStore):
    """An HBM store kept as extents (LRU), counting bytes as :class:`~kvsim.kv.BlockStore` does:
    an instance's own HBM cache (``peer_hbm: none``), and the base of a domain's shared store."""

    def __init__(self, name: str, capacity_bytes: float, block_bytes: float, policy: str = "lru",
                 whole_pins: bool = False):
        # (``whole_pins`` is how the per-block store keeps run pins; pins are per extent here)
        if policy != "lru":
            raise ValueError(f"a store kept as extents evicts least recently used blocks, not by {policy!r}")
        super().__init__(name, whole_blocks(capacity_bytes, block_bytes))
        self.block_bytes = float(block_bytes)
        self.policy_kind = "lru"

    capacity_bytes = property(lambda self: self.capacity_blocks * self.block_bytes,
                              doc="Bytes usable for whole blocks.")
    physical_bytes = property(lambda self: self._used * self.block_bytes,
                              doc="Bytes of stored copies: one per block however many readers share it.")
    logical_bytes = property(lambda self: self._reader_refs * self.block_bytes,
                             doc="Bytes the readers see: one block's bytes per reader reference.")


class ExtentDomainStore(ExtentHbmStore):
    """The domain's store as extents (LRU); hits refresh the blocks' places in their homes'
    orders, as :class:`~kvsim.serving.cache.domain_pool.DomainStore`'s do."""

    def __init__(self, name: str, capacity_bytes: float, block_bytes: float, policy: str = "lru",
                 pool: ExtentDomainPool | None = None):
        super().__init__(name, capacity_bytes, block_bytes, policy)
        self.pool = pool

    def read_run(self, chain, start: int, end: int, read: bool = True, pin: bool = False) -> int:
        hits = self.hits
        try:
            return super().read_run(chain, start, end, read, pin)
        finally:
            hit = self.hits - hits
            if hit:  # (pinning stops at the first miss: the hits are the leading blocks)
                self.pool.homes.touched_run(chain, start, start + hit if pin else end)


class InflightMap:
    """Blocks whose bytes are still landing, per chain: stretches -> the event they land with
    (``DomainPool.inflight``'s ``block -> event``, a stretch per entry)."""

    def __init__(self) -> None:
        self._maps: dict = {}

    def __bool__(self) -> bool:
        return bool(self._maps)

    def events(self, chain, start: int, end: int) -> list[simpy.Event]:
        """The events blocks ``[start, end)`` land with, each once, in the order of its first block."""
        m = self._maps.get(chain)
        if m is None:
            return []
        return list({id(e): e for _, _, e in m.pieces(start, end) if e is not None}.values())

    def set(self, chain, start: int, end: int, event: simpy.Event) -> None:
        """Blocks ``[start, end)`` land with ``event`` (whatever they waited for before)."""
        m = self._maps.get(chain)
        if m is None:
            m = self._maps[chain] = IntervalMap()
        m.assign(start, end, lambda _old: event)

    def clear(self, chain, start: int, end: int, event: simpy.Event) -> None:
        """Blocks ``[start, end)`` that still wait for ``event`` have landed."""
        m = self._maps.get(chain)
        if m is None:
            return
        m.assign(start, end, lambda old: None if old is event else old)
        if not m:
            del self._maps[chain]


def _from_end(stretches: list[tuple], n: int) -> list[tuple]:
    """Take ``n`` blocks off the end of ``stretches`` (``(chain, first, count, step)``, least
    recent first): the most recent first, as stretches in that order."""
    out = []
    while n:
        chain, first, count, step = stretches[-1]
        m = min(count, n)
        last = first + (count - 1) * step
        out.append((chain, last, m, -step if m > 1 else 1))
        if m == count:
            stretches.pop()
        else:
            stretches[-1] = (chain, first, count - m, step if count - m > 1 else 1)
        n -= m
    return out


def _span(first: int, count: int, step: int) -> tuple[int, int]:
    """The positions of a stretch ``first, first + step, ...`` as ``[low, high)``."""
    low = first if step > 0 else first - count + 1
    return low, low + count


class ExtentDomainPool(DomainPoolBase):
    """The shared HBM cache of one addressing domain, kept as extents (see the module docstring
    and :class:`~kvsim.serving.cache.domain_pool.DomainPoolBase`, whose policy this keeps on
    stretches). Reclaim's candidates and what :meth:`_move` takes are stretches ``(chain,
    first, count, step)``: blocks ``first, first + step, ...`` (``step`` -1 where a home's order
    runs backwards).

    Parameters
    ----------
    name : str
        The domain (``su{k}``).
    system : SystemCache
    store : ExtentDomainStore
        Built by the system with the domain's capacity (its instances' pages, in blocks).
    """

    def __init__(self, name: str, system: SystemCache, store: ExtentDomainStore):
        super().__init__(name, system, store)
        self.homes = ExtentHomes()
        self.inflight = InflightMap()

    def homed_run(self, chain, start: int, end: int, cache: CacheMember) -> None:
        """Blocks ``[start, end)`` (just inserted in the store) live in ``cache``'s HBM."""
        self.homes.homed_run(chain, start, end, cache)

    def _unheld(self, cache: CacheMember, count: int) -> list:
        return self.homes.unheld(cache, count, self.store)

    def _blocks(self, items: list) -> int:
        return sum(count for _, _, count, _ in items)

    def _take_recent(self, candidates: list, count: int) -> list:
        return _from_end(candidates, count)

    def _rehome(self, chunk: list, source: CacheMember, target: CacheMember) -> list:
        for chain, first, n, step in chunk:
            self.homes.move_run(chain, first, n, step, target)
        for chain, first, n, step in chunk:
            self.store.pin_each(chain, *_span(first, n, step))
        return chunk

    def _evict(self, cache: CacheMember, count: int, evicted: dict) -> int:
        ppb = cache.geometry.pages_per_block
        store, index = self.store, self.system.index
        victims = store.evict_run(count)
        for chain, start, end in victims:
            index.discard_run(chain, start, end, store)
        freed = 0
        for chain, start, end in victims:
            for s, e, home in self.homes.forget_run(chain, start, end):
                home.pool.give((e - s) * ppb)  # (nothing to write back: no tier below such a domain)
                if home is cache:
                    freed += e - s
        return freed

    def _still_homed(self, cache: CacheMember, candidates: list) -> list:
        left = []
        for chain, first, count, step in candidates:
            low, high = _span(first, count, step)
            pieces = self.homes.homed_in(chain, low, high, cache)
            if step < 0:
                left += [(chain, e - 1, e - s, -1 if e - s > 1 else 1) for s, e in reversed(pieces)]
            else:
                left += [(chain, s, e - s, 1) for s, e in pieces]
        return left

    def _in_flight(self, items: list, done) -> None:
        for chain, first, count, step in items:
            self.inflight.set(chain, *_span(first, count, step), done)

    def _landed(self, items: list, done) -> None:
        for chain, first, count, step in items:
            low, high = _span(first, count, step)
            self.store.unpin_each(chain, low, high)
            self.inflight.clear(chain, low, high, done)

    def flush(self, cache: CacheMember) -> None:
        """An instance leaving a caching role: never one of a domain kept as extents (the
        validator refuses read_in_place with a controller that switches roles, and P/D systems
        stay per block)."""
        raise RuntimeError(f"domain {self.name} is kept as extents: no instance of it leaves a caching role")
