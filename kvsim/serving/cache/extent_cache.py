"""An instance's cache over segments: admission, filing and release on HBM kept as extents
(issue 23, item 1; docs/extents.md, "Phase 4" and "Phase 5").

:class:`ExtentInstanceCache` is :class:`~kvsim.serving.cache.instance_cache.InstanceCache` for a
system whose HBM stores are kept as extents and whose index is an
:class:`~kvsim.kv.extent_index.ExtentIndex`: either each instance's own store
(:class:`~kvsim.serving.cache.extent_pool.ExtentHbmStore`, ``peer_hbm: none``) or each addressing
domain's shared one (:class:`~kvsim.serving.cache.extent_pool.ExtentDomainPool`, ``peer_hbm:
read_in_place``). Every prompt is handled as the segments of its blocks
(:mod:`kvsim.serving.cache.segments`), so a call costs a few entries per stretch of blocks
however long the stretch. Each method does what its per-block counterpart does on the blocks of
its stretches in order -- the same hits, loads, flows, homes, remote reads, evictions and records
-- and ``tests/test_extent_domains.py`` and ``tests/test_extent_plain.py`` run both on the same
scenarios.

Only what such a system uses is kept this way: LRU in every tier; tiers below HBM (DRAM, NVMe,
one remote pool node: :mod:`kvsim.serving.cache.extent_tiers`) only under each instance's own
HBM and write-through; no LoRA and no P/D handoff (:func:`kvsim.sim.build.kv_extents` chooses).
"""

from __future__ import annotations

import simpy

from kvsim.serving.cache.extent_pool import InflightMap
from kvsim.serving.cache.instance_cache import InstanceCache
from kvsim.serving.cache.prefix_loader import PrefixLoader, SeqCache
from kvsim.serving.cache.segments import prompt_address, segment_blocks, segment_range
from kvsim.serving.cache.writer import CacheWriter
from kvsim.serving.scheduler import Sequence

__all__ = ["ExtentInstanceCache", "ExtentPrefixLoader", "ExtentCacheWriter"]


