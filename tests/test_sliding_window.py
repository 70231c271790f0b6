"""Sliding-window attention layers: closed-form counts, KV pages, step time and a whole run."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kvsim
from kvsim.hardware import accelerator_catalog
from kvsim.kv.block_pool import BlockPool
from kvsim.models import model_catalog
from kvsim.models.attention_span import AttentionSpan
from kvsim.models.engine import EngineSpec
from kvsim.models.step_time import BatchShape, RooflineStepTime
from kvsim.serving.sequence import Sequence

OSS = model_catalog()["gpt-oss-120b"]


def test_gpt_oss_matches_its_model_card():
    # 116.8 B parameters, 5.1 B active per token without the embedding (OpenAI gpt-oss model card)
    assert OSS.total_params / 1e9 == pytest.approx(116.8, abs=0.05)
    assert (OSS.active_params - OSS.embedding_params) / 1e9 == pytest.approx(5.13, abs=0.01)
    # half the layers are windowed to 128 tokens
    span = OSS.attention_span()
    assert (span.window, span.fraction) == (128, 0.5)
    assert model_catalog()["qwen3-8b"].attention_span() is None


@pytest.mark.parametrize("chunk, cached", [(1, 0), (50, 0), (128, 0), (200, 0), (100, 60), (64, 128),
                                           (1, 5000), (512, 100), (3000, 7)])
def test_windowed_pairs_equal_the_sum_over_queries(chunk, cached):
    span = AttentionSpan(128, 0.5)
    by_query = sum(min(x, 128) for x in range(cached + 1, cached + chunk + 1))
    assert span.windowed_pairs(chunk, cached) == by_query
    full = BatchShape.prefill_chunk_pairs(chunk, cached)
    assert span.pairs(chunk, cached) == pytest.approx(0.5 * full + 0.5 * by_query)


def test_a_window_wider_than_the_context_changes_nothing():
    span = AttentionSpan(100_000, 1.0)
    assert span.pairs(700, 300) == BatchShape.prefill_chunk_pairs(700, 300)
    assert span.context(4000) == 4000


def test_pages_hold_the_full_layers_and_only_the_window_of_the_sliding_ones():
    span = OSS.attention_span()
    pool = BlockPool(10_000, 16, resident=span.context)
    seq = Sequence(0, 10_000, 1)
    assert pool.grow(seq, 10_000)
    # 5,000 tokens of full-layer KV plus 64 of the windowed half: 5,064 tokens = 317 pages
    assert seq.kv_blocks == math.ceil((0.5 * 10_000 + 0.5 * 128) / 16) == 317
    plain = BlockPool(10_000, 16)
    other = Sequence(1, 10_000, 1)
    assert plain.grow(other, 10_000) and other.kv_blocks == 625


def test_decode_step_reads_the_window_of_the_sliding_layers():
    acc = accelerator_catalog()["h20"]
    engine = EngineSpec(step_fixed_s=0, step_per_seq_s=0, step_per_token_s=0)
    step = RooflineStepTime(OSS, acc, tp=8, dtype="bf16", kv_dtype="bf16", engine=engine)
    span = OSS.attention_span()
    ctx = 20_000
    windowed = BatchShape(decode_seqs=4, decode_context_tokens=4 * span.context(ctx), sampled_seqs=4)
    whole = BatchShape(decode_seqs=4, decode_context_tokens=4 * ctx, sampled_seqs=4)
    kv_per_card = 2 * 36 * 1 * 64 * 2  # 8 KV heads over 8 cards
    kv_eff = acc.efficiency.kv_memory if acc.efficiency.kv_memory is not None else acc.efficiency.memory
    saved = (4 * ctx - 4 * (0.5 * ctx + 0.5 * 128)) * kv_per_card / (acc.memory_bandwidth * kv_eff)
    assert step.breakdown(whole).memory_s - step.breakdown(windowed).memory_s == pytest.approx(saved, rel=1e-9)


RUN = """
name: window
seed: 5
duration: 40 s
warmup: 5 s
model: {model}
workload:
  arrival: {{kind: poisson, rate: 1.5/s}}
  input_tokens: {{kind: fixed, value: 16000}}
  output_tokens: {{kind: fixed, value: 200}}
