"""The step time of an instance with early exit (:mod:`kvsim.models.early_exit` explains the
arithmetic): a roofline instance whose decode-only steps stop at their batch's deepest exit."""

from __future__ import annotations

import numpy as np

from kvsim.dtypes import DTYPE_BYTES
from kvsim.models.early_exit import (
    EarlyExitSpec,
    ExitProblem,
    deepest_exit,
    depth_probabilities,
    exit_cdf,
    exit_problems,
    exit_sizing,
    kv_fill_bytes,
)
from kvsim.models.step_time import BatchShape, RooflineStepTime, StepBreakdown, hide_host
from kvsim.models.weight_offload import WeightStream, layer_bytes_per_card

__all__ = ["EarlyExitStepTime", "ExitProblem", "exit_sizing"]  # (the last two for sizing)


class EarlyExitStepTime:
    """A roofline instance (:class:`~kvsim.models.step_time.RooflineStepTime`) whose decode-only
    steps stop at their batch's deepest exit (see the module docstring).

    Parameters
    ----------
    spec : EarlyExitSpec
    flat : RooflineStepTime
        The instance's roofline *without* its weight stream (this class applies the stream).
    stream : WeightStream, optional
        The instance's offloaded layers.
    rng : numpy.random.Generator, optional
        The stream each decode step's depth is drawn from (``engine.early_exit.<instance>``); a
        model without one (a planner's) answers :meth:`iteration_time_s` only.
    """

    def __init__(self, spec: EarlyExitSpec, flat: RooflineStepTime, stream: WeightStream | None = None,
                 rng: np.random.Generator | None = None):
        model = flat.model
        problem = exit_problems(spec, model)
        if problem is not None:
            raise problem
        self.spec, self.flat, self.stream, self.rng = spec, flat, stream, rng
        self.model = model
        self.layers = layers = model.num_layers
        self.depths, self.cdf = exit_cdf(spec, layers)
        tp = flat.tp
        rates = flat._rates
        layer_bytes = layer_bytes_per_card(model, flat.dtype, flat.weight_dtypes, tp)
        self._weight_Bps, self._kv_Bps = rates.weight_Bps, rates.kv_Bps
        self._layer_weights_s = layer_bytes / rates.weight_Bps  # one layer's weights from HBM
        self._rest_weights_s = (model.weight_bytes_read(1, flat.dtype, flat.weight_dtypes) / tp
                                - layers * layer_bytes) / rates.weight_Bps  # the LM head's (untied)
        self._layer_linear_flops = model.body_flops_per_token / layers
        self._kv_layer_bytes = model.kv_bytes_per_token(flat.kv_dtype, tp) / layers  # per token, layer, card
        kv_dim = model.num_kv_heads * model.head_dim
        self._kv_proj_flops = 2.0 * model.hidden_size * 2 * kv_dim  # K and V of one token, one layer
        attention_dtype = (flat.weight_dtypes or {}).get("attention", flat.dtype)
        kv_proj_bytes = 2 * model.hidden_size * kv_dim * DTYPE_BYTES[attention_dtype] / tp
        self._kv_proj_s = kv_proj_bytes / rates.weight_Bps
        self._kv_proj_share = kv_proj_bytes / layer_bytes  # of a streamed layer's transfer
        self._resident = layers - (stream.offloaded if stream is not None else 0)
        self._heads_at = [sum(1 for e in spec.exit_layers if e <= d and e < layers) for d in self.depths]

    # --- the planners' view ---------------------------------------------------------------
    def iteration_time_s(self, batch: BatchShape) -> float:
        """Expected duration of ``batch``, seconds: over the distribution of its deepest exit for a
        decode-only step, the full pass otherwise."""
        if batch.prefill_tokens or not batch.decode_seqs:
            return self.full_breakdown(batch).total_s
        probabilities = depth_probabilities(self.cdf, batch.decode_seqs)
        return sum(p * self.at_depth(batch, i).total_s for i, p in enumerate(probabilities) if p > 0.0)

    # --- the engine's view ----------------------------------------------------------------
    def breakdown(self, batch: BatchShape, remote_kv_Bps: float | None = None) -> StepBreakdown:
        """One iteration's components, seconds; a decode-only step draws its depth (one draw)."""
        if batch.prefill_tokens or not batch.decode_seqs:
            return self.full_breakdown(batch, remote_kv_Bps)
        return self.at_depth(batch, self.draw(batch.decode_seqs), remote_kv_Bps)

    def draw(self, batch: int) -> int:
        """Index into :attr:`depths` of a step of ``batch`` tokens' deepest exit (one uniform draw)."""
        if self.rng is None:
            raise ValueError("an early-exit step model draws each decode step's depth: give it a random stream")
        depth = deepest_exit(self.depths, self.cdf, batch, self.rng.random())
        return self.depths.index(depth)

    def full_breakdown(self, batch: BatchShape, remote_kv_Bps: float | None = None) -> StepBreakdown:
        """Every layer, as :class:`RooflineStepTime` with the stream computes it."""
        parts = self.flat.breakdown(batch, remote_kv_Bps)
        stream = self.stream
        if stream is None:
            return parts
        x = max(parts.compute_s, parts.memory_s)
        c = x / self.layers
        memory_s = max(parts.memory_s, stream.offloaded * stream.layer_s + c,
                       stream.layer_s + stream.offloaded * c)
        if parts.host_s is not None:  # the host overlapped: what the longer memory phase hides
            return hide_host(parts._replace(memory_s=memory_s), parts.host_s)
        return parts._replace(memory_s=memory_s)

    def at_depth(self, batch: BatchShape, index: int, remote_kv_Bps: float | None = None) -> StepBreakdown:
        """A decode-only step of ``batch`` run to :attr:`depths`\\ ``[index]`` (module docstring)."""
        spec, layers = self.spec, self.layers
        depth = self.depths[index]
        parts = self.flat.breakdown(batch, remote_kv_Bps)
        b = batch.decode_seqs
        rate = self.flat._rates.gemm_flops_per_s(b)
        head_c = self.model.lm_head_flops * batch.sampled_seqs / rate
        layers_c = parts.compute_s - head_c
        layers_m = parts.memory_s - self._rest_weights_s
        f = depth / layers
        skipped = layers - depth
        heads = self._heads_at[index] * spec.head_cost
        compute_s = f * layers_c + head_c + heads * self._layer_linear_flops * b / rate
        memory_s = f * layers_m + self._rest_weights_s + heads * self._layer_weights_s
        stream = self.stream
        tau = stream.layer_s if stream is not None else 0.0
        streamed = max(0, depth - self._resident)              # offloaded layers the step runs
        skipped_offloaded = layers - max(depth, self._resident)  # offloaded layers it skips
        extra_s = 0.0                                            # other host-link time the step waits for
        if spec.kv_fill == "copy":
            memory_s += kv_fill_bytes(b, skipped, self._kv_layer_bytes) / self._kv_Bps
        else:
            compute_s += b * skipped * self._kv_proj_flops / rate
            memory_s += (skipped - skipped_offloaded) * self._kv_proj_s
            extra_s += skipped_offloaded * self._kv_proj_share * tau
        if spec.check_every is not None and skipped:
            n = spec.check_every
            compute_s += (skipped / layers) * layers_c
            memory_s += skipped * self._layer_weights_s / n
            extra_s += skipped_offloaded * tau / n
        if streamed:
            c = max(compute_s, memory_s) / depth
            memory_s = max(memory_s, streamed * tau + extra_s + c, tau + streamed * c)
        elif extra_s:
            memory_s = max(memory_s, extra_s)
        if parts.host_s is not None:  # the host overlapped: what the shorter step still hides
            return hide_host(StepBreakdown(compute_s, memory_s, f * parts.comm_s, 0.0, f * parts.kernels_s,
                                           f * parts.remote_s), parts.host_s)
        return StepBreakdown(compute_s, memory_s, f * parts.comm_s, parts.overhead_s, f * parts.kernels_s,
                             f * parts.remote_s)
