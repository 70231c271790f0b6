"""The KV tiers of one system: block stores, the cluster-wide index and the network they share.

One :class:`SystemCache` per system holds each instance's HBM store, each node's DRAM and NVMe
stores, the remote pool's stores (one per pool node, blocks sharded by id), the
:class:`~kvsim.kv.KVIndex` over all of them, and the :class:`~kvsim.network.Transfers` that move
their bytes. The per-instance logic (what a request hits, loads and writes) is
:class:`kvsim.serving.cache.InstanceCache`.
"""

from __future__ import annotations

import simpy

from kvsim.backend import Kernels
from kvsim.backend import kernels as backend_kernels
from kvsim.kv import BlockStore, KVIndex
from kvsim.kv.extent_index import ExtentIndex
from kvsim.network.storage_io import IoRequest
from kvsim.network.topology import Topology
from kvsim.network.transfers import Transfers
from kvsim.serving.cache.access import SOURCES, CacheAccess
from kvsim.serving.cache.connector import FanoutPlan, fanout_plan, io_size_bytes
from kvsim.serving.cache.domain_pool import DomainPool, DomainStore
from kvsim.serving.cache.extent_pool import ExtentDomainPool, ExtentDomainStore, ExtentHbmStore
from kvsim.serving.cache.geometry import CacheGeometry
from kvsim.serving.cache.pool_shards import by_node
from kvsim.serving.cache.remote_reads import RemoteReads
from kvsim.serving.cache.spec import KVCacheSpec
from kvsim.serving.cache.warm_rule import UnofferedShare

_INF = float("inf")

__all__ = ["CacheGeometry", "SystemCache", "TIERS", "SOURCES"]

TIERS = ("hbm", "dram", "nvme", "remote")
"""Tier names, fastest first; a store's rank is its tier's position here."""


