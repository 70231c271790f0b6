"""Prefix caching and KV offload: where a request's cached prefix lives and how it moves.

One :class:`SystemCache` per system holds the cluster-wide :class:`~kvsim.kv.KVIndex`, the block
stores of every tier (each instance's HBM, each node's DRAM and NVMe, the remote pool's nodes)
and the flow network the bytes cross. Each instance gets an :class:`InstanceCache`, the
scheduler's :class:`~kvsim.serving.scheduler.AdmissionHook`:

- on admission it finds the longest cached prefix of the prompt among the stores this instance
  can reach (its own HBM, its node's DRAM and NVMe, the remote pool), keeps the blocks already
  in its HBM (shared pages, no copy), and loads the others through the network -- one flow per
  source tier and card, never one per block;
- when the prompt's KV is complete it files the new full blocks in its HBM cache and, under
  write-through, writes them down to every lower tier in the background;
- when HBM runs short it evicts unheld cached blocks (write-back then copies the block to the
  next tier down; the pages are treated as free at once, i.e. the copy is assumed staged).

A block being loaded is already filed in the HBM cache (its pages are taken) but is *in flight*:
another sequence that hits it waits for the same load rather than reading bytes not yet there.

Granularity: a cache block is ``block_tokens`` tokens (the workload's hash block: 16 for most
engines, 512 for Mooncake traces); the engine pages HBM at ``page_tokens``; a cache block holds
``block_tokens / page_tokens`` pages. Only whole blocks are cached, as engines do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import simpy

from kvsim.kv import BlockPool, BlockStore, KVIndex
from kvsim.network.flows import FlowNetwork
from kvsim.network.topology import Topology
from kvsim.serving.kv_config import KVCacheSpec
from kvsim.serving.scheduler import AdmissionHook, BatchScheduler, Sequence

__all__ = ["CacheGeometry", "SystemCache", "InstanceCache", "TIERS"]

TIERS = ("hbm", "dram", "nvme", "remote")
"""Tier names, fastest first; a store's rank is its tier's position here."""


@dataclass(frozen=True)
class CacheGeometry:
    """Sizes of one cache block.

    Attributes
    ----------
    block_tokens, page_tokens : int
        Tokens per cache block and per engine page.
    block_bytes : float
        KV bytes of one block for the whole model (what a lower tier stores).
    block_bytes_per_card : float
        KV bytes of one block on one card of a TP group (what one card loads).
    tp : int
    num_layers : int
        For layer-by-layer overlap: the first token waits one layer's share of the load.
    """

    block_tokens: int
    page_tokens: int
    block_bytes: float
    block_bytes_per_card: float
    tp: int
    num_layers: int

    @property
    def pages_per_block(self) -> int:
        return self.block_tokens // self.page_tokens


@dataclass
class _SeqCache:
    """What one sequence holds in the cache."""

    blocks: list = field(default_factory=list)  # HBM blocks it reads (reader references)
    hit_blocks: int = 0


class SystemCache:
    """The KV stores, index and network of one system (shared by its instances)."""

    def __init__(self, env: simpy.Environment, spec: KVCacheSpec, geometry: CacheGeometry,
                 topology: Topology, network: FlowNetwork, instance_nodes: list[str],
                 dram_bytes: dict[str, float], nvme_bytes: dict[str, float],
                 pool_names: list[str], pool_bytes: float):
        self.env = env
        self.spec = spec
        self.geometry = geometry
        self.topology = topology
        self.network = network
        self.index = KVIndex()
        self.instance_nodes = instance_nodes
        self.rank: dict[int, int] = {}       # id(store) -> tier position
        self.endpoint: dict[int, str] = {}   # id(store) -> topology endpoint of its medium
        self.tier_of: dict[int, str] = {}
        self.hbm: list[BlockStore] = []
        self.dram: dict[str, BlockStore] = {}
        self.nvme: dict[str, BlockStore] = {}
        self.remote: list[BlockStore] = []
        g = geometry
        for node, capacity in dram_bytes.items():
            self.dram[node] = self._store(f"{node}.dram", capacity, g.block_bytes, spec.dram.eviction, "dram",
                                          topology.dram(node))
        for node, capacity in nvme_bytes.items():
            self.nvme[node] = self._store(f"{node}.nvme", capacity, g.block_bytes, spec.nvme.eviction, "nvme",
                                          topology.nvmes(node)[0])
        for pool in pool_names:
            self.remote.append(self._store(f"{pool}.media", pool_bytes, g.block_bytes, spec.remote.eviction,
                                           "remote", topology.pool_media(pool)))
        self.capacity_Bps = topology.capacity_Bps()
        # bytes by tier, counted when a transfer starts inside the measurement window
        self.bytes_loaded = dict.fromkeys(TIERS[1:], 0.0)
        self.bytes_written = dict.fromkeys(TIERS[1:], 0.0)
        self.window = (network.window_start_s, network.window_end_s)

    def count(self, table: dict[str, float], tier: str, nbytes: float) -> None:
        """Add ``nbytes`` to ``table[tier]`` if now is inside the measurement window."""
        if self.window[0] <= self.env.now <= self.window[1]:
            table[tier] += nbytes

    def _store(self, name: str, capacity: float, block_bytes: float, policy: str, tier: str,
               endpoint: str) -> BlockStore:
        store = BlockStore(name, capacity, block_bytes, policy)
        self.rank[id(store)] = TIERS.index(tier)
        self.endpoint[id(store)] = endpoint
        self.tier_of[id(store)] = tier
        return store

    def add_instance_hbm(self, instance: int, capacity_blocks: int) -> BlockStore:
        store = self._store(f"instance{instance}.hbm", capacity_blocks * self.geometry.block_bytes,
                            self.geometry.block_bytes, self.spec.hbm_eviction, "hbm", "")
        self.hbm.append(store)
        return store

    def remote_store(self, block: int) -> BlockStore:
        """The pool node a block lives on (spread by id, as a distributed KV store shards)."""
        return self.remote[hash(block) % len(self.remote)]

    def prewarm(self, prompts, max_blocks_per_store: float = 2.0, batch: int = 1000,
                settle: float = 0.005) -> int:
        """Fill every lower tier with the full blocks of ``prompts`` (hash arrays), in order.

        Stops when the cache is warm: every lower store has taken ``max_blocks_per_store`` times
        its capacity (what remains is what its policy keeps), or the share of blocks already
        present changes by less than ``settle`` between successive batches of ``batch`` prompts
        (the hit rate has settled). Returns the prompts used.
        """
        locals_ = list(self.dram.values()) + list(self.nvme.values())
        stores = locals_ + self.remote
        if not stores:
            return 0
        budget = {id(s): max_blocks_per_store * s.capacity_blocks for s in stores}
        used = present = seen = 0
        previous = None
        for hashes in prompts:
            used += 1
            for block in hashes:
                seen += 1
                first = locals_[0] if locals_ else self.remote_store(block)
                present += block in first
                for store in locals_:
                    self.index.insert(store, block)
                    budget[id(store)] -= 1
                if self.remote:
                    store = self.remote_store(block)
                    self.index.insert(store, block)
                    budget[id(store)] -= 1
            if all(b <= 0 for b in budget.values()):
                break
            if used % batch == 0:
                rate = present / seen if seen else 0.0
                if previous is not None and abs(rate - previous) < settle:
                    break
                previous, present, seen = rate, 0, 0
        return used

    def lower_stores(self, node: str, block: int) -> list[BlockStore]:
        """The stores below HBM that an instance on ``node`` writes a block to, fastest first."""
        stores = []
        if node in self.dram:
            stores.append(self.dram[node])
        if node in self.nvme:
            stores.append(self.nvme[node])
        if self.remote:
            stores.append(self.remote_store(block))
        return stores


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
        self.inflight: dict = {}  # block -> event that fires when its bytes have landed
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
            cached = local * g.block_tokens
            suffix = seq.prefill_target - n * g.block_tokens
            extra = (n - local) * g.block_tokens
            marginal_s = self.recompute_s(extra + suffix, cached) - self.recompute_s(suffix, n * g.block_tokens)
            remote = [src for src in sources[local:n] if src is not self.hbm]
            if marginal_s <= self._estimated_load_s(remote):
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
        seq.cache = _SeqCache(blocks=held, hit_blocks=n)
        seq.kv_tokens = seq.shared_tokens = n * g.block_tokens
        self.record_hits(seq, "hbm", (n - len(to_load)) * g.block_tokens, 0.0)
        waits = list(pending.values())
        if to_load:
            waits.append(self._load(seq, to_load))
        if not waits:
            return "run"
        done = waits[0] if len(waits) == 1 else simpy.AllOf(self.system.env, waits)
        if self.system.spec.load_mode == "before":
            done.callbacks.append(lambda _event: self._after_load(seq, ungate=False))
            return "load"
        seq.gated = True
        started = self.system.env.now

        def layer_tail(_event):
            # layer-by-layer: compute of the last layer waits for that layer's share of the load
            tail_s = (self.system.env.now - started) / g.num_layers
            self.system.env.process(self._ungate_after(seq, tail_s))

        done.callbacks.append(layer_tail)
        return "run"

    def _ungate_after(self, seq: Sequence, delay_s: float):
        yield self.system.env.timeout(delay_s)
        self._after_load(seq, ungate=True)

    def _after_load(self, seq: Sequence, ungate: bool) -> None:
        if self.scheduler is None:
            return
        if ungate:
            self.scheduler.ungate(seq, self.system.env.now)
        else:
            self.scheduler.loaded(seq)
        self.wake()

    def _estimated_load_s(self, sources: list[BlockStore]) -> float:
        """Uncontended time to load blocks from ``sources`` (the slowest tier's path decides)."""
        g = self.geometry
        worst = 0.0
        by_store: dict[int, tuple[BlockStore, int]] = {}
        for store in sources:
            entry = by_store.get(id(store))
            by_store[id(store)] = (store, (entry[1] if entry else 0) + 1)
        for store, count in by_store.values():
            links = self.system.topology.load_path(self.system.endpoint[id(store)], self.gpus[0],
                                                   self.system.spec.gpu_direct)
            capacity = self.system.capacity_Bps
            bottleneck = min(capacity[link] / links.count(link) for link in links)
            time_s = count * g.block_bytes_per_card / bottleneck + self.system.topology.path_latency_s(links)
            worst = max(worst, time_s)
        return worst

    def _load(self, seq: Sequence, to_load: list) -> simpy.Event:
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
            self.record_hits(seq, tier, len(blocks) * g.block_tokens, nbytes * g.tp)
            system.count(system.bytes_loaded, tier, nbytes * g.tp)
            flows = []
            for gpu in self.gpus:
                links = system.topology.load_path(system.endpoint[id(store)], gpu, system.spec.gpu_direct)
                flows.append(system.network.transfer(links, nbytes, system.topology.path_latency_s(links)))
            group_done = simpy.AllOf(system.env, flows)

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
            for block in missing:  # the bounce staged these bytes in host DRAM already
                self.system.index.insert(dram, block)
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
        """Copy ``blocks`` from this HBM to every lower tier that lacks them (or to ``only``)."""
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
            flows = []
            for gpu in self.gpus:
                links = system.topology.store_path(gpu, system.endpoint[id(store)], system.spec.gpu_direct)
                flows.append(system.network.transfer(links, per_card, system.topology.path_latency_s(links)))

            def stored(_event, store=store, group=group):
                for block in group:
                    self.hbm.unpin(block)
                    system.index.insert(store, block)
                self.wake()

            simpy.AllOf(system.env, flows).callbacks.append(stored)

    def released(self, seq: Sequence, finished: bool) -> None:
        state = seq.cache
        if state is None:
            return
        if finished and seq.sequence_hashes is not None:
            self._cache_decoded(seq, state)
        for block in state.blocks:
            self.hbm.drop_reader(block)
        seq.cache = None

    # -- swapping preempted sequences ------------------------------------------------------
    def _private_bytes_per_card(self, seq: Sequence) -> float:
        g = self.geometry
        return seq.kv_blocks * g.page_tokens * g.block_bytes_per_card / g.block_tokens

    def _swap_flows(self, nbytes_per_card: float, out: bool) -> simpy.Event:
        system = self.system
        dram = system.topology.dram(self.node)
        flows = []
        for gpu in self.gpus:
            links = system.topology.store_path(gpu, dram, True) if out else system.topology.load_path(dram, gpu, True)
            flows.append(system.network.transfer(links, nbytes_per_card, system.topology.path_latency_s(links)))
        return flows[0] if len(flows) == 1 else simpy.AllOf(system.env, flows)

    def swap_out(self, seq: Sequence) -> bool:
        """Copy the sequence's own pages to host DRAM (its shared prefix blocks stay held)."""
        if self.system.spec.preemption != "swap" or seq.kv_blocks == 0:
            return False
        nbytes = self._private_bytes_per_card(seq)
        self.record_written(seq, nbytes * self.geometry.tp)
        # the pages are handed back at once: the copy is assumed staged, like a write-back
        self._swap_flows(nbytes, out=True)
        return True

    def _swap_in(self, seq: Sequence) -> str | None:
        """Readmitting a swapped sequence: its pages back, then the copy from host DRAM."""
        if not self.pool.grow(seq, seq.kv_tokens):
            return None
        nbytes = self._private_bytes_per_card(seq)
        self.record_hits(seq, "dram", 0, nbytes * self.geometry.tp)
        seq.swapped = False
        done = self._swap_flows(nbytes, out=False)
        done.callbacks.append(lambda _event: self._after_load(seq, ungate=False))
        return "load"

    def _cache_decoded(self, seq: Sequence, state: _SeqCache) -> None:
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
        """Evict unheld cached blocks from HBM until ``shortfall_pages`` pages are free again."""
        g = self.geometry
        freed = 0
        write_back = self.system.spec.write_policy == "write_back"
        while freed < shortfall_pages:
            victim = self.hbm.evict_one()
            if victim is None:
                return
            self.system.index.discard(victim, self.hbm)
            if write_back:
                # the copy down is modelled as leaving from the freed pages' staging buffer, so the
                # pages come back at once (an optimistic simplification; see the module docstring)
                self._write_back(victim)
            self.pool.give(g.pages_per_block)
            freed += g.pages_per_block

    def _write_back(self, block) -> None:
        """Write-back: an evicted block is copied to the next tier down that lacks it."""
        system, g = self.system, self.geometry
        for store in system.lower_stores(self.node, block):
            if block in store:
                return
            tier = system.tier_of[id(store)]
            system.count(system.bytes_written, tier, g.block_bytes)
            flows = []
            for gpu in self.gpus:
                links = system.topology.store_path(gpu, system.endpoint[id(store)], system.spec.gpu_direct)
                flows.append(system.network.transfer(links, g.block_bytes / g.tp,
                                                     system.topology.path_latency_s(links)))
            simpy.AllOf(system.env, flows).callbacks.append(
                lambda _event, store=store: system.index.insert(store, block))
            return
