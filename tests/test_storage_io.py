"""Storage I/O model: each cost term against a hand calculation (kvsim/network/storage_io.py).

Every expected time below is written out from the catalog figures, not taken from the code's own
closed form; :func:`access_time_s` is then checked against the same hand numbers.
"""

from __future__ import annotations

import math

import pytest
import simpy

import kvsim
from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.network import FlowNetwork, IoRequest, StorageIO, Transfers, build_topology, network_capacities
from kvsim.network import topology as topo_mod
from kvsim.network.flows import _solve, max_min_fair_rates
from kvsim.network.storage_io import (
    access_time_s,
    io_count,
    iops_resource,
    queue_rate_cap_Bps,
    staging_cpu_s_per_byte,
    staging_resource,
)

KIB, MIB = 2**10, 2**20
ACC = accelerator_catalog()["h20"]
NODE = node_catalog()["h20-8x"]
NVME_POOL = pool_node_catalog()["nvme-storage-16x"]
PCIE = topo_mod.PCIE_HOP_LATENCY_S


def cluster(node=NODE, pool=NVME_POOL):
    return build_topology([("n0", node, ACC)], [("pool", pool)])


def run(topo, moves):
    """Start ``(paths, nbytes_each, io)`` transfers together; completion time of each."""
    env = simpy.Environment()
    storage = StorageIO(topo)
    transfers = Transfers(env, topo, FlowNetwork(env, network_capacities(topo, storage)), storage)
    events = [transfers.move(paths, nbytes, "test", io) for paths, nbytes, io in moves]
    env.run()
    return [event.value for event in events], transfers


def test_io_count_is_the_ceiling_of_bytes_over_size():
    assert io_count(4 * MIB, 4 * KIB) == 1024
    assert io_count(4 * MIB + 1, 4 * KIB) == 1025
    assert io_count(3 * 0.1, 0.1) == 3  # float rounding of a whole multiple adds no I/O
    assert io_count(0, 4 * KIB) == 0
    with pytest.raises(ValueError):
        io_count(1, 0)


def test_one_wave_pays_io_latency_plus_size_over_bandwidth():
    # GDS read of 8 MiB in 1 MiB I/Os from drive 0: 8 I/Os <= queue depth 32, one wave.
    topo = cluster()
    path = topo.load_path("n0/nvme0", "n0/gpu0", True)
    [t], _ = run(topo, [([path], 8 * MIB, IoRequest("n0/nvme0", None, 1 * MIB))])
    latency = 2 * PCIE + 80e-6  # drive -> switch -> GPU, PM1743-class read latency
    assert t == pytest.approx(latency + 8 * MIB / 13e9, rel=1e-12)
    assert access_time_s(8 * MIB, MIB, 13e9, latency, 32, 2.5e6) == pytest.approx(t, rel=1e-12)


def test_queue_depth_bound_is_waves_times_io_latency():
    # 4 MiB in 4 KiB I/Os: 1024 I/Os, 32 at a time = 32 round trips of 82 us = 2.624 ms, far
    # above latency + bytes / IOPS rate (82 us + 4 MiB / (2.5 M x 4 KiB) = 0.492 ms).
    topo = cluster()
    path = topo.load_path("n0/nvme0", "n0/gpu0", True)
    [t], _ = run(topo, [([path], 4 * MIB, IoRequest("n0/nvme0", None, 4 * KIB))])
    latency = 2 * PCIE + 80e-6
    assert t == pytest.approx(32 * latency, rel=1e-9)
    assert access_time_s(4 * MIB, 4 * KIB, 13e9, latency, 32, 2.5e6) == pytest.approx(32 * latency, rel=1e-12)
    assert queue_rate_cap_Bps(4 * MIB, 1024, 32, latency) == pytest.approx(4 * MIB / (31 * latency))
    assert queue_rate_cap_Bps(4 * MIB, 32, 32, latency) == math.inf


