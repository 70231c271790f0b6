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
from kvsim.serving.cache.domain_pool import MOVE_BATCH, fill_plan
from kvsim.serving.cache.extent_homes import ExtentHomes

if TYPE_CHECKING:
    import simpy

    from kvsim.serving.cache.instance_cache import InstanceCache
    from kvsim.serving.cache.tiers import SystemCache

__all__ = ["ExtentDomainStore", "ExtentDomainPool", "InflightMap"]


class ExtentDomainStore(ExtentStore):
    """The domain's store as extents (LRU), counting bytes as :class:`~kvsim.kv.BlockStore`
    does; hits refresh the blocks' places in their homes' orders, as
    :class:`~kvsim.serving.cache.domain_pool.DomainStore`'s do."""

    def __init__(self, name: str, capacity_bytes: float, block_bytes: float, pool: "ExtentDomainPool | None" = None):
        super().__init__(name, whole_blocks(capacity_bytes, block_bytes))
        self.block_bytes = float(block_bytes)
        self.policy_kind = "lru"
        self.pool = pool

    capacity_bytes = property(lambda self: self.capacity_blocks * self.block_bytes,
                              doc="Bytes usable for whole blocks.")
    physical_bytes = property(lambda self: self._used * self.block_bytes,
                              doc="Bytes of stored copies: one per block however many readers share it.")
    logical_bytes = property(lambda self: self._reader_refs * self.block_bytes,
                             doc="Bytes the readers see: one block's bytes per reader reference.")

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

    def events(self, chain, start: int, end: int) -> list["simpy.Event"]:
        """The events blocks ``[start, end)`` land with, each once, in the order of its first block."""
        m = self._maps.get(chain)
        if m is None:
            return []
        return list({id(e): e for _, _, e in m.pieces(start, end) if e is not None}.values())

    def set(self, chain, start: int, end: int, event: "simpy.Event") -> None:
        """Blocks ``[start, end)`` land with ``event`` (whatever they waited for before)."""
        m = self._maps.get(chain)
        if m is None:
            m = self._maps[chain] = IntervalMap()
        m.assign(start, end, lambda _old: event)

    def clear(self, chain, start: int, end: int, event: "simpy.Event") -> None:
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


