"""The serving engine's own costs: the request path around the model and the CPU side of each step.

A forward pass is not the whole of a request's latency. Before the engine sees a request, the API
server parses it, applies the chat template and tokenises the prompt; after each step, the engine
turns sampled ids into text and streams it. Each iteration also pays host-side work the GPU
roofline does not see: scheduling, building input tensors, launching (or replaying) the kernels,
sampling. These are properties of the engine software and its host, not of the accelerator, so
they live in their own spec, set per scenario (``engine:``) or per system (``systems.X.engine``),
and a calibration file (``kvsim calibrate``) may replace them.

Per-step host work (seconds)::

    host_s = step_fixed_s + step_per_seq_s * sequences + step_per_token_s * scheduled_tokens

and on the GPU, beside the roofline, ``kernel_s`` per kernel launch of the forward pass
(:mod:`kvsim.models.kernels` counts them). With async scheduling (the default) the host's work
overlaps the GPU's, below; a synchronous engine (``async_scheduling: false``) adds the two.

Host overlap (``host_overlap``; by default on exactly when ``async_scheduling`` is). An engine that prepares iteration ``n + 1``
on the CPU while the GPU runs iteration ``n`` (vLLM V1 with async scheduling keeps two batches in
flight, ``vllm/v1/engine/core.py`` ``step_with_batch_queue``; SGLang's overlap scheduler likewise)
waits for the host only when the host's work is the longer of the two::

    gpu_s   = max(compute_s, memory_s, remote_s) + comm_s + kernels_s
    exposed = max(0, host_s - gpu_s)            (host_s: the per-step host work above)
    busy engine:                 iteration = gpu_s + exposed = max(gpu_s, host_s)
    a step that starts an idle engine:   iteration = gpu_s + host_s

An idle engine has nothing to overlap with: the host prepares the first batch, then the GPU runs
it. Engine time's ``overhead`` cause counts the exposed part only (the time the GPU waits for the
host). With the per-step host terms at their defaults a busy engine's decode steps hide them
whole. Before kvsim 0.1's session 23 the default added them (``host_overlap: false``); on the vLLM
H100 runs overlapping them took the datasheet TPOT error from 9.0 % to 4.1 % and E2E from 8.8 % to
4.2 %, with TTFT at 8.7 % once the front end's micro-batching tokeniser (below) was modelled too
(``docs/explanation/whole-step.md``). ``host_overlap: false`` with async scheduling is the
what-if of an engine whose host work sits between its steps all the same.

Request path (seconds)::

    engine sees the request  = arrival + api_s + tokenize_s_per_token * prompt_tokens
    client sees a token      = end of the step that sampled it + output_s

With ``tokenizer_batch_wait_s`` above 0 the tokenising is the API server's micro-batching
tokeniser instead (vLLM 0.10.0-0.23.x: a prompt waits up to 2 ms for others, then the batch is
tokenised in one call; :mod:`kvsim.sim.tokenizer_batch`), and the request reaches the engine when
its batch is done. Off by default (vLLM 0.24 removed it; 0.9 and earlier never had it); the
validation runs, vLLM 0.15.1, turn it on from their engine version.

``output_s`` is paid by every streamed token, but off the engine's critical path (vLLM V1 runs
output processing in the API-server process, overlapped with the next step), so it shifts the
first token and the last by the same amount and leaves TPOT unchanged.

Cadence: a request that reaches a busy engine joins the next batch it forms. With
``async_scheduling`` (default) the engine forms batch ``n + 1`` while batch ``n`` runs, so a
request arriving during batch ``n`` joins batch ``n + 2``: its first token waits, on average, half
a step, a whole step, then its own. vLLM turned async scheduling on by default in late 2025
(vllm-project/vllm #27614; its Q4 2025 roadmap item "Async Scheduling on by default"; H), and
SGLang's overlap scheduler does the same; ``async_scheduling: false`` is the older synchronous
loop. An idle engine takes a request at once either way.

Graphs and eager steps. Engines capture the forward pass as a graph (CUDA graphs on NVIDIA,
ACLGraph on Ascend) for each batch size up to a captured maximum and replay it, so the host issues
one launch per iteration instead of one per kernel; ``kernel_s`` is then the GPU-side gap each
kernel leaves (ramp-up, tail, the hop to the next) inside the replayed graph. An iteration of more
tokens than the captured maximum (``graph_max_tokens``), or every iteration with ``graph_mode:
false`` (vLLM ``--enforce-eager``), runs eagerly: the host issues each kernel itself, at
``eager_launch_s`` a kernel, while the GPU runs the ones already issued. The GPU then waits for
the host whenever issuing the pass takes longer than the GPU's own work on it::

    issue_s   = eager_launch_s * launches_per_pass
    exposed_s = max(0, issue_s - (max(linear compute, weight streaming) + comm_s + kernels_s))
    kernels_s (eager) = kernel_s * launches_per_pass + exposed_s

The GPU work the issue is set against is the part that does not grow with the context (the
linear layers' FLOPs over the iteration's tokens, or streaming the weights, whichever is longer),
so the exposed time is a function of the token count alone and a coalesced decode run keeps one
figure (attention over a long context would hide some more of it: an upper bound there). A slow
card hides the launches and a fast one shows them: the 1.26x a CUDA graph gives an H100 against
1.03x on an L4 decoding a 7B model at batch 1 (arXiv:2605.30571, M) is this ``max``.

Defaults, and where they come from:

- ``graph_mode`` on, with ``graph_max_tokens`` vLLM's rule when unset: ``min(2 x max_num_seqs,
  512, max_num_batched_tokens)`` of the instance (vllm/config/vllm.py ``_set_cudagraph_sizes``;
  an iteration above it runs with ``CUDAGraphMode.NONE``, vllm/v1/cudagraph_dispatcher.py; H).
  vLLM runs CUDA graphs unless ``--enforce-eager``; vLLM-Ascend runs ACLGraph by default on the V1
  engine since v0.9.1rc1 ("Graph Mode Guide", docs.vllm.ai/projects/ascend, v0.9.1-v0.18.0, H).
  kvsim counts a graph per iteration (full graphs for decode, piecewise for mixed batches, as
  vLLM's ``FULL_AND_PIECEWISE``) and does not charge the attention kernels a piecewise graph
  leaves eager.
- ``eager_launch_s`` 10 us a kernel issued from the host: PyTorch's dispatcher and
  ``cudaLaunchKernel`` (assumption, L). Bounds: a bare CUDA launch costs a few us; a blog's
  Llama-3.1-8B decode step on an H100 took 8.4 ms eager against 5.1 ms replayed as a graph
  (cloudai.pt, "CUDA Graphs + torch.compile: 1.65x LLM Decode Speedup", L), which for an
  unfused eager Llama (some 800 kernels a pass) is about 10 us each.
- ``kernel_s`` 3.64 us per kernel launch: Hazy Research measured SGLang (overlap scheduler: no host
  time on the GPU's path; CUDA graphs on, SGLang's default for decode, so this is the gap inside a
  replayed graph, not an eager launch) at about 50 % of an H100's 3.35 TB/s decoding Llama-3.2-1B at batch 1
  ("Look Ma, No Bubbles!", 2025-05-27, H). That model reads 2.47 GB of weights per step (16 layers
  of 60.8 M parameters and its tied 262.7 M-parameter LM head, bf16): 1.476 ms at 50 %, against
  0.878 ms streamed at the kernels' 0.84 (the H100's ``efficiency.memory``); the 0.597 ms left over
  164 launches (16 layers x 10 + 4, :mod:`kvsim.models.kernels`) is 3.64 us each (derived, M). The
  same post has vLLM slower still (its megakernel 2.5x faster than vLLM), so for vLLM this is a
  floor; ``kvsim calibrate`` can fit it. Measured on the H100 only: for every other card family it
  is the H100's figure taken as is (an assumption that ``kvsim plan`` varies in its sensitivity,
  x0.5 - x2; a card whose catalog sources have ``engine.kernel_s`` was measured on its family).
- ``step_fixed_s`` 0.5 ms: the per-step floor above the roofline with CUDA graphs (assumption, L).
  Public single-stream benchmarks bound it from above: an SGLang serving benchmark at concurrency 1
  reports a mean TPOT of 1.47 ms for a small MoE model, forward pass included (radixark SGLang
  cookbook, DeepSeek-OCR page, M). The earlier fixed 2 ms made small models on one card decode
  too slowly.
- ``step_per_seq_s`` 10 us and ``step_per_token_s`` 0.5 us: host work that grows with the batch
  (scheduler bookkeeping, block tables, input tensors, sampling); vLLM's own profile attributes
  29 % of a Llama-3-8B H100 run to such work before v0.6 (blog.vllm.ai 2024-09-05, H for the
  share); the per-item figures are assumptions (L), for ``kvsim calibrate`` to replace.
- ``api_s`` 2 ms: HTTP parsing, request validation, chat template and the hop into the engine
  process; vLLM's profile puts 33 % of that run's time in the HTTP API server (same blog, H for
  the share); the absolute figure is an assumption (L).
- ``tokenize_s_per_token`` 0.1 us: a Rust BPE tokeniser at ~50 MB/s ("less than 20 seconds to
  tokenize a GB of text", huggingface/tokenizers README, M) and ~4 bytes of text per token (L).
- ``output_s`` 1 ms: detokenising one step's token and writing one server-sent event (assumption, L).
"""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from kvsim.models.early_exit import EarlyExitSpec
from kvsim.models.step_variance import StepVarianceSpec
from kvsim.spec_types import FrozenSpec, PositiveInt, Seconds, field_errors

