"""Coalesced prefill chunk runs: the chunks of one long prompt advanced in one simulation event.

A prompt longer than the token budget is prefilled in chunks, one engine iteration each. While
the first sequence the scheduler serves takes the whole budget, the iteration holds its chunk
alone (those behind it get nothing, and nothing waiting can be admitted: there is no budget
left), so the next iterations are known in advance: the same sequence's next chunks, each
``max_batched_tokens`` long, their context growing by a chunk a step, until the prompt's final
chunk. Their durations follow from the step model's breakdown of each chunk's shape (the shape
the scheduler would form), their end times by adding them up in order, as the step-by-step clock
would.

A :class:`ChunkRun` is planned at the first of those iterations and kept, like a
:class:`~kvsim.serving.decode_run.DecodeRun`, as the instance's coalesced run: the engine sleeps
through it in one event (:func:`~kvsim.serving.engine_loop.sleep_through`); anything that reads
the instance settles it first (every step that has ended by then is applied: its tokens, the
input tokens it counts, the next chunk's pages), anything that changes the instance cuts it at
the step in progress. A run stops before a chunk whose pages the pool could give only by
preempting (a decision made at the step's start, left to the step-by-step loop), and before the
prompt's final chunk (the prompt's completion files its blocks in the cache and emits its first
token; the last step a run holds is completed by the scheduler as usual, after the run).

A chunk whose pages the pool gives by reclaiming cached pages (evicting unheld blocks from the
instance's HBM store, :meth:`~kvsim.serving.cache.writer.CacheWriter.reclaim`) does not stop
the run when the reclaim can be *deferred*
(:meth:`~kvsim.serving.cache.writer.CacheWriter.deferrable_blocks`: write-through, the
instance's own store, no peers reading it, an index without watchers) and the store holds
enough evictable blocks at planning (their count does not fall during the run: only the
instance itself pins or reads its store, and while it sleeps through a run only its landing
copies do, which unpin first; a deferred reclaim that found fewer would raise). The run counts the pages free as the reclaim would,
and the reclaim is made when the step's pages are (:meth:`ChunkRun.settle`): its victims chosen
then, from the store as it is then -- as the step found it, since everything that reads or
changes a store or the system's index (other instances' admissions and filings, copies landing,
routers, the tier sampler, the instance's own hooks) settles the system's pending reclaims
first (:meth:`~kvsim.serving.cache.tiers.SystemCache.settle_reclaims`). Where a reclaim cannot
be deferred the run stops before the chunk, as before.

Unlike a decode run, a chunk run is not cut by a request arriving: the arrival waits in the queue,
and no step of the run admits anything (each takes the whole budget), so the steps do not change.

The step-by-step engine stays as the reference (``engine.coalesce: false``): records, counters
and levels are equal bit for bit (``tests/test_coalesce.py``), with the same caveat as decode
runs for an outside event at exactly the instant a step ends (the run counts the step as ended,
so such an event sees the next step's pages taken and its deferred reclaim made; the
step-by-step loop orders the tie by event id).

Pure Python in both backends: a run costs one plan (the step model's breakdown of each chunk), a
few settles (one ``prefill_computed`` call per step) and one account (the engine time's and the
KV level's bulk calls, the loops decode runs use, compiled in that backend); what it removes per
step is a SimPy event and a pass through the engine loop and the scheduler.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from kvsim.models.step_time import BatchShape

if TYPE_CHECKING:
    from kvsim.kv.block_pool import BlockPool
    from kvsim.models.step_time import StepBreakdown
    from kvsim.serving.cache.writer import CacheWriter
    from kvsim.serving.instance import Instance
    from kvsim.serving.scheduler import Batch

__all__ = ["MAX_CHUNKS", "ChunkRun"]

MAX_CHUNKS = 4096
"""Longest run planned at once (a prompt of more chunks is planned again when the run ends)."""


def _writer(pool: BlockPool) -> Any:
    """The cache writer whose reclaim ``pool`` calls, if it can defer one
    (:meth:`~kvsim.serving.cache.writer.CacheWriter.deferrable_blocks`), else None."""
    writer = getattr(pool.reclaim, "__self__", None)
    return writer if hasattr(writer, "deferrable_blocks") else None


class ChunkRun:
    """Prefill chunks ``1..last`` of one sequence, each the whole token budget, the first formed.

    Step ``i`` runs from ``ends_s[i - 1]`` to ``ends_s[i]`` and computes the sequence's tokens
    ``kv0 + (i - 1) * chunk`` to ``kv0 + i * chunk``; ``blocks[i]`` is the pages it holds in step
    ``i`` and ``new_blocks[i]`` the pages steps ``2..i`` took from the pool. Steps before
    ``last`` are applied here (:meth:`settle`, :meth:`account`); step ``last`` is completed by
    the scheduler, after :meth:`finish_step`.
    """

    __slots__ = ("accounted", "applied", "batch", "batches0", "blocks", "chunk", "comm_s", "compute_s", "ends_s",
                 "free0", "instance", "kernels_s", "kv0", "last", "memory_s", "new_blocks", "overhead_s", "planned",
                 "reclaim_last", "reclaims", "seq", "total_s", "writer")

    cut_by_arrivals = False  # (see the module docstring; Instance.submit reads it)

    def __init__(self, instance: Instance, batch: Batch, ends_s: list[float],
                 steps: tuple[list[float], list[float], list[float], float, float, float], blocks: list[int],
                 new_blocks: list[int], reclaims: list[int] | None = None, writer: CacheWriter | None = None):
        self.instance = instance
        self.batch = batch
        self.seq, self.chunk = batch.prefills[0]
        self.kv0 = self.seq.kv_tokens
        self.ends_s = ends_s
        # step i's total, compute and memory time at [i - 1]; the collective, launch and host
        # times every step shares (as the engine loop accounts them)
        self.total_s, self.compute_s, self.memory_s, self.comm_s, self.kernels_s, self.overhead_s = steps
        self.blocks = blocks
        self.new_blocks = new_blocks
        self.free0 = instance.pool._free  # after step 1's pages
        self.batches0 = instance.scheduler.batches_formed
        self.last = self.planned = len(ends_s) - 1
        self.applied = 0
        self.accounted = 0
        # step i's deferred reclaim, in blocks, at [i] (None: no step reclaims); applied when the
        # step's pages are (settle), by ``writer``; the run is among its system's pending
        # reclaims until the last of them (``reclaim_last``) is applied or cut off
        self.reclaims: list[int] = reclaims if reclaims is not None else []
        self.writer: Any = writer
        self.reclaim_last = 0
        if reclaims is not None and writer is not None:
            self.reclaim_last = max(i for i, n in enumerate(reclaims) if n)
            system = writer.system
            system.pending_reclaims.append(self)
            system.next_reclaim_s = min(system.next_reclaim_s, self.next_reclaim_s())

    @staticmethod
    def plan(instance: Instance, batch: Batch, first_s: float, first_parts: StepBreakdown, now: float,
             adapter_s: float = 0.0) -> ChunkRun | None:
        """A run starting with ``batch`` (formed at ``now``, lasting ``first_s``, its breakdown
        ``first_parts``), or None if its second step could differ from the sequence's next chunk."""
        scheduler = instance.scheduler
        pool = instance.pool
        if batch.decodes or len(batch.prefills) != 1 or adapter_s or instance.adapters is not None:
            return None
        if scheduler.span is not None or pool.resident is not None:
            return None  # sliding windows: the context a chunk reads is not its position
        seq, chunk = batch.prefills[0]
        if chunk != scheduler.max_batched_tokens or seq.remote_tokens or batch.shape.remote_kv_tokens:
            # (with data-parallel attention a chunk is one rank's budget, never the instance's:
            # the rest of the budget may admit a waiting request, so no step is known in advance)
            return None
        kv0 = seq.kv_tokens
        steps = (seq.prefill_target - kv0 - 1) // chunk  # chunks ending before the prompt's end
        if steps < 2:
            return None
        steps = min(steps, MAX_CHUNKS)
        breakdown = instance.step_model.breakdown  # type: ignore[attr-defined]  # (the engine loop checked)
        jitter = instance.jitter
        block = pool.block_size_tokens
        free = pool._free
        room = -2  # evictable HBM blocks a deferred reclaim may still take (-2: not asked yet; -1: none)
        per_block = 1  # (pages per cached block, once asked)
        writer = None
        reclaims: list[int] | None = None
        shared = seq.shared_tokens
        have = seq.kv_blocks
        taken = 0
        ends = [now, now + first_s]
        totals, computes, memories = [first_s], [first_parts.compute_s], [max(first_parts.memory_s, first_parts.remote_s)]
        comm_s, kernels_s, overhead_s = first_parts.comm_s, first_parts.kernels_s, first_parts.overhead_s + 0.0
        blocks = [0, have]
        new_blocks = [0, 0]
        for i in range(2, steps + 1):
            cached = kv0 + (i - 1) * chunk
            # its pages, as the scheduler finds them (BatchScheduler.schedule, BlockPool.grow):
            # stop before a chunk the pool could hold only by preempting, or by reclaiming
            # cached pages where that cannot be deferred (CacheWriter.deferrable_blocks)
            own = cached + chunk - shared
            if own > have * block:
                extra = -(-own // block) - have
                short = taken + extra - free
                if short > 0:
                    # the pool's reclaim (CacheWriter.reclaim): as many victims as whole blocks
                    # cover the shortfall, if the store has that many evictable
                    if room == -2:
                        writer = _writer(pool)
                        room = writer.deferrable_blocks() if writer is not None else -1
                        if room >= 0:
                            per_block = writer.cache.geometry.pages_per_block
                    victims = -(-short // per_block)
                    if victims > room:
                        if writer is not None:
                            writer.system.reclaim_stops += 1
                        break
                    room -= victims
                    if reclaims is None:
                        reclaims = [0] * (steps + 1)
                    reclaims[i] = victims
                    taken -= victims * per_block
                taken += extra
                have += extra
            # its shape, as the scheduler forms it (one chunk, no token sampled, no remote reads)
            pairs = 0.0
            pairs += BatchShape.prefill_chunk_pairs(chunk, cached)
            step = breakdown(tuple.__new__(BatchShape, (chunk, pairs, cached, 0, 0, 0, 1, 0)))
            seconds = step.total_s
            if not seconds > 0 or math.isinf(seconds):
                break  # left to the step-by-step loop, which names it
            if step.comm_s != comm_s or step.kernels_s != kernels_s or step.overhead_s + 0.0 != overhead_s:
                break  # (chunks of one size share these: accounted in one call below)
            if jitter is not None:  # step i is the instance's iteration batches_formed + i - 2 (from 0)
                seconds = jitter.duration(seconds, scheduler.batches_formed + i - 2)
            ends.append(ends[-1] + seconds)  # in order, as the step-by-step clock adds them
            totals.append(seconds)
            computes.append(step.compute_s)
            memories.append(max(step.memory_s, step.remote_s))
            blocks.append(have)
            new_blocks.append(taken)
        if len(ends) < 3:
            return None
        new_blocks.append(taken)  # (no step after the last: its pages are the last step's)
        if reclaims is not None:
            reclaims = reclaims[:len(ends)]  # (a step that stopped the run after its pages is not kept)
            if not any(reclaims):
                reclaims = None
        return ChunkRun(instance, batch, ends, (totals, computes, memories, comm_s, kernels_s, overhead_s), blocks,
                        new_blocks, reclaims, writer)

    @property
    def end_s(self) -> float:
        """When the run's last step ends, seconds."""
        return self.ends_s[self.last]

    def settle(self, now: float) -> None:
        """Apply every step before the last that has ended by ``now`` (its tokens and the input
        tokens it counts, in step order, at its end) and allocate the next step's pages."""
        done = bisect_right(self.ends_s, now, 1, self.last) - 1
        if done <= self.applied:
            return
        first = self.applied + 1
        self.applied = done
        instance = self.instance
        scheduler = instance.scheduler
        seq, chunk, kv0, ends = self.seq, self.chunk, self.kv0, self.ends_s
        prefill_computed = scheduler.events.prefill_computed
        for i in range(first, done + 1):  # what BatchScheduler.complete does for a chunk short of the end
            seq.kv_tokens = kv0 + i * chunk
            prefill_computed(seq, chunk, ends[i])
        if self.reclaim_last:
            # the deferred reclaims of the steps whose pages are allocated now, in step order (each
            # at its step's start: nothing read or changed the store, the index or the pool since,
            # or it would have settled the run first)
            reclaims, writer = self.reclaims, self.writer
            for i in range(first + 1, min(done + 1, self.reclaim_last) + 1):
                if reclaims[i]:
                    writer.reclaim_deferred(reclaims[i])
            if done + 1 >= self.reclaim_last:
                self._reclaimed()
        instance.pool._free = self.free0 - self.new_blocks[done + 1]
        seq.kv_blocks = self.blocks[done + 1]
        scheduler.batches_formed = self.batches0 + done

    def account(self) -> None:
        """Account the steps applied so far (iterations, engine time, the KV level as each ends
        and the next is formed), in step order, as the step-by-step loop adds them."""
        done = self.applied
        if done <= self.accounted:
            return
        first = self.accounted + 1
        self.accounted = done
        instance = self.instance
        instance.counters.iterations += done - first + 1
        ends = self.ends_s[first:done + 1]
        instance.engine_time.add_each(ends, self.total_s[first - 1:done], self.compute_s[first - 1:done],
                                      self.memory_s[first - 1:done], self.comm_s, self.kernels_s, self.overhead_s)
        # the pool's level as each step ends (its pages) and the next is formed (its new pages)
        num_blocks = instance.pool.num_blocks
        used0 = num_blocks - self.free0
        new_blocks = self.new_blocks
        during = [(used0 + new_blocks[i]) / num_blocks for i in range(first, done + 2)]
        instance.kv_utilization.set_at_each(ends, during[:-1], during[1:])

    def cut(self, now: float, keep: int = 0) -> None:
        """Settle, and make the step in progress at ``now`` (or ``keep`` steps after it) the last."""
        self.settle(now)
        self.last = min(self.last, self.applied + 1 + keep)
        if self.reclaim_last > self.last:
            # the reclaims of the steps cut off are never made; those up to the step in progress
            # were made by the settle (and any of the ``keep`` steps after it will be, when settled)
            last = max((i for i in range(self.last + 1) if self.reclaims[i]), default=0)
            if last <= self.applied + 1:
                self._reclaimed()
            else:
                self.reclaim_last = last

    def next_reclaim_s(self) -> float:
        """When the next deferred reclaim not yet made falls due, seconds: the start of its step
        (:meth:`settle` makes step ``i``'s once ``ends_s[i - 1] <= now``); inf if none is left."""
        for i in range(self.applied + 2, self.reclaim_last + 1):
            if self.reclaims[i]:
                return self.ends_s[i - 1]
        return math.inf

    def _reclaimed(self) -> None:
        """Every deferred reclaim the run will make is made: off its system's pending list."""
        if self.reclaim_last:
            self.reclaim_last = 0
            self.writer.system.pending_reclaims.remove(self)

    def next_horizon(self, horizon: int) -> int:
        """The instance's decode-run horizon, unchanged (a chunk run plans to the prompt's end)."""
        return horizon

    def finish_step(self) -> None:
        """Account the steps before the last, then the last step's engine time (the scheduler
        completes it)."""
        self.account()
        i = self.last
        self.instance.engine_time.add(self.ends_s[i], self.total_s[i - 1], self.compute_s[i - 1], self.memory_s[i - 1],
                                      self.comm_s, self.kernels_s, self.overhead_s)
        self.instance.counters.iterations += 1
