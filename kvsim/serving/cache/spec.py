"""How a system caches and moves KV: prefix caching in HBM and offload tiers below it.

A system without ``kv_cache`` behaves exactly like an engine with prefix caching off: every
prompt is computed in full and nothing is kept after a request finishes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from kvsim.serving.cache.connector import PRESETS, ConnectorSpec, Fanout
from kvsim.spec_types import FrozenSpec, PositiveBytes, PositiveInt, field_errors

__all__ = ["ConnectorSpec", "EvictionKind", "MAX_WRITE_FLOWS", "PeerMode", "TierSpec", "RemotePoolSpec", "KVCacheSpec"]

EvictionKind = Literal["lru", "lfu", "s3fifo"]

MAX_WRITE_FLOWS = 256
"""Default ``max_write_flows`` of every lower tier (see :class:`TierSpec`).

Why 256 flows per store. The limit must never idle the device: sustaining its write bandwidth
``D`` with flows of ``S`` bytes that each take at least ``T`` seconds alone (their bytes over
the path plus its latency) needs ``D * T / S`` flows in flight (Little's law; the
bandwidth-delay product counted in flows). For the catalog's media, with the smallest per-card
write of a shipped setup (one 16-token block of Qwen3-8B per card of a TP-8 instance, 288 KiB)
and the medium's own edge as ``D`` (an upper bound), that is at most 2 flows for a node's NVMe,
8 for an NVMe pool node, about 45 for host DRAM and 60 for a DRAM pool node
(``tests/test_write_queue.py`` recomputes it). 256 is four times the largest, so the limit only
binds when writes outpace the device, never because of it. It also leaves room for bursts (every
prompt finishing in one step is written at once): offload_gap, offload_gap_decode and
plan_offload, run at full length, have at most 64 write flows in flight to one store
(routing_mooncake, 40 s of it: 2). Above it, the flow solver pays about 10 us per flow at every
flow start and end, so a store that cannot keep up costs at most ~3 ms per re-solve instead of
growing without bound (16 k flows were seen under overload before the limit).
"""

PeerMode = Literal["none", "copy_in", "read_in_place"]
"""How an instance may use KV blocks held in other instances' HBM (``kv_cache.peer_hbm``)."""


class TierSpec(FrozenSpec):
    """A per-node offload tier (host DRAM or local NVMe).

    ``capacity`` is the KV bytes set aside on each node; for NVMe it defaults to all the node's
    drives, for DRAM it must be given (host memory is shared with everything else).

    ``max_write_flows`` bounds the store's write queue: the cache copies (write-through,
    write-back, promotion) in flight to one store, counted in flows (one per card of the
    writing instance). A copy that would go over it is skipped -- the blocks are not copied to
    that store, and stay where they already are -- and counted in the summary
    (``cache.writes_skipped``, ``cache.write_bytes_skipped``). A copy is always taken when none
    is in flight. Swaps of preempted sequences are never skipped. Default 256 flows, about four
    times what keeps the catalog's fastest medium busy (why: ``MAX_WRITE_FLOWS`` in
    ``kvsim/serving/cache/spec.py``).
    """

    capacity: PositiveBytes | None = None  # a tier of 0 bytes holds nothing: omit the tier instead
    eviction: EvictionKind = "lru"
    max_write_flows: PositiveInt = MAX_WRITE_FLOWS


class RemotePoolSpec(FrozenSpec):
    """A remote KV pool: ``nodes`` pool nodes of catalog type ``pool_node``, shared by all compute.

    ``max_write_flows`` bounds each pool node's write queue, as for :class:`TierSpec`.
    """

    pool_node: str
    nodes: PositiveInt = 1
    eviction: EvictionKind = "lru"
    max_write_flows: PositiveInt = MAX_WRITE_FLOWS


