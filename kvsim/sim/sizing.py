"""Sizing a system before it runs: instances, weights per card, KV capacity.

Every check that needs the model and the hardware together lives here and runs before the
simulation starts, so a configuration that cannot work is refused with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.hardware import AcceleratorSpec, NodeSpec, PoolNodeSpec
from kvsim.models import ModelSpec
from kvsim.models.engine import EngineSpec
from kvsim.models.memory import activation_reserve_bytes
from kvsim.models.step_time import RooflineStepTime
from kvsim.scenario.load import Catalogs
from kvsim.scenario.schema import ScenarioSpec, SystemSpec
from kvsim.serving.specs import PoolSpec
from kvsim.units import format_quantity
from kvsim.yaml_io import Path, dotted_path

__all__ = ["SizingError", "PoolSizing", "SystemSizing", "size_system"]


class SizingError(Exception):
    """A configuration that cannot run; ``path`` is the scenario field to blame."""

    def __init__(self, path: Path, message: str):
        self.path = path
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class PoolSizing:
    """One pool of a system, sized: instances, weights and KV capacity.

    Byte figures are per card; token figures per instance.
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
    def cards(self) -> int:
        return self.instances * self.tp

    @property
    def kv_tokens_per_instance(self) -> int:
        return self.kv_blocks_per_instance * self.spec.instance.block_size_tokens

    def step_model(self) -> RooflineStepTime:
        return RooflineStepTime(self.model, self.accelerator, self.tp, self.dtype, self.kv_dtype, self.engine)

    def describe(self) -> str:
        """One line: hardware, layout and KV capacity."""
        return (f"{self.spec.nodes} x {self.node.name} = {self.cards} x {self.accelerator.name} as "
                f"{self.instances} {self.role} instance(s) of tp={self.tp}: "
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
    pool_node = None
    cache = system.kv_cache
    if cache is not None:
        block_tokens = spec.workload.block_tokens
        control = system.controller
        switchable = control is not None and control.kind != "static"  # any instance may come to prefill
        for pool in pools:
            if pool.role == "decode" and not switchable:
                continue  # no prefix cache on decode instances
            if block_tokens % pool.spec.instance.block_size_tokens:
                raise SizingError(("workload", "block_tokens"), (
                    f"cache blocks of {block_tokens} tokens must be whole engine pages of "
                    f"{pool.spec.instance.block_size_tokens} tokens (systems.{name}."
                    + "".join(f"{p}." for p in system.pool_path(pool.name)) + "instance.block_size_tokens)"))
            pool_path = ("systems", name) + system.pool_path(pool.name)
            if cache.dram is not None and cache.dram.capacity > pool.node.host_dram_bytes:
                raise SizingError(("systems", name, "kv_cache", "dram", "capacity"), (
                    f"{format_quantity(cache.dram.capacity, 'bytes')} exceeds the host DRAM of node "
                    f"{pool.node.name} ({format_quantity(pool.node.host_dram_bytes, 'bytes')})"))
            if cache.nvme is not None and pool.node.nvme.count == 0:
                raise SizingError(("systems", name, "kv_cache", "nvme"),
                                  f"node {pool.node.name} has no NVMe drives ({dotted_path(pool_path + ('node',))})")
        if cache.remote is not None:
            pool_node = catalogs.pool_nodes[cache.remote.pool_node]
    return SystemSizing(name=name, spec=system, model=model, dtype=dtype, kv_dtype=kv_dtype, pools=pools,
                        pool_node=pool_node)


def _size_pool(spec: ScenarioSpec, name: str, pool_name: str, pool: PoolSpec, model: ModelSpec, dtype: str,
               kv_dtype: str, catalogs: Catalogs) -> PoolSizing:
    system = spec.systems[name]
    path = ("systems", name) + system.pool_path(pool_name)
    node = catalogs.nodes[pool.node]
    accelerator = catalogs.accelerators[node.accelerator]
    inst = pool.instance
    tp = inst.tp
    if node.accelerators_per_node % tp != 0:
        raise SizingError(path + ("instance", "tp"), f"tp={tp} must divide the {node.accelerators_per_node} "
                          f"cards of node {node.name} (an instance stays inside one node)")
    heads = (model.num_attention_heads, model.num_kv_heads)
    if model.num_attention_heads % tp or (model.mla is None and model.num_kv_heads % tp and tp % model.num_kv_heads):
        raise SizingError(path + ("instance", "tp"), (
            f"tp={tp} does not split {model.name}'s {heads[0]} attention heads / {heads[1]} KV heads "
            "evenly (engines need heads divisible by tp, or tp divisible by the KV heads)"))
    available = pool.nodes * node.accelerators_per_node // tp
    instances = pool.instances if pool.instances is not None else available
    if pool.roles is not None:
        instances = sum(pool.roles.values())
    if instances > available:
        raise SizingError(path + ("instances",), f"{instances} instances of tp={tp} need {instances * tp} cards; "
                          f"{pool.nodes} x {node.name} has {pool.nodes * node.accelerators_per_node}")
    weights_per_card = model.weight_bytes(dtype) / tp
    usable = accelerator.memory_bytes * inst.memory_utilization
    reserve = inst.activation_reserve
    if reserve is None:
        reserve = activation_reserve_bytes(model, inst.max_batched_tokens, inst.max_num_seqs, inst.runtime_reserve)
    kv_budget = usable - weights_per_card - reserve
    role = "" if pool.role == "mixed" else f" for the {pool.role} role"
    if kv_budget <= 0:
        fits = "do not fit" if weights_per_card > usable else "leave no room for the KV cache"
        raise SizingError(path + ("node",), (
            f"{model.name} weights in {dtype} ({format_quantity(model.weight_bytes(dtype), 'bytes')}) "
            f"{fits}{role}: {format_quantity(weights_per_card, 'bytes')} per card at tp={tp}, plus "
            f"{format_quantity(reserve, 'bytes')} activation reserve, against "
            f"{format_quantity(usable, 'bytes')} usable on one {accelerator.name} "
            f"({inst.memory_utilization:g} of {format_quantity(accelerator.memory_bytes, 'bytes')}); "
            "raise instance.tp, use a smaller dtype, or a card with more memory"))
    kv_per_token = model.kv_bytes_per_token(kv_dtype, tp)
    blocks = int(kv_budget // (kv_per_token * inst.block_size_tokens))
    max_in, max_out = spec.workload.max_input_tokens, spec.workload.max_output_tokens
    control = system.controller
    switchable = control is not None and control.kind != "static"  # any instance may come to decode
    if max_in is None or max_out is None:
        longest = 0  # traces: checked on load
    elif pool.role == "prefill" and pool.roles is None and not switchable:
        longest = max_in  # a prefill instance holds the prompt until its KV is handed off
    else:
        longest = max_in + max_out
    if blocks * inst.block_size_tokens < longest:
        what = "prompt" if pool.role == "prefill" else "prompt + output"
        raise SizingError(path + ("node",), (
            f"the KV pool of one instance{role} holds {blocks * inst.block_size_tokens} tokens "
            f"({format_quantity(kv_budget, 'bytes')} per card), fewer than the longest request "
            f"({longest} tokens of {what}); raise instance.tp or shorten workload lengths"))
    return PoolSizing(
        name=pool_name, spec=pool, node=node, accelerator=accelerator, model=model, dtype=dtype,
        kv_dtype=kv_dtype, instances=instances, weight_bytes_per_card=weights_per_card,
        kv_budget_bytes_per_card=kv_budget, kv_bytes_per_token_per_card=kv_per_token,
        kv_blocks_per_instance=blocks, engine=spec.system_engine(name),
    )
