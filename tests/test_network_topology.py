"""Cluster topology: structure and capacities from specs, KV data paths, timing through flows."""

from __future__ import annotations

import math

import pytest

from flow_timing import timed
from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.network import build_topology
from kvsim.network import topology as topo_mod

GIB = 2**30
NODE = node_catalog()["h20-8x"]
ACC = accelerator_catalog()["h20"]
DRAM_POOL = pool_node_catalog()["dram-pool-8x"]
NVME_POOL = pool_node_catalog()["nvme-storage-16x"]
NIC_BPS = 400e9 / 8 * 0.975  # one 400 Gbit/s NIC's delivered rate (NicSpec efficiency default)


def h20_cluster(node=NODE, pools=(("pool", DRAM_POOL),)):
    return build_topology([("n0", node, ACC), ("n1", node, ACC)], list(pools))


def channel_crossings(topo, edges, node="n0"):
    return edges.count(topo.dram_channel(node))


# ---------------------------------------------------------------- structure and capacities


def test_h20_node_structure():
    topo = h20_cluster()
    g = topo.graph
    assert topo.gpus("n0") == [f"n0/gpu{i}" for i in range(8)]
    assert topo.nics("n0") == [f"n0/nic{j}" for j in range(4)]
    assert topo.nvmes("n0") == [f"n0/nvme{j}" for j in range(4)]
    assert topo.dram("n0") == "n0/dram"
    assert topo.pool_media("pool") == "pool/media"
    own = [n for n in g if n.startswith("n0/")]
    # 8 GPUs, 4 switches (one per 2 GPUs), 4 NICs, 4 drives, root, dram and the two channel ends,
    # plus each GPU's two copy-engine ends (host->device, device->host).
    assert len(own) == 8 + 4 + 4 + 4 + 4 + 8 * 2
    for i in range(8):
        gpu = f"n0/gpu{i}"
        copy_rate = ACC.host_link_bandwidth * ACC.efficiency.host_copy
        assert g.edges[gpu, f"{gpu}/h2d"]["capacity_Bps"] == pytest.approx(copy_rate)
        assert g.edges[f"{gpu}/d2h", gpu]["capacity_Bps"] == pytest.approx(copy_rate)
    for i in range(8):
        sw = f"n0/pcie{i // 2}"
        assert g.has_edge(f"n0/gpu{i}", sw) and g.has_edge(sw, f"n0/gpu{i}")
    for k in range(4):
        assert g.has_edge(f"n0/pcie{k}", "n0/root") and g.has_edge("n0/root", f"n0/pcie{k}")
        # 4 NICs and 4 drives over 4 switches: one of each per switch.
        assert g.has_edge(f"n0/nic{k}", f"n0/pcie{k}") and g.has_edge(f"n0/nvme{k}", f"n0/pcie{k}")
        assert g.has_edge(f"n0/nic{k}", "fabric") and g.has_edge("fabric", f"n0/nic{k}")
    # 24 full-duplex links (8 GPU, 4 uplinks, 4 NIC-switch, 4 NIC-fabric, 4 drives) + 5 memory edges,
    # one copy-engine edge per direction per GPU, and each GPU's NVLink to its server's scale-up switch.
    assert sum(1 for u, v in g.edges if u.startswith("n0/") or v.startswith("n0/")) == 2 * 24 + 5 + 8 * 2 + 8 * 2
    domain = topo.scale_up_domain("n0/gpu0")
    assert domain is not None and domain != topo.scale_up_domain("n1/gpu0")  # one domain per server
    for i in range(8):
        assert g.edges[f"n0/gpu{i}", domain]["capacity_Bps"] == ACC.scale_up_bandwidth
    assert topo.path("n0/gpu0", "n0/gpu0") == []


