"""Sizing a system before it runs: instances, weights per card, KV capacity.

Every check that needs the model and the hardware together lives here and runs before the
simulation starts, so a configuration that cannot work is refused with a clear message.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.hardware import AcceleratorSpec, NodeSpec, PoolNodeSpec
from kvsim.models import ModelSpec
from kvsim.models.step_time import RooflineStepTime
from kvsim.scenario.load import Catalogs
from kvsim.scenario.schema import ScenarioSpec, SystemSpec
from kvsim.units import format_quantity
from kvsim.yaml_io import Path

__all__ = ["SizingError", "SystemSizing", "size_system"]


class SizingError(Exception):
    """A configuration that cannot run; ``path`` is the scenario field to blame."""

    def __init__(self, path: Path, message: str):
        self.path = path
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class SystemSizing:
    """Everything derived from a system's spec before the run.

    Byte figures are per card; token figures per instance.
    """

    name: str
    spec: SystemSpec
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
    pool_node: PoolNodeSpec | None = None

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
        return RooflineStepTime(self.model, self.accelerator, self.tp, self.dtype, self.kv_dtype)


def size_system(spec: ScenarioSpec, name: str, catalogs: Catalogs) -> SystemSizing:
    """Derive instance count and KV capacity of system ``name``; raise :class:`SizingError` if it cannot run."""
    system = spec.systems[name]
    path = ("systems", name)
    node = catalogs.nodes[system.node]
    accelerator = catalogs.accelerators[node.accelerator]
    model = catalogs.models[spec.system_model(name)]
    dtype, kv_dtype = spec.system_dtype(name), spec.system_kv_dtype(name)
    inst = system.instance
    tp = inst.tp
    if node.accelerators_per_node % tp != 0:
        raise SizingError(path + ("instance", "tp"), f"tp={tp} must divide the {node.accelerators_per_node} "
                          f"cards of node {node.name} (an instance stays inside one node)")
    heads = (model.num_attention_heads, model.num_kv_heads)
    if model.num_attention_heads % tp or (model.mla is None and model.num_kv_heads % tp and tp % model.num_kv_heads):
        raise SizingError(path + ("instance", "tp"), (
            f"tp={tp} does not split {model.name}'s {heads[0]} attention heads / {heads[1]} KV heads "
            "evenly (engines need heads divisible by tp, or tp divisible by the KV heads)"))
    available = system.nodes * node.accelerators_per_node // tp
    instances = system.instances if system.instances is not None else available
    if instances > available:
        raise SizingError(path + ("instances",), f"{instances} instances of tp={tp} need {instances * tp} cards; "
                          f"{system.nodes} x {node.name} has {system.nodes * node.accelerators_per_node}")
    weights_per_card = model.weight_bytes(dtype) / tp
    usable = accelerator.memory_bytes * inst.memory_utilization
    kv_budget = usable - weights_per_card - inst.activation_reserve
    if kv_budget <= 0:
        fits = "do not fit" if weights_per_card > usable else "leave no room for the KV cache"
        raise SizingError(path + ("node",), (
            f"{model.name} weights in {dtype} ({format_quantity(model.weight_bytes(dtype), 'bytes')}) "
            f"{fits}: {format_quantity(weights_per_card, 'bytes')} per card at tp={tp}, plus "
            f"{format_quantity(inst.activation_reserve, 'bytes')} activation reserve, against "
            f"{format_quantity(usable, 'bytes')} usable on one {accelerator.name} "
            f"({inst.memory_utilization:g} of {format_quantity(accelerator.memory_bytes, 'bytes')}); "
            "raise instance.tp, use a smaller dtype, or a card with more memory"))
    kv_per_token = model.kv_bytes_per_token(kv_dtype, tp)
    blocks = int(kv_budget // (kv_per_token * inst.block_size_tokens))
    max_in, max_out = spec.workload.max_input_tokens, spec.workload.max_output_tokens
    longest = max_in + max_out if max_in is not None and max_out is not None else 0  # traces: checked on load
    if blocks * inst.block_size_tokens < longest:
        raise SizingError(path + ("node",), (
            f"the KV pool of one instance holds {blocks * inst.block_size_tokens} tokens "
            f"({format_quantity(kv_budget, 'bytes')} per card), fewer than the longest request "
            f"({longest} tokens of prompt + output); raise instance.tp or shorten workload lengths"))
    pool_node = None
    cache = system.kv_cache
    if cache is not None:
        block_tokens = spec.workload.block_tokens
        if block_tokens % inst.block_size_tokens:
            raise SizingError(("workload", "block_tokens"), (
                f"cache blocks of {block_tokens} tokens must be whole engine pages of "
                f"{inst.block_size_tokens} tokens (systems.{name}.instance.block_size_tokens)"))
        if cache.dram is not None and cache.dram.capacity > node.host_dram_bytes:
            raise SizingError(path + ("kv_cache", "dram", "capacity"), (
                f"{format_quantity(cache.dram.capacity, 'bytes')} exceeds the node's host DRAM "
                f"({format_quantity(node.host_dram_bytes, 'bytes')})"))
        if cache.nvme is not None and node.nvme.count == 0:
            raise SizingError(path + ("kv_cache", "nvme"), f"node {node.name} has no NVMe drives")
        if cache.remote is not None:
            pool_node = catalogs.pool_nodes[cache.remote.pool_node]
    return SystemSizing(
        name=name, spec=system, node=node, accelerator=accelerator, model=model, dtype=dtype,
        kv_dtype=kv_dtype, instances=instances, weight_bytes_per_card=weights_per_card,
        kv_budget_bytes_per_card=kv_budget, kv_bytes_per_token_per_card=kv_per_token,
        kv_blocks_per_instance=blocks, pool_node=pool_node,
    )
