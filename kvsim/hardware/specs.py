"""Immutable descriptions of accelerators and server nodes.

Figures are SI floats: bytes, bytes/s (per direction for links), FLOP/s (dense, no sparsity),
watts, US dollars. Every catalog entry carries a ``sources`` map naming where its figures come
from (see ``kvsim/hardware/data/*.yaml``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from kvsim.dtypes import DTYPE_BYTES
from kvsim.spec_types import Bandwidth, Bytes, FlopRate, Fraction, FrozenSpec, Seconds, Watts

__all__ = [
    "EfficiencySpec", "AcceleratorSpec", "NvmeSpec", "NicSpec", "NodeSpec", "PoolNodeSpec", "DTYPE_BYTES",
]



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


class AcceleratorSpec(FrozenSpec):
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
    """

    name: str = ""
    vendor: str
    memory_bytes: Bytes
    memory_kind: str
    memory_bandwidth: Bandwidth
    flops: dict[str, FlopRate]
    scale_up_bandwidth: Bandwidth | None = None
    scale_up_latency_s: Seconds | None = None
    host_link: str
    host_link_bandwidth: Bandwidth
    tdp_w: Watts | None = None
    price_usd: float | None = None
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
    """Local NVMe drives of a node (all identical)."""

    count: int = Field(ge=0)
    capacity_bytes: Bytes
    read_bandwidth: Bandwidth
    write_bandwidth: Bandwidth


class NicSpec(FrozenSpec):
    """Scale-out network interfaces of a node (all identical)."""

    count: int = Field(ge=0)
    bandwidth: Bandwidth


class NodeSpec(FrozenSpec):
    """A server: a number of identical accelerators plus host memory, drives and NICs."""

    name: str = ""
    accelerator: str
    accelerators_per_node: int = Field(gt=0)
    host_dram_bytes: Bytes
    host_dram_bandwidth: Bandwidth
    nvme: NvmeSpec
    nics: NicSpec
    price_usd: float | None = None
    sources: dict[str, str]


class PoolNodeSpec(FrozenSpec):
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
        Media access latency added to each transfer (NVMe read ~tens of us, DRAM ~us).
    nics : NicSpec
        The node's network interfaces.
    """

    name: str = ""
    medium: Literal["dram", "nvme"]
    capacity_bytes: Bytes
    read_bandwidth: Bandwidth
    write_bandwidth: Bandwidth
    access_latency_s: Seconds
    nics: NicSpec
    price_usd: float | None = None
    sources: dict[str, str]
