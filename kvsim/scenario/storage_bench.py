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

from pydantic import ConfigDict, Field, ValidationError, model_validator

from kvsim.dtypes import DTYPE_BYTES
from kvsim.hardware import NodeSpec, PoolNodeSpec, accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.hardware.specs import AcceleratorSpec
from kvsim.models import model_catalog
from kvsim.scenario.schema import CatalogEntries
from kvsim.scenario.sweep import grid_points, set_path
from kvsim.spec_types import (
    STRICT_UNITS,
    Count,
    Fraction,
    FrozenSpec,
    PositiveBytes,
    PositiveFloat,
    PositiveInt,
    PositiveSeconds,
    Seconds,
    field_errors,
)
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


class _SubmissionPart(FrozenSpec):
    # a submission's system description is pasted as it is: keys kvsim does not read (chassis,
    # sysctl, environment, power...) are left alone, while the ones it reads are checked
    model_config = ConfigDict(frozen=True, extra="ignore")


class SubmissionPort(_SubmissionPart):
    """One ``networking`` entry of an MLPerf Storage system description: ``unit_count`` ports of
    ``speed`` Gb/s (the submissions' unit). Entries whose ``traffic`` does not list ``data``
    (management networks) carry no benchmark traffic."""

    type: str | None = None
    speed: PositiveFloat
    unit_count: PositiveInt
    traffic: list[str] | str | None = None

    @property
    def carries_data(self) -> bool:
        if self.traffic is None:
            return True
        listed = [self.traffic] if isinstance(self.traffic, str) else self.traffic
        return any("data" in item.lower() for item in listed)


class SubmissionDrivePerformance(_SubmissionPart):
    """A drive's declared figures, ``drives[].performance`` of a submission (MB/s = 1e6 B/s)."""

    seq_read_MBps: PositiveFloat
    seq_write_MBps: PositiveFloat
    random_read_IOPS: PositiveFloat | None = None
    random_write_IOPS: PositiveFloat | None = None


class SubmissionDrives(_SubmissionPart):
    """``unit_count`` identical drives of ``capacity_in_GB`` (1e9 B) each."""

    vendor_name: str | None = None
    model_name: str | None = None
    unit_count: PositiveInt
    capacity_in_GB: PositiveFloat
    performance: SubmissionDrivePerformance


class SubmissionHosts(_SubmissionPart):
    """A group of ``quantity`` identical hosts (``product_nodes[]`` or ``clients[]``)."""

    quantity: PositiveInt
    networking: list[SubmissionPort] = Field(min_length=1)
    drives: list[SubmissionDrives] = Field(default_factory=list)


