"""The layout step model against the plain roofline and hand-composed pipeline / MoE terms; link
figures from the hardware; layouts sized, refused and placed over nodes."""

from __future__ import annotations

import math

import pytest

import kvsim
from kvsim.hardware import accelerator_catalog, node_catalog
from kvsim.models import model_catalog
from kvsim.models.engine import EngineSpec
from kvsim.models.layout_step import LayoutStepTime
from kvsim.models.parallel import RDMA_EFFICIENCY, GroupLinks, Layout, LayoutLinks
from kvsim.models.step_time import BatchShape, RooflineStepTime
from kvsim.sim import check_scenario
from kvsim.sim.layout_links import layout_links
from kvsim.sim.layout_search import FINALISTS

ACC = accelerator_catalog()
NODES = node_catalog()
MODELS = model_catalog()

PREFILL = BatchShape(prefill_tokens=2048, prefill_pairs=BatchShape.prefill_chunk_pairs(2048, 0), sampled_seqs=1)
DECODE = BatchShape(decode_seqs=64, decode_context_tokens=64 * 3000, sampled_seqs=64)


def _one_domain(acc, cards):
    link = GroupLinks(cards=cards, domains=1, local_Bps=acc.peer_bandwidth * acc.efficiency.interconnect,
                      local_latency_s=acc.efficiency.collective_latency_s)
    return LayoutLinks(attention=link, stage=link)


@pytest.mark.parametrize("model, acc, tp", [("qwen3-8b", "h20", 2), ("qwen3-235b-a22b", "l20", 8),
                                            ("qwen3-235b-a22b", "h20", 8)])
@pytest.mark.parametrize("batch", [PREFILL, DECODE])
def test_plain_tp_reduces_to_the_roofline(model, acc, tp, batch):
    m, a = MODELS[model], ACC[acc]
    plain = RooflineStepTime(m, a, tp, "fp8", "fp8").breakdown(batch)
    layout = LayoutStepTime(m, a, Layout(tp=tp), _one_domain(a, tp), "fp8", "fp8").breakdown(batch)
    assert layout.compute_s == pytest.approx(plain.compute_s, rel=1e-12)
    assert layout.comm_s == pytest.approx(plain.comm_s, rel=1e-12)
    # the roofline also streams the final norm (hidden_size weights): a few bytes in ~1e10
    assert layout.memory_s == pytest.approx(plain.memory_s, rel=1e-6)


def test_pipeline_composes_stage_times_and_sends():
    # Qwen3-8B on H20, 2 stages of 1 card: the stage holds 18 of 36 layers
    m, a = MODELS["qwen3-8b"], ACC["h20"]
    send_Bps, send_lat = 20e9, 5e-6
    one = GroupLinks(cards=1, domains=1, local_Bps=math.inf, local_latency_s=0.0)
    links = LayoutLinks(attention=one, stage=one, send_Bps=send_Bps, send_latency_s=send_lat)
    sync = EngineSpec(host_overlap=False)  # the host's time added to the iteration, as counted below
    cont = LayoutStepTime(m, a, Layout(pp=2), links, "bf16", "bf16", engine=sync)
    flush = LayoutStepTime(m, a, Layout(pp=2), links, "bf16", "bf16", schedule="flush", engine=sync)
    stage = cont.stage_breakdown(PREFILL)
    # a stage pass launches its 18 layers' kernels (10 each, dense) and the 4 per-pass ones
    assert stage.kernels_s == pytest.approx(cont.engine.kernel_s * (18 * 10 + 4))
    stage_s = max(stage.compute_s, stage.memory_s) + stage.comm_s + stage.kernels_s
    # the stage's send: 1024 tokens (one of 2 micro-batches) x 4096 x 2 bytes at 20 GB/s + 5 us
    assert stage.comm_s == pytest.approx(1024 * 4096 * 2 / send_Bps + send_lat)
    # continuous: 2 micro-batches x stage time; flush: (2 + 2 - 1) x stage time
    overhead = cont.engine.step_overhead_s(PREFILL.sequences, PREFILL.tokens)
    assert cont.iteration_time_s(PREFILL) == pytest.approx(2 * stage_s + overhead)
    assert flush.iteration_time_s(PREFILL) == pytest.approx(3 * stage_s + overhead)
    # a stage computes half the body and attention of a micro-batch (half the batch), plus the lm_head
    body = m.body_flops_per_token * 2048 + m.attention_flops_per_pair(False) * PREFILL.prefill_pairs
    expected = (body * 0.5 / 2 + m.lm_head_flops * 1 / 2) / (a.peak_flops("bf16") * a.efficiency.compute)
    assert stage.compute_s == pytest.approx(expected)


