"""The links a layout's collectives cross, from the hardware it spans.

An instance fills its pool's nodes in order (see :func:`kvsim.sim.build._placements`), so its
``tp x pp`` cards start on a node boundary, or at a multiple of their count inside one node. A
*fast domain* is what cards reach without the NICs: a scale-up domain
(``scale_up_domain_nodes`` nodes whose cards share NVLink / UB), or, for cards without a
scale-up link, one node over PCIe (the same assumption the step model always made for TP on
such cards). Across domains a collective goes over RDMA; a card's share of it is its node's NIC
line rate times :data:`~kvsim.models.parallel.RDMA_EFFICIENCY`, divided among the group's
cards on that node. The figures use the same constants as the topology graph
(:mod:`kvsim.network.cluster_graph`).

With supernode tiers (a system's ``scale_up:``, :mod:`kvsim.network.tiers`) the fast domain is the
top tier's addressing domain and a group carries three sets of figures: inside a first-layer group
(the first tier's bandwidth x ``efficiency.interconnect``, the card's collective latency), across
the domain's groups (the second tier's bandwidth / oversubscription x the same derate; latency
plus the second tier's extra over the first), and across domains (the NICs, as without tiers),
each with its transport's per-message cost (RDMA's across NICs). Instances are assumed aligned to
first-layer groups, as they are to domains.
"""

from __future__ import annotations

import math

from kvsim.hardware import AcceleratorSpec, NodeSpec
from kvsim.models.parallel import RDMA_EFFICIENCY, GroupLinks, Layout, LayoutLinks
from kvsim.network.cluster_graph import PCIE_HOP_LATENCY_S, RDMA_LATENCY_S
from kvsim.network.tiers import MESSAGE_PASSING_MESSAGE_S, ScaleUpSpec, Tier, card_tiers

__all__ = ["domain_cards", "layout_links"]


def domain_cards(node: NodeSpec, accelerator: AcceleratorSpec, scale_up_domain_nodes: int) -> int:
    """Cards of one fast domain: a scale-up domain, or one node when cards have no scale-up link."""
    if accelerator.scale_up_bandwidth is None:
        return node.accelerators_per_node
    return node.accelerators_per_node * scale_up_domain_nodes


def _group(cards: int, node: NodeSpec, acc: AcceleratorSpec, domain: int,
           tiers: tuple[Tier, ...] | None = None) -> GroupLinks:
    eff = acc.efficiency
    on_pcie = acc.scale_up_bandwidth is None
    local = acc.peer_bandwidth * eff.interconnect
    domains = max(1, math.ceil(cards / domain))
    on_node = min(cards, node.accelerators_per_node)
    nic_Bps = node.nics.count * node.nics.bandwidth * RDMA_EFFICIENCY
    # a fabric crossing: NIC to NIC, plus the PCIe hops card -> switch -> NIC on both sides
    remote_latency = eff.collective_latency_s + RDMA_LATENCY_S + 4 * PCIE_HOP_LATENCY_S
    remote_Bps = nic_Bps / on_node if nic_Bps > 0 else 0.0
    if tiers is None:
        return GroupLinks(cards=cards, domains=domains, local_Bps=local, local_latency_s=eff.collective_latency_s,
                          remote_Bps=remote_Bps, remote_latency_s=remote_latency, local_on_pcie=on_pcie)
    first, top = tiers[0], tiers[-1]
    return GroupLinks(cards=cards, domains=domains, local_Bps=first.card_Bps * eff.interconnect,
                      local_latency_s=eff.collective_latency_s, remote_Bps=remote_Bps,
                      remote_latency_s=remote_latency, group_cards=min(cards, first.nodes * node.accelerators_per_node),
                      tier2_Bps=top.share_Bps * eff.interconnect,
                      tier2_latency_s=eff.collective_latency_s + top.latency_s - first.latency_s,
                      local_message_s=first.message_s, tier2_message_s=top.message_s,
                      remote_message_s=MESSAGE_PASSING_MESSAGE_S)


def layout_links(layout: Layout, node: NodeSpec, accelerator: AcceleratorSpec,
                 scale_up_domain_nodes: int, scale_up: ScaleUpSpec | None = None) -> LayoutLinks:
    """Link figures for ``layout`` on ``node`` cards: the attention group, the stage, and the
    slowest stage-to-stage send (over the NICs when any stage boundary is a domain boundary;
    with tiers, over the second layer when one is a first-layer group's boundary).

    ``scale_up_domain_nodes`` is the domain's nodes (with ``scale_up``, its top tier's)."""
    domain = domain_cards(node, accelerator, scale_up_domain_nodes)
    tiers = card_tiers(scale_up, accelerator) if scale_up is not None else None
    attention = _group(layout.attention_tp, node, accelerator, domain, tiers)
    stage = _group(layout.tp, node, accelerator, domain, tiers)
    if layout.pp == 1:
        return LayoutLinks(attention=attention, stage=stage)
    crosses = any((k * layout.tp) % domain == 0 for k in range(1, layout.pp))
    group = tiers[0].nodes * node.accelerators_per_node if tiers is not None else domain
    if not crosses and any((k * layout.tp) % group == 0 for k in range(1, layout.pp)):
        return LayoutLinks(attention=attention, stage=stage, send_Bps=stage.tier2_Bps,
                           send_latency_s=stage.tier2_latency_s + stage.tier2_message_s)
    if crosses:
        remote = _group(layout.cards, node, accelerator, domain)
        senders = min(layout.tp, node.accelerators_per_node)  # cards of a stage on one node share its NICs
        send_Bps = node.nics.count * node.nics.bandwidth * RDMA_EFFICIENCY / senders
        return LayoutLinks(attention=attention, stage=stage, send_Bps=send_Bps,
                           send_latency_s=remote.remote_latency_s)
    return LayoutLinks(attention=attention, stage=stage, send_Bps=stage.local_Bps,
                       send_latency_s=stage.local_latency_s)
