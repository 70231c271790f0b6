"""Weight offload: part of a model's weights kept off the card -- in host DRAM, or in the
scenario's remote pool -- and streamed to the card every iteration, overlapped with the layers
before them (issue 28 item 1).

It pays only when the HBM it frees changes the deployment -- room for more KV, or a model on
fewer cards -- and every iteration pays the link for it (SemiAnalysis's argument; FlexEE,
arXiv:2609.17008, measures the gain of early exit growing with the offloaded share because it
saves this movement).

**Dense models: by layer.** kvsim keeps the *last* ``k`` of the model's ``L`` layers off the card
(``instance.weight_offload.fraction``: ``k = round(fraction x L)``, at least one), their weights
split over the instance's ``tp`` cards like the rest. Each iteration streams them to each card,
one layer in ``tau`` seconds, into ``buffer_layers`` layer-sized buffers in HBM (two by default:
one arriving while the other is computed), starting as the iteration starts, while the resident
layers compute.

**Mixture-of-experts models: by expert, cold experts first.** ``fraction`` is the share of each
MoE layer's *routed* experts kept off the card: ``m = round(fraction x E)`` (at least one, at most
``E``), the ``m`` coldest. Attention, norms, shared experts, routers and the dense layers stay in
HBM. Expert popularity is ``instance.expert_skew``'s Zipf law (the one expert parallelism uses,
:func:`kvsim.models.parallel.expert_imbalance`): expert ``i`` by popularity takes a share ``p_i
proportional to (i+1)^-skew`` of the routed slots, so with top-``k`` routing (``k`` distinct
experts a token) a token picks it with probability ``q_i = k p_i`` (capped at 1, the excess
handed to the others in proportion: :func:`expert_routing_shares`). An iteration of ``T`` tokens
streams, per MoE layer, only the offloaded experts some token picks; their expected count is::

    touched(T) = sum over offloaded i of 1 - (1 - q_i)^T

exact by linearity of expectation *if tokens route independently* (the approximation: tokens of
one prompt route alike, so real batches touch fewer; :func:`touched_experts`). Uniform routing
(skew 0) gives ``m (1 - (1 - k/E)^T)``, the offloaded part of
:meth:`kvsim.models.llm.ModelSpec.weight_bytes_read`'s ``E (1 - (1 - k/E)^T)``. Each MoE layer's
transfer is then ``tau(T) = touched(T) x`` one expert's bytes per card over the rate: it grows
with the iteration's tokens and saturates at all ``m`` (the step model caches it per token count,
:meth:`kvsim.models.step_time.RooflineStepTime._token_terms`). The MoE layers are the last ``L -
first_dense_layers``, so the dense pipeline bound below applies with ``k`` the MoE layers and
``tau = tau(T)``. It assumes the touched experts are known when the iteration starts (a router
look-ahead or expert prediction, as offloading engines prefetch); an engine that fetches after
each layer's router runs pays more. The popularity is static (no expert cache adapting to the
traffic), and the resident experts' HBM reads keep the uniform count.

Popularity default: uniform (``expert_skew`` 0), an assumption (L). Skew is measured but not as a
Zipf exponent: DeepSeek-V3's per-layer expert token counts on MMLU-Pro vary substantially and fit
a log-normal best (deepseek-ai/DeepEP pull 393, M); load imbalance persists at inference and grows
with batch size (Replicate-and-Quantize, arXiv:2602.19938, M). Uniform streams the most experts, so
it is the conservative choice for the stream.

Step time. With ``x`` the iteration's roofline (``max(compute, memory)``, the GPU's own time) and
``c = x / L`` one layer's share of it, the offloaded layers end no earlier than their transfers
allow (a two-stage pipeline: transfer, then compute)::

    stream_s = k * tau + c          (the transfers back to back, then the last layer's compute)
    fill_s   = tau + k * c          (the first transfer, then the offloaded layers' compute)
    memory_s (offloaded) = max(memory_s, stream_s, fill_s)

so the iteration is ``max(compute, memory, stream, fill) + collectives + launches + host``: the
transfers' time counts as the memory phase (bringing the weights to the cores), and when they are
shorter than the layers before them they are hidden. With double buffering the transfer of a
layer waits for the buffer of the layer two back, which never binds in either regime (``tau >=
c``: transfers are the pace; ``tau < c``: they run ahead of the compute they feed).

HBM. Dense: ``(k - buffer_layers) x`` one layer's bytes per card are freed. MoE: the buffers hold
``buffer_layers`` MoE layers' worth of offloaded experts (all ``m`` of a layer: a large batch may
touch every one), so ``(MoE layers - buffer_layers) x m x`` one expert's bytes per card are freed.

**Where the weights live** (``weight_offload.home``). ``host`` (default): in the node's host DRAM,
streamed over each card's host link at ``host_link_bandwidth x efficiency.host_copy`` (a pinned
copy); host DRAM must hold every offloaded byte of the node's cards beside a DRAM KV tier.
``pool``: in the system's remote KV pool (``kv_cache.remote``: network-attached memory or
storage), read over the node's NICs straight into the card (GPU-Direct RDMA, no host copy) at
``min(nics.count x nics.bandwidth x nics.efficiency / cards per node, host_link_bandwidth, pool
share)``, the pool share being the pool nodes' ``min(nics delivered, read_bandwidth)`` summed and
split over every card of the nodes of the system's pools that stream from it. The pool holds one copy of the
offloaded weights for the whole system (every instance reads the same bytes), taken from its KV
capacity (spread over its nodes); a system without ``kv_cache.remote`` is refused.

**Through the flow network** (``weight_offload.contend: true``; :mod:`kvsim.serving.weight_flows`).
By default the stream is charged in the step time only, at the nominal rate above, and the KV
flows on its links do not see it. With ``contend`` each iteration's stream is a flow per card (and
per pool node, ``home: pool``: each holds an equal share of the weights) of the bytes the
iteration streams (``k`` layers, or the touched experts of each MoE layer), started as the
iteration starts, on the path a KV load from the same source takes: ``home: host`` host DRAM's
channels, the switch, the card's host link and its host-to-device copy engine; ``home: pool`` the
pool node's media and NIC, the fabric, the card's NIC and host link (GPU-Direct). The flow network
shares every link max-min fairly among the flows on it (:mod:`kvsim.network.flows`), so the KV
loads of prefixes from DRAM, NVMe or the pool, P->D handoffs and peer copies into the card over
those links see less bandwidth while the stream is in flight, and the stream gets less while they
are. Each flow is capped at the nominal rate (the pool home's share of the NICs and the pool among
its streaming cards stays a cap), so alone on its links the stream runs at exactly today's rate
and the step times are those of the default. The iteration is timed once, as it starts: the
network is solved at that instant and ``tau`` is scaled by the nominal rate over the slowest
flow's (the cards run in lock step), never per block or per token. The flow then runs on by
itself: a KV flow that starts during the iteration slows it (and the flow may still be landing
when the next iteration starts, which then shares the link with it), one that ends speeds it, but
the iteration's time was fixed at its start -- the approximation, as for KV read in place
(:mod:`kvsim.serving.cache.remote_reads`). The transfer is taken as one burst from the
iteration's start at the rate the network gives (the pipeline's "transfers back to back"); with
``tau < c`` a real engine paces it by the compute, spreading the same bytes over more of the
iteration. Writes to host DRAM (device to host) travel the other direction of the full-duplex
PCIe link on the other copy engine: they meet the stream only on host DRAM's half-duplex
channels. An instance whose stream contends runs its iterations one by one (no coalesced decode
or prefill-chunk runs): a run advances many iterations in one event and would start none of their
flows -- the simpler correct choice over cutting runs whenever a KV flow starts or ends on the
links. Not with ``engine.early_exit`` (refused). The stream's bytes are counted under the purpose
``weights`` beside the KV traffic's.

Not modelled: tensor parallelism inside one node only (no pipeline, expert or attention data
parallelism); without ``contend``, the stream does not share the host link, the NICs or the pool
with KV traffic (it is charged in the step time, and the links' KV flows do not see it); with it,
an iteration's time does not follow rate changes after it starts, and the stream is one burst, not
paced by the compute; the pool's access latency per transfer; the NIC's PCIe slot placement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from kvsim.dtypes import DTYPE_BYTES
from kvsim.hardware.specs import AcceleratorSpec, NodeSpec, PoolNodeSpec
from kvsim.models.llm import ModelSpec
from kvsim.models.parallel import Layout, layer_params
from kvsim.spec_types import Fraction, FrozenSpec, PositiveInt
from kvsim.units import format_quantity

__all__ = ["WeightOffloadSpec", "WeightStream", "PoolHome", "OffloadSizing", "offloaded_layers", "offloaded_experts",
           "layer_bytes_per_card", "expert_bytes_per_card", "expert_routing_shares", "touched_experts",
           "weight_stream", "pool_stream_Bps", "offload_sizing"]


class WeightOffloadSpec(FrozenSpec):
    """``instance.weight_offload``: which share of the weights lives off the card, and where.

    Attributes
    ----------
    fraction : float
        Between 0 and 1 exclusive. A dense model: the share of its decoder layers kept off the
        card and streamed each iteration (rounded to whole layers, at least one; the last
        layers). A mixture-of-experts model: the share of each MoE layer's routed experts kept
        off the card (rounded to whole experts, at least one; the coldest by
        ``instance.expert_skew``), of which each iteration streams those its tokens route to.
    buffer_layers : int
        Layer-sized buffers in HBM the streamed weights land in (default 2: double buffering);
        for an MoE model a buffer holds one layer's offloaded experts.
    home : str
        ``host`` (default): the node's host DRAM, over each card's host link; ``pool``: the
        system's remote KV pool (``kv_cache.remote``), over the node's NICs.
    contend : bool
        Stream the weights through the flow network (default false): each iteration's transfer
        is a flow per card on the links it crosses, sharing them with the KV traffic, and the
        iteration is timed at the rate the flow gets when it starts; the instance's iterations
        then run one by one (no coalesced runs). False: the stream is charged in the step time
        at its nominal rate, and the links' KV flows do not see it.
    """

    fraction: Fraction = Field(gt=0.0, lt=1.0)
    buffer_layers: PositiveInt = 2
    home: Literal["host", "pool"] = "host"
    contend: bool = False


def offloaded_layers(model: ModelSpec, fraction: float) -> int:
    """Decoder layers kept on the host: ``round(fraction x L)``, at least 1, at most ``L``."""
    return min(model.num_layers, max(1, round(fraction * model.num_layers)))


def offloaded_experts(model: ModelSpec, fraction: float) -> int:
    """Routed experts of each MoE layer kept off the card: ``round(fraction x E)``, at least 1,
    at most ``E``."""
    if model.moe is None:
        raise ValueError(f"{model.name} is a dense model: it has no routed experts")
    experts = model.moe.num_experts
    return min(experts, max(1, round(fraction * experts)))


def layer_bytes_per_card(model: ModelSpec, dtype: str, weight_dtypes: dict[str, str] | None, tp: int) -> float:
    """Weight bytes of one decoder layer on each of ``tp`` cards (attention, its norms and the
    feed-forward, in their storage formats)."""
    if model.moe is not None:
        raise ValueError("weight offload by layer is modelled for dense models only (an MoE model offloads experts)")
    formats = weight_dtypes or {}
    attention, ffn, _ = layer_params(model)
    total = (attention * DTYPE_BYTES[formats.get("attention", dtype)]
             + ffn * DTYPE_BYTES[formats.get("feed_forward", dtype)])
    return total / model.num_layers / tp


def expert_bytes_per_card(model: ModelSpec, dtype: str, weight_dtypes: dict[str, str] | None, tp: int) -> float:
    """Weight bytes of one routed expert on each of ``tp`` cards (its slice: tensor parallelism
    splits every expert), in the ``experts`` group's format."""
    return model.expert_params * DTYPE_BYTES[(weight_dtypes or {}).get("experts", dtype)] / tp


