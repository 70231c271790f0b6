"""Sizing a system before it runs: instances, weights per card, KV capacity.

Every check that needs the model and the hardware together lives here and runs before the
simulation starts, so a configuration that cannot work is refused with a clear message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kvsim.backend import Kernels
from kvsim.hardware import AcceleratorSpec, NodeSpec, PoolNodeSpec
from kvsim.models import ModelSpec
from kvsim.models.collective_curves import interconnect_for
from kvsim.models.early_exit_step import EarlyExitStepTime, ExitProblem, exit_sizing
from kvsim.models.engine import EngineSpec
from kvsim.models.layout_step import LayoutStepTime
from kvsim.models.lora import adapter_bytes, adapter_problems
from kvsim.models.memory import activation_reserve_bytes, loaded_extra_bytes_per_card
from kvsim.models.parallel import Layout, LayoutLinks, layout_problems, weight_bytes_per_card
from kvsim.models.parallel import kv_bytes_per_token_per_card as layout_kv_bytes_per_token_per_card
from kvsim.models.step_time import RooflineStepTime
from kvsim.models.weight_offload import PoolHome, WeightStream, offload_sizing
from kvsim.scenario.load import Catalogs
from kvsim.scenario.schema import ScenarioSpec, SystemSpec
from kvsim.serving.specs import PoolSpec
from kvsim.sim.layout_links import layout_links
from kvsim.sim.sizing_checks import SizingError, check_system
from kvsim.units import format_quantity
from kvsim.yaml_io import dotted_path

__all__ = ["SizingError", "PoolSizing", "SystemSizing", "size_system", "size_pool", "pool_layout"]


@dataclass(frozen=True)
class PoolSizing:
    """One pool of a system, sized: instances, weights and KV capacity.

    Byte figures are per card; token figures per instance. ``kv_bytes_per_token_per_card`` is
    what a transfer moves per card of the instance for one token (a token's KV spread over all
    its cards); with data-parallel attention or pipeline stages a card holding the token holds
    more (:func:`kvsim.models.parallel.kv_bytes_per_token_per_card`). ``links`` are the link
    figures of the layout's collectives (None: tensor parallelism inside one node, costed on
    the card's peer link as always).
    """

    name: str
    spec: PoolSpec
    node: NodeSpec
    accelerator: AcceleratorSpec
    model: ModelSpec
    dtype: str
    kv_dtype: str
    instances: int
    weight_bytes_per_card: float
    kv_budget_bytes_per_card: float
    kv_bytes_per_token_per_card: float
    kv_blocks_per_instance: int
    engine: EngineSpec
    weight_dtypes: dict[str, str] = field(default_factory=dict)
    compute_dtype: str = ""  # the format matmuls run in ("": dtype)
    layout: Layout = Layout()
    links: LayoutLinks | None = None
    stream: WeightStream | None = None  # weights kept off the card, streamed every iteration
    weights_in_pool_bytes: float = 0.0  # one copy of them in the remote pool (weight_offload.home: pool)

    @property
    def role(self) -> str:
        """The pool's role, or ``split`` when its instances start in different roles."""
        return self.spec.role if self.spec.roles is None else "split"

    @property
    def initial_roles(self) -> list[str]:
        return self.spec.initial_roles(self.instances)

    @property
    def tp(self) -> int:
        return self.spec.instance.tp

    @property
    def contends(self) -> bool:
        """Its weights stream through the flow network (``weight_offload.contend``)."""
        return self.stream is not None and self.stream.contend

    @property
    def cards(self) -> int:
        return self.instances * self.layout.cards

    @property
    def kv_tokens_per_instance(self) -> int:
        return self.kv_blocks_per_instance * self.spec.instance.block_size_tokens

    def step_model(self, kernels: Kernels | None = None, exit_rng: np.random.Generator | None = None
                   ) -> RooflineStepTime | EarlyExitStepTime | LayoutStepTime:
        """The instance's step-time model: the plain roofline for tensor parallelism inside one
        node (with ``engine.early_exit``, its early-exit form, each decode step's depth drawn from
        ``exit_rng``; without one, expected times only), the layout model otherwise."""
        inst = self.spec.instance
        captured = self.engine.captured_tokens(inst.max_num_seqs, inst.max_batched_tokens)
        if self.links is None:
            roofline = kernels.step_time.RooflineStepTime if kernels is not None else RooflineStepTime
            exits = self.engine.early_exit  # (it applies the stream itself)
            # (roofline: the backend's copy of the class)
            step: RooflineStepTime = roofline(self.model, self.accelerator, self.tp, self.dtype, self.kv_dtype, self.engine,
                            self.weight_dtypes, self.compute_dtype or None, captured, None if exits is not None else self.stream)
            return step if exits is None else EarlyExitStepTime(exits, step, self.stream, exit_rng)
        return LayoutStepTime(self.model, self.accelerator, self.layout, self.links, self.dtype, self.kv_dtype,
                              inst.micro_batches, inst.pp_schedule, inst.expert_skew, self.engine,
                              self.weight_dtypes, self.compute_dtype or None, captured)

    def _layout_text(self) -> str:
        text = f"tp={self.tp}" if self.layout.plain_tp else self.layout.label()
        stream = self.stream
        if stream is not None:
            home = "the remote pool" if stream.home == "pool" else "host DRAM"
            text += f" ({stream.what()} streamed from {home})"
        return text

    def describe(self) -> str:
        """One line: hardware, layout and KV capacity."""
        return (f"{self.spec.nodes} x {self.node.name} = {self.cards} x {self.accelerator.name} as "
                f"{self.instances} {self.role} instance(s) of {self._layout_text()}: "
                f"{format_quantity(self.weight_bytes_per_card, 'bytes')} weights/card, KV pool "
                f"{format_quantity(self.kv_budget_bytes_per_card, 'bytes')}/card = "
                f"{self.kv_tokens_per_instance:,} tokens/instance")