class ExtentPrefixLoader(PrefixLoader):
    """:class:`PrefixLoader` over segments: the longest cached prefix from the extent index, the
    leading stretch in this domain read in place, the rest copied in from other domains."""

    def admit(self, seq: Sequence) -> str | None:
        cache, system = self.cache, self.system
        g = cache.geometry
        bt = g.block_tokens
        index = system.index
        usable, rank = self.access.usable(cache), self.access.rank(cache)
        # at least one token is always computed: the last prompt block is never a hit
        eligible = max(min(seq.prompt_tokens // bt, (seq.prefill_target - 1) // bt), 0)
        prefix = segment_range(prompt_address(seq, bt), 0, eligible)
        n = index.longest_prefix(prefix, usable) if eligible > 0 else 0
        found = n  # the cached prefix the lookup found (the load policy may load less of it)
        sources = index.tier_breakdown(prefix, n, rank, usable) if n else []
        hbm = cache.hbm
        local = sources[0][1] if sources and sources[0][0] is hbm else 0
        if n > local and system.spec.load_policy == "faster":
            # as PrefixLoader.admit: recompute the blocks below this domain if that is quicker
            suffix = seq.prefill_target - n * bt
            extra = (n - local) * bt
            marginal_s = self.recompute_s(extra + suffix, local * bt) - self.recompute_s(suffix, n * bt)
            if marginal_s <= self._estimated_load_s([(s, c) for s, c in sources if s is not hbm]):
                n = local
        held: list = []
        pending: dict[int, simpy.Event] = {}
        to_load: list = []  # (source store, chain, start, end)
        inflight = cache.inflight
        pos = 0
        for store, blocks in sources:
            if pos >= n:
                break
            piece = segment_range(prefix, pos, pos + blocks)
            pos += blocks
            if store is not hbm:
                to_load += [(store, chain, s, e) for chain, s, e in piece]
                continue
            for chain, s, e in piece:  # in this domain: hit and read in place
                hbm.read_run(chain, s, e)
            held += piece
            if inflight:
                for chain, s, e in piece:
                    for event in inflight.events(chain, s, e):
                        pending[id(event)] = event
        loads = sum(e - s for _, _, s, e in to_load)
        first_pages = 0
        if system.spec.load_mode == "before" and (to_load or pending):
            first_pages = cache.pool.blocks_for(self.next_step_tokens(seq, n * bt))
        pages = loads * g.pages_per_block + first_pages
        if pages and not cache.pool.take(pages):
            for chain, s, e in held:
                hbm.drop_reader_each(chain, s, e)
            return None
        if found and system.has_lower:
            # the lookup refreshes the copies it found below HBM (SystemCache.touch_below)
            system.touch_below(cache.node, segment_range(prefix, 0, found), to_load)
        state = SeqCache(blocks=held)
        seq.cache = state
        seq.kv_blocks = first_pages  # its own pages (the loaded blocks' pages belong to the cache)
        seq.remote_tokens = 0
        remote = self.read_remote_run(seq, held)
        state.hits["hbm"] = (n - loads - remote) * bt
        if remote:
            state.hits["peer_hbm"] = remote * bt
        if to_load:
            # the copies land in this HBM (a domain's: homed here), read by the sequence; the
            # transfer pins them until the bytes are there
            domain = self.domain_pool
            for _, chain, s, e in to_load:
                done, _, evicted = index.insert_run(hbm, chain, s, e, read=True)
                if done < e - s or (evicted and domain is not None):
                    raise RuntimeError("HBM cache index refused a block it had pages for")
            if domain is not None:
                for _, chain, s, e in to_load:
                    domain.homed_run(chain, s, e, cache)
            for _, chain, s, e in to_load:
                hbm.pin_each(chain, s, e)
            held += [(chain, s, e) for _, chain, s, e in to_load]
        seq.kv_tokens = seq.shared_tokens = n * bt
        waits = list(pending.values())
        if to_load:
            waits.append(self._load_stretches(state, to_load))
        return self._wait(seq, state, waits)

    def _source_groups(self, to_load: list) -> dict:
        """:meth:`PrefixLoader._groups` over stretches: ``(id(store), id(holder)) -> (store,
        holder, kind, stretches)`` in the order their first block comes, each holder's stretches
        in order (another domain's store holds each block in its home)."""
        cache, access = self.cache, self.access
        groups: dict[tuple[int, int], tuple] = {}
        tier_of = self.system.tier_of
        for store, chain, start, end in to_load:
            tier = tier_of[id(store)]
            if tier != "hbm":  # a lower tier: one source for all its blocks
                entry = groups.setdefault((id(store), id(None)), (store, None, tier, []))
                entry[3].append((chain, start, end))
                continue
            pool = access.pools.get(id(store))
            if pool is None or store is cache.hbm:
                raise RuntimeError(f"a cache kept as extents loads from lower tiers and other domains, not {store.name}")
            for s, e, holder in pool.homes.homes(chain, start, end):
                kind = "peer_hbm" if holder.domain == cache.domain else "other_domain"
                entry = groups.setdefault((id(store), id(holder)), (store, holder, kind, []))
                entry[3].append((chain, s, e))
        return groups

    def _copy_stretches_from(self, holder, stretches: list, nbytes: float) -> simpy.Event:
        """:meth:`PrefixLoader._copy_from` of ``stretches`` held in ``holder``'s domain."""
        env, transfers = self.system.env, self.system.transfers
        paths = self.access.peer_paths(holder, self.cache)
        landing: dict[int, simpy.Event] = {}
        for chain, s, e in stretches:
            for event in holder.inflight.events(chain, s, e):
                landing.setdefault(id(event), event)
        if not landing:
            return transfers.move(paths, nbytes, "peer_copy")

        def after_landing():
            yield simpy.AllOf(env, list(landing.values()))
            yield transfers.move(paths, nbytes, "peer_copy")

        return env.process(after_landing())

    def _load_stretches(self, state: SeqCache, to_load: list) -> simpy.Event:
        """:meth:`PrefixLoader._load` of ``to_load`` (``(store, chain, start, end)``)."""
        cache, system = self.cache, self.system
        g = cache.geometry
        events = []
        for store, holder, tier, stretches in self._source_groups(to_load).values():
            for chain, s, e in stretches:
                store.lookup_pin_run(chain, s, e)
            blocks = segment_blocks(stretches)
            nbytes = blocks * g.block_bytes_per_card
            state.hits[tier] = state.hits.get(tier, 0) + blocks * g.block_tokens
            state.loaded_bytes += nbytes * g.tp
            if holder is None:  # a lower tier, as PrefixLoader._load loads it
                group_done = self._read_below(store, tier, nbytes)
            else:
                self._count_peer_read(tier, nbytes)
                group_done = self._copy_stretches_from(holder, stretches, nbytes)

            def unpin_source(_event, store=store, stretches=stretches):
                if system.pending_reclaims:
                    system.settle_reclaims()
                for chain, s, e in stretches:
                    store.unpin_each(chain, s, e)

            group_done.callbacks.append(unpin_source)
            events.append(group_done)
        done = events[0] if len(events) == 1 else simpy.AllOf(system.env, events)
        loaded = [(chain, s, e) for _, chain, s, e in to_load]
        inflight = cache.inflight
        for chain, s, e in loaded:
            inflight.set(chain, s, e, done)
        promote = [(chain, s, e) for store, chain, s, e in to_load if system.tier_of[id(store)] in ("nvme", "remote")]

        def landed(_event):
            if system.pending_reclaims:
                system.settle_reclaims()
            for chain, s, e in loaded:
                cache.hbm.unpin_each(chain, s, e)
                inflight.clear(chain, s, e, done)
            if promote and system.spec.promote_on_hit:
                self._promote(promote)

        done.callbacks.insert(0, landed)
        return done

    def _promote(self, stretches: list) -> None:
        """:meth:`PrefixLoader._promote` of ``stretches`` (loaded from NVMe or the pool)."""
        system = self.system
        dram = system.dram.get(self.cache.node)
        if dram is None:
            return
        missing = [(chain, a, b) for chain, s, e in stretches for a, b in dram.missing(chain, s, e)]
        if not missing:
            return
        if not system.spec.gpu_direct:
            system.file(dram, missing)  # the bounce staged these bytes in host DRAM already
            return
        self.write_down(None, missing, only=dram)


class ExtentCacheWriter(CacheWriter):
    """:class:`CacheWriter` over segments: a finished prompt's new blocks filed in its domain."""

    def file_prompt(self, seq: Sequence) -> None:
        if seq.hashes is None or seq.cache is None:
            return
        cache = self.cache
        g = cache.geometry
        full = seq.prompt_tokens // g.block_tokens
        first_new = seq.shared_tokens // g.block_tokens
        if full <= first_new:
            return
        hbm, index, domain = cache.hbm, self.system.index, self.domain_pool
        run = segment_range(prompt_address(seq, g.block_tokens), first_new, full)
        # as CacheWriter.file_prompt: a block the store holds already was computed twice and its
        # cached copy is kept (in a domain, read in place from now on); the others are stored
        # (and homed here); the sequence reads every one of them
        pieces = []  # (chain, start, end, new)
        for chain, start, end in run:
            done, new, evicted = index.insert_run(hbm, chain, start, end, read=True, touch=False)
            if done < end - start or (evicted and domain is not None):
                # (a domain store holds what its members' pages hold: it never evicts on filing)
                raise RuntimeError("HBM cache index refused a block whose pages the sequence held")
            pos = start
            for a, b in new:
                if pos < a:
                    pieces.append((chain, pos, a, False))
                pieces.append((chain, a, b, True))
                pos = b
            if pos < end:
                pieces.append((chain, pos, end, False))
        twice = sum(e - s for _, s, e, new in pieces if not new)
        if twice:
            cache.pool.give(twice * g.pages_per_block)
        if domain is not None:
            for chain, s, e, new in pieces:
                if new:
                    domain.homed_run(chain, s, e, cache)
                else:
                    self.read_remote_run(seq, [(chain, s, e)])
        seq.cache.blocks.extend(run)
        seq.kv_blocks -= (full - first_new) * g.pages_per_block
        seq.shared_tokens = full * g.block_tokens
        if self.system.spec.write_policy == "write_through":
            new_blocks = [(chain, s, e) for chain, s, e, new in pieces if new]
            if new_blocks:
                self.write_down(seq, new_blocks)

    def write_down(self, seq: Sequence | None, blocks: list, only=None) -> None:
        """:meth:`CacheWriter.write_down` of the stretches ``blocks``: copied from this HBM to
        every lower tier that lacks them (or to ``only``), pinned in HBM until the copies land."""
        if not blocks:
            return
        cache, system = self.cache, self.system
        g = cache.geometry
        if only is not None:
            group = [(chain, a, b) for chain, s, e in blocks for a, b in only.missing(chain, s, e)]
            targets = [(only, group)] if group else []
        else:
            targets = system.missing_below(cache.node, blocks)
        writers, unit = self._unit
        legacy = system.write_fanout == "legacy"
        hbm = cache.hbm
        wake = self.wake  # the engine loop's alarm, once the copies land
        for store, group in targets:
            count = segment_blocks(group)
            # (legacy: the expression kvsim always used, so its records stay bit for bit)
            per_card = count * g.block_bytes / g.tp if legacy else count * unit
            io = system.io(store, True, cache.node, unit)
            done = system.write(store, self._paths(store), per_card, per_card * len(writers), io)
            if done is None:
                continue  # the store's write queue is full: no copy there (counted by system.write)
            if seq is not None:
                self.record_written(seq, per_card * len(writers))
            for chain, s, e in group:
                hbm.pin_each(chain, s, e)

            def stored(_event, store=store, group=group):
                if system.pending_reclaims:
                    system.settle_reclaims()
                for chain, s, e in group:
                    hbm.unpin_each(chain, s, e)
                system.file(store, group)
                wake()

            done.callbacks.append(stored)

    def _reclaim_blocks(self, blocks: int) -> None:
        """:meth:`CacheWriter._reclaim_blocks` of an instance's own store kept as extents (a
        domain's pool reclaims as extents itself): the same victims, as stretches."""
        cache = self.cache
        cache.pool.give(self._evict(blocks) * cache.geometry.pages_per_block)
        # (write-back copies nothing: a system kept as extents with a tier below HBM writes through)

    def _evict(self, blocks: int) -> int:
        """Evict up to ``blocks`` victims from the instance's store, in the policy's order, and
        forget them in the index in that order; returns how many."""
        hbm, index = self.cache.hbm, self.system.index
        victims = hbm.evict_run(blocks)
        count = 0
        for chain, start, end in victims:
            index.discard_run(chain, start, end, hbm)
            count += end - start
        return count

    def reclaim_deferred(self, blocks: int) -> None:
        """:meth:`CacheWriter.reclaim_deferred` over stretches."""
        if self._evict(blocks) != blocks:
            raise RuntimeError("a deferred reclaim found fewer evictable blocks than its run planned")
        self.system.reclaims_deferred += 1

    def cache_decoded(self, seq: Sequence) -> None:
        if seq.sequence_hashes is not None:
            raise RuntimeError("a domain kept as extents does not file decoded blocks")


class ExtentInstanceCache(InstanceCache):
    """:class:`InstanceCache` of a domain kept as extents (see the module docstring): its
    sequences' cache state holds segments, not block ids."""

    loader_type = ExtentPrefixLoader
    writer_type = ExtentCacheWriter

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.domain_pool is None:  # (a domain's blocks in flight are its pool's)
            self.inflight = InflightMap()

    def _drop_readers(self, blocks) -> None:
        for chain, s, e in blocks:
            self.hbm.drop_reader_each(chain, s, e)

    def read_remote_run(self, seq: Sequence, blocks) -> int:
        """:meth:`InstanceCache.read_remote_run` of the segments ``blocks``."""
        if self.domain_pool is None:
            return 0  # (an instance's own store: no peer holds what it reads)
        homes, state = self.domain_pool.homes, seq.cache
        remote_from, tokens = state.remote_from, self.geometry.block_tokens
        remote = 0
        for chain, start, end in blocks:
            for s, e, holder in homes.homes(chain, start, end):
                if holder is not self:
                    remote_from[holder] = remote_from.get(holder, 0) + (e - s) * tokens
                    remote += e - s
        seq.remote_tokens += remote * tokens
        return remote

    def read_remote(self, seq: Sequence, block) -> bool:
        raise RuntimeError("a domain kept as extents reads stretches: use read_remote_run")

    def cached_prefix_blocks(self, seq: Sequence) -> int:
        """Leading blocks of ``seq``'s prompt held in this instance's (or its domain's) store."""
        if seq.hashes is None:
            return 0
        if self.system.pending_reclaims:  # (a router reads the store)
            self.system.settle_reclaims()
        blocks = 0
        for chain, start, end in prompt_address(seq, self.geometry.block_tokens):
            pieces = self.hbm.holds(chain, start, end)
            reach = start
            for s, e, _, _ in pieces:
                if s != reach:
                    break
                reach = e
            blocks += reach - start
            if reach < end:
                break
        return blocks