def test_expert_parallel_all_to_all_by_hand():
    # Qwen3-235B, tp 8 = ep 8 with one-card attention ranks: no all-reduce, two all-to-alls per
    # MoE layer over the stage; each card dispatches 2048/8 tokens to 7 * P(rank hit) other ranks
    m, a = MODELS["qwen3-235b-a22b"], ACC["h20"]
    stage = GroupLinks(cards=8, domains=1, local_Bps=360e9, local_latency_s=10e-6)
    links = LayoutLinks(attention=GroupLinks(1, 1, math.inf, 0.0), stage=stage)
    model = LayoutStepTime(m, a, Layout(tp=8, ep=8, dp_attention=8), links, "fp8", "fp8")
    p_hit = 1 - math.comb(112, 8) / math.comb(128, 8)
    nbytes = 2048 / 8 * 7 * p_hit * 4096 * 2
    expected = 94 * 2 * (nbytes / 360e9 + 10e-6)
    assert model.stage_breakdown(PREFILL).comm_s == pytest.approx(expected)


def test_each_attention_rank_schedules_its_own_share():
    # vLLM runs each data-parallel rank as its own engine process: the host's time of an
    # iteration is one rank's share, 64 decodes over 8 ranks -> 8 sequences and 8 tokens each
    m, a = MODELS["qwen3-235b-a22b"], ACC["h20"]
    links = _one_domain(a, 8)
    sync = EngineSpec(host_overlap=False)  # the whole host time in overhead_s
    ranks = LayoutStepTime(m, a, Layout(tp=8, ep=8, dp_attention=8), links, "fp8", "fp8", engine=sync)
    e = ranks.engine
    assert ranks.breakdown(DECODE).overhead_s == pytest.approx(e.step_fixed_s + 8 * e.step_per_seq_s
                                                               + 8 * e.step_per_token_s, rel=1e-15)
    # one scheduler for the whole batch without attention ranks
    one = LayoutStepTime(m, a, Layout(tp=8, ep=8), links, "fp8", "fp8", engine=sync)
    assert one.breakdown(DECODE).overhead_s == e.step_fixed_s + 64 * e.step_per_seq_s + 64 * e.step_per_token_s


def test_expert_skew_loads_the_busiest_rank():
    m, a = MODELS["qwen3-235b-a22b"], ACC["h20"]
    links = _one_domain(a, 8)
    even = LayoutStepTime(m, a, Layout(tp=8, ep=8), links, "fp8", "fp8")
    skewed = LayoutStepTime(m, a, Layout(tp=8, ep=8), links, "fp8", "fp8", expert_skew=1.0)
    assert skewed.imbalance > 1.5
    # the busiest rank computes (imbalance - 1) more of the routed experts' FLOPs
    extra = (skewed.imbalance - 1) * 2 * 8 * m.expert_params * 94 * 2048
    delta = skewed.breakdown(PREFILL).compute_s - even.breakdown(PREFILL).compute_s
    assert delta == pytest.approx(extra / (8 * a.peak_flops("fp8") * a.efficiency.compute))
    assert skewed.breakdown(PREFILL).comm_s > even.breakdown(PREFILL).comm_s


def test_link_figures_follow_the_hardware():
    l20, node = ACC["l20"], NODES["l20-8x"]
    # inside one L20 node: PCIe (the card's host link), which its RDMA traffic also crosses
    links = layout_links(Layout(tp=8, ep=8), node, l20, 1)
    assert links.stage.domains == 1 and links.stage.local_on_pcie
    assert links.stage.local_Bps == pytest.approx(32e9 * 0.78)
    # ep 16 over two nodes: 2 x 200 Gbit/s NICs shared by the node's 8 cards
    wide = layout_links(Layout(tp=16, ep=16, dp_attention=16), node, l20, 1)
    assert wide.stage.domains == 2
    assert wide.stage.remote_Bps == pytest.approx(2 * 25e9 * RDMA_EFFICIENCY / 8)
    # tp 8 x pp 2 over two nodes: the stage boundary is the node boundary, sends cross the NICs
    pp = layout_links(Layout(tp=8, pp=2), node, l20, 1)
    assert pp.send_Bps == pytest.approx(2 * 25e9 * RDMA_EFFICIENCY / 8)
    # tp 4 x pp 2 inside one node: the send stays on the local link
    assert layout_links(Layout(tp=4, pp=2), node, l20, 1).send_Bps == links.stage.local_Bps
    # H20 pairs in one scale-up domain of two nodes: tp 16 stays on NVLink
    h20 = layout_links(Layout(tp=16), NODES["h20-8x"], ACC["h20"], 2)
    assert h20.stage.domains == 1 and h20.stage.local_Bps == pytest.approx(450e9 * 0.8)