def expert_routing_shares(num_experts: int, experts_per_token: int, skew: float) -> tuple[float, ...]:
    """Probability that one token routes to each expert, hottest first (they add up to
    ``experts_per_token``).

    Expert ``i`` takes a share ``p_i`` proportional to ``(i+1)^-skew`` of the routed slots (0:
    uniform), so a token choosing ``k`` distinct experts picks it with probability ``k p_i``. No
    probability exceeds 1: a capped expert's excess goes to the uncapped ones in proportion to
    their shares (water filling), which keeps the sum ``k``.
    """
    weights = [math.pow(i + 1, -skew) for i in range(num_experts)]
    capped, scale = 0, 0.0
    while capped < num_experts:  # the hottest are capped first: a prefix, until the next is at most 1
        scale = (experts_per_token - capped) / math.fsum(weights[capped:])
        if weights[capped] * scale <= 1.0:
            break
        capped += 1
    return tuple(1.0 if i < capped else min(1.0, weights[i] * scale) for i in range(num_experts))


def touched_experts(shares: tuple[float, ...] | list[float], tokens: float) -> float:
    """Expected distinct experts among ``shares`` (each a per-token routing probability) that
    ``tokens`` tokens, routing independently, touch: ``sum 1 - (1 - q)^tokens``."""
    return math.fsum(1.0 - math.pow(1.0 - q, tokens) for q in shares)


