"""RooflineStepTime against hand-computed iteration times.

Every expected value is written out from the architecture numbers (hardware_facts.md section 3)
and the accelerator figures (section 1, efficiencies from section 5 as the catalog states them),
not obtained by calling the helpers the step-time model itself uses.
"""

import pytest

from kvsim.hardware import accelerator_catalog
from kvsim.hardware.specs import EfficiencySpec
from kvsim.models import model_catalog
from kvsim.models.collectives import allreduce_s, recursive_doubling_s, ring_allreduce_s
from kvsim.models.engine import EngineSpec
from kvsim.models.step_time import BatchShape, RooflineStepTime

ACC = accelerator_catalog()
MODELS = model_catalog()

REL = 1e-9  # the arithmetic is the same up to floating-point reassociation

# ---- hardware, as the catalog is documented to state it ----------------------------------------
H20_BW, H20_MEM_EFF, H20_KV_EFF = 4.0e12, 0.84, 0.70  # weight streaming (H100 stand-in), paged KV
H20_BF16, H20_FP8, H20_MFU = 148e12, 296e12, 0.6
H20_NVLINK, H20_LINK_EFF = 450e9, 0.8
L20_BW, L20_MEM_EFF, L20_KV_EFF = 864e9, 0.83, 0.81  # the L40S's kernel-level figures (same memory system)
L20_BF16, L20_MFU = 119.5e12, 0.6
L20_PCIE, L20_LINK_EFF = 32e9, 0.78
# Measured efficiencies (kvsim/hardware/data/accelerators.yaml gives the sources): weight streaming,
# paged-KV reads and prefill MFU, in place of the generic 0.8 / None / 0.6.
L40S_BW, L40S_MEM_EFF, L40S_KV_EFF = 864e9, 0.83, 0.81
L40S_BF16, L40S_MFU = 362e12, 0.52
RTX4090_BW, RTX4090_MEM_EFF = 1008e9, 0.82
A100_BW, A100_MEM_EFF, A100_KV_EFF = 2.039e12, 0.78, 0.74
A100_BF16, A100_MFU = 312e12, 0.67
A100_NVLINK, A100_LINK_EFF = 300e9, 0.77
OVERHEAD_S = 2e-3  # a fixed per-step overhead the tests below set, to keep the roofline terms in view
# (host work added to every step, as a synchronous engine does: the overlapped case is
# tests/test_host_overlap.py's)
FIXED_ENGINE = EngineSpec(step_fixed_s=OVERHEAD_S, step_per_seq_s=0.0, step_per_token_s=0.0, kernel_s=0.0,
                          host_overlap=False)
COLLECTIVE_LATENCY_S = 10e-6

# ---- Qwen3-8B by hand: 36 layers, hidden 4096, 32 q / 8 kv heads of 128, FFN 12288, vocab 151936
Q8_L, Q8_H, Q8_NH, Q8_NKV, Q8_HD, Q8_FFN, Q8_V = 36, 4096, 32, 8, 128, 12288, 151_936
Q8_PARAMS = (
    2 * Q8_V * Q8_H  # input embedding + untied lm_head
    + Q8_L * (
        2 * Q8_H * Q8_NH * Q8_HD  # q and o projections
        + 2 * Q8_H * Q8_NKV * Q8_HD  # k and v projections
        + 2 * Q8_HD  # q/k RMSNorm
        + 3 * Q8_H * Q8_FFN  # gate, up, down
        + 2 * Q8_H  # two RMSNorms
    )
    + Q8_H  # final norm
)
# Bytes one pass reads: every matrix once; the input embedding table is only looked up (a few
# rows), so it is not read in full. The untied lm_head is a real matrix and is read.
Q8_WEIGHT_BYTES_BF16 = 2 * (Q8_PARAMS - Q8_V * Q8_H)
Q8_BODY_FLOPS = 2 * (Q8_PARAMS - 2 * Q8_V * Q8_H)  # per token, no embedding, no lm_head
Q8_LM_HEAD_FLOPS = 2 * Q8_V * Q8_H  # per sampled sequence
Q8_ATTN_PER_PAIR = 2 * Q8_L * Q8_NH * (Q8_HD + Q8_HD)  # QK^T and PV: 589,824
Q8_KV_BF16 = 2 * Q8_L * Q8_NKV * Q8_HD * 2  # 147,456 B/token

