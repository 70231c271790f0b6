"""Iteration time of an instance with a parallel layout (pipeline stages, expert parallelism,
data-parallel attention), built on the same roofline as :class:`RooflineStepTime`.

Engine semantics (how the scheduler's batch of ``T`` tokens runs):

- The batch is cut into ``m`` micro-batches (default ``pp``); each passes the ``pp`` stages in
  turn. A stage is ``tp`` cards; its time for one micro-batch is the roofline of its layers
  (``max(compute, memory)``) plus its collectives plus the send of the activations to the next
  stage. The slowest stage (most layers, and it is charged the lm_head too: an upper bound)
  sets the pace. The iteration takes :func:`~kvsim.models.parallel.pipeline_time_s` of that
  stage time (``continuous``: ``m`` stage times, vLLM's virtual engines in steady state;
  ``flush``: ``m + pp - 1``), plus the engine's per-step overhead once
  (:class:`~kvsim.models.engine.EngineSpec`, as the plain roofline).
- Each micro-batch re-reads its stage's weights: pipelining cuts the bytes each card streams
  per pass by ``pp`` but not the number of passes, which is why PP helps capacity more than
  decode speed.
- Data-parallel attention: each of the ``dp_attention`` ranks runs attention on ``1 /
  dp_attention`` of the sequences (balanced) over ``tp / dp_attention`` cards, reading only
  their KV; attention weights are replicated per rank. The batch is the instance's, up to
  ``dp_attention`` times the per-rank limits (:class:`~kvsim.serving.specs.InstanceSpec`); a
  batch the ranks could not share evenly (one long prompt alone) is costed as if they did.
- MoE layers: with ``ep`` 1 the experts are tensor-parallel over the stage; with data-parallel
  attention the ranks' tokens are gathered before and scattered after (the volume of one
  all-reduce over the stage). With ``ep = tp`` each card dispatches ``T / (m tp)`` tokens to the
  ranks holding their experts and gets them back (two all-to-alls per MoE layer); the busiest
  rank computes and receives ``imbalance`` times the mean.
- Per layer: one all-reduce after attention (over the attention group, the rank's tokens), and
  one after the dense feed-forward (the same group) or the MoE collectives above.
- The engine's host time per iteration (scheduling, inputs) is one data-parallel rank's: each
  rank schedules its own share of the batch in its own process, side by side with the others.

Collectives use the link figures the sizing computed from the hardware the layout spans
(:class:`~kvsim.models.parallel.LayoutLinks`).
"""

from __future__ import annotations

import math

from kvsim.dtypes import DTYPE_BYTES
from kvsim.hardware.specs import AcceleratorSpec
from kvsim.models.collective_curves import interconnect_for
from kvsim.models.engine import EngineSpec
from kvsim.models.kernels import launches_per_pass
from kvsim.models.llm import WEIGHT_GROUPS, ModelSpec
from kvsim.models.parallel import (
    Layout,
    LayoutLinks,
    PipelineSchedule,
    alltoall_bytes_per_card,
    alltoall_s,
    expert_imbalance,
    group_allreduce_s,
    kv_bytes_per_token_per_card,
    p2p_send_s,
    pipeline_time_s,
    stage_layers,
    stage_send_bytes_per_card,
)
from kvsim.models.step_time import ACTIVATION_DTYPE, AchievedRates, BatchShape, StepBreakdown, hide_host

__all__ = ["LayoutStepTime"]