systems:
  s: {{node: h20-8x, instances: 1, instance: {{tp: 8}}}}
catalog:
  models:
    oss-full: {{base: gpt-oss-120b, sliding_window: null, sliding_window_layers: null}}
"""


def test_windowed_layers_make_long_prompts_cheaper_end_to_end():
    windowed = kvsim.run(kvsim.parse_scenario(RUN.format(model="gpt-oss-120b"), "w.yaml")).runs[0]
    full = kvsim.run(kvsim.parse_scenario(RUN.format(model="oss-full"), "w.yaml")).runs[0]
    # the same requests; half the layers attend to 128 tokens instead of up to 16,200
    for key in ("ttft_s", "tpot_s"):
        assert windowed.summary[key]["mean"] < full.summary[key]["mean"]
    assert windowed.summary["kv_utilization_mean"] < 0.6 * full.summary["kv_utilization_mean"]
    assert np.array_equal(windowed.records.column("arrival_s"), full.records.column("arrival_s"))


def test_prefix_caching_on_a_windowed_model_is_refused_before_the_run(refused):
    message = refused("{node: h20-8x, instances: 1, instance: {tp: 8}, kv_cache: {}}", model="gpt-oss-120b")
    assert "systems.s.kv_cache" in message and "sliding-window" in message


PD = """
name: pd-window
seed: 4
duration: 15 s
model: {model}
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: 1 s}}
  input_tokens: {{kind: fixed, value: 16000}}
  output_tokens: {{kind: fixed, value: 4}}
systems:
  pd:
    pools:
      prefill: {{node: h20-8x, instances: 1, role: prefill, instance: {{tp: 8}}}}
      decode: {{node: h20-8x, instances: 1, role: decode, instance: {{tp: 8}}}}
    kv_handoff: {{mode: whole}}
catalog:
  models:
    oss-full: {{base: gpt-oss-120b, sliding_window: null, sliding_window_layers: null}}
"""


def test_held_kv_bytes_count_the_window_of_the_sliding_layers_only():
    from kvsim.models.attention_span import held_kv_bytes

    span = OSS.attention_span()
    # gpt-oss-120b, bf16 KV, whole model: 8 KV heads x 64 x 2 (K and V) x 2 bytes = 2 KiB per layer
    per_layer = 8 * 64 * 2 * 2
    per_token = 36 * per_layer
    assert OSS.kv_bytes_per_token("bf16") == per_token
    # 18 full layers keep all 16,000 tokens, 18 sliding layers the last 128
    assert held_kv_bytes(16_000, per_token, span) == 18 * per_layer * 16_000 + 18 * per_layer * 128
    assert held_kv_bytes(100, per_token, span) == 100 * per_token  # inside the window: everything
    assert held_kv_bytes(16_000, per_token, None) == 16_000 * per_token


def test_pd_handoff_of_a_windowed_model_moves_what_its_pages_hold():
    windowed = kvsim.run(kvsim.parse_scenario(PD.format(model="gpt-oss-120b"), "pd.yaml")).runs[0].records.to_frame()
    full = kvsim.run(kvsim.parse_scenario(PD.format(model="oss-full"), "pd.yaml")).runs[0].records.to_frame()
    assert len(windowed) > 5 and len(full) > 5
    # tp 8 splits the 8 KV heads one per card: 2 x 64 x 2 bytes = 256 B per layer per token per card.
    # Full layers: 18 x 256 x 16,000 = 73,728,000 B; sliding: 18 x 256 x 128 = 589,824 B.
    per_card = 18 * 256 * 16_000 + 18 * 256 * 128
    assert per_card == 74_317_824
    assert (windowed.handoff_bytes == 8 * per_card).all()
    # without the window every layer would move all 16,000 tokens
    assert (full.handoff_bytes == 8 * 36 * 256 * 16_000).all()
    # the flows carry those bytes: one per decode card, two cards per 400 Gbit/s NIC (h20-8x has
    # four) delivering 0.975 of line rate, so 24.375 GB/s each on idle links, plus 4 PCIe hops of
    # 1 us and 3 us NIC to NIC
    assert np.allclose(windowed.handoff_landed_s - windowed.handoff_start_s, per_card / (25e9 * 0.975) + 7e-6,
                       rtol=1e-9)
