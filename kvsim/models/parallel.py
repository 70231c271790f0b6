"""Parallel layouts of one instance and the closed-form costs of their collectives.

A layout is ``tp x pp`` cards: ``pp`` pipeline stages, each ``tp`` cards wide. Inside a stage
the attention and the MoE feed-forward may be split differently, as SGLang's ``--tp N --ep N
--dp N --enable-dp-attention`` and vLLM's ``--data-parallel-size --enable-expert-parallel`` do:

- ``dp_attention`` ranks each run attention on their own share of the sequences, tensor-parallel
  over ``tp / dp_attention`` cards (the *attention group*); KV of a sequence lives only on its
  rank's cards.
- ``ep``: routed experts are split over the ``ep`` cards of a stage (``ep`` is 1 or ``tp``:
  experts either tensor-parallel over the stage, or whole experts spread over every card of it,
  as both engines do). Tokens reach their experts by an all-to-all *dispatch* and come back by
  a *combine*, once per MoE layer.

The cost terms below take link figures as plain numbers (:class:`GroupLinks`); which link a
collective crosses (scale-up, PCIe, RDMA NICs) is worked out from the hardware by the sizing
code, so this module knows nothing of the topology.

Closed forms (per card; all-reduces are :func:`kvsim.models.collectives.allreduce_s`, the
cheaper of recursive doubling and a ring, with the group's per-hop latency and bandwidth):

- all-to-all dispatch (or combine) of ``t`` tokens per card, hidden ``h``, activation bytes
  ``a``: each token goes once to every *other* rank holding at least one of its ``k`` experts;
  with experts spread evenly and routed uniformly that is ``(ep-1) * (1 - C(E-E/ep, k)/C(E, k))``
  ranks per token (DeepEP sends a token once per rank, not once per expert). The busiest rank
  receives ``imbalance`` times the mean.
- pipeline stage send of ``t`` tokens: ``t * h * a / tp`` per card (each card of a stage sends its
  slice and the next stage all-gathers it, as vLLM's ``send_tensor_dict(all_gather_group=tp)``).
- pipeline schedule of ``m`` micro-batches over ``p`` stages of time ``s`` each: ``continuous``
  (vLLM's virtual engines / batch queue: ``p`` batches in flight, no bubble in steady state)
  ``m * s``; ``flush`` (GPipe: each iteration fills and drains the pipe) ``(m + p - 1) * s``,
  bubble fraction ``(p-1)/(m+p-1)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from kvsim.dtypes import DTYPE_BYTES
from kvsim.models.collective_curves import collective_curves
from kvsim.models.collectives import allreduce_s
from kvsim.models.llm import WEIGHT_GROUPS, ModelSpec

__all__ = [
    "Layout", "GroupLinks", "LayoutLinks", "PipelineSchedule", "layout_problems", "stage_layers",
    "alltoall_ranks_per_token", "alltoall_bytes_per_card", "alltoall_s",
    "alltoall_tier_bytes", "group_allreduce_s", "measured_interconnect",
    "expert_imbalance", "stage_send_bytes_per_card", "p2p_send_s", "pipeline_time_s",
    "bubble_fraction", "weight_bytes_per_card", "kv_bytes_per_token_per_card", "candidate_layouts",
    "RDMA_EFFICIENCY",
]

PipelineSchedule = Literal["continuous", "flush"]

RDMA_EFFICIENCY = 0.86
"""Fraction of a NIC's line rate an all-to-all reaches: DeepEP's internode dispatch bottleneck
bandwidth is 43 GB/s on a CX7 400 Gb/s NIC (~50 GB/s) at EP16 (DeepEP README, normal kernels)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """How one instance's cards are used.

    Attributes
    ----------
    tp : int
        Cards per pipeline stage (tensor-parallel degree when ``ep`` and ``dp_attention`` are 1).
    pp : int
        Pipeline stages.
    ep : int
        Expert-parallel degree: 1 (experts tensor-parallel) or ``tp`` (whole experts over every
        card of the stage).
    dp_attention : int
        Attention data-parallel ranks per stage (divides ``tp``); each runs attention over
        ``tp / dp_attention`` cards on its own sequences.
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp_attention: int = 1

    @property
    def cards(self) -> int:
        """Cards of one instance."""
        return self.tp * self.pp

    @property
    def attention_tp(self) -> int:
        """Cards of one attention group (tensor-parallel degree of attention)."""
        return self.tp // self.dp_attention

    @property
    def plain_tp(self) -> bool:
        """Only tensor parallelism: the layout every scenario had before layouts existed."""
        return self.pp == 1 and self.ep == 1 and self.dp_attention == 1

    def needs_layout_model(self, cards_per_node: int) -> bool:
        """Whether the layout step model costs this instance (pipeline stages, expert or
        attention data parallelism, or tensor parallelism across nodes); plain tensor
        parallelism inside one node is the roofline model's, which has no micro-batches,
        pipeline schedule or expert skew."""
        return not self.plain_tp or self.tp > cards_per_node

    def label(self) -> str:
        """Short text, e.g. ``tp4 pp2`` or ``tp8 ep8 dpa8``."""
        parts = [f"tp{self.tp}"]
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.dp_attention > 1:
            parts.append(f"dpa{self.dp_attention}")
        return " ".join(parts)


def layout_problems(layout: Layout, model: ModelSpec) -> list[tuple[str, str]]:
    """Why ``layout`` cannot run ``model``, as ``(field, message)``; empty if it can."""
    problems: list[tuple[str, str]] = []
    a = layout.attention_tp
    if layout.tp % layout.dp_attention:
        problems.append(("dp_attention", f"dp_attention={layout.dp_attention} must divide tp={layout.tp} "
                                         "(each attention rank gets tp / dp_attention cards)"))
    elif model.num_attention_heads % a or (model.mla is None and model.num_kv_heads % a and a % model.num_kv_heads):
        what = "tp" if layout.dp_attention == 1 else "tp / dp_attention"
        problems.append(("tp", f"{what}={a} does not split {model.name}'s {model.num_attention_heads} attention "
                               f"heads / {model.num_kv_heads} KV heads evenly (engines need heads divisible by "
                               "the attention tensor-parallel degree, or it divisible by the KV heads)"))
    if layout.ep > 1:
        if model.moe is None:
            problems.append(("ep", f"ep={layout.ep}: {model.name} is dense; expert parallelism needs an MoE model"))
        elif layout.ep != layout.tp:
            problems.append(("ep", f"ep={layout.ep} must be 1 or equal tp={layout.tp} (experts are spread over "
                                   "every card of a stage, as vLLM and SGLang do)"))
        elif model.moe.num_experts % layout.ep:
            problems.append(("ep", f"ep={layout.ep} does not divide {model.name}'s {model.moe.num_experts} "
                                   "routed experts"))
    if layout.dp_attention > 1 and model.moe is None:
        problems.append(("dp_attention", f"dp_attention={layout.dp_attention}: {model.name} is dense; data-"
                                         "parallel attention inside one instance needs MoE layers to share "
                                         "(for a dense model use more instances)"))
    if layout.pp > model.num_layers:
        problems.append(("pp", f"pp={layout.pp} exceeds {model.name}'s {model.num_layers} layers"))
    return problems


def stage_layers(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers of each stage: as even as possible, the first ``L mod pp`` stages one more (vLLM's
    default partition when ``pp`` does not divide the layers)."""
    base, extra = divmod(num_layers, pp)
    return tuple(base + (1 if s < extra else 0) for s in range(pp))