@dataclass(frozen=True)
class WeightStream:
    """The offloaded weights of one instance, as the step-time model uses them
    (:func:`kvsim.models.step_time.streamed_memory_s` applies the module docstring's bound).

    Attributes
    ----------
    layers : int
        ``L``, the model's decoder layers.
    offloaded : int
        ``k``, those streamed each iteration (an MoE model: its MoE layers).
    layer_s : float
        ``tau``, one offloaded layer's transfer onto a card, seconds (an MoE model: all of one
        layer's offloaded experts, the most an iteration streams).
    expert_s : float
        An MoE model: one offloaded expert's transfer onto a card, seconds (0: a dense model).
    cold_shares : tuple of float
        An MoE model: the per-token routing probability of each offloaded expert
        (:func:`expert_routing_shares`); empty for a dense model.
    home : str
        ``host`` or ``pool``: where the weights come from.
    unit_bytes : float
        Bytes on each card of one offloaded layer (dense) or one offloaded expert (MoE).
    rate_Bps : float
        The nominal rate of each card's stream, bytes/s (``layer_s`` is ``unit_bytes`` over it,
        times the experts for MoE).
    contend : bool
        The stream shares its links with KV flows (``weight_offload.contend``,
        :mod:`kvsim.serving.weight_flows`).
    """

    layers: int
    offloaded: int
    layer_s: float
    expert_s: float = 0.0
    cold_shares: tuple[float, ...] = ()
    home: str = "host"
    unit_bytes: float = 0.0
    rate_Bps: float = 0.0
    contend: bool = False

    def what(self) -> str:
        """What is streamed, in words: ``16 of 32 layers`` or ``32 cold experts of each of 94 MoE
        layers``."""
        if not self.cold_shares:
            return f"{self.offloaded} of {self.layers} layers"
        return f"{len(self.cold_shares)} cold experts of each of {self.offloaded} MoE layers"

    def layer_s_at(self, tokens: int) -> float:
        """One offloaded layer's transfer in an iteration of ``tokens`` tokens, seconds: the
        whole layer (dense), or the offloaded experts the tokens are expected to touch (MoE)."""
        if not self.cold_shares:
            return self.layer_s
        return self.expert_s * touched_experts(self.cold_shares, tokens)

    def step_bytes(self, tokens: int) -> float:
        """Bytes streamed onto each card in an iteration of ``tokens`` tokens: every offloaded
        layer (dense), or the offloaded experts the tokens are expected to touch in each MoE
        layer (MoE)."""
        if not self.cold_shares:
            return self.offloaded * self.unit_bytes
        return self.offloaded * self.unit_bytes * touched_experts(self.cold_shares, tokens)


