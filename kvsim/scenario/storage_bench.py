"""A storage-only benchmark file: many simulated clients read and write KV blocks against a pool.

In the spirit of the MLPerf Storage KV-cache workload: no engines, only the transfer layer. Each
client is one card of a client node; it keeps ``concurrency`` block transfers in flight, each a
read (pool -> card) with probability ``read_fraction``, else a write (card -> pool), of
``block_size`` bytes in I/Os of ``io_size``. A sweep varies any field, as in a scenario::

    name: storage-bench
    duration: 2 s
    clients: {node: h20-8x, nodes: 2}
    pool: {pool_node: nvme-storage-16x, nodes: 1}
    block_size: 2 MiB
    sweep: {gpu_direct: [true, false]}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from kvsim.hardware import NodeSpec, PoolNodeSpec, accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.hardware.specs import AcceleratorSpec
from kvsim.scenario.schema import CatalogEntries
from kvsim.scenario.sweep import grid_points, set_path
from kvsim.spec_types import (STRICT_UNITS, Count, FrozenSpec, PositiveBytes, PositiveInt, PositiveSeconds, Seconds,
                              field_errors)
from kvsim.yaml_io import SpecError, errors_from_validation, load_yaml, read_utf8, validation_problems

__all__ = ["StorageBenchSpec", "BenchPoint", "StorageBench", "load_storage_bench", "parse_storage_bench"]


class BenchClientsSpec(FrozenSpec):
    """Client nodes: ``nodes`` of catalog type ``node``; ``per_node`` of their cards are clients
    (default all)."""

    node: str
    nodes: PositiveInt = 1
    per_node: PositiveInt | None = None


class BenchPoolSpec(FrozenSpec):
    """The pool under test: ``nodes`` pool nodes of catalog type ``pool_node``, reached ``over``
    the network (NICs) or the scale-up fabric (a memory-semantic pool: one scale-up domain holds
    every client node and pool node; needs the pool node's ``scale_up_bandwidth`` and cards with a
    scale-up link)."""

    pool_node: str
    nodes: PositiveInt = 1
    over: Literal["network", "scale_up"] = "network"


class StorageBenchSpec(FrozenSpec):
    """One storage benchmark (see the module docstring).

    Attributes
    ----------
    block_size : float
        Bytes one transfer moves (one KV block of one card), bytes.
    io_size : float or None
        Size of one I/O, bytes (None: one I/O per block).
    read_fraction : float
        Share of transfers that read, in [0, 1].
    concurrency : int
        Transfers each client keeps in flight.
    gpu_direct : bool
        GPU-Direct RDMA (no host bounce); otherwise staged through the client node's host memory.
    host_memory_load : float
        Share of each client node's DRAM channel bandwidth taken by other work, in [0, 1).
    """

    name: str
    description: str = ""
    seed: Count = 0
    duration: PositiveSeconds
    warmup: Seconds = 0.0
    clients: BenchClientsSpec
    pool: BenchPoolSpec
    block_size: PositiveBytes
    io_size: PositiveBytes | None = None
    read_fraction: float = Field(default=1.0, ge=0.0, le=1.0)
    concurrency: PositiveInt = 1
    gpu_direct: bool = True
    host_memory_load: float = Field(default=0.0, ge=0.0, lt=1.0)
    catalog: CatalogEntries = Field(default_factory=CatalogEntries)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> "StorageBenchSpec":
        if not self.duration > self.warmup:
            raise field_errors(StorageBenchSpec, [(("warmup",), f"warmup ({self.warmup:g} s) must be shorter than "
                                                   f"duration ({self.duration:g} s)", self.warmup)])
        return self


@dataclass(frozen=True)
class BenchPoint:
    """One sweep point: its swept values as written, its spec and the hardware it names."""

    index: int
    params: dict[str, Any]
    spec: StorageBenchSpec
    node: NodeSpec
    accelerator: AcceleratorSpec
    pool_node: PoolNodeSpec


@dataclass(frozen=True)
class StorageBench:
    """A validated storage benchmark file and its sweep points."""

    spec: StorageBenchSpec
    points: list[BenchPoint]


def load_storage_bench(path: str | FsPath) -> StorageBench:
    """Read and validate a storage benchmark file (:class:`SpecError` names file and line)."""
    path = FsPath(path)
    _, text = read_utf8(path, "storage benchmark file")
    return parse_storage_bench(text, str(path))


def parse_storage_bench(text: str, filename: str = "<storage benchmark>") -> StorageBench:
    """Validate storage benchmark YAML given as text."""
    located = load_yaml(text, filename)
    if not isinstance(located.data, dict):
        raise SpecError([f"{filename}:1: the storage benchmark must be a mapping of fields (name, clients, ...)"])
    context = {STRICT_UNITS: True}
    try:
        spec = StorageBenchSpec.model_validate(located.data, context=context)
    except ValidationError as exc:
        raise SpecError(errors_from_validation(exc, located)) from None
    nodes = node_catalog().extended(spec.catalog.nodes, located, ("catalog", "nodes"))
    accelerators = accelerator_catalog().extended(spec.catalog.accelerators, located, ("catalog", "accelerators"))
    pools = pool_node_catalog().extended(spec.catalog.pool_nodes, located, ("catalog", "pool_nodes"))
    try:
        grid = grid_points(spec.sweep)
    except ValueError as exc:
        raise SpecError([located.problem(("sweep",), str(exc))]) from None
    points = []
    for index, params in enumerate(grid):
        raw = located.data
        for dotted, value in params.items():
            try:
                raw = set_path(raw, dotted, value)
            except ValueError as exc:
                raise SpecError([located.problem(("sweep",), f"{dotted}: {exc}")]) from None
        try:
            point = StorageBenchSpec.model_validate({**raw, "sweep": {}}, context=context)
        except ValidationError as exc:
            label = ", ".join(f"{k}={v}" for k, v in params.items())
            raise SpecError([located.problem(("sweep",), f"at sweep point [{label}]: {'.'.join(map(str, p))}: {m}")
                             for p, m in validation_problems(exc, raw)]) from None
        problems = []
        if point.clients.node not in nodes:
            problems.append(located.problem(("clients", "node"), nodes.unknown_message(point.clients.node)))
        if point.pool.pool_node not in pools:
            problems.append(located.problem(("pool", "pool_node"), pools.unknown_message(point.pool.pool_node)))
        if problems:
            raise SpecError(problems)
        node = nodes[point.clients.node]
        if node.accelerator not in accelerators:
            raise SpecError([located.problem(("clients", "node"), accelerators.unknown_message(node.accelerator))])
        pool = pools[point.pool.pool_node]
        if point.pool.over == "scale_up" and pool.scale_up_bandwidth is None:
            raise SpecError([located.problem(("pool", "over"), (
                f"pool node {point.pool.pool_node} has no scale_up_bandwidth, so it cannot be reached over the "
                "scale-up fabric; give it one (catalog: pool_nodes:) or use over: network"))])
        if point.pool.over == "scale_up" and accelerators[node.accelerator].scale_up_bandwidth is None:
            raise SpecError([located.problem(("pool", "over"), (
                f"{point.clients.node}'s cards ({node.accelerator}) have no scale-up link to reach a memory-semantic "
                "pool; use over: network"))])
        if point.clients.per_node is not None and point.clients.per_node > node.accelerators_per_node:
            raise SpecError([located.problem(("clients", "per_node"), (
                f"{point.clients.node} has {node.accelerators_per_node} cards; per_node must not exceed that"))])
        points.append(BenchPoint(index, params, point, node, accelerators[node.accelerator], pool))
    return StorageBench(spec, points)