# ---- Qwen3-32B by hand: 64 layers, hidden 5120, 64 q / 8 kv heads of 128, FFN 25600
Q32_L, Q32_H, Q32_NH, Q32_NKV, Q32_HD, Q32_FFN, Q32_V = 64, 5120, 64, 8, 128, 25600, 151_936
Q32_PARAMS = (
    2 * Q32_V * Q32_H
    + Q32_L * (2 * Q32_H * Q32_NH * Q32_HD + 2 * Q32_H * Q32_NKV * Q32_HD + 2 * Q32_HD
               + 3 * Q32_H * Q32_FFN + 2 * Q32_H)
    + Q32_H
)


def test_hand_numbers_agree_with_published_figures():
    # Guards the hand arithmetic itself: facts table 8.19 B / 32.8 B params, 144 KiB/token.
    assert Q8_PARAMS == 8_190_735_360
    assert Q32_PARAMS / 1e9 == pytest.approx(32.8, abs=0.05)
    assert Q8_KV_BF16 == 147_456
    assert Q8_ATTN_PER_PAIR / 1e6 == pytest.approx(0.590, abs=5e-4)


def test_catalog_figures_used_below():
    # If the catalog changes a figure, this is the test that says which.
    h20, l20 = ACC["h20"], ACC["l20"]
    assert (h20.memory_bandwidth, h20.efficiency.memory) == (H20_BW, H20_MEM_EFF)
    assert (h20.flops["bf16"], h20.flops["fp8"], h20.efficiency.compute) == (H20_BF16, H20_FP8, H20_MFU)
    assert (h20.scale_up_bandwidth, h20.efficiency.interconnect) == (H20_NVLINK, H20_LINK_EFF)
    assert (l20.memory_bandwidth, l20.efficiency.memory, l20.efficiency.kv_memory) == (
        L20_BW, L20_MEM_EFF, L20_KV_EFF)
    assert (l20.flops["bf16"], l20.efficiency.compute) == (L20_BF16, L20_MFU)
    assert l20.scale_up_bandwidth is None
    assert (l20.host_link_bandwidth, l20.efficiency.interconnect) == (L20_PCIE, L20_LINK_EFF)
    assert h20.efficiency.kv_memory == H20_KV_EFF
    for acc in (h20, l20):
        assert acc.efficiency.collective_latency_s == COLLECTIVE_LATENCY_S
        assert acc.efficiency.compute_half_tokens == 0
    l40s, rtx4090, a100 = ACC["l40s"], ACC["rtx-4090"], ACC["a100-sxm"]
    assert (l40s.memory_bandwidth, l40s.efficiency.memory, l40s.efficiency.kv_memory) == (
        L40S_BW, L40S_MEM_EFF, L40S_KV_EFF)
    assert (l40s.flops["bf16"], l40s.efficiency.compute) == (L40S_BF16, L40S_MFU)
    assert (rtx4090.memory_bandwidth, rtx4090.efficiency.memory) == (RTX4090_BW, RTX4090_MEM_EFF)
    assert rtx4090.efficiency.kv_memory is None  # no paged-KV measurement: reads at `memory`
    assert (a100.memory_bandwidth, a100.efficiency.memory, a100.efficiency.kv_memory) == (
        A100_BW, A100_MEM_EFF, A100_KV_EFF)
    assert (a100.flops["bf16"], a100.efficiency.compute) == (A100_BF16, A100_MFU)
    assert (a100.scale_up_bandwidth, a100.efficiency.interconnect) == (A100_NVLINK, A100_LINK_EFF)
    for acc in (l40s, rtx4090, a100):
        assert acc.efficiency.collective_latency_s == COLLECTIVE_LATENCY_S
        assert acc.efficiency.compute_half_tokens == 0


def _roofline(model, acc, tp=1, dtype="bf16", kv_dtype="bf16", engine=FIXED_ENGINE):
    return RooflineStepTime(MODELS[model], ACC[acc], tp=tp, dtype=dtype, kv_dtype=kv_dtype, engine=engine)


# ---------------------------------------------------------------------------------------------
# single card
# ---------------------------------------------------------------------------------------------


def test_qwen3_8b_h20_single_decode_step():
    step = _roofline("qwen3-8b", "h20")
    batch = BatchShape(decode_seqs=1, decode_context_tokens=1000, sampled_seqs=1)
    memory_s = Q8_WEIGHT_BYTES_BF16 / (4.0e12 * 0.84) + 1000 * 147_456 / (4.0e12 * 0.70)
    compute_s = (Q8_BODY_FLOPS + Q8_LM_HEAD_FLOPS + 1000 * Q8_ATTN_PER_PAIR) / (148e12 * 0.6)
    b = step.breakdown(batch)
    assert b.memory_s == pytest.approx(memory_s, rel=REL)  # ~4.56 ms
    assert b.compute_s == pytest.approx(compute_s, rel=REL)  # ~0.18 ms
    assert b.comm_s == 0.0
    assert b.bound == "memory"
    assert step.iteration_time_s(batch) == pytest.approx(max(memory_s, compute_s) + 2e-3, rel=REL)


