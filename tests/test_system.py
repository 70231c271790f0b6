"""One live System: built once from its spec, wiring checked before the run, one front end, one
way to move bytes."""

from __future__ import annotations

import pytest
import simpy

import kvsim
from kvsim.hardware import accelerator_catalog, node_catalog
from kvsim.metrics.records import RequestRecords
from kvsim.network import FlowNetwork, Transfers, build_topology
from kvsim.rng import RandomStreams
from kvsim.sim import check_scenario
from kvsim.sim.build import WiringError, build_system

TEXT = """
name: sys
seed: 1
duration: 20 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 4/s}
  input_tokens: {kind: fixed, value: 500}
  output_tokens: {kind: fixed, value: 20}
systems:
  plain: {node: h20-8x, instances: 2}
  cached: {node: h20-8x, instances: 2, kv_cache: {dram: {capacity: 64 GiB}}}
  pd:
    pools:
      p: {node: h20-8x, instances: 1, role: prefill}
      d: {node: l20-8x, instances: 1, role: decode}
"""


def _build(name: str):
    scenario = kvsim.parse_scenario(TEXT, "sys.yaml")
    sizing = check_scenario(scenario)[(0, name)]
    env = simpy.Environment()
    return build_system(env, scenario.spec, sizing, RequestRecords(16), RandomStreams(1), 16)


@pytest.mark.parametrize("name", ["plain", "cached", "pd"])
def test_every_system_has_its_topology_and_network_and_passes_the_wiring_check(name):
    system = _build(name)
    system.check()
    assert system.topology.compute_nodes and system.network.active_flows == 0
    assert (system.cache is not None) == (name == "cached")
    assert (system.handoff is not None) == (name == "pd")
    for inst, place in zip(system.instances, system.placements):
        assert inst.gpus == list(place.gpus) and inst.role == place.pool.role


def test_the_wiring_check_names_what_is_missing():
    system = _build("pd")
    system.instances[1].on_finish = lambda *_: None
    with pytest.raises(WiringError, match="instance 1 .*finished requests do not reach the front end"):
        system.check()
    system = _build("cached")
    system.instances[0].scheduler.hook.scheduler = None
    with pytest.raises(WiringError, match="instance 0 .*cache is not attached"):
        system.check()


def test_pools_get_their_own_nodes_and_instances_are_numbered_across_pools():
    system = _build("pd")
    assert system.topology.compute_nodes == ("p.node0", "d.node0")
    assert [(i.index, i.role, i.gpus[0]) for i in system.instances] == [
        (0, "prefill", "p.node0/gpu0"), (1, "decode", "d.node0/gpu0")]


@pytest.mark.parametrize("workload", [
    "arrival: {kind: poisson, rate: 6/s}\n  input_tokens: {kind: fixed, value: 300}\n"
    "  output_tokens: {kind: fixed, value: 10}",
    "arrival: {kind: closed_loop, clients: 3}\n  input_tokens: {kind: fixed, value: 300}\n"
    "  output_tokens: {kind: fixed, value: 10}",
    "arrival: {kind: poisson, rate: 1/s}\n  prefix: {kind: multi_turn, turns: {kind: fixed, value: 3}, "
    "message_tokens: {kind: fixed, value: 100}, system_prompt_tokens: 64, think_time: 1 s}\n"
    "  output_tokens: {kind: fixed, value: 10}",
])
def test_every_workload_kind_enters_and_leaves_through_the_one_front_end(built_systems, workload):
    systems = built_systems
    text = f"""
name: fe
seed: 3
duration: 15 s
model: qwen3-8b
workload:
  {workload}
systems:
  s: {{node: h20-8x, instances: 2}}
"""
    run = kvsim.run(kvsim.parse_scenario(text, "fe.yaml")).runs[0]
    front = systems[0].front
    assert front.submitted == run.records.n > 0
    assert front.completed == front.submitted  # the run drained: every request left once
    assert systems[0].in_system.value == 0


# ------------------------------------------------------------------------------- transfers