class LayoutStepTime:
    """Step-time model of one instance with ``layout`` on ``accelerator`` cards.

    Parameters
    ----------
    model, accelerator, dtype, kv_dtype
        As :class:`~kvsim.models.step_time.RooflineStepTime`.
    layout : Layout
    links : LayoutLinks
        Link figures of the layout's collectives (from the hardware it spans).
    micro_batches : int, optional
        Micro-batches per iteration (default ``layout.pp``).
    schedule : str
        ``continuous`` or ``flush`` (see :func:`~kvsim.models.parallel.pipeline_time_s`).
    expert_skew : float
        Zipf exponent of expert popularity (:func:`~kvsim.models.parallel.expert_imbalance`).
    engine : EngineSpec, optional
        The engine's per-step overhead.
    weight_dtypes : dict, optional
        Storage format of weight groups that differ from ``dtype``.
    compute_dtype : str, optional
        The format the matrix multiplies run in (default: ``dtype``).
    graph_max_tokens : int, optional
        The largest micro-batch a data-parallel rank replays as a graph, tokens (as
        :class:`~kvsim.models.step_time.RooflineStepTime`; a rank's share of a micro-batch is
        ``tokens / (micro_batches x dp_attention)``).
    """

    def __init__(self, model: ModelSpec, accelerator: AcceleratorSpec, layout: Layout, links: LayoutLinks,
                 dtype: str, kv_dtype: str, micro_batches: int | None = None,
                 schedule: PipelineSchedule = "continuous", expert_skew: float = 0.0,
                 engine: EngineSpec | None = None, weight_dtypes: dict[str, str] | None = None,
                 compute_dtype: str | None = None, graph_max_tokens: int | None = None):
        self.model, self.accelerator, self.layout, self.links = model, accelerator, layout, links
        self.dtype, self.kv_dtype = dtype, kv_dtype
        self.micro_batches = micro_batches or layout.pp
        self.schedule = schedule
        self.engine = engine if engine is not None else EngineSpec()
        self._rates = AchievedRates(accelerator, compute_dtype or dtype, layout.tp)  # one stage
        L = model.num_layers
        self._layers = max(stage_layers(L, layout.pp))
        self._share = self._layers / L
        moe = model.moe
        self._moe_layers = model.num_moe_layers * self._share  # of the slowest stage
        self._dense_layers = self._layers - self._moe_layers
        self.imbalance = expert_imbalance(moe.num_experts, layout.ep, expert_skew) if moe and layout.ep > 1 else 1.0
        self._expert_flops = 2.0 * moe.experts_per_token * model.expert_params * model.num_moe_layers if moe else 0.0
        self._kv_on_card = kv_bytes_per_token_per_card(model, layout, kv_dtype)
        self._act = DTYPE_BYTES[ACTIVATION_DTYPE]
        fmt = weight_dtypes or {}
        b = {group: DTYPE_BYTES[fmt.get(group, dtype)] for group in WEIGHT_GROUPS}
        h = model.hidden_size
        a, t = layout.attention_tp, layout.tp
        attention = L * (model.attention_params_per_layer + 2 * h)
        routed = model.num_moe_layers * moe.num_experts * model.expert_params if moe else 0.0
        ffn = model.total_params - model.embedding_params - attention - routed - h
        if not model.tie_word_embeddings:
            ffn -= model.vocab_size * h  # lm_head, read by the last stage
        lm_head = model.vocab_size * h  # tied or not, the output projection is read
        lm_head_b = b["embedding"] if model.tie_word_embeddings else b["lm_head"]
        # bytes a card of the slowest stage streams per pass, without the routed experts
        self._fixed_bytes = (self._share * (attention * b["attention"] / a + ffn * b["feed_forward"] / t)
                             + lm_head * lm_head_b / t)
        self._expert_bytes = model.expert_params * b["experts"] / t  # one touched expert, one layer, per card
        launches = launches_per_pass(model, self._layers)  # one stage pass
        self._kernels_s = self.engine.kernel_s * launches
        self._issue_s = self.engine.eager_launch_s * launches
        if graph_max_tokens is None:
            graph_max_tokens = self.engine.captured_tokens(256, 2048)
        self._graph_max = graph_max_tokens if self.engine.graph_mode else 0
        # engine.collectives measured: the card's interconnect curve (kvsim.models.collective_curves)
        collectives = self.engine.collectives
        self._interconnect = interconnect_for(accelerator, collectives).name if collectives != "alpha_beta" else None

    # -------------------------------------------------------------------------------- parts

    def _touched_experts(self, tokens: float) -> float:
        moe = self.model.moe
        if moe is None or tokens <= 0:  # a dense model has no routed experts
            return 0.0
        e, k = moe.num_experts, moe.experts_per_token
        return e * (1.0 - math.pow(1.0 - k / e, tokens))

    def weight_bytes_per_card(self, tokens: float) -> float:
        """Weight bytes a card of the slowest stage streams for one micro-batch of ``tokens``
        tokens: its share of the dense weights and lm_head, plus every routed expert the tokens
        touch (each token picks ``experts_per_token`` of ``num_experts``, independently)."""
        weights = self._fixed_bytes
        if self.model.moe is not None:
            weights += self._moe_layers * self._touched_experts(tokens) * self._expert_bytes
        return weights

    @property
    def launches_per_pass(self) -> float:
        """Kernels one pass of the slowest stage launches."""
        return launches_per_pass(self.model, self._layers)

    def _comm_s(self, tokens: float) -> float:
        """Collectives of the slowest stage for one micro-batch of ``tokens`` tokens."""
        lay, links, h, act = self.layout, self.links, self.model.hidden_size, self._act
        rank_tokens = tokens / lay.dp_attention
        att = links.attention
        icn = self._interconnect
        attention_ar = group_allreduce_s(rank_tokens * h * act, att, icn)
        total = self._layers * attention_ar + self._dense_layers * attention_ar
        moe = self.model.moe
        if self._moe_layers and moe is not None:  # (no MoE layers without moe)
            stage = links.stage
            if lay.ep == 1:
                per_layer = group_allreduce_s(tokens * h * act, stage, icn)
            else:
                nbytes = alltoall_bytes_per_card(tokens / lay.tp, h, act, moe.num_experts, moe.experts_per_token,
                                                 lay.ep)
                per_layer = 2.0 * alltoall_s(nbytes, stage, self.imbalance, icn)
            total += self._moe_layers * per_layer
        return total

    def stage_breakdown(self, batch: BatchShape) -> StepBreakdown:
        """Time of the slowest stage for one micro-batch of ``batch`` (no overhead)."""
        m, lay, model = self.micro_batches, self.layout, self.model
        tokens = batch.tokens / m
        flops = (model.body_flops_per_token * batch.tokens
                 + (self.imbalance - 1.0) * self._expert_flops * batch.tokens
                 + model.attention_flops_per_pair(False) * batch.prefill_pairs
                 + model.attention_flops_per_pair(True) * batch.decode_context_tokens) * self._share / m \
            + model.lm_head_flops * batch.sampled_seqs / m
        kv_tokens = (batch.prefill_context_tokens + batch.prefill_tokens + batch.decode_context_tokens) / m
        weights = self.weight_bytes_per_card(tokens)
        kv = kv_tokens / lay.dp_attention * self._kv_on_card
        send = 0.0
        if lay.pp > 1:
            send = p2p_send_s(stage_send_bytes_per_card(tokens, model.hidden_size, self._act, lay.tp),
                              self.links.send_Bps, self.links.send_latency_s)
        # small GEMMs reach less of the peak: the micro-batch's tokens set the size (see step_time)
        rates = self._rates
        rate = rates.gemm_flops_per_s(tokens)
        comm_s = self._comm_s(tokens) + send
        kernels_s = self._kernels_s
        if tokens / lay.dp_attention > self._graph_max:  # eager: the host's issue time the GPU does not hide
            linear = (model.body_flops_per_token + (self.imbalance - 1.0) * self._expert_flops) * tokens * self._share
            gpu_s = max(linear / rate, weights / rates.weight_Bps) + comm_s + kernels_s
            kernels_s += max(0.0, self._issue_s - gpu_s)
        return StepBreakdown(compute_s=flops / rate,
                             memory_s=weights / rates.weight_Bps + kv / rates.kv_Bps,
                             comm_s=comm_s, overhead_s=0.0, kernels_s=kernels_s)

    def breakdown(self, batch: BatchShape, remote_kv_Bps: float | None = None) -> StepBreakdown:
        """Time components of one iteration: the slowest stage's, times the pipeline factor.
        KV read in place from peers is not modelled with a layout (sizing refuses it)."""
        if batch.remote_kv_tokens:
            raise ValueError("KV read in place from a peer's HBM is modelled for plain tensor-parallel "
                             "instances inside one node only")
        stage = self.stage_breakdown(batch)
        factor = pipeline_time_s(1.0, self.layout.pp, self.micro_batches, self.schedule)
        parts = StepBreakdown(compute_s=stage.compute_s * factor, memory_s=stage.memory_s * factor,
                              comm_s=stage.comm_s * factor,
                              overhead_s=self._overhead_s(batch),
                              kernels_s=stage.kernels_s * factor)
        return hide_host(parts, parts.overhead_s) if self.engine.overlaps_host else parts

    def _overhead_s(self, batch: BatchShape) -> float:
        """The host's time of one iteration: with data-parallel attention each rank is its own
        engine process with its own scheduler (vLLM deploys each DP rank as a separate "core
        engine", docs/serving/data_parallel_deployment.md; SGLang's DP attention likewise runs
        a scheduler per rank), so the ranks' host work runs side by side and the iteration waits
        for one rank's share of the batch (even shares, as the rest of this model)."""
        ranks = self.layout.dp_attention
        if ranks == 1:
            return self.engine.step_overhead_s(batch.sequences, batch.tokens)
        return self.engine.step_overhead_s(batch.sequences / ranks, batch.tokens / ranks)

    def iteration_time_s(self, batch: BatchShape) -> float:
        """Duration of one iteration of ``batch``, seconds."""
        return self.breakdown(batch).total_s
