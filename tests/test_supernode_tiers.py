"""Supernode tiers (issue 26 item 6): a scale-up fabric of a first layer of groups and a second
layer joining them (``scale_up: {tiers: [...]}``), with oversubscribed uplinks and a per-message
latency per transport. Every expected figure below is worked out by hand from the formulas in
docs/explanation/supernode-tiers.md, not read off the code.
"""

from __future__ import annotations

import pytest

import kvsim
from flow_timing import timed
from kvsim.hardware import accelerator_catalog, node_catalog
from kvsim.models.collectives import allreduce_s
from kvsim.models.parallel import (
    GroupLinks,
    Layout,
    alltoall_bytes_per_card,
    alltoall_s,
    alltoall_tier_bytes,
    group_allreduce_s,
)
from kvsim.network.tiers import MEMORY_SEMANTIC_MESSAGE_S, MESSAGE_PASSING_MESSAGE_S, ScaleUpSpec, ScaleUpTierSpec
from kvsim.network.topology import build_topology
from kvsim.sim.layout_links import layout_links

H20_NVLINK_Bps = 450e9  # per direction (catalog h20, [AIC] intra_node_bw)


def _tiers(*tiers: dict) -> ScaleUpSpec:
    return ScaleUpSpec(tiers=[ScaleUpTierSpec(**tier) for tier in tiers])


# ------------------------------------------------------------------------------ all-to-all bytes


def test_alltoall_bytes_over_each_tier_by_hand():
    # 16 cards in two first-layer groups of 8, one domain: a card's 15 destinations are 7 in its
    # group and 8 in the other; 1,500 bytes spread evenly: 100 a destination.
    links = GroupLinks(cards=16, domains=1, local_Bps=1.0, local_latency_s=0.0, group_cards=8)
    assert alltoall_tier_bytes(1500.0, links) == pytest.approx((700.0, 800.0, 0.0))
    # 32 cards, two domains of 16, groups of 8: 7, 8 and 16 of 31 destinations; 31 bytes each
    links = GroupLinks(cards=32, domains=2, local_Bps=1.0, local_latency_s=0.0, group_cards=8)
    assert alltoall_tier_bytes(31 * 31.0, links) == pytest.approx((7 * 31.0, 8 * 31.0, 16 * 31.0))


def test_kimi_k2_dispatch_across_two_groups_by_hand():
    # Kimi K2 (384 routed experts, 8 per token, hidden 7168) at EP 128 on 16 Atlas 850E nodes in
    # two first-layer groups of 8 nodes (64 cards): 3 experts a rank. A token misses a given rank
    # with probability C(381, 8) / C(384, 8) = (376 * 375 * 374) / (384 * 383 * 382).
    miss = (376 * 375 * 374) / (384 * 383 * 382)
    ranks_per_token = 127 * (1 - miss)
    tokens_per_card, act = 4, 2  # bf16 activations
    per_card = tokens_per_card * ranks_per_token * 7168 * act
    assert alltoall_bytes_per_card(tokens_per_card, 7168, act, 384, 8, 128) == pytest.approx(per_card)
    node = node_catalog()["atlas-850e"]
    acc = accelerator_catalog()[node.accelerator]
    layout = Layout(tp=128, ep=128, dp_attention=128)
    stage = layout_links(layout, node, acc, 16, _tiers({"nodes": 8}, {"nodes": 16})).stage
    assert (stage.cards, stage.domains, stage.group_cards) == (128, 1, 64)
    # 63 of a card's 127 peers share its group, 64 sit in the other
    first, second, nics = alltoall_tier_bytes(per_card, stage)
    assert first == pytest.approx(per_card * 63 / 127)
    assert second == pytest.approx(per_card * 64 / 127)
    assert nics == 0.0


# ------------------------------------------------------------------------------ times


def test_alltoall_time_crossing_tiers_by_hand():
    links = GroupLinks(cards=16, domains=1, local_Bps=800e9, local_latency_s=10e-6, group_cards=8,
                       tier2_Bps=200e9, tier2_latency_s=12e-6, local_message_s=0.5e-6, tier2_message_s=6.8e-6)
    # 1.5 MB a card: all of it leaves by the card's ports at 800 GB/s (1.875 us), 0.8 MB of it
    # crosses the second layer at 200 GB/s (4 us); the busier decides, plus the slowest latency
    # crossed with its message term.
    expected = 0.8e6 / 200e9 + (12e-6 + 6.8e-6)
    assert alltoall_s(1.5e6, links) == pytest.approx(expected)
    # the busiest rank receives imbalance times the mean
    assert alltoall_s(1.5e6, links, imbalance=2.0) == pytest.approx(1.6e6 / 200e9 + 18.8e-6)
    # a fast second layer: the card's ports decide, carrying both shares
    fast = GroupLinks(cards=16, domains=1, local_Bps=800e9, local_latency_s=10e-6, group_cards=8,
                      tier2_Bps=800e9, tier2_latency_s=10e-6)
    assert alltoall_s(1.5e6, fast) == pytest.approx(1.5e6 / 800e9 + 10e-6)


