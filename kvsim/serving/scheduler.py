"""Continuous batching with chunked prefill, block-gated admission and preemption by recompute.

One call to :meth:`BatchScheduler.schedule` forms one engine iteration; one call to
:meth:`BatchScheduler.complete` applies its results. Both touch each scheduled sequence once
(never once per token or per block). The policy follows vLLM's V1 scheduler:

1. Running sequences, oldest first, each get their next piece of work: a prefill chunk (as many
   prompt tokens as the token budget allows, and at most one data-parallel attention rank's
   budget) or one decode token. If the KV pool cannot grow to
   hold it, the most recently admitted running sequence is preempted (its blocks freed, to be
   recomputed later) until it fits — possibly the sequence itself.
2. If nothing was preempted, waiting sequences are admitted in arrival order while the token
   budget, the running-sequence cap and free KV blocks allow.

Token accounting of a sequence: ``kv_tokens`` tokens have KV in the pool; while
``kv_tokens < prefill_target`` it is prefilling; a prefill that reaches its target emits a token;
each decode step writes the KV of the last emitted token and emits the next one.

Prefix caching and offload plug in through an optional :class:`AdmissionHook`: at admission it
may find a cached prefix (``kv_tokens`` starts above zero, the prefix held as ``shared_tokens``
outside the sequence's own pages), park the sequence while KV loads (``loading``), or let it
compute while a load is in flight and hold its first token until the load lands (``gated``).

Disaggregated serving uses the same seams. A *prefill-only* scheduler does not emit a prompt's
first token: the sequence is *detached* (out of the running set, its pages still held) and
reported to :meth:`SchedulerEvents.prefilled`, until :meth:`BatchScheduler.release_detached`
once its KV has been handed off. A decode instance admits a handed-off sequence through its hook
(``"load"`` while the KV arrives); its first decode step emits the request's first token.

A kernel of the compiled backend (:mod:`kvsim.backend`): ``scheduler.pxd`` types the scheduler's
fields, and the ``cython.locals`` below its loops' locals, over the compiled ``Sequence`` and
``BlockPool`` (C field reads instead of attribute lookups); the reference ignores both.
"""

from __future__ import annotations

from collections import deque

import cython

from kvsim.kv.block_pool import BlockPool, PoolObserver
from kvsim.models.attention_span import AttentionSpan
from kvsim.models.step_time import BatchShape
from kvsim.serving.adapters import AdapterSlots
from kvsim.serving.admission_hook import AdmissionHook
from kvsim.serving.sequence import Sequence

__all__ = ["Sequence", "BatchScheduler", "Batch", "SchedulerEvents", "AdmissionHook"]


_NO_SHAPE = BatchShape()  # (immutable: one empty shape shared until schedule() sets a batch's)


class Batch:
    """One iteration's work: prefill chunks ``(sequence, tokens)``, decode sequences and their
    ``shape`` (a plain class, made once per iteration; typed compiled: ``scheduler.pxd``)."""

    __slots__ = ("prefills", "decodes", "shape")

    def __init__(self, prefills: list[tuple[Sequence, int]] | None = None, decodes: list[Sequence] | None = None,
                 shape: BatchShape = _NO_SHAPE):
        self.prefills = prefills if prefills is not None else []
        self.decodes = decodes if decodes is not None else []
        self.shape = shape


class SchedulerEvents:
    """Callbacks the scheduler reports milestones to (the instance wires them to metrics).

    Compiled (``scheduler.pxd``), a ``cdef`` class whose methods the scheduler calls in C; a
    subclass overrides them, in C (:class:`kvsim.serving.instance.Instance`'s recording events)
    or in Python."""

    def admitted(self, seq: Sequence, now: float) -> None: ...
    def first_token(self, seq: Sequence, now: float) -> None: ...
    def prompt_done(self, seq: Sequence, now: float) -> None: ...
    def tokens_emitted(self, count: int, now: float) -> None: ...
    def preempted(self, seq: Sequence) -> None: ...
    def prefill_computed(self, seq: Sequence, tokens: int, now: float) -> None:
        """A batch ending at ``now`` computed ``tokens`` more of ``seq``'s prefill (its
        ``kv_tokens`` already include them)."""
    def finished(self, seq: Sequence, now: float) -> None: ...
    def prefilled(self, seq: Sequence, now: float) -> None:
        """A prefill-only scheduler finished ``seq``'s prompt and detached it."""

    def decode_started(self, seq: Sequence, now: float) -> None:
        """A handed-off sequence takes its first decode step in the iteration starting now."""