class SubmissionSpec(FrozenSpec):
    """A configuration written like an MLPerf Storage submission's system description
    (``system_under_test``: ``product_nodes`` and ``clients``, as in
    mlcommons/storage_results_v3.0 ``closed/<org>/systems/*.yaml``); kvsim builds one pool node
    type and one client node type from it (docs/storage_bench.md).

    Attributes
    ----------
    product_nodes : list
        The storage nodes: one group (kvsim's pool is of one node type), with its drives.
    clients : list
        Client host groups; all must have the same data ports.
    processes_per_host : int
        Benchmark processes (MPI ranks) per client host; each is one client of the bench.
    efficiency, access_latency_s
        What a submission does not give: the storage service's delivered fraction of its data
        ports' line rate, and one I/O's latency on its media. Defaults: 0.806, what the 3FS
        pool delivers per storage NIC (deepseek-ai/3FS README: ~6.6 TiB/s read over 180 nodes of
        2 x 200 Gb/s; an ASSUMPTION for another vendor's software), and 80 us (Kioxia Gen5 read
        latency 70-90 us, M).
    """

    product_nodes: list[SubmissionHosts] = Field(min_length=1, max_length=1)
    clients: list[SubmissionHosts] = Field(min_length=1)
    processes_per_host: PositiveInt = 1
    efficiency: Fraction = 0.806
    access_latency_s: Seconds = 80e-6


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
    model, dtype : str or None, str
        A catalog model whose KV cache the blocks hold: rows then also give KV tokens read and
        written per second (bytes over the model's unsplit KV bytes per token in ``dtype``).
    submission : SubmissionSpec or None
        A configuration written like an MLPerf Storage submission, in place of ``clients`` and
        ``pool``.
    """

    name: str
    description: str = ""
    seed: Count = 0
    duration: PositiveSeconds
    warmup: Seconds = 0.0
    clients: BenchClientsSpec
    pool: BenchPoolSpec
    model: str | None = None
    dtype: str = "bf16"
    block_size: PositiveBytes
    io_size: PositiveBytes | None = None
    read_fraction: float = Field(default=1.0, ge=0.0, le=1.0)
    concurrency: PositiveInt = 1
    gpu_direct: bool = True
    host_memory_load: float = Field(default=0.0, ge=0.0, lt=1.0)
    catalog: CatalogEntries = Field(default_factory=CatalogEntries)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> StorageBenchSpec:
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
    kv_bytes_per_token: float | None = None  # of the bench's model, unsplit (None: no model given)


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
    if "submission" in located.data:
        _from_submission(located, context)
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
        kv_bytes_per_token = None
        if point.model is not None:
            models = model_catalog().extended(spec.catalog.models, located, ("catalog", "models"))
            if point.model not in models:
                raise SpecError([located.problem(("model",), models.unknown_message(point.model))])
            if point.dtype not in DTYPE_BYTES:
                raise SpecError([located.problem(("dtype",), (
                    f"unknown number format {point.dtype!r}; known: {', '.join(sorted(DTYPE_BYTES))}"))])
            kv_bytes_per_token = models[point.model].kv_bytes_per_token_total(point.dtype)
        points.append(BenchPoint(index, params, point, node, accelerators[node.accelerator], pool,
                                 kv_bytes_per_token))
    return StorageBench(spec, points)


SUBMISSION_CLIENT, SUBMISSION_STORAGE = "submission-client", "submission-storage"


def _si(value: float, unit: str) -> str:
    """A quantity as a file writes it (files refuse bare numbers), for the generated entries."""
    return f"{float(value)!r} {unit}"


def _data_ports(ports: list[SubmissionPort], located, path: tuple) -> tuple[int, float]:
    """(count, line rate bytes/s) of a host's fastest data ports: kvsim gives a node's NICs one
    speed, and slower data ports beside them (a 50 GbE next to a 400 Gb/s InfiniBand port) are
    left out, an ASSUMPTION that the benchmark's bulk traffic takes the fast ones."""
    data = [port for port in ports if port.carries_data]
    if not data:
        raise SpecError([located.problem(path, "no networking entry carries data (traffic without 'data')")])
    fastest = max(port.speed for port in data)
    return sum(port.unit_count for port in data if port.speed == fastest), fastest * 1e9 / 8


def _from_submission(located, context: dict) -> None:
    """Rewrite a ``submission:`` block into the clients, pool and catalog entries it describes."""
    raw = dict(located.data)
    if "clients" in raw or "pool" in raw:
        raise SpecError([located.problem(("submission",), (
            "give either submission: or clients: and pool:, not both (a submission names its own hosts)"))])
    try:
        submission = SubmissionSpec.model_validate(raw.pop("submission"), context=context)
    except ValidationError as exc:
        raise SpecError(errors_from_validation(exc, located, ("submission",))) from None
    storage = submission.product_nodes[0]
    nics, line_Bps = _data_ports(storage.networking, located, ("submission", "product_nodes", 0, "networking"))
    ports = {_data_ports(group.networking, located, ("submission", "clients", k, "networking"))
             for k, group in enumerate(submission.clients)}
    if len(ports) > 1:
        raise SpecError([located.problem(("submission", "clients"), (
            "client groups with different data ports: kvsim builds one client node type; give one group per run"))])
    [(client_nics, client_Bps)] = ports
    drives = storage.drives
    if not drives:
        raise SpecError([located.problem(("submission", "product_nodes", 0), (
            "the storage nodes list no drives: kvsim's pool node takes its media figures from them"))])
    described = ", ".join(f"{d.unit_count} x {d.vendor_name or ''} {d.model_name or 'drive'}".replace("  ", " ")
                          for d in drives)
    read_iops = [d.performance.random_read_IOPS for d in drives]
    write_iops = [d.performance.random_write_IOPS for d in drives]
    pool = {
        "medium": "nvme",
        "capacity_bytes": _si(sum(d.unit_count * d.capacity_in_GB * 1e9 for d in drives), "B"),
        "read_bandwidth": _si(sum(d.unit_count * d.performance.seq_read_MBps * 1e6 for d in drives), "B/s"),
        "write_bandwidth": _si(sum(d.unit_count * d.performance.seq_write_MBps * 1e6 for d in drives), "B/s"),
        "access_latency_s": _si(submission.access_latency_s, "s"),
        "read_iops": None if None in read_iops else _si(sum(d.unit_count * i for d, i in zip(drives, read_iops)), "/s"),
        "write_iops": (None if None in write_iops
                       else _si(sum(d.unit_count * i for d, i in zip(drives, write_iops)), "/s")),
        "nics": {"count": nics, "bandwidth": _si(line_Bps, "B/s"), "efficiency": submission.efficiency},
        "sources": {"submission": f"{located.filename}: {described}; {nics} data ports"},
    }
    # each benchmark process is one "card" of an H20 host (its 64 GB/s link does not bind a
    # storage benchmark); the host's data ports are its NICs, in Gen5 x16 slots
    client = {"base": "h20-8x", "accelerators_per_node": submission.processes_per_host,
              "nics": {"count": client_nics, "bandwidth": _si(client_Bps, "B/s"), "pcie": "Gen5 x16"},
              "sources": {"submission": f"{located.filename}: {client_nics} data port(s) per host"}}
    catalog = dict(raw.get("catalog") or {})
    catalog["nodes"] = {**(catalog.get("nodes") or {}), SUBMISSION_CLIENT: client}
    catalog["pool_nodes"] = {**(catalog.get("pool_nodes") or {}), SUBMISSION_STORAGE: pool}
    raw["catalog"] = catalog
    raw["clients"] = {"node": SUBMISSION_CLIENT, "nodes": sum(group.quantity for group in submission.clients)}
    raw["pool"] = {"pool_node": SUBMISSION_STORAGE, "nodes": storage.quantity}
    located.data = raw