def test_allreduce_crossing_tiers_is_hierarchical_by_hand():
    a1, a2, b1, b2 = 10e-6, 12e-6, 800e9, 200e9
    links = GroupLinks(cards=16, domains=1, local_Bps=b1, local_latency_s=a1, group_cards=8, tier2_Bps=b2,
                       tier2_latency_s=a2)
    n = 64e6  # large: bandwidth-bound, the hierarchy pays
    # reduce-scatter + all-gather in the group of 8: 14 steps of a1 and 2 * 7/8 * n / b1; then the
    # 8 MB shards all-reduced across the 2 groups: cheaper of recursive doubling (a2 + 8 MB / b2)
    # and a ring (2 a2 + 8 MB / b2): recursive doubling
    hierarchical = 14 * a1 + 2 * 7 / 8 * n / b1 + (a2 + n / 8 / b2)
    flat_ring = 30 * a2 + 2 * 15 / 16 * n / b2  # every step on the slowest tier
    assert hierarchical < flat_ring
    assert group_allreduce_s(n, links) == pytest.approx(hierarchical)
    # tiny: the flat recursive doubling over 16 cards (4 steps of the slowest hop) is cheaper
    tiny = 1e3
    flat_rd = 4 * (a2 + tiny / b2)
    assert flat_rd < 14 * a1 + 2 * 7 / 8 * tiny / b1 + (a2 + tiny / 8 / b2)
    assert group_allreduce_s(tiny, links) == pytest.approx(flat_rd)


def test_memory_semantic_and_message_passing_differ_by_the_per_message_latency():
    node = node_catalog()["atlas-850e"]
    acc = accelerator_catalog()[node.accelerator]
    layout = Layout(tp=64, ep=64, dp_attention=64)  # 8 nodes: one first-layer group
    links = {t: layout_links(layout, node, acc, 8, _tiers({"nodes": 8, "transport": t})).stage
             for t in ("memory_semantic", "message_passing")}
    delta = MESSAGE_PASSING_MESSAGE_S - MEMORY_SEMANTIC_MESSAGE_S
    assert delta == pytest.approx(6.3e-6)
    small, large = 7168 * 2 * 8.0, 7168 * 2 * 8.0 * 4096  # one token's dispatch vs a prefill chunk's
    for nbytes in (small, large):  # an all-to-all pays the term once
        gap = alltoall_s(nbytes, links["message_passing"]) - alltoall_s(nbytes, links["memory_semantic"])
        assert gap == pytest.approx(delta)
    ratio = {n: alltoall_s(n, links["message_passing"]) / alltoall_s(n, links["memory_semantic"])
             for n in (small, large)}
    # latency-bound small messages: (10 us + 6.8 us) / (10 us + 0.5 us) = 1.6 (the catalog's
    # collective latency, plus nearly nothing on the wire); large ones near 1
    assert ratio[small] == pytest.approx((10e-6 + 6.8e-6 + small / (1e12 * 0.8)) / (10e-6 + 0.5e-6 + small / 0.8e12))
    assert ratio[small] > 1.55 and ratio[large] < 1.1
    # an all-reduce pays it once a step: recursive doubling over 64 cards, 6 steps
    tiny = 1e3
    gap = group_allreduce_s(tiny, links["message_passing"]) - group_allreduce_s(tiny, links["memory_semantic"])
    assert gap == pytest.approx(6 * delta)


# ------------------------------------------------------------------------------ the flow network


def _two_group_topology(oversubscription: float):
    node = node_catalog()["h20-8x"]
    acc = accelerator_catalog()[node.accelerator]
    tiers = _tiers({"nodes": 1}, {"nodes": 2, "oversubscription": oversubscription})
    return build_topology([("a", node, acc), ("b", node, acc)], scale_up_domains=[["a", "b"]], scale_up=tiers)