@dataclass(frozen=True)
class PoolHome:
    """The remote pool a system's offloaded weights live in (``weight_offload.home: pool``).

    Attributes
    ----------
    node : PoolNodeSpec
        The pool's node type.
    nodes : int
        Pool nodes (``kv_cache.remote.nodes``).
    streaming_cards : int
        Cards of the system that stream weights from the pool, sharing its bandwidth.
    """

    node: PoolNodeSpec
    nodes: int
    streaming_cards: int


def pool_stream_Bps(node: NodeSpec, accelerator: AcceleratorSpec, pool: PoolHome) -> float:
    """Rate of one card's weight stream from the pool, bytes/s: its share of the node's NICs (line
    rate x efficiency; GPU-Direct, no host copy), no more than its host link, nor than its share
    of the pool nodes' delivered NIC or media read bandwidth."""
    nic_share = node.nics.count * node.nics.delivered_bandwidth / node.accelerators_per_node
    per_pool_node = min(pool.node.nics.count * pool.node.nics.delivered_bandwidth, pool.node.read_bandwidth)
    pool_share = pool.nodes * per_pool_node / max(1, pool.streaming_cards)
    return min(nic_share, accelerator.host_link_bandwidth, pool_share)


def weight_stream(spec: WeightOffloadSpec, model: ModelSpec, accelerator: AcceleratorSpec, dtype: str,
                  weight_dtypes: dict[str, str] | None, tp: int, expert_skew: float = 0.0,
                  rate_Bps: float | None = None) -> WeightStream:
    """The stream of ``spec``'s offloaded weights onto each card of a ``tp``-card instance, at
    ``rate_Bps`` per card (default: the host link at ``efficiency.host_copy``)."""
    rate = rate_Bps if rate_Bps is not None else accelerator.host_link_bandwidth * accelerator.efficiency.host_copy
    if model.moe is None:
        unit = layer_bytes_per_card(model, dtype, weight_dtypes, tp)
        return WeightStream(layers=model.num_layers, offloaded=offloaded_layers(model, spec.fraction),
                            layer_s=unit / rate, home=spec.home, unit_bytes=unit, rate_Bps=rate, contend=spec.contend)
    m = offloaded_experts(model, spec.fraction)
    shares = expert_routing_shares(model.moe.num_experts, model.moe.experts_per_token, expert_skew)
    unit = expert_bytes_per_card(model, dtype, weight_dtypes, tp)
    expert_s = unit / rate
    return WeightStream(layers=model.num_layers, offloaded=model.num_moe_layers, layer_s=m * expert_s,
                        expert_s=expert_s, cold_shares=shares[len(shares) - m:], home=spec.home, unit_bytes=unit,
                        rate_Bps=rate, contend=spec.contend)


