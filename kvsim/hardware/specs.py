"""Immutable descriptions of accelerators and server nodes.

Figures are SI floats: bytes, bytes/s (per direction for links), FLOP/s (dense, no sparsity),
watts, US dollars. Every catalog entry carries a ``sources`` map naming where its figures come
from (see ``kvsim/hardware/data/*.yaml``).
"""

from __future__ import annotations

import datetime
import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from kvsim.dtypes import DTYPE_BYTES
from kvsim.spec_types import (Bandwidth, Bytes, Count, FlopRate, Fraction, FrozenSpec, PositiveBytes, PositiveInt, Rate,
                              Seconds, Watts, field_errors)

__all__ = [
    "EfficiencySpec", "AcceleratorSpec", "NvmeSpec", "NicSpec", "NodeSpec", "PoolNodeSpec", "HostStagingSpec",
    "DTYPE_BYTES", "PricedSpec", "PriceDate",
]

_PRICE_DATE = re.compile(r"^\d{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?|-Q[1-4]|-H[12])?$")


def _price_date(value: object) -> object:
    # YAML reads `2024` as an int and `2024-06-01` as a date; both are fine dates for a price.
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        value = str(value)
    elif isinstance(value, datetime.date):
        value = value.isoformat()
    if isinstance(value, str) and not _PRICE_DATE.match(value):
        raise ValueError(f"{value!r} is not a date such as '2024', '2024-06', '2024-Q1' or '2024-H2'")
    return value


PriceDate = Annotated[str, BeforeValidator(_price_date)]
"""When a price was quoted: ``2024``, ``2024-06``, ``2024-06-30``, ``2024-Q1`` or ``2024-H2``."""


class PricedSpec(FrozenSpec):
    """A part with a capital price (what buying one costs) and the date of that price.

    Attributes
    ----------
    price_usd : float or None
        Purchase price of one part, US dollars (None: unknown; a cost figure that needs it is None).
    price_date : str or None
        When the price was quoted (prices of accelerators moved sharply in 2024-26, so a price
        without a date cannot be compared); required with a price.
    """

    price_usd: float | None = Field(default=None, ge=0)
    price_date: PriceDate | None = None

    @model_validator(mode="after")
    def _dated_price(self) -> "PricedSpec":
        if self.price_usd is not None and self.price_date is None:
            raise ValueError("price_usd needs price_date: when the price was quoted (e.g. '2024-Q1')")
        return self



class EfficiencySpec(FrozenSpec):
    """Achieved fractions of peak and fixed costs used by the roofline step-time model.

    Attributes
    ----------
    compute : float
        Model FLOPs utilisation achieved by a compute-bound iteration (fraction of dense peak).
    compute_half_tokens : float
        Tokens in an iteration at which dense GEMMs reach half of ``compute`` (small GEMMs leave
        tiles partly empty); 0 keeps the efficiency flat.
    memory : float
        Fraction of peak memory bandwidth achieved streaming weights.
    kv_memory : float or None
        Fraction of peak memory bandwidth achieved reading paged KV in attention (None: ``memory``).
    interconnect : float
        Fraction of nominal scale-up (or PCIe) bandwidth achieved by collectives.
    host_copy : float
        Fraction of the host link a pinned host<->device copy (cudaMemcpy, copy engine) reaches;
        NIC and NVMe DMA straight to the device (GPU-Direct) does not pay it.
    collective_latency_s : float
        Latency of one card-to-card step of a collective (the alpha of the alpha-beta model), seconds.

    Defaults, used where a catalog entry gives no figure: ``compute`` 0.6 is InferSim's
    default MFU for H20 (alibaba/InferSim ``hardware/gpu.py``); ``memory`` 0.8 is the
    ``mem_bw_empirical_scaling_factor`` aiconfigurator uses for every NVIDIA GPU;
    ``interconnect`` 0.8 is InferSim's NVLink/RDMA derate; ``host_copy`` 0.87 is the pinned
    copy-engine rate measured on PCIe Gen5 x16 (55.4 of 64 GB/s, nvbandwidth on H100); ``collective_latency_s`` 10 us is
    aiconfigurator's ``p2p_latency`` (one point-to-point step); ``compute_half_tokens`` 0 and
    ``kv_memory`` None (same as ``memory``) are neutral until a measurement or ``kvsim calibrate``
    gives them. The per-iteration overhead is the engine's (:class:`kvsim.models.engine.EngineSpec`).
    """

    compute: Fraction = 0.6
    compute_half_tokens: float = Field(default=0.0, ge=0.0)
    memory: Fraction = 0.8
    kv_memory: Fraction | None = None
    interconnect: Fraction = 0.8
    host_copy: Fraction = 0.87
    collective_latency_s: Seconds = 10e-6


