"""The sizes of one KV cache block a system's caches share (:class:`CacheGeometry`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CacheGeometry"]


@dataclass(frozen=True)
class CacheGeometry:
    """Sizes of one cache block.

    Attributes
    ----------
    block_tokens, page_tokens : int
        Tokens per cache block and per engine page.
    block_bytes : float
        KV bytes of one block for the whole model (what a lower tier stores and a write moves).
    block_bytes_per_card : float
        KV bytes of one block on one card of a TP group (what one card loads). When TP exceeds
        the KV head count, engines replicate heads, so ``tp * block_bytes_per_card`` exceeds
        ``block_bytes``: each card loads its own copy of the replicated heads.
    tp : int
    num_layers : int
        For layer-by-layer overlap: the first token waits one layer's share of the load.
    groupable : bool
        The cards are one tensor-parallel group (no pipeline stages, no data-parallel attention),
        so ranks sharing a KV shard are consecutive and a load can be read once per shard
        (``fanout: once_per_node``); otherwise every card moves its own bytes.
    """

    block_tokens: int
    page_tokens: int
    block_bytes: float
    block_bytes_per_card: float
    tp: int
    num_layers: int
    groupable: bool = True

    @property
    def pages_per_block(self) -> int:
        return self.block_tokens // self.page_tokens

    @property
    def shards(self) -> int:
        """Distinct KV shards over the ``tp`` cards: 1 for MLA (every card holds the latent), the
        KV head count when heads are replicated, ``tp`` when nothing is."""
        return max(1, min(self.tp, round(self.block_bytes / self.block_bytes_per_card)))
