"""Execution-time predictors: how long one engine iteration takes.

An engine iteration is one batched forward pass mixing prefill chunks and decode steps. The
predictor sees only the aggregate shape of the batch (:class:`BatchShape`), so a measured table
or a learned model can replace the roofline without touching the engine.

Roofline (per card of a TP group of ``t`` cards, ``n`` tokens in the iteration)::

    compute_s  = FLOPs / (t * peak_flops * efficiency.compute * n / (n + efficiency.compute_half_tokens))
                 (efficiency.compute: the format's own figure where compute_formats gives one)
    memory_s   = weight_bytes_read / t / (memory_bandwidth * efficiency.memory)
                 + local_kv_bytes_per_card / (memory_bandwidth * efficiency.kv_memory)
                 (weights read: every matrix once; the input embedding is only looked up)
    remote_s   = remote_kv_bytes_per_card / remote rate                 (KV read in place)
    comm_s     = 2 * layers * allreduce(n * hidden * 2 B, t, collective_latency_s,
                                        peer_bw * efficiency.interconnect)    (t > 1)
                 (engine.collectives measured / measured_nccl: the card's measured curve, kvsim.models.collective_curves)
    kernels_s  = engine.kernel_s * launches_per_pass(model)     (kvsim.models.kernels)
                 + exposed eager issue time if n > the captured maximum (kvsim.models.engine)
    iteration  = max(compute_s, memory_s, remote_s) + comm_s + kernels_s + engine.step_overhead_s(sequences, n)
                 (engine.host_overlap: the last term only where the host's work outlasts the rest,
                  ``exposed_host_s``; an idle engine's first step pays it whole, kvsim.models.engine)

KV *read in place* from a peer's HBM (``kv_cache.peer_hbm: read_in_place``) streams over the
scale-up link while the local KV and the weights stream from the card's own HBM, so the two
overlap and the memory phase is the longer of them. The remote rate is ``scale_up_bandwidth *
efficiency.interconnect`` per card unless the caller passes a contended one
(:mod:`kvsim.serving.cache.remote_reads`).

Small GEMMs reach less of the peak than large ones (tiles left partly empty, launch-bound
kernels): ``compute_half_tokens`` is the token count at which the achieved rate is half of
``efficiency.compute``, the large-GEMM figure (0 keeps it flat). Weight streaming and paged-KV
reads achieve different fractions of the bandwidth, so each has its own efficiency. The
all-reduce picks recursive doubling or a ring by message size (:mod:`kvsim.models.collectives`).
The kernel-launch and host costs are the engine's (:class:`kvsim.models.engine.EngineSpec`).

A kernel of the compiled backend (:mod:`kvsim.backend`): the ``cython`` declarations type the
locals when compiled and do nothing in the pure-Python reference.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import cython
import numpy as np

from kvsim.dtypes import DTYPE_BYTES
from kvsim.hardware.specs import AcceleratorSpec
from kvsim.models.collective_curves import measured_allreduce_s
from kvsim.models.collectives import allreduce_s
from kvsim.models.engine import EngineSpec
from kvsim.models.kernels import launches_per_pass
from kvsim.models.llm import ModelSpec
from kvsim.models.weight_offload import WeightStream

__all__ = ["BatchShape", "StepTimeModel", "RooflineStepTime", "StepBreakdown", "AchievedRates", "DecodeSteps",
           "streamed_memory_s", "exposed_host_s", "hide_host"]

ACTIVATION_DTYPE = "bf16"  # activations travel in 16-bit even when weights are FP8


class BatchShape(NamedTuple):
    """What one iteration computes, aggregated over its sequences (immutable; a named tuple,
    cheap to build once per engine iteration).

    Attributes
    ----------
    prefill_tokens : int
        Prompt tokens computed this iteration (all prefill chunks).
    prefill_pairs : float
        Attention (query, context) pairs of the prefill chunks: a chunk of ``c`` tokens after
        ``p`` cached tokens contributes ``c*p + c*(c+1)/2``.
    prefill_context_tokens : int
        Tokens of earlier context the prefill chunks read from the KV cache (sum of ``p``).
    decode_seqs : int
        Sequences taking one decode step.
    decode_context_tokens : int
        Sum over decode sequences of the context each attends to (including the new token).

    With sliding-window layers the pair and context counts are averaged over layers
    (:class:`~kvsim.models.attention_span.AttentionSpan`), so they may be fractional.
    sampled_seqs : int
        Sequences that emit a token this iteration (decodes plus prefills that complete).
    prefill_seqs : int
        Sequences computing a prefill chunk this iteration.
    remote_kv_tokens : int
        Of the context tokens read (prefill and decode), those read in place from a peer's HBM
        over the scale-up links rather than from this instance's own HBM.
    """

    prefill_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_context_tokens: int = 0
    decode_seqs: int = 0
    decode_context_tokens: int = 0
    sampled_seqs: int = 0
    prefill_seqs: int = 0
    remote_kv_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs

    @property
    def sequences(self) -> int:
        return self.prefill_seqs + self.decode_seqs

    @staticmethod
    def prefill_chunk_pairs(chunk_tokens: int, cached_tokens: int) -> float:
        """Attention pairs of a causal chunk of ``chunk_tokens`` after ``cached_tokens``."""
        return chunk_tokens * cached_tokens + chunk_tokens * (chunk_tokens + 1) / 2.0


class DecodeSteps(NamedTuple):
    """The breakdowns of consecutive decode-only iterations (see
    :meth:`RooflineStepTime.decode_steps`): per step ``total_s``, ``compute_s`` and
    ``memory_s``; the collective, kernel-launch and host times are the same every step. With
    ``host_overlap`` (``engine.host_overlap``), ``overhead_s`` is the host's whole per-step time and
    each step shows only the part its GPU time does not hide (:func:`exposed_host_s`). (A named
    tuple: built twice per coalesced run, which a frozen dataclass makes slow.)"""

    total_s: list[float] | np.ndarray
    compute_s: list[float] | np.ndarray
    memory_s: list[float] | np.ndarray
    comm_s: float
    kernels_s: float
    overhead_s: float
    host_overlap: bool = False


class StepTimeModel(Protocol):
    """Anything that predicts the duration of one engine iteration, in seconds."""

    def iteration_time_s(self, batch: BatchShape) -> float: ...


class StepBreakdown(NamedTuple):
    """Components of one iteration's time, seconds: roofline, collectives, kernel launches
    (``kernels_s``), the host's per-step work on the iteration's path (``overhead_s``), and
    ``remote_s``, KV read in place over the scale-up links, overlapping the local memory phase.
    ``host_s`` is the host's whole per-step work where the engine overlaps it with the GPU
    (``engine.host_overlap``: ``overhead_s`` is then only the part the GPU time does not hide,
    :func:`exposed_host_s`); None where it does not (``overhead_s`` is all of it)."""

    compute_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    kernels_s: float = 0.0
    remote_s: float = 0.0
    host_s: float | None = None

    @property
    def total_s(self) -> float:
        return (max(self.compute_s, self.memory_s, self.remote_s) + self.comm_s + self.kernels_s
                + self.overhead_s)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= max(self.memory_s, self.remote_s) else "memory"

    @property
    def hidden_s(self) -> float:
        """Host time hidden behind the GPU's previous iteration (0 without host overlap): what a
        step that starts an idle engine adds, having nothing to hide it behind, seconds."""
        return 0.0 if self.host_s is None else self.host_s - self.overhead_s


def hide_host(parts: StepBreakdown, host_s: float) -> StepBreakdown:
    """``parts`` with the host's per-step work ``host_s`` overlapped with its GPU time: only the
    part that outlasts it on the path (:func:`exposed_host_s`), the whole kept as ``host_s``."""
    memory_s = parts.memory_s if parts.memory_s >= parts.remote_s else parts.remote_s
    return parts._replace(overhead_s=exposed_host_s(host_s, parts.compute_s, memory_s, parts.comm_s, parts.kernels_s),
                          host_s=host_s)


class AchievedRates:
    """What ``cards`` cards of ``accelerator`` achieve: FLOP/s in ``dtype`` (with the small-GEMM
    curve), and per card the bytes/s of weight streaming and of paged-KV reads."""

    __slots__ = ("flops_per_s", "half_tokens", "weight_Bps", "kv_Bps")

    def __init__(self, accelerator: AcceleratorSpec, dtype: str, cards: int):
        eff = accelerator.efficiency
        self.flops_per_s = cards * accelerator.peak_flops(dtype) * eff.compute_for(dtype)
        self.half_tokens = eff.compute_half_tokens
        self.weight_Bps = accelerator.memory_bandwidth * eff.memory
        self.kv_Bps = accelerator.memory_bandwidth * (eff.kv_memory if eff.kv_memory is not None else eff.memory)

    def gemm_flops_per_s(self, tokens: float) -> float:
        """FLOP/s reached by an iteration (or micro-batch) of ``tokens`` tokens."""
        if self.half_tokens:
            return self.flops_per_s * tokens / (tokens + self.half_tokens)
        return self.flops_per_s


class RooflineStepTime:
    """Roofline predictor for one instance (a TP group of identical cards).

    Parameters
    ----------
    model : ModelSpec
    accelerator : AcceleratorSpec
    tp : int
        Tensor-parallel degree (cards per instance).
    dtype : str
        Weight and compute number format (selects the dense peak).
    kv_dtype : str
        KV-cache number format.
    engine : EngineSpec, optional
        The engine's per-step overhead (defaults: :class:`EngineSpec`).
    weight_dtypes : dict, optional
        Storage format of weight groups that differ from ``dtype`` (see
        :meth:`~kvsim.models.llm.ModelSpec.weight_bytes`).
    compute_dtype : str, optional
        The format the matrix multiplies run in, whose dense peak bounds compute (default:
        ``dtype``): ``dtype`` mxfp4 with ``compute_dtype`` bf16 is W4A16.
    graph_max_tokens : int, optional
        The largest iteration replayed as a graph, tokens (default: ``engine.graph_max_tokens``,
        else 512; 0 with ``engine.graph_mode`` false); larger ones run eagerly
        (:mod:`kvsim.models.engine`).
    stream : WeightStream, optional
        Layers kept in host DRAM and streamed every iteration (:mod:`kvsim.models.weight_offload`):
        their transfers bound the memory phase (:func:`streamed_memory_s`).
    """

    # the compiled backend's field types are in step_time.pxd (the same names)
    __slots__ = ("model", "accelerator", "tp", "dtype", "kv_dtype", "engine", "weight_dtypes", "_rates",
                 "_kv_bytes_per_token_card", "_body_flops", "_lm_head_flops", "_attn_prefill", "_attn_decode",
                 "_dense_weights", "_dense_bytes_read", "_allreduces", "_activation_bytes_per_token",
                 "_hop_latency_s", "_peer_Bps", "_kernels_s", "_remote_Bps", "_decode_cache", "_comm_cache",
                 "_tokens_cache", "_kv_Bps", "_step_fixed_s", "_step_per_seq_s", "_step_per_token_s",
                 "_issue_s", "_graph_max", "_stream_layers", "_stream_k", "_stream_tau", "_host_overlap", "_stream")

    def __init__(self, model: ModelSpec, accelerator: AcceleratorSpec, tp: int, dtype: str, kv_dtype: str,
                 engine: EngineSpec | None = None, weight_dtypes: dict[str, str] | None = None,
                 compute_dtype: str | None = None, graph_max_tokens: int | None = None,
                 stream: WeightStream | None = None):
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        self.model = model
        self.accelerator = accelerator
        self.tp = tp
        self.dtype = dtype
        self.kv_dtype = kv_dtype
        self.engine = engine if engine is not None else EngineSpec()
        self.weight_dtypes = dict(weight_dtypes or {})
        eff = accelerator.efficiency
        self._rates = AchievedRates(accelerator, compute_dtype or dtype, tp)
        self._kv_bytes_per_token_card = model.kv_bytes_per_token(kv_dtype, tp)
        self._body_flops = model.body_flops_per_token
        self._lm_head_flops = model.lm_head_flops
        self._attn_prefill = model.attention_flops_per_pair(decode=False)
        self._attn_decode = model.attention_flops_per_pair(decode=True)
        self._dense_weights = model.moe is None
        self._dense_bytes_read = model.weight_bytes_read(1, dtype, self.weight_dtypes)
        self._allreduces = 2 * model.num_layers if tp > 1 else 0
        self._activation_bytes_per_token = model.hidden_size * DTYPE_BYTES[ACTIVATION_DTYPE]
        self._hop_latency_s = eff.collective_latency_s
        self._peer_Bps = accelerator.peer_bandwidth * eff.interconnect
        launches = launches_per_pass(model)
        self._kernels_s = self.engine.kernel_s * launches
        self._issue_s = self.engine.eager_launch_s * launches  # issuing a whole pass from the host
        if graph_max_tokens is None:
            graph_max_tokens = self.engine.captured_tokens(256, 2048) if self.engine.graph_max_tokens is None \
                else self.engine.graph_max_tokens
        self._graph_max = graph_max_tokens if self.engine.graph_mode else 0
        self._stream_layers = float(stream.layers) if stream is not None else 1.0
        self._stream_k = float(stream.offloaded) if stream is not None else 0.0  # 0: every layer in HBM
        self._stream_tau = stream.layer_s if stream is not None else 0.0
        self._stream = stream if stream is not None and stream.cold_shares else None  # MoE: tau by token count
        scale_up = accelerator.scale_up_bandwidth
        self._remote_Bps = scale_up * eff.interconnect if scale_up is not None else None
        self._decode_cache: dict[int, tuple] = {}
        self._comm_cache: dict[int, float] = {}
        self._tokens_cache: dict[int, tuple] = {}
        self._kv_Bps = self._rates.kv_Bps
        self._step_fixed_s = self.engine.step_fixed_s
        self._step_per_seq_s = self.engine.step_per_seq_s
        self._step_per_token_s = self.engine.step_per_token_s
        self._host_overlap = self.engine.overlaps_host

    def comm_s(self, tokens: int) -> float:
        """TP all-reduce time of one iteration over ``tokens`` tokens, seconds (worked out once
        per token count: every iteration asks)."""
        if not self._allreduces:
            return 0.0
        known = self._comm_cache.get(tokens)
        if known is None:
            nbytes = tokens * self._activation_bytes_per_token
            if self.engine.collectives != "alpha_beta":  # the card's measured curve (kvsim.models.collective_curves)
                one = measured_allreduce_s(nbytes, self.tp, self.accelerator, self.engine.collectives)
            else:
                one = allreduce_s(nbytes, self.tp, self._hop_latency_s, self._peer_Bps)
            known = self._comm_cache[tokens] = self._allreduces * one
        return known

    def weight_bytes_read(self, tokens: int) -> float:
        """Weight bytes the whole instance reads in one iteration over ``tokens`` tokens."""
        if self._dense_weights:
            return self._dense_bytes_read
        return self.model.weight_bytes_read(tokens, self.dtype, self.weight_dtypes)

    def _token_terms(self, tokens):  # a C method compiled (step_time.pxd): no annotations
        """The parts of an iteration over ``tokens`` tokens that depend on nothing else: the
        achieved FLOP/s, the weights' streaming time, the TP all-reduce time, the kernel-launch
        time, and an offloaded layer's transfer (``tau``: an MoE model's depends on the experts the
        tokens touch) (cached: every iteration asks, and a batch's token count repeats)."""
        terms = self._tokens_cache.get(tokens)
        if terms is None:
            rate = self._rates.gemm_flops_per_s(tokens)
            weights_s = self.weight_bytes_read(tokens) / self.tp / self._rates.weight_Bps
            comm_s = self.comm_s(tokens)
            tau = self._stream_tau if self._stream is None else self._stream.layer_s_at(tokens)
            terms = self._tokens_cache[tokens] = (rate, weights_s, comm_s,
                                                  self._launch_s(tokens, rate, weights_s, comm_s), tau)
        return terms

    def _launch_s(self, tokens, rate, weights_s, comm_s) -> float:
        """Kernel-launch time of an iteration over ``tokens`` tokens: the gaps inside a replayed
        graph, plus, for an eager one, the host's issue time the GPU's context-free work (linear
        layers or weight streaming, collectives, gaps) does not hide (:mod:`kvsim.models.engine`)."""
        if tokens <= self._graph_max:
            return self._kernels_s
        gpu_s = max(self._body_flops * tokens / rate, weights_s) + comm_s + self._kernels_s
        return self._kernels_s + max(0.0, self._issue_s - gpu_s)

    @cython.locals(tokens_f=cython.double, sequences=cython.double, flops=cython.double, kv_tokens=cython.double,
                   remote_tokens=cython.double, remote_s=cython.double, rate=cython.double, weights_s=cython.double,
                   comm_s=cython.double, overhead_s=cython.double, compute_s=cython.double, memory_s=cython.double,
                   stream_scale=cython.double)
    def breakdown(self, batch: BatchShape, remote_kv_Bps: float | None = None,
                  stream_scale: float = 1.0) -> StepBreakdown:
        """Time components of one iteration (seconds); ``remote_kv_Bps`` is the per-card rate of
        the KV read in place from peers (default: the uncontended scale-up rate); the offloaded
        layers' transfers take ``stream_scale`` times their nominal time (the stream's nominal
        rate over the one the flow network gives it, :mod:`kvsim.serving.weight_flows`)."""
        prefill_tokens, prefill_pairs, prefill_context, decode_seqs, decode_context, sampled_seqs, prefill_seqs, \
            remote_kv_tokens = batch
        tokens = prefill_tokens + decode_seqs  # batch.tokens
        tokens_f = tokens
        flops = (
            self._body_flops * tokens_f
            + self._lm_head_flops * sampled_seqs
            + self._attn_prefill * prefill_pairs
            + self._attn_decode * decode_context
        )
        kv_tokens = prefill_context + prefill_tokens + decode_context
        remote_s = 0.0
        if remote_kv_tokens:
            remote_tokens = remote_kv_tokens
            kv_tokens -= remote_tokens
            rate_Bps = remote_kv_Bps if remote_kv_Bps is not None else self._remote_Bps
            if rate_Bps is None:
                raise ValueError(f"{self.accelerator.name} has no scale-up link to read KV in place over")
            remote_s = remote_tokens * self._kv_bytes_per_token_card / rate_Bps
        rate, weights_s, comm_s, kernels_s, tau = self._token_terms(tokens)
        sequences = prefill_seqs + decode_seqs  # batch.sequences
        # EngineSpec.step_overhead_s(sequences, tokens), its constants read once
        overhead_s = self._step_fixed_s + self._step_per_seq_s * sequences + self._step_per_token_s * tokens_f
        compute_s = flops / rate
        memory_s = weights_s + kv_tokens * self._kv_bytes_per_token_card / self._kv_Bps
        if self._stream_k > 0.0:
            memory_s = streamed_memory_s(compute_s, memory_s, self._stream_layers, self._stream_k, tau * stream_scale)
        # a named tuple made as tuple.__new__ does (its generated __new__ runs as Python code)
        if self._host_overlap:
            host_s = overhead_s
            overhead_s = exposed_host_s(host_s, compute_s, remote_s if remote_s > memory_s else memory_s, comm_s,
                                        kernels_s)
            return tuple.__new__(StepBreakdown, (compute_s, memory_s, comm_s, overhead_s, kernels_s, remote_s, host_s))
        return tuple.__new__(StepBreakdown, (compute_s, memory_s, comm_s, overhead_s, kernels_s, remote_s, None))

    def iteration_time_s(self, batch: BatchShape) -> float:
        """Duration of one iteration of ``batch``, seconds."""
        return self.breakdown(batch).total_s

    def _decode_terms(self, seqs: int) -> tuple:
        """The per-step constants of a decode-only iteration of ``seqs`` sequences (cached: a
        coalesced run looks them up, not recomputes them)."""
        terms = self._decode_cache.get(seqs)
        if terms is None:
            tokens = seqs
            # breakdown() adds the prefill-pair term (0.0 here) between these; x + 0.0 == x
            fixed_flops = self._body_flops * tokens + self._lm_head_flops * seqs
            rate, weights_s, comm_s, kernels_s, tau = self._token_terms(tokens)
            terms = (fixed_flops, self._attn_decode, rate, weights_s, self._kv_bytes_per_token_card, self._rates.kv_Bps,
                     comm_s, kernels_s, self.engine.step_overhead_s(seqs, tokens), self._stream_layers, self._stream_k,
                     tau, self._host_overlap)
            self._decode_cache[seqs] = terms
        return terms

    @cython.locals(total_c=cython.p_double, k=cython.Py_ssize_t, n=cython.Py_ssize_t)
    def decode_steps(self, seqs: int, context_tokens: int, steps: int) -> DecodeSteps:
        """Consecutive decode-only iterations of ``seqs`` sequences with no KV read in place: the
        first attends to ``context_tokens`` context tokens in all, each later one to ``seqs``
        more (every context grows by the token just written).

        Each step equals :meth:`breakdown` of its shape bit for bit: the same floating-point
        operations in the same order, on constants computed once (a coalesced decode run costs
        a few float operations per step, not a shape and a breakdown; see :func:`fill_decode_steps`).
        """
        terms = self._decode_terms(seqs)
        n = steps
        if cython.compiled:  # the C loop fills C arrays: copy them out
            total_c = _doubles(3 * n)  # noqa: F821 (a C function of the .pxd, compiled only)
            fill_decode_steps(terms, context_tokens, seqs, n, total_c, total_c + n, total_c + 2 * n)
            total = [total_c[k] for k in range(n)]
            compute = [total_c[n + k] for k in range(n)]
            memory = [total_c[2 * n + k] for k in range(n)]
            free(total_c)  # noqa: F821
        else:
            total, compute, memory = [0.0] * n, [0.0] * n, [0.0] * n
            fill_decode_steps(terms, context_tokens, seqs, n, total, compute, memory)
        return DecodeSteps(total, compute, memory, terms[6], terms[7], terms[8], terms[12])

    def decode_steps_array(self, seqs: int, context_tokens: int, steps: int) -> DecodeSteps:
        """:meth:`decode_steps` as numpy arrays: element-wise the same float operations in the same
        order, so each step equals :meth:`breakdown` to the bit (for long runs)."""
        fixed_flops, attn, rate, weights_s, kv_bytes, kv_Bps, comm_s, kernels_s, overhead_s, layers, k, tau, overlap = \
            self._decode_terms(seqs)
        context = context_tokens + seqs * np.arange(steps, dtype=np.int64)
        compute = (fixed_flops + attn * context) / rate
        memory = weights_s + context * kv_bytes / kv_Bps
        if k > 0.0:  # streamed_memory_s element-wise: the same operations, so the same bits
            per_layer = np.where(compute >= memory, compute, memory) / layers
            stream = k * tau + per_layer
            fill = tau + k * per_layer
            bound = np.where(stream >= fill, stream, fill)
            memory = np.where(bound > memory, bound, memory)
        if overlap:  # exposed_host_s element-wise: the same operations, so the same bits
            gpu = np.where(compute >= memory, compute, memory) + comm_s + kernels_s
            total = gpu + np.where(overhead_s > gpu, overhead_s - gpu, 0.0)
        else:
            total = np.where(compute >= memory, compute, memory) + comm_s + kernels_s + overhead_s
        return DecodeSteps(total, compute, memory, comm_s, kernels_s, overhead_s, overlap)


@cython.locals(x=cython.double, per_layer=cython.double, stream=cython.double, fill=cython.double,
               bound=cython.double)
def streamed_memory_s(compute_s, memory_s, layers, offloaded, layer_s) -> float:
    """The memory phase of an iteration whose weights for its last ``offloaded`` of ``layers``
    layers stream from the host, ``layer_s`` seconds a layer (:mod:`kvsim.models.weight_offload`):
    ``max(memory, k tau + c, tau + k c)`` with ``c`` one layer's share of ``max(compute, memory)``.
    (A C function compiled, ``step_time.pxd``; the numpy form in ``decode_steps_array`` does the
    same operations.)"""
    x = compute_s if compute_s >= memory_s else memory_s
    per_layer = x / layers
    stream = offloaded * layer_s + per_layer
    fill = layer_s + offloaded * per_layer
    bound = stream if stream >= fill else fill
    return bound if bound > memory_s else memory_s


@cython.locals(gpu=cython.double)
def exposed_host_s(host_s, compute_s, memory_s, comm_s, kernels_s) -> float:
    """The part of the host's per-step work ``host_s`` that an iteration's GPU time does not hide,
    seconds, with the host overlapped with the GPU (``engine.host_overlap``, :mod:`kvsim.models.engine`):
    ``max(0, host_s - gpu_s)``, ``gpu_s = max(compute_s, memory_s) + comm_s + kernels_s``
    (``memory_s``: the longer of the local and the remote reads). (A C function compiled,
    ``step_time.pxd``; the decode fills and engine time's accounts use it, so every path gives
    the same bits.)"""
    gpu = (compute_s if compute_s >= memory_s else memory_s) + comm_s + kernels_s
    return host_s - gpu if host_s > gpu else 0.0


@cython.locals(fixed_flops=cython.double, attn=cython.double, rate=cython.double, weights_s=cython.double,
               kv_bytes=cython.double, kv_Bps=cython.double, comm_s=cython.double, kernels_s=cython.double,
               overhead_s=cython.double, context=cython.double, step_seqs=cython.double, c=cython.double,
               m=cython.double, k=cython.Py_ssize_t, layers=cython.double, offloaded=cython.double,
               tau=cython.double, overlap=cython.bint, gpu=cython.double)
def fill_decode_steps(terms, context_tokens, seqs, steps, total_s, compute_s, memory_s) -> None:
    """Write the first ``steps`` decode-only iterations' ``total_s``, ``compute_s`` and
    ``memory_s`` (see :meth:`RooflineStepTime.decode_steps`; ``terms``: its
    ``_decode_terms(seqs)``): into lists in the pure-Python reference, into C arrays compiled
    (where a decode run keeps its steps; a C function there, ``step_time.pxd``)."""
    fixed_flops, attn, rate, weights_s, kv_bytes, kv_Bps, comm_s, kernels_s, overhead_s, layers, offloaded, tau, \
        overlap = terms
    # token counts below 2**53 are exact as floats, so context * x is the same product either way
    context = context_tokens
    step_seqs = seqs
    for k in range(steps):
        c = (fixed_flops + attn * context) / rate
        m = weights_s + context * kv_bytes / kv_Bps
        if offloaded > 0.0:
            m = streamed_memory_s(c, m, layers, offloaded, tau)
        compute_s[k] = c
        memory_s[k] = m
        if overlap:  # exposed_host_s, inline
            gpu = (c if c >= m else m) + comm_s + kernels_s
            total_s[k] = gpu + (overhead_s - gpu if overhead_s > gpu else 0.0)
        else:
            total_s[k] = (c if c >= m else m) + comm_s + kernels_s + overhead_s
        context += step_seqs
