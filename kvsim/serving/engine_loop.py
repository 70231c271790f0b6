"""The engine loop of one serving instance: form a batch, time it, sleep through it (or through a
coalesced decode run, :mod:`kvsim.serving.decode_run`, or prefill chunk run,
:mod:`kvsim.serving.chunk_run`), apply it; sleep while there is no work.

A SimPy process per instance (:class:`kvsim.serving.instance.Instance` starts it), and a kernel
of the compiled backend (:mod:`kvsim.backend`): compiled, the loop is a C generator over the
typed instance, scheduler, pool, level and engine time, and calls the scheduler's ``schedule``
and ``complete`` and the instance's methods as C methods; in the pure-Python reference the same
source runs as it reads.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import cython

from kvsim.kv.block_pool import BlockPool
from kvsim.metrics.engine_time import EngineTime
from kvsim.metrics.levels import TimeWeightedLevel
from kvsim.serving.chunk_run import ChunkRun
from kvsim.serving.instance import Instance
from kvsim.serving.scheduler import Batch, BatchScheduler

if TYPE_CHECKING:
    from kvsim.serving.decode_run import DecodeRun

__all__ = ["engine_loop", "sleep_through"]


@cython.locals(instance=Instance, scheduler=BatchScheduler, pool=BlockPool, account=EngineTime,
               level=TimeWeightedLevel, batch=Batch, coalesce=cython.bint, idle=cython.bint, cold_s=cython.double)
def engine_loop(instance: Instance):
    """The instance's engine, as a SimPy process generator (it never returns).

    With ``engine.host_overlap`` a step that starts an idle engine (the first, or the first after
    the engine slept for want of work) pays the host time a busy engine hides behind the step
    before (:attr:`~kvsim.models.step_time.StepBreakdown.hidden_s`); such a step is never the
    first of a coalesced run, whose steps all hide it."""
    env = instance.env
    scheduler = instance.scheduler
    step_time = instance.step_model.iteration_time_s
    breakdown = getattr(instance.step_model, "breakdown", None)
    coalesce = instance.coalesce and breakdown is not None
    account = instance.engine_time
    counters = instance.counters
    level = instance.kv_utilization
    pool = instance.pool
    idle = True  # nothing ran before: the next step has no step to hide its host work behind
    while True:
        # simulated time moves only between events: one reading of the clock after each wait
        now = env.now
        batch = scheduler.schedule(now)
        if batch is None:
            if instance._idle is not None:
                instance._check_idle()
            instance._wake = env.event()
            idle = True
            yield instance._wake
            instance._wake = None
            continue
        level.set(now, pool.utilization)
        if instance.on_final_chunk is not None and batch.prefills:
            instance._final_chunks(batch, now)
        elif instance.role == "decode" and batch.prefills:
            instance._recompute_starts(batch, now)
        # KV read in place from peers: the hook knows who else reads from them now
        hook = scheduler.hook
        remote_Bps = hook.begin_remote_reads(batch) if batch.shape.remote_kv_tokens and hook else None
        if breakdown is None:
            parts = None
        else:
            parts = breakdown(batch.shape) if remote_Bps is None else breakdown(batch.shape, remote_Bps)
        duration_s = parts.total_s if parts is not None else step_time(batch.shape)
        cold_s = 0.0
        if idle:
            idle = False
            if parts is not None and parts.host_s is not None:
                cold_s = parts.host_s - parts.overhead_s  # parts.hidden_s
                duration_s += cold_s
        adapter_s = 0.0
        if instance.adapters is not None:
            adapter_s = instance.adapters.activate([seq.adapter for seq, _ in batch.prefills]
                                                   + [seq.adapter for seq in batch.decodes])
            duration_s += adapter_s
        if instance.jitter is not None and duration_s > 0:  # this iteration's factor (the batch counted from 0)
            duration_s = instance.jitter.duration(duration_s, scheduler.batches_formed - 1)
        if not duration_s > 0 or math.isinf(duration_s):
            raise RuntimeError(f"step-time model returned {duration_s!r} s for {batch.shape}")
        instance._in_flight = True
        run = None
        if coalesce and not cold_s:
            if not batch.prefills:
                run = instance._plan_run(instance, batch, duration_s, parts, now, adapter_s)
            elif not batch.decodes and remote_Bps is None and parts is not None:
                run = ChunkRun.plan(instance, batch, duration_s, parts, now, adapter_s)
        if run is not None:
            yield from sleep_through(instance, run)
            instance._in_flight = False
            now = env.now
        else:
            yield env.timeout(duration_s)
            instance._in_flight = False
            now = env.now
            if remote_Bps is not None:
                hook.end_remote_reads()
            counters.iterations += 1
            if parts is not None:
                account.add(now, duration_s, parts.compute_s, max(parts.memory_s, parts.remote_s),
                            parts.comm_s, parts.kernels_s, parts.overhead_s + cold_s + adapter_s)
            else:
                account.add_time_only(now, duration_s)
        scheduler.complete(batch, now)
        level.set(now, pool.utilization)
        if instance._idle is not None:
            instance._check_idle()


@cython.locals(instance=Instance, pool=BlockPool, scheduler=BatchScheduler)
def sleep_through(instance: Instance, run: DecodeRun | ChunkRun):
    """Sleep through ``run`` until its last step ends (or, cut short, the step in progress),
    apply and account the steps before it, then account the last; the caller completes it."""
    env = instance.env
    pool = instance.pool
    scheduler = instance.scheduler
    instance._decode_run = run
    pool.observer = scheduler.observer = instance
    instance._sleeping = run
    wait = instance._aim()
    while True:
        yield wait  # a cut may aim the process at another wait meanwhile (Instance._reaim)
        if instance._final:
            break
        instance._final = True  # halfway: now >= t / 2, so the rest is one exact wait
        wait = env.timeout(run.end_s - env.now)
    instance._sleeping = None
    if instance._decode_run is run:
        instance._decode_run = None
        pool.observer = scheduler.observer = None
        run.settle(env.now)
    run.finish_step()
    instance.decode_horizon = run.next_horizon(instance.decode_horizon)