# ---------------------------------------------------------------------------- links


@dataclass(frozen=True, slots=True)
class GroupLinks:
    """Link figures of one collective group of ``cards`` cards, per card, in bytes/s.

    The group sits in ``domains`` fast domains (a scale-up domain, or one node over PCIe when
    the cards have no scale-up link) of ``cards / domains`` cards each.

    Attributes
    ----------
    cards : int
    domains : int
    local_Bps, local_latency_s : float
        Card to card inside a fast domain (scale-up link, or PCIe), achieved rate.
    remote_Bps, remote_latency_s : float
        One card's share of its node's NICs across domains (RDMA), achieved rate; unused when
        ``domains`` is 1.
    local_on_pcie : bool
        The local path is the card's PCIe link, which its RDMA traffic also crosses.
    group_cards : int
        Supernode tiers (:mod:`kvsim.network.tiers`) only: cards of one first-layer group inside
        a domain, where ``local_*`` applies; between the domain's groups ``tier2_*`` applies. 0
        (default): no tiers, and none of the fields below is used.
    tier2_Bps, tier2_latency_s : float
        One card's share of the second layer (after oversubscription), achieved rate, and the
        per-hop latency across it.
    local_message_s, tier2_message_s, remote_message_s : float
        The per-message latency of each tier's transport, seconds, added to every step of a
        collective that crosses the tier.
    """

    cards: int
    domains: int
    local_Bps: float
    local_latency_s: float
    remote_Bps: float = math.inf
    remote_latency_s: float = 0.0
    local_on_pcie: bool = False
    group_cards: int = 0
    tier2_Bps: float = math.inf
    tier2_latency_s: float = 0.0
    local_message_s: float = 0.0
    tier2_message_s: float = 0.0
    remote_message_s: float = 0.0

    @property
    def per_domain(self) -> int:
        return self.cards // self.domains

    @property
    def ring_Bps(self) -> float:
        """Rate of a ring over the group: its slowest hop."""
        return self.local_Bps if self.domains == 1 else min(self.local_Bps, self.remote_Bps)

    @property
    def latency_s(self) -> float:
        """Per-hop latency of a ring or recursive doubling: the slowest hop's."""
        return self.local_latency_s if self.domains == 1 else max(self.local_latency_s, self.remote_latency_s)


