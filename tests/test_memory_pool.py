"""A memory-semantic pool: a pool node reached over the cards' scale-up fabric, not NICs (issue 24,
item 4). Its reads and writes against closed forms, on the topology and through the storage bench.
"""

from __future__ import annotations

import pytest

from flow_timing import timed
from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.hardware.specs import PoolNodeSpec
from kvsim.network import build_topology
from kvsim.network.cluster_graph import SCALE_UP_LATENCY_S
from kvsim.scenario.storage_bench import parse_storage_bench
from kvsim.sim.storage_bench import run_bench_point
from kvsim.yaml_io import SpecError

GIB = 2.0**30
H20, H20_NODE = accelerator_catalog()["h20"], node_catalog()["h20-8x"]
PORT_BPS = 400e9  # the pool node's scale-up ports, per direction (a what-if figure, not a catalog one)
MEMORY_POOL = PoolNodeSpec.model_validate({
    **pool_node_catalog()["dram-pool-8x"].model_dump(), "nics": {"count": 0, "bandwidth": 50e9},
    "scale_up_bandwidth": PORT_BPS, "scale_up_latency_s": 2e-6})


def _cluster():
    return build_topology([("n0", H20_NODE, H20), ("n1", H20_NODE, H20)], [("pool", MEMORY_POOL)],
                          scale_up_domains=[["n0", "pool"], ["n1"]])


def test_a_memory_semantic_read_takes_bytes_over_the_narrowest_scale_up_link_plus_its_latency():
    topo = _cluster()
    path = topo.load_path("pool/media", "n0/gpu0", True)
    assert path == [("pool/media", "pool/pcie"), ("pool/pcie", "su0"), ("su0", "n0/gpu0")]
    assert topo.load_path("pool/media", "n0/gpu0", False) == path  # no host bounce on this path
    # latency: the media's access, half the pool's scale-up latency, half the card's
    card_half = (H20.scale_up_latency_s if H20.scale_up_latency_s is not None else SCALE_UP_LATENCY_S) / 2
    latency = MEMORY_POOL.access_latency_s + 1e-6 + card_half
    assert topo.path_latency_s(path) == pytest.approx(latency)
    # one card: min(card 450, ports 400, DRAM 460.8 GB/s) = the pool's ports
    [alone] = timed(topo, [(path, GIB)])
    assert alone == pytest.approx(GIB / PORT_BPS + latency, rel=1e-12)
    # two cards share the ports: 200 GB/s each, below each card's 450
    pair = timed(topo, [(topo.load_path("pool/media", f"n0/gpu{i}", True), GIB) for i in (0, 1)])
    assert pair == pytest.approx([GIB / (PORT_BPS / 2) + latency] * 2, rel=1e-12)
    # a write mirrors it, at the DRAM's write rate when that is lower
    store = topo.store_path("n0/gpu3", "pool/media", True)
    assert store == [("n0/gpu3", "su0"), ("su0", "pool/pcie"), ("pool/pcie", "pool/media")]
    [written] = timed(topo, [(store, GIB)])
    assert written == pytest.approx(GIB / min(PORT_BPS, MEMORY_POOL.write_bandwidth) + latency, rel=1e-12)


def test_cards_outside_the_pools_domain_cannot_reach_a_pool_without_nics():
    topo = _cluster()
    with pytest.raises(ValueError, match="no NIC"):
        topo.load_path("pool/media", "n1/gpu0", True)
    with pytest.raises(ValueError, match="no NIC and is in no scale-up domain"):
        build_topology([("n0", H20_NODE, H20)], [("pool", MEMORY_POOL)])
    with pytest.raises(ValueError, match="joins a domain only with scale_up_bandwidth"):
        build_topology([("n0", H20_NODE, H20)], [("pool", pool_node_catalog()["dram-pool-8x"])],
                       scale_up_domains=[["n0", "pool"]])


BENCH = """
name: memory-pool
duration: 0.1 s
warmup: 0.02 s
clients: {{node: {node}, nodes: 1}}
pool: {{pool_node: ub-pool, over: {over}}}
block_size: 8 MiB
concurrency: 2
catalog:
  pool_nodes:
    ub-pool: {{base: dram-pool-8x, nics: {{count: 0, bandwidth: 400 Gbit/s}}, {extra}}}
"""


def test_the_storage_bench_reads_a_memory_semantic_pool_at_its_ports_rate():
    bench = parse_storage_bench(BENCH.format(node="h20-8x", over="scale_up",
                                             extra="scale_up_bandwidth: 400 GB/s, scale_up_latency_s: 2 us"))
    row = run_bench_point(bench.points[0])
    # 8 cards x 2 reads in flight: the ports (400 GB/s) bind, below 8 x 450 and the DRAM's 460.8
    assert row["read_GiBps"] == pytest.approx(PORT_BPS / GIB, rel=1e-9)
    assert row["bottleneck"] == "pool0/pcie->su0"


@pytest.mark.parametrize("node, extra, message", [
    ("h20-8x", "power_w: 900 W", "pool node ub-pool has no scale_up_bandwidth"),
    ("l20-8x", "scale_up_bandwidth: 400 GB/s", "l20-8x's cards (l20) have no scale-up link"),
])
def test_a_memory_semantic_bench_names_what_is_missing(node, extra, message):
    with pytest.raises(SpecError) as caught:
        parse_storage_bench(BENCH.format(node=node, over="scale_up", extra=extra), "bench.yaml")
    assert len(caught.value.problems) == 1
    assert caught.value.problems[0].startswith("bench.yaml:6: pool.over: ") and message in caught.value.problems[0]


def test_a_scale_up_latency_needs_the_ports_bandwidth():
    with pytest.raises(SpecError) as caught:
        parse_storage_bench(BENCH.format(node="h20-8x", over="network", extra="scale_up_latency_s: 2 us"),
                            "bench.yaml")
    assert "scale_up_latency_s: a scale-up latency without scale_up_bandwidth" in caught.value.problems[0]