__all__ = ["EngineSpec"]


class EngineSpec(FrozenSpec):
    """Engine-software costs around the forward pass (all seconds; see the module docstring).

    Each may be 0: an engine without that cost, for a what-if (the roofline of the forward pass
    keeps every step above zero).

    Attributes
    ----------
    step_fixed_s : float
        Host time of every iteration (scheduling, inputs, launching the graph), seconds.
    step_per_seq_s : float
        Added per sequence in the iteration (decodes and prefill chunks), seconds.
    step_per_token_s : float
        Added per token the iteration computes, seconds.
    api_s : float
        Per request, from arrival at the server to the engine's queue (API server), seconds.
    tokenize_s_per_token : float
        Tokenisation time per prompt token, seconds.
    tokenizer_batch_wait_s : float
        How long the API server's tokeniser waits after a batch's first prompt for more, seconds
        (0, the default: every prompt is tokenised on its own). vLLM 0.10.0 to 0.23.x wait 0.002 s
        (``AsyncMicrobatchTokenizer``, :mod:`kvsim.sim.tokenizer_batch`).
    tokenizer_batch_max : int
        Prompts that close a tokeniser batch at once (vLLM: 32).
    output_s : float
        From the end of the step that sampled a token to the client receiving it, seconds.
    async_scheduling : bool
        The engine forms the next batch while the current one runs (see the module docstring).
    kernel_s : float
        GPU time per kernel launch outside the roofline (setup, tail, gap), seconds.
    graph_mode : bool
        The engine replays captured graphs for iterations of up to ``graph_max_tokens`` tokens
        (default true: vLLM's CUDA graphs, vLLM-Ascend's ACLGraph); false runs every iteration
        eagerly (vLLM ``--enforce-eager``).
    graph_max_tokens : int, optional
        The largest iteration captured, in tokens (per data-parallel rank); None: vLLM's rule,
        ``min(2 x max_num_seqs, 512, max_num_batched_tokens)`` of the instance.
    eager_launch_s : float
        Host time to issue one kernel in an eager iteration, seconds.
    coalesce : bool
        Advance a run of decode iterations whose batch does not change, or of one long prompt's
        prefill chunks, in one simulation event (a simulator setting, not an engine's: results
        are the same either way; ``false`` runs the step-by-step reference, one event per
        iteration).
    backend : str
        ``auto`` (the default: the compiled kernels where they were built, else the pure-Python
        reference), ``python`` or ``compiled`` (see :mod:`kvsim.backend`). A simulator setting:
        both give the same results to the bit.
    early_exit : EarlyExitSpec, optional
        Exit heads that stop tokens at intermediate layers, and the per-token distribution of the
        layer they stop at (:mod:`kvsim.models.early_exit`); None (default): every token runs
        every layer.
    step_variance : StepVarianceSpec
        A random, mean-one factor on every iteration's duration (:mod:`kvsim.models.step_variance`):
        ``kind: none`` (default: every step of a shape takes the step model's time) or
        ``lognormal``; ``{kind: lognormal}`` alone is the published setting.
    host_overlap : bool, optional
        The host prepares each iteration while the GPU runs the one before: a busy engine's
        iteration takes the longer of its GPU time and its host time, and only a step that starts
        an idle engine pays both (explained in ``kvsim/models/engine.py``). None (default): on
        exactly when ``async_scheduling`` is; false adds the host's per-step work to every
        iteration; true needs ``async_scheduling``.
    collectives : str
        How the tensor-parallel all-reduces and the expert all-to-alls are priced: ``alpha_beta``
        (the default: recursive doubling or a ring with the card's per-hop
        ``efficiency.collective_latency_s`` and link bandwidth, :mod:`kvsim.models.collectives`) or
        ``measured`` (per message size from published nccl-tests / engine benchmark curves of the
        card's interconnect, ``kvsim/models/data/collectives.yaml``,
        :mod:`kvsim.models.collective_curves`: on NVLink the engine's own one-shot / two-shot
        all-reduce, as vLLM and SGLang run it) or ``measured_nccl`` (the same with NCCL alone, as
        an engine without its own all-reduce kernels runs it: vLLM before 0.3 or with
        ``--disable-custom-all-reduce``).
    """

    step_fixed_s: Seconds = 0.5e-3
    step_per_seq_s: Seconds = 10e-6
    step_per_token_s: Seconds = 0.5e-6
    api_s: Seconds = 2e-3
    tokenize_s_per_token: Seconds = 0.1e-6
    tokenizer_batch_wait_s: Seconds = 0.0
    tokenizer_batch_max: PositiveInt = 32
    output_s: Seconds = 1e-3
    async_scheduling: bool = True
    kernel_s: Seconds = 3.64e-6
    graph_mode: bool = True
    graph_max_tokens: PositiveInt | None = None
    eager_launch_s: Seconds = 10e-6
    coalesce: bool = True
    backend: Literal["auto", "python", "compiled"] = "auto"
    early_exit: EarlyExitSpec | None = None
    step_variance: StepVarianceSpec = StepVarianceSpec()
    collectives: Literal["alpha_beta", "measured", "measured_nccl"] = "alpha_beta"
    host_overlap: bool | None = None

    @field_validator("backend")
    @classmethod
    def _backend_here(cls, value: str) -> str:
        if value == "compiled":
            from kvsim.backend import compiled_problem

            problem = compiled_problem()
            if problem is not None:
                raise ValueError(f"the compiled backend cannot run here: {problem} (use auto or python)")
        return value

    @model_validator(mode="after")
    def _overlap_needs_async(self) -> EngineSpec:
        if self.host_overlap is True and not self.async_scheduling:
            raise field_errors(EngineSpec, [(("host_overlap",), "true needs async_scheduling: true (a synchronous "
                                             "engine prepares a batch only after the one before it has finished, "
                                             "so nothing overlaps)", True)])
        return self

    @property
    def overlaps_host(self) -> bool:
        """Whether the host's per-step work overlaps the GPU's (``host_overlap``, or by default
        ``async_scheduling``)."""
        return self.async_scheduling if self.host_overlap is None else self.host_overlap

    def captured_tokens(self, max_num_seqs: int, max_batched_tokens: int) -> int:
        """The largest iteration replayed as a graph, in tokens, for an instance with these limits
        (0: none, every iteration eager)."""
        if not self.graph_mode:
            return 0
        if self.graph_max_tokens is not None:
            return self.graph_max_tokens
        return min(2 * max_num_seqs, 512, max_batched_tokens)

    def step_overhead_s(self, sequences: float, tokens: float) -> float:
        """Host-side time of one iteration over ``sequences`` sequences and ``tokens`` tokens, seconds."""
        return self.step_fixed_s + self.step_per_seq_s * sequences + self.step_per_token_s * tokens

    def request_in_s(self, prompt_tokens: int) -> float:
        """From a request's arrival to the engine seeing it, seconds."""
        return self.api_s + self.tokenize_s_per_token * prompt_tokens