@dataclass(frozen=True, slots=True)
class LayoutLinks:
    """The links a layout's collectives cross: the attention group's all-reduce, the stage's
    all-reduce / all-to-all, and the slowest stage-to-stage send (``send_Bps`` per card)."""

    attention: GroupLinks
    stage: GroupLinks
    send_Bps: float = math.inf
    send_latency_s: float = 0.0


# ---------------------------------------------------------------------------- collectives


def alltoall_ranks_per_token(num_experts: int, experts_per_token: int, ep: int) -> float:
    """Expected number of *other* ranks one token is sent to, with its ``k`` distinct experts
    drawn uniformly among ``E`` spread evenly over ``ep`` ranks: ``(ep-1) * P(a rank holds one)``,
    ``P = 1 - C(E - E/ep, k) / C(E, k)``."""
    if ep <= 1:
        return 0.0
    per_rank = num_experts // ep
    miss = math.comb(num_experts - per_rank, experts_per_token) / math.comb(num_experts, experts_per_token)
    return (ep - 1) * (1.0 - miss)


def alltoall_bytes_per_card(tokens_per_card: float, hidden_size: int, activation_bytes: float,
                            num_experts: int, experts_per_token: int, ep: int) -> float:
    """Mean bytes one card sends in one dispatch (and receives in one combine)."""
    return tokens_per_card * alltoall_ranks_per_token(num_experts, experts_per_token, ep) * hidden_size \
        * activation_bytes