@dataclass(frozen=True)
class SystemSizing:
    """Everything derived from a system's spec before the run: its pools, sized."""

    name: str
    spec: SystemSpec
    model: ModelSpec
    dtype: str
    kv_dtype: str
    pools: tuple[PoolSizing, ...]
    pool_node: PoolNodeSpec | None = None

    @property
    def weights_in_pool_bytes(self) -> float:
        """Bytes of offloaded weights the remote pool holds: one copy, the largest offload of the
        system's pools (a smaller share's coldest experts or last layers are among a larger's)."""
        return max((p.weights_in_pool_bytes for p in self.pools), default=0.0)

    @property
    def pool_kv_bytes_per_node(self) -> float:
        """KV bytes each remote pool node holds: its capacity less its share of the offloaded
        weights kept in the pool (0: no remote pool)."""
        remote = self.spec.kv_cache.remote if self.spec.kv_cache is not None else None
        if self.pool_node is None or remote is None:
            return 0.0
        return self.pool_node.capacity_bytes - self.weights_in_pool_bytes / remote.nodes

    @property
    def instances(self) -> int:
        return sum(p.instances for p in self.pools)

    @property
    def cards(self) -> int:
        return sum(p.cards for p in self.pools)

    @property
    def disaggregated(self) -> bool:
        return self.spec.disaggregated

    def pool(self, name: str) -> PoolSizing:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(f"system {self.name!r} has no pool {name!r}")


