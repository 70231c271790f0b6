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
blocks (:meth:`DomainPool.reclaim`), in runs:

1. while peers have free pages, its most recent unheld blocks *move* there (a copy over the
   scale-up links, so the domain keeps them): up to a batch of :data:`MOVE_BATCH` of the
   instance's pages (at least what it needs), so a sequence growing page by page does not pay
   one move per page. Each peer takes one contiguous chunk of the batch, as many blocks as
   handing them out one at a time to the peer with the most room would give it
   (:func:`fill_plan`), and each chunk is one flow per card;
2. if the peers' room does not cover what the instance needs, the domain is full: the domain
   store's policy evicts the rest as its victims among all unheld blocks of the domain (for
   LRU: the least recently used blocks of the union). A victim homed in this instance freed
   its pages; one homed in a peer left room there, which the instance's next most recent
   unheld blocks take as in step 1.

So blocks leave the domain only when its whole HBM is full, and then in the policy's order over
the union: with one domain covering every card and nothing held, the cached contents are
exactly those of a single LRU cache of the union's capacity (the replay test in
``tests/test_domain_pool.py``). A request that cannot be met (fewer unheld blocks at home than
it needs) changes nothing, as :meth:`~kvsim.serving.cache.writer.CacheWriter.reclaim` does.

(Until issue 23's extents, moves went block by block, each to the then roomiest peer, and
victims were taken one at a time with a move after each: the same counts per peer and the same
victims, but a batch's blocks interleaved across peers and a block moved in between could no
longer be a later victim. In runs, a chunk per peer keeps a batch's blocks together in their new
home, and the victims are chosen before the moves.)

What is approximated: a moved block's source pages are handed back at once (the copy is
assumed staged, as write-back and swap-out do); readers arriving meanwhile wait for the copy
to land. A batch of moves may free a few more pages than the request needed (they stay free
for the instance). Sequences' own pages never spill into peers. A peer's HBM bandwidth spent
serving remote reads is not charged to the peer's own steps. The KV of a prompt handed to a
decode instance (disaggregated serving) leaves from the prefill instance's cards even where
part of it is read in place from a peer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kvsim.kv import BlockStore
from kvsim.serving.cache.member import CacheMember

if TYPE_CHECKING:
    from kvsim.serving.cache.tiers import SystemCache

__all__ = ["DomainPool", "DomainPoolBase", "DomainStore", "MOVE_BATCH", "fill_plan"]

MOVE_BATCH = 0.01
"""Fraction of an instance's pages that one reclaim frees by moving blocks to peers with room
(at least what it needs). An assumption, to bound moves to one per batch rather than one per
page; the figure is borrowed from the free-block watermark vLLM v0 kept when admitting
(``BlockSpaceManager(..., watermark=0.01)`` in ``vllm/core/block_manager.py``)."""