def alltoall_s(nbytes_per_card: float, links: GroupLinks, imbalance: float = 1.0,
               interconnect: str | None = None) -> float:
    """Time of one dispatch (or combine) moving ``nbytes_per_card`` per card on average.

    With ``interconnect`` (``engine.collectives: measured``) the time is the measured all-to-all
    curve of that interconnect (of the RDMA one, :func:`measured_interconnect`, when the group spans
    domains) for the busiest card's bytes; nccl-tests' size counts the share a card keeps too, so
    it is ``cards / (cards - 1)`` times the bytes sent (:mod:`kvsim.models.collective_curves`).
    Without one, the closed form below.

    Destinations are spread evenly over the other ``cards - 1`` ranks, so a share
    ``(per_domain - 1) / (cards - 1)`` stays in the card's domain and the rest crosses the NICs.
    Links work in parallel; the busiest decides (DeepEP reports dispatch time as bytes over its
    bottleneck link). A card on PCIe carries both shares on its PCIe link. The busiest rank
    receives ``imbalance`` times the mean.

    With supernode tiers (``links.group_cards``) the same shares over three tiers
    (:func:`alltoall_tier_bytes`), and the latency is the slowest crossed tier's plus its
    transport's per-message latency (the messages to all peers are in flight at once, so the
    all-to-all pays it once).
    """
    n = links.cards
    if n <= 1 or nbytes_per_card <= 0:
        return 0.0
    if interconnect is not None:
        curves = collective_curves()
        return curves.get(measured_interconnect(links, interconnect)).time_s(
            "all_to_all", nbytes_per_card * imbalance * n / (n - 1), n)
    if links.group_cards:
        return _tiered_alltoall_s(nbytes_per_card, links, imbalance)
    nbytes = nbytes_per_card * imbalance
    local = nbytes * (links.per_domain - 1) / (n - 1)
    remote = nbytes - local
    times = [(local + remote if links.local_on_pcie else local) / links.local_Bps]
    if remote > 0:
        times.append(remote / links.remote_Bps)
    return max(times) + links.latency_s


def _tier_shares(links: GroupLinks) -> tuple[float, float, float]:
    """Shares of a card's destinations in its own first-layer group, in the other groups of its
    domain (second layer), and in other domains (NICs): ``(g-1, d-g, n-d) / (n-1)``."""
    n, d = links.cards, links.per_domain
    g = min(links.group_cards, d)
    return (g - 1) / (n - 1), (d - g) / (n - 1), (n - d) / (n - 1)


def alltoall_tier_bytes(nbytes_per_card: float, links: GroupLinks) -> tuple[float, float, float]:
    """Bytes one card sends over its first layer, its second layer and the NICs in one dispatch
    of ``nbytes_per_card``, destinations spread evenly over the other ranks (tiers only)."""
    return tuple(nbytes_per_card * share for share in _tier_shares(links))  # type: ignore[return-value]


def _tiered_alltoall_s(nbytes_per_card: float, links: GroupLinks, imbalance: float) -> float:
    """All-to-all over tiers: each link's bytes over its rate, the busiest decides (links work in
    parallel), plus the slowest latency crossed, each with its transport's message term."""
    local, tier2, remote = _tier_shares(links)
    latencies = (links.local_latency_s + links.local_message_s, links.tier2_latency_s + links.tier2_message_s,
                 links.remote_latency_s + links.remote_message_s)
    nbytes = nbytes_per_card * imbalance
    # the card's own scale-up ports carry what goes to its group and what leaves it for the
    # second layer; the second layer's share carries the latter; the NICs the rest
    wire = [(local + tier2) * nbytes / links.local_Bps]
    if tier2 > 0:
        wire.append(tier2 * nbytes / links.tier2_Bps)
    if remote > 0:
        wire.append(remote * nbytes / links.remote_Bps)
    crossed = [k for k, share in enumerate((local, tier2, remote)) if share > 0]
    return max(wire) + max(latencies[k] for k in crossed)


def measured_interconnect(links: GroupLinks, local: str) -> str:
    """The measured curve a group's collectives follow: the card's own interconnect ``local``
    inside one fast domain (supernode tiers included), the data file's RDMA one across domains
    (nccl-tests across nodes measure the whole group, its intra-node steps included)."""
    return local if links.domains == 1 else collective_curves().between_domains


