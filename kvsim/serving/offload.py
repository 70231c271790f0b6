"""Prefix caching and KV offload for one instance: the scheduler's admission hook.

:class:`InstanceCache` decides, for each request it admits, where its cached prefix comes from:

- it finds the longest cached prefix of the prompt among the stores this instance can reach (its
  own HBM, its node's DRAM and NVMe, the remote pool), keeps the blocks already in its HBM
  (shared pages, no copy), and loads the others through the network -- one flow per source tier
  and card, never one per block;
- when the prompt's KV is complete it files the new full blocks in its HBM cache and, under
  write-through, writes them down to every lower tier in the background;
- when HBM runs short it evicts unheld cached blocks, and only if that frees enough pages
  (write-back then copies them a tier down; the pages are treated as free at once, i.e. the copy
  is assumed staged).

A block being loaded is already filed in the HBM cache (its pages are taken) but is *in flight*:
another sequence that hits it waits for the same load rather than reading bytes not yet there.
Per-request records (hit tokens per tier, bytes loaded) are written when the scheduler commits
the admission, so an admission retried for lack of pages is counted once.

Granularity: a cache block is ``block_tokens`` tokens (the workload's hash block); the engine
pages HBM at ``page_tokens``; only whole blocks are cached, as engines do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import simpy

from kvsim.kv import BlockPool, BlockStore
from kvsim.serving.kv_system import TIERS, CacheGeometry, SystemCache
from kvsim.serving.scheduler import AdmissionHook, BatchScheduler, Sequence

__all__ = ["CacheGeometry", "SystemCache", "InstanceCache", "TIERS"]


@dataclass
class _SeqCache:
    """What one admission of a sequence holds in the cache, and what it will record."""

    blocks: list = field(default_factory=list)  # HBM blocks it reads (reader references)
    hits: dict[str, int] = field(default_factory=dict)  # tier -> tokens, recorded on commit
    loaded_bytes: float = 0.0


class InstanceCache(AdmissionHook):
    """Prefix caching and offload for one instance (see the module docstring).

    Parameters
    ----------
    system : SystemCache
    index : int
        The instance's position in its system.
    gpus : list of str
        Topology endpoints of the instance's cards.
    pool : BlockPool
        The instance's page pool (shared by sequences and cached blocks).
    recompute_s : callable
        ``recompute_s(tokens, cached_tokens)`` predicts the time of one prefill iteration of
        ``tokens`` tokens after ``cached_tokens`` (for the ``faster`` load policy, which compares
        loading a hit with the extra time recomputing it adds to the suffix's prefill).
    record_hits : callable
        ``record_hits(seq, tier, tokens, loaded_bytes)`` for the per-request records.
    record_written : callable
        ``record_written(seq, nbytes)``.

    The instance sets :attr:`scheduler` and :attr:`wake` (its engine loop's alarm) once built.
    """

    def __init__(self, system: SystemCache, index: int, gpus: list[str], pool: BlockPool,
                 recompute_s: Callable[[int, int], float],
                 record_hits: Callable[[Sequence, str, int, float], None],
                 record_written: Callable[[Sequence, float], None]):
        self.system = system
        self.node = system.instance_nodes[index]
        self.gpus = gpus
        self.pool = pool
        self.geometry = system.geometry
        self.hbm = system.add_instance_hbm(index, pool.num_blocks // self.geometry.pages_per_block)
        self.recompute_s = recompute_s
        self.record_hits = record_hits
        self.record_written = record_written
        self.wake: Callable[[], None] = lambda: None
        self.scheduler: BatchScheduler | None = None
        self.inflight: dict = {}   # block -> event that fires when its bytes have landed
        self.swapping: dict[int, simpy.Event] = {}  # rid -> swap-out still in flight
        pool.reclaim = self.reclaim

    # -- which stores this instance can read -----------------------------------------------
    def _usable(self, store: BlockStore) -> bool:
        tier = self.system.tier_of[id(store)]
        if tier == "hbm":
            return store is self.hbm
        if tier == "remote":
            return True
        return store is self.system.dram.get(self.node) or store is self.system.nvme.get(self.node)

    def _rank(self, store: BlockStore) -> int:
        return self.system.rank[id(store)]

    # -- AdmissionHook ---------------------------------------------------------------------
    def admit(self, seq: Sequence, now: float) -> str | None:
        if seq.swapped:
            return self._swap_in(seq)
        if seq.hashes is None:
            return "run"
        g = self.geometry
        index = self.system.index
        # at least one token is always computed: the last prompt block is never a hit
        eligible = min(seq.prompt_tokens // g.block_tokens, (seq.prefill_target - 1) // g.block_tokens)
        hashes = seq.hashes
        n = index.longest_prefix(hashes[:eligible], self._usable) if eligible > 0 else 0
        sources = index.tier_breakdown(hashes, n, self._rank, self._usable) if n else []
        local = 0
        while local < n and sources[local] is self.hbm:
            local += 1
        if n > local and self.system.spec.load_policy == "faster":
            # Recomputing the blocks below HBM costs the extra prefill time they add to the
            # suffix that must be computed anyway; if that beats the uncontended load time,
            # keep only the leading run already in this HBM.
            suffix = seq.prefill_target - n * g.block_tokens
            extra = (n - local) * g.block_tokens
            marginal_s = (self.recompute_s(extra + suffix, local * g.block_tokens)
                          - self.recompute_s(suffix, n * g.block_tokens))
            if marginal_s <= self._estimated_load_s([s for s in sources[local:n] if s is not self.hbm]):
                n = local
        hbm = self.hbm
        held = []
        pending: dict[int, simpy.Event] = {}
        to_load = []
        for k in range(n):
            block = hashes[k]
            if sources[k] is not hbm:
                to_load.append((block, sources[k]))
                continue
            hbm.lookup(block)
            hbm.add_reader(block)
            held.append(block)
            event = self.inflight.get(block)
            if event is not None:
                pending[id(event)] = event
        if to_load and not self.pool.take(len(to_load) * g.pages_per_block):
            for block in held:
                hbm.drop_reader(block)
            return None
        for block, _ in to_load:
            # the copy lands in this HBM; the transfer pins it until the bytes are there
            if self.system.index.insert(hbm, block) is None:
                raise RuntimeError("HBM cache index refused a block it had pages for")
            hbm.pin(block)
            hbm.add_reader(block)
            held.append(block)
        state = _SeqCache(blocks=held, hits={"hbm": (n - len(to_load)) * g.block_tokens})
        seq.cache = state
        seq.kv_tokens = seq.shared_tokens = n * g.block_tokens
        waits = list(pending.values())
        if to_load:
            waits.append(self._load(state, to_load))
        if not waits:
            return "run"
        done = waits[0] if len(waits) == 1 else simpy.AllOf(self.system.env, waits)
        if self.system.spec.load_mode == "before":
            done.callbacks.append(lambda _event: self._after_load(seq, state, ungate=False))
            return "load"
        seq.gated = True
        started = self.system.env.now

        def layer_tail(_event):
            # layer-by-layer: the last layer's compute waits for that layer's share of the load
            tail_s = (self.system.env.now - started) / g.num_layers
            self.system.env.process(self._ungate_after(seq, state, tail_s))

        done.callbacks.append(layer_tail)
        return "run"

    def committed(self, seq: Sequence) -> None:
        state = seq.cache
        if state is None or not state.hits:
            return
        for tier, tokens in state.hits.items():
            self.record_hits(seq, tier, tokens, 0.0)
        self.record_hits(seq, "hbm", 0, state.loaded_bytes)
        state.hits, state.loaded_bytes = {}, 0.0

    def _ungate_after(self, seq: Sequence, state: _SeqCache, delay_s: float):
        yield self.system.env.timeout(delay_s)
        self._after_load(seq, state, ungate=True)

    def _after_load(self, seq: Sequence, state: _SeqCache | None, ungate: bool) -> None:
        if self.scheduler is None or seq.cache is not state:
            return  # that admission was given up (preempted, or retried): nothing waits for it
        if ungate:
            self.scheduler.ungate(seq, self.system.env.now)
        else:
            self.scheduler.loaded(seq)
        self.wake()

    def _estimated_load_s(self, sources: list[BlockStore]) -> float:
        """Uncontended time to load blocks from ``sources``: every card's flow at once, so a
        link the ``tp`` flows share (a NIC) carries all of them; the slowest source decides."""
        g, system = self.geometry, self.system
        counts: dict[int, tuple[BlockStore, int]] = {}
        for store in sources:
            entry = counts.get(id(store))
            counts[id(store)] = (store, (entry[1] if entry else 0) + 1)
        worst = 0.0
        for store, count in counts.values():
            crossings: dict = {}
            latency = 0.0
            for gpu in self.gpus:
                links = system.topology.load_path(system.endpoint[id(store)], gpu, system.spec.gpu_direct)
                latency = max(latency, system.topology.path_latency_s(links))
                for link in links:
                    crossings[link] = crossings.get(link, 0) + 1
            nbytes = count * g.block_bytes_per_card
            worst = max(worst, max(n * nbytes / system.capacity_Bps[link] for link, n in crossings.items()) + latency)
        return worst

    def _load(self, state: _SeqCache, to_load: list) -> simpy.Event:
        """Start the flows that bring ``to_load`` into HBM; the returned event fires when all land."""
        system, g = self.system, self.geometry
        groups: dict[int, tuple[BlockStore, list]] = {}
        for block, store in to_load:
            groups.setdefault(id(store), (store, []))[1].append(block)
        events = []
        for store, blocks in groups.values():
            tier = system.tier_of[id(store)]
            for block in blocks:
                store.lookup(block)
                store.pin(block)
            nbytes = len(blocks) * g.block_bytes_per_card
            state.hits[tier] = state.hits.get(tier, 0) + len(blocks) * g.block_tokens
            state.loaded_bytes += nbytes * g.tp
            system.count(system.bytes_loaded, tier, nbytes * g.tp)
            paths = [system.topology.load_path(system.endpoint[id(store)], gpu, system.spec.gpu_direct)
                     for gpu in self.gpus]
            group_done = system.transfer(paths, nbytes)

            def unpin_source(_event, store=store, blocks=blocks):
                for block in blocks:
                    store.unpin(block)

            group_done.callbacks.append(unpin_source)
            events.append(group_done)
        done = events[0] if len(events) == 1 else simpy.AllOf(system.env, events)
        loaded = [b for b, _ in to_load]
        for block in loaded:
            self.inflight[block] = done
        promote = [b for b, store in to_load if system.tier_of[id(store)] in ("nvme", "remote")]

        def landed(_event):
            for block in loaded:
                self.hbm.unpin(block)
                if self.inflight.get(block) is done:
                    del self.inflight[block]
            if promote and system.spec.promote_on_hit:
                self._promote(promote)

        done.callbacks.insert(0, landed)
        return done

    def _promote(self, blocks: list) -> None:
        """File blocks just loaded from NVMe or the pool in this node's DRAM tier too."""
        dram = self.system.dram.get(self.node)
        if dram is None:
            return
        missing = [b for b in blocks if b not in dram]
        if not missing:
            return
        if not self.system.spec.gpu_direct:
            self.system.file(dram, missing)  # the bounce staged these bytes in host DRAM already
            return
        self._write_down(None, missing, only=dram)

    def prompt_done(self, seq: Sequence, now: float) -> None:
        if seq.hashes is None or seq.cache is None:
            return
        g = self.geometry
        full = seq.prompt_tokens // g.block_tokens
        state: _SeqCache = seq.cache
        first_new = seq.shared_tokens // g.block_tokens
        if full <= first_new:
            return
        hbm, index = self.hbm, self.system.index
        new_blocks = []
        for block in seq.hashes[first_new:full]:
            if block in hbm:
                self.pool.give(g.pages_per_block)  # computed twice: keep the cached copy
            elif index.insert(hbm, block) is None:
                raise RuntimeError("HBM cache index refused a block whose pages the sequence held")
            else:
                new_blocks.append(block)
            hbm.add_reader(block)
            state.blocks.append(block)
        seq.kv_blocks -= (full - first_new) * g.pages_per_block
        seq.shared_tokens = full * g.block_tokens
        if self.system.spec.write_policy == "write_through" and new_blocks:
            self._write_down(seq, new_blocks)

    def _write_down(self, seq: Sequence | None, blocks: list, only: BlockStore | None = None) -> None:
        """Copy ``blocks`` from this HBM to every lower tier that lacks them (or to ``only``).

        The blocks are pinned in HBM until their copies land. One flow per card and target.
        """
        system, g = self.system, self.geometry
        targets: dict[int, tuple[BlockStore, list]] = {}
        for block in blocks:
            for store in ([only] if only is not None else system.lower_stores(self.node, block)):
                if block not in store:
                    targets.setdefault(id(store), (store, []))[1].append(block)
        for store, group in targets.values():
            tier = system.tier_of[id(store)]
            per_card = len(group) * g.block_bytes / g.tp
            system.count(system.bytes_written, tier, per_card * g.tp)
            if seq is not None:
                self.record_written(seq, per_card * g.tp)
            for block in group:
                self.hbm.pin(block)
            paths = [system.topology.store_path(gpu, system.endpoint[id(store)], system.spec.gpu_direct)
                     for gpu in self.gpus]

            def stored(_event, store=store, group=group):
                for block in group:
                    self.hbm.unpin(block)
                system.file(store, group)
                self.wake()

            system.transfer(paths, per_card).callbacks.append(stored)

    def released(self, seq: Sequence, finished: bool) -> None:
        state = seq.cache
        if state is None:
            return
        if finished and seq.sequence_hashes is not None:
            self._cache_decoded(seq)
        for block in state.blocks:
            self.hbm.drop_reader(block)
        seq.cache = None

    # -- swapping preempted sequences ------------------------------------------------------
    def _kv_bytes_per_card(self, tokens: int) -> float:
        g = self.geometry
        return tokens * g.block_bytes_per_card / g.block_tokens

    def _swap_paths(self, out: bool) -> list:
        topology, dram = self.system.topology, self.system.topology.dram(self.node)
        return [topology.store_path(gpu, dram, True) if out else topology.load_path(dram, gpu, True)
                for gpu in self.gpus]

    def swap_out(self, seq: Sequence) -> bool:
        """Copy all the sequence's KV (its own pages and the shared prefix it reads) to host DRAM
        and let go of its HBM blocks, so a swapped sequence holds nothing in HBM."""
        if self.system.spec.preemption != "swap" or seq.kv_tokens == 0:
            return False
        nbytes = self._kv_bytes_per_card(seq.kv_tokens)
        self.released(seq, finished=False)
        self.record_written(seq, nbytes * self.geometry.tp)
        self.system.count(self.system.bytes_written, "dram", nbytes * self.geometry.tp)
        # the pages are handed back at once: the copy is assumed staged, like a write-back
        self.swapping[seq.rid] = self.system.transfer(self._swap_paths(out=True), nbytes)
        return True

    def _swap_in(self, seq: Sequence) -> str | None:
        """Readmitting a swapped sequence: its pages back, then the copy back from host DRAM
        (after the copy out has landed)."""
        if not self.pool.grow(seq, seq.kv_tokens):  # all of it comes back as its own pages
            return None
        nbytes = self._kv_bytes_per_card(seq.kv_tokens)
        self.record_hits(seq, "hbm", 0, nbytes * self.geometry.tp)
        self.system.count(self.system.bytes_loaded, "dram", nbytes * self.geometry.tp)
        seq.swapped = False
        self.system.env.process(self._swap_back(seq, seq.cache, self.swapping.pop(seq.rid, None), nbytes))
        return "load"

    def _swap_back(self, seq: Sequence, state, out: simpy.Event | None, nbytes: float):
        if out is not None and not out.processed:
            yield out
        yield self.system.transfer(self._swap_paths(out=False), nbytes)
        self._after_load(seq, state, ungate=False)

    def _cache_decoded(self, seq: Sequence) -> None:
        """Keep the full blocks written while decoding (a next turn extends this conversation).

        The sequence's own pages were just returned to the pool; the blocks worth keeping take
        pages back from it (they are the same bytes, still in place).
        """
        g = self.geometry
        hbm, index = self.hbm, self.system.index
        first = seq.shared_tokens // g.block_tokens
        full = min(seq.kv_tokens // g.block_tokens, len(seq.sequence_hashes))
        new_blocks = []
        for block in seq.sequence_hashes[first:full]:
            if block in hbm:
                continue
            if not self.pool.take(g.pages_per_block):
                break
            if index.insert(hbm, block) is None:
                self.pool.give(g.pages_per_block)
                break
            new_blocks.append(block)
        if new_blocks and self.system.spec.write_policy == "write_through":
            self._write_down(seq, new_blocks)

    # -- HBM pressure ------------------------------------------------------------------------
    def reclaim(self, shortfall_pages: int) -> None:
        """Evict unheld cached blocks from HBM to free ``shortfall_pages`` pages -- only if they
        can: a request that cannot be met evicts nothing."""
        g = self.geometry
        if self.hbm.evictable_blocks * g.pages_per_block < shortfall_pages:
            return
        victims = []
        while len(victims) * g.pages_per_block < shortfall_pages:
            victim = self.hbm.evict_one()
            if victim is None:
                break
            self.system.index.discard(victim, self.hbm)
            victims.append(victim)
        self.pool.give(len(victims) * g.pages_per_block)
        if victims and self.system.spec.write_policy == "write_back":
            self._write_back(victims)

    def _write_back(self, blocks: list) -> None:
        """Write-back: evicted HBM blocks go to the next tier down that lacks them, one flow per
        card and target (from a staging copy: their pages were freed already)."""
        system, g = self.system, self.geometry
        targets: dict[int, tuple[BlockStore, list]] = {}
        for block in blocks:
            lower = system.lower_stores(self.node, block)
            if lower and block not in lower[0]:  # a copy one tier down already: nothing to move
                targets.setdefault(id(lower[0]), (lower[0], []))[1].append(block)
        for target, group in targets.values():
            tier = system.tier_of[id(target)]
            system.count(system.bytes_written, tier, len(group) * g.block_bytes)
            paths = [system.topology.store_path(gpu, system.endpoint[id(target)], system.spec.gpu_direct)
                     for gpu in self.gpus]
            done = system.transfer(paths, len(group) * g.block_bytes / g.tp)
            done.callbacks.append(lambda _event, target=target, group=group: system.file(target, group))
