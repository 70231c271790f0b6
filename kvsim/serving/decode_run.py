"""Coalesced decode runs: many engine iterations advanced in one simulation event.

Most iterations of a busy instance repeat the one before: the same sequences each take one decode
step, their contexts one token longer. While nothing can change that batch -- no sequence
finishes, nothing waits that could be admitted, the KV pool has room for every page the steps
will need -- the next ``m`` iterations are known in advance: their durations follow from the
contexts in closed form (:meth:`~kvsim.models.step_time.RooflineStepTime.decode_steps`), their
end times by adding them up in order, exactly as the step-by-step loop would.

A :class:`DecodeRun` holds that plan and applies its steps lazily. The engine sleeps until the
last step ends (one event); anything that looks at the instance in between -- a router reading
its free KV, a sampler reading the pool -- *settles* the run first: every step that has started
by then is applied (tokens, pages, counters, the utilisation level), so what it sees is what the
step-by-step engine would show at that moment. Anything that *changes* the instance -- a request
arriving, a load landing, a client aborting, a cache taking pages -- *interrupts* the run: it
settles, and the step in progress becomes the last one. The engine wakes, waits for that step to
end and completes it through the scheduler as usual, then plans again from the exact state.

Every record, counter and level equals the step-by-step engine's bit for bit (the same float
operations in the same order), except when an outside event falls at exactly the instant a step
ends: the step-by-step loop orders such ties by event id, a run counts the step as ended. The
step-by-step engine stays as the reference (``engine.coalesce: false``); the tests hold the two
equal on every shipped scenario and on random ones.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import TYPE_CHECKING

from kvsim.models.step_time import BatchShape, DecodeSteps

if TYPE_CHECKING:
    from kvsim.serving.instance import Instance
    from kvsim.serving.scheduler import Batch

__all__ = ["DecodeRun", "decode_steps", "MAX_STEPS"]

MAX_STEPS = 4096
"""Longest run planned at once: a longer one is planned again when it ends (bounds the lists)."""


def decode_steps(step_model, seqs: int, context_tokens: int, steps: int) -> DecodeSteps:
    """Breakdowns of ``steps`` consecutive decode-only iterations (see
    :meth:`~kvsim.models.step_time.RooflineStepTime.decode_steps`): the model's closed form if it
    has one, else its :meth:`breakdown` of each step's shape."""
    closed_form = getattr(step_model, "decode_steps", None)
    if closed_form is not None:
        return closed_form(seqs, context_tokens, steps)
    total, compute, memory = [], [], []
    comm_s = kernels_s = overhead_s = 0.0
    for step in range(steps):
        parts = step_model.breakdown(BatchShape(decode_seqs=seqs, decode_context_tokens=context_tokens + step * seqs,
                                                sampled_seqs=seqs))
        total.append(parts.total_s)
        compute.append(parts.compute_s)
        memory.append(parts.memory_s)
        comm_s, kernels_s, overhead_s = parts.comm_s, parts.kernels_s, parts.overhead_s
    return DecodeSteps(total, compute, memory, comm_s, kernels_s, overhead_s)