def test_qwen3_8b_h20_big_prefill_is_compute_bound():
    step = _roofline("qwen3-8b", "h20")
    c = 4096
    causal_pairs = c * (c + 1) / 2  # each token attends to itself and all earlier ones
    assert BatchShape.prefill_chunk_pairs(c, 0) == causal_pairs == 8_390_656
    batch = BatchShape(prefill_tokens=c, prefill_pairs=causal_pairs, sampled_seqs=1)
    compute_s = (c * Q8_BODY_FLOPS + Q8_LM_HEAD_FLOPS + causal_pairs * Q8_ATTN_PER_PAIR) / (148e12 * 0.6)
    memory_s = Q8_WEIGHT_BYTES_BF16 / (4.0e12 * 0.84) + c * Q8_KV_BF16 / (4.0e12 * 0.70)  # the chunk's KV is written
    b = step.breakdown(batch)
    assert b.compute_s == pytest.approx(compute_s, rel=REL)  # ~0.70 s
    assert b.memory_s == pytest.approx(memory_s, rel=REL)
    assert b.bound == "compute"
    assert step.iteration_time_s(batch) == pytest.approx(compute_s + 2e-3, rel=REL)


def test_prefill_chunk_after_cache_pairs_and_kv_reads():
    # A chunk of c tokens after p cached ones: each attends to all p plus the causal part.
    c, p = 512, 1000
    assert BatchShape.prefill_chunk_pairs(c, p) == c * p + c * (c + 1) / 2
    step = _roofline("qwen3-8b", "h20")
    cold = BatchShape(prefill_tokens=c, prefill_pairs=c * (c + 1) / 2)
    warm = BatchShape(prefill_tokens=c, prefill_pairs=c * p + c * (c + 1) / 2, prefill_context_tokens=p)
    d_compute = step.breakdown(warm).compute_s - step.breakdown(cold).compute_s
    d_memory = step.breakdown(warm).memory_s - step.breakdown(cold).memory_s
    assert d_compute == pytest.approx(c * p * Q8_ATTN_PER_PAIR / (148e12 * 0.6), rel=1e-6)
    assert d_memory == pytest.approx(p * Q8_KV_BF16 / (4.0e12 * 0.70), rel=1e-6)  # cached KV is read


def test_lm_head_counted_only_for_sampled_sequences():
    # A prefill chunk that does not finish the prompt emits no token, so computes no logits.
    step = _roofline("qwen3-8b", "h20")
    unsampled = BatchShape(prefill_tokens=256, prefill_pairs=256 * 257 / 2, sampled_seqs=0)
    sampled = BatchShape(prefill_tokens=256, prefill_pairs=256 * 257 / 2, sampled_seqs=1)
    delta = step.breakdown(sampled).compute_s - step.breakdown(unsampled).compute_s
    assert delta == pytest.approx(2 * 151_936 * 4096 / (148e12 * 0.6), rel=1e-6)


