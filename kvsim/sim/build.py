"""Build one live :class:`System` from a sized system spec, and check its wiring before it runs.

The builder is the only reader of specs at run time. It lays out the nodes (pool by pool, in
order), builds the topology and the flow network (always: a disaggregated system moves every
prompt's KV, and a cache moves blocks), the KV tiers when the system caches, the instances with
their pools, hooks and routers, the prefill -> decode handoff when the system is disaggregated,
and the request front end. Everything is wired once, here; :meth:`System.check` then verifies
the wiring as desmod's elaboration does, so a broken system is refused before any event runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter

import simpy

from kvsim.backend import Kernels, resolve
from kvsim.backend import kernels as backend_kernels
from kvsim.kv import BlockPool
from kvsim.metrics.domain_summary import DomainLevels
from kvsim.metrics.levels import TimeWeightedLevel
from kvsim.metrics.records import RequestRecords
from kvsim.models.attention_span import held_kv_bytes
from kvsim.models.lora import adapter_bytes
from kvsim.models.step_time import BatchShape
from kvsim.network import FlowNetwork, StorageIO, Topology, Transfers, build_topology, network_capacities
from kvsim.network.tiers import card_tiers
from kvsim.rng import RandomStreams
from kvsim.scenario.schema import ScenarioSpec
from kvsim.serving.adapters import AdapterSlots
from kvsim.serving.cache import SOURCES, TIERS, CacheGeometry, InstanceCache, SystemCache
from kvsim.serving.cache.access import addressing_domain
from kvsim.serving.cache.connector import resolve_fanout
from kvsim.serving.cache.extent_cache import ExtentInstanceCache
from kvsim.serving.cache.extent_tiers import ExtentSystemCache
from kvsim.serving.controller import RoleController
from kvsim.serving.handoff import HandoffReceiver, KVHandoff
from kvsim.serving.instance import Instance
from kvsim.serving.load_board import LoadBoard
from kvsim.serving.migration import KVMigration
from kvsim.serving.router import make_router
from kvsim.serving.scheduler import Sequence
from kvsim.serving.specs import StaticController
from kvsim.serving.weight_flows import streamed_step_model
from kvsim.sim.failures import RunFailures, attach_failures
from kvsim.sim.frontend import FrontEnd
from kvsim.sim.prewarm import warm_prompts
from kvsim.sim.sizing import PoolSizing, SystemSizing, adapter_slots
from kvsim.workload.reuse import SharedDocuments

__all__ = ["System", "Placement", "WiringError", "build_system"]

_physical = attrgetter("physical_bytes")
_logical = attrgetter("logical_bytes")


class WiringError(RuntimeError):
    """The built system is not wired completely (a bug in the builder, not bad input)."""


@dataclass(frozen=True)
class Placement:
    """Where one instance runs: its pool, its node, its cards' topology endpoints, and the role it
    starts in."""

    pool: PoolSizing
    node: str
    gpus: tuple[str, ...]
    role: str


class System:
    """One system at one sweep point, live: instances, routers, stores, topology and network.

    Attributes
    ----------
    env : simpy.Environment
    name : str
    sizing : SystemSizing
    topology : Topology
    network : FlowNetwork
    transfers : Transfers
        The one way bytes move.
    cache : SystemCache or None
        The KV tiers, when the system caches prefixes.
    instances : list of Instance
        Every instance, pool by pool.
    placements : list of Placement
        Where each instance runs (same order).
    handoff : KVHandoff or None
        Prefill -> decode KV handoff, when disaggregated.
    front : FrontEnd
        Where requests enter and leave.
    records, counters, in_system
        What the run measures.
    block_tokens : int
        Tokens per prefix-hash block of the workload (a cache block).
    """

    def __init__(self, env: simpy.Environment, name: str, sizing: SystemSizing, window_start_s: float,
                 window_end_s: float, records: RequestRecords, kernels: Kernels | None = None):
        self.env = env
        self.name = name
        self.sizing = sizing
        self.window = (window_start_s, window_end_s)
        self.records = records
        self.kernels = kernels if kernels is not None else backend_kernels("python")  # the engine backend's
        self.counters = self.kernels.engine_time.SystemCounters(window_start_s, window_end_s)
        self.in_system = self.kernels.levels.TimeWeightedLevel(window_start_s, window_end_s)
        self.cache: SystemCache | None = None
        self.instances: list[Instance] = []
        self.board: LoadBoard = self.kernels.load_board.LoadBoard()  # the instances by role, the least loaded of each
        self.placements: list[Placement] = []
        self.handoff: KVHandoff | None = None
        self.controller: RoleController | None = None
        self.hooks: dict[tuple[int, str], object] = {}  # (instance, role) -> its hook in that role
        self.tier_occupancy: dict[str, TimeWeightedLevel] = {}
        self.domain_levels: DomainLevels | None = None  # HBM bytes per addressing domain (with a cache)
        self.timeseries: list[dict] = []
        self.failures: RunFailures | None = None  # node failures in the run (systems.NAME.failures)
        self.block_tokens = 0
        self.documents = False  # its prompts are shared_documents ones (a document's chain, then their own)
        self.topology: Topology
        self.network: FlowNetwork
        self.transfers: Transfers
        self.front: FrontEnd

    def role_instances(self, role: str) -> list[Instance]:
        """The instances serving in ``role`` now (not those switching), in index order: the
        board's list, the same object until an instance joins or leaves the role (not to be
        modified)."""
        return self.board.members(role)

    @property
    def entry_role(self) -> str:
        return "prefill" if self.sizing.disaggregated else "mixed"

    def check(self) -> None:
        """Verify the wiring; raise :class:`WiringError` listing every gap."""
        problems = []
        if not self.role_instances(self.entry_role):
            problems.append(f"no {self.entry_role} instance takes requests")
        if self.sizing.disaggregated and not self.role_instances("decode"):
            problems.append("no decode instance to hand prompts to")
        for inst, place in zip(self.instances, self.placements):
            label = f"instance {inst.index} ({place.pool.name})"
            for gpu in place.gpus:
                if gpu not in self.topology.graph:
                    problems.append(f"{label}: card {gpu} is not in the topology")
            hook = inst.hook
            if inst.role == "decode" and not isinstance(hook, HandoffReceiver):
                problems.append(f"{label}: a decode instance needs the handoff receiver")
            if isinstance(hook, HandoffReceiver) and hook.instance is not inst:
                problems.append(f"{label}: its handoff receiver is not attached to it")
            if hook is not self.hooks.get((inst.index, inst.role)):
                problems.append(f"{label}: its hook is not the one built for the {inst.role} role")
            if isinstance(hook, InstanceCache) and (hook.scheduler is not inst.scheduler or hook.pool is not inst.pool):
                problems.append(f"{label}: its cache is not attached to its scheduler and pool")
            if inst.role == "prefill" and inst.on_prefilled != self.handoff.prefilled:
                problems.append(f"{label}: prefilled prompts go nowhere")
            if inst.on_finish != self.front.finished:
                problems.append(f"{label}: finished requests do not reach the front end")
        if self.handoff is not None and self.front.abort_handoff != self.handoff.abort:
            problems.append("a request whose client gives up cannot leave its handoff")
        if self.sizing.disaggregated and not problems:
            for p in self.role_instances("prefill"):
                for d in self.role_instances("decode"):
                    try:
                        self.topology.peer_path(p.gpus[0], d.gpus[0], self.handoff.spec.gpu_direct)
                    except (ValueError, KeyError) as exc:
                        problems.append(f"no handoff path from instance {p.index} to {d.index}: {exc}")
        if problems:
            raise WiringError(f"system {self.name!r} is not wired: " + "; ".join(problems))

    def start_sampling(self, every_s: float, until_s: float) -> None:
        """Sample tier occupancy over time (bytes held per tier) while the run lasts."""
        if self.cache is None:
            return
        self.tier_occupancy = {tier: self.kernels.levels.TimeWeightedLevel(*self.window) for tier in TIERS}
        self.domain_levels = DomainLevels(*self.window, self._domains())
        self.env.process(self._sample_tiers(every_s, until_s))

    def _domains(self) -> dict[str, tuple[list, list]]:
        """Each addressing domain's page pools and HBM block stores (see DomainLevels)."""
        caches = {index: hook for (index, _role), hook in self.hooks.items() if isinstance(hook, InstanceCache)}
        domains: dict[str, tuple[list, list]] = {}
        seen: set[int] = set()
        for inst, place in zip(self.instances, self.placements):
            pool = place.pool
            pools, stores = domains.setdefault(addressing_domain(self.topology, list(place.gpus), inst.index),
                                               ([], []))
            pools.append((inst.pool, pool.kv_bytes_per_token_per_card * pool.layout.cards
                          * pool.spec.instance.block_size_tokens))
            cache = caches.get(inst.index)
            if cache is not None and id(cache.hbm) not in seen:  # a shared domain store counts once
                seen.add(id(cache.hbm))
                stores.append((cache.hbm, cache.geometry.block_bytes_per_card * cache.geometry.tp))
        return domains

    def _sample_tiers(self, every_s: float, until_s: float):
        cache = self.cache
        stores = {"hbm": cache.hbm, "dram": list(cache.dram.values()), "nvme": list(cache.nvme.values()),
                  "remote": cache.remote}
        while self.env.now <= until_s:
            if cache.pending_reclaims:  # (a chunk run's deferred reclaims: the stores as they are now)
                cache.settle_reclaims()
            row = {"time_s": self.env.now}
            for tier, group in stores.items():
                # (sum over map, not a generator: the same terms summed in the same order)
                held = float(sum(map(_physical, group)))
                self.tier_occupancy[tier].set(self.env.now, held)
                row[f"{tier}_bytes"] = held
                # what readers see: one block's bytes per reader (sharing makes it exceed physical)
                row[f"{tier}_logical_bytes"] = float(sum(map(_logical, group)))
            self.domain_levels.sample(self.env.now)
            if self.failures is not None:
                row["instances_up"] = self.failures.instances_up
            self.timeseries.append(row)
            yield self.env.timeout(every_s)