class DecodeRun:
    """Decode steps ``1..last`` of an unchanging batch, the first already formed and allocated.

    Built by :meth:`plan`; the instance applies it with :meth:`settle` and :meth:`finish_step`.
    Step ``i`` runs from ``ends_s[i - 1]`` to ``ends_s[i]`` (``ends_s[0]`` is when step 1 started).
    Steps before ``last`` are applied here; step ``last`` is completed by the scheduler.
    """

    __slots__ = ("instance", "batch", "seqs", "ends_s", "parts", "utilization", "free0", "new_blocks",
                 "kv0", "generated0", "blocks0", "own0", "last", "applied", "batches0", "block_tokens")

    def __init__(self, instance: "Instance", batch: "Batch", ends_s: list[float], parts: DecodeSteps,
                 new_blocks: list[int]):
        pool = instance.pool
        self.instance = instance
        self.batch = batch
        self.seqs = batch.decodes
        self.ends_s = ends_s
        self.parts = parts
        self.new_blocks = new_blocks          # cumulative pages allocated by steps 2..i, index i
        self.free0 = pool._free               # after step 1's pages
        self.kv0 = [seq.kv_tokens for seq in self.seqs]
        self.generated0 = [seq.generated for seq in self.seqs]
        self.blocks0 = [seq.kv_blocks for seq in self.seqs]
        self.own0 = [seq.kv_tokens + 1 - seq.shared_tokens for seq in self.seqs]  # own tokens in step 1
        self.block_tokens = pool.block_size_tokens
        self.last = len(ends_s) - 1
        self.applied = 0                      # steps applied so far (completed, the next allocated)
        self.batches0 = instance.scheduler.batches_formed

    @staticmethod
    def plan(instance: "Instance", batch: "Batch", first_s: float, first_parts, now: float) -> "DecodeRun | None":
        """A run starting with ``batch`` (formed at ``now``, lasting ``first_s``), or None if the
        batch may change before its second step ends."""
        scheduler = instance.scheduler
        seqs = batch.decodes
        if batch.prefills or not seqs or len(seqs) != len(scheduler.running) or scheduler.stalled:
            return None
        if scheduler.span is not None or instance.pool.resident is not None or instance.adapters is not None:
            return None  # sliding windows and LoRA slots change step by step: left to the reference loop
        pool = instance.pool
        if scheduler.waiting and len(scheduler.running) + len(scheduler.loading) < scheduler.max_num_seqs \
                and scheduler.max_batched_tokens > len(seqs) and not DecodeRun._head_blocked(instance, len(seqs)):
            return None  # a waiting request could be admitted at a later step
        steps = MAX_STEPS
        for seq in seqs:
            left = seq.output_tokens - seq.generated
            if left < steps:
                steps = left
            if seq.generated == 0 or seq.remote_tokens or seq.gated:
                return None
        if steps < 2:
            return None
        # pages: a sequence owning b pages with o own tokens in step 1 needs a new page in step
        # b*B - o + 2 and every B steps after; stop before the pool would have to reclaim or preempt
        block = pool.block_size_tokens
        per_step = [0] * (steps + 1)
        for seq in seqs:
            for i in range(seq.kv_blocks * block - (seq.kv_tokens + 1 - seq.shared_tokens) + 2, steps + 1, block):
                per_step[i] += 1
        free = pool._free
        new_blocks = [0] * (steps + 1)
        total = 0
        for i in range(2, steps + 1):
            total += per_step[i]
            if total > free:
                steps = i - 1
                break
            new_blocks[i] = total
        if steps < 2:
            return None
        del new_blocks[steps + 1:]
        later = decode_steps(instance.step_model, len(seqs), batch.shape.decode_context_tokens + len(seqs), steps - 1)
        ends = [now]
        t = now + first_s
        ends.append(t)
        for d in later.total_s:
            if not d > 0 or math.isinf(d):
                raise RuntimeError(f"step-time model returned {d!r} s for a decode step of {len(seqs)} sequences")
            t += d
            ends.append(t)
        parts = DecodeSteps([first_s] + later.total_s, [first_parts.compute_s] + later.compute_s,
                            [max(first_parts.memory_s, first_parts.remote_s)] + later.memory_s,
                            later.comm_s, later.kernels_s, later.overhead_s)
        return DecodeRun(instance, batch, ends, parts, new_blocks)

    @staticmethod
    def _head_blocked(instance: "Instance", decodes: int) -> bool:
        """The first waiting request lacks the pages for its first chunk, and will while the run
        lasts (pages only get scarcer until a sequence finishes, which ends the run). Only without
        an admission hook: a hook's admission looks up caches and may start loads, step by step."""
        scheduler = instance.scheduler
        if scheduler.hook is not None or scheduler.adapters is not None:
            return False
        head = scheduler.waiting[0]
        if head.not_before > scheduler.batches_formed + 1:
            return False  # async scheduling holds it back now, not pages: it may join mid-run
        pool = instance.pool
        chunk = min(head.prefill_target - head.kv_tokens, scheduler.max_batched_tokens - decodes)
        return -(-(head.kv_tokens + chunk - head.shared_tokens) // pool.block_size_tokens) - head.kv_blocks > pool._free

    @property
    def end_s(self) -> float:
        """When the run's last step ends, seconds."""
        return self.ends_s[self.last]

    def settle(self, now: float) -> None:
        """Apply every step before the last that has ended by ``now`` (and allocate the next)."""
        done = bisect_right(self.ends_s, now, 1, self.last) - 1
        if done <= self.applied:
            return
        first = self.applied + 1
        self.applied = done
        instance = self.instance
        ends = self.ends_s
        parts = self.parts
        pool = instance.pool
        num_blocks = pool.num_blocks
        free0 = self.free0
        new_blocks = self.new_blocks
        level = instance.kv_utilization
        account = instance.engine_time
        emitted = instance.counters.output_tokens
        n = len(self.seqs)
        for i in range(first, done + 1):
            t = ends[i]
            account.add(t, parts.total_s[i - 1], parts.compute_s[i - 1], parts.memory_s[i - 1],
                        parts.comm_s, parts.kernels_s, parts.overhead_s)
            emitted.add(t, n)
            level.set(t, (num_blocks - (free0 - new_blocks[i])) / num_blocks)
            level.set(t, (num_blocks - (free0 - new_blocks[i + 1])) / num_blocks)
        instance.counters.iterations += done - first + 1
        pool._free = free0 - new_blocks[done + 1]
        block = self.block_tokens
        for seq, kv, generated, blocks, own in zip(self.seqs, self.kv0, self.generated0, self.blocks0, self.own0):
            seq.kv_tokens = kv + done
            seq.generated = generated + done
            need = -(-(own + done) // block)
            seq.kv_blocks = need if need > blocks else blocks
        instance.scheduler.batches_formed = self.batches0 + done

    def cut(self, now: float) -> None:
        """Settle, and make the step in progress at ``now`` the last."""
        self.settle(now)
        self.last = min(self.last, self.applied + 1)

    def finish_step(self) -> None:
        """Account the last step's engine time (the scheduler completes it)."""
        i = self.last
        parts = self.parts
        self.instance.engine_time.add(self.ends_s[i], parts.total_s[i - 1], parts.compute_s[i - 1],
                                      parts.memory_s[i - 1], parts.comm_s, parts.kernels_s, parts.overhead_s)
        self.instance.counters.iterations += 1
