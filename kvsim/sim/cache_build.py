"""Build a system's KV cache objects: topology, flow network, tier stores, per-instance hooks."""

from __future__ import annotations

import simpy

from kvsim.kv import BlockPool
from kvsim.metrics.records import RequestRecords
from kvsim.models.step_time import BatchShape
from kvsim.network import FlowNetwork, build_topology
from kvsim.serving.offload import CacheGeometry, InstanceCache, SystemCache
from kvsim.serving.scheduler import Sequence
from kvsim.rng import DerivedStreams, RandomStreams
from kvsim.sim.sizing import SystemSizing
from kvsim.workload import ClientStream, WorkloadSpec, open_loop_requests

__all__ = ["node_name", "instance_gpus", "build_system_cache", "build_instance_cache", "warm_prompts"]

MAX_WARM_REQUESTS = 200_000


def warm_prompts(workload: WorkloadSpec, duration_s: float, streams: RandomStreams, block_tokens: int):
    """Full-block hash lists of requests drawn independently from ``workload`` (for prewarm).

    Yields up to :data:`MAX_WARM_REQUESTS` prompts, drawn from streams named ``prewarm.*``.
    """
    world = ("workload.prefix.document_tokens",)  # which documents exist is shared, not redrawn
    derived = DerivedStreams(streams, "prewarm", shared=world)
    if workload.closed_loop:
        clients = [ClientStream(workload, c, derived, namespace="prewarm")
                   for c in range(workload.arrival.clients)]
        for k in range(MAX_WARM_REQUESTS):
            request = clients[k % len(clients)].next_request_with_hashes()
            yield request.hash_ids[: request.input_tokens // block_tokens]
        return
    produced = 0
    for round_ in range(1_000):
        batch = open_loop_requests(workload, duration_s, derived, namespace=f"prewarm.{round_}")
        if not batch.hash_ids:
            return
        for tokens, hashes in zip(batch.input_tokens.tolist(), batch.hash_ids):
            yield hashes[: tokens // block_tokens]
            produced += 1
            if produced >= MAX_WARM_REQUESTS:
                return
        derived = DerivedStreams(derived, f"round{round_}", shared=world)  # a fresh, independent batch


def node_name(k: int) -> str:
    return f"node{k}"


def instance_gpus(sizing: SystemSizing, instance: int) -> tuple[str, list[str]]:
    """The node and card endpoints of instance ``instance`` (instances fill nodes in order)."""
    per_node = sizing.node.accelerators_per_node
    first = instance * sizing.tp
    node = node_name(first // per_node)
    return node, [f"{node}/gpu{(first % per_node) + c}" for c in range(sizing.tp)]


def build_system_cache(env: simpy.Environment, sizing: SystemSizing, block_tokens: int,
                       window_start_s: float, window_end_s: float) -> SystemCache:
    spec = sizing.spec.kv_cache
    nodes = [node_name(k) for k in range(sizing.spec.nodes)]
    pools = []
    if spec.remote is not None:
        pools = [f"pool{k}" for k in range(spec.remote.nodes)]
    topology = build_topology([(n, sizing.node, sizing.accelerator) for n in nodes],
                              [(p, sizing.pool_node) for p in pools])
    network = FlowNetwork(env, topology.capacity_Bps(), window_start_s, window_end_s)
    model = sizing.model
    geometry = CacheGeometry(
        block_tokens=block_tokens,
        page_tokens=sizing.spec.instance.block_size_tokens,
        block_bytes=block_tokens * model.kv_bytes_per_token_total(sizing.kv_dtype),
        block_bytes_per_card=block_tokens * sizing.kv_bytes_per_token_per_card,
        tp=sizing.tp,
        num_layers=model.num_layers,
    )
    instance_nodes = [instance_gpus(sizing, i)[0] for i in range(sizing.instances)]
    dram = {n: spec.dram.capacity for n in nodes} if spec.dram is not None else {}
    nvme_capacity = None
    if spec.nvme is not None:
        nvme_capacity = spec.nvme.capacity or sizing.node.nvme.count * sizing.node.nvme.capacity_bytes
    nvme = {n: nvme_capacity for n in nodes} if spec.nvme is not None else {}
    pool_bytes = sizing.pool_node.capacity_bytes if sizing.pool_node is not None else 0.0
    return SystemCache(env, spec, geometry, topology, network, instance_nodes, dram, nvme, pools, pool_bytes)


def build_instance_cache(system: SystemCache, sizing: SystemSizing, instance: int, pool: BlockPool,
                         records: RequestRecords) -> InstanceCache:
    step = sizing.step_model()

    def recompute_s(tokens: int, cached_tokens: int) -> float:
        return step.iteration_time_s(BatchShape(
            prefill_tokens=tokens, prefill_pairs=BatchShape.prefill_chunk_pairs(tokens, cached_tokens),
            prefill_context_tokens=cached_tokens, sampled_seqs=1))

    columns = {tier: f"hit_tokens_{tier}" for tier in ("hbm", "dram", "nvme", "remote")}

    def record_hits(seq: Sequence, tier: str, tokens: int, loaded_bytes: float) -> None:
        # look the columns up on every call: the records grow (and reallocate) in closed loops
        getattr(records, columns[tier])[seq.rid] += tokens
        records.loaded_bytes[seq.rid] += loaded_bytes

    def record_written(seq: Sequence, nbytes: float) -> None:
        records.written_bytes[seq.rid] += nbytes

    return InstanceCache(system, instance, instance_gpus(sizing, instance)[1], pool, recompute_s,
                         record_hits, record_written)
