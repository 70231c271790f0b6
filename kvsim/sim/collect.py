"""Results gathered in one place: a finished :class:`~kvsim.sim.build.System` becomes a
:class:`~kvsim.sim.result.SystemRun` (summary metrics, links, time series)."""

from __future__ import annotations

from typing import Any

from kvsim.metrics.cache_summary import bound_resource, busiest_links, cache_summary
from kvsim.metrics.domain_summary import domain_summary, scale_up_summary
from kvsim.metrics.pd_summary import pd_summary
from kvsim.metrics.routing_summary import routing_summary
from kvsim.metrics.summary import summarize
from kvsim.scenario.load import ScenarioPoint
from kvsim.serving.cache import TIERS
from kvsim.sim.build import System
from kvsim.sim.result import SystemRun

__all__ = ["collect"]


def collect(system: System, point: ScenarioPoint, wall_s: float) -> SystemRun:
    """Summarise a system that has run (and drained) at sweep point ``point``."""
    spec = point.spec
    warmup, duration = spec.warmup, spec.duration
    records, counters, instances = system.records, system.counters, system.instances
    for instance in instances:
        instance.settle_accounts()  # a coalesced decode run still going applies and accounts the steps that have ended
    kv_mean = sum(i.kv_utilization.mean() for i in instances) / len(instances)
    slo = {"ttft_s": spec.slo.ttft_p99, "tpot_s": spec.slo.tpot_p99, "e2e_s": spec.slo.e2e_p99}
    arrival = spec.workload.arrival
    summary = summarize(records, warmup, duration, counters.output_tokens.in_window,
                        counters.input_tokens.in_window, kv_mean, slo, instances=len(instances),
                        clients=arrival.clients if spec.workload.closed_loop else None)
    summary["window"] = {"start_s": warmup, "end_s": duration, "warmup": "fixed"}  # "mser5" with warmup: auto
    summary["engine_backend"] = system.kernels.name  # python or compiled: the same results either way
    span = duration - warmup
    # an iteration that straddles the window start counts whole: clamp the fraction to 1
    busy = min(1.0, counters.busy_in_window_s / (len(instances) * span))
    summary["gpu_busy_fraction"] = busy
    summary["kv_utilization_peak"] = max(i.kv_utilization.peak() for i in instances)
    summary["kv_bytes_peak"] = sum(i.kv_utilization.peak() * _pool_bytes(place.pool)
                                   for i, place in zip(instances, system.placements))
    if instances[0].adapters is not None:
        lora = spec.systems[system.name].lora
        summary["lora"] = {"adapters": spec.workload.adapters.count, "slots_per_instance": instances[0].adapters.max_loras,
                           "kv_sharing": lora.kv_sharing if lora is not None else "none",
                           "adapter_loads": sum(i.adapters.loads for i in instances)}
    links = _links(system)
    storage = _storage(system)
    cache = system.cache
    if cache is not None:
        model = system.sizing.model
        last = system.timeseries[-1] if system.timeseries else {}
        summary_cache = cache_summary(
            records, warmup, duration, model.body_flops_per_token, model.attention_flops_per_pair(decode=False),
            cache.bytes_loaded, cache.bytes_written, links,
            {tier: level.mean() for tier, level in system.tier_occupancy.items()},
            cache.writes_skipped, cache.write_bytes_skipped, cache.write_flows_peak)
        summary_cache["busiest_storage"] = busiest_links(storage, key="resource")
        summary_cache["tier_bytes_at_end"] = {
            tier: {"physical": last.get(f"{tier}_bytes", 0.0), "logical": last.get(f"{tier}_logical_bytes", 0.0)}
            for tier in TIERS}
        summary_cache["domains"] = _domains(system, span, summary_cache["hit_tokens"])
        summary["cache"] = summary_cache
    summary["routing"] = _routing(system, warmup, summary["cache"]["hit_rate"]["total"] if cache is not None else 0.0)
    if system.sizing.disaggregated:
        summary["pd"] = pd_summary(records, warmup, duration, system.transfers.bytes_by_purpose.get("handoff", 0.0),
                                   links, system.controller.switches, system.instances)
    if system.failures is not None:
        summary["failures"] = system.failures.summary(warmup, duration, slo)
    busy_total = counters.busy_in_window_s
    summary["gpu_time_share"] = {cause: (t / busy_total if busy_total else 0.0)
                                 for cause, t in counters.time_by_cause_s.items()}
    summary["bound"] = bound_resource(busy, counters.time_by_cause_s, links, storage)
    return SystemRun(
        system=system.name, point_index=point.index, params=dict(point.params), sizing=system.sizing,
        records=records, summary=summary, in_system_mean=system.in_system.mean(), iterations=counters.iterations,
        busy_s=counters.busy_s, wall_s=wall_s, timeseries=system.timeseries, links=links,
        storage=storage,
        decisions=system.controller.decisions if system.controller is not None else [],
        switches=system.controller.switches if system.controller is not None else [],
    )


