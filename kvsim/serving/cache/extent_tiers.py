"""The KV tiers of a system kept as extents, the tiers below HBM included (issue 23, item 1;
docs/extents.md, "Phase 6").

:class:`ExtentSystemCache` is :class:`~kvsim.serving.cache.tiers.SystemCache` for a system whose
stores are all :class:`~kvsim.serving.cache.extent_pool.ExtentHbmStore`\\ s (LRU, counting bytes)
under an :class:`~kvsim.kv.extent_index.ExtentIndex`: each instance's HBM, each node's DRAM and
NVMe, and the remote pool's one node. Its methods take stretches ``(chain, start, end)`` where
the per-block ones take block ids, and each does what its per-block counterpart does on the
blocks of its stretches in order: the lookup's touches below HBM, which lower stores lack which
blocks (the write-through copies), copies filed where they land, and the prewarm.
``tests/test_extent_tiers.py`` runs systems both ways and requires the same records.

What such a system is (:func:`kvsim.sim.build.kv_extents` chooses): each instance's own HBM
(``peer_hbm: none``), LRU in every tier, write-through, at most one remote pool node (a pool of
several spreads blocks over its nodes by id, which a stretch does not follow), and a router that
does not read the lower tiers (the cache-aware router's reach walks them per block).
"""

from __future__ import annotations

from kvsim.kv.extents import ExtentStore
from kvsim.serving.cache.segments import Segment, ids_address
from kvsim.serving.cache.tiers import SystemCache
from kvsim.serving.cache.warm_rule import UnofferedShare

__all__ = ["ExtentSystemCache", "without"]


def without(segments: list[Segment], taken: list[Segment]) -> list[Segment]:
    """The blocks of ``segments`` not in ``taken`` (both stretches ``(chain, start, end)``), as
    stretches in the order of ``segments``."""
    out = []
    for chain, start, end in segments:
        pieces = [(start, end)] if start < end else []
        for tchain, ts, te in taken:
            if tchain != chain or te <= start or ts >= end:
                continue
            cut = []
            for s, e in pieces:
                if te <= s or ts >= e:
                    cut.append((s, e))
                    continue
                if s < ts:
                    cut.append((s, ts))
                if te < e:
                    cut.append((te, e))
            pieces = cut
        out += [(chain, s, e) for s, e in pieces]
    return out


class ExtentSystemCache(SystemCache):
    """:class:`SystemCache` over stretches of blocks (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, extents=True, **kwargs)
        if len(self.remote) > 1:
            raise ValueError("a system kept as extents has at most one remote pool node")

    def remote_store(self, block):
        """The pool node (one: a system kept as extents has no pool spread over several)."""
        return self.remote[0]

    def lower_stores(self, node: str, block) -> list:
        raise RuntimeError("a system kept as extents asks its lower tiers per stretch")

    def touch_below(self, node: str, found: list[Segment], loads: list) -> None:
        """:meth:`SystemCache.touch_below` of the stretches ``found`` (the cached prefix the lookup
        found, in order); ``loads`` are the admission's ``(store, chain, start, end)``: a lower
        store's blocks loaded from it are not touched there (the load looks them up)."""
        skip: dict[int, list] = {}
        for store, chain, start, end in loads:
            if self.rank[id(store)]:  # (a lower store: HBM copies are no concern here)
                skip.setdefault(id(store), []).append((chain, start, end))
        for store in self._node_stores(node) + self.remote:
            loaded = skip.get(id(store))
            for chain, start, end in (without(found, loaded) if loaded else found):
                store.touch_run(chain, start, end)

    def missing_below(self, node: str, blocks: list[Segment], first_only: bool = False) -> list[tuple]:
        """:meth:`SystemCache.missing_below` of the stretches ``blocks``: each lower store lacking
        some of them, with those blocks as stretches, in the order a walk of the blocks (and of
        each block's stores in turn) first meets the stores."""
        local = self._node_stores(node)
        if first_only and local:
            stores = local[:1]
        else:
            stores = local + self.remote
        extents: list[ExtentStore] = stores  # type: ignore[assignment]  # (every store of such a system)
        found = []  # (position of the first block it lacks, place among a block's stores, store, stretches)
        for place, store in enumerate(extents):
            group: list[Segment] = []
            first = -1
            pos = 0
            for chain, start, end in blocks:
                for s, e in store.missing(chain, start, end):
                    if first < 0:
                        first = pos + s - start
                    group.append((chain, s, e))
                pos += end - start
            if group:
                found.append((first, place, store, group))
        found.sort(key=lambda entry: (entry[0], entry[1]))
        return [(store, group) for _, _, store, group in found]

    def file(self, store, blocks: list[Segment]) -> None:
        """:meth:`SystemCache.file` of the stretches ``blocks`` (a block refused -- the store full
        of held blocks -- is skipped and the rest tried, as there)."""
        if self.pending_reclaims:
            self.settle_reclaims()
        index = self.index
        for chain, start, end in blocks:
            pos = start
            while pos < end:
                done = index.insert_run(store, chain, pos, end)[0]
                pos += done + (pos + done < end)  # (past the refused block)

    def cascade(self, store, blocks: list) -> None:
        raise RuntimeError("a system kept as extents writes through (no write-back cascade)")

    def _warm_stretch(self, store, chain, start: int, end: int) -> int:
        """File ``[start, end)`` in ``store`` as :meth:`prewarm` does block by block; returns how
        many were not in the store at their turn (stored now, or refused)."""
        index = self.index
        offered, pos = 0, start
        while pos < end:
            done, new, _ = index.insert_run(store, chain, pos, end)
            offered += sum(b - a for a, b in new)
            pos += done
            if pos < end:  # refused (not stored): it counts, the rest are tried
                offered += 1
                pos += 1
        return offered

    def prewarm(self, prompts, max_blocks_per_store: float = 2.0, batch: int = 1000,
                settle: float = 0.005, max_prompts: int = 200_000, confidence: float = 0.95) -> int:
        """:meth:`SystemCache.prewarm` with each prompt filed as its segments: per segment, every
        lower store in turn (the per-block loop's order for each store's own blocks; a block's
        stores acquire it in the same order, so the index's tuples are the same)."""
        locals_ = list(self.dram.values()) + list(self.nvme.values())
        stores = locals_ + self.remote
        if not stores:
            return 0
        block_tokens = self.geometry.block_tokens
        budget = {id(s): max_blocks_per_store * s.capacity_blocks for s in stores}
        unoffered = UnofferedShare(confidence)
        used = 0
        for hashes in prompts:
            used += 1
            unoffered.offer(hashes)
            for chain, start, end in (ids_address(hashes, block_tokens) if len(hashes) else []):
                for store in stores:
                    budget[id(store)] -= self._warm_stretch(store, chain, start, end)
            if all(b <= 0 for b in budget.values()) or used >= max_prompts:
                break
            if used % batch == 0 and unoffered.upper_bound() < settle:
                break
        return used
