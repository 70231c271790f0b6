"""Prefix caching and KV offload as the serving layer uses them: the ``kv_cache`` spec, the tiers of
a system (:class:`SystemCache`) and each instance's admission hook (:class:`InstanceCache`)."""

from kvsim.serving.cache.instance_cache import InstanceCache, SeqCache
from kvsim.serving.cache.spec import MAX_WRITE_FLOWS, EvictionKind, KVCacheSpec, RemotePoolSpec, TierSpec
from kvsim.serving.cache.tiers import SOURCES, TIERS, CacheGeometry, SystemCache

__all__ = [
    "InstanceCache", "SeqCache", "KVCacheSpec", "TierSpec", "RemotePoolSpec", "EvictionKind",
    "SystemCache", "CacheGeometry", "TIERS", "SOURCES", "MAX_WRITE_FLOWS",
]
