"""Multi-turn sessions (``prefix: {kind: multi_turn}``): pure data the simulator drives.

Every arrival of the workload's open-loop process starts a new session. A session's lengths and
think times are drawn up front; its turns' block ids are hashed lazily, turn by turn, while the
simulator iterates. Turn k+1's prompt is turn k's prompt, turn k's output and a new message, so
its ``hash_ids`` start with every *full* block of turn k's prompt + output
(``turn_k.sequence_hash_ids[: (in_k + out_k) // block_tokens]``).

How the simulator uses it::

    for session in sessions(spec, duration_s, streams):    # ascending arrival_s
        ...at session.arrival_s, start a process that does:
        for turn in session.turns():
            if turn.think_time_s > 0:
                wait turn.think_time_s                       # measured from the previous completion
            if now >= duration_s:
                stop the session                             # no new turn after the window
            submit a request (turn.input_tokens, turn.output_tokens, turn.hash_ids)
            wait until it completes (all turn.output_tokens generated)
            # optional: a prefix cache that keeps decoded KV registers turn.sequence_hash_ids

The first turn has ``think_time_s == 0`` (sent on the session's arrival). Outputs are assumed to be
exactly ``output_tokens`` long; the next turn's prompt counts them in full.

Streams: ``workload.arrival`` (session starts), ``workload.prefix.turns`` (turns per session),
``workload.prefix.message_tokens`` and ``workload.output_tokens`` (one per turn, sessions in
arrival order, turns in order), ``workload.prefix.think_time`` (one per turn; the first of each
session is drawn and replaced by 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from kvsim.rng import RandomStreams
from kvsim.workload.arrivals import (
    DiurnalArrivals,
    GammaArrivals,
    PoissonArrivals,
    StagedArrivals,
    open_loop_arrival_times,
)
from kvsim.workload.generate import WorkloadSpec
from kvsim.workload.prefix import BlockChain, source_id
from kvsim.workload.reuse import MultiTurn

__all__ = ["Turn", "Session", "sessions"]


class Turn(NamedTuple):
    """One request of a session.

    ``hash_ids``: the prompt's block ids, ``ceil(input_tokens / block_tokens)``.
    ``sequence_hash_ids``: the ids of prompt + output, ``ceil((input_tokens + output_tokens) /
    block_tokens)``, for a cache that keeps the KV written while decoding.
    """

    think_time_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: np.ndarray
    sequence_hash_ids: np.ndarray


@lru_cache(maxsize=64)
def _system_chain(block_tokens: int, tokens: int) -> BlockChain:
    """The system prompt shared by every session (pure; callers fork it)."""
    return BlockChain(block_tokens).append(source_id("multi_turn.system"), tokens)


@dataclass(frozen=True, eq=False)
class Session:
    """One conversation: when it starts and, per turn, think time, message and output lengths."""

    index: int
    arrival_s: float
    think_time_s: np.ndarray
    message_tokens: np.ndarray
    output_tokens: np.ndarray
    system_prompt_tokens: int
    block_tokens: int

    def __len__(self) -> int:
        return len(self.message_tokens)

    @property
    def input_tokens(self) -> np.ndarray:
        """Prompt length of each turn: system + earlier messages and outputs + this message."""
        before = np.concatenate([[0], np.cumsum(self.message_tokens + self.output_tokens)[:-1]])
        tokens: np.ndarray = self.system_prompt_tokens + before + self.message_tokens
        return tokens

    def turns(self) -> Iterator[Turn]:
        """The turns in order, each hashed when reached."""
        chain = _system_chain(self.block_tokens, self.system_prompt_tokens).fork()
        for k, (think, message, output) in enumerate(zip(self.think_time_s.tolist(), self.message_tokens.tolist(),
                                                         self.output_tokens.tolist())):
            chain.append(source_id("multi_turn.message", self.index, k), message)
            prompt_tokens, prompt_ids = chain.tokens, chain.hash_ids()
            chain.append(source_id("multi_turn.output", self.index, k), output)
            yield Turn(think, prompt_tokens, output, prompt_ids, chain.hash_ids())


def sessions(spec: WorkloadSpec, duration_s: float, streams: RandomStreams) -> list[Session]:
    """The sessions starting in ``[0, duration_s)``, in arrival order, of a ``multi_turn`` workload."""
    if not isinstance(spec.prefix, MultiTurn):
        raise ValueError("sessions() needs a workload with prefix: {kind: multi_turn}")
    prefix: MultiTurn = spec.prefix
    if not isinstance(spec.arrival, (PoissonArrivals, GammaArrivals, DiurnalArrivals, StagedArrivals)):
        raise ValueError("sessions() needs an open-loop arrival process (poisson, gamma, diurnal or staged)")
    if spec.output_tokens is None:
        raise ValueError("sessions() needs the workload's output_tokens distribution")
    starts = open_loop_arrival_times(spec.arrival, duration_s, streams.generator("workload.arrival"))
    n = len(starts)
    turns = prefix.turns.sample(streams.generator("workload.prefix.turns"), n)
    total = int(turns.sum())
    messages = prefix.message_tokens.sample(streams.generator("workload.prefix.message_tokens"), total)
    outputs = spec.output_tokens.sample(streams.generator("workload.output_tokens"), total)
    think = prefix.think_times(streams.generator("workload.prefix.think_time"), total)
    bounds = np.concatenate([[0], np.cumsum(turns)])
    think[bounds[:-1]] = 0.0  # each session's first turn is sent on arrival
    return [
        Session(index=i, arrival_s=float(starts[i]), think_time_s=think[a:b], message_tokens=messages[a:b],
                output_tokens=outputs[a:b], system_prompt_tokens=prefix.system_prompt_tokens,
                block_tokens=spec.block_tokens)
        for i, (a, b) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist()))
    ]
