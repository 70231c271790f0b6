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
from kvsim.hardware.provenance import EfficiencyBasis
from kvsim.spec_types import (
    Bandwidth,
    Bytes,
    Count,
    FlopRate,
    Fraction,
    FrozenSpec,
    PositiveBytes,
    PositiveInt,
    Rate,
    Seconds,
    Watts,
    field_errors,
)

__all__ = [
    "EfficiencySpec", "AcceleratorSpec", "NvmeSpec", "NicSpec", "NodeSpec", "PoolNodeSpec", "HostStagingSpec",
    "DTYPE_BYTES", "PricedSpec", "PriceDate", "PcieSlot", "pcie_bandwidth", "GPUS_PER_PCIE_SWITCH",
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
    def _dated_price(self) -> PricedSpec:
        if self.price_usd is not None and self.price_date is None:
            raise ValueError("price_usd needs price_date: when the price was quoted (e.g. '2024-Q1')")
        return self



class EfficiencySpec(FrozenSpec):
    """Achieved fractions of peak and fixed costs used by the roofline step-time model.

    Attributes
    ----------
    compute : float
        Model FLOPs utilisation achieved by a compute-bound iteration (fraction of dense peak).
    compute_formats : dict[str, float]
        The MFU of number formats whose matrix multiplies reach another fraction of their own
        peak than ``compute`` says (fraction of that format's dense peak): Hopper's FP8 doubles
        the peak, not the rate a prefill iteration reaches. A format not listed takes ``compute``.
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
    compute_formats: dict[str, Fraction] = Field(default_factory=dict)
    compute_half_tokens: float = Field(default=0.0, ge=0.0)
    memory: Fraction = 0.8
    kv_memory: Fraction | None = None
    interconnect: Fraction = 0.8
    host_copy: Fraction = 0.87
    collective_latency_s: Seconds = 10e-6

    def compute_for(self, dtype: str) -> float:
        """The MFU of a compute-bound iteration whose matrix multiplies run in ``dtype``."""
        return self.compute_formats.get(dtype, self.compute)


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
    architecture : str or None
        The chip architecture (``Hopper``, ``Ada Lovelace``); with ``memory_kind`` it decides which
        cards an efficiency figure may be carried between (:mod:`kvsim.hardware.provenance`).
    efficiency_basis : dict[str, EfficiencyBasis]
        Per efficiency figure, whether it is measured on this card, carried from a sibling card by
        a stated rule, or an assumption (:class:`~kvsim.hardware.provenance.EfficiencyBasis`).
    """

    name: str = ""
    vendor: str
    architecture: str | None = None
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
    efficiency_basis: dict[str, EfficiencyBasis] = Field(default_factory=dict)
    sources: dict[str, str]

    @model_validator(mode="after")
    def _known_dtypes(self) -> AcceleratorSpec:
        unknown_figures = sorted(set(self.efficiency_basis) - set(EfficiencySpec.model_fields))
        if unknown_figures:
            raise ValueError(f"efficiency_basis names {unknown_figures}, which are not efficiency figures; known: "
                             f"{sorted(EfficiencySpec.model_fields)}")
        unknown = sorted(set(self.flops) - set(DTYPE_BYTES))
        if unknown:
            raise ValueError(f"unknown number format(s) in flops: {unknown}; known: {sorted(DTYPE_BYTES)}")
        if not self.flops:
            raise ValueError("flops must give the dense peak of at least one number format")
        no_peak = sorted(set(self.efficiency.compute_formats) - set(self.flops))
        if no_peak:
            raise ValueError(f"efficiency.compute_formats names {no_peak}, for which flops gives no peak (has: "
                             f"{', '.join(self.flops)})")
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
    def _drives_hold_something(self) -> NvmeSpec:
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


GPUS_PER_PCIE_SWITCH = 2
"""Accelerators behind one PCIe switch of a compute node: switch ``k`` carries cards ``2k`` and
``2k + 1`` (the HGX pairing, two GPUs and their NICs per Gen5 switch; see
:mod:`kvsim.network.cluster_graph`)."""

# Transfer rate per lane and line encoding of each PCIe generation (PCI-SIG base specifications):
# Gen3 8 GT/s, Gen4 16 GT/s, Gen5 32 GT/s with 128b/130b encoding; Gen6 64 GT/s PAM4 in FLIT mode,
# whose 256 B FLIT carries its own CRC and FEC (counted like the TLP and DLLP overhead, which no PCIe
# link of the cluster graph charges). Gen4 x16 = 16e9 x 16 x 128/130 / 8 = 31.5 GB/s per direction.
PCIE_GT_PER_S = {3: 8e9, 4: 16e9, 5: 32e9, 6: 64e9}
PCIE_ENCODING = {3: 128 / 130, 4: 128 / 130, 5: 128 / 130, 6: 1.0}
PCIE_LANES = (1, 2, 4, 8, 16)
_PCIE_SLOT = re.compile(r"^\s*(?:pcie\s*)?gen\s*([0-9]+)\s*x\s*([0-9]+)\s*$", re.IGNORECASE)


def pcie_bandwidth(gen: int, lanes: int) -> float:
    """Per-direction bandwidth of a PCIe link after line encoding, bytes/s."""
    return PCIE_GT_PER_S[gen] * lanes * PCIE_ENCODING[gen] / 8


def _pcie_slot(value: object) -> object:
    # "Gen5 x16" (or "PCIe Gen5 x16") -> the canonical "Gen5 x16"; anything else one clear message
    found = _PCIE_SLOT.match(value) if isinstance(value, str) else None
    if not found:
        raise ValueError(f"{value!r} is not a PCIe slot such as 'Gen5 x16' (generation 3-6, lanes x1-x16)")
    gen, lanes = int(found.group(1)), int(found.group(2))
    if gen not in PCIE_GT_PER_S:
        raise ValueError(f"{value!r}: PCIe generation {gen} is not one of {', '.join(map(str, PCIE_GT_PER_S))}")
    if lanes not in PCIE_LANES:
        raise ValueError(f"{value!r}: x{lanes} is not a PCIe link width (x1, x2, x4, x8 or x16)")
    return f"Gen{gen} x{lanes}"


PcieSlot = Annotated[str, BeforeValidator(_pcie_slot)]
"""A PCIe slot as generation and width, ``"Gen5 x16"``."""

NicSwitch = Count | Literal["root"]
"""Where a NIC's slot hangs: the index of the card switch it shares, or ``"root"``."""


def _nic_switches(value: object) -> object:
    # one message for a bad placement, instead of one per member of the union it might have been
    def place(item: object) -> bool:
        return item == "root" or (isinstance(item, int) and not isinstance(item, bool) and item >= 0)

    if value is None or value == "root" or (isinstance(value, list) and all(place(item) for item in value)):
        return value
    raise ValueError(f"{value!r} does not place NICs: give a list with one entry per NIC, each a card switch "
                     "index (0, 1, ...; switch k carries cards 2k and 2k+1) or root, or root alone for all")


class NicSpec(FrozenSpec):
    """Scale-out network interfaces of a node (all identical).

    Attributes
    ----------
    count : int
        NICs (0: no scale-out network; sizing refuses what would need one).
    bandwidth : float
        Line rate of one NIC per direction, bytes/s (400 Gbit/s = 50 GB/s).
    efficiency : float
        Delivered over line rate, in (0, 1]: what a stream of large messages carries through the
        NIC, so the NIC's network link runs at ``bandwidth x efficiency``. On a compute node it is
        the RDMA protocol's own loss; on a pool node, what the pool's storage service delivers per
        NIC (protocol and storage software), measured on a whole pool.
    pcie : str or None
        The NIC's PCIe slot, ``"Gen5 x16"`` (:func:`pcie_bandwidth` gives its rate). None: on a
        compute node the slot runs at the accelerators' host link (the rule before slots were
        described); on a pool node at the NIC's line rate.
    switch : list of (int or "root"), "root" or None
        Where each NIC's slot hangs, one entry per NIC: ``k``, the PCIe switch it shares with cards
        ``2k`` and ``2k + 1`` (:data:`GPUS_PER_PCIE_SWITCH`), or ``root``, a CPU root port of its
        own (shared with no card). ``root`` alone places every NIC so. None: spread over the card
        switches in index order (NIC ``j`` of ``n`` on switch ``j x switches // n``). Compute nodes
        only.

    Default ``efficiency`` 0.975: ``ib_write_bw`` on NDR400 with messages of 1 MiB and more
    reaches ~390-395 of 400 Gb/s (hardware_facts.md section 2c, L/M), the low end taken; Azure's
    ND H100 v5 acceptance test asks at least 380 Gb/s (0.95) per NDR400 HCA with GPUDirect
    (github.com/Azure/azurehpc-health-checks pull 38, M); Mooncake's EFA transport reaches 780 of
    800 GB/s (0.975) GPU to GPU with 1 MiB blocks on p6-b300 (kvcache-ai/Mooncake
    docs/source/design/transfer-engine/efa_transport.md, measured).
    """

    count: Count  # 0: no scale-out network (sizing refuses what would need one)
    bandwidth: Bandwidth
    efficiency: Fraction = 0.975
    pcie: PcieSlot | None = None
    switch: Annotated[list[NicSwitch] | Literal["root"] | None, BeforeValidator(_nic_switches)] = None

    @model_validator(mode="after")
    def _one_place_per_nic(self) -> NicSpec:
        if isinstance(self.switch, list) and len(self.switch) != self.count:
            message = (f"{len(self.switch)} place(s) for {self.count} NIC(s): give one switch index (or root) per "
                       "NIC, or root alone for all")
            raise field_errors(NicSpec, [(("switch",), message, self.switch)])
        return self

    @property
    def delivered_bandwidth(self) -> float:
        """What one NIC carries per direction, bytes/s (line rate x efficiency)."""
        return self.bandwidth * self.efficiency

    @property
    def slot_bandwidth(self) -> float | None:
        """Per-direction rate of the NIC's PCIe slot, bytes/s (None: no slot described)."""
        if self.pcie is None:
            return None
        gen, lanes = self.pcie.split()
        return pcie_bandwidth(int(gen[3:]), int(lanes[1:]))

    def switch_of(self, j: int, switches: int) -> NicSwitch:
        """Where NIC ``j`` hangs among ``switches`` card switches: an index, or ``"root"``."""
        if self.switch is None:
            return j * switches // self.count
        if self.switch == "root":
            return "root"
        return self.switch[j]


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

    @model_validator(mode="after")
    def _nics_on_switches(self) -> NodeSpec:
        switches = -(-self.accelerators_per_node // GPUS_PER_PCIE_SWITCH)
        if isinstance(self.nics.switch, list):
            beyond = [k for k in self.nics.switch if isinstance(k, int) and k >= switches]
            if beyond:
                raise field_errors(NodeSpec, [(("nics", "switch"), (
                    f"switch {beyond[0]} does not exist: {self.accelerators_per_node} cards sit on {switches} PCIe "
                    f"switch(es), 0 to {switches - 1} (switch k carries cards 2k and 2k+1), or root"),
                    self.nics.switch)])
        return self


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
    scale_up_bandwidth : float or None
        A memory-semantic pool: the node's ports into the cards' scale-up fabric (NVLink, UB),
        all ports together, bytes/s per direction. The cards of the scale-up domain it joins
        then load and store its media over their scale-up links, with no NIC, host DRAM or copy
        engine on the way (load/store or DMA over the fabric). None: reached over the network
        only.
    scale_up_latency_s : float or None
        A card's access to the node over the scale-up fabric, seconds, besides the media's own
        ``access_latency_s`` (None: the generic card-to-card 3 us of
        :data:`kvsim.network.cluster_graph.SCALE_UP_LATENCY_S`).
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
    scale_up_bandwidth: Bandwidth | None = None
    scale_up_latency_s: Seconds | None = None
    power_w: Watts | None = None
    sources: dict[str, str]

    @model_validator(mode="after")
    def _one_io_complex(self) -> PoolNodeSpec:
        if self.scale_up_latency_s is not None and self.scale_up_bandwidth is None:
            raise field_errors(PoolNodeSpec, [(("scale_up_latency_s",), (
                "a scale-up latency without scale_up_bandwidth: give the node's scale-up ports' bandwidth to make "
                "it a memory-semantic pool, or drop the latency"), self.scale_up_latency_s)])
        if self.nics.switch is not None:
            raise field_errors(PoolNodeSpec, [(("nics", "switch"), (
                "a pool node has one I/O complex that every NIC and its media share; nics.switch places NICs "
                "among a compute node's card switches and does not apply here"), self.nics.switch)])
        return self