def test_iops_ceiling_binds_small_ios_when_the_queue_is_deep():
    # Same 4 KiB reads with 4096 outstanding (one wave): the drive's 2.5 M IOPS x 4 KiB =
    # 10.24 GB/s is below its 13 GB/s, so T = 82 us + 4 MiB / 10.24 GB/s.
    node = NODE.model_copy(update={"nvme": NODE.nvme.model_copy(update={"queue_depth": 4096})})
    topo = cluster(node)
    path = topo.load_path("n0/nvme0", "n0/gpu0", True)
    [t], transfers = run(topo, [([path], 4 * MIB, IoRequest("n0/nvme0", None, 4 * KIB))])
    latency = 2 * PCIE + 80e-6
    assert t == pytest.approx(latency + 4 * MIB / (2.5e6 * 4 * KIB), rel=1e-9)
    # the drive served exactly 1024 I/Os
    assert transfers.network.bytes_moved(iops_resource("n0/nvme0", False)) == pytest.approx(1024)


def test_iops_shared_by_mixed_io_sizes():
    # Two flows on one IOPS resource of R = 1e6 I/Os/s, 4 KiB and 64 KiB I/Os: max-min fair
    # equal byte rates r with r / 4 KiB + r / 64 KiB = R, so r = R / (1/4096 + 1/65536).
    iops = ("media", "read_iops")
    rates = _solve([{iops: 1 / 4096}, {iops: 1 / 65536}], {iops: 1e6})
    r = 1e6 / (1 / 4096 + 1 / 65536)
    assert rates == pytest.approx([r, r], rel=1e-12)
    # a flow's own cap binds first and frees the resource for the other
    rates = _solve([{iops: 1 / 4096}, {iops: 1 / 65536}], {iops: 1e6}, [1e8, math.inf])
    assert rates[0] == pytest.approx(1e8)
    assert rates[1] == pytest.approx((1e6 - 1e8 / 4096) * 65536, rel=1e-12)
    # without caps or resources the solver is the plain one
    assert _solve([{"l": 1}, {"l": 1}], {"l": 10.0}, None) == max_min_fair_rates([["l"], ["l"]], {"l": 10.0})


def test_cpu_staging_rate_and_per_io_cost_on_the_host_bounce_path():
    # One copy thread at 2 GB/s, 5 us per I/O, 64 KiB I/Os: CPU time per byte 1/2e9 + 5e-6/65536,
    # so the bounce stages at 1 / (5e-10 + 7.63e-11) = 1.735 GB/s -- below the drive, the copy
    # engine and the DRAM channels. 32 I/Os = one wave; each I/O's latency grows by 5 us.
    staging = NODE.host_staging.model_copy(update={"copy_threads": 1, "memcpy_bandwidth": 2e9})
    topo = cluster(NODE.model_copy(update={"host_staging": staging}))
    nbytes = 32 * 64 * KIB
    bounce = topo.load_path("n0/nvme0", "n0/gpu0", False)
    direct = topo.load_path("n0/nvme0", "n0/gpu0", True)
    [t_bounce], _ = run(topo, [([bounce], nbytes, IoRequest("n0/nvme0", None, 64 * KIB, host="n0"))])
    [t_direct], _ = run(topo, [([direct], nbytes, IoRequest("n0/nvme0", None, 64 * KIB))])
    rate = 1 / (1 / 2e9 + 5e-6 / (64 * KIB))
    assert staging_cpu_s_per_byte(64 * KIB, 1, 2e9, 5e-6) == pytest.approx(1 / rate)
    assert t_bounce == pytest.approx(topo.path_latency_s(bounce) + 5e-6 + nbytes / rate, rel=1e-9)
    # GPU-Direct skips the staging: drive bandwidth and its own latency only
    assert t_direct == pytest.approx(2 * PCIE + 80e-6 + nbytes / 13e9, rel=1e-9)
    assert t_bounce > 5 * t_direct  # 1.30 ms vs 0.24 ms


