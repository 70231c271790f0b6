"""NIC slots and delivered-over-line-rate efficiency (issue 24, item 3), against closed forms.

A NIC's network link runs at ``line rate x efficiency``; its PCIe slot at its own generation and
width (or the card's host link when the node gives none); it sits on the card switch the node
names, sharing that switch's uplink with the switch's cards, or on a root port of its own.
"""

from __future__ import annotations

import pytest

from flow_timing import timed
from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.hardware.specs import NicSpec, NodeSpec, PoolNodeSpec, pcie_bandwidth
from kvsim.network import build_topology
from kvsim.scenario.storage_bench import parse_storage_bench
from kvsim.yaml_io import SpecError

GIB = 2.0**30
L20, L20_NODE = accelerator_catalog()["l20"], node_catalog()["l20-8x"]
H20, H20_NODE = accelerator_catalog()["h20"], node_catalog()["h20-8x"]
DRAM_POOL = pool_node_catalog()["dram-pool-8x"]


def _nics(node: NodeSpec, **fields) -> NodeSpec:
    return node.model_copy(update={"nics": NicSpec.model_validate({**node.nics.model_dump(), **fields})})


def test_pcie_slot_rates_are_the_generations_transfer_rate_after_line_encoding():
    assert pcie_bandwidth(4, 16) == pytest.approx(16e9 * 16 * 128 / 130 / 8)  # 31.5 GB/s
    assert pcie_bandwidth(5, 16) == pytest.approx(2 * pcie_bandwidth(4, 16))
    assert pcie_bandwidth(5, 8) == pytest.approx(pcie_bandwidth(4, 16))
    assert NicSpec(count=1, bandwidth=50e9, pcie="PCIe gen5 x16").pcie == "Gen5 x16"
    assert NicSpec(count=1, bandwidth=50e9, pcie="Gen5 x16").slot_bandwidth == pytest.approx(63.015e9, rel=1e-4)
    assert NicSpec(count=1, bandwidth=50e9).slot_bandwidth is None


def test_nic_efficiency_on_a_single_flow():
    # One GPU-Direct read from a DRAM pool into an H20 card: the 400 Gbit/s NICs bind (the card's
    # PCIe is 64 GB/s, the pool's DRAM 460.8 GB/s), at line rate x efficiency.
    for efficiency in (1.0, 0.975, 0.5):
        node = _nics(H20_NODE, efficiency=efficiency)
        topo = build_topology([("n0", node, H20)], [("pool", DRAM_POOL)])
        path = topo.load_path("pool/media", "n0/gpu0", True)
        [done] = timed(topo, [(path, GIB)])
        # the pool's NIC delivers its own 0.975, so the slower of the two ends binds
        rate = 50e9 * min(efficiency, DRAM_POOL.nics.efficiency)
        assert done == pytest.approx(GIB / rate + topo.path_latency_s(path), rel=1e-12)
    # the pool node's NIC efficiency applies the same way when it is the lower one
    slow_pool = DRAM_POOL.model_copy(update={"nics": DRAM_POOL.nics.model_copy(update={"efficiency": 0.8})})
    topo = build_topology([("n0", H20_NODE, H20)], [("pool", slow_pool)])
    path = topo.load_path("pool/media", "n0/gpu0", True)
    [done] = timed(topo, [(path, GIB)])
    assert done == pytest.approx(GIB / (50e9 * 0.8) + topo.path_latency_s(path), rel=1e-12)