class SystemCache:
    """The KV stores, index and network of one system (shared by its instances)."""

    def __init__(self, env: simpy.Environment, spec: KVCacheSpec, geometry: CacheGeometry,
                 transfers: Transfers, dram_bytes: dict[str, float], nvme_bytes: dict[str, float],
                 pool_names: list[str], pool_bytes: float, domain_blocks: dict[str, int] | None = None,
                 kernels: Kernels | None = None, extents: bool = False,
                 fanout: tuple[str, str] = ("per_rank", "legacy")):
        self.env = env
        self.spec = spec
        self.geometry = geometry
        # (load, write) fan-out (kvsim.serving.cache.connector.resolve_fanout); a store below HBM
        # holds every rank's copy when writes are per rank
        self.load_fanout, self.write_fanout = fanout
        stored = geometry.tp * geometry.block_bytes_per_card if self.write_fanout == "per_rank" else geometry.block_bytes
        self.stored_block_bytes = stored
        self.transfers = transfers
        self.topology: Topology = transfers.topology
        # the block stores and the index come from the run's engine backend (compiled or reference)
        kernels = kernels if kernels is not None else backend_kernels("python")
        self._block_store: type[BlockStore] = kernels.store.BlockStore
        # extents: the domains' stores, homes and this index are kept per stretch of blocks
        # (kvsim.serving.cache.extent_pool); the instances are then ExtentInstanceCaches
        self.extents = extents
        self.index: KVIndex | ExtentIndex = ExtentIndex() if extents else kernels.index.KVIndex()
        topology = self.topology
        self.rank: dict[int, int] = {}       # id(store) -> tier position
        self.endpoint: dict[int, str] = {}   # id(store) -> topology endpoint of its medium
        self.tier_of: dict[int, str] = {}
        self.node_of: dict[int, str] = {}    # id(store) -> node, for per-node tiers
        self.hbm: list[BlockStore] = []
        self.dram: dict[str, BlockStore] = {}
        self.nvme: dict[str, BlockStore] = {}
        self.remote: list[BlockStore] = []
        # write flows in flight to each lower store, and the most it may have (see write())
        self.write_limit: dict[int, int | None] = {}
        self.writing: dict[int, int] = {}
        self._io_requests: dict[tuple, IoRequest | None] = {}  # see io()
        for node, capacity in dram_bytes.items():
            self.dram[node] = self._store(f"{node}.dram", capacity, stored, spec.dram.eviction, "dram",
                                          topology.dram(node), node, spec.dram.max_write_flows)
        for node, capacity in nvme_bytes.items():
            self.nvme[node] = self._store(f"{node}.nvme", capacity, stored, spec.nvme.eviction, "nvme",
                                          topology.nvmes(node)[0], node, spec.nvme.max_write_flows)
        for pool in pool_names:
            self.remote.append(self._store(f"{pool}.media", pool_bytes, stored, spec.remote.eviction,
                                           "remote", topology.pool_media(pool), None, spec.remote.max_write_flows))
        self.has_lower = bool(self.dram or self.nvme or self.remote)  # any store below HBM
        # bytes by source / tier, counted when a transfer starts inside the measurement window
        self.bytes_loaded = dict.fromkeys(SOURCES[1:], 0.0)
        self.bytes_written = dict.fromkeys(TIERS[1:], 0.0)
        # cache writes refused for a full write queue (inside the window), and the most write flows
        # one store of the tier had in flight when a write started inside the window
        self.writes_skipped = dict.fromkeys(TIERS[1:], 0)
        self.write_bytes_skipped = dict.fromkeys(TIERS[1:], 0.0)
        self.write_flows_peak = dict.fromkeys(TIERS[1:], 0)
        self.cross_domain_bytes = 0.0  # copied from one addressing domain's HBM into another's
        self.window = (transfers.network.window_start_s, transfers.network.window_end_s)
        self.access = CacheAccess(self)
        # read in place: each addressing domain's HBM is one pool (capacity in blocks, by domain)
        self.domain_blocks = dict(domain_blocks or {})
        self.domain_pools: dict[str, DomainPool | ExtentDomainPool] = {}
        self.remote_reads = RemoteReads(self)
        # prefill chunk runs whose steps' reclaims are deferred (kvsim.serving.chunk_run): what
        # reads or changes a store or the index settles them first (settle_reclaims)
        self.pending_reclaims: list = []
        self.next_reclaim_s = _INF  # no pending reclaim falls due before this (never above the truth)
        self.reclaims_deferred = 0  # steps whose reclaim a chunk run applied when settled
        self.reclaim_stops = 0  # chunk runs stopped before a step whose reclaim could not be deferred

    def settle_reclaims(self) -> None:
        """Apply the deferred reclaims of chunk-run steps started by now (each run settled to now,
        in planning order: their stores differ and the index has no watchers, so that order is
        seen by nothing). Callers test ``pending_reclaims`` first; none due yet is a second test."""
        now = self.env.now
        if now < self.next_reclaim_s:
            return
        for run in list(self.pending_reclaims):
            run.settle(now)
        self.next_reclaim_s = min((run.next_reclaim_s() for run in self.pending_reclaims), default=_INF)

    def _store(self, name: str, capacity: float, block_bytes: float, policy: str, tier: str,
               endpoint: str, node: str | None, write_limit: int | None = None,
               whole_pins: bool = False, store_type: type | None = None) -> BlockStore:
        # (a system kept as extents keeps every store so: kvsim.serving.cache.extent_tiers)
        store_type = store_type or (ExtentHbmStore if self.extents else self._block_store)
        store = store_type(name, capacity, block_bytes, policy, whole_pins)
        self.write_limit[id(store)] = write_limit
        self.rank[id(store)] = TIERS.index(tier)
        self.endpoint[id(store)] = endpoint
        self.tier_of[id(store)] = tier
        if node is not None:
            self.node_of[id(store)] = node
        return store

    def add_instance_hbm(self, instance: int, node: str, capacity_blocks: int) -> BlockStore:
        """The HBM store of instance ``instance`` (on compute node ``node``), ``capacity_blocks`` blocks."""
        # (its write-downs pin runs the writing sequence reads: kept whole, see BlockStore.pin_each;
        # kept as extents where kvsim.sim.build.kv_extents says so)
        store = self._store(f"instance{instance}.hbm", capacity_blocks * self.geometry.block_bytes,
                            self.geometry.block_bytes, self.spec.hbm_eviction, "hbm", "", node, whole_pins=True)
        self.hbm.append(store)
        self.access.stores_changed()
        return store

    def domain_pool(self, domain: str) -> DomainPool | ExtentDomainPool:
        """The shared HBM pool of addressing domain ``domain`` (``peer_hbm: read_in_place``)."""
        pool = self.domain_pools.get(domain)
        if pool is None:
            g = self.geometry
            capacity = self.domain_blocks[domain] * g.block_bytes
            store: DomainStore | ExtentDomainStore
            if self.extents:
                store = ExtentDomainStore(f"{domain}.hbm", capacity, g.block_bytes, self.spec.hbm_eviction)
                pool = store.pool = ExtentDomainPool(domain, self, store)
            else:
                store = DomainStore(f"{domain}.hbm", capacity, g.block_bytes, self.spec.hbm_eviction, None)
                pool = store.pool = DomainPool(domain, self, store)
            self.rank[id(store)] = TIERS.index("hbm")
            self.endpoint[id(store)] = ""
            self.tier_of[id(store)] = "hbm"
            self.hbm.append(store)
            self.access.stores_changed()
            self.domain_pools[domain] = pool
        return pool

    def io(self, store: BlockStore, write: bool, node: str, unit_bytes: float,
           source: BlockStore | None = None) -> IoRequest | None:
        """The storage access of a transfer to (``write``) or from ``store`` (None if the store is
        not storage: HBM or host DRAM).

        ``unit_bytes`` is one block's bytes in each flow: the I/O size is ``io_size`` if set, else
        the connector's for that many bytes a block (:func:`~kvsim.serving.cache.connector.io_size_bytes`),
        else ``unit_bytes``. A card's transfer is staged by the CPU of ``node`` unless GPU-Direct;
        a transfer from another ``source`` store (write-back between tiers) is always the host's.
        """
        # one request per distinct access, made once: it depends on these arguments alone (an
        # immutable value; the stores live as long as the system, so their ids name them)
        key = (id(store), write, node, unit_bytes, None if source is None else id(source))
        try:
            return self._io_requests[key]
        except KeyError:
            pass
        endpoint = self.endpoint[id(store)]
        request = None
        if self.transfers.storage.is_storage(endpoint):
            size = self.spec.io_size
            if size is None:
                connector = self.spec.connector
                g = self.geometry
                size = (unit_bytes if connector is None
                        else io_size_bytes(connector, unit_bytes, g.block_tokens, g.num_layers))
            if source is not None:
                request = IoRequest(self.endpoint[id(source)], endpoint, size, node)
            else:
                host = None if self.spec.gpu_direct else node
                request = IoRequest(None, endpoint, size, host) if write else IoRequest(endpoint, None, size, host)
        self._io_requests[key] = request
        return request

    def load_plan(self, geometry: CacheGeometry) -> FanoutPlan:
        """The cards (by rank) that read a load from below HBM, and the hops handing it on."""
        once = self.load_fanout == "once_per_node" and geometry.groupable
        return fanout_plan(geometry.tp, geometry.shards, "once_per_node" if once else "per_rank", load=True)

    def write_plan(self, geometry: CacheGeometry) -> tuple[tuple[int, ...], float]:
        """The cards (by rank) that write a block down, and the bytes each writes per block.

        ``legacy``: every card ``1/tp`` of the distinct bytes; ``per_rank``: every card its own
        copy; ``once_per_node``: one card per distinct shard, its copy.
        """
        g = geometry
        if self.write_fanout == "legacy":
            return tuple(range(g.tp)), g.block_bytes / g.tp
        once = self.write_fanout == "once_per_node" and g.groupable
        plan = fanout_plan(g.tp, g.shards, "once_per_node" if once else "per_rank", load=False)
        return plan.readers, g.block_bytes_per_card

    def count(self, table: dict[str, float], tier: str, nbytes: float) -> None:
        """Add ``nbytes`` to ``table[tier]`` if now is inside the measurement window."""
        if self.window[0] <= self.env.now <= self.window[1]:
            table[tier] += nbytes

    def count_cross_domain(self, nbytes: float) -> None:
        """Add ``nbytes`` copied across an addressing-domain boundary (inside the window)."""
        if self.window[0] <= self.env.now <= self.window[1]:
            self.cross_domain_bytes += nbytes

    def write(self, store: BlockStore, paths: list, nbytes_each: float, nbytes: float,
              io: IoRequest | None) -> simpy.Event | None:
        """Start a cache write into lower store ``store``: one flow of ``nbytes_each`` bytes per
        path (``nbytes`` in all), unless the store's write queue is full.

        Each store takes at most ``max_write_flows`` write flows at a time (its tier's setting,
        see :class:`~kvsim.serving.cache.spec.TierSpec`); a write that would go over is skipped:
        no bytes move, and the caller must not file the blocks (they stay where they already
        are, so nothing ever reads a copy that was not written). It is counted in
        :attr:`writes_skipped` and :attr:`write_bytes_skipped`. A write is always taken when
        the store has none in flight, so one wider than the limit (more cards than it) goes
        alone. Only cache copies come here: a swap (:mod:`~kvsim.serving.cache.swapper`) must
        land and is never skipped.

        Returns
        -------
        simpy.Event or None
            Fires when the copy has landed (the caller then files the blocks); None if skipped.
        """
        key = id(store)
        flows = len(paths)
        busy = self.writing.get(key, 0)
        limit = self.write_limit[key]
        tier = self.tier_of[key]
        in_window = self.window[0] <= self.env.now <= self.window[1]
        if busy and limit is not None and busy + flows > limit:
            if in_window:
                self.writes_skipped[tier] += 1
                self.write_bytes_skipped[tier] += nbytes
            return None
        busy += flows
        self.writing[key] = busy
        if in_window:
            self.bytes_written[tier] += nbytes
            if busy > self.write_flows_peak[tier]:
                self.write_flows_peak[tier] = busy
        done = self.transfers.move(paths, nbytes_each, "cache_write", io)

        def landed(_event):
            self.writing[key] -= flows

        done.callbacks.append(landed)
        return done

    def remote_store(self, block: int) -> BlockStore:
        """The pool node a block lives on (spread by id, as a distributed KV store shards)."""
        return self.remote[hash(block) % len(self.remote)]

    def lower_stores(self, node: str, block: int) -> list[BlockStore]:
        """The stores below HBM that an instance on ``node`` writes a block to, fastest first."""
        stores = self._node_stores(node)
        if self.remote:
            stores.append(self.remote_store(block))
        return stores

    def _node_stores(self, node: str) -> list[BlockStore]:
        """``node``'s own tiers below HBM (a new list), fastest first."""
        stores = []
        if node in self.dram:
            stores.append(self.dram[node])
        if node in self.nvme:
            stores.append(self.nvme[node])
        return stores

    def touch_below(self, node: str, blocks: list, loads: list) -> None:
        """A prompt's lookup found ``blocks`` (its cached prefix, in order): each copy of them
        that a store below HBM reachable from ``node`` holds is touched there (a use its policy
        sees, no hit counted: :meth:`~kvsim.kv.runs.RunOps.touch_run`), except the blocks the
        admission loads from that store (``loads``: ``(block, store, id there)`` as the loader
        lists them), which the load itself looks up.

        Why: the connectors that keep these tiers look up the whole prompt in them at every
        admission, and that lookup refreshes recency, whether or not HBM already holds the
        blocks -- vLLM's OffloadingConnector touches every block of the request before it
        looks for hits beyond the GPU's (``manager.touch(block_hashes)`` in
        ``get_num_new_matched_tokens``; ``LRUOffloadingManager.touch`` moves each block to the
        most recent end), LMCache's local CPU backend records each chunk its lookup finds and
        moves it in its policy's order (``contains(key, pin=True)``, then ``touch_cache`` ->
        ``update_on_hit``). A tier that saw only the loads would see only HBM's misses: the
        documents HBM serves would age out below it behind every request's unique suffix
        blocks, and miss everywhere once HBM drops them (docs/cache_tiers.md).
        """
        skip: dict[int, set] = {}
        for _block, store, source_id in loads:
            if self.rank[id(store)]:  # (a lower store: HBM copies are no concern here)
                skip.setdefault(id(store), set()).add(source_id)
        for store in self._node_stores(node):
            self._touch(store, blocks, skip)
        # (each block lives on its own pool node: remote_store, asked of the whole run)
        for store, group in by_node(self.remote, blocks):
            self._touch(store, group, skip)

    @staticmethod
    def _touch(store: BlockStore, blocks: list, skip: dict[int, set]) -> None:
        """:meth:`touch_below` for one store: ``blocks`` but those ``skip`` lists for it."""
        loaded = skip.get(id(store))
        store.touch_run([block for block in blocks if block not in loaded] if loaded else blocks)

    def missing_below(self, node: str, blocks: list, first_only: bool = False) -> list[tuple[BlockStore, list]]:
        """Which of :meth:`lower_stores` lack which of ``blocks`` (with ``first_only``, only the
        first of each block's lower stores is asked: the next tier down).

        Returns
        -------
        list of (BlockStore, list)
            Each store lacking some of the blocks, with those blocks in order; the stores in the
            order a walk of the blocks, and of each block's stores in turn, first meets them
            (the order the writes start in). A node's own tiers are the same for every block
            and are asked once for the whole run; the remote pool node is each block's own.
        """
        local = self._node_stores(node)
        if first_only and local:
            local, remote = local[:1], False
        else:
            remote = bool(self.remote)
        found = []  # (position of the first block it lacks, place among a block's stores, store, blocks)
        for place, store in enumerate(local):
            group = store.missing(blocks)
            if group:
                found.append((blocks.index(group[0]), place, store, group))
        if remote:
            place = len(local)
            for store, shard in by_node(self.remote, blocks):
                group = store.missing(shard)
                if group:
                    found.append((blocks.index(group[0]), place, store, group))
        found.sort(key=lambda entry: (entry[0], entry[1]))  # (distinct: one remote node per block)
        return [(store, group) for _, _, store, group in found]

    def file(self, store: BlockStore, blocks: list) -> None:
        """Insert ``blocks`` into ``store``; under write-back, what it evicts moves a tier down."""
        if self.pending_reclaims:
            self.settle_reclaims()
        index = self.index
        done, _, out = index.insert_run(store, blocks)
        evicted = [victim for _, victim in out]
        for block in blocks[done + 1:]:  # refused one (full of held blocks): the rest block by block
            out = index.insert(store, block)
            if out:
                evicted.extend(out)
        if evicted and self.spec.write_policy == "write_back":
            self.cascade(store, evicted)

    def cascade(self, store: BlockStore, blocks: list) -> None:
        """Write-back: blocks evicted from a lower tier go to the next tier below that lacks them.

        Under write-through every lower tier already received its copy at prefill time, so
        there is nothing to move. One flow per destination, from medium to medium.
        """
        node = self.node_of.get(id(store))
        if node is None:
            return  # the remote pool is the bottom
        below: dict[int, tuple[BlockStore, list]] = {}
        for block in blocks:
            stores = self.lower_stores(node, block)
            after = stores[stores.index(store) + 1:] if store in stores else []
            if after and block not in after[0]:  # only the next tier down; it cascades in turn
                below.setdefault(id(after[0]), (after[0], []))[1].append(block)
        for target, group in below.values():
            links = self.topology.path(self.endpoint[id(store)], self.endpoint[id(target)])
            io = self.io(target, True, node, self.stored_block_bytes, source=store)
            nbytes = len(group) * self.stored_block_bytes
            done = self.write(target, [links], nbytes, nbytes, io)
            if done is not None:
                done.callbacks.append(lambda _event, target=target, group=group: self.file(target, group))

    def _warm(self, store: BlockStore, blocks: list) -> int:
        """Insert ``blocks`` into ``store`` in order, as :meth:`prewarm` does block by block (a
        refused block skipped, the rest tried); returns how many were not in the store at their
        turn."""
        offered, pos, index = 0, 0, self.index
        while pos < len(blocks):
            done, new_at, _ = index.insert_run(store, blocks[pos:] if pos else blocks)
            offered += len(new_at)
            pos += done
            if pos < len(blocks):  # refused (not stored): it counts, the rest are tried
                offered += 1
                pos += 1
        return offered

    def prewarm(self, prompts, max_blocks_per_store: float = 2.0, batch: int = 1000,
                settle: float = 0.005, max_prompts: int = 200_000, confidence: float = 0.95) -> int:
        """Fill every lower tier with the full blocks of ``prompts`` (hash arrays), in order.

        Stops when the tiers are warm, at the first of:

        - every lower store has newly stored ``max_blocks_per_store`` times its capacity: it has
          filled and turned over, and what it holds is what its policy keeps;
        - at a check every ``batch`` prompts, the share of future prompts whose shared content
          (a document, the shared prefix) no prompt has offered yet is below ``settle`` at
          ``confidence`` (:class:`~kvsim.serving.cache.warm_rule.UnofferedShare`: Good's
          estimate of the missing mass, with a Poisson upper bound). A store with room keeps all
          it was offered, so this is the hit rate, in prompts, a longer prewarm could still add;
        - ``max_prompts`` prompts (a cap on work: a workload whose content never repeats and
          stores that never fill would otherwise run for ever).

        The second replaces a test that the share of blocks already present changed by less than
        ``settle`` between successive batches, which many nearly equally popular documents pass
        by chance while the tiers are still filling (the share rises by less per batch than it
        jitters): 16,000 documents stopped at 12,000 prompts with about half of them stored.
        Returns the prompts used.

        A block a store holds already is touched, as a lookup of it in a long-running cache
        would, and turns nothing over, so it does not count towards the store's turnover:
        counted, a repeated document drained the budget of a store far larger than the
        documents after a fraction of them had been drawn (offload_gap at 8K: a 512 GiB DRAM
        tier stopped after 1,395 prompts half full, holding 306 of the 400 documents, while
        the pool beside it, whose budget never binds, went on to 6,000 prompts and 395).
        """
        locals_ = list(self.dram.values()) + list(self.nvme.values())
        stores = locals_ + self.remote
        if not stores:
            return 0
        budget = {id(s): max_blocks_per_store * s.capacity_blocks for s in stores}
        unoffered = UnofferedShare(confidence)
        used = 0
        for hashes in prompts:
            used += 1
            unoffered.offer(hashes)
            # each store's blocks in order, store after store (a store's own calls, and the order
            # in which a block's stores acquire it, are the per-block loop's: the same stores and
            # the same index; nothing reads them in between)
            blocks = hashes.tolist() if hasattr(hashes, "tolist") else list(hashes)
            for store in locals_:
                budget[id(store)] -= self._warm(store, blocks)
            for store, group in by_node(self.remote, blocks):
                budget[id(store)] -= self._warm(store, group)
            if all(b <= 0 for b in budget.values()) or used >= max_prompts:
                break
            if used % batch == 0 and unoffered.upper_bound() < settle:
                break
        return used
