"""Run a storage benchmark (:mod:`kvsim.scenario.storage_bench`): only the transfer layer.

Client cards keep block transfers in flight against the pool nodes (closed loop: a transfer that
lands starts the next at once), through the same topology, flow network and storage I/O model
that serve the KV cache. Reported per sweep point: delivered GiB/s (reads, writes, total) and
I/Os per second over the window, block-transfer latency percentiles, and the busiest link or
resource (the bottleneck) with its mean utilisation.

Delivered bytes are what crossed the pool nodes' media edges inside ``[warmup, duration]`` (every
read leaves by its pool's media -> I/O edge, every write enters by the reverse one), so they are
exact over the window; a transfer's latency counts when it started after the warm-up and landed
before the end.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import simpy

from kvsim.backend import kernels, resolve
from kvsim.network import FlowNetwork, IoRequest, StorageIO, Transfers, build_topology, network_capacities
from kvsim.network.storage_io import io_count
from kvsim.rng import RandomStreams
from kvsim.scenario.storage_bench import BenchPoint, StorageBench

__all__ = ["run_storage_bench", "run_bench_point"]

GIB = 2.0**30


def run_storage_bench(bench: StorageBench) -> list[dict[str, Any]]:
    """One result row per sweep point, in order."""
    return [run_bench_point(point) for point in bench.points]


def run_bench_point(point: BenchPoint) -> dict[str, Any]:
    """Simulate one sweep point; see the module docstring for what the row holds."""
    spec = point.spec
    env = simpy.Environment()
    clients = [f"client{k}" for k in range(spec.clients.nodes)]
    pools = [f"pool{k}" for k in range(spec.pool.nodes)]
    # other work holds host_memory_load of each client node's DRAM channels: the bench sees the
    # rest (a reservation, not a competing flow, which max-min fairness would squeeze instead)
    node = point.node.model_copy(update={"host_dram_bandwidth":
                                         point.node.host_dram_bandwidth * (1.0 - spec.host_memory_load)})
    # a memory-semantic pool shares one scale-up domain with every client node
    domains = [clients + pools] if spec.pool.over == "scale_up" else None
    topology = build_topology([(name, node, point.accelerator) for name in clients],
                              [(name, point.pool_node) for name in pools], domains)
    storage = StorageIO(topology)
    # the flow network of the engine backend an ordinary run would use here (auto, or KVSIM_BACKEND)
    network = kernels(resolve("auto")).flows.FlowNetwork(env, network_capacities(topology, storage), spec.warmup,
                                                       spec.duration)
    transfers = Transfers(env, topology, network, storage)
    io_size = spec.io_size or spec.block_size
    ios_per_block = io_count(spec.block_size, io_size)
    done: list[tuple[bool, float, float]] = []  # (read, start_s, end_s) of transfers landed in the window
    streams = RandomStreams(spec.seed)
    per_node = spec.clients.per_node or point.node.accelerators_per_node
    for name in clients:
        for gpu in topology.gpus(name)[:per_node]:
            # the cards reach a memory-semantic pool over their scale-up links: no host staging
            host = None if spec.gpu_direct or spec.pool.over == "scale_up" else name
            for slot in range(spec.concurrency):
                draws = streams.generator(f"storage_bench.{gpu}.{slot}")
                env.process(_client(env, transfers, gpu, host, pools, draws, spec, io_size, done))
    env.run(until=spec.duration)
    read_bytes = write_bytes = 0.0
    for pool in pools:
        media, io_port = topology.pool_media(pool), f"{pool}/pcie"
        for edge in ((media, io_port), (io_port, media)):
            carried = network.utilization_mean(edge) * topology.graph.edges[edge]["capacity_Bps"]
            if edge[0] == media:
                read_bytes += carried
            else:
                write_bytes += carried
    return _row(point, network, done, read_bytes, write_bytes, ios_per_block, len(clients) * per_node)


def _client(env: simpy.Environment, transfers: Transfers, gpu: str, host: str | None, pools: list[str],
            draws: np.random.Generator, spec, io_size: float, done: list):
    topology = transfers.topology
    # clients start at random instants within the warm-up: started together, they would stay in
    # lock step and leave the links idle while all pay their latency at once
    yield env.timeout(float(draws.uniform(0.0, spec.warmup)))
    while True:
        read = bool(draws.random() < spec.read_fraction)
        media = topology.pool_media(pools[int(draws.integers(len(pools)))])
        if read:
            path = topology.load_path(media, gpu, spec.gpu_direct)
            io = IoRequest(media, None, io_size, host)
        else:
            path = topology.store_path(gpu, media, spec.gpu_direct)
            io = IoRequest(None, media, io_size, host)
        start = env.now
        yield transfers.move([path], spec.block_size, "bench_read" if read else "bench_write", io)
        if spec.warmup <= env.now <= spec.duration:
            done.append((read, start, env.now))


def _row(point: BenchPoint, network: FlowNetwork, done: list, read_Bps: float, write_Bps: float,
         ios_per_block: int, clients: int) -> dict[str, Any]:
    spec = point.spec
    latencies = np.array([end - start for _, start, end in done if start >= spec.warmup])

    def pct(q: float) -> float:
        return float(np.percentile(latencies, q)) if latencies.size else math.nan

    by_kind = {kind: np.array([end - start for read, start, end in done if start >= spec.warmup and read == kind])
               for kind in (True, False)}
    p95 = {kind: float(np.percentile(v, 95)) * 1e3 if v.size else math.nan for kind, v in by_kind.items()}
    links = network.link_report()
    busiest = max(links, key=lambda link: (links[link]["utilization_mean"], str(link)))
    row = {
        **{f"param:{k}": v for k, v in point.params.items()},
        "clients": clients,
        "concurrency": spec.concurrency,
        "block_bytes": spec.block_size,
        "io_bytes": spec.io_size or spec.block_size,
        "gpu_direct": spec.gpu_direct,
        "read_fraction": spec.read_fraction,
        "read_GiBps": read_Bps / GIB,
        "write_GiBps": write_Bps / GIB,
        "total_GiBps": (read_Bps + write_Bps) / GIB,
        "kiops": (read_Bps + write_Bps) * ios_per_block / spec.block_size / 1e3,
        "transfers": len(done),
        "latency_p50_ms": pct(50) * 1e3,
        "latency_p90_ms": pct(90) * 1e3,
        "latency_p99_ms": pct(99) * 1e3,
        # the MLPerf Storage KV-cache workload's own figures: p95 of reads and of writes apart,
        # and KV tokens moved per second of wall clock when the bench names its model
        "read_latency_p95_ms": p95[True],
        "write_latency_p95_ms": p95[False],
        "read_tokens_per_s": read_Bps / point.kv_bytes_per_token if point.kv_bytes_per_token else math.nan,
        "write_tokens_per_s": write_Bps / point.kv_bytes_per_token if point.kv_bytes_per_token else math.nan,
        "bottleneck": "->".join(map(str, busiest)),
        "bottleneck_utilization": links[busiest]["utilization_mean"],
    }
    return row
