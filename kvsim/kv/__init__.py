"""KV-cache memory management (today: one paged block pool per instance in device memory)."""

from kvsim.kv.block_pool import BlockPool

__all__ = ["BlockPool"]