class BatchScheduler:
    """Iteration-level batching policy of one instance.

    Parameters
    ----------
    pool : BlockPool
        The instance's KV block pool.
    max_batched_tokens : int
        Token budget of one iteration (prefill chunk tokens + one per decode), of the whole
        instance: with data-parallel attention, the ranks' budgets added up.
    max_num_seqs : int
        Cap on running sequences (loading sequences count: they hold pages), of the whole
        instance (the ranks' caps added up).
    events : SchedulerEvents
        Receives admission, first-token, preemption and completion milestones.
    hook : AdmissionHook, optional
        Prefix caching and offload; None computes every prompt in full.
    prefill_only : bool
        Detach sequences whose prompt is computed instead of emitting their first token.
    span : AttentionSpan, optional
        The model's sliding-window layers: attention pairs and context reads are counted per
        token averaged over layers (None: every layer attends to the whole context).
    adapters : AdapterSlots, optional
        LoRA slots: a waiting sequence whose adapter would exceed them is skipped this step,
        and those behind it may go first (vLLM's scheduler does the same).
    max_chunk_tokens : int, optional
        Most prompt tokens one sequence computes in one iteration (default: ``max_batched_tokens``).
        With data-parallel attention, one rank's budget: a sequence lives on one rank, whose
        own scheduler cannot give it the other ranks' budgets.
    """

    def __init__(self, pool: BlockPool, max_batched_tokens: int, max_num_seqs: int, events: SchedulerEvents,
                 hook: AdmissionHook | None = None, prefill_only: bool = False, span: AttentionSpan | None = None,
                 adapters: AdapterSlots | None = None, max_chunk_tokens: int | None = None):
        self.pool = pool
        self.adapters = adapters
        self.max_batched_tokens = max_batched_tokens
        self.max_chunk_tokens = max_batched_tokens if max_chunk_tokens is None else max_chunk_tokens
        self.max_num_seqs = max_num_seqs
        self.events = events
        self.hook = hook
        self.prefill_only = prefill_only
        self.span = span
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.loading: dict[int, Sequence] = {}  # rid -> sequence parked while its KV loads
        self.detached: dict[int, Sequence] = {}  # rid -> prompt done, KV held until handed off
        self.stalled = 0
        self.waiting_prompt_tokens = 0  # sum of queued_tokens over the waiting queue
        self.batches_formed = 0  # iterations formed so far (the one running is this one)
        # the instance while it advances a coalesced decode run (kvsim.serving.decode_run): a
        # change from outside ends the run first
        self.observer: PoolObserver | None = None

    def next_step_tokens(self, seq: Sequence, kv_tokens: int | None = None) -> int:
        """Tokens ``seq``'s next step writes at most, from ``kv_tokens`` (default: its own): one
        decode token, or a prefill chunk as large as the token budget allows (what an admission
        must find pages for)."""
        remaining = seq.prefill_target - (seq.kv_tokens if kv_tokens is None else kv_tokens)
        return min(remaining, self.max_batched_tokens, self.max_chunk_tokens) if remaining > 0 else 1

    @property
    def outstanding(self) -> int:
        """Sequences assigned here and not finished (a detached one has left)."""
        return len(self.waiting) + len(self.running) + len(self.loading)

    @property
    def pending_prompt_tokens(self) -> int:
        """Prompt tokens still to compute here (waiting and running sequences).

        A waiting sequence counts what it brought to the queue (a cached prefix found at
        admission is not known before), so routing does not scan the queue.
        """
        return self.waiting_prompt_tokens + sum(seq.prefill_target - seq.kv_tokens for seq in self.running
                                                if seq.kv_tokens < seq.prefill_target)

    def _enqueue(self, seq: Sequence, front: bool = False) -> None:
        seq.queued_tokens = seq.prefill_target - seq.kv_tokens
        self.waiting_prompt_tokens += seq.queued_tokens
        if front:
            self.waiting.appendleft(seq)
        else:
            self.waiting.append(seq)

    def _dequeue_front(self) -> Sequence:
        seq = self.waiting.popleft()
        self.waiting_prompt_tokens -= seq.queued_tokens
        return seq

    def _dequeue_at(self, index: int) -> Sequence:
        if index == 0:
            return self._dequeue_front()
        seq = self.waiting[index]
        del self.waiting[index]
        self.waiting_prompt_tokens -= seq.queued_tokens
        return seq

    def withdraw(self, seq: Sequence) -> None:
        """Take a waiting sequence out of the queue (it goes to another instance)."""
        if self.observer is not None:
            self.observer.interrupt()
        self.waiting.remove(seq)
        self.waiting_prompt_tokens -= seq.queued_tokens

    def release_detached(self, seq: Sequence) -> None:
        """A detached sequence's KV has been handed off: give back its pages."""
        if self.observer is not None:
            self.observer.interrupt()
        del self.detached[seq.rid]
        self.pool.release(seq)
        if self.hook is not None:
            self.hook.released(seq, finished=True)

    def _detach(self, seq: Sequence, now: float) -> None:
        self.detached[seq.rid] = seq
        self.events.prompt_done(seq, now)
        self.events.prefilled(seq, now)

    def add(self, seq: Sequence) -> None:
        """Queue ``seq`` (from :meth:`Instance.submit`, which decides how a coalesced run ends)."""
        self._enqueue(seq)

    def _preempt(self, seq: Sequence) -> None:
        if seq.stalled:
            self.stalled -= 1
        in_flight = seq.gated  # a load still lands under it: its KV is not whole, so recompute
        seq.gated = seq.stalled = False
        seq.preemptions += 1
        if self.hook is not None and not in_flight and self.hook.swap_out(seq):
            # all its KV went to host memory (the hook let go of shared blocks): token counts stay
            seq.swapped = True
            seq.shared_tokens = 0
            self.pool.release(seq)
        else:
            self.pool.release(seq)
            if self.hook is not None:
                self.hook.released(seq, finished=False)
            seq.kv_tokens = 0
            seq.shared_tokens = 0
            seq.prefill_target = seq.prompt_tokens + seq.generated
        self._enqueue(seq, front=True)
        self.events.preempted(seq)

    def loaded(self, seq: Sequence) -> None:
        """A parked sequence's KV has arrived: it joins the running sequences (or, if its client
        gave up meanwhile, gives its pages back)."""
        if self.observer is not None:
            self.observer.interrupt()
        if self.loading.pop(seq.rid, None) is not None:
            if seq.aborted:
                self._drop(seq)
            else:
                self.running.append(seq)

    def abort(self, seq: Sequence) -> None:
        """Its client gave up: take ``seq`` out wherever it is and give back its pages (vLLM
        aborts a request whose connection closed). A sequence parked on a load lets go when the
        load lands; one in the iteration now running is skipped when the iteration completes;
        a prompt detached for its handoff gives its pages back now."""
        if self.observer is not None:
            self.observer.interrupt()
        seq.aborted = True
        if seq in self.waiting:
            self.withdraw(seq)
        elif seq in self.running:
            self.running.remove(seq)
            if seq.stalled:
                seq.stalled = False
                self.stalled -= 1
            self._drop(seq)
        elif self.detached.get(seq.rid) is seq:
            del self.detached[seq.rid]
            self._drop(seq)

    def _drop(self, seq: Sequence) -> None:
        self.pool.release(seq)
        if self.hook is not None:
            self.hook.released(seq, finished=False)

    def ungate(self, seq: Sequence, now: float) -> None:
        """An in-flight load under a computing sequence has landed."""
        if self.observer is not None:
            self.observer.interrupt()
        seq.gated = False
        if seq.stalled and seq in self.running:
            seq.stalled = False
            self.stalled -= 1
            if self.prefill_only:
                self.running.remove(seq)
                self._detach(seq, now)
                return
            self._emit_prefill_token(seq, now)
            self.events.tokens_emitted(1, now)
            if seq.generated >= seq.output_tokens:
                self._finish_done(now)

    @cython.locals(seq=Sequence, i=cython.Py_ssize_t, budget=cython.long, cached=cython.long, chunk=cython.long,
                   block=cython.long, prefilling=cython.bint, preempted=cython.bint, sampled=cython.long,
                   remote=cython.long, prefill_tokens=cython.long, batch=Batch, most=cython.long)
    def schedule(self, now: float) -> Batch | None:
        """Form the next iteration, allocating its KV blocks; None if there is nothing to run."""
        budget = self.max_batched_tokens
        most = self.max_chunk_tokens  # one sequence's chunk (one rank's budget)
        pool = self.pool
        span = self.span
        running = self.running
        batch = Batch()
        prefill_tokens = prefill_context = decode_context = sampled = remote = 0
        prefill_pairs = 0.0
        preempted = False
        i = 0
        # pages a step needs are usually held already: check that inline, call the pool otherwise
        block = pool.block_size_tokens if pool.resident is None else 0
        while i < len(running) and budget > 0:
            seq = running[i]
            if seq.stalled:
                i += 1
                continue
            cached = seq.kv_tokens
            prefilling = cached < seq.prefill_target
            chunk = min(seq.prefill_target - cached, budget, most) if prefilling else 1
            while not (cached + chunk - seq.shared_tokens <= seq.kv_blocks * block
                       or pool.grow(seq, cached + chunk)):
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                if prefilling:
                    batch.prefills.append((seq, chunk))
                else:
                    if seq.generated == 0:  # a handed-off sequence's first step
                        self.events.decode_started(seq, now)
                    batch.decodes.append(seq)
                    decode_context += cached + 1 if span is None else span.context(cached + 1)
                    remote += seq.remote_tokens
                    sampled += 1
                budget -= chunk
                i += 1
                continue
            break
        # vLLM admits nothing in a step that preempted; but if that step has nothing left to run,
        # admitting is the only way forward (nothing else would wake the engine)
        if not preempted or (not batch.prefills and not batch.decodes):
            self._admit(batch, budget, now, self.batches_formed + 1)
            if not batch.prefills and not batch.decodes:
                # an engine with nothing else to run schedules a new request at once, whatever
                # its cadence would otherwise have been
                self._admit(batch, budget, now, None)
        if not batch.prefills and not batch.decodes:
            return None
        self.batches_formed += 1
        for seq, chunk in batch.prefills:  # running sequences' chunks first, then the admitted
            cached = seq.kv_tokens
            prefill_tokens += chunk
            remote += seq.remote_tokens
            if span is None:
                prefill_context += cached
                prefill_pairs += BatchShape.prefill_chunk_pairs(chunk, cached)
            else:
                prefill_context += span.context(cached)
                prefill_pairs += span.pairs(chunk, cached)
            if cached + chunk == seq.prefill_target:
                sampled += 1
        # BatchShape(prefill_tokens, prefill_pairs, prefill_context_tokens, decode_seqs,
        # decode_context_tokens, sampled_seqs, prefill_seqs, remote_kv_tokens), made as
        # tuple.__new__ does (a named tuple's generated __new__ runs as Python code)
        batch.shape = tuple.__new__(BatchShape, (prefill_tokens, prefill_pairs, prefill_context, len(batch.decodes),
                                                 decode_context, sampled, len(batch.prefills), remote))
        return batch

    def _admit(self, batch: Batch, budget: int, now: float, batch_number: int | None) -> None:
        """Admit waiting sequences into ``batch`` (as prefill chunks) while limits allow; with a
        ``batch_number``, only those that may join that batch (see ``Sequence.not_before``)."""
        waiting, running, pool, hook = self.waiting, self.running, self.pool, self.hook
        adapters = self.adapters
        active = adapters.active(running, self.loading.values()) if adapters is not None else None
        skip = 0  # waiting sequences passed over for their adapter, left at the front in order
        while len(waiting) > skip and budget > 0 and len(running) + len(self.loading) < self.max_num_seqs:
            seq = waiting[skip]
            if batch_number is not None and seq.not_before > batch_number:
                break  # in arrival order: those behind it arrived later still
            if active is not None and not adapters.fits(seq, active):
                skip += 1
                continue
            if hook is not None:
                verdict = hook.admit(seq, now)
                if verdict is None:
                    break
                if verdict == "load":
                    self._dequeue_at(skip)
                    self.loading[seq.rid] = seq
                    if active is not None and seq.adapter >= 0:
                        active.add(seq.adapter)
                    self._mark_admitted(seq, now)
                    hook.committed(seq)
                    continue
            chunk = min(seq.prefill_target - seq.kv_tokens, budget, self.max_chunk_tokens)
            if not pool.grow(seq, seq.kv_tokens + chunk):
                if hook is not None:
                    hook.released(seq, finished=False)
                    seq.kv_tokens = seq.shared_tokens = 0
                    seq.gated = False
                break
            self._dequeue_at(skip)
            running.append(seq)
            if active is not None and seq.adapter >= 0:
                active.add(seq.adapter)
            self._mark_admitted(seq, now)
            if hook is not None:
                hook.committed(seq)
            batch.prefills.append((seq, chunk))
            budget -= chunk

    def _mark_admitted(self, seq: Sequence, now: float) -> None:
        if not seq.admitted:
            seq.admitted = True
            self.events.admitted(seq, now)

    def _emit_prefill_token(self, seq: Sequence, now: float) -> None:
        if seq.generated == 0:
            self.events.prompt_done(seq, now)
            self.events.first_token(seq, now)
        seq.generated += 1

    @cython.locals(seq=Sequence, chunk=cython.long, finished=cython.bint, emitted=cython.long,
                   events=SchedulerEvents)  # batch: a Batch (.pxd)
    def complete(self, batch: Batch, now: float) -> None:
        """Apply the results of ``batch``, which ended at time ``now`` (seconds)."""
        events = self.events
        hook = self.hook
        finished = False
        emitted = 0
        detached = []
        for seq, chunk in batch.prefills:
            if seq.aborted:
                continue
            seq.kv_tokens += chunk
            events.prefill_computed(seq, chunk, now)
            if seq.kv_tokens == seq.prefill_target:
                if hook is not None:
                    hook.prompt_done(seq, now)
                if seq.gated:  # computed, but the cached prefix under it is still loading
                    seq.stalled = True
                    self.stalled += 1
                    continue
                if self.prefill_only:
                    detached.append(seq)
                    self._detach(seq, now)
                    continue
                self._emit_prefill_token(seq, now)
                emitted += 1
                if seq.generated >= seq.output_tokens:
                    finished = True
        for seq in batch.decodes:
            if seq.aborted:
                continue
            seq.kv_tokens += 1
            seq.generated += 1
            emitted += 1
            if seq.generated == 1:  # a handed-off sequence's first step: the client's first token
                events.first_token(seq, now)
            if seq.generated >= seq.output_tokens:
                finished = True
        if detached:
            # the prompts detached now (a handoff may already have released some of them)
            gone = {seq.rid for seq in detached}
            self.running = [seq for seq in self.running if seq.rid not in gone]
        if emitted:
            events.tokens_emitted(emitted, now)
        if finished:
            self._finish_done(now)

    @cython.locals(seq=Sequence)
    def _finish_done(self, now: float) -> None:
        keep = []
        for seq in self.running:
            if seq.generated >= seq.output_tokens:
                self.pool.release(seq)
                if self.hook is not None:
                    self.hook.released(seq, finished=True)
                self.events.finished(seq, now)
            else:
                keep.append(seq)
        self.running = keep
