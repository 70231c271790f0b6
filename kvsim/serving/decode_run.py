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
by then is applied (tokens, pages, first tokens), so what it sees is what the step-by-step
engine would show at that moment. The steps' accounts (engine time, iterations, tokens in the
window, the KV level), which only the run's summary reads, are added once, when the run ends
(or when the summary asks), in step order. Anything that *changes* the instance -- a request
arriving, a load landing, a client aborting, a cache taking pages -- *interrupts* the run: it
settles, and the step in progress becomes the last one. The engine wakes, waits for that step to
end and completes it through the scheduler as usual, then plans again from the exact state.

Every record, counter and level equals the step-by-step engine's bit for bit (the same float
operations in the same order), except when an outside event falls at exactly the instant a step
ends: the step-by-step loop orders such ties by event id, a run counts the step as ended. The
step-by-step engine stays as the reference (``engine.coalesce: false``); the tests hold the two
equal on every shipped scenario and on random ones.

A kernel of the compiled backend (:mod:`kvsim.backend`): the ``cython`` declarations type the
locals when compiled and do nothing in the pure-Python reference.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate
from typing import TYPE_CHECKING

import cython
import numpy as np

from kvsim.metrics.engine_time import EngineTime
from kvsim.metrics.levels import TimeWeightedLevel, WindowCounter
from kvsim.models.step_time import BatchShape, DecodeSteps, exposed_host_s
from kvsim.serving.decode_pages import _new_pages, _new_pages_array
from kvsim.serving.sequence import Sequence

if TYPE_CHECKING:
    from kvsim.serving.instance import Instance
    from kvsim.serving.scheduler import Batch

__all__ = ["DecodeRun", "decode_steps", "MAX_STEPS", "FIRST_HORIZON"]

MAX_STEPS = 4096
"""Longest run planned at once: a longer one is planned again when it ends (bounds the lists)."""

ARRAY_STEPS = 96
"""Runs planned this long or longer keep their steps in numpy arrays (a few array operations per
run instead of a few float operations per step); shorter ones in lists (less overhead). Both paths
give the same results to the bit (``tests/test_coalesce.py``). The compiled backend keeps every
run's steps in C arrays instead (``_plan_compiled``)."""

FIRST_HORIZON = 128
"""Steps an instance plans its first run for. Each instance then adapts (:meth:`DecodeRun.next_horizon`):
four times as far after a run that reached its horizon, twice the steps it lasted (at least this)
after one cut short.
Planning steps that an arrival will cut costs time, not results: any horizon gives the same
records."""


def decode_steps(step_model, seqs: int, context_tokens: int, steps: int, arrays: bool = False) -> DecodeSteps:
    """Breakdowns of ``steps`` consecutive decode-only iterations (see
    :meth:`~kvsim.models.step_time.RooflineStepTime.decode_steps`): the model's closed form if it
    has one, else its :meth:`breakdown` of each step's shape; as numpy arrays if ``arrays``."""
    closed_form = getattr(step_model, "decode_steps_array" if arrays else "decode_steps", None)
    if closed_form is not None:
        return closed_form(seqs, context_tokens, steps)
    if arrays:
        parts = decode_steps(step_model, seqs, context_tokens, steps)
        return DecodeSteps(np.array(parts.total_s), np.array(parts.compute_s), np.array(parts.memory_s),
                           parts.comm_s, parts.kernels_s, parts.overhead_s, parts.host_overlap)
    total, compute, memory = [], [], []
    comm_s = kernels_s = overhead_s = 0.0
    overlap = False
    for step in range(steps):
        parts = step_model.breakdown(BatchShape(decode_seqs=seqs, decode_context_tokens=context_tokens + step * seqs,
                                                sampled_seqs=seqs))
        total.append(parts.total_s)
        compute.append(parts.compute_s)
        memory.append(parts.memory_s)
        comm_s, kernels_s, overhead_s = parts.comm_s, parts.kernels_s, parts.overhead_s
        if parts.host_s is not None:  # the host overlapped: its whole time, each step's part worked out again
            overhead_s, overlap = parts.host_s, True
    return DecodeSteps(total, compute, memory, comm_s, kernels_s, overhead_s, overlap)