def test_capacities_equal_spec_figures():
    cap = h20_cluster().capacity_Bps()
    assert cap[("n0/gpu3", "n0/pcie1")] == cap[("n0/pcie1", "n0/gpu3")] == 64e9  # PCIe Gen5 x16
    assert cap[("n0/pcie1", "n0/root")] == cap[("n0/root", "n0/pcie1")] == 2 * 64e9
    assert cap[("n0/nic2", "n0/pcie2")] == 64e9
    # 400 Gbit/s line rate x the delivered-over-line-rate efficiency (RDMA, NicSpec default)
    assert cap[("n0/nic2", "fabric")] == cap[("fabric", "n0/nic2")] == 400e9 / 8 * 0.975
    assert cap[("n0/nvme1", "n0/pcie1")] == 13000e6  # drive -> switch is a read
    assert cap[("n0/pcie1", "n0/nvme1")] == 6600e6  # switch -> drive is a write
    assert cap[("n0/imc", "n0/ddr")] == 614.4e9
    assert cap[("pool/media", "pool/pcie")] == DRAM_POOL.read_bandwidth
    assert cap[("pool/pcie", "pool/media")] == DRAM_POOL.write_bandwidth
    assert cap[("pool/nic1", "fabric")] == 400e9 / 8 * DRAM_POOL.nics.efficiency


def test_bad_names_and_endpoints():
    with pytest.raises(ValueError, match="unique"):
        build_topology([("n", NODE, ACC)], [("n", DRAM_POOL)])
    with pytest.raises(ValueError):
        build_topology([("a/b", NODE, ACC)])
    topo = h20_cluster()
    with pytest.raises(KeyError, match="n9"):
        topo.gpus("n9")
    with pytest.raises(KeyError, match="'n0/gpu99'"):
        topo.path("n0/gpu0", "n0/gpu99")
    with pytest.raises(ValueError, match="not a KV media"):
        topo.load_path("n0/root", "n0/gpu0", True)
    with pytest.raises(ValueError, match="not a GPU"):
        topo.store_path("n0/nic0", "pool/media", True)
    isolated = NODE.model_copy(update={"nics": NODE.nics.model_copy(update={"count": 0})})
    lone = build_topology([("n0", isolated, ACC)], [("pool", DRAM_POOL)])
    assert lone.nics("n0") == []
    with pytest.raises(ValueError, match="no NIC"):
        lone.load_path("pool/media", "n0/gpu0", True)
    deaf = DRAM_POOL.model_copy(update={"nics": DRAM_POOL.nics.model_copy(update={"count": 0})})
    with pytest.raises(ValueError, match="no NIC"):
        build_topology([("n0", NODE, ACC)], [("pool", deaf)])


# ---------------------------------------------------------------- data paths


@pytest.mark.parametrize("pool", [DRAM_POOL, NVME_POOL])
def test_remote_pool_gpu_direct_avoids_dram_and_bounce_crosses_it_twice(pool):
    topo = h20_cluster(pools=[("pool", pool)])
    for i in range(8):
        gpu = f"n0/gpu{i}"
        for edges in (topo.load_path("pool/media", gpu, True), topo.store_path(gpu, "pool/media", True)):
            nodes = {n for e in edges for n in e}
            assert "n0/dram" not in nodes and channel_crossings(topo, edges) == 0
            assert "n0/root" not in nodes  # the GPU's own switch has a NIC
            assert ("fabric" in nodes) and ("pool/media" in nodes)
        for edges in (topo.load_path("pool/media", gpu, False), topo.store_path(gpu, "pool/media", False)):
            assert channel_crossings(topo, edges) == 2
            assert sum(1 for u, v in edges if "n0/dram" in (u, v)) == 2  # into DRAM, then out
        # Consecutive edges chain, from the media to the GPU, then through its copy engine
        # (the host -> device copy of a bounce runs at the copy-engine rate).
        edges = topo.load_path("pool/media", gpu, False)
        assert edges[0][0] == "pool/media" and edges[-2][1] == gpu and edges[-1] == (gpu, f"{gpu}/h2d")
        assert all(a[1] == b[0] for a, b in zip(edges, edges[1:]))
        direct = topo.load_path("pool/media", gpu, True)
        assert not any(e[1].endswith("/h2d") for e in direct)  # GPU-Direct DMA skips the copy engine