def size_system(spec: ScenarioSpec, name: str, catalogs: Catalogs) -> SystemSizing:
    """Size every pool of system ``name``; raise :class:`SizingError` if one cannot run."""
    system = spec.systems[name]
    model = catalogs.models[spec.system_model(name)]
    dtype, kv_dtype = spec.system_dtype(name), spec.system_kv_dtype(name)
    pools = tuple(_size_pool(spec, name, pool_name, pool, model, dtype, kv_dtype, catalogs)
                  for pool_name, pool in system.pool_specs().items())
    check_system(name, system, pools)
    pool_node = None
    cache = system.kv_cache
    if cache is not None and model.sliding_layers:
        raise SizingError(("systems", name, "kv_cache"), (
            f"{model.name} has sliding-window layers ({model.sliding_layers} of {model.num_layers}); prefix "
            "caching and KV offload are not modelled for such models yet (their pages keep only the window, "
            "a cached prefix would need every layer's): remove kv_cache, or use a model without a window"))
    if cache is not None:
        block_tokens = spec.workload.block_tokens
        for pool in pools:
            if pool.role == "decode" and not system.may_switch(pool.spec):  # never comes to prefill
                continue  # no prefix cache on decode instances
            if block_tokens % pool.spec.instance.block_size_tokens:
                raise SizingError(("workload", "block_tokens"), (
                    f"cache blocks of {block_tokens} tokens must be whole engine pages of "
                    f"{pool.spec.instance.block_size_tokens} tokens (systems.{name}."
                    + "".join(f"{p}." for p in system.pool_path(pool.name)) + "instance.block_size_tokens)"))
            pool_path = ("systems", name) + system.pool_path(pool.name)
            dram_bytes = cache.dram.capacity if cache.dram is not None else None
            if cache.dram is not None and dram_bytes is None:  # (a file's is refused on loading)
                raise SizingError(("systems", name, "kv_cache", "dram"), "give the host DRAM set aside for KV, "
                                  "e.g. capacity: 512 GiB")
            if dram_bytes is not None and dram_bytes > pool.node.host_dram_bytes:
                raise SizingError(("systems", name, "kv_cache", "dram", "capacity"), (
                    f"{format_quantity(dram_bytes, 'bytes')} exceeds the host DRAM of node "
                    f"{pool.node.name} ({format_quantity(pool.node.host_dram_bytes, 'bytes')})"))
            if cache.nvme is not None and pool.node.nvme.count == 0:
                raise SizingError(("systems", name, "kv_cache", "nvme"),
                                  f"node {pool.node.name} has no NVMe drives ({dotted_path(pool_path + ('node',))})")
            if (cache.dram is not None or cache.nvme is not None) and pool.layout.cards > pool.node.accelerators_per_node:
                raise SizingError(("systems", name, "kv_cache"), (
                    f"an instance of {pool.layout.label()} spans {pool.layout.cards // pool.node.accelerators_per_node} "
                    f"nodes of {pool.node.name}; host DRAM and NVMe tiers are modelled per instance on one node "
                    "only: use a remote pool (kv_cache.remote) or an instance inside one node"))
        if cache.remote is not None:
            pool_node = catalogs.pool_nodes[cache.remote.pool_node]
            if pool_node.nics.count < 1:
                raise SizingError(("systems", name, "kv_cache", "remote", "pool_node"), (
                    f"pool node {pool_node.name} has no NICs (nics.count: 0): compute nodes could not reach it"))
            for pool in pools:
                if pool.node.nics.count < 1 and (pool.role != "decode" or system.may_switch(pool.spec)):
                    raise SizingError(("systems", name) + system.pool_path(pool.name) + ("node",), (
                        f"node {pool.node.name} has no NICs (nics.count: 0): it could not reach the remote KV "
                        f"pool {pool_node.name}"))
    return SystemSizing(name=name, spec=system, model=model, dtype=dtype, kv_dtype=kv_dtype, pools=pools,
                        pool_node=pool_node)


def size_pool(spec: ScenarioSpec, name: str, pool_name: str, catalogs: Catalogs) -> PoolSizing:
    """Size pool ``pool_name`` of system ``name`` on its own (the checks across pools are
    :func:`size_system`'s); raise :class:`SizingError` if it cannot run."""
    model = catalogs.models[spec.system_model(name)]
    pool = spec.systems[name].pool_specs()[pool_name]
    return _size_pool(spec, name, pool_name, pool, model, spec.system_dtype(name), spec.system_kv_dtype(name),
                      catalogs)