def test_staging_threads_are_shared_by_concurrent_bounces():
    # Eight cards bounce-load 16 MiB each at once in 1 MiB I/Os (16 I/Os, one wave). Each drive
    # (13 GB/s) serves two cards, 6.5 GB/s each; the node's 8 threads would stage 8 / (1e-10 +
    # 5e-6 / 2^20) = 76 GB/s, more than the 52 GB/s the drives deliver, so the drives bind:
    # T = L + 5 us + 2 x 16 MiB / 13 GB/s, and the CPU did exactly bytes x CPU-s per byte.
    topo = cluster()
    nbytes = 16 * MIB
    moves = [([topo.load_path(f"n0/nvme{i // 2}", f"n0/gpu{i}", False)], nbytes,
              IoRequest(f"n0/nvme{i // 2}", None, MIB, host="n0")) for i in range(8)]
    times, transfers = run(topo, moves)
    per_byte = 1 / 10e9 + 5e-6 / MIB
    cpu_s = transfers.network.bytes_moved(staging_resource("n0"))
    assert cpu_s == pytest.approx(8 * nbytes * per_byte, rel=1e-9)
    assert max(times) == pytest.approx(topo.path_latency_s(moves[0][0][0]) + 5e-6 + 2 * nbytes / 13e9, rel=1e-6)


def test_non_storage_endpoints_cost_only_their_links():
    topo = cluster()
    storage = StorageIO(topo)
    path = topo.load_path("n0/dram", "n0/gpu0", True)
    assert storage.cost(path, IoRequest("n0/dram", None, 4 * KIB, host="n0"), MIB) is None
    assert storage.is_storage("pool/media") and storage.is_storage("n0/nvme3")
    assert not storage.is_storage("n0/dram")
    # capacities: per-direction IOPS of every drive and the pool node, one staging CPU per node
    caps = storage.capacities()
    assert caps[iops_resource("pool/media", False)] == 40e6
    assert caps[iops_resource("n0/nvme0", True)] == 2.5e5
    assert caps[staging_resource("n0")] == 8


def test_uncontended_estimate_matches_the_simulated_time():
    topo = cluster()
    paths = [topo.load_path("pool/media", f"n0/gpu{i}", False) for i in range(2)]
    io = IoRequest("pool/media", None, 16 * KIB, host="n0")
    _, transfers = run(topo, [(paths, 32 * MIB, io)])
    t = transfers.env.now  # both cards' flows have landed
    # 2048 I/Os per card, 64 waves of 16 KiB: latency-bound, each flow alone on its own links
    latency = topo.path_latency_s(paths[0]) + 5e-6
    assert t == pytest.approx(64 * latency, rel=1e-9)
    assert transfers.uncontended_s(paths, 32 * MIB, io) == pytest.approx(t, rel=1e-9)


def test_host_staging_that_costs_nothing_runs(tmp_path):
    # no copy threads and no per-I/O cost: the bounce path has no CPU resource to share, and runs
    text = """
name: free-staging
seed: 1
duration: 20 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {kind: closed_loop, clients: 2, think_time: 1 s}
  prefix: {kind: shared_documents, documents: 2, zipf_s: 1.0, document_tokens: {kind: fixed, value: 4096},
           suffix_tokens: {kind: fixed, value: 256}}
  output_tokens: {kind: fixed, value: 1}
systems:
  s: {node: h20-free, instances: 2, kv_cache: {nvme: {capacity: 1 TB}, gpu_direct: false, load_policy: always}}
catalog:
  nodes:
    h20-free: {base: h20-8x, host_staging: {copy_threads: 0, per_io_cpu_s: 0 s}}
"""
    run = kvsim.run(kvsim.parse_scenario(text, "free.yaml")).runs[0]
    assert run.summary["requests_completed"] > 0


# A remote NVMe pool reached without GPU-Direct, in 4 KiB I/Os: the prompts' cached documents
# mostly come from the pool, every byte is staged by node0's CPU, which saturates.
BUSY_STORAGE = """
name: storage-units
seed: 5
duration: 10 s
warmup: 3 s
model: qwen3-8b
workload:
  arrival: {kind: closed_loop, clients: 16}
  prefix: {kind: shared_documents, documents: 400, zipf_s: 1.0, document_tokens: {kind: fixed, value: 4096},
           suffix_tokens: {kind: fixed, value: 128}}
  output_tokens: {kind: fixed, value: 1}
systems:
  bounce:
    node: h20-8x
    instances: 1
    kv_cache: {remote: {pool_node: nvme-storage-16x, nodes: 1}, gpu_direct: false, io_size: 4 KiB, prewarm: true}
"""


