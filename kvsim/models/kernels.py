"""Kernel launches of one forward pass: the GPU time a roofline does not see.

A forward pass runs as a chain of kernels (norms, GEMMs, rotary, cache write, attention,
activation, the MoE router and its grouped GEMMs, ...). Each pays a setup and a teardown during
which it streams no weights: ramp-up and tail of its thread blocks, the gap before the next
kernel starts, even inside a CUDA graph. For a memory-bound decode step of a small model these
boundaries, not the bytes, are what keeps engines far from the memory roofline: Hazy Research
measured vLLM and SGLang reaching at most about half of an H100's bandwidth decoding Llama-3.2-1B
at batch 1, "around a hundred separate kernels" per forward pass, where one fused megakernel
reached 78 % and ran 1.5x faster than SGLang ("Look Ma, No Bubbles!", 2025-05-27, H).

kvsim charges ``EngineSpec.kernel_s`` per launch (see :mod:`kvsim.models.engine` for its
derivation) times the launches this module counts, by layer type, the way vLLM's decode graph
runs them (vllm/model_executor/models/llama.py, llama4.py, deepseek_v2.py, and
layers/fused_moe; counts read from the code, M):

- every layer: fused residual-add + RMSNorm, QKV GEMM, rotary, KV-cache write, attention, output
  GEMM, fused add + RMSNorm: 7;
- a dense feed-forward: gate-up GEMM, SiLU-and-mul, down GEMM: 3;
- a routed-expert feed-forward instead: router GEMM, top-k, align/permute, grouped gate-up GEMM,
  SiLU-and-mul, grouped down GEMM: 6, plus the weighted sum when a token picks several experts: 1;
- shared experts beside the routed ones: gate-up GEMM, SiLU-and-mul, down GEMM, add: 4;
- MLA attention instead of GQA adds the low-rank projections and their norm: 3;
- once per pass: embedding lookup, final norm, LM head, sampling: 4.

Tensor-parallel collectives are counted apart, by message size (:mod:`kvsim.models.collectives`).
"""

from __future__ import annotations

from kvsim.models.llm import ModelSpec

__all__ = ["ATTENTION_BLOCK", "DENSE_FFN", "ROUTED_FFN", "MULTI_EXPERT_SUM", "SHARED_FFN", "MLA_EXTRA",
           "PER_PASS", "layer_launches", "launches_per_pass"]

ATTENTION_BLOCK = 7
DENSE_FFN = 3
ROUTED_FFN = 6
MULTI_EXPERT_SUM = 1
SHARED_FFN = 4
MLA_EXTRA = 3
PER_PASS = 4


def layer_launches(model: ModelSpec) -> tuple[float, float]:
    """Kernel launches of one dense layer and of one MoE layer of ``model`` (the second is the
    first for a dense model)."""
    attention = ATTENTION_BLOCK + (MLA_EXTRA if model.mla is not None else 0)
    dense = float(attention + DENSE_FFN)
    moe = model.moe
    if moe is None:
        return dense, dense
    routed = ROUTED_FFN + (MULTI_EXPERT_SUM if moe.experts_per_token > 1 else 0)
    shared = SHARED_FFN if moe.shared_experts else 0
    return dense, float(attention + routed + shared)


def launches_per_pass(model: ModelSpec, layers: float | None = None) -> float:
    """Kernel launches of one forward pass over ``layers`` of the model's layers (default all; a
    pipeline stage passes its share), with the per-pass launches."""
    dense, moe = layer_launches(model)
    share = 1.0 if layers is None else layers / model.num_layers
    n_moe = model.num_moe_layers * share
    n_dense = (model.num_layers - model.num_moe_layers) * share
    return n_dense * dense + n_moe * moe + PER_PASS
