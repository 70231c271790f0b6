"""Writes into the cache: new prompt blocks filed in HBM, copies down to lower tiers
(write-through at prefill, write-back on eviction), decoded blocks kept for the next turn, and
eviction when HBM runs short (domain-wide with ``peer_hbm: read_in_place``, see
:mod:`kvsim.serving.cache.domain_pool`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kv import BlockStore
from kvsim.serving.scheduler import Sequence

if TYPE_CHECKING:
    from kvsim.serving.cache.instance_cache import InstanceCache

__all__ = ["CacheWriter"]


def _ids(blocks) -> list:
    """Block ids as a list of Python ints (the same ids; a list of ints is quicker to walk and to
    hash than a NumPy array's scalars)."""
    return blocks.tolist() if hasattr(blocks, "tolist") else list(blocks)


class CacheWriter:
    """Everything an instance writes into its HBM cache and the tiers below it."""

    def __init__(self, cache: "InstanceCache"):
        self.cache = cache
        self.system = cache.system
        self._paths_to: dict[int, list] = {}

    def _paths(self, store: BlockStore) -> list:
        """The paths from this instance's cards to ``store`` (the topology does not change: worked
        out once per store; read only)."""
        paths = self._paths_to.get(id(store))
        if paths is None:
            system = self.system
            paths = self._paths_to[id(store)] = [
                system.topology.store_path(gpu, system.endpoint[id(store)], system.spec.gpu_direct)
                for gpu in self.cache.gpus]
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
        hbm, index, domain = cache.hbm, self.system.index, cache.domain_pool
        run = _ids(seq.hashes[first_new:full])
        # one run: a block already cached was computed twice, so the cached copy is kept (one per
        # domain: it may be a peer's, then this sequence reads it in place from now on); the
        # others are stored; the sequence reads every one of them
        done, new_at, _ = index.insert_run(hbm, run, read=True, touch=False)
        if done < len(run):
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
                        cache.read_remote(seq, block)
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
        targets: dict[int, tuple[BlockStore, list]] = {}
        if only is not None:
            same = [only]
        elif system.remote:
            same = None  # a remote pool spreads blocks over its nodes by id: each block its own stores
        else:
            same = system.lower_stores(cache.node, blocks[0])  # the same for every block
        for block in blocks:
            for store in (same if same is not None else system.lower_stores(cache.node, block)):
                if block not in store:
                    targets.setdefault(id(store), (store, []))[1].append(block)
        for store, group in targets.values():
            per_card = len(group) * g.block_bytes / g.tp
            io = system.io(store, True, cache.node, g.block_bytes / g.tp)
            done = system.write(store, self._paths(store), per_card, per_card * g.tp, io)
            if done is None:
                continue  # the store's write queue is full: no copy there (counted by system.write)
            if seq is not None:
                cache.record_written(seq, per_card * g.tp)
            cache.hbm.pin_each(group)

            def stored(_event, store=store, group=group):
                cache.hbm.unpin_each(group)
                system.file(store, group)
                cache.wake()

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
        new_blocks = []
        for block in seq.sequence_hashes[first:full]:
            if block in hbm:
                continue
            if not cache.pool.take(g.pages_per_block):
                break
            if index.insert(hbm, block) is None:
                cache.pool.give(g.pages_per_block)
                break
            if cache.domain_pool is not None:
                cache.domain_pool.homed(block, cache)
            new_blocks.append(block)
        if new_blocks and self.system.spec.write_policy == "write_through":
            self.write_down(seq, new_blocks)

    def reclaim(self, shortfall_pages: int) -> None:
        """Evict unheld cached blocks from HBM to free ``shortfall_pages`` pages -- only if they
        can: a request that cannot be met evicts nothing."""
        cache = self.cache
        if cache.domain_pool is not None:
            cache.domain_pool.reclaim(cache, shortfall_pages)
            return
        g = cache.geometry
        if cache.hbm.evictable_blocks * g.pages_per_block < shortfall_pages:
            return
        victims = []
        while len(victims) * g.pages_per_block < shortfall_pages:
            victim = cache.hbm.evict_one()
            if victim is None:
                break
            self.system.index.discard(victim, cache.hbm)
            victims.append(victim)
        cache.pool.give(len(victims) * g.pages_per_block)
        if victims and self.system.spec.write_policy == "write_back":
            self.write_back(victims)

    def flush(self) -> None:
        """Evict every cached block no one holds (the instance leaves a role that caches)."""
        cache = self.cache
        if cache.domain_pool is not None:
            cache.domain_pool.flush(cache)
            return
        self.reclaim(cache.hbm.evictable_blocks * cache.geometry.pages_per_block)

    def write_back(self, blocks: list) -> None:
        """Write-back: evicted HBM blocks go to the next tier down that lacks them, one flow per
        card and target (from a staging copy: their pages were freed already, i.e. the copy is
        assumed staged)."""
        cache, system = self.cache, self.system
        g = cache.geometry
        targets: dict[int, tuple[BlockStore, list]] = {}
        for block in blocks:
            lower = system.lower_stores(cache.node, block)
            if lower and block not in lower[0]:  # a copy one tier down already: nothing to move
                targets.setdefault(id(lower[0]), (lower[0], []))[1].append(block)
        for target, group in targets.values():
            io = system.io(target, True, cache.node, g.block_bytes / g.tp)
            done = system.write(target, self._paths(target), len(group) * g.block_bytes / g.tp,
                                len(group) * g.block_bytes, io)
            if done is not None:  # skipped (write queue full): the evicted blocks are dropped
                done.callbacks.append(lambda _event, target=target, group=group: system.file(target, group))