def test_nic_choice_uses_own_switch_then_spreads():
    topo = h20_cluster()
    for i in range(8):
        edges = topo.load_path("pool/media", f"n0/gpu{i}", True)
        assert ("fabric", f"n0/nic{i // 2}") in edges  # the NIC on pcie{i // 2}
    # l20-8x: 2 NICs over 4 switches sit on pcie0 and pcie2; gpu2 (pcie1) uses nic0 via the root.
    l20 = build_topology([("n0", node_catalog()["l20-8x"], accelerator_catalog()["l20"])], [("pool", DRAM_POOL)])
    edges = l20.load_path("pool/media", "n0/gpu2", True)
    assert edges[-5:] == [("fabric", "n0/nic0"), ("n0/nic0", "n0/pcie0"), ("n0/pcie0", "n0/root"),
                          ("n0/root", "n0/pcie1"), ("n0/pcie1", "n0/gpu2")]
    assert ("n0/imc", "n0/ddr") not in edges


def test_path_latency_by_hand():
    topo = h20_cluster()
    pcie, rdma, copy = topo_mod.PCIE_HOP_LATENCY_S, topo_mod.RDMA_LATENCY_S, topo_mod.COPY_OVERHEAD_S
    media = DRAM_POOL.access_latency_s
    # media -> pool pcie -> pool NIC -> fabric -> NIC -> switch -> GPU
    direct = media + pcie + rdma + pcie + pcie
    assert topo.path_latency_s(topo.load_path("pool/media", "n0/gpu0", True)) == pytest.approx(direct, rel=1e-12)
    # Bounce adds switch -> root and root -> switch, and one DRAM -> GPU copy.
    bounce = direct + 2 * pcie + copy
    assert topo.path_latency_s(topo.load_path("pool/media", "n0/gpu0", False)) == pytest.approx(bounce, rel=1e-12)
    assert topo.path_latency_s(topo.store_path("n0/gpu0", "pool/media", False)) == pytest.approx(bounce, rel=1e-12)
    # Local host memory -> GPU: root -> switch -> GPU, one copy.
    assert topo.path_latency_s(topo.load_path("n0/dram", "n0/gpu0", True)) == pytest.approx(2 * pcie + copy)
    with pytest.raises(KeyError):
        topo.path_latency_s([("n0/gpu0", "n1/gpu0")])


def test_gpu_direct_never_slower_alone():
    topo = h20_cluster()
    direct = topo.load_path("pool/media", "n0/gpu3", True)
    bounce = topo.load_path("pool/media", "n0/gpu3", False)
    [t_direct] = timed(topo, [(direct, GIB)])
    [t_bounce] = timed(topo, [(bounce, GIB)])
    # Alone, both are held by the 400 Gbit/s NICs at their delivered 0.975 of line rate (the
    # channels give the bounce 614.4 / 2 GB/s).
    assert t_direct == pytest.approx(GIB / NIC_BPS + topo.path_latency_s(direct), rel=1e-12)
    assert t_bounce == pytest.approx(GIB / NIC_BPS + topo.path_latency_s(bounce), rel=1e-12)
    assert t_direct < t_bounce


def test_bounce_uses_dram_twice_so_narrow_dram_slows_it():
    # A node whose DDR channels give 60 GB/s in total (reads plus writes).
    slow = NODE.model_copy(update={"host_dram_bandwidth": 60e9})
    topo = h20_cluster(node=slow)
    direct = topo.load_path("pool/media", "n0/gpu3", True)
    bounce = topo.load_path("pool/media", "n0/gpu3", False)
    big = 100 * GIB
    competitor = topo.load_path("n0/dram", "n0/gpu0", True)  # outlasts the measured transfer
    [t_bounce] = timed(topo, [(bounce, GIB)])
    # Alone: crossing the channels twice, the bounce gets 60 / 2 = 30 GB/s (< 50 GB/s NIC).
    assert t_bounce == pytest.approx(GIB / 30e9 + topo.path_latency_s(bounce), rel=1e-12)
    # With a host-memory load on another GPU: channels 2t + t = 60 -> 20 GB/s each.
    t_bounce, _ = timed(topo, [(bounce, GIB), (competitor, big)])
    assert t_bounce == pytest.approx(GIB / 20e9 + topo.path_latency_s(bounce), rel=1e-12)
    # GPU-direct does not touch DRAM: it keeps the full NIC rate.
    t_direct, _ = timed(topo, [(direct, GIB), (competitor, big)])
    assert t_direct == pytest.approx(GIB / NIC_BPS + topo.path_latency_s(direct), rel=1e-12)
    assert t_direct < t_bounce