def _pool_bytes(pool) -> float:
    """KV bytes one instance of ``pool`` holds when its page pool is full (all its cards)."""
    return (pool.kv_blocks_per_instance * pool.spec.instance.block_size_tokens * pool.kv_bytes_per_token_per_card
            * pool.layout.cards)


def _routing(system: System, window_start_s: float, token_hit_rate: float) -> dict[str, Any]:
    """Hit rate against the infinite-cache bound, and load balance over the entry instances."""
    front = system.front
    entry = system.entry_role
    out = routing_summary(system.records, window_start_s, front.prompt_hashes, front.held_hashes,
                          system.block_tokens,
                          "prefill_instance" if entry == "prefill" else "instance",
                          [k for k, p in enumerate(system.placements) if p.role == entry], token_hit_rate,
                          documents=system.documents)
    router = getattr(front.router, "inner", front.router)  # (node failures wrap it: kvsim.sim.failures)
    out["router"] = type(router).__name__
    if hasattr(router, "guarded"):
        out["load_guard_decisions"] = router.guarded
    spec = getattr(router, "spec", None)
    if spec is not None:
        out["staleness_s"] = spec.staleness
    return out


def _links(system: System) -> list[dict[str, Any]]:
    """Every byte link that carried bytes: capacity (B/s), bytes, mean utilisation over the window.

    Only the topology's edges: the storage resources the network also shares (IOPS ceilings,
    staging CPUs) count I/Os and CPU-seconds, not bytes, and are reported by :func:`_storage`.
    """
    if system.cache is None and system.handoff is None:
        return []
    edges = system.topology.capacity_Bps()
    return [{"link": f"{u}->{v}", "capacity_Bps": stats["capacity_Bps"], "bytes": float(stats["bytes"]),
             "utilization_mean": stats["utilization_mean"]}
            for (u, v), stats in system.network.link_report().items() if (u, v) in edges and stats["bytes"] > 0]


def _storage(system: System) -> list[dict[str, Any]]:
    """Every storage resource that was used, in its own units (see StorageIO.report)."""
    if system.cache is None and system.handoff is None:
        return []
    return system.transfers.storage.report(system.network)


def _domains(system: System, span: float, hit_tokens: dict[str, int]) -> dict[str, Any]:
    """The addressing-domain section of a cached system's summary (see metrics.domain_summary)."""
    cache = system.cache
    graph = system.topology.graph
    edges = [(u, v) for u, v, kind in graph.edges(data="kind") if kind == "scale_up"]
    scale_up = scale_up_summary(system.network.link_report(), edges, span, cache.remote_reads.edge_bytes())
    moved = sum(pool.moved_bytes for pool in cache.domain_pools.values())
    return domain_summary(cache.spec.peer_hbm, system.domain_levels, hit_tokens, cache.cross_domain_bytes, scale_up,
                          moved)