def test_oversubscription_halves_the_cross_tier_share():
    topos = {o: _two_group_topology(o) for o in (1.0, 2.0)}
    for o, topo in topos.items():
        # leaf-spine uplink: the group's 8 cards x 450 GB/s / oversubscription
        assert topo.graph.edges["su0.g0", "su0"]["capacity_Bps"] == pytest.approx(8 * H20_NVLINK_Bps / o)
        assert topo.peer_path("a/gpu0", "b/gpu0") == [("a/gpu0", "su0.g0"), ("su0.g0", "su0"), ("su0", "su0.g1"),
                                                      ("su0.g1", "b/gpu0")]
        assert topo.peer_path("a/gpu0", "a/gpu1") == [("a/gpu0", "su0.g0"), ("su0.g0", "a/gpu1")]
    # all 8 cards of a copy 45 GB each to their peer in the other group at once: non-blocking,
    # each runs at its card link (0.1 s); at 2:1 the uplink gives each half of it (0.2 s)
    nbytes = 45e9
    times = {}
    for o, topo in topos.items():
        transfers = [(topo.peer_path(f"a/gpu{i}", f"b/gpu{i}"), nbytes) for i in range(8)]
        latency = topo.path_latency_s(transfers[0][0])
        times[o] = [t - latency for t in timed(topo, transfers)]
    assert times[1.0] == pytest.approx([nbytes / H20_NVLINK_Bps] * 8)
    assert times[2.0] == pytest.approx([nbytes / (H20_NVLINK_Bps / 2)] * 8)
    # inside a group the uplink is not crossed: the card rate, oversubscribed or not
    topo = topos[2.0]
    inside = timed(topo, [(topo.peer_path("a/gpu0", "a/gpu1"), nbytes)])[0]
    assert inside - topo.path_latency_s(topo.peer_path("a/gpu0", "a/gpu1")) == pytest.approx(0.1)


def test_cross_group_latency_is_the_second_tier_latency():
    node = node_catalog()["h20-8x"]
    acc = accelerator_catalog()[node.accelerator]
    tiers = _tiers({"nodes": 1, "latency": 2e-6}, {"nodes": 2, "latency": 5e-6})
    topo = build_topology([("a", node, acc), ("b", node, acc)], scale_up_domains=[["a", "b"]], scale_up=tiers)
    assert topo.path_latency_s(topo.peer_path("a/gpu0", "b/gpu3")) == pytest.approx(5e-6)
    assert topo.path_latency_s(topo.peer_path("a/gpu0", "a/gpu3")) == pytest.approx(2e-6)


# ------------------------------------------------------------------------------ validation


@pytest.mark.parametrize("system, fragment, field", [
    ("node: h20-8x\n    nodes: 4\n    scale_up: {tiers: [{nodes: 1}, {nodes: 2}, {nodes: 4}]}",
     "at most 2", "systems.s.scale_up.tiers"),
    ("node: h20-8x\n    nodes: 4\n    scale_up: {tiers: [{nodes: 2}, {nodes: 3}]}",
     "multiple of the first layer's 2 nodes", "systems.s.scale_up.tiers[1].nodes"),
    ("node: h20-8x\n    nodes: 4\n    scale_up: {tiers: [{nodes: 2, oversubscription: 2}, {nodes: 4}]}",
     "second layer's uplinks", "systems.s.scale_up.tiers[0].oversubscription"),
    ("node: h20-8x\n    nodes: 4\n    scale_up: {tiers: [{nodes: 2, latency: 3 us}, {nodes: 4, latency: 1 us}]}",
     "adds switch hops", "systems.s.scale_up.tiers[1].latency"),
    ("node: h20-8x\n    nodes: 4\n    scale_up_domain_nodes: 4\n    scale_up: {tiers: [{nodes: 4}]}",
     "not both", "systems.s.scale_up_domain_nodes"),
    ("node: h20-8x\n    nodes: 4\n    scale_up: {tiers: [{nodes: 2}, {nodes: 4, oversubscription: 0.5}]}",
     "greater than or equal to 1", "systems.s.scale_up.tiers[1].oversubscription"),
    ("node: h20-8x\n    nodes: 4\n    scale_up: {tiers: [{nodes: 2, transport: rdma}]}",
     "memory_semantic", "systems.s.scale_up.tiers[0].transport"),
    ("node: h20-8x\n    nodes: 6\n    scale_up: {tiers: [{nodes: 2}, {nodes: 4}]}",
     "does not divide the 6 nodes", "systems.s.scale_up.tiers[1].nodes"),
    ("node: h20-8x\n    nodes: 4\n    scale_up: {tiers: [{nodes: 2}, {nodes: 4, latency: 1 us}]}",
     "below the first layer's 3 us (h20's", "systems.s.scale_up.tiers[1].latency"),
    ("node: l20-8x\n    nodes: 2\n    scale_up: {tiers: [{nodes: 2}]}",
     "no card of this system has a scale-up link", "systems.s.scale_up"),
])
def test_bad_tiers_are_refused_with_the_field(refused, system, fragment, field):
    err = refused(system)
    assert fragment in err and field in err and "bad.yaml:" in err


# ------------------------------------------------------------------------------ defaults


def test_without_tiers_the_collectives_are_the_flat_model():
    links = GroupLinks(cards=16, domains=2, local_Bps=400e9, local_latency_s=10e-6, remote_Bps=40e9,
                       remote_latency_s=17e-6)
    for n in (1e3, 1e8):
        assert group_allreduce_s(n, links) == allreduce_s(n, 16, 17e-6, 40e9)
    local, remote = 1e6 * 7 / 15, 1e6 * 8 / 15
    assert alltoall_s(1e6, links) == pytest.approx(max(local / 400e9, remote / 40e9) + 17e-6)