class KVCacheSpec(FrozenSpec):
    """Prefix caching and KV offload of one system.

    Attributes
    ----------
    hbm_eviction : str
        Policy for cached prefix blocks kept in an instance's HBM after their requests finish.
    dram, nvme : TierSpec or None
        Per-node host-DRAM and local-NVMe tiers (None = tier absent).
    remote : RemotePoolSpec or None
        A remote pool reached over the scale-out network.
    write_policy : str
        ``write_through``: new prompt blocks are written down to every lower tier after prefill.
        ``write_back``: blocks are written to the next tier down only when evicted.
    gpu_direct : bool
        NIC and NVMe DMA straight into device memory (GPU-Direct RDMA / GDS); otherwise data
        bounces through host DRAM (an extra copy). Default true, or the connector's ``path``.
    load_mode : str
        ``overlap``: cached KV loads layer by layer while the suffix is computed; the first token
        waits for whichever finishes last. ``before``: the load completes before compute starts.
        Default ``overlap``, or the connector's (``layerwise``).
    load_policy : str
        ``always``: load every cached block found. ``faster``: recompute a hit when the model
        predicts recomputing it is faster than loading it over its path.
    promote_on_hit : bool
        A block loaded from NVMe or the remote pool is also filed in the node's DRAM tier (free
        on the host-bounce path, where the bytes pass through DRAM anyway; a device-to-host
        copy with GPU-Direct).
    prewarm : bool
        Start with the tiers below HBM already holding what a long-running cache would: the
        prompt blocks of requests drawn independently from the same workload (not the run's own
        requests), inserted until each tier has turned over twice, or (checked every 1,000
        prompts) fewer than 0.5 % of future prompts would, at 95 % confidence, read a document
        no draw offered, or 200,000 draws (``SystemCache.prewarm``). Without it, a short run
        measures a cold cache.
    io_size : float or None
        Size of one storage I/O, bytes, for transfers to and from NVMe and the remote pool (see
        :mod:`kvsim.network.storage_io`); it overrides the connector's. None: the connector's
        I/O size (:mod:`kvsim.serving.cache.connector`), or without one, one I/O per cache
        block per card. Small sizes (a page per layer, "64 KiB") pay more per-I/O latency, IOPS
        and CPU.
    connector : ConnectorSpec or None
        How the KV connector moves bytes (object and I/O sizes, host path, threads, queue depth,
        pinned buffer, layer-wise loading, fan-out): a named preset (``{name: lmcache}``,
        ``mooncake``, ``vllm``) with any field overridden, or ``custom``. None: one I/O per cache
        block per card and the node's host staging, as before connectors were modelled.
    fanout : str or None
        KV several ranks of an instance need (the MLA latent; GQA heads replicated when TP
        exceeds the KV head count): ``per_rank`` (each rank reads, writes and stores its own
        copy) or ``once_per_node`` (one copy per distinct shard crosses the NIC; loads are handed
        on over the scale-up links, or PCIe card to card). None: the connector's; without a
        connector, loads per rank and writes of the distinct bytes spread over the cards.
    preemption : str
        A sequence preempted for lack of HBM: ``recompute`` drops its own pages and computes them
        again later (prompt blocks already filed in the HBM cache stay and usually hit again);
        ``swap`` copies its own pages to host DRAM and back when readmitted (no recompute; the
        copies cross PCIe and the DRAM channels like any other transfer).
    peer_hbm : str
        Prefix blocks held in *other* instances' HBM (see :mod:`kvsim.serving.cache.access`).
        ``none`` (default): an instance uses only its own HBM and the tiers below. ``copy_in``:
        a block in a peer's HBM is a hit, copied into the reader's HBM at admission -- over the
        scale-up links inside the reader's addressing domain (source ``peer_hbm``), over the
        message-passing path (NIC / RDMA, or host memory without a scale-up link) from another
        domain (source ``other_domain``). Copies duplicate bytes: value reuse, not sharing.
        ``read_in_place``: byte sharing inside a domain (cards with scale-up links only). The
        domain's HBM is one KV pool with one physical copy of each block, reference-counted,
        and domain-wide eviction (:mod:`kvsim.serving.cache.domain_pool`); a block homed in a
        peer is not copied: every engine step of a reader pays the bytes it reads over the
        scale-up links (:mod:`kvsim.serving.cache.remote_reads`). Across domains a hit is
        copied as with ``copy_in``.
    """

    hbm_eviction: EvictionKind = "lru"
    dram: TierSpec | None = None
    nvme: TierSpec | None = None
    remote: RemotePoolSpec | None = None
    write_policy: Literal["write_through", "write_back"] = "write_through"
    gpu_direct: bool = True
    load_mode: Literal["overlap", "before"] = "overlap"
    load_policy: Literal["always", "faster"] = "faster"
    promote_on_hit: bool = True
    preemption: Literal["recompute", "swap"] = "recompute"
    prewarm: bool = False
    io_size: PositiveBytes | None = None
    peer_hbm: PeerMode = "none"
    connector: ConnectorSpec | None = None
    fanout: Fanout | None = None

    @model_validator(mode="before")
    @classmethod
    def _connector_defaults(cls, data: Any) -> Any:
        """``gpu_direct`` and ``load_mode`` not given: the named connector's path and pipelining."""
        if not isinstance(data, dict) or not isinstance(data.get("connector"), dict):
            return data
        connector = data["connector"]
        values = {**PRESETS.get(connector.get("name", "custom"), {}), **connector}
        data = dict(data)
        if "gpu_direct" not in data and "path" in values:
            data["gpu_direct"] = values["path"] == "gpu_direct"
        if "load_mode" not in data and isinstance(values.get("layerwise"), bool):
            data["load_mode"] = "overlap" if values["layerwise"] else "before"
        return data

    @model_validator(mode="after")
    def _connector_reaches_tiers(self) -> KVCacheSpec:
        if self.connector is not None and self.connector.name == "vllm" and (self.nvme or self.remote):
            tier = "nvme" if self.nvme is not None else "remote"
            raise field_errors(KVCacheSpec, [(("connector", "name"), "vLLM's native offloading connector "
                                              f"offloads to host DRAM only, not to {tier}: name lmcache or "
                                              "mooncake, or custom, for NVMe and remote pools", "vllm")])
        return self
