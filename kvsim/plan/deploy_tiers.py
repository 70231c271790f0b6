"""The KV offload tiers of a system as engine settings: LMCache or vLLM's offloader, SGLang HiCache.

kvsim models a DRAM or NVMe tier as one store per node shared by the instances on it; the
engines hold one store per instance (per worker process, for LMCache and HiCache), so a node's
capacity is split evenly among the instances on the node and, where the engine sizes per
rank, among the instance's cards. Sizes are rounded *down* so an engine never holds more
than the plan gave it. Units, from the released sources (``tests/fixtures/engine_flags.json``):

- vLLM ``--kv-offloading-size``: GiB, summed over the instance's TP ranks;
- LMCache ``LMCACHE_MAX_LOCAL_CPU_SIZE`` / ``LMCACHE_MAX_LOCAL_DISK_SIZE``: GiB (x 1024**3) per
  worker process, one per card;
- SGLang ``--hicache-size``: whole decimal GB (x 1e9) per rank.

A remote pool is a Mooncake store whose master the engines reach at ``kv-pool:50051`` (50051 is
the master's default port in SGLang's Mooncake store README); the pool servers themselves are
deployed separately.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kvsim.plan.deploy_types import EngineCommand, Gap
from kvsim.units import format_quantity

if TYPE_CHECKING:
    from kvsim.sim.sizing import PoolSizing

__all__ = ["MOONCAKE_CONFIG_PATH", "POOL_MASTER", "offload_settings"]

POOL_MASTER = "kv-pool:50051"
"""The remote pool's Mooncake master as the engines address it: a Kubernetes Service named
``kv-pool`` (an operator's choice) on the master's default port."""

MOONCAKE_CONFIG_PATH = "/etc/kvsim/mooncake.json"
"""Where vLLM's MooncakeStoreConnector reads its client configuration (``MOONCAKE_CONFIG_PATH``)."""

NVME_MOUNT = "/mnt/kv-nvme"
"""Where each node's NVMe KV tier is expected to be mounted (an operator's choice)."""

GIB = 2.0**30
GB = 1e9


def _b(value_bytes: float) -> str:
    return format_quantity(value_bytes, "bytes")


def _gib(value_bytes: float) -> str:
    return f"{math.floor(value_bytes / GIB * 100) / 100:g}"


def mooncake_client_config() -> dict[str, Any]:
    """vLLM's Mooncake store client file (``MooncakeStoreConfig.from_file`` keys): engines contribute
    no memory of their own (``standalone-store`` requires ``global_segment_size`` 0)."""
    return {"metadata_server": "P2PHANDSHAKE", "master_server_address": POOL_MASTER, "protocol": "rdma",
            "mode": "standalone-store", "global_segment_size": 0}


def offload_settings(vllm: EngineCommand, sglang: EngineCommand, spec: Any, system: str, pool: PoolSizing,
                     per_node: int) -> tuple[dict[str, Any] | None, list[Gap]]:
    """Add the tiers' settings to both commands; return vLLM's offload connector entry and the gaps.

    ``per_node`` is the number of instances sharing one node's tiers.
    """
    c = spec.systems[system].kv_cache
    p = f"systems.{system}.kv_cache"
    cards = pool.layout.cards
    name = c.connector.name if c.connector is not None else None
    gaps: list[Gap] = []
    dram = c.dram.capacity / per_node if c.dram is not None else None
    nvme_node = None
    if c.nvme is not None:
        nvme_node = c.nvme.capacity or pool.node.nvme.count * pool.node.nvme.capacity_bytes
    nvme = nvme_node / per_node if nvme_node is not None else None
    share = f"capacity / {per_node} instances per node"
    nvme_src = (f"{p}.nvme.capacity",) if c.nvme is not None and c.nvme.capacity else (
        f"catalog:nodes.{pool.node.name}.nvme",)
    config = _vllm_tiers(vllm, c, p, name, dram, nvme, cards, share, nvme_src, nvme_node, gaps, spec)
    _sglang_tiers(sglang, c, p, dram, nvme, cards, share, nvme_src, nvme_node, gaps)
    return config, gaps


def _vllm_tiers(vllm, c, p, name, dram, nvme, cards, share, nvme_src, nvme_node, gaps, spec) -> dict[str, Any] | None:
    if dram is None and nvme is None and c.remote is None:
        return None
    if name == "vllm":  # the native offloader: host DRAM only (the scenario refuses NVMe / remote with it)
        vllm.add("--kv-offloading-backend", "native", (f"{p}.connector.name",), (name,))
        vllm.add("--kv-offloading-size", _gib(dram), (f"{p}.dram.capacity",), (_b(c.dram.capacity),),
                 f"GiB per instance (summed over its TP ranks): {share}")
        return None
    if name == "mooncake":
        if c.remote is None:
            gaps.append(Gap("vllm", f"{p}.connector.name", name, "vLLM's Mooncake store connector reaches a "
                            "Mooncake store, not node-local tiers: name lmcache for DRAM / NVMe tiers"))
            return None
        for tier, size in (("dram", dram), ("nvme", nvme)):
            if size is not None:
                gaps.append(Gap("vllm", f"{p}.{tier}", "given", "vLLM's Mooncake store connector has no node-local "
                                "tier; only the remote pool is written"))
        vllm.set_env("MOONCAKE_CONFIG_PATH", MOONCAKE_CONFIG_PATH, (f"{p}.remote.pool_node",), (c.remote.pool_node,),
                     f"client file (mooncake.json): master {POOL_MASTER}, no engine memory in the pool")
        return {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
    chunk = (c.connector.chunk_tokens if c.connector is not None and c.connector.chunk_tokens else None)
    if chunk is not None:
        vllm.set_env("LMCACHE_CHUNK_SIZE", chunk, (f"{p}.connector.chunk_tokens",), (chunk,), "tokens")
    else:
        block = spec.workload.block_tokens
        vllm.set_env("LMCACHE_CHUNK_SIZE", block, ("workload.block_tokens",), (block,),
                     "tokens: no connector named, kvsim's cache block")
    if name is None or name == "custom":
        gaps.append(Gap("vllm", f"{p}.connector", name or "absent", "no engine connector named: LMCache written "
                        "(it reaches DRAM, NVMe and a remote store)"))
    vllm.set_env("LMCACHE_LOCAL_CPU", "True" if dram is not None else "False", (f"{p}.dram",),
                 ("given" if dram is not None else "absent",))
    if dram is not None:
        vllm.set_env("LMCACHE_MAX_LOCAL_CPU_SIZE", _gib(dram / cards), (f"{p}.dram.capacity",), (_b(c.dram.capacity),),
                     f"GiB per worker: {share} / {cards} cards")
    if nvme is not None:
        vllm.set_env("LMCACHE_LOCAL_DISK", f"file://{NVME_MOUNT}/", (f"{p}.nvme",), ("given",),
                     "the node's NVMe tier, mounted there")
        vllm.set_env("LMCACHE_MAX_LOCAL_DISK_SIZE", _gib(nvme / cards), nvme_src, (_b(nvme_node),),
                     f"GiB per worker: {share} / {cards} cards")
    if c.remote is not None:
        vllm.set_env("LMCACHE_REMOTE_URL", f"mooncakestore://{POOL_MASTER}/", (f"{p}.remote.pool_node",), (c.remote.pool_node,),
                     "the remote pool as a Mooncake store")
        gaps.append(Gap("vllm", f"{p}.remote", c.remote.pool_node, "LMCache's own Mooncake client settings "
                        "(metadata server, protocol, device, in its extra_config) are not written: its defaults apply"))
    return {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def _sglang_tiers(sglang, c, p, dram, nvme, cards, share, nvme_src, nvme_node, gaps) -> None:
    if dram is None and nvme is None and c.remote is None:
        return
    tiers = tuple(f"{p}.{t}" for t in ("dram", "nvme", "remote") if getattr(c, t) is not None)
    sglang.add("--enable-hierarchical-cache", None, tiers, tuple("given" for _ in tiers), "HiCache: a tier below HBM")
    if dram is not None:
        gb = math.floor(dram / cards / GB)
        if gb >= 1:
            sglang.add("--hicache-size", gb, (f"{p}.dram.capacity",), (_b(c.dram.capacity),),
                       f"whole GB (1e9 bytes) per rank: {share} / {cards} cards, rounded down")
        else:
            gaps.append(Gap("sglang", f"{p}.dram.capacity", f"{dram / cards:.4g} B per rank",
                            "under 1 GB per rank: --hicache-size takes whole GB"))
    else:
        gaps.append(Gap("sglang", f"{p}.dram", "absent", "HiCache stages lower tiers through a host pool: SGLang "
                        "sizes one by its default --hicache-ratio, DRAM kvsim did not model"))
    sglang.add("--hicache-write-policy", c.write_policy, (f"{p}.write_policy",), (c.write_policy,))
    if c.remote is not None:
        sglang.add("--hicache-storage-backend", "mooncake", (f"{p}.remote.pool_node",), (c.remote.pool_node,))
        sglang.set_env("MOONCAKE_MASTER", POOL_MASTER, (f"{p}.remote.pool_node",), (c.remote.pool_node,),
                       "the remote pool's Mooncake master")
        sglang.set_env("MOONCAKE_PROTOCOL", "rdma", (f"{p}.remote.pool_node",), (c.remote.pool_node,),
                       "the pool is reached over the scale-out RDMA network")
        sglang.set_env("MOONCAKE_GLOBAL_SEGMENT_SIZE", 0, (f"{p}.remote.pool_node",), (c.remote.pool_node,),
                       "the engines lend no memory: the pool nodes hold the capacity")
        if nvme is not None:
            gaps.append(Gap("sglang", f"{p}.nvme", "given", "HiCache has one storage backend: the remote pool is "
                            "written, the node NVMe tier is not"))
    elif nvme is not None:
        sglang.add("--hicache-storage-backend", "file", (f"{p}.nvme",), ("given",))
        sglang.set_env("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", NVME_MOUNT, (f"{p}.nvme",), ("given",),
                       "the node's NVMe tier, mounted there")
        sglang.set_env("SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE", int(nvme // cards), nvme_src, (_b(nvme_node),),
                       f"bytes: {share} / {cards} cards (a bound at most the instance's share)")
