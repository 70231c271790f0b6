"""Prefix caching and KV offload for one instance: the scheduler's admission hook.

:class:`InstanceCache` is what the scheduler sees. It holds the state the three concerns share
(the instance's HBM store, its page pool, blocks in flight) and hands each concern to its own
part:

- :class:`~kvsim.serving.cache.prefix_loader.PrefixLoader` -- at admission, the longest cached
  prefix among the stores this instance can reach and the loads that bring it into HBM;
- :class:`~kvsim.serving.cache.writer.CacheWriter` -- filing new blocks in HBM when a prompt is
  complete, writing them down (write-through) or on eviction (write-back), and evicting under
  HBM pressure;
- :class:`~kvsim.serving.cache.swapper.Swapper` -- preempted sequences swapped to host DRAM and
  back.

A block being loaded is already filed in the HBM cache (its pages are taken) but is *in flight*:
another sequence that hits it waits for the same load rather than reading bytes not yet there.
Per-request records (hit tokens per tier, bytes loaded) are written when the scheduler commits
the admission, so an admission retried for lack of pages is counted once.

Granularity: a cache block is ``block_tokens`` tokens (the workload's hash block); the engine
pages HBM at ``page_tokens``; only whole blocks are cached, as engines do.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from kvsim.kv import BlockPool
from kvsim.serving.cache.access import addressing_domain
from kvsim.serving.cache.domain_pool import DomainPool
from kvsim.serving.cache.prefix_loader import PrefixLoader, SeqCache
from kvsim.serving.cache.swapper import Swapper
from kvsim.serving.cache.tiers import CacheGeometry, SystemCache
from kvsim.serving.cache.writer import CacheWriter
from kvsim.serving.scheduler import AdmissionHook, BatchScheduler, Sequence

__all__ = ["InstanceCache", "SeqCache"]


class InstanceCache(AdmissionHook):
    """Prefix caching and offload for one instance (see the module docstring).

    Parameters
    ----------
    system : SystemCache
    index : int
        The instance's position in its system.
    node : str
        The compute node the instance runs on (its DRAM and NVMe tiers).
    gpus : list of str
        Topology endpoints of the instance's cards.
    pool : BlockPool
        The instance's page pool (shared by sequences and cached blocks).
    geometry : CacheGeometry
        Block sizes as this instance sees them (its page size and TP degree).
    recompute_s : callable
        ``recompute_s(tokens, cached_tokens)`` predicts the time of one prefill iteration of
        ``tokens`` tokens after ``cached_tokens`` (for the ``faster`` load policy).
    record_hits : callable
        ``record_hits(seq, tier, tokens, loaded_bytes)`` for the per-request records.
    record_written : callable
        ``record_written(seq, nbytes)``.
    remote_read_Bps : float or None
        Per card, the rate of KV reads in place from a peer's HBM (scale-up bandwidth x the
        link's efficiency); None without a scale-up link.
    local_copy_Bps : float or None
        Per card, the rate of a copy from one place in its HBM to another (LoRA value reuse: an
        adapter's copy of a shared context filled from another adapter's).

    :meth:`attach` connects it to its instance's scheduler and engine-loop alarm. With
    ``peer_hbm: read_in_place`` its ``hbm`` is its addressing domain's shared store and
    ``domain_pool`` that domain's :class:`~kvsim.serving.cache.domain_pool.DomainPool`.
    """

    loader_type = PrefixLoader
    writer_type = CacheWriter

    def __init__(self, system: SystemCache, index: int, node: str, gpus: list[str], pool: BlockPool,
                 geometry: CacheGeometry, recompute_s: Callable[[int, int], float],
                 record_hits: Callable[[Sequence, str, int, float], None],
                 record_written: Callable[[Sequence, float], None], remote_read_Bps: float | None = None,
                 local_copy_Bps: float | None = None):
        self.system = system
        self.local_copy_Bps = local_copy_Bps  # copies inside its own HBM (LoRA value reuse), B/s per card
        self.index = index
        self.node = node
        self.gpus = gpus
        self.pool = pool
        self.geometry = geometry
        self.remote_read_Bps = remote_read_Bps
        self.domain_pool: DomainPool | None = None
        self.inflight: dict = {}   # block -> event that fires when its bytes have landed
        self.record_hits = record_hits
        self.record_written = record_written
        self.wake: Callable[[], None] = lambda: None
        self.scheduler: BatchScheduler | None = None
        self._reading: dict | None = None  # remote tokens by holder of the step running now
        # The parts are handed what they need: this cache as a CacheMember (its state, read only)
        # and callables for what they ask of it; none of them imports or calls this class.
        domain_pool = None
        if system.spec.peer_hbm == "read_in_place":
            domain_pool = system.domain_pool(addressing_domain(system.topology, gpus, index))
            self.hbm = domain_pool.store
            self.inflight = domain_pool.inflight  # one copy per domain: in flight for all
        else:
            self.hbm = system.add_instance_hbm(index, node, pool.num_blocks // geometry.pages_per_block)
        self.domain_pool = domain_pool
        self.writer = self.writer_type(self, system, domain_pool, self.read_remote, self.read_remote_run,
                                       record_written, self._wake)
        if domain_pool is not None:
            domain_pool.join(self, self.writer.write_back)
        self.domain = system.access.register(self, domain_pool)  # its addressing domain (see cache.access)
        self.loader = self.loader_type(self, system, domain_pool, recompute_s, self._next_step_tokens,
                                       self.read_remote_run, self.after_load, self.writer.write_down)
        self.swapper = Swapper(self, system, self._release, self.after_load, self._next_step_tokens,
                               record_hits, record_written)
        pool.reclaim = self.writer.reclaim

    def attach(self, scheduler: BatchScheduler, wake: Callable[[], None]) -> None:
        """Connect to the instance's scheduler and the alarm that resumes its engine loop."""
        self.scheduler = scheduler
        self.wake = wake

    @property
    def env(self) -> simpy.Environment:
        return self.system.env

    # -- AdmissionHook ---------------------------------------------------------------------
    def admit(self, seq: Sequence, now: float) -> str | None:
        if self.system.pending_reclaims:  # (a lookup reads the index and the stores)
            self.system.settle_reclaims()
        if seq.swapped:
            return self.swapper.swap_in(seq)
        if seq.hashes is None:
            return "run"
        return self.loader.admit(seq)

    def committed(self, seq: Sequence) -> None:
        state = seq.cache
        if state is None or not state.hits:
            return
        for tier, tokens in state.hits.items():
            self.record_hits(seq, tier, tokens, 0.0)
        self.record_hits(seq, "hbm", 0, state.loaded_bytes)
        state.hits, state.loaded_bytes = {}, 0.0

    def prompt_done(self, seq: Sequence, now: float) -> None:
        if self.system.pending_reclaims:
            self.system.settle_reclaims()
        self.writer.file_prompt(seq)

    def released(self, seq: Sequence, finished: bool) -> None:
        state = seq.cache
        if state is None:
            return
        if self.system.pending_reclaims:
            self.system.settle_reclaims()
        if finished and seq.sequence_hashes is not None:
            self.writer.cache_decoded(seq)
        self._drop_readers(state.blocks)
        seq.cache = None
        seq.remote_tokens = 0

    def _drop_readers(self, blocks) -> None:
        """Let go of the reader references of ``blocks`` (what a sequence's admission read)."""
        self.hbm.drop_reader_each(blocks)

    def begin_remote_reads(self, batch) -> float | None:
        """A step of ``batch`` starts: its per-card rate of reads from peers' HBM (bytes/s), or
        None if it reads none (see :mod:`kvsim.serving.cache.remote_reads`)."""
        tokens: dict = {}
        for seq in [seq for seq, _ in batch.prefills] + batch.decodes:
            state = seq.cache
            if state is not None and state.remote_from:
                for holder, count in state.remote_from.items():
                    tokens[holder] = tokens.get(holder, 0) + count
        if not tokens:
            return None
        self._reading = tokens
        return self.system.remote_reads.begin(self, tokens)

    def end_remote_reads(self) -> None:
        """The step :meth:`begin_remote_reads` started has ended."""
        if self._reading is not None:
            self.system.remote_reads.end(self._reading)
            self._reading = None

    def read_remote(self, seq: Sequence, block) -> bool:
        """``seq`` reads cached ``block`` of its domain in place: if a peer holds it, count the
        block's tokens as read from that peer in every step. True if a peer holds it."""
        holder = self.domain_pool.home[block] if self.domain_pool is not None else self
        if holder is self:
            return False
        tokens = self.geometry.block_tokens
        state = seq.cache
        state.remote_from[holder] = state.remote_from.get(holder, 0) + tokens
        seq.remote_tokens += tokens
        return True

    def read_remote_run(self, seq: Sequence, blocks) -> int:
        """:meth:`read_remote` for each of ``blocks`` in order; returns how many a peer holds."""
        if self.domain_pool is None:
            return 0
        home, state = self.domain_pool.home, seq.cache
        remote_from, tokens = state.remote_from, self.geometry.block_tokens
        count = 0
        for block in blocks:
            holder = home[block]
            if holder is not self:
                remote_from[holder] = remote_from.get(holder, 0) + tokens
                count += 1
        seq.remote_tokens += count * tokens
        return count

    def cached_prefix_blocks(self, seq: Sequence) -> int:
        """Leading blocks of ``seq``'s prompt already in this instance's HBM store."""
        if seq.hashes is None:
            return 0
        if self.system.pending_reclaims:  # (a router reads the store)
            self.system.settle_reclaims()
        hbm, blocks = self.hbm, 0
        for block in seq.hashes:
            if block not in hbm:
                break
            blocks += 1
        return blocks

    def swap_out(self, seq: Sequence) -> bool:
        return self.swapper.swap_out(seq)

    def flush(self) -> None:
        """Drop the cached blocks no one holds, giving their pages back (a role change)."""
        if self.system.pending_reclaims:
            self.system.settle_reclaims()
        self.writer.flush()

    # -- handed to the parts -------------------------------------------------------------------
    def _wake(self) -> None:
        """Resume the instance's engine loop (the alarm :meth:`attach` was given)."""
        self.wake()

    def _next_step_tokens(self, seq: Sequence, cached_tokens: int | None = None) -> int:
        """The tokens of ``seq``'s next step, as the scheduler counts them (after
        ``cached_tokens`` cached tokens where given)."""
        return self.scheduler.next_step_tokens(seq, cached_tokens)

    def _release(self, seq: Sequence) -> None:
        """Let go of what ``seq``'s admission held, unfinished (a swap out)."""
        self.released(seq, finished=False)

    def after_load(self, seq: Sequence, state: SeqCache | None, ungate: bool) -> None:
        """The KV an admission waited for has landed: resume the sequence and the engine."""
        if self.scheduler is None or seq.cache is not state:
            return  # that admission was given up (preempted, or retried): nothing waits for it
        if ungate:
            self.scheduler.ungate(seq, self.env.now)
        else:
            self.scheduler.loaded(seq)
        self.wake()