def group_allreduce_s(nbytes: float, links: GroupLinks, interconnect: str | None = None) -> float:
    """All-reduce of ``nbytes`` per card over the group, seconds.

    With ``interconnect`` (``engine.collectives: measured``): that interconnect's measured curve
    (:func:`measured_interconnect`; :mod:`kvsim.models.collective_curves`). Without one, without
    tiers: :func:`~kvsim.models.collectives.allreduce_s` on the slowest hop. With tiers,
    the cheaper of that flat algorithm (on the slowest tier crossed, each step paying its
    transport's message cost) and the hierarchical one: reduce-scatter inside each first-layer
    group, all-reduce of the ``1/g`` shards across the groups of a domain (every card in parallel
    with its peers of the same index), the same again across domains, then all-gather back
    (Thakur, Rabenseifner and Gropp 2005's reduce-scatter + all-gather decomposition applied per
    level, as NCCL's and Horovod's hierarchical all-reduce do; Jia et al., "Highly Scalable Deep
    Learning Training System with Mixed-Precision", arXiv:1807.11205, section 3.3)::

        t = sum over lower levels l of [2 (k_l - 1) (a_l + o_l) + 2 (k_l - 1) / k_l * n_l / B_l]
            + allreduce(n_top, k_top, a_top + o_top, B_top),     n_(l+1) = n_l / k_l
    """
    if interconnect is not None:
        return collective_curves().get(measured_interconnect(links, interconnect)).time_s(
            "all_reduce", nbytes, links.cards)
    if not links.group_cards:
        return allreduce_s(nbytes, links.cards, links.latency_s, links.ring_Bps)
    if links.cards <= 1:
        return 0.0
    d = links.per_domain
    g = min(links.group_cards, d)
    levels = [(g, links.local_latency_s + links.local_message_s, links.local_Bps),
              (d // g, links.tier2_latency_s + links.tier2_message_s, links.tier2_Bps),
              (links.domains, links.remote_latency_s + links.remote_message_s, links.remote_Bps)]
    levels = [level for level in levels if level[0] > 1]
    flat = allreduce_s(nbytes, links.cards, max(a for _, a, _ in levels), min(b for _, _, b in levels))
    hierarchical, n = 0.0, nbytes
    for k, a, b in levels[:-1]:
        hierarchical += 2 * (k - 1) * a + 2 * (k - 1) / k * n / b
        n /= k
    k, a, b = levels[-1]
    return min(flat, hierarchical + allreduce_s(n, k, a, b))


def expert_imbalance(num_experts: int, ep: int, skew: float) -> float:
    """Busiest rank's routed load over the mean, for Zipf-skewed routing.

    Expert ``i`` (by popularity) takes a share ``(i+1)^-skew`` of the routed slots (normalised);
    experts are dealt round-robin over the ``ep`` ranks in popularity order (the placement a
    static balancer gives: each rank gets one of the hottest ``ep``, one of the next ``ep``...).
    ``skew`` 0 is uniform routing (1.0).
    """
    if ep <= 1 or skew == 0:
        return 1.0
    shares = [math.pow(i + 1, -skew) for i in range(num_experts)]
    total = sum(shares)
    busiest = max(sum(shares[r::ep]) for r in range(ep))
    return busiest / total * ep


def stage_send_bytes_per_card(tokens: float, hidden_size: int, activation_bytes: float, tp: int) -> float:
    """Bytes each card of a stage sends to the next stage for ``tokens`` tokens."""
    return tokens * hidden_size * activation_bytes / tp


def p2p_send_s(nbytes: float, bandwidth_Bps: float, latency_s: float) -> float:
    """Time of one point-to-point send."""
    return nbytes / bandwidth_Bps + latency_s if nbytes > 0 else 0.0


def bubble_fraction(pp: int, micro_batches: int) -> float:
    """Idle share of a flushed pipeline: ``(p-1) / (m+p-1)``."""
    return (pp - 1) / (micro_batches + pp - 1)


def pipeline_time_s(stage_s: float, pp: int, micro_batches: int, schedule: PipelineSchedule) -> float:
    """Time of one engine iteration of ``micro_batches`` micro-batches through ``pp`` stages of
    ``stage_s`` each (see the module docstring)."""
    if schedule == "flush":
        return (micro_batches + pp - 1) * stage_s
    return micro_batches * stage_s


# ---------------------------------------------------------------------------- memory per card


def layer_params(model: ModelSpec) -> tuple[float, float, float]:
    """(attention + norms, non-expert feed-forward, routed experts) params of the whole model's
    layers."""
    h = model.hidden_size
    attention = model.num_layers * (model.attention_params_per_layer + 2 * h)
    moe = model.moe
    if moe is None:
        return attention, model.num_layers * 3.0 * h * model.intermediate_size, 0.0
    dense = moe.first_dense_layers * 3.0 * h * model.intermediate_size
    shared = model.num_moe_layers * (moe.shared_experts * model.expert_params
                                     + h * moe.num_experts + (moe.num_experts if moe.router_bias else 0))
    routed = model.num_moe_layers * moe.num_experts * model.expert_params
    return attention, dense + shared, routed


def weight_bytes_per_card(model: ModelSpec, layout: Layout, dtype: str,
                          weight_dtypes: dict[str, str] | None = None) -> float:
    """Weight bytes on the busiest card (the stage with most layers, holding the embedding and
    the lm_head too: an upper bound that is exact for ``pp`` 1).

    Attention is split over the attention group (replicated per attention rank); dense
    feed-forward and shared experts over the stage, as are the routed experts (whole experts
    with ``ep``, slices without: the same bytes per card). ``weight_dtypes`` stores weight
    groups in other formats than ``dtype`` (:data:`~kvsim.models.llm.WEIGHT_GROUPS`).
    """
    if layout.plain_tp:
        return model.weight_bytes(dtype, weight_dtypes) / layout.tp
    b = {group: DTYPE_BYTES[(weight_dtypes or {}).get(group, dtype)] for group in WEIGHT_GROUPS}
    attention, ffn, routed = layer_params(model)
    share = max(stage_layers(model.num_layers, layout.pp)) / model.num_layers
    lm_head = 0 if model.tie_word_embeddings else model.embedding_params
    ends = model.embedding_params * b["embedding"] + lm_head * b["lm_head"] + model.hidden_size * b["attention"]
    per_stage = (attention * b["attention"] / layout.attention_tp
                 + (ffn * b["feed_forward"] + routed * b["experts"]) / layout.tp)
    return share * per_stage + ends / layout.tp


def kv_bytes_per_token_per_card(model: ModelSpec, layout: Layout, kv_dtype: str) -> float:
    """KV bytes one token of a sequence occupies on each card holding it: a card of the
    sequence's attention group, in the stage with most layers."""
    share = max(stage_layers(model.num_layers, layout.pp)) / model.num_layers
    per = model.kv_bytes_per_token(kv_dtype, layout.attention_tp)
    return per if layout.pp == 1 else per * share


def candidate_layouts(model: ModelSpec, cards: int) -> list[Layout]:
    """Every valid layout of at most ``cards`` cards whose size divides ``cards``: ``tp`` and
    ``pp`` powers of two, ``ep`` in {1, tp}, ``dp_attention`` 1 or ``tp`` (with ``ep``)."""
    out = []
    tp = 1
    while tp <= cards:
        pp = 1
        while tp * pp <= cards:
            if cards % (tp * pp) == 0:
                variants = [Layout(tp, pp)]
                if model.moe is not None and tp > 1:
                    variants += [Layout(tp, pp, ep=tp), Layout(tp, pp, ep=tp, dp_attention=tp)]
                out += [lay for lay in variants if not layout_problems(lay, model)]
            pp *= 2
        tp *= 2
    return out