@dataclass(frozen=True)
class OffloadSizing:
    """What an instance's weight offload does to its sizing.

    Attributes
    ----------
    stream : WeightStream
    freed_bytes_per_card : float
        HBM freed on each card, bytes (the offloaded bytes less the buffers).
    offloaded_bytes_per_card : float
        Weight bytes of each card kept off it, bytes.
    pool_bytes : float
        ``home: pool``: the bytes of one copy of the offloaded weights (the whole model's, every
        card's slice), bytes; 0 with ``home: host``.
    """

    stream: WeightStream
    freed_bytes_per_card: float
    offloaded_bytes_per_card: float
    pool_bytes: float = 0.0


def offload_sizing(spec: WeightOffloadSpec, model: ModelSpec, node: NodeSpec, accelerator: AcceleratorSpec,
                   layout: Layout, dtype: str, weight_dtypes: dict[str, str] | None,
                   dram_tier_bytes: float = 0.0, expert_skew: float = 0.0,
                   pool: PoolHome | None = None) -> OffloadSizing:
    """The stream of an instance's offloaded weights and the HBM it frees on each card.

    Raises
    ------
    ValueError
        Where it is not modelled (a layout other than tensor parallelism inside one node), with
        ``home: pool`` and no ``pool``, or where the home cannot hold the weights: the node's host
        DRAM, beside a DRAM KV tier of ``dram_tier_bytes``, every offloaded byte of its cards; the
        pool one copy of them. The message says what to change.
    """
    if not layout.plain_tp or layout.cards > node.accelerators_per_node:
        raise ValueError(f"weight offload is modelled for tensor parallelism inside one node; this instance is "
                         f"{layout.label()} on {node.name}")
    rate = None
    if spec.home == "pool":
        if pool is None:
            raise ValueError("home: pool keeps the offloaded weights in the system's remote pool, but the system has "
                             "none: give kv_cache.remote, or home: host")
        rate = pool_stream_Bps(node, accelerator, pool)
        if rate <= 0.0:
            raise ValueError(f"home: pool streams the weights over the NICs, but node {node.name} or pool node "
                             f"{pool.node.name} has none (nics.count: 0): give NICs, or home: host")
    stream = weight_stream(spec, model, accelerator, dtype, weight_dtypes, layout.tp, expert_skew, rate)
    if model.moe is None:
        unit, count, what = layer_bytes_per_card(model, dtype, weight_dtypes, layout.tp), stream.offloaded, \
            f"{stream.offloaded} of {model.num_layers} layers"
        freed = max(0, stream.offloaded - spec.buffer_layers) * unit
    else:
        m = len(stream.cold_shares)
        unit, count = expert_bytes_per_card(model, dtype, weight_dtypes, layout.tp), m * stream.offloaded
        what = f"{m} of {model.moe.num_experts} experts of {stream.offloaded} MoE layers"
        freed = max(0, stream.offloaded - spec.buffer_layers) * m * unit
    per_card = count * unit
    if pool is not None and spec.home == "pool":  # (home: pool without one was refused above)
        capacity = pool.nodes * pool.node.capacity_bytes
        copy = per_card * layout.tp
        if copy >= capacity:
            raise ValueError(f"{what} take {format_quantity(copy, 'bytes')} of the remote pool "
                             f"({pool.nodes} x {pool.node.name} = {format_quantity(capacity, 'bytes')}), leaving no "
                             "room for KV: lower the fraction or add pool nodes")
        return OffloadSizing(stream, freed, per_card, copy)
    host_bytes = per_card * node.accelerators_per_node  # every card of the node streams
    if host_bytes + dram_tier_bytes > node.host_dram_bytes:
        raise ValueError(f"{what} on the host take {format_quantity(host_bytes, 'bytes')} of node {node.name}'s host "
                         "DRAM " + (f"beside the {format_quantity(dram_tier_bytes, 'bytes')} KV tier "
                                    if dram_tier_bytes else "")
                         + f"({format_quantity(node.host_dram_bytes, 'bytes')}): lower the fraction")
    return OffloadSizing(stream, freed, per_card)