def test_one_tier_with_the_cards_figures_is_scale_up_domain_nodes():
    node = node_catalog()["h20-8x"]
    acc = accelerator_catalog()[node.accelerator]
    nodes = [(name, node, acc) for name in ("a", "b")]
    flat = build_topology(nodes, scale_up_domains=[["a", "b"]])
    tiered = build_topology(nodes, scale_up_domains=[["a", "b"]], scale_up=_tiers({"nodes": 2}))
    assert flat.capacity_Bps() == tiered.capacity_Bps()
    assert [flat.path_latency_s([e]) for e in flat.capacity_Bps()] == \
        [tiered.path_latency_s([e]) for e in tiered.capacity_Bps()]


RUN = """
name: t
seed: 1
duration: 20 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 4/s}}
  input_tokens: {{kind: fixed, value: 4000}}
  output_tokens: {{kind: fixed, value: 20}}
systems:
  s:
    pools:
      prefill: {{node: h20-8x, nodes: 2, instance: {{tp: 8}}, role: prefill}}
      decode: {{node: h20-8x, nodes: 2, instance: {{tp: 8}}, role: decode}}
    {fabric}
"""


def test_a_run_with_one_default_tier_matches_scale_up_domain_nodes():
    digests = {fabric: kvsim.run(kvsim.parse_scenario(RUN.format(fabric=fabric), "t.yaml")).records_digest()
               for fabric in ("scale_up_domain_nodes: 4", "scale_up: {tiers: [{nodes: 4}]}")}
    assert len(set(digests.values())) == 1


def test_a_run_whose_handoffs_cross_a_slow_second_layer_takes_longer():
    # prefill on nodes 0-1 (group 0), decode on 2-3 (group 1): every handoff crosses the second
    # layer. A 4,000-token prompt's KV (Qwen3-8B bf16, 147,456 bytes a token) is 73.7 MB on each
    # of the instance's 8 cards, copied card to card. The uplink is the group's: 16 cards x 16 GB/s
    # = 256 GB/s, which the 8 copies share at 32 GB/s each (2.30 ms) against 450 GB/s (0.16 ms).
    per_card = 4000 * 147_456 / 8
    frames = {}
    for bandwidth in (None, 16e9):
        tier = "{nodes: 4}" if bandwidth is None else "{nodes: 4, bandwidth: 16 GB/s}"
        fabric = f"kv_handoff: {{mode: whole}}\n    scale_up: {{tiers: [{{nodes: 2}}, {tier}]}}"
        run = kvsim.run(kvsim.parse_scenario(RUN.format(fabric=fabric), "t.yaml"))
        frame = run.runs[0].records.to_frame()
        frames[bandwidth] = (frame["handoff_end_s"] - frame["handoff_start_s"]).dropna()
    fast, slow = frames[None], frames[16e9]
    assert len(fast) == len(slow) > 10
    # the quickest handoff of each ran alone on its links
    assert slow.min() - fast.min() == pytest.approx(per_card / (16 * 16e9 / 8) - per_card / H20_NVLINK_Bps,
                                                   rel=1e-6)


def test_sizing_gives_a_layout_the_tiers_it_spans():
    # EP 128 on 16 Atlas 850E servers as two groups of 8 over a 4:1 second layer: the stage is one
    # domain of 128 cards in groups of 64; a card's second-layer share is 1 TB/s / 4 x 0.8
    # (catalog: 950DT scale-up 1 TB/s per direction, interconnect efficiency 0.8)
    from kvsim.sim.sizing import size_system

    text = """
name: t
duration: 10 s
model: kimi-k2
dtype: mxfp4
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 1000}
  output_tokens: {kind: fixed, value: 10}
systems:
  s:
    node: atlas-850e
    nodes: 16
    instance: {tp: 128, ep: 128, dp_attention: 128}
    scale_up: {tiers: [{nodes: 8}, {nodes: 16, oversubscription: 4, transport: message_passing}]}
"""
    scenario = kvsim.parse_scenario(text, "t.yaml")
    stage = size_system(scenario.spec, "s", scenario.catalogs).pool("main").links.stage
    assert (stage.cards, stage.domains, stage.group_cards) == (128, 1, 64)
    assert stage.local_Bps == pytest.approx(1e12 * 0.8)
    assert stage.tier2_Bps == pytest.approx(1e12 / 4 * 0.8)
    assert (stage.local_message_s, stage.tier2_message_s) == (MEMORY_SEMANTIC_MESSAGE_S, MESSAGE_PASSING_MESSAGE_S)
