"""Writes into the cache: new prompt blocks filed in HBM, copies down to lower tiers
(write-through at prefill, write-back on eviction), decoded blocks kept for the next turn, and
eviction when HBM runs short (domain-wide with ``peer_hbm: read_in_place``, see
:mod:`kvsim.serving.cache.domain_pool`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvsim.kv import BlockStore
from kvsim.serving.cache.domain_pool import DomainPoolBase
from kvsim.serving.cache.member import CacheMember
from kvsim.serving.scheduler import Sequence

if TYPE_CHECKING:
    from kvsim.serving.cache.tiers import SystemCache

__all__ = ["CacheWriter"]


def _ids(blocks) -> list:
    """Block ids as a list of Python ints (the same ids; a list of ints is quicker to walk and to
    hash than a NumPy array's scalars)."""
    return blocks.tolist() if hasattr(blocks, "tolist") else list(blocks)


class CacheWriter:
    """Everything an instance writes into its HBM cache and the tiers below it.

    Parameters
    ----------
    cache : CacheMember
        The instance's cache, whose HBM store, pool, cards and geometry this reads.
    system : SystemCache
    domain_pool : DomainPoolBase or None
        The instance's addressing domain's pool with ``peer_hbm: read_in_place``, else None.
    read_remote, read_remote_run : callable
        ``read_remote(seq, block)``, ``read_remote_run(seq, blocks)``: ``seq`` reads ``block``
        (``blocks``) of its domain in place
        (:meth:`~kvsim.serving.cache.instance_cache.InstanceCache.read_remote`).
    record_written : callable
        ``record_written(seq, nbytes)`` for the per-request records.
    wake : callable
        ``wake()``: resume the instance's engine loop (a copy down landed: pins let go).
    """

    def __init__(self, cache: CacheMember, system: SystemCache, domain_pool: DomainPoolBase | None,
                 read_remote: Callable[[Sequence, Any], bool], read_remote_run: Callable[[Sequence, Any], int],
                 record_written: Callable[[Sequence, float], None], wake: Callable[[], None]):
        self.cache = cache
        self.system = system
        self.domain_pool: Any = domain_pool  # (DomainPool, or ExtentDomainPool for extents)
        self.read_remote = read_remote
        self.read_remote_run = read_remote_run
        self.record_written = record_written
        self.wake = wake
        self._paths_to: dict[int, list] = {}
        self._unit = self.system.write_plan(cache.geometry)  # (writing ranks, bytes each per block)

    def _paths(self, store: BlockStore) -> list:
        """The paths from this instance's writing cards to ``store`` (the topology does not change:
        worked out once per store; read only). The writing cards and their bytes per block are
        the system's :meth:`~kvsim.serving.cache.tiers.SystemCache.write_plan`."""
        paths = self._paths_to.get(id(store))
        if paths is None:
            system = self.system
            gpus = self.cache.gpus
            paths = self._paths_to[id(store)] = [
                system.topology.store_path(gpus[rank], system.endpoint[id(store)], system.spec.gpu_direct)
                for rank in self._unit[0]]
        return paths

    def file_prompt(self, seq: Sequence) -> None:
        """The prompt's KV is complete: file its new full blocks in HBM (the sequence's own pages
        become shared cached pages) and, under write-through, write them down."""
        if seq.hashes is None or seq.cache is None:
            return
        cache = self.cache
        g = cache.geometry
        full = seq.prompt_tokens // g.block_tokens
        state = seq.cache
        first_new = seq.shared_tokens // g.block_tokens
        if full <= first_new:
            return
        hbm, index, domain = cache.hbm, self.system.index, self.domain_pool
        run = _ids(seq.hashes[first_new:full])
        # one run: a block already cached was computed twice, so the cached copy is kept (one per
        # domain: it may be a peer's, then this sequence reads it in place from now on); the
        # others are stored; the sequence reads every one of them
        done, new_at, evicted = index.insert_run(hbm, run, read=True, touch=False)
        if done < len(run) or (evicted and domain is not None):
            # (a domain store holds what its members' pages hold: it never evicts on filing)
            raise RuntimeError("HBM cache index refused a block whose pages the sequence held")
        new_blocks = [run[pos] for pos in new_at]
        twice = len(run) - len(new_blocks)
        if twice:
            cache.pool.give(twice * g.pages_per_block)
        if domain is not None:
            if twice:
                new = set(new_at)
                for pos, block in enumerate(run):
                    if pos in new:
                        domain.homed(block, cache)
                    else:
                        self.read_remote(seq, block)
            else:
                domain.homed_run(new_blocks, cache)
        state.blocks.extend(run)
        seq.kv_blocks -= (full - first_new) * g.pages_per_block
        seq.shared_tokens = full * g.block_tokens
        if self.system.spec.write_policy == "write_through" and new_blocks:
            self.write_down(seq, new_blocks)

    def write_down(self, seq: Sequence | None, blocks: list, only: BlockStore | None = None) -> None:
        """Copy ``blocks`` from this HBM to every lower tier that lacks them (or to ``only``).

        The blocks are pinned in HBM until their copies land. One flow per card and target.
        """
        if not blocks:
            return
        cache, system = self.cache, self.system
        g = cache.geometry
        if only is not None:
            group = only.missing(blocks)
            targets = [(only, group)] if group else []
        else:
            targets = system.missing_below(cache.node, blocks)
        writers, unit = self._unit
        legacy = self.system.write_fanout == "legacy"
        wake = self.wake  # the engine loop's alarm, once the copies land
        for store, group in targets:
            # (legacy: the expression kvsim always used, so its records stay bit for bit)
            per_card = len(group) * g.block_bytes / g.tp if legacy else len(group) * unit
            io = system.io(store, True, cache.node, unit)
            done = system.write(store, self._paths(store), per_card, per_card * len(writers), io)
            if done is None:
                continue  # the store's write queue is full: no copy there (counted by system.write)
            if seq is not None:
                self.record_written(seq, per_card * len(writers))
            cache.hbm.pin_each(group)

            def stored(_event, store=store, group=group):
                if system.pending_reclaims:
                    system.settle_reclaims()
                cache.hbm.unpin_each(group)
                system.file(store, group)
                wake()

            done.callbacks.append(stored)

    def cache_decoded(self, seq: Sequence) -> None:
        """Keep the full blocks written while decoding (a next turn extends this conversation).

        The sequence's own pages were just returned to the pool; the blocks worth keeping take
        pages back from it (they are the same bytes, still in place).
        """
        cache = self.cache
        g = cache.geometry
        hbm, index = cache.hbm, self.system.index
        first = seq.shared_tokens // g.block_tokens
        full = min(seq.kv_tokens // g.block_tokens, len(seq.sequence_hashes))
        run = hbm.missing(_ids(seq.sequence_hashes[first:full]))
        if not run:
            return
        pool, pages = cache.pool, len(run) * g.pages_per_block
        pool.take(0)  # what the first block's take does before it looks at the free pages
        if pool.free_blocks >= pages and hbm.free_blocks >= len(run) and len(set(run)) == len(run):
            # every block's take is met without reclaiming and every insert stores it without
            # evicting: nothing in the loop below changes what a later block sees, so the run
            # is filed at once (the same pages, blocks, stamps and watcher calls, in order)
            pool.take(pages)
            index.insert_run(hbm, run, touch=False)
            if self.domain_pool is not None:
                self.domain_pool.homed_run(run, cache)
            if self.system.spec.write_policy == "write_through":
                self.write_down(seq, run)
            return
        new_blocks = []
        for block in seq.sequence_hashes[first:full]:
            if block in hbm:
                continue
            if not cache.pool.take(g.pages_per_block):
                break
            if index.insert(hbm, block) is None:
                cache.pool.give(g.pages_per_block)
                break
            if self.domain_pool is not None:
                self.domain_pool.homed(block, cache)
            new_blocks.append(block)
        if new_blocks and self.system.spec.write_policy == "write_through":
            self.write_down(seq, new_blocks)

    def reclaim(self, shortfall_pages: int) -> None:
        """Evict unheld cached blocks from HBM to free ``shortfall_pages`` pages -- only if they
        can: a request that cannot be met evicts nothing."""
        cache = self.cache
        if self.system.pending_reclaims:
            self.system.settle_reclaims()
        if self.domain_pool is not None:
            self.domain_pool.reclaim(cache, shortfall_pages)
            return
        g = cache.geometry
        if cache.hbm.evictable_blocks * g.pages_per_block < shortfall_pages:
            return
        self._reclaim_blocks(-(-shortfall_pages // g.pages_per_block))

    def _reclaim_blocks(self, blocks: int) -> None:
        """Evict ``blocks`` victims for :meth:`reclaim` (there are that many), give their pages
        back and, under write-back, copy them down."""
        cache = self.cache
        g = cache.geometry
        # one block at a time until the pages are freed: as many victims as whole blocks cover
        # the shortfall, evicted in the policy's order and then forgotten by the index in that
        # order (no decision reads the index in between)
        victims = cache.hbm.evict_run(blocks)
        self.system.index.discard_run(victims, cache.hbm)
        cache.pool.give(len(victims) * g.pages_per_block)
        if victims and self.system.spec.write_policy == "write_back":
            self.write_back(victims)

    def deferrable_blocks(self) -> int:
        """The HBM blocks a prefill chunk run may plan to reclaim later (when it is settled,
        :mod:`kvsim.serving.chunk_run`): the store's evictable blocks now, or -1 where a reclaim
        cannot be deferred exactly.

        Deferred, a step's victims are chosen when the run is settled, from the store as it is
        then; everything that reads or changes the stores or the index settles pending reclaims
        first (:meth:`~kvsim.serving.cache.tiers.SystemCache.settle_reclaims`), so that is the
        store as the step found it. Not deferred: write-back (an eviction starts its copies at
        that instant), a domain's shared store (a reclaim moves blocks to peers), peers reading
        this HBM (their pins could take the evictable blocks the plan counted), and an index
        with watchers (a router's delayed view logs each change at the time it is made)."""
        cache, system = self.cache, self.system
        if (self.domain_pool is not None or system.spec.write_policy != "write_through"
                or system.spec.peer_hbm != "none" or system.index._watchers):
            return -1
        return cache.hbm.evictable_blocks

    def reclaim_deferred(self, blocks: int) -> None:
        """A deferred reclaim of ``blocks`` blocks (:meth:`deferrable_blocks`): the victims
        evicted and forgotten as :meth:`reclaim` does; their pages were counted free by the run."""
        cache = self.cache
        victims = cache.hbm.evict_run(blocks)
        if len(victims) != blocks:
            raise RuntimeError("a deferred reclaim found fewer evictable blocks than its run planned")
        self.system.index.discard_run(victims, cache.hbm)
        self.system.reclaims_deferred += 1

    def flush(self) -> None:
        """Evict every cached block no one holds (the instance leaves a role that caches)."""
        cache = self.cache
        if self.domain_pool is not None:
            self.domain_pool.flush(cache)
            return
        self.reclaim(cache.hbm.evictable_blocks * cache.geometry.pages_per_block)

    def write_back(self, blocks: list) -> None:
        """Write-back: evicted HBM blocks go to the next tier down that lacks them, one flow per
        card and target (from a staging copy: their pages were freed already, i.e. the copy is
        assumed staged)."""
        cache, system = self.cache, self.system
        g = cache.geometry
        targets = system.missing_below(cache.node, blocks, first_only=True)
        writers, unit = self._unit
        legacy = system.write_fanout == "legacy"
        for target, group in targets:
            io = system.io(target, True, cache.node, unit)
            if legacy:  # (the expressions kvsim always used, so its records stay bit for bit)
                per_card, nbytes = len(group) * g.block_bytes / g.tp, len(group) * g.block_bytes
            else:
                per_card = len(group) * unit
                nbytes = per_card * len(writers)
            done = system.write(target, self._paths(target), per_card, nbytes, io)
            if done is not None:  # skipped (write queue full): the evicted blocks are dropped
                done.callbacks.append(lambda _event, target=target, group=group: system.file(target, group))