def _transfers():
    node, acc = node_catalog()["h20-8x"], accelerator_catalog()["h20"]
    # the NICs at line rate (efficiency 1): these tests are about how transfers share links
    node = node.model_copy(update={"nics": node.nics.model_copy(update={"efficiency": 1.0})})
    topology = build_topology([("a", node, acc), ("b", node, acc)])
    env = simpy.Environment()
    return env, Transfers(env, topology, FlowNetwork(env, topology.capacity_Bps(), 0.0, 100.0))


def test_a_transfer_on_idle_links_takes_bytes_over_the_bottleneck_plus_the_path_latency():
    env, transfers = _transfers()
    path = transfers.topology.peer_path("a/gpu0", "b/gpu0")  # GPU-Direct RDMA, NIC to NIC
    nbytes = 1e9
    done = transfers.move([path], nbytes, "handoff")
    env.run()
    latency = transfers.topology.path_latency_s(path)
    # bottleneck: the 400 Gbit/s NIC (50 GB/s) below the card's 64 GB/s PCIe; 4 PCIe hops + RDMA
    assert latency == pytest.approx(4e-6 + 3e-6)
    assert done.value == pytest.approx(nbytes / 50e9 + latency, rel=1e-12)
    assert transfers.uncontended_s([path], nbytes) == pytest.approx(done.value, rel=1e-12)
    assert transfers.bytes_by_purpose == {"handoff": nbytes}


def test_flows_of_one_transfer_share_the_links_they_cross():
    env, transfers = _transfers()
    # gpu0 and gpu1 sit on one PCIe switch and leave by that switch's NIC: they share it
    paths = [transfers.topology.peer_path(f"a/gpu{i}", f"b/gpu{i}") for i in (0, 1)]
    assert paths[0][2:4] == paths[1][2:4]
    done = transfers.move(paths, 1e9, "handoff")
    env.run()
    assert done.processed
    assert env.now == pytest.approx(2e9 / 50e9 + transfers.topology.path_latency_s(paths[0]), rel=1e-9)
    assert transfers.uncontended_s(paths, 1e9) == pytest.approx(env.now, rel=1e-9)


def test_a_copy_inside_a_scale_up_domain_uses_the_scale_up_links():
    node, acc = node_catalog()["h20-8x"], accelerator_catalog()["h20"]
    topology = build_topology([("a", node, acc), ("b", node, acc)], scale_up_domains=[["a", "b"]])
    path = topology.peer_path("a/gpu0", "b/gpu3")
    assert path == [("a/gpu0", "su0"), ("su0", "b/gpu3")]
    assert topology.path_latency_s(path) == pytest.approx(3e-6)
    # host, NIC and storage paths never cross a scale-up link
    assert all(topology.graph.edges[e]["kind"] != "scale_up" for e in topology.load_path("a/dram", "a/gpu1", True))
    with pytest.raises(ValueError, match="without a scale-up link"):
        build_topology([("a", node_catalog()["l20-8x"], accelerator_catalog()["l20"])], scale_up_domains=[["a"]])


def test_a_cancelled_transfer_stops_every_flow_and_counts_only_the_bytes_it_delivered():
    env, transfers = _transfers()
    paths = [transfers.topology.peer_path(f"a/gpu{i}", f"b/gpu{i}") for i in (0, 1)]
    done = transfers.move(paths, 1e9, "handoff", cancellable=True)
    other = transfers.move([paths[1]], 1e9, "cache_load")  # the same NIC (and gpu1's PCIe link)
    result = {}

    def stop():
        # three flows share the 50 GB/s NIC at 50/3 GB/s each: at 30 ms each moved 0.5 GB
        yield env.timeout(0.03)
        result["delivered"] = transfers.cancel(done)
        result["again"] = transfers.cancel(done)

    env.process(stop())
    env.run()
    assert result["delivered"] == pytest.approx(1e9, rel=1e-9)
    assert result["again"] == 0.0
    assert not done.triggered
    assert transfers.bytes_by_purpose == {"handoff": pytest.approx(1e9, rel=1e-9), "cache_load": 1e9}
    assert transfers.transfers_by_purpose == {"handoff": 1, "cache_load": 1}
    # the survivor had 0.5 GB left at 30 ms and then the NIC to itself: 10 ms more, plus latency
    latency = transfers.topology.path_latency_s(paths[0])
    assert other.value == pytest.approx(0.03 + 0.5e9 / 50e9 + latency, rel=1e-9)
