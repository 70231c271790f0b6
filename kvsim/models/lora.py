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
to the base model's (``AdapterSpec.kv_sharing``) -- then that context's cached blocks can be
reused across adapters, by value (each adapter's request copies them into its own pages: no
recompute, no memory saved) or by bytes (one physical copy read by all: memory saved too).

Dense and grouped-query attention models only: MLA projections and routed experts are not
adapter targets here (refused at validation).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from kvsim.dtypes import DTYPE_BYTES
from kvsim.models.llm import ModelSpec
from kvsim.spec_types import FrozenSpec

__all__ = ["AdapterSpec", "LoraTarget", "TARGETS", "adapter_params", "adapter_bytes",
           "adapter_flops_per_token", "adapter_problems"]

LoraTarget = Literal["q", "k", "v", "o", "gate", "up", "down"]
TARGETS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")
"""Linear layers an adapter may adapt (per transformer layer)."""

KvSharing = Literal["none", "value_reuse", "byte_sharing"]


class AdapterSpec(FrozenSpec):
    """The LoRA adapters requests may name (all of one base model, the scenario's ``model``).

    Attributes
    ----------
    count : int
        Adapters; requests name them ``0 .. count - 1``.
    rank : int
        LoRA rank ``r`` of every adapter.
    targets : list of str
        Adapted linear layers of every transformer layer (default ``[q, k, v, o]``, the common
        attention-only recipe of the LoRA paper's experiments).
    dtype : str
        Storage format of the adapter weights.
    popularity : str
        How requests pick an adapter: ``uniform``, or ``zipf`` with exponent ``zipf_s``
        (adapter 0 the most popular).
    kv_sharing : str
        ``none``: KV computed under one adapter serves only that adapter. ``value_reuse``:
        blocks of a shared context (a workload's shared documents or system prompt) computed
        under any adapter are reused by another adapter's request by copying them into its own
        pages. ``byte_sharing``: those blocks are one physical copy that every adapter reads.
        Declaring either is the scenario's claim that the adapters leave that context's KV equal
        (e.g. adapters that act only on the request's own tokens); kvsim does not check it.
    """

    count: int = Field(gt=0)
    rank: int = Field(default=16, gt=0)
    targets: tuple[LoraTarget, ...] = ("q", "k", "v", "o")
    dtype: str = "bf16"
    popularity: Literal["uniform", "zipf"] = "uniform"
    zipf_s: float = Field(default=1.0, gt=0)
    kv_sharing: KvSharing = "none"

    @field_validator("targets")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("give at least one target layer, e.g. [q, k, v, o]")
        if len(set(value)) != len(value):
            raise ValueError(f"a target is listed twice: {list(value)}")
        return value

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        if value not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {value!r}; known: {', '.join(DTYPE_BYTES)}")
        return value


def _shapes(model: ModelSpec) -> dict[str, tuple[int, int]]:
    """``(d_in, d_out)`` of each target layer of one transformer layer."""
    h, q_width, kv_width = model.hidden_size, model.num_attention_heads * model.head_dim, \
        model.num_kv_heads * model.head_dim
    i = model.intermediate_size
    return {"q": (h, q_width), "k": (h, kv_width), "v": (h, kv_width), "o": (q_width, h),
            "gate": (h, i), "up": (h, i), "down": (i, h)}


def adapter_problems(model: ModelSpec, spec: AdapterSpec) -> list[str]:
    """Why ``spec`` cannot adapt ``model`` (empty when it can)."""
    problems = []
    if model.mla is not None:
        problems.append(f"model {model.name or model.hf_id} uses MLA attention; LoRA adapters are modelled "
                        "for multi-head and grouped-query attention only")
    if model.moe is not None and any(t in ("gate", "up", "down") for t in spec.targets):
        problems.append(f"model {model.name or model.hf_id} is a mixture of experts: adapting its feed-forward "
                        "layers (gate, up, down) is not modelled; target attention layers (q, k, v, o)")
    return problems


def adapter_params(model: ModelSpec, spec: AdapterSpec) -> int:
    """Parameters of one adapter: ``r (d_in + d_out)`` per target per transformer layer."""
    shapes = _shapes(model)
    per_layer = sum(spec.rank * (shapes[t][0] + shapes[t][1]) for t in spec.targets)
    return model.num_layers * per_layer


def adapter_bytes(model: ModelSpec, spec: AdapterSpec) -> float:
    """Bytes of one adapter's weights (what a slot holds and a load moves)."""
    return adapter_params(model, spec) * DTYPE_BYTES[spec.dtype]


def adapter_flops_per_token(model: ModelSpec, spec: AdapterSpec) -> float:
    """Extra FLOPs of one token through one adapter: ``2 r (d_in + d_out)`` per adapted layer."""
    return 2.0 * adapter_params(model, spec)
