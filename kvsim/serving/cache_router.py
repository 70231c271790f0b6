"""Cache-aware routing: send a request where serving it costs least, cached prefix against load.

The score follows NVIDIA Dynamo's KV router (docs "Routing Concepts"; ``ai-dynamo/dynamo``
``lib/kv-router/src/scheduling/selector/default.rs``), in tokens rather than blocks. For
candidate instance ``i`` and a prompt of ``P`` tokens:

    cost_i = prefill_load_scale * max(0, Q_i + P - C_i) + decode_weight * D_i

- ``Q_i``: prompt tokens already queued or prefilling on ``i`` (its prefill backlog);
- ``C_i``: credited cached tokens: over the leading blocks of the prompt that ``i`` can load,
  ``block_tokens`` x the credit of the tier each comes from (own HBM 1.0, node DRAM 0.75, node
  NVMe 0.25, remote pool 0.5: Dynamo's ``overlap_score_credit``, ``host_cache_hit_weight``,
  ``disk_cache_hit_weight``, ``shared_cache_multiplier``) -- a hit in a slower tier saves less;
- ``D_i``: KV tokens of the requests ``i`` holds (prompt + generated so far), Dynamo's decode
  blocks. (Dynamo adds the new request's own blocks to every candidate; that changes no choice.)

The lowest cost wins; ties go to the instance this router has sent fewest requests (so idle,
cold instances take turns instead of the first one taking everything), then the lowest index.

A load guard comes first, as in SGLang's cache-aware router (``sgl-router``
``policies/cache_aware.rs``): when the candidates' outstanding requests differ by more than
``balance_abs_threshold`` *and* the most loaded holds more than ``balance_rel_threshold`` times
the least, the request goes to the least loaded instance whatever is cached.

The cluster :class:`~kvsim.kv.KVIndex` is the source of truth for ``C_i``, read live or through a
delayed :class:`~kvsim.serving.index_view.IndexView` (``staleness``); each candidate's reachable
prefix comes from one walk of the prompt's blocks (:func:`~kvsim.serving.prefix_reach.reach`).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import Any

from kvsim.serving.cache.segments import prompt_address
from kvsim.serving.cache.tiers import SystemCache
from kvsim.serving.index_view import ExtentIndexView, IndexView
from kvsim.serving.prefix_reach import CacheLayout, reach, reach_segments
from kvsim.serving.specs import CacheAwareSpec

__all__ = ["CacheAwareRouter"]


class CacheAwareRouter:
    """Routes by expected cost: cached prefix against load (see the module docstring).

    Parameters
    ----------
    cache : SystemCache
        The system's KV tiers and cluster index.
    spec : CacheAwareSpec
    clock : callable
        ``clock()``: simulated time now, seconds (for a stale view).

    Attributes
    ----------
    assigned : dict
        Requests sent to each instance (by instance index).
    guarded : int
        Decisions the load guard took (the cache was ignored).
    """

    def __init__(self, cache: SystemCache, spec: CacheAwareSpec, clock: Callable[[], float]):
        self.cache = cache
        self.spec = spec
        self.block_tokens = cache.geometry.block_tokens
        self.extents = cache.extents  # the index is kept per stretch: prompts walked as segments
        self.view: IndexView | ExtentIndexView | None = None
        if spec.staleness > 0:
            self.view = (ExtentIndexView if self.extents else IndexView)(cache.index, clock, spec.staleness)
        source = self.view if self.view is not None else cache.index
        self.locations = source.pieces if self.extents else source.locations
        self.assigned: dict[int, int] = {}
        self.guarded = 0
        self._layout: CacheLayout | None = None
        self._layout_key: tuple | None = None

    def layout(self, instances: Seq[Any]) -> CacheLayout:
        """The stores the candidates read (rebuilt only when the candidate list changes)."""
        hooks = tuple(inst.hook for inst in instances)
        key = tuple(id(h) for h in hooks)
        if key != self._layout_key:
            cache, spec = self.cache, self.spec
            credit = {"dram": spec.dram_credit, "nvme": spec.nvme_credit}
            node_stores: dict[str, list] = {}
            for tier, stores in (("dram", cache.dram), ("nvme", cache.nvme)):
                for node, store in stores.items():
                    node_stores.setdefault(node, []).append((store, cache.rank[id(store)], credit[tier]))
            self._layout = CacheLayout(
                hbm=[getattr(h, "hbm", None) for h in hooks], nodes=[getattr(h, "node", None) for h in hooks],
                node_stores=node_stores, remote=list(cache.remote), hbm_credit=spec.hbm_credit,
                remote_credit=spec.remote_credit)
            self._layout_key = key
        return self._layout

    def cached_credit_tokens(self, instances: Seq[Any], seq: Any) -> list[float]:
        """Per candidate, the credited cached tokens ``C_i`` of ``seq``'s prompt."""
        hashes = getattr(seq, "hashes", None)
        if hashes is None:
            return [0.0] * len(instances)
        # the blocks the loader may serve: whole ones, never the one with the last token to compute
        bt = self.block_tokens
        eligible = max(0, min(seq.prompt_tokens // bt, (seq.prefill_target - 1) // bt))
        if self.cache.pending_reclaims:  # (chunk runs' deferred reclaims: the index as it is now)
            self.cache.settle_reclaims()
        if self.view is not None:
            self.view.refresh()
        if self.extents:
            segments = prompt_address(seq, bt)
            blocks, credit = reach_segments(segments, eligible, self.locations, self.layout(instances))
        else:
            blocks, credit = reach(hashes, eligible, self.locations, self.layout(instances))
        # a match of no more than cache_threshold of the prompt is no reason to go there (SGLang)
        floor = self.spec.cache_threshold * seq.prompt_tokens
        # rounded so that credits summed along different paths still tie
        return [round(c * bt, 6) if b * bt > floor else 0.0 for b, c in zip(blocks, credit)]

    def choose(self, instances: Seq[Any], seq: Any = None) -> int:
        spec = self.spec
        assigned = self.assigned
        loads = [inst.outstanding for inst in instances]
        most, least = max(loads), min(loads)
        if most - least > spec.balance_abs_threshold and most > spec.balance_rel_threshold * least:
            self.guarded += 1
            keys = [(loads[k], assigned.get(inst.index, 0), k) for k, inst in enumerate(instances)]
        else:
            credit = self.cached_credit_tokens(instances, seq)
            prompt = seq.prompt_tokens if seq is not None else 0
            keys = []
            for k, inst in enumerate(instances):
                prefill = max(0.0, inst.pending_prompt_tokens + prompt - credit[k])
                cost = spec.prefill_load_scale * prefill + spec.decode_weight * inst.held_kv_tokens
                keys.append((cost, assigned.get(inst.index, 0), k))
        best = min(range(len(instances)), key=keys.__getitem__)
        index = instances[best].index
        assigned[index] = assigned.get(index, 0) + 1
        return best