def test_storage_resources_are_reported_in_their_own_units_and_never_as_links(tmp_path):
    import json

    import pandas as pd

    from kvsim.cli import main

    source = tmp_path / "s.yaml"
    source.write_text(BUSY_STORAGE, encoding="utf-8")
    assert main(["run", str(source), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    links = pd.read_parquet(tmp_path / "out" / "links.parquet")
    storage = pd.read_parquet(tmp_path / "out" / "storage.parquet")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["points"][0]["systems"]["bounce"]
    # the links table holds byte links only: every row is an edge u->v of the topology
    assert list(links.columns) == ["system", "point", "link", "capacity_Bps", "bytes", "utilization_mean"]
    assert not links.link.str.contains("iops|staging").any()
    by_link = links.set_index("link").bytes
    # storage rows carry their kind and unit-named columns: I/Os and CPU-seconds, not bytes
    assert set(storage.columns) == {"system", "point", "resource", "kind", "capacity_iops", "ios",
                                    "capacity_cpu_s_per_s", "cpu_s", "utilization_mean"}
    rows = {(r.resource, r.kind): r for r in storage.itertuples()}
    read, write = rows["pool0/media", "read_iops"], rows["pool0/media", "write_iops"]
    cpu = rows["node0/cpu", "cpu_staging"]
    assert read.capacity_iops == NVME_POOL.read_iops and write.capacity_iops == NVME_POOL.write_iops
    # every byte read leaves the pool's media by its media -> pcie edge, in whole 4 KiB I/Os
    # (a card's block, 16 x 144 KiB of qwen3-8b KV, is a multiple of 4 KiB)
    read_bytes, write_bytes = by_link["pool0/media->pool0/pcie"], by_link["pool0/pcie->pool0/media"]
    assert read.ios == pytest.approx(read_bytes / (4 * KIB), rel=1e-9)
    assert write.ios == pytest.approx(write_bytes / (4 * KIB), rel=1e-9)
    assert math.isnan(read.capacity_cpu_s_per_s) and math.isnan(cpu.ios)
    # staging: 8 copy threads = 8 CPU-s/s; each staged byte costs 1/m + c/s CPU-seconds
    staging = NODE.host_staging
    assert cpu.capacity_cpu_s_per_s == staging.copy_threads == 8
    per_byte = 1 / staging.memcpy_bandwidth + staging.per_io_cpu_s / (4 * KIB)
    assert cpu.cpu_s == pytest.approx((read_bytes + write_bytes) * per_byte, rel=1e-9)
    assert cpu.utilization_mean > 0.95  # saturated ...
    # ... yet the busiest *link* is a byte link: the pool's 200 Gbit/s NIC port (25 GB/s, the
    # narrowest hop every pool read crosses; its PCIe side carries the same bytes at the same
    # capacity, and the tie goes to the first name)
    busiest = summary["cache"]["busiest_links"][0]
    assert busiest["link"] == "pool0/nic0->fabric"
    assert busiest["utilization_mean"] == pytest.approx(links.utilization_mean.max())
    assert busiest["utilization_mean"] < cpu.utilization_mean
    assert summary["cache"]["busiest_storage"][0]["kind"] == "cpu_staging"
    # what bounds the run names the resource with its kind, not as a link
    assert summary["bound"] == "CPU staging node0/cpu"


def test_bound_resource_names_storage_resources_by_kind():
    from kvsim.metrics.cache_summary import bound_resource, busiest_links

    link = [{"link": "a->b", "utilization_mean": 0.7}]
    iops = [{"resource": "pool0/media", "kind": "write_iops", "utilization_mean": 0.9},
            {"resource": "n0/cpu", "kind": "cpu_staging", "utilization_mean": 0.2}]
    assert bound_resource(0.5, {"compute": 1.0}, link, iops) == "write IOPS pool0/media"
    assert bound_resource(0.5, {"compute": 1.0}, link, iops[1:]) == "link a->b"
    assert busiest_links(iops, key="resource")[0]["resource"] == "pool0/media"
