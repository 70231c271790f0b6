"""An inference instance: one TP group of cards running the engine loop as a SimPy process.

The loop is one event per engine iteration: form a batch, wait its predicted duration, apply
it. When there is nothing to run it sleeps until a request is submitted or something it waits
for (a load, pages) arrives.

An instance has a *role*: ``mixed`` serves whole requests; ``prefill`` computes prompts and
hands each prompt's KV to a decode instance; ``decode`` generates from handed-off KV.

A kernel of the compiled backend (:mod:`kvsim.backend`): ``instance.pxd`` beside this file types
the instance's fields and its recording events (``cdef`` classes over the compiled pool,
scheduler, level and engine time), so the engine loop, the load board and the front end read
and call it in C; the pure-Python reference ignores it and keeps ``__slots__``. A run makes its
instances from its backend's module (``kernels.instance.Instance``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import simpy
from simpy.core import URGENT

from kvsim.backend import Kernels
from kvsim.backend import kernels as backend_kernels
from kvsim.kv.block_pool import BlockPool
from kvsim.metrics.engine_time import SystemCounters
from kvsim.metrics.records import RequestRecords
from kvsim.models.attention_span import AttentionSpan
from kvsim.models.step_time import StepTimeModel
from kvsim.serving.adapters import AdapterSlots
from kvsim.serving.decode_run import FIRST_HORIZON, DecodeRun
from kvsim.serving.scheduler import AdmissionHook, Batch, SchedulerEvents
from kvsim.serving.sequence import Sequence

if TYPE_CHECKING:  # the board's kernel reads instances: importing it here would be a cycle compiled
    from kvsim.models.step_variance import StepJitter
    from kvsim.serving.chunk_run import ChunkRun
    from kvsim.serving.load_board import LoadBoard

__all__ = ["Instance"]


class _RecordingEvents(SchedulerEvents):
    """Writes scheduler milestones into the columnar records and counters, as the instance's
    role means them: a prefill instance's prompt is not the client's first token, and a decode
    instance's recomputed prompt is not new input.

    Input tokens count chunk by chunk as a prompt is prefilled, when each chunk's batch ends (the
    first chunk also counts the cached prefix under it: that part of the prompt was served by a
    load, not recomputed); the rest, if any, when the prompt completes (a prompt served whole from
    the cache). A prompt recomputed after a preemption counts only past what was counted.

    Compiled, a ``cdef`` class whose methods the scheduler calls in C (``instance.pxd``)."""

    __slots__ = ("records", "counters", "input_tokens", "output_tokens", "instance")

    def __init__(self, records: RequestRecords, counters: SystemCounters, instance: "Instance"):
        self.records = records
        self.counters = counters
        self.input_tokens = counters.input_tokens  # the counters' own (typed compiled)
        self.output_tokens = counters.output_tokens
        self.instance = instance

    def admitted(self, seq: Sequence, now: float) -> None:
        self.records.admit_s[seq.rid] = now

    def first_token(self, seq: Sequence, now: float) -> None:
        if self.instance.role != "prefill":
            self.records.first_token_s[seq.rid] = now + self.instance.output_s

    def prompt_done(self, seq: Sequence, now: float) -> None:
        if self.instance.role != "decode" and seq.prompt_counted < seq.prompt_tokens:
            self.input_tokens.add(now, seq.prompt_tokens - seq.prompt_counted)
            seq.prompt_counted = seq.prompt_tokens

    def tokens_emitted(self, count: int, now: float) -> None:
        self.output_tokens.add(now, count)

    def preempted(self, seq: Sequence) -> None:
        self.records.preemptions[seq.rid] += 1

    def prefill_computed(self, seq: Sequence, tokens: int, now: float) -> None:
        self.records.computed_tokens[seq.rid] += tokens
        if seq.generated == 0 and self.instance.role != "decode":
            served = seq.kv_tokens if seq.kv_tokens < seq.prompt_tokens else seq.prompt_tokens
            if served > seq.prompt_counted:
                self.input_tokens.add(now, served - seq.prompt_counted)
                seq.prompt_counted = served

    def finished(self, seq: Sequence, now: float) -> None:
        self.instance._load_changed()
        self.instance.on_finish(seq, now)  # the front end records when the client has the answer

    def decode_started(self, seq: Sequence, now: float) -> None:
        self.records.decode_start_s[seq.rid] = now

    def prefilled(self, seq: Sequence, now: float) -> None:
        self.records.prefill_end_s[seq.rid] = now
        self.instance._load_changed()  # the prompt has left: no longer outstanding here
        self.instance.on_prefilled(self.instance, seq, now)


def _ignore(*_args) -> None:
    return None


class _Reaim(simpy.Event):
    """Urgent event at the current time whose processing aims ``instance``'s sleeping engine at
    its run's new end (:meth:`Instance._reaim`); made and scheduled as SimPy's ``Interruption`` is,
    so the event order and ids are what an interrupt gave."""

    def __init__(self, instance: "Instance"):
        # Event.__init__ inlined as in simpy.events.Interruption (an event triggered at birth)
        self.env = instance.env
        self.callbacks = [instance._reaim]
        self._value = None
        self._ok = True
        self.env.schedule(self, URGENT)


class Instance:
    """One serving instance (a TP group) with its KV pool, scheduler and engine loop.

    Parameters
    ----------
    env : simpy.Environment
    index : int
        Position of this instance in its system (recorded per request).
    role : str
        ``mixed``, ``prefill`` or ``decode``.
    step_model : StepTimeModel
        Predicts each iteration's duration in seconds.
    pool : BlockPool
        KV blocks available to this instance.
    max_batched_tokens, max_num_seqs : int
        Batching limits of the whole instance (with data-parallel attention, every rank's
        added up: :attr:`~kvsim.serving.specs.InstanceSpec.instance_max_num_seqs`).
    records : RequestRecords
    counters : SystemCounters
    window_start_s, window_end_s : float
        The measured window (end of warm-up, end of arrivals), seconds.
    hook : AdmissionHook, optional
        Prefix caching and offload (mixed, prefill) or the handoff receiver (decode).
    on_finish : callable, optional
        ``on_finish(seq, now)`` when a request's last token is emitted here.
    on_prefilled : callable, optional
        ``on_prefilled(instance, seq, now)`` when a prefill instance has computed a prompt.
    on_final_chunk : callable, optional
        ``on_final_chunk(instance, seq, now)`` when an iteration that completes a prompt starts
        on a prefill instance (a layer-by-layer handoff starts streaming then).
    gpus : list of str
        The topology endpoints of its cards.
    output_s : float
        From the end of the step that samples a token to the client receiving it (detokenise,
        stream), seconds: recorded first-token and finish times are the client's.
    span : AttentionSpan, optional
        The model's sliding-window layers (see :class:`~kvsim.serving.scheduler.BatchScheduler`).
    async_scheduling : bool
        The engine forms the next batch while the current one runs (vLLM's async scheduling,
        SGLang's overlap scheduler): a request submitted during an iteration joins the batch
        after the next one.
    adapters : AdapterSlots, optional
        Its LoRA slots: which adapters a step may mix, and the copy a step waits for when one of
        its adapters is not resident.
    coalesce : bool
        Advance runs of unchanging decode iterations (:mod:`kvsim.serving.decode_run`) and of one
        prompt's prefill chunks (:mod:`kvsim.serving.chunk_run`) in one event; False steps one
        iteration per event (the reference).
    kernels : Kernels, optional
        The backend's kernel modules its decode runs and levels come from (:mod:`kvsim.backend`;
        default: the pure-Python reference).
    max_chunk_tokens : int, optional
        Most prompt tokens one sequence computes in an iteration (default ``max_batched_tokens``;
        with data-parallel attention, one rank's budget).
    jitter : StepJitter, optional
        Each iteration's random factor (:mod:`kvsim.models.step_variance`); None: every step
        takes the step model's time.

    Notes
    -----
    ``board``, when set (by :meth:`~kvsim.serving.load_board.LoadBoard.add`), is told whenever
    :attr:`outstanding` may have changed (:meth:`_load_changed`) or the instance joins or leaves
    a role (:meth:`set_role`, ``accepting``), so that routers need not scan every instance.
    Inside the engine loop the count moves only when a request finishes or a prompt is detached,
    both reported through the scheduler's events; from outside (submit, abort, a load landing,
    a handoff ending) every change is followed by :meth:`wake`. A report may come before the
    change is complete (a finished or detached request is still in the running list while the
    events run); the board reads counts only when a router of the instance's own role asks,
    and nothing routes to that role from inside those events (a detached prompt is routed to
    a decode instance).
    """

    __slots__ = ("env", "index", "role", "step_model", "pool", "records", "counters", "on_finish", "on_prefilled",
                 "on_final_chunk", "gpus", "output_s", "async_scheduling", "_in_flight", "kernels", "_plan_run",
                 "kv_utilization", "engine_time", "coalesce", "_decode_run", "_sleeping", "_final",
                 "decode_horizon", "adapters", "scheduler", "board", "_accepting", "_idle", "_wake", "process",
                 "jitter")

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        role: str,
        step_model: StepTimeModel,
        pool: BlockPool,
        max_batched_tokens: int,
        max_num_seqs: int,
        records: RequestRecords,
        counters: SystemCounters,
        window_start_s: float,
        window_end_s: float,
        hook: AdmissionHook | None = None,
        on_finish: Callable[[Sequence, float], None] = _ignore,
        on_prefilled: Callable[["Instance", Sequence, float], None] = _ignore,
        on_final_chunk: Callable[["Instance", Sequence, float], None] | None = None,
        gpus: list[str] | None = None,
        output_s: float = 0.0,
        span: AttentionSpan | None = None,
        async_scheduling: bool = False,
        adapters: AdapterSlots | None = None,
        coalesce: bool = False,
        kernels: Kernels | None = None,
        max_chunk_tokens: int | None = None,
        jitter: StepJitter | None = None,
    ):
        self.env = env
        self.index = index
        self.role = role
        self.step_model = step_model
        self.pool = pool
        self.records = records
        self.counters = counters
        self.on_finish = on_finish
        self.on_prefilled = on_prefilled
        self.on_final_chunk = on_final_chunk
        self.gpus = gpus or []
        self.output_s = output_s
        self.async_scheduling = async_scheduling
        self._in_flight = False  # an iteration is running
        self.kernels = kernels if kernels is not None else backend_kernels("python")
        self._plan_run = self.kernels.decode_run.DecodeRun.plan
        self.kv_utilization = self.kernels.levels.TimeWeightedLevel(window_start_s, window_end_s)
        self.engine_time = counters.engine_time()
        self.coalesce = coalesce
        self._decode_run: DecodeRun | ChunkRun | None = None  # the coalesced run in progress, if any
        self._sleeping: DecodeRun | ChunkRun | None = None  # the run the engine sleeps through (cut or not)
        self._final = False  # the engine's wait ends at the sleeping run's end (not halfway)
        self.decode_horizon = FIRST_HORIZON  # steps the next coalesced run is planned for
        self.adapters = adapters
        self.jitter = jitter
        self.scheduler = self.kernels.scheduler.BatchScheduler(pool, max_batched_tokens, max_num_seqs,
                                        _RecordingEvents(records, counters, self), hook,
                                        prefill_only=role == "prefill", span=span, adapters=adapters,
                                        max_chunk_tokens=max_chunk_tokens)
        self.board: LoadBoard | None = None  # told when outstanding or membership changes
        self._accepting = True
        self._idle: simpy.Event | None = None
        self._wake: simpy.Event | None = None
        self.process = env.process(self._run())

    @property
    def hook(self) -> AdmissionHook | None:
        return self.scheduler.hook

    @property
    def accepting(self) -> bool:
        """It takes new work in its role (False while it switches roles)."""
        return self._accepting

    @accepting.setter
    def accepting(self, value: bool) -> None:
        self._accepting = value
        self._role_changed()

    def _load_changed(self) -> None:
        if self.board is not None:
            self.board.changed(self)

    def _role_changed(self) -> None:
        if self.board is not None:
            self.board.moved(self)

    @property
    def outstanding(self) -> int:
        """Requests assigned here and not yet finished (or handed off)."""
        return self.scheduler.outstanding

    @property
    def pending_prompt_tokens(self) -> int:
        if self._decode_run is not None:
            self.settle()  # a prefill chunk run's prompt moves step by step
        return self.scheduler.pending_prompt_tokens

    @property
    def held_kv_tokens(self) -> int:
        """KV tokens of the requests assigned here and not finished: prompt plus tokens generated
        so far, whether admitted yet or not (what a KV-aware router counts as decode load)."""
        if self._decode_run is not None:
            self.settle()
        s = self.scheduler
        total = 0
        for group in (s.waiting, s.running, s.loading.values()):
            for seq in group:
                total += seq.prompt_tokens + seq.generated
        return total

    @property
    def free_kv_tokens(self) -> int:
        return self.pool.free_blocks * self.pool.block_size_tokens

    def cached_prefix_tokens(self, seq: Sequence | None) -> int:
        """Leading prompt tokens of ``seq`` already in this instance's HBM prefix cache."""
        hook = self.scheduler.hook
        cached = getattr(hook, "cached_prefix_blocks", None)
        if seq is None or cached is None:
            return 0
        return cached(seq) * hook.geometry.block_tokens

    @property
    def busy(self) -> bool:
        """It holds work: requests waiting, running, loading, or prompts not yet handed off."""
        scheduler = self.scheduler
        return bool(scheduler.waiting or scheduler.running or scheduler.loading or scheduler.detached)

    def when_idle(self) -> simpy.Event:
        """An event that fires once the instance holds no work (at once if it holds none)."""
        event = self.env.event()
        if not self.busy:
            event.succeed()
        else:
            self._idle = event
        return event

    def _check_idle(self) -> None:
        if self._idle is not None and not self.busy:
            self._idle.succeed()
            self._idle = None

    def set_role(self, role: str, hook: AdmissionHook | None,
                 on_final_chunk: Callable[["Instance", Sequence, float], None] | None) -> None:
        """Serve in ``role`` from now on, with ``hook`` (the instance must hold no work)."""
        if self.busy:
            raise RuntimeError(f"instance {self.index} cannot change role while it holds work")
        self.role = role
        self.scheduler.hook = hook
        self.scheduler.prefill_only = role == "prefill"
        self.on_final_chunk = on_final_chunk
        self._role_changed()

    def wake(self) -> None:
        """Resume the engine loop if it sleeps (a load landed, pages came free), or end the
        coalesced run it is in at the step in progress. Whatever changes the requests it holds
        from outside the engine loop calls this afterwards."""
        if self._decode_run is not None and self.scheduler.waiting:
            # pages came free: a waiting request may fit now (what else wakes it -- a request
            # submitted, a load landing, an abort -- ended the run already)
            self.interrupt()
        self._load_changed()
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def settle(self) -> None:
        """Bring the coalesced run's state up to now (see :mod:`kvsim.serving.decode_run`)."""
        run = self._decode_run
        if run is not None:
            run.settle(self.env.now)

    def settle_accounts(self) -> None:
        """Settle, and account the run's steps so far too (engine time, tokens, KV level): for
        the run's summary, which reads them while a run may still be going."""
        run = self._decode_run
        if run is not None:
            run.settle(self.env.now)
            run.account()

    def interrupt(self) -> None:
        """Something outside changes this instance now: settle the coalesced run and end it at
        the step in progress, so the engine plans again from the state that follows."""
        run = self._decode_run
        if run is None:
            return
        self._decode_run = None
        self.pool.observer = self.scheduler.observer = None
        run.cut(self.env.now)
        run.account()  # now: the instance lets go of the run, and a summary before its step ends would miss them
        _Reaim(self)  # the engine sleeps in _coalesced: it wakes to end the step in progress

    def submit(self, seq: Sequence) -> None:
        """Hand a request to this instance (at the current simulated time)."""
        run = self._decode_run
        if run is not None:
            if not run.cut_by_arrivals:
                run.settle(self.env.now)  # a chunk run goes on (kvsim.serving.chunk_run): its state now
            elif self.async_scheduling:
                # it joins the batch after next (below): the next step is still the run's
                end_s = run.end_s
                run.cut(self.env.now, keep=1)
                if run.end_s != end_s:
                    _Reaim(self)  # sleep until the new end instead
            else:
                self.interrupt()
        if self.role == "prefill":
            self.records.prefill_instance[seq.rid] = self.index
        else:
            self.records.instance[seq.rid] = self.index
        # with async scheduling the next batch was formed when the running one started, so a
        # request arriving now joins the one after it; an idle engine takes it at once
        seq.not_before = self.scheduler.batches_formed + 2 if self.async_scheduling and self._in_flight else 0
        self.scheduler.add(seq)
        if self._decode_run is not None:
            self._load_changed()  # a run goes on to its next step: the engine is not asleep
            return
        self.wake()

    def _final_chunks(self, batch: Batch, now: float) -> None:
        for seq, chunk in batch.prefills:
            if seq.kv_tokens + chunk == seq.prefill_target and not seq.gated:
                self.on_final_chunk(self, seq, now)

    def _recompute_starts(self, batch: Batch, now: float) -> None:
        """A handed-off request preempted before its first decode step recomputes its prompt here:
        that is where its decoding starts."""
        starts = self.records.decode_start_s
        for seq, _ in batch.prefills:
            if seq.generated == 0 and math.isnan(starts[seq.rid]):
                starts[seq.rid] = now

    def _run(self):
        """The engine loop, a SimPy process generator (:mod:`kvsim.serving.engine_loop`)."""
        return self.kernels.engine_loop.engine_loop(self)

    def _aim(self) -> simpy.Timeout:
        """The wait towards exactly the sleeping run's end ``t``, the step-by-step loop's sum of
        durations: SimPy wakes at ``now + delay``, which lands on ``t`` to the bit once ``now >= t
        / 2`` (Sterbenz: ``t - now`` is then exact); from earlier, first sleep to halfway."""
        env = self.env
        t = self._sleeping.end_s
        self._final = not env.now < t / 2
        return env.timeout(t - env.now if self._final else (t - env.now) / 2)

    def _reaim(self, _event: simpy.Event) -> None:
        """The run's end moved (a cut): the engine's wait is aimed at the new end, from now.

        What ``Process.interrupt`` did, at the same point of the event order (an urgent event
        now, the new wait made when it is processed), without an exception thrown through the
        engine's generator frames: the process is taken off the wait it sleeps on and put on
        the new one (SimPy's own ``Interruption._interrupt`` takes it off the same way)."""
        process = self.process
        process._target.callbacks.remove(process._resume)
        wait = self._aim()
        wait.callbacks.append(process._resume)
        process._target = wait