def node_names(sizing: SystemSizing) -> list[tuple[PoolSizing, str]]:
    """Every compute node of the system with its pool: ``node{k}`` for a single pool, else
    ``{pool}.node{k}``."""
    single = len(sizing.pools) == 1
    return [(pool, f"node{k}" if single else f"{pool.name}.node{k}")
            for pool in sizing.pools for k in range(pool.spec.nodes)]


def _placements(sizing: SystemSizing) -> list[Placement]:
    """Instances fill their pool's nodes in order, ``tp x pp`` consecutive cards each (stage by
    stage); an instance larger than a node takes whole nodes, and its ``node`` is the first."""
    names = node_names(sizing)
    out = []
    for pool in sizing.pools:
        nodes = [name for p, name in names if p is pool]
        per_node = pool.node.accelerators_per_node
        cards = pool.layout.cards
        for i, role in enumerate(pool.initial_roles):
            first = i * cards
            gpus = tuple(f"{nodes[(first + c) // per_node]}/gpu{(first + c) % per_node}" for c in range(cards))
            out.append(Placement(pool, nodes[first // per_node], gpus, role))
    return out


def _scale_up_domains(sizing: SystemSizing) -> list[list[str]]:
    """Each node whose cards have a scale-up link is its own domain, unless the system groups
    ``scale_up_domain_nodes`` (or its top tier's ``scale_up`` nodes) consecutive nodes into one."""
    per = sizing.spec.domain_nodes
    linked = [name for pool, name in node_names(sizing) if pool.accelerator.scale_up_bandwidth is not None]
    return [linked[k:k + per] for k in range(0, len(linked), per)]


def build_system(env: simpy.Environment, spec: ScenarioSpec, sizing: SystemSizing, records: RequestRecords,
                 streams: RandomStreams, block_tokens: int) -> System:
    """Build and check the live system ``sizing`` describes, at the scenario point ``spec``.

    Parameters
    ----------
    env : simpy.Environment
    spec : ScenarioSpec
        The scenario at this sweep point (window, workload for a cache prewarm).
    sizing : SystemSizing
    records : RequestRecords
        Where the run's requests are recorded.
    streams : RandomStreams
        The point's random streams (a prewarm draws from ``prewarm.*``).
    block_tokens : int
        The prompts' hash block size (the cache's block).
    """
    warmup, duration = spec.warmup, spec.duration
    system = System(env, sizing.name, sizing, warmup, duration, records,
                    backend_kernels(resolve(spec.system_engine(sizing.name).backend)))
    system.block_tokens = block_tokens
    system.documents = isinstance(spec.workload.prefix, SharedDocuments) and not spec.workload.trace
    system_spec = sizing.spec
    pool_nodes = []
    cache_spec = system_spec.kv_cache
    if cache_spec is not None and cache_spec.remote is not None:
        pool_nodes = [(f"pool{k}", sizing.pool_node) for k in range(cache_spec.remote.nodes)]
    system.topology = build_topology([(name, pool.node, pool.accelerator) for pool, name in node_names(sizing)],
                                     pool_nodes, _scale_up_domains(sizing), system_spec.scale_up)
    connector = cache_spec.connector if cache_spec is not None else None
    storage = StorageIO(system.topology, connector.host_path() if connector is not None else None)
    system.network = system.kernels.flows.FlowNetwork(env, network_capacities(system.topology, storage), warmup,
                                                      duration)
    system.transfers = Transfers(env, system.topology, system.network, storage)
    system.placements = _placements(sizing)
    control = system_spec.controller
    if sizing.disaggregated and control is None:
        control = StaticController()
    # instances that compute prompts cache them, and so do those a controller may move to prefill
    caching = [p.role != "decode" or system_spec.may_switch(p.pool.spec) for p in system.placements]
    if cache_spec is not None:
        system.cache = _build_cache(env, spec, system, sizing, [(i, p) for i, (p, c) in enumerate(
            zip(system.placements, caching)) if c], block_tokens)
    if sizing.disaggregated:
        system.handoff = KVHandoff(
            env, system_spec.kv_handoff, system.transfers, records,
            make_router(system_spec.decode_router, board=system.board, rng=streams.generator("router.random.decode")),
            lambda: system.role_instances("decode"),
            lambda inst, tokens: _held_kv_bytes_per_card(system.placements[inst.index].pool, tokens),
            sizing.model.num_layers)
    handoff = system.handoff
    entry = system.entry_role
    # before the prewarm: a cache-aware router with a delayed view follows the index from its start
    router = make_router(system_spec.prefill_router if entry == "prefill" else system_spec.router, system.cache,
                         system_spec.cache_aware, lambda: env.now, system.board, streams.generator("router.random"))
    if cache_spec is not None and cache_spec.prewarm:
        system.cache.prewarm(warm_prompts(spec.workload, duration, streams, block_tokens))
    system.front = system.kernels.frontend.FrontEnd(
        env, records, system.in_system, router, system.board, entry, with_hashes=cache_spec is not None,
        engine=spec.system_engine(sizing.name), timeout_s=spec.workload.timeout,
        holder=lambda index: system.instances[index], abort_handoff=handoff.abort if handoff is not None else None,
        lora_sharing=system_spec.lora.kv_sharing if system_spec.lora is not None else "none",
        block_tokens=block_tokens,
        adapter_count=spec.workload.adapters.count if spec.workload.adapters is not None else 0,
        sequence_type=system.kernels.sequence.Sequence)
    for index, place in enumerate(system.placements):
        pool = place.pool
        inst_spec = pool.spec.instance
        span = pool.model.attention_span()
        pages = system.kernels.block_pool.BlockPool(pool.kv_blocks_per_instance, inst_spec.block_size_tokens,
                          resident=span.context if span is not None else None)
        cache_role = "prefill" if handoff is not None else "mixed"  # the role that computes prompts
        if system.cache is not None and caching[index]:
            system.hooks[(index, cache_role)] = _instance_cache(system, index, place, pages, block_tokens)
        if handoff is not None:
            system.hooks[(index, "decode")] = HandoffReceiver(handoff)
        cache_hook = system.hooks.get((index, cache_role))
        hook = system.hooks.get((index, place.role))
        # early exit draws each decode step's depth, and a stream through the flow network starts flows each
        # step (kvsim.serving.weight_flows), so their steps run one by one (no coalesced runs)
        exits = pool.engine.early_exit is not None
        exit_rng = streams.generator(f"engine.early_exit.{index}") if exits else None
        instance = system.kernels.instance.Instance(
            # vLLM's limits are per data-parallel attention rank (InstanceSpec's notes): the
            # instance's scheduler holds every rank's, one sequence's chunk one rank's budget
            env, index, place.role, streamed_step_model(system, place, pool.step_model(system.kernels, exit_rng)), pages,
            inst_spec.instance_max_batched_tokens, inst_spec.instance_max_num_seqs,
            records, system.counters, warmup, duration, hook, on_finish=system.front.finished,
            on_prefilled=handoff.prefilled if handoff is not None else _no_handoff,
            on_final_chunk=handoff.final_chunk if handoff is not None and place.role == "prefill" else None,
            gpus=list(place.gpus), output_s=pool.engine.output_s, span=span,
            async_scheduling=pool.engine.async_scheduling, adapters=_adapter_slots(spec, system_spec, pool),
            coalesce=pool.engine.coalesce and not exits and not pool.contends, max_chunk_tokens=inst_spec.max_batched_tokens,
            jitter=pool.engine.step_variance.jitter(streams, index), kernels=system.kernels)
        if cache_hook is not None:
            cache_hook.attach(instance.scheduler, instance.wake)
        if handoff is not None:
            system.hooks[(index, "decode")].attach(instance)
        system.instances.append(instance)
        system.board.add(instance)
    if sizing.disaggregated:
        slo = {"ttft_s": spec.slo.ttft_p99, "tpot_s": spec.slo.tpot_p99}
        migration = None
        if getattr(control, "on_switch", "drain") == "migrate":
            records.track_migrations()
            migration = KVMigration(env, system.transfers, records, lambda: system.role_instances("decode"),
                                    handoff.kv_bytes_per_card, system_spec.kv_handoff.gpu_direct)
        system.controller = RoleController(env, control, system.instances,
                                           lambda inst, role: system.hooks.get((inst.index, role)), handoff,
                                           system.front.route, records, slo,
                                           [(p.pool.name, p.pool.spec) for p in system.placements], migration)
    system.check()
    system.failures = attach_failures(system, system_spec.failures, streams)
    return system


def _adapter_slots(spec: ScenarioSpec, system_spec, pool: PoolSizing) -> AdapterSlots | None:
    """An instance's LoRA slots, when the workload names adapters: one adapter's bytes per card
    copied over the card's host link at the achieved rate (``efficiency.host_copy``)."""
    adapters = spec.workload.adapters
    if adapters is None:
        return None
    acc, layout = pool.accelerator, pool.layout
    per_card = adapter_bytes(pool.model, adapters.rank, adapters.targets, adapters.dtype) / (layout.tp * layout.pp)
    load_s = per_card / (acc.host_link_bandwidth * acc.efficiency.host_copy)
    return AdapterSlots(adapter_slots(spec, system_spec), load_s)


def _held_kv_bytes_per_card(pool: PoolSizing, tokens: int) -> float:
    """KV bytes a prompt of ``tokens`` holds on each card of an instance of ``pool`` (what a P->D
    handoff moves per card): sliding-window layers hold only their window."""
    return held_kv_bytes(tokens, pool.kv_bytes_per_token_per_card, pool.model.attention_span())


def _no_handoff(instance: Instance, seq: Sequence, now: float) -> None:
    raise RuntimeError(f"instance {instance.index} prefilled request {seq.rid} but the system has no handoff")


def _build_cache(env: simpy.Environment, scenario: ScenarioSpec, system: System, sizing: SystemSizing,
                 indexed: list[tuple[int, Placement]], block_tokens: int) -> SystemCache:
    spec = sizing.spec.kv_cache
    caching = [p for _, p in indexed]
    first = caching[0].pool
    geometry = _geometry(sizing, first, block_tokens)
    domain_blocks: dict[str, int] = {}
    if spec.peer_hbm == "read_in_place":  # each domain's HBM cache is one pool of its instances' pages
        for index, place in indexed:
            domain = addressing_domain(system.topology, list(place.gpus), index)
            blocks = place.pool.kv_blocks_per_instance // geometry.pages_per_block
            domain_blocks[domain] = domain_blocks.get(domain, 0) + blocks
    nodes = list(dict.fromkeys(p.node for p in caching))
    node_spec = {p.node: p.pool.node for p in caching}
    dram = {n: spec.dram.capacity for n in nodes} if spec.dram is not None else {}
    nvme = {}
    if spec.nvme is not None:
        nvme = {n: spec.nvme.capacity or node_spec[n].nvme.count * node_spec[n].nvme.capacity_bytes for n in nodes}
    pools = [f"pool{k}" for k in range(spec.remote.nodes)] if spec.remote is not None else []
    pool_bytes = sizing.pool_kv_bytes_per_node  # (less any offloaded weights kept there)
    replicated = geometry.tp * geometry.block_bytes_per_card > geometry.block_bytes * (1.0 + 1e-9)
    fanout = resolve_fanout(spec.fanout, spec.connector, sizing.model.mla is not None, replicated)
    if kv_extents(scenario, sizing):
        return ExtentSystemCache(env, spec, geometry, system.transfers, dram, nvme, pools, pool_bytes, domain_blocks,
                                 kernels=system.kernels, fanout=fanout)
    return SystemCache(env, spec, geometry, system.transfers, dram, nvme, pools, pool_bytes, domain_blocks,
                       kernels=system.kernels, fanout=fanout)


KV_EXTENTS = True
"""Keep the caches of the systems :func:`kv_extents` accepts as extents (False: every system per
block, the reference the tests hold the extents to)."""


def kv_extents(spec: ScenarioSpec, sizing: SystemSizing) -> bool:
    """Whether the system's cache is kept as extents (:mod:`kvsim.serving.cache.extent_cache`):
    every prompt's blocks have addresses -- a ``shared_documents`` workload, whose prompts are a
    document's chain and a chain of their own (:mod:`kvsim.serving.cache.segments`) -- and the
    cache is what the extents keep: HBM under LRU, either each instance's own (``peer_hbm:
    none``) or each addressing domain's shared in place (``peer_hbm: read_in_place``,
    :mod:`kvsim.serving.cache.extent_pool`), no LoRA adapter (whose ids are renamed per
    adapter) and no P/D handoff; tiers below HBM (and their prewarm) only under each instance's
    own HBM, LRU, written through, with at most one pool node and a router other than
    ``cache_aware`` (:mod:`kvsim.serving.cache.extent_tiers`), and no node failures. The records
    are the same either way; only the cost differs."""
    cache = sizing.spec.kv_cache
    workload = spec.workload
    if not (KV_EXTENTS and cache is not None and cache.peer_hbm in ("none", "read_in_place")
            and cache.hbm_eviction == "lru"
            and not sizing.disaggregated and workload.adapters is None and sizing.spec.lora is None
            and isinstance(workload.prefix, SharedDocuments) and not workload.trace):
        return False
    lower = [tier for tier in (cache.dram, cache.nvme, cache.remote) if tier is not None]
    if lower and sizing.spec.failures is not None:
        return False  # node failures drop a node's tiers block by block (kvsim.sim.failures)
    # tiers below HBM (kvsim.serving.cache.extent_tiers): under each instance's own HBM, LRU,
    # written through, the pool on one node (several spread blocks by id), and a router that does
    # not walk them (the cache-aware router's reach reads the lower tiers per block)
    return not lower or (cache.peer_hbm == "none" and all(tier.eviction == "lru" for tier in lower)
                         and cache.write_policy == "write_through"
                         and (cache.remote is None or cache.remote.nodes == 1)
                         and sizing.spec.router != "cache_aware")


def _geometry(sizing: SystemSizing, pool: PoolSizing, block_tokens: int) -> CacheGeometry:
    return CacheGeometry(
        block_tokens=block_tokens, page_tokens=pool.spec.instance.block_size_tokens,
        block_bytes=block_tokens * sizing.model.kv_bytes_per_token_total(sizing.kv_dtype),
        block_bytes_per_card=block_tokens * pool.kv_bytes_per_token_per_card,
        tp=pool.layout.cards,  # the cards a block's KV is spread over: one flow each
        num_layers=sizing.model.num_layers, groupable=pool.layout.pp == 1 and pool.layout.dp_attention == 1)


def _instance_cache(system: System, index: int, place: Placement, pages: BlockPool,
                    block_tokens: int) -> InstanceCache:
    step = place.pool.step_model()
    records = system.records

    def recompute_s(tokens: int, cached_tokens: int) -> float:
        return step.iteration_time_s(BatchShape(
            prefill_tokens=tokens, prefill_pairs=BatchShape.prefill_chunk_pairs(tokens, cached_tokens),
            prefill_context_tokens=cached_tokens, sampled_seqs=1))

    columns = {source: f"hit_tokens_{source}" for source in SOURCES}

    def record_hits(seq: Sequence, tier: str, tokens: int, loaded_bytes: float) -> None:
        # look the columns up on every call: the records grow (and reallocate) in closed loops
        getattr(records, columns[tier])[seq.rid] += tokens
        records.loaded_bytes[seq.rid] += loaded_bytes

    def record_written(seq: Sequence, nbytes: float) -> None:
        records.written_bytes[seq.rid] += nbytes

    acc = place.pool.accelerator
    read_Bps = acc.scale_up_bandwidth * acc.efficiency.interconnect if acc.scale_up_bandwidth is not None else None
    tiers = system.sizing.spec.scale_up
    if read_Bps is not None and tiers is not None:
        # supernode tiers: reads in place are costed at the slowest tier a peer may sit behind
        # (an upper bound on their time when the holder shares the reader's group)
        read_Bps = min(t.share_Bps for t in card_tiers(tiers, acc)) * acc.efficiency.interconnect
    eff = acc.efficiency
    # a copy inside HBM reads and writes every byte: half the achieved paged-KV rate
    local_copy_Bps = acc.memory_bandwidth * (eff.kv_memory if eff.kv_memory is not None else eff.memory) / 2
    cache_type = ExtentInstanceCache if system.cache.extents else InstanceCache
    return cache_type(system.cache, index, place.node, list(place.gpus), pages,
                         _geometry(system.sizing, place.pool, block_tokens), recompute_s, record_hits,
                         record_written, read_Bps, local_copy_Bps)