class DecodeRun:
    """Decode steps ``1..last`` of an unchanging batch, the first already formed and allocated.

    Built by :meth:`plan`; the instance applies it with :meth:`settle`, accounts it with
    :meth:`account` (when it lets go of the run, or a summary asks) and :meth:`finish_step`.
    Step ``i`` runs from ``ends_s[i - 1]`` to ``ends_s[i]`` (``ends_s[0]`` is when step 1 started).
    Steps before ``last`` are applied here; step ``last`` is completed by the scheduler.
    """

    __slots__ = ("instance", "batch", "seqs", "ends_s", "parts", "free0", "new_blocks",
                 "kv0", "generated0", "blocks0", "own0", "last", "applied", "accounted", "batches0", "block_tokens",
                 "planned", "first_tokens")

    def __init__(self, instance: "Instance", batch: "Batch", ends_s: list[float], parts: DecodeSteps,
                 new_blocks: list[int], start: tuple[list[int], list[int], list[int], list[int]]):
        pool = instance.pool
        self.instance = instance
        self.batch = batch
        self.seqs = batch.decodes
        self.ends_s = ends_s
        self.parts = parts
        self.new_blocks = new_blocks          # cumulative pages allocated by steps 2..i, index i
        self.free0 = pool._free               # after step 1's pages
        # per sequence as step 1 runs: KV tokens, tokens generated, pages, own tokens written
        self.kv0, self.generated0, self.blocks0, self.own0 = start
        # handed-off sequences taking their first decode step in step 1: the client's first token
        self.first_tokens = [seq for seq, generated in zip(self.seqs, self.generated0) if generated == 0]
        self.block_tokens = pool.block_size_tokens
        self.last = self.planned = len(ends_s) - 1
        self.applied = 0                      # steps applied so far (completed, the next allocated)
        self.accounted = 0                    # steps of those accounted (see account())
        self.batches0 = instance.scheduler.batches_formed

    cut_by_arrivals = True  # a request arriving may join the batch (Instance.submit reads it)

    @staticmethod
    @cython.locals(seq=Sequence, generated=cython.long, left=cython.long, steps=cython.long, kv=cython.long,
                   blocks=cython.long, own=cython.long, block=cython.long)
    def plan(instance: "Instance", batch: "Batch", first_s: float, first_parts, now: float,
             adapter_s: float = 0.0) -> "DecodeRun | None":
        """A run starting with ``batch`` (formed at ``now``, lasting ``first_s`` of which ``adapter_s``
        copying LoRA adapters in), or None if the batch may change before its second step ends."""
        scheduler = instance.scheduler
        seqs = batch.decodes
        if batch.prefills or not seqs or len(seqs) != len(scheduler.running) or scheduler.stalled:
            return None
        if scheduler.span is not None or instance.pool.resident is not None:
            return None  # sliding windows change step by step: left to the reference loop
        if adapter_s:
            return None  # the step copies an adapter in; once all are resident, activating them again is idempotent
        pool = instance.pool
        if scheduler.waiting and len(scheduler.running) + len(scheduler.loading) < scheduler.max_num_seqs \
                and scheduler.max_batched_tokens > len(seqs) and not DecodeRun._head_blocked(instance, len(seqs)):
            return None  # a waiting request could be admitted at a later step
        steps = instance.decode_horizon
        if cython.compiled:  # the same plan, its steps in C arrays
            return _plan_compiled(instance, batch, first_s, first_parts, now, steps)
        # pages: a sequence owning b pages with o own tokens in step 1 needs a new page in step
        # b*B - o + 2 and every B steps after; stop before the pool would have to reclaim or preempt
        block = pool.block_size_tokens
        kv0, generated0, blocks0, own0, firsts = [], [], [], [], []
        for seq in seqs:
            generated = seq.generated
            if seq.remote_tokens or seq.gated:
                return None
            left = seq.output_tokens - generated
            if left < steps:
                if left < 2:
                    return None
                steps = left
            kv, blocks = seq.kv_tokens, seq.kv_blocks
            own = kv + 1 - seq.shared_tokens
            kv0.append(kv)
            generated0.append(generated)
            blocks0.append(blocks)
            own0.append(own)
            firsts.append(blocks * block - own + 2)
        arrays = steps >= ARRAY_STEPS
        new_blocks = (_new_pages_array if arrays else _new_pages)(firsts, block, steps, pool._free)
        steps = len(new_blocks) - 1
        if steps < 2:
            return None
        n = len(seqs)
        later = decode_steps(instance.step_model, n, batch.shape.decode_context_tokens + n, steps - 1, arrays)
        if instance.jitter is not None:  # steps 2.. are the instance's iterations batches_formed.. (from 0)
            total = instance.jitter.durations(list(later.total_s) if not arrays else later.total_s.tolist(),
                                              scheduler.batches_formed)
            later = later._replace(total_s=np.array(total) if arrays else total)
        first_memory_s = max(first_parts.memory_s, first_parts.remote_s)
        if arrays:
            if not (later.total_s.min() > 0 and math.isfinite(later.total_s.sum())):
                _refuse(later.total_s.tolist(), n, batch.shape.decode_context_tokens + n)
            durations = np.concatenate(([now, first_s], later.total_s))
            ends = np.add.accumulate(durations)  # in order, as the step-by-step clock adds them
            parts = DecodeSteps(durations[1:], np.concatenate(([first_parts.compute_s], later.compute_s)),
                                np.concatenate(([first_memory_s], later.memory_s)),
                                later.comm_s, later.kernels_s, later.overhead_s, later.host_overlap)
        else:
            ends = [now]
            ends += accumulate(later.total_s, initial=now + first_s)  # in order, as the step-by-step clock adds them
            if not (min(later.total_s) > 0 and math.isfinite(ends[-1])):  # (a NaN step makes the end NaN)
                _refuse(later.total_s, n, batch.shape.decode_context_tokens + n)
            parts = DecodeSteps([first_s] + later.total_s, [first_parts.compute_s] + later.compute_s,
                                [first_memory_s] + later.memory_s, later.comm_s, later.kernels_s, later.overhead_s,
                                later.host_overlap)
        return DecodeRun(instance, batch, ends, parts, new_blocks, (kv0, generated0, blocks0, own0))

    @staticmethod
    def _head_blocked(instance: "Instance", decodes: int) -> bool:
        """The first waiting request lacks the pages for its first chunk, and will while the run
        lasts (pages only get scarcer until a sequence finishes, which ends the run). Only without
        an admission hook: a hook's admission looks up caches and may start loads, step by step."""
        scheduler = instance.scheduler
        if scheduler.hook is not None or scheduler.adapters is not None or instance.pool.reclaim is not None:
            return False  # (a pool that can reclaim cached pages might find room after all)
        head = scheduler.waiting[0]
        if head.not_before > scheduler.batches_formed + 1:
            return False  # async scheduling holds it back now, not pages: it may join mid-run
        pool = instance.pool
        chunk = min(head.prefill_target - head.kv_tokens, scheduler.max_batched_tokens - decodes,
                    scheduler.max_chunk_tokens)  # (as BatchScheduler._admit cuts it)
        return pool.blocks_for(head.kv_tokens + chunk - head.shared_tokens) - head.kv_blocks > pool._free

    @property
    def end_s(self) -> float:
        """When the run's last step ends, seconds."""
        if cython.compiled:
            return self.c_ends[self.last]
        return float(self.ends_s[self.last])

    def __dealloc__(self):
        if cython.compiled:  # the C arrays of a compiled run (a Python object's are lists)
            free(self.c_ends)  # noqa: F821 (a C function of the .pxd, compiled only)
            free(self.c_new)  # noqa: F821

    @cython.locals(done=cython.Py_ssize_t, block=cython.Py_ssize_t, kv=cython.Py_ssize_t, seq=Sequence,
                   generated=cython.Py_ssize_t, blocks=cython.Py_ssize_t, own=cython.Py_ssize_t, need=cython.Py_ssize_t)
    def settle(self, now: float) -> None:
        """Apply every step before the last that has ended by ``now`` (and allocate the next): what
        the instance shows (tokens, pages, first tokens). Their accounts wait for :meth:`account`."""
        if cython.compiled:
            self._settle_compiled(now)
            return
        done = bisect_right(self.ends_s, now, 1, self.last) - 1
        if done <= self.applied:
            return
        first = self.applied + 1
        self.applied = done
        instance = self.instance
        if first == 1 and self.first_tokens:
            first_token, end_s = instance.scheduler.events.first_token, float(self.ends_s[1])
            for seq in self.first_tokens:
                first_token(seq, end_s)
        instance.pool._free = self.free0 - int(self.new_blocks[done + 1])
        block = self.block_tokens
        for seq, kv, generated, blocks, own in zip(self.seqs, self.kv0, self.generated0, self.blocks0, self.own0):
            seq.kv_tokens = kv + done
            seq.generated = generated + done
            need = -(-(own + done) // block)
            seq.kv_blocks = need if need > blocks else blocks
        instance.scheduler.batches_formed = self.batches0 + done

    def account(self) -> None:
        """Account the steps applied so far: engine time, iterations, tokens in the window, the KV
        level. Only the run's summary reads these, so a run settled many times while it lasts
        (samplers, routers) accounts once, when the instance lets go of it (it ends or is cut)
        or a summary asks: the same additions in the same order as step by step."""
        if cython.compiled:
            self._account_compiled()
            return
        done = self.applied
        if done <= self.accounted:
            return
        first = self.accounted + 1
        self.accounted = done
        instance = self.instance
        parts = self.parts
        num_blocks = instance.pool.num_blocks
        used0 = num_blocks - self.free0
        ends = self.ends_s[first:done + 1]
        steps = (parts.total_s[first - 1:done], parts.compute_s[first - 1:done], parts.memory_s[first - 1:done])
        counters = instance.counters
        counters.iterations += done - first + 1
        # the pool's level as each step ends (its pages) and the next is formed (its new pages)
        if isinstance(ends, np.ndarray):
            instance.engine_time.add_each_array(ends, *steps, parts.comm_s, parts.kernels_s, parts.overhead_s,
                                                parts.host_overlap)
            counters.output_tokens.add_at_each_array(ends, len(self.seqs))
            during = (used0 + self.new_blocks[first:done + 2]) / num_blocks
            instance.kv_utilization.set_at_each_array(ends, during[:-1], during[1:])
        else:
            instance.engine_time.add_each(ends, *steps, parts.comm_s, parts.kernels_s, parts.overhead_s,
                                          parts.host_overlap)
            counters.output_tokens.add_at_each(ends, len(self.seqs))
            new_blocks = self.new_blocks
            during = [(used0 + new_blocks[i]) / num_blocks for i in range(first, done + 2)]
            instance.kv_utilization.set_at_each(ends, during[:-1], during[1:])

    def cut(self, now: float, keep: int = 0) -> None:
        """Settle, and make the step in progress at ``now`` (or ``keep`` steps after it) the last."""
        self.settle(now)
        self.last = min(self.last, self.applied + 1 + keep)

    def next_horizon(self, horizon: int) -> int:
        """How far to plan the instance's next run, after this one ended (see ``FIRST_HORIZON``)."""
        if self.last < self.planned:
            return min(MAX_STEPS, max(FIRST_HORIZON, 2 * self.last))
        if self.last >= horizon:
            return min(MAX_STEPS, 4 * horizon)
        return horizon

    def finish_step(self) -> None:
        """Account the steps before the last, then the last step's engine time (the scheduler
        completes it)."""
        self.account()
        i = self.last
        if cython.compiled:
            overhead_s = self.overhead_s
            if self.host_overlap:
                overhead_s = exposed_host_s(overhead_s, self.c_compute[i - 1], self.c_memory[i - 1], self.comm_s,
                                            self.kernels_s)
            self.instance.engine_time.add(self.c_ends[i], self.c_total[i - 1], self.c_compute[i - 1],
                                          self.c_memory[i - 1], self.comm_s, self.kernels_s, overhead_s)
            self.instance.counters.iterations += 1
            return
        parts = self.parts
        compute_s, memory_s = float(parts.compute_s[i - 1]), float(parts.memory_s[i - 1])
        overhead_s = parts.overhead_s
        if parts.host_overlap:
            overhead_s = exposed_host_s(overhead_s, compute_s, memory_s, parts.comm_s, parts.kernels_s)
        self.instance.engine_time.add(float(self.ends_s[i]), float(parts.total_s[i - 1]), compute_s, memory_s,
                                      parts.comm_s, parts.kernels_s, overhead_s)
        self.instance.counters.iterations += 1


    # The compiled backend's run: the same steps, kept in C arrays (decode_run.pxd), so a step
    # costs a few C operations to plan, apply and account, not a few Python floats and list slots.

    @cython.locals(lo=cython.Py_ssize_t, hi=cython.Py_ssize_t, mid=cython.Py_ssize_t, done=cython.Py_ssize_t,
                   first=cython.Py_ssize_t, n=cython.Py_ssize_t, k=cython.Py_ssize_t, block=cython.long,
                   need=cython.long, seq=Sequence, end_s=cython.double, t=cython.double)
    def _settle_compiled(self, now):
        t = now
        lo, hi = 1, self.last  # bisect_right(ends, now, 1, last)
        while lo < hi:
            mid = (lo + hi) // 2
            if t < self.c_ends[mid]:
                hi = mid
            else:
                lo = mid + 1
        done = lo - 1
        if done <= self.applied:
            return
        first = self.applied + 1
        self.applied = done
        instance = self.instance
        if first == 1 and self.first_tokens:
            first_token, end_s = instance.scheduler.events.first_token, self.c_ends[1]
            for seq in self.first_tokens:
                first_token(seq, end_s)
        instance.pool._free = self.free0 - self.c_new[done + 1]
        block = self.block_tokens
        n = len(self.seqs)
        start = self.c_start
        for k in range(n):
            seq = self.seqs[k]
            seq.kv_tokens = start[k] + done
            seq.generated = start[n + k] + done
            need = -(-(start[3 * n + k] + done) // block)
            seq.kv_blocks = need if need > start[2 * n + k] else start[2 * n + k]
        instance.scheduler.batches_formed = self.batches0 + done

    @cython.locals(done=cython.Py_ssize_t, first=cython.Py_ssize_t, steps=cython.Py_ssize_t, j=cython.Py_ssize_t,
                   used0=cython.long, num_blocks=cython.long, during=cython.p_double, engine_time=EngineTime,
                   tokens=WindowCounter, level=TimeWeightedLevel)
    def _account_compiled(self):
        done = self.applied
        if done <= self.accounted:
            return
        first = self.accounted + 1
        self.accounted = done
        instance = self.instance
        steps = done - first + 1
        counters = instance.counters
        counters.iterations += steps
        engine_time = cython.cast(EngineTime, instance.engine_time, typecheck=True)
        engine_time.add_steps(self.c_ends + first, self.c_total + first - 1, self.c_compute + first - 1,
                              self.c_memory + first - 1, steps, self.comm_s, self.kernels_s, self.overhead_s,
                              self.host_overlap)
        tokens = cython.cast(WindowCounter, counters.output_tokens, typecheck=True)
        tokens.add_at_steps(self.c_ends + first, steps, len(self.seqs))
        # the pool's level as each step ends (its pages) and the next is formed (its new pages)
        num_blocks = instance.pool.num_blocks
        used0 = num_blocks - self.free0
        during = _doubles(steps + 1)  # noqa: F821 (a C function of the .pxd, compiled only)
        for j in range(steps + 1):
            during[j] = (used0 + self.c_new[first + j]) / num_blocks
        level = cython.cast(TimeWeightedLevel, instance.kv_utilization, typecheck=True)
        level.set_steps(self.c_ends + first, during, during + 1, steps)
        free(during)  # noqa: F821


@cython.locals(run=DecodeRun, seq=Sequence, n=cython.Py_ssize_t, k=cython.Py_ssize_t, i=cython.Py_ssize_t,
               steps=cython.Py_ssize_t, room=cython.Py_ssize_t, left=cython.long, block=cython.long,
               free_pages=cython.long, total=cython.long, first=cython.long, kv=cython.long, blocks=cython.long,
               own=cython.long, ends=cython.p_double, step_s=cython.p_double, compute=cython.p_double,
               memory=cython.p_double, pages=cython.p_long, per_step=cython.p_long, start=cython.p_long,
               bad=cython.bint, a=cython.double, b=cython.double)
def _plan_compiled(instance, batch, first_s, first_parts, now, steps):
    """:meth:`DecodeRun.plan` from its per-sequence checks on, its steps in C arrays (compiled
    only): the same pages (:func:`_new_pages`), step times (:func:`decode_steps`) and ends."""
    seqs = batch.decodes
    n = len(seqs)
    pool = instance.pool
    block = pool.block_size_tokens
    for k in range(n):
        seq = seqs[k]
        if seq.remote_tokens or seq.gated:
            return None
        left = seq.output_tokens - seq.generated
        if left < steps:
            if left < 2:
                return None
            steps = left
    room = steps
    run = DecodeRun.__new__(DecodeRun)  # owns the C arrays from here (freed with it, whatever happens)
    pages = cython.cast(cython.p_long, malloc((2 * (room + 1) + 4 * n) * cython.sizeof(cython.long)))  # noqa: F821
    if pages == cython.NULL:
        raise MemoryError()
    run.c_new = pages
    per_step, start = pages + room + 1, pages + 2 * (room + 1)
    for i in range(room + 1):
        pages[i] = 0
        per_step[i] = 0
    # pages: a sequence owning b pages with o own tokens in step 1 needs a new page in step
    # b*B - o + 2 and every B steps after; stop before the pool would have to reclaim or preempt
    for k in range(n):
        seq = seqs[k]
        kv, blocks = seq.kv_tokens, seq.kv_blocks
        own = kv + 1 - seq.shared_tokens
        start[k], start[n + k], start[2 * n + k], start[3 * n + k] = kv, seq.generated, blocks, own
        first = blocks * block - own + 2
        if first < 0:
            raise RuntimeError(f"a decode run's sequence {seq.rid} holds fewer pages than its tokens")
        while first <= room:
            per_step[first] += 1
            first += block
    free_pages = pool._free
    total = 0
    for i in range(2, room + 1):
        total += per_step[i]
        if total > free_pages:
            steps = i - 1
            break
        pages[i] = total
    if steps < 2:
        return None
    ends = _doubles(4 * steps + 1)  # noqa: F821 (a C function of the .pxd, compiled only)
    run.c_ends = ends
    step_s, compute, memory = ends + steps + 1, ends + 2 * steps + 1, ends + 3 * steps + 1
    run.c_total, run.c_compute, run.c_memory, run.c_start = step_s, compute, memory, start
    a, b = first_parts.memory_s, first_parts.remote_s
    step_s[0], compute[0], memory[0] = first_s, first_parts.compute_s, b if b > a else a  # max(a, b)
    context = batch.shape.decode_context_tokens + n
    step_model = instance.step_model
    if getattr(step_model, "_decode_terms", None) is not None:
        terms = step_model._decode_terms(n)
        fill_decode_steps(terms, context, n, steps - 1, step_s + 1, compute + 1, memory + 1)  # noqa: F821
        run.comm_s, run.kernels_s, run.overhead_s, run.host_overlap = terms[6], terms[7], terms[8], terms[12]
    else:
        later = decode_steps(step_model, n, context, steps - 1)
        for k in range(steps - 1):
            step_s[k + 1], compute[k + 1], memory[k + 1] = later.total_s[k], later.compute_s[k], later.memory_s[k]
        run.comm_s, run.kernels_s, run.overhead_s = later.comm_s, later.kernels_s, later.overhead_s
        run.host_overlap = later.host_overlap
    if instance.jitter is not None:  # steps 2.. are the instance's iterations batches_formed.. (from 0)
        jittered = instance.jitter.durations([step_s[k] for k in range(1, steps)], instance.scheduler.batches_formed)
        for k in range(1, steps):
            step_s[k] = jittered[k - 1]
    ends[0] = now
    bad = False
    for i in range(1, steps + 1):
        ends[i] = ends[i - 1] + step_s[i - 1]  # in order, as the step-by-step clock adds them
        if i > 1 and not step_s[i - 1] > 0:
            bad = True
    if bad or not math.isfinite(ends[steps]):  # (a NaN step makes the end NaN)
        _refuse([step_s[k] for k in range(1, steps)], n, context)
    run.instance, run.batch, run.seqs = instance, batch, seqs
    run.first_tokens = [seqs[k] for k in range(n) if start[n + k] == 0]
    run.free0, run.block_tokens = pool._free, block
    run.last = run.planned = steps
    run.applied = run.accounted = 0
    run.batches0 = instance.scheduler.batches_formed
    return run


def _refuse(later_s: list[float], seqs: int, context_tokens: int) -> None:
    """Raise for the first of a run's later steps (step 2 on; ``context_tokens`` in step 2) whose
    time is not a positive finite number of seconds, naming it as the step-by-step loop would."""
    for k, seconds in enumerate(later_s):
        if not (seconds > 0 and math.isfinite(seconds)):
            shape = BatchShape(decode_seqs=seqs, decode_context_tokens=context_tokens + k * seqs, sampled_seqs=seqs)
            raise RuntimeError(f"step-time model returned {seconds!r} s for {shape}")
    raise RuntimeError(f"step-time model returned decode steps of {seqs} sequences that add up to no finite time")

