"""Parallel layouts: every cost term against a hand calculation, and the layout checks."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.models import model_catalog
from kvsim.models.parallel import (
    GroupLinks,
    Layout,
    alltoall_bytes_per_card,
    alltoall_ranks_per_token,
    alltoall_s,
    bubble_fraction,
    candidate_layouts,
    expert_imbalance,
    kv_bytes_per_token_per_card,
    layout_problems,
    p2p_send_s,
    pipeline_time_s,
    stage_layers,
    stage_send_bytes_per_card,
    weight_bytes_per_card,
)

MODELS = model_catalog()


def test_alltoall_ranks_per_token_by_hand_and_by_sampling():
    # 8 experts, top-2, 4 ranks of 2: a rank misses a token with C(6,2)/C(8,2) = 15/28
    assert alltoall_ranks_per_token(8, 2, 4) == pytest.approx(3 * 13 / 28)
    assert alltoall_ranks_per_token(8, 2, 1) == 0.0
    # Qwen3-235B routing (128 experts, top-8) over 8 ranks, against random draws
    rng = np.random.default_rng(0)
    tokens = 20_000
    chosen = np.argsort(rng.random((tokens, 128)), axis=1)[:, :8]
    ranks = chosen // 16
    other = [len(set(row) - {0}) for row in ranks]  # the sending card is rank 0
    assert alltoall_ranks_per_token(128, 8, 8) == pytest.approx(np.mean(other), rel=0.01)
    # every token meets at most min(k, ep-1) other ranks
    assert alltoall_ranks_per_token(128, 8, 8) < 7


def test_alltoall_bytes_per_card_by_hand():
    # 100 tokens per card, hidden 4096, bf16, 8 experts top-2 over 4 ranks
    expected = 100 * (3 * 13 / 28) * 4096 * 2
    assert alltoall_bytes_per_card(100, 4096, 2.0, 8, 2, 4) == pytest.approx(expected)


def test_alltoall_time_takes_the_busiest_link():
    # 16 cards in 2 domains of 8: 7/15 of the bytes stay local, 8/15 cross the NICs
    links = GroupLinks(cards=16, domains=2, local_Bps=100e9, local_latency_s=3e-6, remote_Bps=25e9,
                       remote_latency_s=5e-6)
    nbytes = 15e6
    assert alltoall_s(nbytes, links) == pytest.approx(8e6 / 25e9 + 5e-6)
    # on PCIe the card's own link carries both shares: 15 MB at 20 GB/s vs 8 MB at 25 GB/s
    pcie = GroupLinks(cards=16, domains=2, local_Bps=20e9, local_latency_s=1e-6, remote_Bps=25e9,
                      remote_latency_s=5e-6, local_on_pcie=True)
    assert alltoall_s(nbytes, pcie) == pytest.approx(15e6 / 20e9 + 5e-6)
    # one domain: all local; imbalance scales the busiest rank's bytes
    one = GroupLinks(cards=8, domains=1, local_Bps=100e9, local_latency_s=3e-6)
    assert alltoall_s(1e6, one, imbalance=2.0) == pytest.approx(2e6 / 100e9 + 3e-6)


def test_expert_imbalance_by_hand():
    # 4 experts with Zipf(1) shares 1, 1/2, 1/3, 1/4 (total 25/12); two ranks get {1, 1/3} and
    # {1/2, 1/4}; busiest 4/3 of 25/12, times 2 ranks = 1.28
    assert expert_imbalance(4, 2, 1.0) == pytest.approx(1.28)
    assert expert_imbalance(128, 8, 0.0) == 1.0
    assert expert_imbalance(128, 1, 1.0) == 1.0
    assert expert_imbalance(128, 8, 1.2) > expert_imbalance(128, 8, 0.6) > 1.0


def test_stage_send_and_p2p_by_hand():
    # 512 tokens x 4096 x 2 bytes split over 4 cards = 1 MiB each; at 50 GB/s + 3 us
    nbytes = stage_send_bytes_per_card(512, 4096, 2.0, 4)
    assert nbytes == 2**20
    assert p2p_send_s(nbytes, 50e9, 3e-6) == pytest.approx(2**20 / 50e9 + 3e-6)
    assert p2p_send_s(0.0, 50e9, 3e-6) == 0.0


def test_pipeline_bubble_by_hand():
    # 4 stages of 1 ms, 4 micro-batches: flushed 7 ms (3/7 idle), continuous 4 ms
    assert pipeline_time_s(1e-3, 4, 4, "flush") == pytest.approx(7e-3)
    assert pipeline_time_s(1e-3, 4, 4, "continuous") == pytest.approx(4e-3)
    assert bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert bubble_fraction(1, 4) == 0.0


def test_stage_layers_even_and_uneven():
    assert stage_layers(94, 2) == (47, 47)
    assert stage_layers(94, 4) == (24, 24, 23, 23)
    assert stage_layers(61, 2) == (31, 30)
    assert sum(stage_layers(61, 8)) == 61


def test_weights_per_card_under_pp_by_hand():
    # Qwen3-8B in bf16, tp 2 x pp 2: 18 of 36 layers per stage, embedding + lm_head + final norm
    # on the busiest card (upper bound), all split over the 2 cards of a stage
    h, nh, nkv, hd, ffn, vocab = 4096, 32, 8, 128, 12288, 151_936  # 36 layers, 18 per stage
    layer = 2 * h * nh * hd + 2 * h * nkv * hd + 2 * hd + 3 * h * ffn + 2 * h
    expected = (18 * layer + 2 * vocab * h + h) / 2 * 2
    assert weight_bytes_per_card(MODELS["qwen3-8b"], Layout(tp=2, pp=2), "bf16") == pytest.approx(expected)
    # pp 1 is the whole model over tp
    model = MODELS["qwen3-8b"]
    assert weight_bytes_per_card(model, Layout(tp=2), "bf16") == model.weight_bytes("bf16") / 2


def test_weights_per_card_under_ep_and_dp_attention():
    model = MODELS["qwen3-235b-a22b"]
    # EP: whole experts per card hold the same bytes as tensor-parallel slices
    assert weight_bytes_per_card(model, Layout(tp=8, ep=8), "fp8") == pytest.approx(model.total_params / 8)
    # DP attention: attention (and its layer norms) replicated on every card, the rest split
    h = 4096
    attention = 94 * (model.attention_params_per_layer + 2 * h)
    expected = attention + (model.total_params - attention) / 8
    assert weight_bytes_per_card(model, Layout(tp=8, ep=8, dp_attention=8), "fp8") == pytest.approx(expected)


def test_kv_per_card_under_pp_and_dp_attention():
    # Qwen3-8B bf16: 147,456 B/token; pp 2 keeps 18 of 36 layers on a card
    assert kv_bytes_per_token_per_card(MODELS["qwen3-8b"], Layout(pp=2), "bf16") == 147_456 / 2
    # Qwen3-235B fp8 with one-card attention ranks: all 4 KV heads on the card, 2*94*4*128
    q235 = MODELS["qwen3-235b-a22b"]
    assert kv_bytes_per_token_per_card(q235, Layout(tp=8, ep=8, dp_attention=8), "fp8") == 2 * 94 * 4 * 128
    # at tp 8 the 4 heads are replicated: one head per card
    assert kv_bytes_per_token_per_card(q235, Layout(tp=8), "fp8") == 2 * 94 * 1 * 128


@pytest.mark.parametrize("model, layout, field, fragment", [
    ("qwen3-8b", Layout(tp=3), "tp", "does not split"),
    ("qwen3-8b", Layout(tp=2, ep=2), "ep", "is dense"),
    ("qwen3-8b", Layout(tp=2, dp_attention=2), "dp_attention", "is dense"),
    ("qwen3-235b-a22b", Layout(tp=8, ep=4), "ep", "must be 1 or equal tp"),
    ("qwen3-235b-a22b", Layout(tp=8, ep=8, dp_attention=3), "dp_attention", "must divide"),
    ("qwen3-8b", Layout(pp=64), "pp", "exceeds"),
])
def test_impossible_layouts_are_named(model, layout, field, fragment):
    problems = layout_problems(layout, MODELS[model])
    assert any(f == field and fragment in message for f, message in problems), problems


def test_experts_not_divisible_by_ep():
    model = MODELS["qwen3-235b-a22b"].model_copy(update={"moe": MODELS["qwen3-235b-a22b"].moe.model_copy(
        update={"num_experts": 100})})
    problems = layout_problems(Layout(tp=8, ep=8), model)
    assert any(f == "ep" and "does not divide" in m for f, m in problems)


def test_candidate_layouts_are_valid_and_cover_the_cards():
    model = MODELS["qwen3-235b-a22b"]
    layouts = candidate_layouts(model, 8)
    assert Layout(tp=8) in layouts and Layout(tp=4, pp=2) in layouts and Layout(8, 1, 8, 8) in layouts
    assert all(8 % lay.cards == 0 and not layout_problems(lay, model) for lay in layouts)
    dense = candidate_layouts(MODELS["qwen3-8b"], 8)
    assert all(lay.ep == 1 and lay.dp_attention == 1 for lay in dense)
    assert Layout(tp=2, pp=4) in dense and len(dense) == 10  # tp, pp in {1,2,4,8}, tp*pp | 8


def test_local_cache_tiers_for_an_instance_spanning_nodes_are_refused(refused):
    message = refused("{node: h20-8x, nodes: 2, instance: {tp: 16}, kv_cache: {dram: {capacity: 64 GiB}}}")
    assert "systems.s.kv_cache" in message and "spans 2 nodes" in message