def test_a_400g_nic_on_a_gen5_slot_is_not_held_to_the_l20s_gen4_link():
    one_nic = {"count": 1, "bandwidth": 50e9}
    inherited = _nics(L20_NODE, **one_nic, pcie=None)  # the rule before slots: the card's Gen4 x16
    gen4 = _nics(L20_NODE, **one_nic, pcie="Gen4 x16")
    gen5 = _nics(L20_NODE, **one_nic, pcie="Gen5 x16")
    single, pair = {}, {}
    for label, node in (("inherited", inherited), ("gen4", gen4), ("gen5", gen5)):
        topo = build_topology([("n0", node, L20)], [("pool", DRAM_POOL)])
        paths = [topo.load_path("pool/media", f"n0/gpu{i}", True) for i in (0, 1)]  # the NIC's two cards
        [single[label]] = timed(topo, [(paths[0], GIB)])
        single[label] -= topo.path_latency_s(paths[0])
        pair[label], _ = timed(topo, [(path, GIB) for path in paths])
        pair[label] -= topo.path_latency_s(paths[0])
    # One card alone: its own Gen4 x16 link (32 GB/s) binds GPU-Direct whatever the NIC's slot,
    # except a described Gen4 x16 slot, 31.5 GB/s after line encoding.
    assert single["inherited"] == pytest.approx(GIB / L20.host_link_bandwidth, rel=1e-12)
    assert single["gen4"] == pytest.approx(GIB / pcie_bandwidth(4, 16), rel=1e-12)
    assert single["gen5"] == pytest.approx(GIB / L20.host_link_bandwidth, rel=1e-12)
    # Two cards behind one NIC: on a Gen4 slot the slot binds (32 or 31.5 GB/s shared: half each);
    # on a Gen5 slot (63 GB/s) the NIC's delivered 48.75 GB/s does (24.4 GB/s each).
    assert pair["inherited"] == pytest.approx(2 * GIB / L20.host_link_bandwidth, rel=1e-12)
    assert pair["gen4"] == pytest.approx(2 * GIB / pcie_bandwidth(4, 16), rel=1e-12)
    assert pair["gen5"] == pytest.approx(2 * GIB / (50e9 * 0.975), rel=1e-12)
    # the catalog's L20 server seats its NICs in Gen5 x16 slots
    assert L20_NODE.nics.pcie == "Gen5 x16"


def test_a_nic_sharing_a_switch_with_two_cards_shares_its_uplink():
    # Two L20 cards store to host DRAM (copy engines at 32 x 0.87 = 27.84 GB/s each) while a
    # bounce read lands from the network in host DRAM through a NIC; all three go up a PCIe
    # switch's uplink to the root complex, 2 x 32 = 64 GB/s, if the NIC shares the cards' switch.
    shared = _nics(L20_NODE, count=1, bandwidth=50e9, pcie="Gen5 x16", switch=[0])
    own_port = _nics(L20_NODE, count=1, bandwidth=50e9, pcie="Gen5 x16", switch="root")
    results = {}
    for label, node in (("shared", shared), ("root", own_port)):
        topo = build_topology([("n0", node, L20)], [("pool", DRAM_POOL)])
        nic, dram = topo.nics("n0")[0], topo.dram("n0")
        inbound = [("pool/media", "pool/pcie")] + topo.path("pool/pcie", nic) + topo.path(nic, dram)
        stores = [topo.store_path(f"n0/gpu{i}", dram, True) for i in (0, 1)]
        results[label] = (topo, inbound, stores, timed(topo, [(inbound, GIB)] + [(s, GIB) for s in stores]))
    topo, inbound, stores, (t_nic, t_gpu0, _) = results["shared"]
    assert topo.graph.nodes["n0/nic0"]["switch"] == "n0/pcie0"
    # max-min on the 64 GB/s uplink: three flows, none capped below 64/3, so 21.33 GB/s each
    share = 2 * L20.host_link_bandwidth / 3
    assert t_nic == pytest.approx(GIB / share + topo.path_latency_s(inbound), rel=1e-9)
    assert t_gpu0 == pytest.approx(GIB / share + topo.path_latency_s(stores[0]), rel=1e-9)
    topo, inbound, stores, (t_nic, t_gpu0, _) = results["root"]
    assert topo.graph.nodes["n0/nic0"]["switch"] == "n0/root"
    # on a root port of its own the NIC keeps its delivered rate; the cards their copy engines'
    assert t_nic == pytest.approx(GIB / (50e9 * 0.975) + topo.path_latency_s(inbound), rel=1e-9)
    copy = L20.host_link_bandwidth * L20.efficiency.host_copy
    assert t_gpu0 == pytest.approx(GIB / copy + topo.path_latency_s(stores[0]), rel=1e-9)


