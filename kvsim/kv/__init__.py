"""KV-cache memory: paged pools in device memory, tiered block stores, a cluster-wide index."""

from kvsim.kv.block_pool import BlockPool
from kvsim.kv.eviction import EVICTION_POLICIES, EvictionPolicy, LFUPolicy, LRUPolicy, S3FIFOPolicy
from kvsim.kv.index import KVIndex
from kvsim.kv.store import BlockStore

__all__ = [
    "BlockPool", "BlockStore", "EVICTION_POLICIES", "EvictionPolicy", "KVIndex",
    "LFUPolicy", "LRUPolicy", "S3FIFOPolicy",
]