def test_memory_bound_decode_grows_with_context_by_kv_bytes():
    step = _roofline("qwen3-8b", "h20")
    short = BatchShape(decode_seqs=16, decode_context_tokens=16 * 1000, sampled_seqs=16)
    long = BatchShape(decode_seqs=16, decode_context_tokens=16 * 3000, sampled_seqs=16)
    delta = step.iteration_time_s(long) - step.iteration_time_s(short)
    assert delta == pytest.approx(16 * 2000 * Q8_KV_BF16 / (4.0e12 * 0.70), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# tensor parallelism
# ---------------------------------------------------------------------------------------------


def test_qwen3_32b_h20_tp4_decode_with_all_reduce():
    t, seqs, ctx = 4, 32, 2000
    step = _roofline("qwen3-32b", "h20", tp=t)
    batch = BatchShape(decode_seqs=seqs, decode_context_tokens=seqs * ctx, sampled_seqs=seqs)

    body = 2 * (Q32_PARAMS - 2 * Q32_V * Q32_H)
    lm_head = 2 * Q32_V * Q32_H
    attn = 2 * Q32_L * Q32_NH * 2 * Q32_HD
    compute_s = (seqs * body + seqs * lm_head + seqs * ctx * attn) / (t * 148e12 * 0.6)
    kv_per_card = 2 * Q32_L * (Q32_NKV // t) * Q32_HD * 2  # 2 of the 8 KV heads per card
    memory_s = 2 * (Q32_PARAMS - Q32_V * Q32_H) / t / (4.0e12 * 0.84) + seqs * ctx * kv_per_card / (4.0e12 * 0.70)
    # An all-reduce after attention and after the MLP of every layer. Decode activations are
    # small (32 x 5120 x 2 B = 320 KiB), so recursive doubling wins: log2(4) = 2 steps, each
    # one hop latency plus the whole buffer over NVLink (2 x 10.9 us, against 61 us for a ring).
    activation_bytes = seqs * Q32_H * 2
    comm_s = 2 * Q32_L * 2 * (10e-6 + activation_bytes / (450e9 * 0.8))

    b = step.breakdown(batch)
    assert b.compute_s == pytest.approx(compute_s, rel=REL)
    assert b.memory_s == pytest.approx(memory_s, rel=REL)
    assert b.comm_s == pytest.approx(comm_s, rel=REL)
    assert b.bound == "memory"
    # Communication is not hidden under the roofline: it adds to it.
    assert step.iteration_time_s(batch) == pytest.approx(max(compute_s, memory_s) + comm_s + 2e-3, rel=REL)


def test_l20_tp2_all_reduce_uses_pcie():
    # The L20 has no NVLink, so its collectives run over PCIe Gen4 x16 (32 GB/s, 78% achieved).
    t, c = 2, 2048
    step = _roofline("qwen3-8b", "l20", tp=t)
    batch = BatchShape(prefill_tokens=c, prefill_pairs=c * (c + 1) / 2, sampled_seqs=1)
    # Two cards: recursive doubling is one exchange of the whole buffer (a ring pays one more hop).
    comm_s = 2 * Q8_L * (c * Q8_H * 2 / (32e9 * 0.78) + 10e-6)
    compute_s = (c * Q8_BODY_FLOPS + Q8_LM_HEAD_FLOPS + c * (c + 1) / 2 * Q8_ATTN_PER_PAIR) / (t * 119.5e12 * 0.6)
    b = step.breakdown(batch)
    assert b.comm_s == pytest.approx(comm_s, rel=REL)  # ~49 ms; ~4 ms over H20 NVLink
    assert b.compute_s == pytest.approx(compute_s, rel=REL)
    assert step.iteration_time_s(batch) == pytest.approx(max(compute_s, b.memory_s) + comm_s + 2e-3, rel=REL)


def test_tp1_has_no_communication_and_tp_below_one_refused():
    batch = BatchShape(prefill_tokens=1024, prefill_pairs=1024 * 1025 / 2, sampled_seqs=1)
    assert _roofline("qwen3-8b", "l20", tp=1).breakdown(batch).comm_s == 0.0
    with pytest.raises(ValueError):
        _roofline("qwen3-8b", "h20", tp=0)


# ---------------------------------------------------------------------------------------------
# H20 vs L20
# ---------------------------------------------------------------------------------------------


def test_h20_vs_l20_memory_bound_decode_ratio():
    # Same model, same bytes; only achieved bandwidth differs once the fixed overhead is removed.
    # Llama-3.1-8B: 8,030,261,248 params, untied 128,256 x 4096 embedding only looked up; 8 x 1000
    # tokens of KV at 131,072 B each. Weights and paged KV each read at their own efficiency.
    weights = 2 * (8_030_261_248 - 128_256 * 4096)
    kv = 8 * 1000 * 131_072
    batch = BatchShape(decode_seqs=8, decode_context_tokens=8 * 1000, sampled_seqs=8)
    h20 = _roofline("llama-3.1-8b", "h20").breakdown(batch)
    l20 = _roofline("llama-3.1-8b", "l20").breakdown(batch)
    assert h20.bound == l20.bound == "memory"
    h20_s = weights / (H20_BW * H20_MEM_EFF) + kv / (H20_BW * H20_KV_EFF)
    l20_s = weights / (L20_BW * L20_MEM_EFF) + kv / (L20_BW * L20_KV_EFF)
    assert h20.total_s - 2e-3 == pytest.approx(h20_s, rel=REL)
    assert l20.total_s - 2e-3 == pytest.approx(l20_s, rel=REL)
    ratio = (l20.total_s - 2e-3) / (h20.total_s - 2e-3)
    assert ratio == pytest.approx(l20_s / h20_s, rel=REL)
    # between the weight-streaming and the paged-KV bandwidth ratios of the two cards
    low, high = sorted([(H20_BW * H20_MEM_EFF) / (L20_BW * L20_MEM_EFF),
                        (H20_BW * H20_KV_EFF) / (L20_BW * L20_KV_EFF)])
    assert low <= ratio * (1 + REL) and ratio <= high * (1 + REL)


# ---------------------------------------------------------------------------------------------
# cards with measured efficiencies: L40S, RTX 4090, A100
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("acc, bandwidth, weight_eff, kv_eff", [
    ("l40s", L40S_BW, L40S_MEM_EFF, L40S_KV_EFF),
    ("rtx-4090", RTX4090_BW, RTX4090_MEM_EFF, RTX4090_MEM_EFF),  # kv_memory None: KV reads at `memory`
    ("a100-sxm", A100_BW, A100_MEM_EFF, A100_KV_EFF),
])
def test_single_decode_streams_weights_at_the_measured_efficiency(acc, bandwidth, weight_eff, kv_eff):
    # Qwen3-8B, one sequence at 1000 tokens of context: the weights at bandwidth x measured
    # efficiency, the paged KV at bandwidth x its own efficiency; nothing of the generic 0.8.
    step = _roofline("qwen3-8b", acc)
    batch = BatchShape(decode_seqs=1, decode_context_tokens=1000, sampled_seqs=1)
    weights_s = Q8_WEIGHT_BYTES_BF16 / (bandwidth * weight_eff)
    kv_s = 1000 * Q8_KV_BF16 / (bandwidth * kv_eff)
    b = step.breakdown(batch)
    assert b.memory_s == pytest.approx(weights_s + kv_s, rel=REL)
    assert b.bound == "memory"
    assert step.iteration_time_s(batch) == pytest.approx(weights_s + kv_s + OVERHEAD_S, rel=REL)
    # Against the generic 0.8 the step moves by exactly the efficiency ratio, in whichever direction
    # the measurement went (L40S and the RTX 4090 stream slightly better than 0.8, the A100 worse).
    generic = ACC[acc].model_copy(update={"efficiency": EfficiencySpec()})
    before = RooflineStepTime(MODELS["qwen3-8b"], generic, tp=1, dtype="bf16", kv_dtype="bf16",
                              engine=FIXED_ENGINE).breakdown(batch).memory_s
    assert before == pytest.approx((Q8_WEIGHT_BYTES_BF16 + 1000 * Q8_KV_BF16) / (bandwidth * 0.8), rel=REL)
    assert b.memory_s / before == pytest.approx(
        (Q8_WEIGHT_BYTES_BF16 / weight_eff + 1000 * Q8_KV_BF16 / kv_eff)
        / ((Q8_WEIGHT_BYTES_BF16 + 1000 * Q8_KV_BF16) / 0.8), rel=REL)


@pytest.mark.parametrize("acc, peak, mfu", [("l40s", L40S_BF16, L40S_MFU), ("a100-sxm", A100_BF16, A100_MFU)])
def test_big_prefill_runs_at_the_measured_mfu(acc, peak, mfu):
    step = _roofline("qwen3-8b", acc)
    c = 4096
    batch = BatchShape(prefill_tokens=c, prefill_pairs=c * (c + 1) / 2, sampled_seqs=1)
    compute_s = (c * Q8_BODY_FLOPS + Q8_LM_HEAD_FLOPS + c * (c + 1) / 2 * Q8_ATTN_PER_PAIR) / (peak * mfu)
    b = step.breakdown(batch)
    assert b.compute_s == pytest.approx(compute_s, rel=REL)  # L40S ~0.38 s; A100 ~0.46 s
    assert b.bound == "compute"
    assert step.iteration_time_s(batch) == pytest.approx(compute_s + OVERHEAD_S, rel=REL)


def test_a100_tp2_all_reduce_over_nvlink3():
    # 300 GB/s per direction at NCCL's ~77%; two cards: one exchange of the whole buffer.
    t, c = 2, 2048
    step = _roofline("qwen3-8b", "a100-sxm", tp=t)
    batch = BatchShape(prefill_tokens=c, prefill_pairs=c * (c + 1) / 2, sampled_seqs=1)
    comm_s = 2 * Q8_L * (c * Q8_H * 2 / (A100_NVLINK * A100_LINK_EFF) + COLLECTIVE_LATENCY_S)
    assert step.breakdown(batch).comm_s == pytest.approx(comm_s, rel=REL)  # ~5.9 ms


def test_a100_has_no_fp8_peak():
    # Ampere has no FP8 tensor cores; asking for fp8 names what the card does have.
    with pytest.raises(KeyError) as info:
        _roofline("qwen3-8b", "a100-sxm", dtype="fp8", kv_dtype="fp8")
    assert "fp8" in str(info.value) and "bf16" in str(info.value)


# ---------------------------------------------------------------------------------------------
# MoE and MLA
# ---------------------------------------------------------------------------------------------


def test_qwen3_235b_fp8_tp8_single_decode_reads_active_weights_and_replicated_kv():
    L, h, nh, nkv, hd, V, E, k, moe_ffn = 94, 4096, 64, 4, 128, 151_936, 128, 8, 1536
    non_expert = 2 * V * h + h + L * (2 * h * nh * hd + 2 * h * nkv * hd + 2 * hd + 2 * h + h * E)
    active = non_expert + L * k * 3 * h * moe_ffn  # one token visits k experts per layer
    t, ctx = 8, 4000
    step = _roofline("qwen3-235b-a22b", "h20", tp=t, dtype="fp8", kv_dtype="fp8")
    batch = BatchShape(decode_seqs=1, decode_context_tokens=ctx, sampled_seqs=1)
    kv_per_card = 2 * L * 1 * hd * 1  # 4 KV heads over 8 cards: one (replicated) head per card
    # weights minus the embedding lookup, at the weight-streaming efficiency; KV at its own
    memory_s = (active - V * h) * 1 / t / (4.0e12 * 0.84) + ctx * kv_per_card / (4.0e12 * 0.70)
    b = step.breakdown(batch)
    assert b.memory_s == pytest.approx(memory_s, rel=1e-9)
    assert b.bound == "memory"
    # Compute uses the FP8 peak of all 8 cards.
    body = 2 * (active - 2 * V * h)
    compute_s = (body + 2 * V * h + ctx * 2 * L * nh * 2 * hd) / (t * 296e12 * 0.6)
    assert b.compute_s == pytest.approx(compute_s, rel=1e-9)


def test_moe_large_batch_reads_more_expert_weights_than_one_token():
    step = _roofline("qwen3-235b-a22b", "h20", tp=8, dtype="fp8", kv_dtype="fp8")
    one = step.breakdown(BatchShape(decode_seqs=1, decode_context_tokens=1, sampled_seqs=1)).memory_s
    many = step.breakdown(BatchShape(decode_seqs=256, decode_context_tokens=256, sampled_seqs=256)).memory_s
    # 256 tokens touch nearly all 128 experts: ~235 GB vs ~22 GB of weights.
    assert many / one > 5


def test_deepseek_mla_decode_and_prefill_attention_costs():
    t = 8
    step = _roofline("deepseek-r1", "h20", tp=t, dtype="fp8", kv_dtype="fp8")
    rate = t * 296e12 * 0.6
    base = BatchShape(decode_seqs=4, decode_context_tokens=4 * 1000, sampled_seqs=4)
    more_ctx = BatchShape(decode_seqs=4, decode_context_tokens=4 * 1000 + 10_000, sampled_seqs=4)
    d_decode = step.breakdown(more_ctx).compute_s - step.breakdown(base).compute_s
    # Absorbed MLA decode: 2 * 61 * 128 * (512 + 64 + 512) FLOP per pair (16.99 MFLOP).
    assert d_decode == pytest.approx(10_000 * 2 * 61 * 128 * 1088 / rate, rel=1e-6)

    p0 = BatchShape(prefill_tokens=1000, prefill_pairs=1000 * 1001 / 2)
    p1 = BatchShape(prefill_tokens=1000, prefill_pairs=1000 * 1001 / 2 + 1e6)
    d_prefill = step.breakdown(p1).compute_s - step.breakdown(p0).compute_s
    # MHA-form MLA prefill: 2 * 61 * 128 * (128 + 64 + 128) FLOP per pair (4.997 MFLOP).
    assert d_prefill == pytest.approx(1e6 * 2 * 61 * 128 * 320 / rate, rel=1e-6)

    # MLA KV is the whole latent on every card: 61 * 576 bytes/token at FP8, not split by 8.
    d_memory = step.breakdown(more_ctx).memory_s - step.breakdown(base).memory_s
    assert d_memory == pytest.approx(10_000 * 61 * 576 / (4.0e12 * 0.70), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# bounds and errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("acc", ["h20", "l20"])
def test_bound_memory_for_small_decode_compute_for_large_prefill(acc):
    step = _roofline("llama-3.1-8b", acc)
    decode = BatchShape(decode_seqs=4, decode_context_tokens=4 * 2000, sampled_seqs=4)
    prefill = BatchShape(prefill_tokens=8192, prefill_pairs=8192 * 8193 / 2, sampled_seqs=1)
    assert step.breakdown(decode).bound == "memory"
    assert step.breakdown(prefill).bound == "compute"


def test_missing_dtype_raises_key_error_naming_what_the_card_has():
    with pytest.raises(KeyError) as info:
        _roofline("qwen3-8b", "ascend-950pr", dtype="bf16")
    message = str(info.value)
    assert "bf16" in message
    assert "fp8" in message and "fp4" in message
    # The format the card does have works.
    assert _roofline("qwen3-8b", "ascend-950pr", dtype="fp8", kv_dtype="fp8").iteration_time_s(
        BatchShape(decode_seqs=1, decode_context_tokens=10, sampled_seqs=1)
    ) > 0


# ---------------------------------------------------------------------------------------------
# collectives, engine overheads, efficiency curves
# ---------------------------------------------------------------------------------------------


def test_allreduce_picks_recursive_doubling_for_small_and_ring_for_large_messages():
    alpha, bw = 10e-6, 100e9
    # 8 cards, 4 KiB: doubling 3 x (10 us + 41 ns) against a ring's 14 x 10 us
    small = 4096
    assert recursive_doubling_s(small, 8, alpha, bw) == pytest.approx(3 * (alpha + small / bw))
    assert ring_allreduce_s(small, 8, alpha, bw) == pytest.approx(14 * alpha + 14 / 8 * small / bw)
    assert allreduce_s(small, 8, alpha, bw) == pytest.approx(3 * (alpha + small / bw))
    # 8 cards, 64 MiB: the ring moves 1.75 n instead of 3 n
    big = 64 * 2**20
    assert allreduce_s(big, 8, alpha, bw) == pytest.approx(14 * alpha + 1.75 * big / bw)
    # 3 cards round up to 2 doubling steps; one card does nothing
    assert recursive_doubling_s(small, 3, alpha, bw) == pytest.approx(2 * (alpha + small / bw))
    assert allreduce_s(big, 1, alpha, bw) == 0.0


def test_tp8_prefill_all_reduce_is_bandwidth_bound_ring():
    t, c = 8, 4096
    step = _roofline("qwen3-32b", "h20", tp=t)
    nbytes = c * Q32_H * 2
    ring = 2 * (t - 1) * 10e-6 + 2 * (t - 1) / t * nbytes / (450e9 * 0.8)
    assert step.breakdown(BatchShape(prefill_tokens=c, prefill_pairs=c * (c + 1) / 2)).comm_s == pytest.approx(
        2 * Q32_L * ring, rel=REL)


def test_engine_overhead_grows_with_sequences_and_tokens():
    engine = EngineSpec(step_fixed_s=1e-3, step_per_seq_s=20e-6, step_per_token_s=1e-6, host_overlap=False)
    step = _roofline("qwen3-8b", "h20", engine=engine)
    # 3 prefill chunks of 100 tokens and 40 decodes: 43 sequences, 340 tokens
    batch = BatchShape(prefill_tokens=300, prefill_seqs=3, prefill_pairs=3 * 100 * 101 / 2,
                       decode_seqs=40, decode_context_tokens=40 * 500, sampled_seqs=43)
    assert step.breakdown(batch).overhead_s == pytest.approx(1e-3 + 43 * 20e-6 + 340 * 1e-6, rel=REL)


def test_default_engine_overhead():
    batch = BatchShape(decode_seqs=64, decode_context_tokens=64 * 800, sampled_seqs=64)
    step = _roofline("qwen3-8b", "h20", engine=EngineSpec())
    # 0.5 ms + 64 x 10 us + 64 x 0.5 us, as documented in kvsim.models.engine; overlapped by
    # default (async scheduling), so only what the GPU's time does not hide is exposed
    parts = step.breakdown(batch)
    host_s = 0.5e-3 + 64 * 10e-6 + 64 * 0.5e-6
    assert parts.host_s == pytest.approx(host_s, rel=REL)
    gpu_s = max(parts.compute_s, parts.memory_s, parts.remote_s) + parts.comm_s + parts.kernels_s
    assert parts.overhead_s == pytest.approx(max(0.0, host_s - gpu_s), abs=1e-15)


def test_small_gemms_reach_less_of_the_peak():
    acc = ACC["h20"].model_copy(update={"efficiency": EfficiencySpec(compute=0.6, memory=0.66,
                                                                     compute_half_tokens=256)})
    step = RooflineStepTime(MODELS["qwen3-8b"], acc, tp=1, dtype="bf16", kv_dtype="bf16", engine=FIXED_ENGINE)
    for c in (64, 256, 4096):
        batch = BatchShape(prefill_tokens=c, prefill_pairs=c * (c + 1) / 2)
        flops = c * Q8_BODY_FLOPS + c * (c + 1) / 2 * Q8_ATTN_PER_PAIR
        # half of 0.6 at 256 tokens; 0.6 * 4096 / 4352 = 0.565 at 4096
        assert step.breakdown(batch).compute_s == pytest.approx(flops / (148e12 * 0.6 * c / (c + 256)), rel=REL)


def test_paged_kv_reads_have_their_own_efficiency():
    acc = ACC["h20"].model_copy(update={"efficiency": EfficiencySpec(compute=0.6, memory=0.66, kv_memory=0.5)})
    step = RooflineStepTime(MODELS["qwen3-8b"], acc, tp=1, dtype="bf16", kv_dtype="bf16", engine=FIXED_ENGINE)
    batch = BatchShape(decode_seqs=16, decode_context_tokens=16 * 2000, sampled_seqs=16)
    memory_s = Q8_WEIGHT_BYTES_BF16 / (4.0e12 * 0.66) + 16 * 2000 * Q8_KV_BF16 / (4.0e12 * 0.5)
    assert step.breakdown(batch).memory_s == pytest.approx(memory_s, rel=REL)


# ---------------------------------------------------------------------------------------------
# kernel launches (kvsim/models/kernels.py)
# ---------------------------------------------------------------------------------------------


def test_kernel_launches_counted_by_layer_type():
    from kvsim.models.kernels import launches_per_pass

    # dense GQA: 7 attention-block kernels + 3 feed-forward per layer, 4 per pass
    assert launches_per_pass(MODELS["qwen3-8b"]) == 36 * (7 + 3) + 4
    # Llama-4-Scout: every layer MoE, one expert per token (no weighted sum), one shared expert
    assert launches_per_pass(MODELS["llama-4-scout-17b-16e"]) == 48 * (7 + 6 + 4) + 4
    # DeepSeek-R1 (V3 architecture): MLA (+3), 3 dense layers then 58 MoE layers of 8 experts (+1 sum) and a shared one
    ds = MODELS["deepseek-r1"]
    assert (ds.moe.first_dense_layers, ds.num_layers) == (3, 61)
    assert launches_per_pass(ds) == 3 * (10 + 3) + 58 * (7 + 3 + 6 + 1 + 4) + 4
    # a pipeline stage with half the layers launches half the layer kernels, and all per-pass ones
    assert launches_per_pass(MODELS["qwen3-8b"], 18) == 18 * 10 + 4


def test_kernel_launches_add_to_every_iteration():
    engine = EngineSpec(step_fixed_s=0.0, step_per_seq_s=0.0, step_per_token_s=0.0, kernel_s=4e-6)
    step = _roofline("qwen3-8b", "h20", engine=engine)
    bare = _roofline("qwen3-8b", "h20", engine=engine.model_copy(update={"kernel_s": 0.0}))
    for batch in (BatchShape(decode_seqs=1, decode_context_tokens=1000, sampled_seqs=1),
                  BatchShape(prefill_tokens=4096, prefill_pairs=4096 * 4097 / 2, sampled_seqs=1)):
        assert step.breakdown(batch).kernels_s == pytest.approx(4e-6 * (36 * 10 + 4))
        assert step.iteration_time_s(batch) - bare.iteration_time_s(batch) == pytest.approx(4e-6 * 364, rel=REL)


def test_default_kernel_cost_reproduces_its_source():
    # kvsim/models/engine.py: SGLang at ~50 % of an H100's 3.35 TB/s on Llama-3.2-1B at batch 1, the
    # kernels streaming at the H100's efficiency.memory; 16 layers x 10 + 4 launches share what is left
    params = 16 * (2048 * 2048 * 2 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048) + 2048 + 128256 * 2048
    weight_bytes = 2 * params
    assert weight_bytes == pytest.approx(2.4716e9, rel=1e-4)
    h100 = ACC["h100-sxm"]
    assert h100.memory_bandwidth == 3.35e12
    leftover_s = weight_bytes / (0.5 * 3.35e12) - weight_bytes / (h100.efficiency.memory * 3.35e12)
    assert EngineSpec().kernel_s == pytest.approx(leftover_s / (16 * 10 + 4), rel=0.01)
