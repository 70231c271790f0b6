"""Supernode tiers: a scale-up fabric of one or two switch layers (``scale_up:`` of a system).

A *first-layer group* is ``tiers[0].nodes`` nodes whose cards hang off one scale-up switch (a UB
or NVLink switch domain); a second layer joins ``tiers[1].nodes / tiers[0].nodes`` such groups
into one *addressing domain* of ``tiers[1].nodes`` nodes. Huawei's UB (灵衢) networking for the
Atlas 850E is single-layer for 32, 64 or 96 nodes and two-layer up to 768 (industry newsletter,
2026-09-21, reporting the Atlas 850 / 850E launch; /work/shared/reference/hardware_facts.md,
"Reported in September 2026", M).

Each tier gives the per-card bandwidth per direction of its links, the card-to-card latency of a
copy that crosses it, and (second layer) the oversubscription of the group switches' uplinks: a
group of ``c`` cards reaches the second layer at ``c x bandwidth / oversubscription``. In the
cluster graph (:mod:`kvsim.network.cluster_graph`) that is one leaf-spine edge per group and
direction, shared through the flow network; in the closed-form collectives
(:mod:`kvsim.models.parallel`) it is one card's share, ``bandwidth / oversubscription``.

*Transport.* Each tier moves data either by memory semantics (the card issues loads and stores
to a peer's memory, as UB's unified addressing allows) or by message passing (a send posted to a
queue, a doorbell, a completion the receiver polls for, as RDMA verbs). The difference is a
per-message latency added to every step of a collective that crosses the tier (the alpha of the
alpha-beta model grows by it; messages to different peers are in flight together, so an
all-to-all pays it once and a ring all-reduce once per step). It weighs on small decode-time
all-to-alls, whose time is mostly latency, and vanishes against large ones. Huawei reports
memory-semantic collectives 1.6x faster than message passing in its 1,024-card scale-up domain,
"more for small packets" (newsletter above, M); the two figures below are assumptions sized to
that claim, not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from kvsim.hardware.specs import AcceleratorSpec
from kvsim.spec_types import Bandwidth, FrozenSpec, PositiveInt, Seconds

__all__ = [
    "Transport", "ScaleUpTierSpec", "ScaleUpSpec", "Tier", "resolve_tiers", "card_tiers", "tiers_latency_problem", "MESSAGE_S",
    "MEMORY_SEMANTIC_MESSAGE_S", "MESSAGE_PASSING_MESSAGE_S", "MAX_TIERS",
]

Transport = Literal["memory_semantic", "message_passing"]

# ASSUMPTION: one message by memory semantics is a burst of stores to a peer's address and a
# flag: 0.5 us on top of the tier's link latency (the SuperPoD's 3 us RTT is the link's).
MEMORY_SEMANTIC_MESSAGE_S = 0.5e-6
# ASSUMPTION (derived from Huawei's claim): a collective library's send adds a work request, a
# doorbell, a completion and the receiver's poll. 6.8 us is the figure that makes a
# latency-bound collective step (kvsim's default 10 us per-hop collective latency,
# EfficiencySpec.collective_latency_s) 1.6x as long as by memory semantics:
# (10 + 6.8) / (10 + 0.5) = 1.6 (newsletter 2026-09-21, M). Larger messages approach 1x, so kvsim's
# ratio is at most the reported 1.6x where Huawei says small packets gain more: conservative.
MESSAGE_PASSING_MESSAGE_S = 6.8e-6
MESSAGE_S: dict[str, float] = {"memory_semantic": MEMORY_SEMANTIC_MESSAGE_S,
                               "message_passing": MESSAGE_PASSING_MESSAGE_S}

MAX_TIERS = 2
"""A first layer and a second (UB networking is single- or two-layer, newsletter above)."""


class ScaleUpTierSpec(FrozenSpec):
    """One layer of a system's scale-up fabric.

    Attributes
    ----------
    nodes : int
        Nodes one group of this tier joins: the first layer's groups (32, 64 or 96 nodes on UB),
        the second layer's addressing domain (up to 768 on UB), a multiple of the first's.
    bandwidth : float, optional
        Per card and direction through this tier, bytes/s. Default: the card's
        ``scale_up_bandwidth`` (the card's ports run at one rate through both layers).
    latency : float, optional
        Card to card across this tier, seconds. Default: the card's ``scale_up_latency_s`` (for
        the Atlas 850E that is the 3 us quoted for the 1,024-card SuperPoD, which at 128 nodes
        needs both layers); a second layer's default is never below the first layer's.
    oversubscription : float
        Second layer only: a group's cards over its uplinks' capacity (2: a group reaches the
        second layer at half its cards' bandwidth). 1 (default): non-blocking.
    transport : str
        ``memory_semantic`` (default; load/store to unified addresses) or ``message_passing``.
    message_overhead : float, optional
        Sender's cost of one message on this tier, seconds. Default: the transport's
        (:data:`MESSAGE_S`, assumptions).
    """

    nodes: PositiveInt
    bandwidth: Bandwidth | None = None
    latency: Seconds | None = None
    oversubscription: float = Field(default=1.0, ge=1.0, allow_inf_nan=False)
    transport: Transport = "memory_semantic"
    message_overhead: Seconds | None = None


class ScaleUpSpec(FrozenSpec):
    """A system's scale-up fabric as tiers (first layer, then second); replaces
    ``scale_up_domain_nodes`` (one tier of ``N`` nodes with the card's figures is that)."""

    tiers: list[ScaleUpTierSpec] = Field(min_length=1)

    def problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Problems of the tiers on their own, as ``(field path below scale_up, message)``."""
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if len(self.tiers) > MAX_TIERS:
            problems.append((("tiers",), f"{len(self.tiers)} tiers given; kvsim models a first layer and a "
                                         f"second (at most {MAX_TIERS})"))
            return problems
        first = self.tiers[0]
        if first.oversubscription != 1.0:
            problems.append((("tiers", 0, "oversubscription"), "the first layer joins each card to its group's "
                             "switch; oversubscription applies to a second layer's uplinks"))
        if len(self.tiers) == 2:
            second = self.tiers[1]
            if second.nodes <= first.nodes or second.nodes % first.nodes:
                problems.append((("tiers", 1, "nodes"), f"{second.nodes} must be a multiple of the first "
                                 f"layer's {first.nodes} nodes, larger than it (the second layer joins whole groups)"))
            if second.latency is not None and first.latency is not None and second.latency < first.latency:
                problems.append((("tiers", 1, "latency"), f"{second.latency * 1e6:g} us is below the first "
                                 f"layer's {first.latency * 1e6:g} us; crossing the second layer adds switch hops"))
        return problems

    def system_problems(self, given: set[str]) -> list[tuple[tuple[str | int, ...], str]]:
        """Problems as the system (which set the fields ``given``) sees them: paths below it."""
        if "scale_up_domain_nodes" in given:
            return [(("scale_up_domain_nodes",), "give scale_up: {tiers: [...]} or scale_up_domain_nodes, not "
                                                 "both (one tier of N nodes is scale_up_domain_nodes: N)")]
        return [(("scale_up",) + path, message) for path, message in self.problems()]

    @property
    def domain_nodes(self) -> int:
        """Nodes of one addressing domain (the top tier's groups)."""
        return self.tiers[-1].nodes

    @property
    def group_nodes(self) -> int:
        """Nodes of one first-layer group."""
        return self.tiers[0].nodes


@dataclass(frozen=True, slots=True)
class Tier:
    """One tier resolved against a card: nominal figures (before any efficiency derate).

    Attributes
    ----------
    nodes : int
    card_Bps : float
        Per card and direction, bytes/s, before oversubscription.
    latency_s : float
        Card to card across this tier, seconds.
    oversubscription : float
    message_s : float
        Sender's cost of one message, seconds.
    """

    nodes: int
    card_Bps: float
    latency_s: float
    oversubscription: float
    message_s: float

    @property
    def share_Bps(self) -> float:
        """One card's share of the tier when every card of its group uses it, bytes/s."""
        return self.card_Bps / self.oversubscription


def resolve_tiers(spec: ScaleUpSpec, scale_up_bandwidth: float, scale_up_latency_s: float) -> tuple[Tier, ...]:
    """The tiers of ``spec`` with the card's figures filled in where the spec gives none.

    Parameters
    ----------
    spec : ScaleUpSpec
    scale_up_bandwidth : float
        The card's scale-up link, bytes/s per direction.
    scale_up_latency_s : float
        The card's card-to-card latency over it, seconds.
    """
    out: list[Tier] = []
    for tier in spec.tiers:
        latency_s = tier.latency if tier.latency is not None else scale_up_latency_s
        if out and tier.latency is None:
            latency_s = max(latency_s, out[-1].latency_s)  # never faster than the layer below
        out.append(Tier(nodes=tier.nodes,
                        card_Bps=tier.bandwidth if tier.bandwidth is not None else scale_up_bandwidth,
                        latency_s=latency_s,
                        oversubscription=tier.oversubscription,
                        message_s=tier.message_overhead if tier.message_overhead is not None
                        else MESSAGE_S[tier.transport]))
    return tuple(out)


def card_tiers(scale_up: ScaleUpSpec, accelerator: AcceleratorSpec) -> tuple[Tier, ...]:
    """``scale_up``'s tiers with ``accelerator``'s scale-up figures where the tiers give none (its
    latency, or :data:`~kvsim.network.cluster_graph.SCALE_UP_LATENCY_S` when the catalog has none)."""
    from kvsim.network.cluster_graph import SCALE_UP_LATENCY_S  # (that module builds on this one)

    if accelerator.scale_up_bandwidth is None:
        raise ValueError(f"{accelerator.name} has no scale-up link (NVLink, UB), so it cannot join supernode tiers")
    latency = accelerator.scale_up_latency_s if accelerator.scale_up_latency_s is not None else SCALE_UP_LATENCY_S
    return resolve_tiers(scale_up, accelerator.scale_up_bandwidth, latency)


def tiers_latency_problem(scale_up: ScaleUpSpec, accelerator: AcceleratorSpec) -> str | None:
    """Why the second tier's latency is impossible on ``accelerator`` (below the first's, which
    may be the card's own), or None."""
    if len(scale_up.tiers) < 2:
        return None
    first, second = card_tiers(scale_up, accelerator)
    if second.latency_s >= first.latency_s:
        return None
    return (f"{second.latency_s * 1e6:g} us is below the first layer's {first.latency_s * 1e6:g} us "
            f"({accelerator.name}'s scale_up_latency_s unless given); crossing the second layer adds switch hops")
