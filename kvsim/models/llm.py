"""LLM architecture specs and the quantities derived from them.

The architecture numbers are those of a Hugging Face ``config.json``. From them this module
derives parameter counts, weight bytes, KV-cache bytes per token and FLOPs per token. The
formulas follow ``../shared/reference/hardware_facts.md`` (section 3 and its appendix):

- GQA/MHA attention params: ``h*nh*hd + 2*h*nkv*hd + nh*hd*h`` (+ ``2*hd`` for q/k norms)
- MLA attention params: ``h*q_lora + q_lora + q_lora*nh*(nope+rope) + h*(kv_lora+rope) + kv_lora
  + kv_lora*nh*(nope+v) + nh*v*h``
- dense MLP ``3*h*I``; MoE layer ``(E+shared)*3*h*moe_I + h*E`` router (+ ``E`` bias)
- KV bytes/token: GQA ``2*L*nkv*hd*b``; MLA ``L*(kv_lora + rope)*b``
- linear FLOPs/token ``2 * (active params - input embedding)`` (lm_head included)
- attention FLOPs per (query token, context token) pair: ``2*L*nh*(d_qk + d_v)``
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import Field, model_validator

from kvsim.dtypes import DTYPE_BYTES
from kvsim.models.attention_span import AttentionSpan
from kvsim.models.vision import VisionTowerSpec
from kvsim.spec_types import Count, FrozenSpec, field_errors

__all__ = ["ModelSpec", "MlaSpec", "MoeSpec", "WEIGHT_GROUPS", "MAX_DIMENSION", "Dimension"]

MAX_DIMENSION = 2**31 - 1
"""Largest architecture size accepted (layers, widths, heads, experts, vocabulary): the int32 range
engines keep tensor shapes in. It also keeps every derived count (parameters, bytes, FLOPs) a
finite float: the largest product of four such sizes is about 2**124."""

Dimension = Annotated[int, Field(ge=1, le=MAX_DIMENSION)]
"""A size of the architecture: at least 1, at most :data:`MAX_DIMENSION`."""

WEIGHT_GROUPS = ("embedding", "attention", "feed_forward", "experts", "lm_head")
"""Parts of a checkpoint that may be stored in different number formats: the input embedding,
attention (with every norm), the non-routed feed-forward (dense MLPs, shared experts, routers),
the routed experts, and the output projection (none when tied to the embedding)."""


class MlaSpec(FrozenSpec):
    """Multi-head latent attention (DeepSeek-V2/V3) dimensions."""

    q_lora_rank: Dimension
    kv_lora_rank: Dimension
    qk_nope_head_dim: Dimension
    qk_rope_head_dim: Dimension
    v_head_dim: Dimension


class MoeSpec(FrozenSpec):
    """Mixture-of-experts feed-forward layers."""

    num_experts: Dimension
    experts_per_token: Dimension
    expert_intermediate_size: Dimension
    shared_experts: Annotated[Count, Field(le=MAX_DIMENSION)] = 0
    first_dense_layers: Count = 0  # below the model's num_layers: ModelSpec checks it
    router_bias: bool = False

    @model_validator(mode="after")
    def _k_le_e(self) -> MoeSpec:
        if self.experts_per_token > self.num_experts:
            raise field_errors(MoeSpec, [(("experts_per_token",), f"{self.experts_per_token} routed experts per "
                                          f"token, but the layer has num_experts {self.num_experts}",
                                          self.experts_per_token)])
        return self


class ModelSpec(FrozenSpec):
    """Architecture of a decoder-only transformer, as in its ``config.json``.

    ``max_position_embeddings`` (optional) is the length the rotary-embedding table is built for
    (vLLM precomputes it whole, whatever ``max_model_len``: :func:`kvsim.models.memory.rope_table_bytes`);
    ``vision`` (optional) the vision tower a multimodal checkpoint ships
    (:class:`~kvsim.models.vision.VisionTowerSpec`). Neither is part of the text model's
    parameters or FLOPs.
    """

    name: str = ""
    hf_id: str
    num_layers: Dimension
    hidden_size: Dimension
    num_attention_heads: Dimension
    num_kv_heads: Dimension
    head_dim: Dimension
    intermediate_size: Dimension
    vocab_size: Dimension
    tie_word_embeddings: bool = False
    qk_norm: bool = False
    mla: MlaSpec | None = None
    moe: MoeSpec | None = None
    sliding_window: Dimension | None = None
    sliding_window_layers: Count | None = None  # 0: a window given, no layer uses it
    max_position_embeddings: Dimension | None = None
    vision: VisionTowerSpec | None = None
    sources: dict[str, str]

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        """Refuse fields that contradict each other, naming the one at fault, then check what is
        derived from them once, so no caller (catalog, scenario override, Python) meets a model
        with negative weights or zero KV per token later, in the middle of a run."""
        problems = self._field_problems()
        if not problems:
            problems = self._derived_problems()
        if problems:
            raise field_errors(ModelSpec, problems)
        return self

    def _field_problems(self) -> list[tuple[tuple[str, ...], str, object]]:
        problems: list[tuple[tuple[str, ...], str, object]] = []
        layers = self.num_layers
        if self.sliding_window_layers is not None:
            if self.sliding_window is None:
                problems.append((("sliding_window_layers",), "needs sliding_window (the window, in tokens)",
                                 self.sliding_window_layers))
            elif self.sliding_window_layers > layers:
                problems.append((("sliding_window_layers",), f"{self.sliding_window_layers} sliding layers, but the "
                                 f"model has num_layers {layers}", self.sliding_window_layers))
        if self.mla is None:  # MLA's latent is shared by every head: no KV head count to divide
            heads, kv = self.num_attention_heads, self.num_kv_heads
            if kv > heads:
                problems.append((("num_kv_heads",), f"{kv} KV heads, more than num_attention_heads ({heads})", kv))
            elif heads % kv:
                problems.append((("num_kv_heads",), f"num_attention_heads ({heads}) must be a multiple of "
                                 f"num_kv_heads ({kv}): each KV head serves a whole group of query heads", kv))
        if self.moe is not None and self.moe.first_dense_layers >= layers:
            dense = self.moe.first_dense_layers
            problems.append((("moe", "first_dense_layers"), f"{dense} dense layers of a model with num_layers "
                             f"{layers} leave {'no' if dense == layers else 'a negative number of'} MoE layers: "
                             f"give at most {layers - 1} (or drop moe: for a dense model)", dense))
        return problems

    def _derived_problems(self) -> list[tuple[tuple[str, ...], str, object]]:
        """What the model's fields make of it, each finite and positive (a group may be empty)."""
        try:
            derived = {
                "total parameters": self.total_params,
                "active parameters per token": self.active_params,
                "weight bytes": self.weight_bytes("bf16"),
                "KV bytes per token": self.kv_bytes_per_token_total("bf16"),
                "FLOPs per token": self.linear_flops_per_token,
                "attention FLOPs per (query, context) token pair": min(self.attention_flops_per_pair(decode=True),
                                                                       self.attention_flops_per_pair(decode=False)),
            }
            groups = self.group_params()
        except ArithmeticError as exc:  # an overflow: sizes far beyond any model
            return [((), f"the architecture's sizes overflow what kvsim derives from them ({exc})", None)]
        problems: list[tuple[tuple[str, ...], str, object]] = [((), f"its fields give {value:g} {what}: check the architecture numbers", value)
                    for what, value in derived.items() if not (math.isfinite(value) and value > 0)]
        problems += [((), f"its fields give {params:g} parameters in the {group} weights: check the architecture "
                          "numbers", params) for group, params in groups.items() if not params >= 0]
        if not problems and self.active_params > self.total_params:
            problems.append(((), "its fields give more active parameters per token than parameters", None))
        return problems

    @property
    def sliding_layers(self) -> int:
        """Layers with sliding-window attention (all of them when only ``sliding_window`` is given)."""
        if self.sliding_window is None:
            return 0
        return self.num_layers if self.sliding_window_layers is None else self.sliding_window_layers

    def attention_span(self) -> AttentionSpan | None:
        """Per-token attention and KV counts with the sliding layers (None: every layer full)."""
        if not self.sliding_layers or self.sliding_window is None:  # (sliding_layers is 0 without a window)
            return None
        return AttentionSpan(self.sliding_window, self.sliding_layers / self.num_layers)

    # ---- parameter counts ------------------------------------------------------------------
    def _attention_params(self) -> int:
        h, nh = self.hidden_size, self.num_attention_heads
        if self.mla is not None:
            m = self.mla
            return (
                h * m.q_lora_rank + m.q_lora_rank
                + m.q_lora_rank * nh * (m.qk_nope_head_dim + m.qk_rope_head_dim)
                + h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
                + m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim)
                + nh * m.v_head_dim * h
            )
        hd = self.head_dim
        params = h * nh * hd + 2 * h * self.num_kv_heads * hd + nh * hd * h
        return params + (2 * hd if self.qk_norm else 0)

    @property
    def attention_params_per_layer(self) -> int:
        """Parameters of one layer's attention block (projections, q/k norms; no layer norms)."""
        return self._attention_params()

    def _dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert (0 for a dense model)."""
        return 3 * self.hidden_size * self.moe.expert_intermediate_size if self.moe else 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.moe.first_dense_layers if self.moe else 0

    def _router_params(self) -> int:
        m = self.moe
        if m is None:  # a dense model routes nothing
            return 0
        return self.hidden_size * m.num_experts + (m.num_experts if m.router_bias else 0)

    @property
    def embedding_params(self) -> int:
        """Input embedding table parameters."""
        return self.vocab_size * self.hidden_size

    def _non_expert_params(self) -> int:
        """Everything but routed experts: embeddings, attention, norms, dense MLPs, shared experts."""
        h = self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        per_layer_common = self._attention_params() + 2 * h
        total = self.embedding_params + lm_head + h + self.num_layers * per_layer_common
        if self.moe is None:
            return total + self.num_layers * self._dense_mlp_params()
        total += self.moe.first_dense_layers * self._dense_mlp_params()
        total += self.num_moe_layers * (self.moe.shared_experts * self.expert_params + self._router_params())
        return total

    @property
    def total_params(self) -> int:
        """All parameters (all experts)."""
        routed = self.num_moe_layers * self.moe.num_experts * self.expert_params if self.moe else 0
        return self._non_expert_params() + routed

    @property
    def active_params(self) -> int:
        """Parameters used per token (routed experts: ``experts_per_token`` of them)."""
        routed = self.num_moe_layers * self.moe.experts_per_token * self.expert_params if self.moe else 0
        return self._non_expert_params() + routed

    # ---- bytes -----------------------------------------------------------------------------
    def group_params(self) -> dict[str, float]:
        """Parameters of each of :data:`WEIGHT_GROUPS` (they add up to :attr:`total_params`)."""
        h = self.hidden_size
        attention = self.num_layers * (self._attention_params() + 2 * h) + h  # with every norm
        experts = self.num_moe_layers * self.moe.num_experts * self.expert_params if self.moe else 0
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * h
        groups = {"embedding": float(self.embedding_params), "attention": float(attention),
                  "experts": float(experts), "lm_head": float(lm_head)}
        groups["feed_forward"] = float(self.total_params) - sum(groups.values())
        return {name: groups[name] for name in WEIGHT_GROUPS}

    def weight_bytes(self, dtype: str, weight_dtypes: dict[str, str] | None = None) -> float:
        """Bytes of all weights stored in ``dtype``, or per group where ``weight_dtypes`` says
        (an FP8 checkpoint that keeps attention in BF16: ``{"attention": "bf16"}``)."""
        if not weight_dtypes:
            return self.total_params * DTYPE_BYTES[dtype]
        return sum(params * DTYPE_BYTES[weight_dtypes.get(group, dtype)]
                   for group, params in self.group_params().items())

    def weight_bytes_read(self, tokens: float, dtype: str, weight_dtypes: dict[str, str] | None = None) -> float:
        """Weight bytes one forward pass over ``tokens`` tokens reads from memory.

        Every matrix is read once per pass. The input embedding is a table lookup of a few rows,
        not a full read (unless it doubles as the lm_head, tied). For an MoE model only the
        routed experts some token chose are read; with uniform routing the expected number of
        distinct experts a layer touches is ``E * (1 - (1 - k/E) ** tokens)``.
        """
        if weight_dtypes:
            return self._grouped_bytes_read(tokens, dtype, weight_dtypes)
        lookup_only = 0 if self.tie_word_embeddings else self.embedding_params
        params: float = self._non_expert_params() - lookup_only
        if self.moe is not None and tokens > 0:
            params += self.num_moe_layers * self._touched_experts(tokens) * self.expert_params
        elif self.moe is None:
            params = self.total_params - lookup_only
        return params * DTYPE_BYTES[dtype]

    def _touched_experts(self, tokens: float) -> float:
        if self.moe is None:  # a dense model has no routed experts
            return 0.0
        e, k = self.moe.num_experts, self.moe.experts_per_token
        return e * (1.0 - math.pow(1.0 - k / e, tokens))

    def _grouped_bytes_read(self, tokens: float, dtype: str, weight_dtypes: dict[str, str]) -> float:
        groups = self.group_params()
        nbytes = {group: params * DTYPE_BYTES[weight_dtypes.get(group, dtype)] for group, params in groups.items()}
        read = nbytes["attention"] + nbytes["feed_forward"] + nbytes["lm_head"]
        if self.tie_word_embeddings:
            read += nbytes["embedding"]  # the embedding doubles as the lm_head: read in full
        if self.moe is not None and tokens > 0:
            read += nbytes["experts"] * self._touched_experts(tokens) / self.moe.num_experts
        return read

    def kv_bytes_per_token(self, dtype: str, tp: int = 1) -> float:
        """KV-cache bytes one token occupies on *each* card of a TP group of ``tp`` cards.

        GQA heads are split across cards; when ``tp`` exceeds the KV head count engines replicate
        heads, so each card holds at least one. MLA's latent is not split by head: every card of
        the group holds the whole latent.
        """
        b = DTYPE_BYTES[dtype]
        if self.mla is not None:
            return self.num_layers * (self.mla.kv_lora_rank + self.mla.qk_rope_head_dim) * b
        heads_per_card = max(self.num_kv_heads / tp, 1.0)
        return 2.0 * self.num_layers * heads_per_card * self.head_dim * b

    def kv_bytes_per_token_total(self, dtype: str) -> float:
        """KV-cache bytes per token of the unsplit model (what a transfer of the cache moves)."""
        return self.kv_bytes_per_token(dtype, tp=1)

    # ---- FLOPs -----------------------------------------------------------------------------
    @property
    def lm_head_flops(self) -> float:
        """FLOPs of the output projection (logits) for one sampled position."""
        return 2.0 * self.vocab_size * self.hidden_size

    @property
    def body_flops_per_token(self) -> float:
        """Matrix-multiply FLOPs of the transformer body for one token (no embedding, no lm_head).

        Engines compute logits only where a token is sampled, so the lm_head is counted
        separately (:attr:`lm_head_flops`).
        """
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return 2.0 * (self.active_params - self.embedding_params - lm_head)

    @property
    def linear_flops_per_token(self) -> float:
        """Body plus lm_head FLOPs for one token: ``2 * (active params - input embedding)``.

        For a model with tied embeddings the lm_head still costs its multiply, so it is added back.
        """
        return self.body_flops_per_token + self.lm_head_flops

    def attention_flops_per_pair(self, decode: bool) -> float:
        """Attention FLOPs for one (query token, context token) pair (QK^T and PV).

        MLA prefill runs in MHA form (d_qk = nope + rope, d_v); MLA decode runs absorbed, on the
        latent (d_qk = kv_lora + rope, d_v = kv_lora).
        """
        nh, layers = self.num_attention_heads, self.num_layers
        if self.mla is None:
            return 2.0 * layers * nh * (2 * self.head_dim)
        m = self.mla
        if decode:
            return 2.0 * layers * nh * (m.kv_lora_rank + m.qk_rope_head_dim + m.kv_lora_rank)
        return 2.0 * layers * nh * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
