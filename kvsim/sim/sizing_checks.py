"""Checks of a sized system as a whole, before it is built: scale-up domains and tiers tile its
linked nodes, peer HBM access is one the cache models, disaggregated pools can hand off over NICs
or scale-up links, and a controller has the instances its minimums ask for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.network.tiers import tiers_latency_problem
from kvsim.scenario.schema import SystemSpec
from kvsim.yaml_io import Path

if TYPE_CHECKING:
    from kvsim.sim.sizing import PoolSizing

__all__ = ["SizingError", "check_system"]


class SizingError(Exception):
    """A configuration that cannot run; ``path`` is the scenario field to blame."""

    def __init__(self, path: Path, message: str):
        self.path = path
        self.message = message
        super().__init__(message)


def check_system(name: str, system: SystemSpec, pools: tuple[PoolSizing, ...]) -> None:
    """Raise :class:`SizingError` for the first problem of system ``name`` as a whole."""
    _check_domains(name, system, pools)
    _check_handoff_nics(name, system, pools)
    _check_controller_minimums(name, system, pools)


def _check_controller_minimums(name: str, system: SystemSpec, pools: tuple[PoolSizing, ...]) -> None:
    """A controller keeps ``min_prefill`` prefill and ``min_decode`` decode instances in service; the
    two must fit in the system's instances (every one of which may switch role), or the run would
    start below a minimum it can never reach, and the controller would move nothing."""
    control = system.controller
    if control is None or control.kind == "static":
        return
    total = sum(pool.instances for pool in pools)
    if control.min_prefill + control.min_decode <= total:
        return
    blamed = "min_decode" if "min_decode" in control.model_fields_set and "min_prefill" not in control.model_fields_set \
        else "min_prefill"
    other = "min_prefill" if blamed == "min_decode" else "min_decode"
    room = total - getattr(control, other)
    raise SizingError(("systems", name, "controller", blamed), (
        f"{blamed} {getattr(control, blamed)} with {other} {getattr(control, other)} needs "
        f"{control.min_prefill + control.min_decode} instances; the system has {total}, every one of which may "
        f"switch role: give {blamed} at most {room}" if room >= 1 else
        f"{blamed} {getattr(control, blamed)} with {other} {getattr(control, other)} needs "
        f"{control.min_prefill + control.min_decode} instances; the system has {total}: lower {other}"))


def _check_handoff_nics(name: str, system: SystemSpec, pools: tuple[PoolSizing, ...]) -> None:
    """A disaggregated system hands every prompt's KV from a prefill node to a decode node: a node
    with no NIC and no scale-up link could not send or receive it."""
    roles = {pool.role for pool in pools}
    if not {"prefill", "decode"} <= roles:
        return
    multi_node_domains = system.domain_nodes > 1  # a peer copy over scale-up links may span nodes
    for pool in pools:
        if pool.node.nics.count < 1 and not (multi_node_domains and pool.accelerator.scale_up_bandwidth is not None):
            raise SizingError(("systems", name) + system.pool_path(pool.name) + ("node",), (
                f"node {pool.node.name} has no NICs (nics.count: 0) and no scale-up domain spans nodes "
                f"(scale_up_domain_nodes): the {pool.role} pool could not hand KV between prefill and decode "
                f"instances"))


def _check_domains(name: str, system: SystemSpec, pools: tuple[PoolSizing, ...]) -> None:
    """Refuse scale-up domains that do not tile the system's linked nodes, and peer HBM access
    the cache does not model (see :mod:`kvsim.serving.cache.access`)."""
    per = system.domain_nodes
    linked = sum(p.spec.nodes for p in pools if p.accelerator.scale_up_bandwidth is not None)
    tiers = system.scale_up
    where: tuple[str | int, ...] = ("systems", name, "scale_up_domain_nodes") if tiers is None else \
        ("systems", name, "scale_up", "tiers", len(tiers.tiers) - 1, "nodes")
    if (per > 1 or tiers is not None) and linked == 0:
        raise SizingError(where[:3], "no card of this system has a scale-up link (NVLink, UB), so its nodes "
                                     f"cannot share a scale-up domain: remove {where[2]}")
    for pool in pools if tiers is not None else ():
        problem = tiers_latency_problem(tiers, pool.accelerator) \
            if tiers is not None and pool.accelerator.scale_up_bandwidth is not None else None
        if problem:
            raise SizingError(where[:3] + ("tiers", 1, "latency"), problem)
    if per > linked > 0:
        raise SizingError(where, f"a domain of {per} nodes is larger than the {linked} node(s) with scale-up "
                                 "links it would span")
    if linked and linked % per:
        raise SizingError(where, f"{per} does not divide the {linked} nodes with scale-up links: every "
                                 "domain must be whole")
    cache = system.kv_cache
    if cache is None or cache.peer_hbm == "none":
        return
    where = ("systems", name, "kv_cache", "peer_hbm")
    caching = [p for p in pools if p.role != "decode" or system.may_switch(p.spec)]
    if cache.peer_hbm == "read_in_place":
        for pool in caching:
            if pool.accelerator.scale_up_bandwidth is None:
                raise SizingError(where, (
                    f"read_in_place reads a peer's HBM over scale-up links (NVLink, UB), but {pool.accelerator.name} "
                    f"(pool {pool.name}) has none ({pool.accelerator.host_link}): use copy_in, or cards with a "
                    "scale-up link"))
            if pool.links is not None:
                raise SizingError(where, (
                    f"read_in_place is modelled for plain tensor-parallel instances inside one node; pool "
                    f"{pool.name} runs {pool.layout.label()}: use copy_in"))
        if any(system.may_switch(p.spec) for p in pools):
            raise SizingError(where, "read_in_place with a controller that switches roles is not modelled "
                                     "(a switching instance's HBM would leave the shared pool): use copy_in")
        pages = {p.spec.instance.block_size_tokens for p in caching}
        if len(pages) > 1:
            # one domain store counts every member's blocks in one size of pages
            raise SizingError(where, "read_in_place makes the caching pools' HBM one store, which needs one engine "
                                     "page size (instance.block_size_tokens); pools " + ", ".join(
                                         f"{p.name} ({p.spec.instance.block_size_tokens} tokens)" for p in caching)
                              + " differ: give them the same, or use copy_in")
    shapes = {(p.layout.cards, p.kv_bytes_per_token_per_card) for p in caching}
    if len(shapes) > 1:
        raise SizingError(where, "peer HBM access needs every caching pool to have the same cards per instance "
                                 "and KV bytes per card (a block's shares must line up card by card); pools "
                                 + ", ".join(f"{p.name} ({p.layout.label()})" for p in caching) + " differ")
    offset = 0
    for pool in pools:
        per_node = pool.node.accelerators_per_node
        if pool.accelerator.scale_up_bandwidth is None:
            continue
        span = pool.layout.cards // per_node  # nodes one instance spans (0: inside one node)
        if span > 1 and any(pool is p for p in caching):
            for i in range(pool.instances):
                first, last = offset + i * span, offset + (i + 1) * span - 1
                if first // per != last // per:
                    raise SizingError(where, (
                        f"instance {i} of pool {pool.name} ({pool.layout.label()}, {span} nodes) spans two scale-up "
                        f"domains of {per} node(s): peer HBM access needs each instance inside one addressing "
                        "domain (raise scale_up_domain_nodes to a multiple of the instance's nodes)"))
        offset += pool.spec.nodes