LAYOUT = """
name: layouts
duration: 20 s
warmup: 2 s
model: qwen3-235b-a22b
dtype: fp8
workload:
  arrival: {{kind: closed_loop, clients: 8}}
  input_tokens: {{kind: fixed, value: 1000}}
  output_tokens: {{kind: fixed, value: 20}}
systems:
  s: {{node: l20-8x, nodes: {nodes}, instance: {instance}}}
"""


def _scenario(instance, nodes=1):
    return kvsim.parse_scenario(LAYOUT.format(instance=instance, nodes=nodes), "s.yaml")


def test_layouts_size_weights_and_kv_per_card():
    pool = check_scenario(_scenario("{tp: 8, ep: 8, dp_attention: 8}"))[(0, "s")].pools[0]
    # one-card attention ranks: 8 ranks each with its own KV pool of one card's budget
    per_token = 2 * 94 * 4 * 128
    assert pool.kv_blocks_per_instance == 8 * int(pool.kv_budget_bytes_per_card // (per_token * 16))
    # a transfer spreads a token's KV (4 heads, on one card) over the instance's 8 cards
    assert pool.kv_bytes_per_token_per_card == per_token / 8
    pp = check_scenario(_scenario("{tp: 4, pp: 2}"))[(0, "s")].pools[0]
    assert pp.cards == 8 and pp.instances == 1 and pp.links is not None


@pytest.mark.parametrize("instance, nodes, fragment", [
    ("{tp: 8, pp: 2}", 1, "the pool has 8"),
    ("{tp: 6}", 1, "must divide"),
    ("{tp: 8, ep: 4}", 1, "must be 1 or equal tp"),
    ("{tp: 8, dp_attention: 3}", 1, "must divide tp=8"),
    ("{tp: 4, pp: 3}", 2, "tp x pp = 12 cards must divide"),
])
def test_impossible_layouts_are_refused_with_the_field(instance, nodes, fragment):
    with pytest.raises(kvsim.SpecError) as info:
        check_scenario(_scenario(instance, nodes))
    assert fragment in str(info.value) and "s.yaml:" in str(info.value)


def test_a_dense_model_refuses_expert_parallelism():
    text = LAYOUT.format(instance="{tp: 2, ep: 2}", nodes=1).replace("qwen3-235b-a22b", "qwen3-8b")
    with pytest.raises(kvsim.SpecError) as info:
        check_scenario(kvsim.parse_scenario(text, "s.yaml"))
    assert "is dense" in str(info.value) and "ep" in str(info.value)


def test_an_instance_spanning_nodes_gets_their_cards_and_runs():
    scenario = _scenario("{tp: 8, pp: 2}", nodes=2)
    result = kvsim.run(scenario)
    run = result.runs[0]
    assert run.summary["requests_completed"] > 0
    from kvsim.sim.build import _placements

    placement = _placements(run.sizing)[0]
    assert placement.gpus[0] == "node0/gpu0" and placement.gpus[8] == "node1/gpu0" and len(placement.gpus) == 16


BEST = """
name: best
duration: 10 s
warmup: 2 s
model: qwen3-235b-a22b
dtype: fp8
workload:
  arrival: {kind: closed_loop, clients: 16}
  input_tokens: {kind: fixed, value: 1000}
  output_tokens: {kind: fixed, value: 50}
systems:
  best: {node: l20-8x, instance: {layout: best}}
"""


def test_best_layout_pilots_every_candidate_and_keeps_the_best_finalist():
    result = kvsim.run(kvsim.parse_scenario(BEST, "s.yaml"))
    run = result.runs[0]
    search = run.summary["layout_search"]
    # the pool's 8 L20 cards hold the 235 GB of fp8 weights only as one 8-card instance
    assert set(search["pilot"]) >= {"tp8", "tp4 pp2", "tp8 ep8 dpa8", "tp1 pp8"}
    finals = search["final"]
    assert len(finals) == FINALISTS and set(finals) <= set(search["pilot"])
    assert finals[search["chosen"]] == max(finals.values())
    # the returned run is the winner's full-length run
    assert run.sizing.pools[0].layout.label() == search["chosen"]
    assert run.summary["requests_per_s"] == finals[search["chosen"]]
    # the finalists are the best pilots: none left out beats the worst finalist's pilot
    pilots = search["pilot"]
    assert min(pilots[f] for f in finals) >= max(v for k, v in pilots.items() if k not in finals)


def test_best_layout_with_layout_fields_is_refused():
    text = BEST.replace("{layout: best}", "{layout: best, tp: 8}")
    with pytest.raises(kvsim.SpecError) as info:
        kvsim.run(kvsim.parse_scenario(text, "s.yaml"))
    assert "not both" in str(info.value) and "s.yaml:" in str(info.value)
