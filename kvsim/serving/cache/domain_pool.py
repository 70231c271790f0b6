"""One addressing domain's HBM as one KV pool: byte sharing with ``peer_hbm: read_in_place``
(DESIGN.md, "Reuse is not sharing"; issue 8, part 1).

Inside an addressing domain every card can load from a peer's HBM, so a cached prompt block
needs one physical copy per domain, however many instances read it. The design:

**One store, many homes.** The domain's cached blocks live in one
:class:`~kvsim.kv.BlockStore` (the *domain store*, what :class:`~kvsim.kv.KVIndex` records as
the block's location for the whole domain), with the system's HBM eviction policy over all of
them. Each block has a *home*: the instance whose HBM physically holds its bytes and whose
page pool (:class:`~kvsim.kv.BlockPool`) pays its pages. A block is homed where it was
computed (its prompt's pages become the cached copy) or loaded (from a lower tier or another
domain). A block the domain already holds is never stored twice: an instance that computed it
anyway gives its pages back and reads the existing copy.

**Readers, not copies.** An admission that hits a block of its domain takes a reader reference
on the domain store and no pages, whether the home is its own HBM or a peer's. A block with
readers (or pins: a transfer in flight) can be neither evicted nor moved, so it is freed only
after its last reader has left and eviction picks it. A sequence's new tokens always go to its
own fresh pages (:meth:`~kvsim.kv.BlockPool.grow` counts only the tokens past its shared
prefix, which is made of whole prompt blocks): copy-on-write, with no page written by two
sequences. A reader whose block is homed in a peer pays, in every engine step, the KV bytes it
reads over the scale-up links (:mod:`kvsim.serving.cache.remote_reads`).

**Capacity and eviction are domain-wide.** Running sequences' own pages stay in their
instance's HBM (attention reads them at HBM speed); cached blocks float to wherever the domain
has room. When an instance is short of pages it frees pages that hold its *unheld* cached
blocks (:meth:`DomainPool.reclaim`), block by block:

1. if a peer has a free block's worth of pages, one of its unheld blocks *moves* there (to
   the peer with the most room): a copy over the scale-up links, so the domain keeps it.
   Moves go in batches of up to :data:`MOVE_BATCH` of the instance's pages (one flow per card
   and destination), so a sequence growing page by page does not pay one move per page;
2. otherwise the domain is full: the domain store's policy evicts its victim among all
   unheld blocks of the domain (for LRU: the least recently used block of the union). If the
   victim was homed in this instance, that freed its pages; if in a peer, the peer now has
   room and step 1 moves one of this instance's blocks there.

So blocks leave the domain only when its whole HBM is full, and then in the policy's order over
the union: with one domain covering every card and nothing held, the cached contents are
exactly those of a single LRU cache of the union's capacity (the replay test in
``tests/test_domain_pool.py``). A request that cannot be met (fewer unheld blocks at home than
it needs) changes nothing, as :meth:`~kvsim.serving.cache.writer.CacheWriter.reclaim` does.

What is approximated: a moved block's source pages are handed back at once (the copy is
assumed staged, as write-back and swap-out do); readers arriving meanwhile wait for the copy
to land. A batch of moves may free a few more pages than the request needed (they stay free
for the instance). Sequences' own pages never spill into peers. A peer's HBM bandwidth spent
serving remote reads is not charged to the peer's own steps. The KV of a prompt handed to a
decode instance (disaggregated serving) leaves from the prefill instance's cards even where
part of it is read in place from a peer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kv import BlockStore

if TYPE_CHECKING:
    from kvsim.serving.cache.instance_cache import InstanceCache
    from kvsim.serving.cache.tiers import SystemCache

__all__ = ["DomainPool", "DomainStore", "MOVE_BATCH"]

MOVE_BATCH = 0.01
"""Fraction of an instance's pages that one reclaim frees by moving blocks to peers with room
(at least what it needs). An assumption, to bound moves to one per batch rather than one per
page; the figure is borrowed from the free-block watermark vLLM v0 kept when admitting
(``BlockSpaceManager(..., watermark=0.01)`` in ``vllm/core/block_manager.py``)."""


class DomainStore(BlockStore):
    """The domain's store: a :class:`~kvsim.kv.BlockStore` whose hits also refresh the block's
    place in its home's recency order (which unheld block moves first). (A domain store holds
    many blocks that running sequences read; the base store's LRU heap finds its victim without
    stepping over them.)"""

    def __init__(self, name: str, capacity_bytes: float, block_bytes: float, policy: str, pool: "DomainPool"):
        super().__init__(name, capacity_bytes, block_bytes, policy)
        self.pool = pool

    def lookup(self, block) -> bool:
        hit = super().lookup(block)
        if hit:
            self.pool.touched(block)
        return hit

    def lookup_pin_run(self, blocks) -> None:
        # the base run, then the homes of the blocks it hit refreshed in order (homes are apart
        # from the store's state, so refreshing after each block or after the run ends the same)
        hits = self.hits
        try:
            super().lookup_pin_run(blocks)
        finally:
            if self.hits > hits:
                self.pool.touched_run(blocks[:self.hits - hits], self._members)

    def read_run(self, blocks) -> int:
        hits = super().read_run(blocks)
        if hits:
            self.pool.touched_run(blocks, self._members)  # (a run changes no membership: a block stored now was hit)
        return hits


class DomainPool:
    """The shared HBM cache of one addressing domain (see the module docstring).

    Parameters
    ----------
    name : str
        The domain (``su{k}``).
    system : SystemCache
    store : DomainStore
        Built by the system with the domain's capacity (its instances' pages, in blocks).
    """

    def __init__(self, name: str, system: "SystemCache", store: DomainStore):
        self.name = name
        self.system = system
        self.store = store
        self.members: list["InstanceCache"] = []
        self.home: dict = {}                       # block -> instance whose HBM holds it
        self.resident: dict[int, dict] = {}        # id(instance) -> its blocks, least recent first
        self.inflight: dict = {}                   # block -> event: bytes still landing (any member)
        self.moves = 0                             # blocks moved between members' HBM
        self.moved_bytes = 0.0                     # their bytes (all cards), inside the window

    def join(self, cache: "InstanceCache") -> None:
        """``cache``'s instance holds part of the domain's HBM from now on."""
        self.members.append(cache)
        self.resident[id(cache)] = {}

    def homed(self, block, cache: "InstanceCache") -> None:
        """``block`` (just inserted in the store) lives in ``cache``'s HBM, on its pages."""
        self.home[block] = cache
        self.resident[id(cache)][block] = None

    def homed_run(self, blocks, cache: "InstanceCache") -> None:
        """:meth:`homed` for each of ``blocks`` in order."""
        home = self.home
        resident = self.resident[id(cache)]
        for block in blocks:
            home[block] = cache
            resident[block] = None

    def touched(self, block) -> None:
        resident = self.resident[id(self.home[block])]
        del resident[block]
        resident[block] = None

    def touched_run(self, blocks, stored) -> None:
        """:meth:`touched` for each of ``blocks`` in order that is in ``stored``."""
        home, resident = self.home, self.resident
        for block in blocks:
            if block in stored:
                at_home = resident[id(home[block])]
                del at_home[block]
                at_home[block] = None

    def _forget(self, block):
        cache = self.home.pop(block)
        del self.resident[id(cache)][block]
        self.system.index.discard(block, self.store)
        return cache

    def _unheld(self, cache: "InstanceCache", count: int) -> list:
        """Up to ``count`` of the blocks homed in ``cache`` that nothing holds, least recent first."""
        return self.store.unheld(self.resident[id(cache)], count)

    def _roomiest(self, cache: "InstanceCache", pages: int) -> "InstanceCache | None":
        """The member other than ``cache`` with the most free pages (at least ``pages``; lowest
        index on ties), or None."""
        best = None
        for member in self.members:
            if member is not cache and member.pool.free_blocks >= pages and (
                    best is None or member.pool.free_blocks > best.pool.free_blocks):
                best = member
        return best

    def reclaim(self, cache: "InstanceCache", shortfall_pages: int) -> None:
        """Free ``shortfall_pages`` pages of ``cache``'s pool by moving or evicting its unheld
        cached blocks (see the module docstring); nothing changes if it cannot.

        While peers have room, blocks move in batches of up to :data:`MOVE_BATCH` of the
        instance's pages (at least what it needs), so that a full domain pays one move per
        batch and card, not one per page a sequence grows by; evictions free only what is needed.
        """
        ppb = cache.geometry.pages_per_block
        need = -(-shortfall_pages // ppb)
        batch = max(need, int(MOVE_BATCH * cache.pool.num_blocks) // ppb)
        candidates = self._unheld(cache, batch)
        if len(candidates) < need:
            return
        store, freed = self.store, 0
        resident = self.resident[id(cache)]
        evicted: dict[int, tuple["InstanceCache", list]] = {}
        moves: dict[int, tuple["InstanceCache", list]] = {}
        while freed < batch:
            target = self._roomiest(cache, ppb)
            if target is None:
                if freed >= need:
                    break
                victim = store.evict_one()
                if victim is None:
                    break  # nothing unheld in the domain (cannot happen while cache has some)
                home = self._forget(victim)
                home.pool.give(ppb)
                evicted.setdefault(id(home), (home, []))[1].append(victim)
                freed += home is cache
                continue
            while candidates and candidates[-1] not in resident:
                candidates.pop()  # evicted meanwhile
            if not candidates:
                break
            block = candidates.pop()  # the batch's most recent first: the least recent may go soon
            del resident[block]
            cache.pool.give(ppb)
            if not target.pool.take(ppb):
                raise RuntimeError("a domain member with free pages refused them")
            self.homed(block, target)
            self.store.pin(block)  # in flight from now: neither evicted nor moved again
            moves.setdefault(id(target), (target, []))[1].append(block)
            freed += 1
        for target, blocks in moves.values():
            self._move(cache, target, blocks)
        if self.system.spec.write_policy == "write_back":
            for home, victims in evicted.values():
                home.writer.write_back(victims)

    def _move(self, source: "InstanceCache", target: "InstanceCache", blocks: list) -> None:
        """Copy ``blocks`` from ``source``'s HBM to ``target``'s (already re-homed and pinned),
        card by card; they stay pinned and in flight until the copy lands."""
        system = self.system
        g = source.geometry
        nbytes = len(blocks) * g.block_bytes_per_card
        self.moves += len(blocks)
        if system.window[0] <= system.env.now <= system.window[1]:
            self.moved_bytes += nbytes * g.tp
        done = system.transfers.move(system.access.peer_paths(source, target), nbytes, "cache_move")
        for block in blocks:
            self.inflight[block] = done

        def landed(_event):
            for block in blocks:
                self.store.unpin(block)
                if self.inflight.get(block) is done:
                    del self.inflight[block]

        done.callbacks.insert(0, landed)

    def flush(self, cache: "InstanceCache") -> None:
        """Evict every unheld block homed in ``cache`` (its instance leaves a caching role)."""
        victims = self._unheld(cache, len(self.resident[id(cache)]))
        for block in victims:
            self.store.remove(block)
            self._forget(block)
        cache.pool.give(len(victims) * cache.geometry.pages_per_block)
        if victims and self.system.spec.write_policy == "write_back":
            cache.writer.write_back(victims)