def test_nics_are_placed_on_the_switches_the_node_names():
    node = _nics(H20_NODE, count=3, switch=[3, "root", 1])
    topo = build_topology([("n0", node, H20)])
    g = topo.graph
    assert [g.nodes[nic]["switch"] for nic in topo.nics("n0")] == ["n0/pcie3", "n0/root", "n0/pcie1"]
    # a card uses the NIC on its own switch when there is one
    path = topo.store_path("n0/gpu7", "n0/dram", True)
    assert ("n0/gpu7", "n0/pcie3") in path
    default = build_topology([("n0", _nics(H20_NODE, count=2), H20)])
    assert [default.graph.nodes[nic]["switch"] for nic in default.nics("n0")] == ["n0/pcie0", "n0/pcie2"]


BENCH = """
name: b
duration: 0.1 s
clients: {{node: x, nodes: 1}}
pool: {{pool_node: {pool}}}
block_size: 8 MiB
catalog:
  nodes:
    x: {{base: l20-8x, nics: {nics}}}
  pool_nodes:
    p: {{base: nvme-gen5-16x, nics: {pool_nics}}}
"""


@pytest.mark.parametrize("nics, pool_nics, message", [
    ("{pcie: Gen7 x16}", "{}", "nics.pcie: 'Gen7 x16': PCIe generation 7 is not one of 3, 4, 5, 6"),
    ("{pcie: Gen5 x12}", "{}", "x12 is not a PCIe link width"),
    ("{pcie: 5}", "{}", "5 is not a PCIe slot such as 'Gen5 x16'"),
    ("{switch: [0, -1]}", "{}", "does not place NICs"),
    ("{switch: [0]}", "{}", "1 place(s) for 2 NIC(s)"),
    ("{switch: [0, 4]}", "{}", "switch 4 does not exist: 8 cards sit on 4 PCIe switch(es)"),
    ("{efficiency: 1.2}", "{}", "nics.efficiency: must be in (0, 1]"),
    ("{}", "{switch: root}", "nics.switch: a pool node has one I/O complex"),
])
def test_bad_nic_descriptions_get_one_clear_message_naming_file_field_and_line(nics, pool_nics, message):
    text = BENCH.format(pool="p", nics=nics, pool_nics=pool_nics)
    with pytest.raises(SpecError) as caught:
        parse_storage_bench(text, "bench.yaml")
    problems = caught.value.problems
    found = [p for p in problems if message in p]
    assert len(found) == 1, problems
    line = 9 if not pool_nics.strip("{}") else 11
    assert found[0].startswith(f"bench.yaml:{line}: catalog.")


def test_pool_nodes_without_a_slot_keep_their_nics_pcie_at_line_rate():
    topo = build_topology([("n0", H20_NODE, H20)], [("pool", DRAM_POOL)])
    assert topo.graph.edges["pool/nic0", "pool/pcie"]["capacity_Bps"] == DRAM_POOL.nics.bandwidth
    gen5 = pool_node_catalog()["nvme-gen5-16x"]
    assert isinstance(gen5, PoolNodeSpec)
    topo = build_topology([("n0", H20_NODE, H20)], [("pool", gen5)])
    assert topo.graph.edges["pool/nic0", "pool/pcie"]["capacity_Bps"] == pytest.approx(pcie_bandwidth(5, 16))
    assert topo.graph.edges["pool/nic0", "fabric"]["capacity_Bps"] == pytest.approx(50e9 * 0.806)
