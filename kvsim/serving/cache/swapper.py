"""Swapping preempted sequences to host DRAM and back (``kv_cache.preemption: swap``)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import simpy

from kvsim.serving.cache.member import CacheMember
from kvsim.serving.scheduler import Sequence

if TYPE_CHECKING:
    from kvsim.network.cluster_graph import Edge
    from kvsim.serving.cache.tiers import SystemCache

__all__ = ["Swapper"]


class Swapper:
    """Copies a preempted sequence's KV to its node's DRAM and back when it is readmitted.

    The copies cross PCIe and the DRAM channels like any other transfer (host<->device copies at
    the copy-engine rate). The pages are handed back at once on swap-out: the copy is assumed
    staged, like a write-back.

    Parameters
    ----------
    cache : CacheMember
        The instance's cache, whose cards, node, pool and geometry this reads.
    system : SystemCache
    release : callable
        ``release(seq)``: the instance's cache lets go of what ``seq``'s admission held.
    after_load : callable
        ``after_load(seq, state, ungate)``: the KV an admission waited for has landed.
    next_step_tokens : callable
        ``next_step_tokens(seq)``: the tokens of ``seq``'s next step (the scheduler's).
    record_hits, record_written : callable
        The per-request records, as :class:`~kvsim.serving.cache.instance_cache.InstanceCache`
        takes them.
    """

    def __init__(self, cache: CacheMember, system: SystemCache, release: Callable[[Sequence], None],
                 after_load: Callable[[Sequence, Any, bool], None], next_step_tokens: Callable[[Sequence], int],
                 record_hits: Callable[[Sequence, str, int, float], None],
                 record_written: Callable[[Sequence, float], None]):
        self.cache = cache
        self.system = system
        self.release = release
        self.after_load = after_load
        self.next_step_tokens = next_step_tokens
        self.record_hits = record_hits
        self.record_written = record_written
        self.swapping: dict[int, simpy.Event] = {}  # rid -> swap-out still in flight

    def _kv_bytes_per_card(self, tokens: int) -> float:
        g = self.cache.geometry
        return tokens * g.block_bytes_per_card / g.block_tokens

    def _paths(self, out: bool) -> list[list[Edge]]:
        topology = self.system.topology
        dram = topology.dram(self.cache.node)
        return [topology.store_path(gpu, dram, True) if out else topology.load_path(dram, gpu, True)
                for gpu in self.cache.gpus]

    def swap_out(self, seq: Sequence) -> bool:
        """Copy all the sequence's KV (its own pages and the shared prefix it reads) to host DRAM
        and let go of its HBM blocks, so a swapped sequence holds nothing in HBM."""
        cache, system = self.cache, self.system
        if system.spec.preemption != "swap" or seq.kv_tokens == 0:
            return False
        nbytes = self._kv_bytes_per_card(seq.kv_tokens)
        self.release(seq)
        self.record_written(seq, nbytes * cache.geometry.tp)
        system.count(system.bytes_written, "dram", nbytes * cache.geometry.tp)
        self.swapping[seq.rid] = system.transfers.move(self._paths(out=True), nbytes, "swap")
        return True

    def swap_in(self, seq: Sequence) -> str | None:
        """Readmitting a swapped sequence: its pages back, then the copy back from host DRAM
        (after the copy out has landed).

        It comes back only when the pool also has room for its next step (one decode token, or
        a prefill chunk as large as the token budget allows), as a recomputed sequence is
        admitted only with room for its first chunk: readmitted into just the pages it gave back,
        it could not grow, would be swapped out again at once and readmitted again, with no step
        in between, until something else freed pages.
        """
        cache, system = self.cache, self.system
        if not cache.pool.grow(seq, seq.kv_tokens + self.next_step_tokens(seq)):  # all of it comes back as its own pages
            return None
        nbytes = self._kv_bytes_per_card(seq.kv_tokens)
        self.record_hits(seq, "hbm", 0, nbytes * cache.geometry.tp)
        system.count(system.bytes_loaded, "dram", nbytes * cache.geometry.tp)
        seq.swapped = False
        system.env.process(self._swap_back(seq, seq.cache, self.swapping.pop(seq.rid, None), nbytes))
        return "load"

    def _swap_back(self, seq: Sequence, state: Any, out: simpy.Event | None,
                   nbytes: float) -> Generator[simpy.Event, object, None]:
        if out is not None and not out.processed:
            yield out
        yield self.system.transfers.move(self._paths(out=False), nbytes, "swap")
        self.after_load(seq, state, False)
