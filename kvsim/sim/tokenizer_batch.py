"""The API server's micro-batching tokeniser: prompts wait for others to tokenise with.

vLLM 0.10.0 to 0.23.x tokenise every text prompt through ``AsyncMicrobatchTokenizer``
(``vllm/utils/__init__.py`` in 0.10.0, ``vllm/utils/async_utils.py`` in 0.23.0; read in both
releases' source, H): one loop takes the first prompt from its queue, waits up to
``batch_wait_timeout_s`` (0.002 s) for more, up to ``max_batch_size`` (32), then tokenises the
batch in one call on a single worker thread and only then takes the next prompt. At a few
requests a second nearly every prompt waits the whole 2 ms ("adds about 2ms of frontend latency
for low-concurrency", vllm-project/vllm pull 44172, M); 0.24.0 has it no more (removed by pull
45759, merged 2026-06: "the normal time for most tokenizer.encode calls is ~0.1ms"). vLLM 0.9.2
and earlier tokenised each prompt on its own.

With ``engine.tokenizer_batch_wait_s`` above 0 the front end does the same, by time alone (one
batch object and two events per batch, whatever it holds)::

    queued   = arrival + api_s                    (the request reaches the tokeniser's queue)
    a batch  opens at max(queued, previous batch done), closes at open + wait, or at the
             queued time of its max_batch-th prompt
    done     = close + tokenize_s_per_token x (every member's prompt tokens)   (one call, one thread)
    every member reaches the engine at done

A request whose ``queued`` time falls before an open batch's close joins it.
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

__all__ = ["TokenizerBatcher"]


class _Batch:
    """One micro-batch: its members in arrival order and their tokenising time."""

    __slots__ = ("members", "close_s", "tokenize_s", "closed")

    def __init__(self, close_s: float):
        self.members: list = []
        self.close_s = close_s
        self.tokenize_s = 0.0
        self.closed = False


class TokenizerBatcher:
    """Holds requests in the API server's tokeniser batches and passes them on together.

    Parameters
    ----------
    env : simpy.Environment
    wait_s : float
        How long a batch waits for more prompts after its first, seconds (> 0).
    max_batch : int
        Prompts that close a batch at once.
    api_s : float
        From arrival to the tokeniser's queue, seconds.
    tokenize_s_per_token : float
        Tokenising time per prompt token, seconds.
    route : callable
        ``route(seq)``: the request reaches the engine.
    """

    __slots__ = ("env", "wait_s", "max_batch", "api_s", "tokenize_s_per_token", "route", "_open", "batches")

    def __init__(self, env: simpy.Environment, wait_s: float, max_batch: int, api_s: float,
                 tokenize_s_per_token: float, route: Callable[[object], None]):
        if not wait_s > 0 or max_batch < 1:
            raise ValueError("a tokeniser batch needs a positive wait and room for one prompt")
        self.env = env
        self.wait_s = wait_s
        self.max_batch = max_batch
        self.api_s = api_s
        self.tokenize_s_per_token = tokenize_s_per_token
        self.route = route
        self._open: _Batch | None = None
        self.batches = 0

    def add(self, seq, prompt_tokens: int) -> None:
        """A request of ``prompt_tokens`` arrives now: put it in its batch."""
        now = self.env.now
        queued_s = now + self.api_s
        batch = self._open
        if batch is not None and queued_s < batch.close_s and len(batch.members) < self.max_batch:
            batch.members.append(seq)
            batch.tokenize_s += self.tokenize_s_per_token * prompt_tokens
            if len(batch.members) == self.max_batch:  # full: it closes as this prompt is queued
                batch.close_s = queued_s
                self.env.timeout(queued_s - now).callbacks.append(lambda _e, b=batch: self._close(b))
            return
        # a new batch: the one before it has all its members (every later request is queued later)
        open_s = queued_s if batch is None else max(queued_s, batch.close_s + batch.tokenize_s)
        batch = self._open = _Batch(open_s + self.wait_s)
        batch.members.append(seq)
        batch.tokenize_s = self.tokenize_s_per_token * prompt_tokens
        self.batches += 1
        if self.max_batch == 1:
            batch.close_s = open_s
        self.env.timeout(batch.close_s - now).callbacks.append(lambda _e, b=batch: self._close(b))

    def _close(self, batch: _Batch) -> None:
        if batch.closed:
            return  # (the deadline of a batch that filled up first)
        batch.closed = True
        if batch.tokenize_s > 0:
            self.env.timeout(batch.tokenize_s).callbacks.append(lambda _e: self._pass_on(batch))
        else:
            self._pass_on(batch)

    def _pass_on(self, batch: _Batch) -> None:
        route = self.route
        for seq in batch.members:
            route(seq)