def fill_plan(free_pages: list[int], pages_per_block: int, blocks: int) -> list[tuple[int, int]]:
    """How ``blocks`` blocks spread over peers with ``free_pages`` free pages each.

    Each peer takes as many as handing the blocks out one at a time, each to the peer with the
    most free pages (at least one block's; the lowest index on ties), would give it -- the
    ``blocks`` largest of the peers' successive free levels ``f, f - p, f - 2p, ...`` (each at
    least ``p = pages_per_block``), ties to the lowest index -- worked out by bisecting on the
    level instead of block by block. Fewer in all if the peers' room (``sum(f // p)``) runs out.

    Returns
    -------
    list of (int, int)
        ``(peer index, blocks)`` for each peer that takes some, in the order the one-at-a-time
        hand-out first reaches them (most free pages first, the lowest index on ties).
    """
    p = pages_per_block
    room = [f // p if f >= p else 0 for f in free_pages]
    if blocks >= sum(room):
        counts = room
    elif blocks <= 0:
        return []
    else:
        def offers_at_least(level: int) -> list[int]:
            return [(f - level) // p + 1 if f >= level else 0 for f in free_pages]

        low, high = p, max(free_pages)  # sum(offers_at_least(low)) > blocks >= ... at high + 1
        while low < high:  # the highest level at which the offers cover ``blocks``
            mid = (low + high + 1) // 2
            if sum(offers_at_least(mid)) >= blocks:
                low = mid
            else:
                high = mid - 1
        counts = offers_at_least(low + 1)
        extra = blocks - sum(counts)
        for k, f in enumerate(free_pages):  # the offers at exactly ``low``, lowest index first
            if extra and f >= low and (f - low) % p == 0:
                counts[k] += 1
                extra -= 1
    order = sorted((k for k, c in enumerate(counts) if c), key=lambda k: (-free_pages[k], k))
    return [(k, counts[k]) for k in order]


class DomainStore(BlockStore):
    """The domain's store: a :class:`~kvsim.kv.BlockStore` whose hits also refresh the block's
    place in its home's recency order (which unheld block moves first). (A domain store holds
    many blocks that running sequences read; the base store's LRU heap finds its victim without
    stepping over them.)"""

    def __init__(self, name: str, capacity_bytes: float, block_bytes: float, policy: str, pool: DomainPool):
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


class DomainPoolBase:
    """What every keeping of a domain's pool shares: its members, the reclaim policy (see the
    module docstring) and the moves between members. How blocks, homes and bytes in flight are
    kept is the subclass's: :class:`DomainPool` per block, and
    :class:`~kvsim.serving.cache.extent_pool.ExtentDomainPool` per stretch of blocks. The
    methods marked "kept" below are theirs; ``candidates`` and ``items`` are lists of their own
    units (blocks; stretches)."""

    def __init__(self, name: str, system: SystemCache, store):
        self.name = name
        self.system = system
        self.store = store
        self.members: list[CacheMember] = []
        self.write_back: dict[int, Callable[[list], None]] = {}  # id(member) -> its writer's write_back
        self.moves = 0          # blocks moved between members' HBM
        self.moved_bytes = 0.0  # their bytes (all cards), inside the window

    def join(self, cache: CacheMember, write_back: Callable[[list], None]) -> None:
        """``cache``'s instance holds part of the domain's HBM from now on; ``write_back(blocks)``
        copies its evicted ``blocks`` down (its writer's, under ``write_policy: write_back``)."""
        self.members.append(cache)
        self.write_back[id(cache)] = write_back

    def _peer_room(self, cache: CacheMember) -> tuple[list[CacheMember], list[int]]:
        """The members other than ``cache`` and their free pages now."""
        peers = [member for member in self.members if member is not cache]
        return peers, [member.pool.free_blocks for member in peers]

    def reclaim(self, cache: CacheMember, shortfall_pages: int) -> None:
        """Free ``shortfall_pages`` pages of ``cache``'s pool by moving or evicting its unheld
        cached blocks (see the module docstring); nothing changes if it cannot.

        In runs: the instance's most recent unheld blocks (up to a batch of :data:`MOVE_BATCH`
        of its pages, at least what it needs) go to peers with room, each peer taking one
        contiguous chunk (:func:`fill_plan`: as many as one-block-at-a-time to the roomiest
        would give it), so a full domain pays one move per batch and card, not one per page a
        sequence grows by. If the peers' room does not cover the need, the domain evicts its
        least recent unheld blocks (its policy's victims) for what is left; a victim homed in a
        peer leaves room there, which the instance's next most recent blocks take in turn.
        """
        ppb = cache.geometry.pages_per_block
        need = -(-shortfall_pages // ppb)
        batch = max(need, int(MOVE_BATCH * cache.pool.num_blocks) // ppb)
        candidates = self._unheld(cache, batch)
        if self._blocks(candidates) < need:
            return
        moves: dict[int, tuple[CacheMember, list]] = {}
        freed = self._fill(cache, candidates, batch, moves)  # (takes the moved off ``candidates``)
        evicted: dict[int, tuple[CacheMember, list]] = {}
        if freed < need:
            freed += self._evict(cache, need - freed, evicted)
            # the peers that lost victims take the instance's next most recent blocks
            freed += self._fill(cache, self._still_homed(cache, candidates), batch - freed, moves)
        for target, items in moves.values():
            self._move(cache, target, items)
        if self.system.spec.write_policy == "write_back":
            for home, victims in evicted.values():
                self.write_back[id(home)](victims)

    def _fill(self, cache: CacheMember, candidates: list, most: int, moves: dict) -> int:
        """Move up to ``most`` blocks of ``candidates`` (least recent first; the most recent go
        first, and are taken off the list) from ``cache`` to the peers with room, by
        :func:`fill_plan`; returns how many moved."""
        ppb = cache.geometry.pages_per_block
        peers, free = self._peer_room(cache)
        plan = fill_plan(free, ppb, min(most, self._blocks(candidates)))
        moved = 0
        for k, count in plan:
            target = peers[k]
            chunk = self._take_recent(candidates, count)
            cache.pool.give(count * ppb)
            if not target.pool.take(count * ppb):
                raise RuntimeError("a domain member with free pages refused them")
            # in flight from now on: pinned, neither evicted nor moved again until they land
            moves.setdefault(id(target), (target, []))[1].extend(self._rehome(chunk, cache, target))
            moved += count
        return moved

    def _move(self, source: CacheMember, target: CacheMember, items: list) -> None:
        """Copy ``items`` from ``source``'s HBM to ``target``'s (already re-homed and pinned),
        card by card; they stay pinned and in flight until the copy lands."""
        system = self.system
        g = source.geometry
        blocks = self._blocks(items)
        nbytes = blocks * g.block_bytes_per_card
        self.moves += blocks
        if system.window[0] <= system.env.now <= system.window[1]:
            self.moved_bytes += nbytes * g.tp
        done = system.transfers.move(system.access.peer_paths(source, target), nbytes, "cache_move")
        self._in_flight(items, done)
        done.callbacks.insert(0, lambda _event: self._landed(items, done))

    # -- kept by the subclass ------------------------------------------------------------------

    def _unheld(self, cache: CacheMember, count: int) -> list:
        """Up to ``count`` blocks homed in ``cache`` that nothing holds, least recent first."""
        raise NotImplementedError

    def _blocks(self, items: list) -> int:
        """Blocks in ``items``."""
        raise NotImplementedError

    def _take_recent(self, candidates: list, count: int) -> list:
        """The last ``count`` blocks of ``candidates``, taken off it, most recent first."""
        raise NotImplementedError

    def _rehome(self, chunk: list, source: CacheMember, target: CacheMember) -> list:
        """``chunk`` (most recent first) leaves ``source``'s order for the end of ``target``'s,
        in that order, and is pinned; returns the items :meth:`_move` takes."""
        raise NotImplementedError

    def _evict(self, cache: CacheMember, count: int, evicted: dict) -> int:
        """Evict ``count`` blocks, the store's victims: out of the index and their homes, their
        pages given back (each home's victims added to ``evicted``); returns those homed in
        ``cache``."""
        raise NotImplementedError

    def _still_homed(self, cache: CacheMember, candidates: list) -> list:
        """``candidates`` that are still homed in ``cache`` (not evicted), in order."""
        raise NotImplementedError

    def _in_flight(self, items: list, done) -> None:
        """``items``' bytes land with event ``done``."""
        raise NotImplementedError

    def _landed(self, items: list, done) -> None:
        """``done`` fired: ``items`` are unpinned and no longer in flight."""
        raise NotImplementedError


class DomainPool(DomainPoolBase):
    """The shared HBM cache of one addressing domain, kept per block (see the module docstring).

    Parameters
    ----------
    name : str
        The domain (``su{k}``).
    system : SystemCache
    store : DomainStore
        Built by the system with the domain's capacity (its instances' pages, in blocks).
    """

    def __init__(self, name: str, system: SystemCache, store: DomainStore):
        super().__init__(name, system, store)
        self.home: dict = {}                       # block -> instance whose HBM holds it
        self.resident: dict[int, dict] = {}        # id(instance) -> its blocks, least recent first
        self.inflight: dict = {}                   # block -> event: bytes still landing (any member)

    def join(self, cache: CacheMember, write_back: Callable[[list], None]) -> None:
        super().join(cache, write_back)
        self.resident[id(cache)] = {}

    def homed(self, block, cache: CacheMember) -> None:
        """``block`` (just inserted in the store) lives in ``cache``'s HBM, on its pages."""
        self.home[block] = cache
        self.resident[id(cache)][block] = None

    def homed_run(self, blocks, cache: CacheMember) -> None:
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

    def _forget_home(self, block):
        """Drop ``block``'s home (it left the store); returns the member that held it."""
        cache = self.home.pop(block)
        del self.resident[id(cache)][block]
        return cache

    def _unheld(self, cache: CacheMember, count: int) -> list:
        return self.store.unheld(self.resident[id(cache)], count)

    def _blocks(self, items: list) -> int:
        return len(items)

    def _take_recent(self, candidates: list, count: int) -> list:
        chunk = candidates[len(candidates) - count:][::-1]
        del candidates[len(candidates) - count:]
        return chunk

    def _rehome(self, chunk: list, source: CacheMember, target: CacheMember) -> list:
        resident = self.resident[id(source)]
        for block in chunk:
            del resident[block]
        self.homed_run(chunk, target)
        self.store.pin_each(chunk)
        return chunk

    def _evict(self, cache: CacheMember, count: int, evicted: dict) -> int:
        ppb = cache.geometry.pages_per_block
        victims = self.store.evict_run(count)
        self.system.index.discard_run(victims, self.store)
        freed = 0
        for victim in victims:
            home = self._forget_home(victim)
            home.pool.give(ppb)
            evicted.setdefault(id(home), (home, []))[1].append(victim)
            freed += home is cache
        return freed

    def _still_homed(self, cache: CacheMember, candidates: list) -> list:
        resident = self.resident[id(cache)]
        return [block for block in candidates if block in resident]

    def _in_flight(self, items: list, done) -> None:
        for block in items:
            self.inflight[block] = done

    def _landed(self, items: list, done) -> None:
        inflight = self.inflight
        for block in items:
            self.store.unpin(block)
            if inflight.get(block) is done:
                del inflight[block]

    def flush(self, cache: CacheMember) -> None:
        """Evict every unheld block homed in ``cache`` (its instance leaves a caching role)."""
        victims = self._unheld(cache, len(self.resident[id(cache)]))
        for block in victims:
            self.store.remove(block)
            self._forget_home(block)
            self.system.index.discard(block, self.store)
        cache.pool.give(len(victims) * cache.geometry.pages_per_block)
        if victims and self.system.spec.write_policy == "write_back":
            self.write_back[id(cache)](victims)