class AcceleratorSpec(PricedSpec):
    """One accelerator card.

    Attributes
    ----------
    memory_bytes : float
        Device memory capacity, bytes.
    memory_bandwidth : float
        Peak device memory bandwidth, bytes/s.
    flops : dict[str, float]
        Dense peak FLOP/s per number format (``bf16``, ``fp8``, ``fp4``).
    scale_up_bandwidth : float or None
        Card-to-card link bandwidth per direction (NVLink, HCCS/UB), bytes/s; None if the card
        has no scale-up link and peers talk over PCIe.
    scale_up_latency_s : float or None
        One card-to-card copy's latency over the scale-up fabric, seconds (None: a generic
        3 us, see :data:`kvsim.network.topology.SCALE_UP_LATENCY_S`).
    host_link_bandwidth : float
        Card-to-host link bandwidth per direction (PCIe), bytes/s.
    tdp_w : float or None
        Thermal design power (board power limit), watts.
    typical_power_w : float or None
        Average draw while serving, watts, where a measurement gives one (None: the cost model
        takes ``tdp_w``, an upper bound).
    price_usd, price_date
        Price of one card and its date (:class:`PricedSpec`); informational, since a system's
        capital cost is the price of its whole servers (:attr:`NodeSpec.price_usd`).
    """

    name: str = ""
    vendor: str
    memory_bytes: PositiveBytes
    memory_kind: str
    memory_bandwidth: Bandwidth
    flops: dict[str, FlopRate]
    scale_up_bandwidth: Bandwidth | None = None
    scale_up_latency_s: Seconds | None = None  # 0 s: an idealised link (what-if studies)
    host_link: str
    host_link_bandwidth: Bandwidth
    tdp_w: Watts | None = None
    typical_power_w: Watts | None = None
    efficiency: EfficiencySpec = Field(default_factory=EfficiencySpec)
    sources: dict[str, str]

    @model_validator(mode="after")
    def _known_dtypes(self) -> "AcceleratorSpec":
        unknown = sorted(set(self.flops) - set(DTYPE_BYTES))
        if unknown:
            raise ValueError(f"unknown number format(s) in flops: {unknown}; known: {sorted(DTYPE_BYTES)}")
        if not self.flops:
            raise ValueError("flops must give the dense peak of at least one number format")
        return self

    def peak_flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``; raises KeyError naming what the card supports."""
        if dtype not in self.flops:
            raise KeyError(f"{self.name} has no {dtype} peak in the catalog (has: {', '.join(self.flops)})")
        return self.flops[dtype]

    @property
    def peer_bandwidth(self) -> float:
        """Bandwidth used for card-to-card collectives, bytes/s per direction."""
        return self.scale_up_bandwidth if self.scale_up_bandwidth is not None else self.host_link_bandwidth


class NvmeSpec(FrozenSpec):
    """Local NVMe drives of a node (all identical).

    Attributes
    ----------
    read_bandwidth, write_bandwidth : float
        Sequential rates of one drive, bytes/s.
    read_iops, write_iops : float
        Random I/O ceilings of one drive, I/Os per second (datasheets quote 4 KiB I/Os).
    read_latency_s, write_latency_s : float
        Latency of one I/O on the drive, seconds.
    queue_depth : int
        I/Os one transfer keeps outstanding against the drive.

    Defaults, where a catalog entry is silent: 2.5 M read / 250 K write IOPS are the Samsung
    PM1743 announcement figures (computerbase.de, clubic.com; hardware_facts.md section 2b, H/M;
    block size not stated, 4 KiB assumed); 80 us read / 15 us write are the midpoints of Kioxia's
    Gen5 read 90 -> 70 us and write 20 -> 10 us (tomshardware / hwcooling, section 2b, M);
    queue depth 32 is an assumption (a common io_uring / libaio iodepth per job).
    """

    count: Count  # 0: a node without drives
    capacity_bytes: Bytes  # of one drive; above zero when there are drives (checked below)
    read_bandwidth: Bandwidth
    write_bandwidth: Bandwidth
    read_iops: Rate = 2.5e6
    write_iops: Rate = 2.5e5
    read_latency_s: Seconds = 80e-6
    write_latency_s: Seconds = 15e-6
    queue_depth: PositiveInt = 32

    @model_validator(mode="after")
    def _drives_hold_something(self) -> "NvmeSpec":
        if self.count and not self.capacity_bytes > 0:
            raise field_errors(NvmeSpec, [(("capacity_bytes",), f"{self.count} drive(s) of 0 bytes: give each drive's "
                                           "capacity (e.g. 3.84 TB), or count: 0 for a node without drives", 0.0)])
        return self


class HostStagingSpec(FrozenSpec):
    """How a node's CPU stages storage I/O that bounces through host memory (no GPU-Direct).

    Attributes
    ----------
    copy_threads : int
        CPU threads copying between I/O buffers and the pinned buffers the copy engines read
        (0: the NIC or drive lands data straight in pinned memory; no CPU copy).
    memcpy_bandwidth : float
        What one thread copies, bytes/s (each copied byte is also read and written in DRAM).
    per_io_cpu_s : float
        CPU time one I/O costs besides the copy (system call, file-system metadata, completion),
        seconds; spread over the copy threads (at least one).

    Defaults: 8 threads is an assumption; 10 GB/s per thread is within single-thread memcpy
    measurements (tinymembench "C copy" 9.2-20 GB/s on client cores, geerlingguy/sbc-reviews
    issues 90 and 107, M) and below them, since server cores are concurrency-limited per thread
    (J. McCalpin on single-threaded Xeon bandwidth, M) -- an assumption to calibrate; 5 us per I/O is an
    assumption of the order of one gdsio 4 KiB GDS write (14 us average latency, NVIDIA GDS
    getting-started guide, H) and of a kernel file-system read path; UNCONFIRMED.
    """

    copy_threads: Count = 8
    memcpy_bandwidth: Bandwidth = 10e9
    per_io_cpu_s: Seconds = 5e-6


class NicSpec(FrozenSpec):
    """Scale-out network interfaces of a node (all identical)."""

    count: Count  # 0: no scale-out network (sizing refuses what would need one)
    bandwidth: Bandwidth


class NodeSpec(PricedSpec):
    """A server: a number of identical accelerators plus host memory, drives and NICs.

    ``price_usd`` is the whole server, accelerators included (:class:`PricedSpec`);
    ``host_power_w`` is the average draw of everything but the accelerators (CPUs, DRAM, drives,
    NICs, fans, switch board, power-supply losses), watts.
    """

    name: str = ""
    accelerator: str
    accelerators_per_node: PositiveInt
    host_dram_bytes: PositiveBytes
    host_dram_bandwidth: Bandwidth
    nvme: NvmeSpec
    nics: NicSpec
    host_staging: HostStagingSpec = Field(default_factory=HostStagingSpec)
    host_power_w: Watts | None = None
    sources: dict[str, str]


class PoolNodeSpec(PricedSpec):
    """A node of a remote KV storage pool, deployed and scaled apart from compute.

    Attributes
    ----------
    medium : str
        ``"dram"`` (a memory pool node) or ``"nvme"`` (a storage node with drives).
    capacity_bytes : float
        KV bytes the node can hold.
    read_bandwidth, write_bandwidth : float
        Aggregate media bandwidth of the node (all drives, or its DRAM), bytes/s.
    access_latency_s : float
        Latency of one I/O (request) on the node's media and software, seconds (NVMe read ~tens
        of us, DRAM ~us); a transfer pays it once, and its queue-depth bound counts it per I/O.
    read_iops, write_iops : float or None
        I/Os per second the node serves (all drives, or its request path); None: no ceiling.
    queue_depth : int
        I/Os one transfer keeps outstanding against the node (default 32, an assumption).
    nics : NicSpec
        The node's network interfaces.
    power_w : float or None
        Average draw of the whole node, watts.
    price_usd, price_date
        Price of the whole node and its date (:class:`PricedSpec`).
    """

    name: str = ""
    medium: Literal["dram", "nvme"]
    capacity_bytes: PositiveBytes
    read_bandwidth: Bandwidth
    write_bandwidth: Bandwidth
    access_latency_s: Seconds
    read_iops: Rate | None = None
    write_iops: Rate | None = None
    queue_depth: PositiveInt = 32
    nics: NicSpec
    power_w: Watts | None = None
    sources: dict[str, str]