class ExtentDomainPool:
    """The shared HBM cache of one addressing domain, kept as extents (see the module docstring
    and :class:`~kvsim.serving.cache.domain_pool.DomainPool`, whose calls these are).

    Parameters
    ----------
    name : str
        The domain (``su{k}``).
    system : SystemCache
    store : ExtentDomainStore
        Built by the system with the domain's capacity (its instances' pages, in blocks).
    """

    def __init__(self, name: str, system: "SystemCache", store: ExtentDomainStore):
        self.name = name
        self.system = system
        self.store = store
        self.members: list["InstanceCache"] = []
        self.homes = ExtentHomes()
        self.inflight = InflightMap()
        self.moves = 0            # blocks moved between members' HBM
        self.moved_bytes = 0.0    # their bytes (all cards), inside the window

    def join(self, cache: "InstanceCache") -> None:
        """``cache``'s instance holds part of the domain's HBM from now on."""
        self.members.append(cache)

    def homed_run(self, chain, start: int, end: int, cache: "InstanceCache") -> None:
        """Blocks ``[start, end)`` (just inserted in the store) live in ``cache``'s HBM."""
        self.homes.homed_run(chain, start, end, cache)

    def _peer_room(self, cache: "InstanceCache") -> tuple[list["InstanceCache"], list[int]]:
        peers = [member for member in self.members if member is not cache]
        return peers, [member.pool.free_blocks for member in peers]

    def reclaim(self, cache: "InstanceCache", shortfall_pages: int) -> None:
        """:meth:`DomainPool.reclaim`, stretch by stretch."""
        ppb = cache.geometry.pages_per_block
        need = -(-shortfall_pages // ppb)
        batch = max(need, int(MOVE_BATCH * cache.pool.num_blocks) // ppb)
        candidates = self.homes.unheld(cache, batch, self.store)
        if sum(c[2] for c in candidates) < need:
            return
        moves: dict[int, tuple["InstanceCache", list]] = {}
        freed = self._fill(cache, candidates, batch, moves)  # (takes the moved off ``candidates``)
        if freed < need:
            store, index = self.store, self.system.index
            victims = store.evict_run(need - freed)
            for chain, start, end in victims:
                index.discard_run(chain, start, end, store)
            for chain, start, end in victims:
                for s, e, home in self.homes.forget_run(chain, start, end):
                    home.pool.give((e - s) * ppb)
                    if home is cache:
                        freed += e - s
            # the peers that lost victims take the instance's next most recent blocks
            left = []
            for chain, first, count, step in candidates:
                low, high = _span(first, count, step)
                pieces = self.homes.homed_in(chain, low, high, cache)
                if step < 0:
                    pieces = [(e - 1, e - s) for s, e in reversed(pieces)]
                else:
                    pieces = [(s, e - s) for s, e in pieces]
                left += [(chain, f, n, step if n > 1 else 1) for f, n in pieces]
            freed += self._fill(cache, left, batch - freed, moves)
        for target, stretches in moves.values():
            self._move(cache, target, stretches)

    def _fill(self, cache: "InstanceCache", candidates: list, most: int, moves: dict) -> int:
        """:meth:`DomainPool._fill`: up to ``most`` of ``candidates`` (stretches, least recent
        first; the moved ones are taken off its end) to the peers with room; returns how many."""
        ppb = cache.geometry.pages_per_block
        peers, free = self._peer_room(cache)
        plan = fill_plan(free, ppb, min(most, sum(c[2] for c in candidates)))
        moved = 0
        for k, count in plan:
            target = peers[k]
            chunk = _from_end(candidates, count)  # most recent first
            cache.pool.give(count * ppb)
            if not target.pool.take(count * ppb):
                raise RuntimeError("a domain member with free pages refused them")
            for chain, first, n, step in chunk:
                self.homes.move_run(chain, first, n, step, target)
            entry = moves.setdefault(id(target), (target, []))[1]
            for chain, first, n, step in chunk:
                low, high = _span(first, n, step)
                self.store.pin_each(chain, low, high)  # in flight from now: neither evicted nor moved again
                entry.append((chain, low, high))
            moved += count
        return moved

    def _move(self, source: "InstanceCache", target: "InstanceCache", stretches: list) -> None:
        """:meth:`DomainPool._move` of the blocks of ``stretches``."""
        system = self.system
        g = source.geometry
        blocks = sum(e - s for _, s, e in stretches)
        nbytes = blocks * g.block_bytes_per_card
        self.moves += blocks
        if system.window[0] <= system.env.now <= system.window[1]:
            self.moved_bytes += nbytes * g.tp
        done = system.transfers.move(system.access.peer_paths(source, target), nbytes, "cache_move")
        for chain, start, end in stretches:
            self.inflight.set(chain, start, end, done)

        def landed(_event):
            for chain, start, end in stretches:
                self.store.unpin_each(chain, start, end)
                self.inflight.clear(chain, start, end, done)

        done.callbacks.insert(0, landed)

    def flush(self, cache: "InstanceCache") -> None:
        """:meth:`DomainPool.flush`: evict every unheld block homed in ``cache``."""
        store, index = self.store, self.system.index
        freed = 0
        for chain, first, count, step in self.homes.unheld(cache, 0, store):
            for k in range(count):
                pos = first + k * step
                store.remove((chain, pos))
                self.homes.forget_run(chain, pos, pos + 1)
                index.discard_run(chain, pos, pos + 1, store)
            freed += count
        cache.pool.give(freed * cache.geometry.pages_per_block)
