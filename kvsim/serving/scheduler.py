"""Continuous batching with chunked prefill, block-gated admission and preemption by recompute.

One call to :meth:`BatchScheduler.schedule` forms one engine iteration; one call to
:meth:`BatchScheduler.complete` applies its results. Both touch each scheduled sequence once
(never once per token or per block). The policy follows vLLM's V1 scheduler:

1. Running sequences, oldest first, each get their next piece of work: a prefill chunk (as many
   prompt tokens as the token budget allows) or one decode token. If the KV pool cannot grow to
   hold it, the most recently admitted running sequence is preempted (its blocks freed, to be
   recomputed later) until it fits — possibly the sequence itself.
2. If nothing was preempted, waiting sequences are admitted in arrival order while the token
   budget, the running-sequence cap and free KV blocks allow.

Token accounting of a sequence: ``kv_tokens`` tokens have KV in the pool; while
``kv_tokens < prefill_target`` it is prefilling; a prefill that reaches its target emits a token;
each decode step writes the KV of the last emitted token and emits the next one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from kvsim.kv.block_pool import BlockPool
from kvsim.models.step_time import BatchShape

__all__ = ["Sequence", "BatchScheduler", "Batch"]


class Sequence:
    """Runtime state of one request inside an instance."""

    __slots__ = (
        "rid", "prompt_tokens", "output_tokens", "generated", "kv_tokens", "prefill_target",
        "kv_blocks", "preemptions", "admitted", "on_finish",
    )

    def __init__(self, rid: int, prompt_tokens: int, output_tokens: int, on_finish: Callable | None = None):
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.generated = 0
        self.kv_tokens = 0
        self.prefill_target = prompt_tokens
        self.kv_blocks = 0
        self.preemptions = 0
        self.admitted = False
        self.on_finish = on_finish

    @property
    def total_tokens(self) -> int:
        """Tokens this sequence will hold at its end (prompt + output)."""
        return self.prompt_tokens + self.output_tokens


@dataclass(slots=True)
class Batch:
    """One iteration's work: prefill chunks ``(sequence, tokens)`` and decode sequences."""

    prefills: list[tuple[Sequence, int]] = field(default_factory=list)
    decodes: list[Sequence] = field(default_factory=list)
    shape: BatchShape = field(default_factory=BatchShape)


class SchedulerEvents:
    """Callbacks the scheduler reports milestones to (the instance wires them to metrics)."""

    def admitted(self, seq: Sequence, now: float) -> None: ...
    def first_token(self, seq: Sequence, now: float) -> None: ...
    def prompt_done(self, seq: Sequence, now: float) -> None: ...
    def tokens_emitted(self, count: int, now: float) -> None: ...
    def preempted(self, seq: Sequence) -> None: ...
    def finished(self, seq: Sequence, now: float) -> None: ...


class BatchScheduler:
    """Iteration-level batching policy of one instance.

    Parameters
    ----------
    pool : BlockPool
        The instance's KV block pool.
    max_batched_tokens : int
        Token budget of one iteration (prefill chunk tokens + one per decode).
    max_num_seqs : int
        Cap on running sequences.
    events : SchedulerEvents
        Receives admission, first-token, preemption and completion milestones.
    """

    def __init__(self, pool: BlockPool, max_batched_tokens: int, max_num_seqs: int, events: SchedulerEvents):
        self.pool = pool
        self.max_batched_tokens = max_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.events = events
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    @property
    def outstanding(self) -> int:
        """Sequences assigned here and not finished."""
        return len(self.waiting) + len(self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def _preempt(self, seq: Sequence) -> None:
        self.pool.release(seq)
        seq.kv_tokens = 0
        seq.prefill_target = seq.prompt_tokens + seq.generated
        seq.preemptions += 1
        self.waiting.appendleft(seq)
        self.events.preempted(seq)

    def schedule(self, now: float) -> Batch | None:
        """Form the next iteration, allocating its KV blocks; None if there is nothing to run."""
        budget = self.max_batched_tokens
        pool = self.pool
        running = self.running
        batch = Batch()
        prefill_tokens = prefill_context = decode_context = sampled = 0
        prefill_pairs = 0.0
        preempted = False
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            prefilling = seq.kv_tokens < seq.prefill_target
            chunk = min(seq.prefill_target - seq.kv_tokens, budget) if prefilling else 1
            while not pool.grow(seq, seq.kv_tokens + chunk):
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            else:
                cached = seq.kv_tokens
                if prefilling:
                    batch.prefills.append((seq, chunk))
                    prefill_tokens += chunk
                    prefill_context += cached
                    prefill_pairs += BatchShape.prefill_chunk_pairs(chunk, cached)
                    if cached + chunk == seq.prefill_target:
                        sampled += 1
                else:
                    batch.decodes.append(seq)
                    decode_context += cached + 1
                    sampled += 1
                budget -= chunk
                i += 1
                continue
            break
        if not preempted:
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < self.max_num_seqs:
                seq = waiting[0]
                chunk = min(seq.prefill_target, budget)
                if not pool.grow(seq, chunk):
                    break
                waiting.popleft()
                running.append(seq)
                if not seq.admitted:
                    seq.admitted = True
                    self.events.admitted(seq, now)
                batch.prefills.append((seq, chunk))
                prefill_tokens += chunk
                prefill_pairs += BatchShape.prefill_chunk_pairs(chunk, 0)
                if chunk == seq.prefill_target:
                    sampled += 1
                budget -= chunk
        if not batch.prefills and not batch.decodes:
            return None
        batch.shape = BatchShape(
            prefill_tokens=prefill_tokens,
            prefill_pairs=prefill_pairs,
            prefill_context_tokens=prefill_context,
            decode_seqs=len(batch.decodes),
            decode_context_tokens=decode_context,
            sampled_seqs=sampled,
        )
        return batch

    def complete(self, batch: Batch, now: float) -> None:
        """Apply the results of ``batch``, which ended at time ``now`` (seconds)."""
        events = self.events
        finished = False
        emitted = 0
        for seq, chunk in batch.prefills:
            seq.kv_tokens += chunk
            if seq.kv_tokens == seq.prefill_target:
                if seq.generated == 0:
                    events.prompt_done(seq, now)
                    events.first_token(seq, now)
                seq.generated += 1
                emitted += 1
                if seq.generated >= seq.output_tokens:
                    finished = True
        for seq in batch.decodes:
            seq.kv_tokens += 1
            seq.generated += 1
            emitted += 1
            if seq.generated >= seq.output_tokens:
                finished = True
        if emitted:
            events.tokens_emitted(emitted, now)
        if finished:
            keep = []
            for seq in self.running:
                if seq.generated >= seq.output_tokens:
                    self.pool.release(seq)
                    events.finished(seq, now)
                else:
                    keep.append(seq)
            self.running = keep
