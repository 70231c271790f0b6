"""How a KV connector moves bytes: its object and I/O sizes, its host path, and load-once fan-out.

A *connector* (LMCache, Mooncake Store under SGLang HiCache, vLLM's native offloading) decides
the unit the storage sees and what the host does per unit. kvsim keeps one flow per card per
transfer (never an event per I/O or per layer); the connector only changes what each flow costs,
in closed form (:mod:`kvsim.network.storage_io`):

* **Objects and I/Os.** A connector stores ``chunk_tokens`` tokens of one rank's KV as one object,
  holding every layer (``objects: per_chunk``) or one layer (``per_layer``); its transport splits
  an object into I/Os of at most ``max_io_bytes`` (Mooncake Transfer Engine's 64 KiB RDMA slice).
  A flow of ``B`` bytes is ``n = ceil(B / s)`` I/Os of ``s = min(object, max_io_bytes)`` bytes.
* **Host path.** ``host_bounce`` lands the bytes in pinned host buffers (the NIC or drive DMAs
  there; ``copy_threads`` CPU threads copy them at a memcpy rate when the connector copies at
  all) and a copy engine or GPU kernel moves them to the card; ``gpu_direct`` (GPUDirect RDMA,
  GDS) lands them in device memory. The bounce pays per I/O ``per_io_cpu_s / batch_ios`` of CPU
  on ``max(copy_threads, io_threads)`` threads, the copy, two crossings of the host's DDR
  channels (shared with everything else on the host) and room in a ``pinned_buffer``; GPU-Direct
  pays none of it. Both pay the media's IOPS, the path's per-I/O latency and the queue depth
  (``min(queue_depth, the medium's)`` I/Os outstanding per flow).
* **Layer-wise pipelining** (``layerwise``) is kvsim's ``load_mode: overlap``; without it the load
  completes before compute starts (``load_mode: before``).
* **Fan-out** (``kv_cache.fanout``). KV that several ranks of an instance need -- the MLA latent
  (every rank holds all of it) and GQA heads replicated when TP exceeds the KV head count -- is
  read ``per_rank`` (every rank its own copy over the NIC: ``tp`` times the latent for MLA) or
  ``once_per_node``: one reader per distinct shard reads it and a ring broadcast hands it on over
  the scale-up links (NVLink, UB), or card to card over PCIe where that is all there is, charging
  those links. Writes likewise: ``per_rank`` writes and stores every rank's copy,
  ``once_per_node`` one copy per distinct shard.

Presets (``name``), with the code they come from (snapshots cited in
``docs/research/issue24_offload_sources.md``):

=================  ============================================================================
``lmcache``        LMCache v1 with its Mooncake remote backend. 256-token chunks
                   (``lmcache/v1/config.py`` ``chunk_size``), one object per chunk per rank
                   holding all layers (``use_layerwise`` False; ``KV_2LTD``), so no layer-wise
                   overlap. Remote reads land in the pinned local-CPU buffer registered with
                   Mooncake (``mooncakestore_connector.py`` ``_register_cpu_buffer``,
                   ``local_buffer_size`` 1 GiB) and a CUDA kernel copies them to the card (no
                   CPU copy threads, ``gpu_connectors.py``): host bounce. Mooncake Transfer
                   Engine slices to 64 KiB (``config.h`` ``slice_size``), keeps 2 QPs x 256 WRs
                   (512) outstanding per endpoint and polls with 2 worker threads per NIC
                   (``num_qp_per_ep``, ``max_wr``, ``workers_per_ctx``). MLA: rank 0 saves
                   (``save_only_first_rank``) and loads once, then broadcasts over the TP group
                   (``cache_engine.py`` ``_broadcast_or_receive_memory_objs``): once per node.
                   GQA: keys carry the rank (``CacheEngineKey``): per rank.
``mooncake``       Mooncake Store as SGLang HiCache's L3. One object per page holding all
                   layers (``page_first``, Mooncake ``hicache-design.md``); the page is taken to
                   be the cache block (ASSUMPTION: HiCache's page size is a launch flag). L3 reads
                   into the registered host pool (L2), a GPU kernel moves them on: host bounce
                   without copy threads; the same Transfer Engine figures as above; L2 -> GPU
                   loads overlap compute layer by layer (hicache-design.md, ASSUMPTION: not
                   re-read). MLA: only TP 0 writes (``cache_controller.py`` ``backup_skip``), every
                   rank reads (the dedup mode is opt-in, off by default, ``mla_host_dedup.py``).
                   GQA: per-rank keys (``mha_suffix``).
``vllm``           vLLM's native ``OffloadingConnector`` (CPU only): the GPU block (16 tokens,
                   ASSUMPTION: vLLM's default CUDA block size) per KV tensor, i.e. per layer
                   (``vllm/v1/kv_offload/worker/cpu_gpu.py`` ``swap_blocks``), copy-engine DMA,
                   no CPU threads, loads before compute, every rank its own tensors
                   (``cpu/spec.py``). It offloads to host DRAM only.
``custom``         Nothing preset: every field as given (defaults as in the field list).
=================  ============================================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import model_validator

from kvsim.network.storage_io import HostPath
from kvsim.spec_types import Count, FrozenSpec, PositiveBytes, PositiveInt, Seconds

__all__ = [
    "PRESETS",
    "ConnectorName",
    "ConnectorSpec",
    "Fanout",
    "FanoutPlan",
    "fanout_plan",
    "io_size_bytes",
    "object_bytes",
    "resolve_fanout",
]

ConnectorName = Literal["custom", "lmcache", "mooncake", "vllm"]
Fanout = Literal["per_rank", "once_per_node"]

# (quantities as unit strings: the presets merge into a file's fields, where a bare number is refused)
MOONCAKE_TE = {  # Mooncake Transfer Engine code defaults (mooncake-transfer-engine/include/config.h)
    "max_io_bytes": "64 KiB",  # GlobalConfig::slice_size = 65536
    "queue_depth": 512,        # num_qp_per_ep 2 x max_wr 256 outstanding work requests per endpoint
    "io_threads": 2,           # workers_per_ctx: completion-polling threads per RDMA context (NIC)
}

PRESETS: dict[str, dict[str, Any]] = {
    "custom": {},
    "lmcache": {"chunk_tokens": 256, "objects": "per_chunk", "layerwise": False, "path": "host_bounce",
                "copy_threads": 0, "pinned_buffer": "1 GiB", **MOONCAKE_TE,
                "mla_fanout": ("once_per_node", "once_per_node"), "gqa_fanout": ("per_rank", "per_rank")},
    "mooncake": {"chunk_tokens": None, "objects": "per_chunk", "layerwise": True, "path": "host_bounce",
                 "copy_threads": 0, **MOONCAKE_TE,
                 "mla_fanout": ("per_rank", "once_per_node"), "gqa_fanout": ("per_rank", "per_rank")},
    "vllm": {"chunk_tokens": 16, "objects": "per_layer", "layerwise": False, "path": "host_bounce",
             "copy_threads": 0, "mla_fanout": ("per_rank", "per_rank"), "gqa_fanout": ("per_rank", "per_rank")},
}
"""Each named connector's field values (see the module docstring for their sources); fields a
preset leaves out keep :class:`ConnectorSpec`'s defaults. ``mla_fanout`` / ``gqa_fanout`` are
(load, write) fan-out modes for MLA models and for GQA models with replicated heads."""


class ConnectorSpec(FrozenSpec):
    """How the system's KV connector moves bytes (``kv_cache.connector``).

    Fields left out take the named connector's values (:data:`PRESETS`; the module docstring
    cites them), else the defaults below.

    Attributes
    ----------
    name : str
        ``lmcache``, ``mooncake``, ``vllm`` or ``custom`` (no preset).
    chunk_tokens : int or None
        Tokens of one rank's KV in one stored object (None: the cache block, ``block_tokens``).
    objects : str
        ``per_chunk``: one object holds every layer of a chunk; ``per_layer``: one per layer.
    max_io_bytes : float or None
        The transport splits an object into I/Os of at most this (None: one I/O per object).
    batch_ios : int
        I/Os submitted per call; the host's per-I/O CPU cost is paid once per call (ASSUMPTION:
        the cost is the submission and completion round a batched call shares). Default 1.
    queue_depth : int or None
        I/Os the transport keeps outstanding per flow; a flow keeps the smaller of this and the
        medium's (None: the medium's).
    path : str
        ``gpu_direct`` (GPUDirect RDMA / GDS into device memory) or ``host_bounce`` (through
        pinned host buffers). Sets ``kv_cache.gpu_direct`` when that is not given.
    copy_threads : int or None
        CPU threads copying each byte on the bounce path (None: the node's ``host_staging``).
    io_threads : int
        CPU threads sharing the per-I/O work when nothing is copied (default 1).
    per_io_cpu_s : float or None
        Host CPU per I/O on the bounce path, seconds (None: the node's ``host_staging``).
    pinned_buffer : float or None
        Pinned staging buffer per node, bytes (None: unbounded). A byte holds its room for its
        I/O's latency, so a node's bounce traffic is at most ``pinned_buffer / latency``.
    layerwise : bool
        Loads pipelined layer by layer with compute; sets ``kv_cache.load_mode`` (``overlap`` /
        ``before``) when that is not given. Default True.
    mla_fanout, gqa_fanout : tuple of str
        (load, write) fan-out of the connector for MLA models and for GQA models whose KV heads
        are fewer than the TP ranks; ``kv_cache.fanout`` overrides both. Default per rank.
    """

    name: ConnectorName = "custom"
    chunk_tokens: PositiveInt | None = None
    objects: Literal["per_chunk", "per_layer"] = "per_chunk"
    max_io_bytes: PositiveBytes | None = None
    batch_ios: PositiveInt = 1
    queue_depth: PositiveInt | None = None
    path: Literal["gpu_direct", "host_bounce"] = "gpu_direct"
    copy_threads: Count | None = None
    io_threads: PositiveInt = 1
    per_io_cpu_s: Seconds | None = None
    pinned_buffer: PositiveBytes | None = None
    layerwise: bool = True
    mla_fanout: tuple[Fanout, Fanout] = ("per_rank", "per_rank")
    gqa_fanout: tuple[Fanout, Fanout] = ("per_rank", "per_rank")

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: Any) -> Any:
        """Fill the fields left out from the named connector's preset."""
        if isinstance(data, dict):
            preset = PRESETS.get(data.get("name", "custom"))
            if preset is not None:  # (an unknown name is refused by the field's own check)
                data = {**preset, **data}
        return data

    def host_path(self) -> HostPath:
        """What the network's storage model needs of this connector (:class:`HostPath`)."""
        return HostPath(copy_threads=self.copy_threads, io_threads=self.io_threads,
                        per_io_cpu_s=self.per_io_cpu_s, batch_ios=self.batch_ios,
                        queue_depth=self.queue_depth, pinned_buffer_bytes=self.pinned_buffer)


def object_bytes(connector: ConnectorSpec, unit_bytes: float, block_tokens: int, num_layers: int) -> float:
    """Bytes of one stored object, given ``unit_bytes`` of one rank's KV per cache block.

    ``chunk_tokens`` tokens (the block when None) of every layer, or of one layer
    (``per_layer``): ``unit_bytes * chunk / block_tokens`` (``/ num_layers``).
    """
    chunk = connector.chunk_tokens or block_tokens
    nbytes = unit_bytes * chunk / block_tokens
    return nbytes / num_layers if connector.objects == "per_layer" else nbytes


def io_size_bytes(connector: ConnectorSpec, unit_bytes: float, block_tokens: int, num_layers: int) -> float:
    """Size of one I/O: the object, or the transport's ``max_io_bytes`` if smaller."""
    size = object_bytes(connector, unit_bytes, block_tokens, num_layers)
    return min(size, connector.max_io_bytes) if connector.max_io_bytes is not None else size


@dataclass(frozen=True)
class FanoutPlan:
    """Which cards of an instance (by rank) move a transfer's bytes.

    Attributes
    ----------
    readers : tuple of int
        Ranks whose flows cross the NIC (or the host link): every rank per rank, else the first
        rank of each group of ranks holding the same shard.
    hops : tuple of (int, int)
        Card-to-card copies that hand a reader's bytes on (a ring broadcast along each group:
        ``r0 -> r1 -> r2 ...``; every hop carries the reader's bytes once). Empty for writes and
        per-rank loads.
    """

    readers: tuple[int, ...]
    hops: tuple[tuple[int, int], ...]


def fanout_plan(tp: int, shards: int, mode: Fanout, load: bool) -> FanoutPlan:
    """The cards that move a transfer of an instance of ``tp`` ranks holding ``shards`` distinct
    KV shards (1 for MLA, the KV head count for GQA with fewer heads than ranks, ``tp`` when
    nothing is replicated).

    ``per_rank``: every rank. ``once_per_node``: the first rank of each group of ``tp / shards``
    ranks sharing a shard (engines give consecutive ranks the same head); a load hands it on
    along the group, a write needs no hop (every rank of the group holds the bytes already).
    A ``shards`` that does not divide ``tp`` cannot be grouped: every rank then, as per rank.
    """
    if mode == "per_rank" or shards >= tp or tp % shards:
        return FanoutPlan(tuple(range(tp)), ())
    group = tp // shards
    readers = tuple(range(0, tp, group))
    hops = tuple((r + k, r + k + 1) for r in readers for k in range(group - 1)) if load else ()
    return FanoutPlan(readers, hops)


def resolve_fanout(fanout: Fanout | None, connector: ConnectorSpec | None, mla: bool,
                   replicated: bool) -> tuple[str, str]:
    """(load, write) fan-out of a system: ``kv_cache.fanout`` for both if given, else the named
    connector's for the model's kind, else ``("per_rank", "legacy")``.

    ``legacy`` is kvsim's write accounting before connectors: each card writes ``1/tp`` of the
    block's distinct bytes (the bytes once, spread over the cards; stores hold them once).
    """
    if fanout is not None:
        return fanout, fanout
    if connector is None:
        return "per_rank", "legacy"
    if mla:
        return connector.mla_fanout
    if replicated:
        return connector.gqa_fanout
    return "per_rank", "per_rank"


def stream_time_s(ios: int, nbytes: float, bandwidths_Bps: list[float], latency_s: float, queue_depth: int,
                  per_io_s: float = 0.0, threads: int = 1) -> float:
    """Closed form of one uncontended I/O stream, seconds: ``ios`` I/Os of ``nbytes`` in all.

    ``T = max(L + max(B / min(bandwidths), n * c / k), ceil(n / q) * L)``: the bytes at the
    slowest link or the per-I/O work ``c`` spread over ``k`` threads, whichever binds, plus one
    latency; or ``ceil(n / q)`` round trips when the queue depth binds.
    """
    busy = max(nbytes / min(bandwidths_Bps), ios * per_io_s / threads)
    return max(latency_s + busy, math.ceil(ios / queue_depth) * latency_s)