def _size_pool(spec: ScenarioSpec, name: str, pool_name: str, pool: PoolSpec, model: ModelSpec, dtype: str,
               kv_dtype: str, catalogs: Catalogs) -> PoolSizing:
    system = spec.systems[name]
    path = ("systems", name) + system.pool_path(pool_name)
    node = catalogs.nodes[pool.node]
    accelerator = catalogs.accelerators[node.accelerator]
    inst = pool.instance
    if inst.layout == "best":
        given = [f for f in ("tp", "pp", "ep", "dp_attention") if f in inst.model_fields_set]
        raise SizingError(path + ("instance", given[0] if given else "layout"), (
            "layout: best is resolved by kvsim.sim.layout_search before sizing (kvsim run does it); "
            + (f"do not give {', '.join(given)} with it" if given else "size a resolved layout")))
    if inst.weight_offload_search:
        raise SizingError(path + ("instance", "weight_offload_search"),
                          "the layout search tries these offload shares: give it with layout: best, or give one "
                          "share as weight_offload: {fraction: ...}")
    layout = pool_layout(pool)
    tp, per_node = inst.tp, node.accelerators_per_node
    pool_cards = pool.nodes * per_node
    for knob, width in (("tp", tp), ("pp", layout.cards)):
        if per_node % width and width % per_node:
            what = f"tp={width}" if knob == "tp" else f"tp x pp = {width}"
            raise SizingError(path + ("instance", knob), (
                f"{what} cards must divide the {per_node} cards of node {node.name} or be a whole "
                "number of nodes (an instance fills nodes in order)"))
    if layout.cards > pool_cards:
        raise SizingError(path + ("instance", "pp" if layout.pp > 1 else "tp"), (
            f"an instance of {layout.label()} needs {layout.cards} cards; the pool has {pool_cards} "
            f"({pool.nodes} x {node.name})"))
    for knob, message in layout_problems(layout, model):
        raise SizingError(path + ("instance", knob), message)
    links = None
    if layout.needs_layout_model(per_node):
        if layout.cards > per_node and node.nics.count == 0:
            raise SizingError(path + ("node",), f"an instance of {layout.cards} cards spans nodes, but node "
                              f"{node.name} has no NIC to join them")
        tiers = system.scale_up if accelerator.scale_up_bandwidth is not None else None
        links = layout_links(layout, node, accelerator, system.domain_nodes, tiers)
    available = pool_cards // layout.cards
    instances = pool.instances if pool.instances is not None else available
    if pool.roles is not None:
        instances = sum(pool.roles.values())
    if instances > available:
        raise SizingError(path + ("instances",), f"{instances} instances of {layout.label()} need "
                          f"{instances * layout.cards} cards; {pool.nodes} x {node.name} has {pool_cards}")
    weight_dtypes = spec.system_weight_dtypes(name)
    weights_per_card = weight_bytes_per_card(model, layout, dtype, weight_dtypes)  # + RoPE table, vision tower:
    weights_per_card += loaded_extra_bytes_per_card(model, layout.tp, inst.images_per_prompt)  # what loading takes
    stream, in_pool_bytes = None, 0.0
    if inst.weight_offload is not None:
        cache = system.kv_cache
        try:
            offload = offload_sizing(inst.weight_offload, model, node, accelerator, layout, dtype, weight_dtypes,
                                     cache.dram.capacity if cache is not None and cache.dram is not None
                                     and cache.dram.capacity is not None else 0.0, inst.expert_skew,
                                     _pool_home(spec, name, catalogs))
        except ValueError as problem:
            raise SizingError(path + ("instance", "weight_offload"), str(problem)) from None
        stream, in_pool_bytes = offload.stream, offload.pool_bytes
        if stream.contend and spec.system_engine(name).early_exit is not None:
            raise SizingError(path + ("instance", "weight_offload", "contend"), "a stream through the flow network is "
                              "not modelled with engine.early_exit (whose steps skip some layers' transfers): "
                              "give contend: false, or no early exit")
        weights_per_card -= offload.freed_bytes_per_card
    try:  # the exit heads' weights, with engine.early_exit
        weights_per_card += exit_sizing(spec.system_engine(name).early_exit, model, layout, links is None, dtype,
                                        weight_dtypes)
    except ExitProblem as problem:
        raise SizingError(problem.path(name, system.engine), str(problem)) from None
    engine = spec.system_engine(name)
    if engine.collectives != "alpha_beta" and layout.cards > 1:
        try:  # a card with a scale-up link the measured curves do not cover
            interconnect_for(accelerator, engine.collectives)
        except ValueError as problem:
            own = "collectives" in getattr(system.engine, "model_fields_set", ())
            raise SizingError((("systems", name, "engine") if own else ("engine",)) + ("collectives",),
                              str(problem)) from None
    adapters_per_card = adapter_slot_bytes_per_card(spec, system, model, layout)
    usable = accelerator.memory_bytes * inst.memory_utilization
    reserve = inst.activation_reserve
    if reserve is None:
        reserve = activation_reserve_bytes(model, inst.max_batched_tokens, inst.max_num_seqs, inst.runtime_reserve,
                                           layout.tp, inst.images_per_prompt, inst.mm_profiling)
    kv_budget = usable - weights_per_card - adapters_per_card - reserve
    role = "" if pool.role == "mixed" else f" for the {pool.role} role"
    if kv_budget <= 0:
        fits = "do not fit" if weights_per_card > usable else "leave no room for the KV cache"
        raise SizingError(path + ("node",), (
            f"{model.name} weights in {_formats(dtype, weight_dtypes)} "
            f"({format_quantity(model.weight_bytes(dtype, weight_dtypes), 'bytes')}) "
            f"{fits}{role}: {format_quantity(weights_per_card, 'bytes')} per card at {layout.label()}, plus "
            + (f"{format_quantity(adapters_per_card, 'bytes')} of LoRA adapter slots, " if adapters_per_card else "")
            + f"{format_quantity(reserve, 'bytes')} activation reserve, against "
            f"{format_quantity(usable, 'bytes')} usable on one {accelerator.name} "
            f"({inst.memory_utilization:g} of {format_quantity(accelerator.memory_bytes, 'bytes')}); "
            "raise instance.tp (or pp), use a smaller dtype, or a card with more memory"))
    kv_on_card = layout_kv_bytes_per_token_per_card(model, layout, kv_dtype)
    rank_blocks = int(kv_budget // (kv_on_card * inst.block_size_tokens))
    blocks = rank_blocks * layout.dp_attention  # each attention rank holds its own sequences' KV
    if layout.plain_tp:
        kv_per_token = kv_on_card
    else:  # a token's KV spread over every card of the instance (what a transfer moves per card)
        kv_per_token = model.kv_bytes_per_token(kv_dtype, layout.attention_tp) * layout.attention_tp / layout.cards
    max_in, max_out = spec.workload.max_input_tokens, spec.workload.max_output_tokens
    if max_in is None or max_out is None:
        longest = 0  # traces: checked on load
    elif pool.role == "prefill" and pool.roles is None and not system.may_switch(pool):  # never comes to decode
        longest = max_in  # a prefill instance holds the prompt until its KV is handed off
    else:
        longest = max_in + max_out
    span = model.attention_span()
    resident = math.ceil(span.context(longest)) if span is not None else longest  # sliding layers keep a window
    if rank_blocks * inst.block_size_tokens < resident:
        what = "prompt" if pool.role == "prefill" else "prompt + output"
        where = "one instance" if layout.dp_attention == 1 else "one attention rank of an instance"
        raise SizingError(path + ("node",), (
            f"the KV pool of {where}{role} holds {rank_blocks * inst.block_size_tokens} tokens "
            f"({format_quantity(kv_budget, 'bytes')} per card), fewer than the longest request "
            f"({longest} tokens of {what}); raise instance.tp or shorten workload lengths"))
    return PoolSizing(
        name=pool_name, spec=pool, node=node, accelerator=accelerator, model=model, dtype=dtype,
        kv_dtype=kv_dtype, instances=instances, weight_bytes_per_card=weights_per_card,
        kv_budget_bytes_per_card=kv_budget, kv_bytes_per_token_per_card=kv_per_token,
        kv_blocks_per_instance=blocks, engine=spec.system_engine(name), layout=layout, links=links,
        weight_dtypes=weight_dtypes, compute_dtype=spec.system_compute_dtype(name), stream=stream,
        weights_in_pool_bytes=in_pool_bytes,
    )


def _pool_home(spec: ScenarioSpec, name: str, catalogs: Catalogs) -> PoolHome | None:
    """The remote pool system ``name``'s offloaded weights may live in (``weight_offload.home:
    pool``), its bandwidth shared by every card of the nodes of the pools that stream from it (the
    cards of all their nodes, whether or not an instance uses them); None without ``kv_cache.remote``."""
    system = spec.systems[name]
    remote = system.kv_cache.remote if system.kv_cache is not None else None
    if remote is None:
        return None
    cards = sum(p.nodes * catalogs.nodes[p.node].accelerators_per_node for p in system.pool_specs().values()
                if p.instance.weight_offload is not None and p.instance.weight_offload.home == "pool")
    return PoolHome(catalogs.pool_nodes[remote.pool_node], remote.nodes, cards)


def adapter_slots(spec: ScenarioSpec, system: SystemSpec) -> int:
    """Adapter slots per instance of ``system`` (0 without adapters)."""
    adapters = spec.workload.adapters
    if adapters is None:
        return 0
    lora = system.lora
    return lora.max_loras if lora is not None and lora.max_loras is not None else adapters.count


def adapter_slot_bytes_per_card(spec: ScenarioSpec, system: SystemSpec, model: ModelSpec, layout: Layout) -> float:
    """Device memory per card the system's LoRA slots take: an adapter's weights split like the
    layers they adapt (over ``tp`` and the ``pp`` stages), times the slots."""
    adapters = spec.workload.adapters
    if adapters is None:
        return 0.0
    for message in adapter_problems(model, adapters.targets):
        raise SizingError(("workload", "adapters", "targets"), message)
    one = adapter_bytes(model, adapters.rank, adapters.targets, adapters.dtype)
    return adapter_slots(spec, system) * one / (layout.tp * layout.pp)


def pool_layout(pool: PoolSpec) -> Layout:
    """The layout a pool's instance spec gives."""
    inst = pool.instance
    return Layout(tp=inst.tp, pp=inst.pp, ep=inst.ep, dp_attention=inst.dp_attention)


def _formats(dtype: str, weight_dtypes: dict[str, str]) -> str:
    """``fp8`` or ``fp8 (attention bf16, embedding bf16)``: how a checkpoint stores its weights."""
    if not weight_dtypes:
        return dtype
    return f"{dtype} (" + ", ".join(f"{group} {fmt}" for group, fmt in weight_dtypes.items()) + ")"


def request_capacities(sizing: SystemSizing) -> list[tuple[str, bool, int]]:
    """For each pool whose KV pool bounds a request's length: its name, whether it holds only the
    prompt (a prefill pool that never decodes), and the tokens one instance (one attention rank)
    holds. Pools of sliding-window models are left out: they keep a window, not the whole length."""
    if sizing.model.attention_span() is not None:
        return []
    out = []
    for pool in sizing.pools:
        prompt_only = pool.role == "prefill" and pool.spec.roles is None and not sizing.spec.may_switch(pool.spec)
        capacity = pool.kv_blocks_per_instance // pool.layout.dp_attention * pool.spec.instance.block_size_tokens
        out.append((pool.name, prompt_only, capacity))
    return out


def too_long(sizing: SystemSizing, input_tokens: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """Which requests could never fit the KV pool of an instance that would serve them (a trace's
    lengths are known only once it is read). Such a request would wait at the head of its queue
    for ever while the requests behind it starve; the front end refuses it at arrival instead."""
    mask = np.zeros(len(input_tokens), dtype=bool)
    for _name, prompt_only, capacity in request_capacities(sizing):
        need = input_tokens if prompt_only else input_tokens + output_tokens
        mask |= need > capacity
    return mask


def too_long_note(sizing: SystemSizing, mask: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray,
                  arrival_s: np.ndarray) -> str:
    """What :func:`too_long` found, in words: how many, the first, and the pool it outgrows."""
    k = int(np.flatnonzero(mask)[0])
    for name, prompt_only, capacity in request_capacities(sizing):
        need = int(input_tokens[k] if prompt_only else input_tokens[k] + output_tokens[k])
        if need > capacity:
            what = "prompt" if prompt_only else "prompt + output"
            which = "one instance" if len(sizing.pools) == 1 else f"one instance of pool {name}"
            count = int(mask.sum())
            many = "1 request can never fit and was" if count == 1 else f"{count} requests can never fit and were"
            return (f"{many} rejected at arrival, first request {k} "
                    f"(arriving at {float(arrival_s[k]):.3f} s) with {need} tokens of {what}, more than the "
                    f"KV pool of {which} holds ({capacity}); raise instance.tp, or drop the longest requests "
                    f"from the trace")
    raise ValueError("no request in the mask outgrows a pool")
