"""LoRA adapters of a base model: their weights, their extra work, and what they do to the KV cache.

A LoRA adapter adds to a frozen linear layer ``W`` (``d_out x d_in``) a low-rank update
``B A`` with ``A`` of ``r x d_in`` and ``B`` of ``d_out x r`` (Hu et al., "LoRA: Low-Rank
Adaptation of Large Language Models", ICLR 2022, eq. 3): ``r (d_in + d_out)`` parameters per
adapted layer, and ``2 r (d_in + d_out)`` extra FLOPs per token through it. Engines serve many
adapters of one base model at once by keeping a few in device memory (vLLM's ``max_loras``
slots, each sized for ``max_lora_rank``) and batching their tokens with gathered low-rank
kernels (Punica's SGMV/BGMV; S-LoRA), so a batch mixes adapters but reads each distinct
adapter's weights once per step.

KV identity: the keys and values a layer caches are computed from that layer's input, which
every adapted layer below it has changed, so the same tokens under two adapters are two
different KV values. A scenario may declare that the adapters leave a shared context's KV equal
to the base model's (a system's ``lora.kv_sharing``) -- then that context's cached blocks can be
reused across adapters, by value (each adapter's request copies them into its own pages: no
recompute, no memory saved) or by bytes (one physical copy read by all: memory saved too).

Dense and grouped-query attention models only: MLA projections and routed experts are not
adapter targets here (refused at validation).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvsim.dtypes import DTYPE_BYTES
from kvsim.models.llm import ModelSpec

__all__ = ["TARGETS", "adapter_params", "adapter_bytes", "adapter_flops_per_token", "adapter_problems"]

TARGETS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
"""Linear layers an adapter may adapt (per transformer layer)."""


def _shapes(model: ModelSpec) -> dict[str, tuple[int, int]]:
    """``(d_in, d_out)`` of each target layer of one transformer layer."""
    h, q_width, kv_width = model.hidden_size, model.num_attention_heads * model.head_dim, \
        model.num_kv_heads * model.head_dim
    i = model.intermediate_size
    return {"q": (h, q_width), "k": (h, kv_width), "v": (h, kv_width), "o": (q_width, h),
            "gate": (h, i), "up": (h, i), "down": (i, h)}


def adapter_problems(model: ModelSpec, targets: Sequence[str]) -> list[str]:
    """Why adapters of ``targets`` cannot adapt ``model`` (empty when they can)."""
    problems = []
    if model.mla is not None:
        problems.append(f"model {model.name or model.hf_id} uses MLA attention; LoRA adapters are modelled "
                        "for multi-head and grouped-query attention only")
    if model.moe is not None and any(t in ("gate", "up", "down") for t in targets):
        problems.append(f"model {model.name or model.hf_id} is a mixture of experts: adapting its feed-forward "
                        "layers (gate, up, down) is not modelled; target attention layers (q, k, v, o)")
    return problems


def adapter_params(model: ModelSpec, rank: int, targets: Sequence[str]) -> int:
    """Parameters of one adapter of rank ``rank``: ``r (d_in + d_out)`` per target per layer."""
    shapes = _shapes(model)
    return model.num_layers * sum(rank * (shapes[t][0] + shapes[t][1]) for t in targets)


def adapter_bytes(model: ModelSpec, rank: int, targets: Sequence[str], dtype: str) -> float:
    """Bytes of one adapter's weights (what a slot holds and a load moves)."""
    return adapter_params(model, rank, targets) * DTYPE_BYTES[dtype]


def adapter_flops_per_token(model: ModelSpec, rank: int, targets: Sequence[str]) -> float:
    """Extra FLOPs of one token through one adapter: ``2 r (d_in + d_out)`` per adapted layer."""
    return 2.0 * adapter_params(model, rank, targets)