def test_reads_and_writes_share_the_dram_channels():
    slow = NODE.model_copy(update={"host_dram_bandwidth": 60e9})
    topo = h20_cluster(node=slow)
    store = topo.path("n0/gpu0", "n0/dram")
    load = topo.path("n0/dram", "n0/gpu2")
    # A store and a load at once split the 60 GB/s channels: 30 GB/s each (< 64 GB/s PCIe).
    t_store, t_load = timed(topo, [(store, GIB), (load, GIB)])
    assert t_store == pytest.approx(GIB / 30e9 + topo.path_latency_s(store), rel=1e-12)
    assert t_load == pytest.approx(GIB / 30e9 + topo.path_latency_s(load), rel=1e-12)


def test_local_dram_load_is_bound_by_the_copy_engine_on_pcie():
    topo = h20_cluster()
    edges = topo.load_path("n0/dram", "n0/gpu5", False)
    assert edges == topo.load_path("n0/dram", "n0/gpu5", True)
    [t] = timed(topo, [(edges, GIB)])
    latency = 2 * topo_mod.PCIE_HOP_LATENCY_S + topo_mod.COPY_OVERHEAD_S
    # pinned cudaMemcpy reaches host_copy (0.87 on Gen5) of the PCIe link, not the raw rate
    rate = ACC.host_link_bandwidth * ACC.efficiency.host_copy
    assert t == pytest.approx(GIB / rate + latency, rel=1e-12)


def test_nvme_direction_sets_the_bandwidth():
    topo = h20_cluster()
    pcie = topo_mod.PCIE_HOP_LATENCY_S
    # nvme0 and gpu0 share pcie0: drive -> switch -> GPU.
    read = topo.load_path("n0/nvme0", "n0/gpu0", True)
    write = topo.store_path("n0/gpu0", "n0/nvme0", True)
    assert read == [("n0/nvme0", "n0/pcie0"), ("n0/pcie0", "n0/gpu0")]
    assert write == [("n0/gpu0", "n0/pcie0"), ("n0/pcie0", "n0/nvme0")]
    [t_read] = timed(topo, [(read, GIB)])
    [t_write] = timed(topo, [(write, GIB)])
    assert t_read == pytest.approx(GIB / NODE.nvme.read_bandwidth + 2 * pcie + topo_mod.NVME_READ_LATENCY_S)
    assert t_write == pytest.approx(GIB / NODE.nvme.write_bandwidth + 2 * pcie + topo_mod.NVME_WRITE_LATENCY_S)
    # Without GDS the read is staged in host memory: channels twice, plus a copy.
    bounce = topo.load_path("n0/nvme0", "n0/gpu0", False)
    assert channel_crossings(topo, bounce) == 2 and bounce[0] == read[0] and bounce[-2] == read[-1]
    assert bounce[-1] == ("n0/gpu0", "n0/gpu0/h2d")


def test_remote_node_media_goes_over_the_fabric():
    topo = h20_cluster()
    edges = topo.load_path("n1/dram", "n0/gpu0", True)
    nodes = [e[0] for e in edges] + [edges[-1][1]]
    assert nodes[0] == "n1/dram" and nodes[-1] == "n0/gpu0" and "fabric" in nodes
    assert channel_crossings(topo, edges, "n1") == 1 and channel_crossings(topo, edges, "n0") == 0


def test_paths_are_deterministic_across_builds():
    pools = [("pool", DRAM_POOL), ("store", NVME_POOL)]
    a, b = h20_cluster(pools=pools), h20_cluster(pools=pools)
    assert list(a.capacity_Bps().items()) == list(b.capacity_Bps().items())
    media = ["pool/media", "store/media", "n0/dram", "n1/dram"] + a.nvmes("n0") + a.nvmes("n1")
    for gpu in a.gpus("n0") + a.gpus("n1"):
        for src in media:
            for gd in (True, False):
                assert a.load_path(src, gpu, gd) == b.load_path(src, gpu, gd)
                assert a.store_path(gpu, src, gd) == b.store_path(gpu, src, gd)
    # The pool NIC is spread by GPU name, not always nic0.
    used = {a.load_path("pool/media", gpu, True)[1][1] for gpu in a.gpus("n0") + a.gpus("n1")}
    assert used == {"pool/nic0", "pool/nic1"}
    assert not math.isnan(a.path_latency_s(a.load_path("store/media", "n1/gpu7", False)))
