"""Specs of the serving layer: how an instance is configured, pools of instances and their roles,
routing, and the prefill -> decode KV handoff."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from kvsim.models.weight_offload import WeightOffloadSpec
from kvsim.spec_types import (
    Bytes,
    Count,
    Fraction,
    FrozenSpec,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    PositiveSeconds,
    Seconds,
    field_errors,
)

__all__ = [
    "InstanceSpec", "RouterKind", "CacheAwareSpec", "Role", "PoolSpec", "HandoffSpec", "ROLES", "Signal", "SIGNALS",
    "SHARE_SIGNALS",
    "StaticController", "ThresholdController", "ProportionalController", "ControllerSpec", "LoraSpec",
]

RouterKind = Literal["round_robin", "least_outstanding", "least_prompt_tokens", "most_free_kv", "prefix_aware",
                     "cache_aware", "random"]
"""How a router picks an instance among those of one role (see :mod:`kvsim.serving.router`)."""


class CacheAwareSpec(FrozenSpec):
    """Settings of the ``cache_aware`` router (:class:`~kvsim.serving.cache_router.CacheAwareRouter`).

    The router sends a request where serving it is expected to cost least, in tokens, as NVIDIA
    Dynamo's KV router does (cost = ``prefill_load_scale`` x max(0, prompt tokens queued there +
    this prompt - credited cached tokens) + ``decode_weight`` x KV tokens of the requests it
    holds; Dynamo docs, "Routing Concepts" / "Configuration and Tuning", router v1.3; code
    ``ai-dynamo/dynamo`` ``lib/kv-router/src/scheduling/selector/default.rs``). A cached block is
    credited by the tier the instance would load it from; the defaults are Dynamo's.

    Attributes
    ----------
    staleness : float
        Seconds between refreshes of the router's view of the cluster KV index: it sees the index
        as it was at the last refresh (0 to ``staleness`` old). 0 (default) reads the live index,
        an idealisation: real routers learn of cache changes from engine events a little later.
    hbm_credit : float
        Credit per block in the instance's own HBM (Dynamo ``overlap_score_credit``, 1.0).
    dram_credit : float
        Per block in its node's host DRAM tier (Dynamo ``host_cache_hit_weight``, 0.75).
    nvme_credit : float
        Per block in its node's NVMe tier (Dynamo ``disk_cache_hit_weight``, 0.25).
    remote_credit : float
        Per block in the remote pool (Dynamo ``shared_cache_multiplier``, 0.5, marked
        experimental there).
    prefill_load_scale : float
        Weight of the prompt tokens to compute (Dynamo ``prefill_load_scale``, 1.0).
    decode_weight : float
        Weight of the KV tokens of the requests an instance holds (Dynamo adds its decode blocks
        with weight 1).
    cache_threshold : float
        A candidate's cached prefix counts only if it is more than this fraction of the prompt;
        a smaller match (a shared system prompt, say) is ignored and the request goes by load.
        SGLang's cache-aware router does the same (``cache_threshold``, default 0.3): below it,
        it sends the request to the instance with the least cached rather than chasing a short
        match, which would pile every new conversation onto the few instances that hold the
        common first blocks. 0 credits every match, as Dynamo does.
    balance_abs_threshold, balance_rel_threshold : int, float
        Load guard, as SGLang's cache-aware router (``sgl-router`` ``policies/cache_aware.rs``;
        defaults 64 and 1.5 there): when the most and least loaded candidates differ by more
        than ``balance_abs_threshold`` outstanding requests *and* the most exceeds
        ``balance_rel_threshold`` times the least, the request goes to the least loaded
        instance whatever is cached, so a hot prefix cannot pile work onto one instance.
    """

    staleness: Seconds = 0.0  # 0: the live index
    hbm_credit: float = Field(default=1.0, ge=0.0, le=1.0)
    dram_credit: float = Field(default=0.75, ge=0.0, le=1.0)
    nvme_credit: float = Field(default=0.25, ge=0.0, le=1.0)
    remote_credit: float = Field(default=0.5, ge=0.0, le=1.0)
    prefill_load_scale: float = Field(default=1.0, gt=0.0)
    decode_weight: float = Field(default=1.0, ge=0.0)  # 0: route by the prompt work alone
    cache_threshold: float = Field(default=0.3, ge=0.0, lt=1.0)  # at 1 no match could ever count
    balance_abs_threshold: Count = 64
    balance_rel_threshold: float = Field(default=1.5, ge=1.0)  # a ratio of most to least loaded

Role = Literal["mixed", "prefill", "decode"]
"""What an instance does: ``mixed`` serves whole requests (colocated prefill and decode);
``prefill`` computes prompts and hands their KV to a ``decode`` instance, which generates."""

ROLES: tuple[str, ...] = ("mixed", "prefill", "decode")


class InstanceSpec(FrozenSpec):
    """One inference engine instance: its parallel layout and its batching limits.

    An instance is ``tp x pp`` cards (see :mod:`kvsim.models.parallel`); it may span several
    nodes of its pool (a whole number of them), or a divisor of one node's cards.

    Attributes
    ----------
    tp : int
        Cards per pipeline stage: the tensor-parallel degree (of attention, ``tp / dp_attention``
        with data-parallel attention; of the experts when ``ep`` is 1). Default 1.
    pp : int
        Pipeline stages (layers split as evenly as possible, vLLM's default partition). Default 1.
    ep : int
        Expert parallelism for MoE models: 1 (experts tensor-parallel) or ``tp`` (whole experts
        spread over every card of a stage, tokens moved by all-to-all dispatch and combine).
    dp_attention : int
        Data-parallel attention ranks per stage (divides ``tp``; MoE models): each runs attention
        on its own share of the sequences over ``tp / dp_attention`` cards and holds only their
        KV; the ranks share the MoE layers (SGLang ``--enable-dp-attention``, vLLM
        ``--data-parallel-size`` with expert parallelism). Default 1.
    micro_batches : int or None
        Micro-batches one iteration is cut into for the pipeline (default ``pp``, vLLM's number
        of virtual engines).
    pp_schedule : str
        ``continuous`` (default): ``pp`` batches in flight as vLLM's virtual engines keep them,
        no bubble in steady state; ``flush``: each iteration fills and drains the pipe (GPipe),
        paying ``(pp - 1)`` extra stage times.
    expert_skew : float
        Zipf exponent of expert popularity (0: uniform routing, the default, an assumption); sets
        the busiest expert rank's load over the mean (:func:`kvsim.models.parallel.expert_imbalance`)
        and, with ``weight_offload``, which experts are cold and how many an iteration streams.
    layout : str
        ``given`` (default): the fields above; ``best``: try every valid layout of the pool's
        nodes and keep the one with the highest goodput (:mod:`kvsim.sim.layout_search`). In a
        system of several pools (prefill and decode) each pool asking for it is searched, one
        pool at a time, decode first; not with ``roles`` (they count instances, which the layout
        sets).
    max_num_seqs : int
        Cap on concurrently running sequences *per data-parallel attention rank* (vLLM
        ``max_num_seqs``, default 256): the instance runs up to ``dp_attention x max_num_seqs``.
    max_batched_tokens : int
        Token budget per iteration *per data-parallel attention rank* (vLLM
        ``max_num_batched_tokens``). Default 2048, vLLM V1's default for an API server (it uses
        8192 on large-memory GPUs). A larger budget prefills faster under load but stretches
        every decode step that shares the iteration. The instance's iteration holds up to
        ``dp_attention x max_batched_tokens`` tokens, and one sequence's prefill chunk at most
        ``max_batched_tokens`` (a sequence lives on one rank).
    block_size_tokens : int
        KV page size in tokens (vLLM default 16).
    memory_utilization : float
        Fraction of device memory the engine may use (vLLM ``gpu_memory_utilization``, default 0.9).
    activation_reserve : float or None
        Bytes per card kept out of the KV cache for activations, sampling and the runtime. None
        (default) computes it from the model and the batch limits as vLLM's profiling pass does
        (:func:`kvsim.models.memory.activation_reserve_bytes`).
    runtime_reserve : float
        With ``activation_reserve`` computed: bytes per card for CUDA graphs, communication
        buffers and workspaces (assumption: 1 GiB).
    images_per_prompt : int or None
        Images a prompt may carry, for a model with a vision tower (vLLM ``--limit-mm-per-prompt
        '{"image": N}'``). None (default): vLLM's default, 999; vLLM then loads the tower and
        profiles an encoder pass even if every prompt is text. 0: text only, no tower loaded and
        no encoder pass (:mod:`kvsim.models.vision`). Ignored for text models.
    mm_profiling : bool
        False: vLLM's ``--skip-mm-profiling``: the tower is loaded, its encoder pass not kept
        out of the KV cache. Default True.
    weight_offload : WeightOffloadSpec or None
        Keep a share of the weights off the card -- a dense model's last layers, an MoE model's
        coldest routed experts -- in host DRAM (or the remote pool, ``home: pool``) and stream
        them to the cards every iteration (``{fraction: 0.5}``; :mod:`kvsim.models.weight_offload`):
        more HBM for KV, or a model on fewer cards, for link time on every step. Tensor
        parallelism inside one node. None (default): every weight in HBM.
    weight_offload_search : list of float
        With ``layout: best``: shares the search also tries keeping off the card (each a
        ``weight_offload.fraction``), beside every weight in HBM, for each candidate layout
        offload is modelled for (tensor parallelism inside one node). So
        the search weighs e.g. TP 2 with half the layers streamed against TP 4 without, and its
        summary says whether offload paid (``layout_search.weight_offload``). Empty (default):
        the search keeps every weight in HBM.

    Notes
    -----
    The batch limits are vLLM's, per DP rank: with ``--data-parallel-size D`` every rank is its
    own engine core with its own scheduler built from the same ``max_num_seqs`` and
    ``max_num_batched_tokens`` (vLLM ``docs/serving/data_parallel_deployment.md``: "each DP rank
    is deployed as a separate core engine process", "``--max-num-seqs`` applies per DP rank";
    ``vllm/v1/core/sched/scheduler.py`` ``Scheduler.__init__``: ``max_num_running_reqs =
    max_num_seqs``, ``max_num_scheduled_tokens = max_num_batched_tokens``; vLLM main of 2026,
    commits 01e4fce and 00024d3 of ``vllm-project/vllm``).
    SGLang counts its limits over the whole instance instead and divides them by ``--dp-size``
    (``server_args.py``: ``chunked_prefill_size //= dp_size`` with DP attention;
    ``model_runner.py``: ``max_running_requests // dp_size``): ``kvsim deploy`` writes the
    SGLang flags as ``dp_attention x`` these values. With ``dp_attention`` 1 the two agree.

    kvsim does not place sequences on ranks: one scheduler runs the instance, with
    ``dp_attention`` times the per-rank limits, and the step model spreads the batch's attention
    evenly over the ranks (:mod:`kvsim.models.layout_step`). That is exact when the ranks are
    balanced -- vLLM's front end sends each request to the rank with the fewest waiting and
    running requests (``vllm/v1/engine/core_client.py`` ``DPLBAsyncMPClient``) -- and optimistic
    when they are not: a rank holding more than its ``max_num_seqs`` while another has room is
    allowed here, and a lone long prompt's chunk is costed as if its attention were spread over
    every rank, where in the engine one rank computes it while the others run dummy passes.
    """

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    ep: PositiveInt = 1
    dp_attention: PositiveInt = 1
    micro_batches: PositiveInt | None = None
    pp_schedule: Literal["continuous", "flush"] = "continuous"
    expert_skew: float = Field(default=0.0, ge=0.0, le=4.0)
    layout: Literal["given", "best"] = "given"
    max_num_seqs: PositiveInt = 256
    max_batched_tokens: PositiveInt = 2048
    block_size_tokens: PositiveInt = 16
    memory_utilization: Fraction = 0.9
    activation_reserve: Bytes | None = None  # 0 is a choice: every byte left after weights holds KV
    runtime_reserve: Bytes = 1.0 * 2**30
    images_per_prompt: Count | None = None
    mm_profiling: bool = True
    weight_offload: WeightOffloadSpec | None = None
    weight_offload_search: tuple[Annotated[float, Field(gt=0.0, lt=1.0)], ...] = ()

    @property
    def instance_max_num_seqs(self) -> int:
        """Running sequences the whole instance holds: ``max_num_seqs`` per attention rank."""
        return self.max_num_seqs * self.dp_attention

    @property
    def instance_max_batched_tokens(self) -> int:
        """Tokens one iteration of the whole instance holds: ``max_batched_tokens`` per rank."""
        return self.max_batched_tokens * self.dp_attention


class PoolSpec(FrozenSpec):
    """A pool of identical instances: ``nodes`` servers of catalog type ``node``, cut into
    instances of ``instance.tp x instance.pp`` cards, each starting in ``role``.

    ``instances`` defaults to every card in use. ``roles`` splits one pool between prefill
    and decode instead (``{prefill: 2, decode: 6}``: the first two instances start as prefill),
    so a P:D ratio on identical hardware is one sweepable field.

    Under an adaptive controller (``controller.kind`` threshold or proportional) only *switchable*
    pools change role: by default a pool split by ``roles`` is switchable and one with a fixed
    ``role`` is not (a prefill-only product such as a 950PR server is never made to decode).
    ``switchable`` says otherwise explicitly. ``min_prefill`` and ``min_decode`` bound a switchable
    pool's own instances in each role (the controller's own minimums bound the whole system's).
    """

    node: str
    nodes: PositiveInt = 1
    instance: InstanceSpec = Field(default_factory=InstanceSpec)
    instances: PositiveInt | None = None
    role: Role = "mixed"
    roles: dict[Literal["prefill", "decode"], int] | None = None  # each >= 1: SystemSpec.shape_problems says why
    switchable: bool | None = None  # None: switchable when split by roles, fixed when given one role
    min_prefill: Count = 0
    min_decode: Count = 0

    @property
    def may_switch(self) -> bool:
        """An adaptive controller may move this pool's instances between prefill and decode."""
        return self.roles is not None if self.switchable is None else self.switchable

    def initial_roles(self, instances: int) -> list[str]:
        """The role each of the pool's ``instances`` instances starts in."""
        if self.roles is None:
            return [self.role] * instances
        return ["prefill"] * self.roles.get("prefill", 0) + ["decode"] * self.roles.get("decode", 0)


class HandoffSpec(FrozenSpec):
    """How a prefill instance hands a prompt's KV to a decode instance.

    Attributes
    ----------
    mode : str
        ``layerwise`` (default): each layer's KV streams to the decode instance as it is
        computed, so the transfer overlaps the prompt's last prefill iteration and only the
        last layer's share is left when it ends. ``whole``: the KV is sent after the last
        layer.
    gpu_direct : bool
        NIC DMA straight between device memories (GPU-Direct RDMA, default), as KV transfer
        engines (Mooncake, NIXL) do; otherwise each side bounces through its host DRAM.
        Inside one scale-up domain the handoff is a peer copy over the scale-up links.
    """

    mode: Literal["layerwise", "whole"] = "layerwise"
    gpu_direct: bool = True


Signal = Literal["prefill_queue", "decode_queue", "ttft_attainment", "tpot_attainment", "decode_kv_occupancy"]
SIGNALS: dict[str, str] = {
    "prefill_queue": "prompt tokens waiting or being prefilled, per prefill instance (tokens); "
                     "high means prefill is short",
    "decode_queue": "computed prompts handed to a decode instance and not yet admitted there (waiting for KV "
                    "room or a batch slot), per decode instance (requests); high means decode is short",
    "ttft_attainment": "share of first tokens in the trailing window within the TTFT SLO; low means "
                       "prefill is short",
    "tpot_attainment": "share of requests finished in the trailing window within the TPOT SLO; low "
                       "means decode is short",
    "decode_kv_occupancy": "share of the decode instances' KV pages in use; high means decode is short",
}
"""Controller signals and what they say."""


SHARE_SIGNALS: tuple[str, ...] = ("ttft_attainment", "tpot_attainment", "decode_kv_occupancy")
"""Signals that are shares, in [0, 1]; ``prefill_queue`` is a count of tokens (>= 0)."""


class StaticController(FrozenSpec):
    """A fixed P:D ratio (the pools' roles); the timeline is still sampled every ``interval``."""

    kind: Literal["static"] = "static"
    interval: PositiveSeconds = 10.0


class _Adaptive(FrozenSpec):
    signal: Signal
    signal_pools: list[str] | None = Field(default=None, min_length=1)
    interval: PositiveSeconds = 30.0
    window: PositiveSeconds | None = None
    min_prefill: PositiveInt = 1
    min_decode: PositiveInt = 1
    switch_time: Seconds = 30.0  # 0: an idealised instant switch (the drain is still paid)
    on_switch: Literal["drain", "migrate"] = "drain"  # migrate: move decoding sequences' KV elsewhere, not drain

    def _levels_checked(self, *names: str) -> None:
        """Refuse levels (``low``, ``high``, ``setpoint``) outside the signal's range: a share
        signal never leaves [0, 1], so a band beyond it would hold or push for ever."""
        if self.signal not in SHARE_SIGNALS:
            return
        wrong = [((name,), f"{self.signal} is a share, in [0, 1]: got {getattr(self, name):g}", getattr(self, name))
                 for name in names if getattr(self, name) > 1]
        if wrong:
            raise field_errors(type(self), wrong)


class ThresholdController(_Adaptive):
    """Move one instance per decision when the signal leaves the band ``[low, high]``.

    Every ``interval`` the controller reads ``signal``; beyond the band on the side that says
    prefill is short (above ``high`` for ``prefill_queue``, below ``low`` for
    ``ttft_attainment``; see :data:`SIGNALS`) it turns ``step`` decode instances into prefill
    ones, on the other side prefill into decode; inside the band it holds (the band is the
    hysteresis). ``window`` (default: ``interval``) is the trailing window of the attainment
    signals. A switching instance stops taking new work, finishes what it holds (requests not
    yet started move to other instances of its role), then is out of service for
    ``switch_time`` (default 30 s, an assumption: an engine restart in the new role with the
    weights still in memory; no published figure) before it serves in its new role. It keeps
    at least ``min_prefill`` and ``min_decode`` instances in service (together at most the
    system's instances: :func:`kvsim.sim.sizing.size_system` checks it).

    ``low`` and ``high`` are in the signal's unit: tokens (>= 0) for ``prefill_queue``, a share
    in [0, 1] for the others (:data:`SHARE_SIGNALS`). ``interval`` and ``window`` are above zero;
    ``switch_time`` may be 0 (an idealised instant restart).

    ``on_switch`` says what a decode instance leaving decode does with the sequences it runs:
    ``drain`` (default) lets them finish there; ``migrate`` pauses each decoding one at an
    iteration boundary and moves its KV (the pages it holds, bytes) over the links to the least
    busy decode instance with room for it, where it goes on decoding with its tokens so far
    (:mod:`kvsim.serving.migration`); one with no such instance drains.

    ``signal_pools`` (default: every pool) measures the signal over the named pools' instances
    only: the decode queue of the switchable 850E pool, say, rather than of every decode
    instance. The queue and occupancy signals then count those instances in the role the signal
    is about; the attainment signals count the requests whose first token (TTFT) or last token
    (TPOT) those instances produced.
    """

    kind: Literal["threshold"] = "threshold"
    low: NonNegativeFloat
    high: NonNegativeFloat
    step: PositiveInt = 1

    @model_validator(mode="after")
    def _band_in_range(self) -> ThresholdController:
        self._levels_checked("low", "high")  # low < high: SystemSpec.controller_problems
        return self


class ProportionalController(_Adaptive):
    """Move ``round(gain * error)`` instances per decision (at most ``max_step``), where error is
    how far the signal is from ``setpoint`` on the side that says prefill is short (negative:
    decode is short). ``setpoint`` is in the signal's unit, as ``low`` and ``high`` are. Other
    fields as :class:`ThresholdController`."""

    kind: Literal["proportional"] = "proportional"
    setpoint: NonNegativeFloat
    gain: PositiveFloat
    max_step: PositiveInt = 2

    @model_validator(mode="after")
    def _setpoint_in_range(self) -> ProportionalController:
        self._levels_checked("setpoint")
        return self


ControllerSpec = Annotated[StaticController | ThresholdController | ProportionalController,
                           Field(discriminator="kind")]
"""How a disaggregated system's P:D ratio moves at run time."""


class LoraSpec(FrozenSpec):
    """How a system serves the workload's LoRA adapters (``workload.adapters``).

    Attributes
    ----------
    max_loras : int or None
        Adapter slots per instance, the most distinct adapters one step may run (vLLM's
        ``--max-loras``, whose default is 1). None: one slot per adapter, all resident. Each
        slot holds an adapter's weights in device memory, taken from the KV cache.
    kv_sharing : str
        What a request may reuse of KV computed under another adapter, for its shared context
        (the shared document or prefix; see :mod:`kvsim.models.lora`): ``none`` (KV is per
        adapter: a different value), ``value_reuse`` (an adapter copies the shared context's KV
        that another computed into its own cache: the compute is saved, the bytes are not) or
        ``byte_sharing`` (one physical copy read by every adapter: compute and bytes saved).
    """

    max_loras: PositiveInt | None = None
    kv_sharing: Literal["none", "value_reuse", "byte_sharing"] = "none"
