"""The request front end: the one way a request enters a system and leaves it.

:meth:`FrontEnd.submit` records the arrival, counts the request in the system and routes it to
an instance of the entry role (mixed, or prefill when disaggregated); :meth:`FrontEnd.finished`
is called when its last token is emitted, wherever that happens. The workload drivers below
(open loop, closed-loop clients, multi-turn sessions) are SimPy processes that only call these.
"""

from __future__ import annotations

from typing import Any, Callable

import simpy

from kvsim.metrics.levels import TimeWeightedLevel
from kvsim.metrics.records import RequestRecords
from kvsim.serving.instance import Instance
from kvsim.serving.router import Router
from kvsim.serving.scheduler import Sequence
from kvsim.workload import ClientStream, RequestArrays

__all__ = ["FrontEnd", "open_loop", "client", "session_starts"]


class FrontEnd:
    """Admits requests into a system and sees them out.

    Parameters
    ----------
    env : simpy.Environment
    records : RequestRecords
    in_system : TimeWeightedLevel
        Requests arrived and not finished (for Little's law and the drain).
    router : Router
        Picks among the entry instances.
    entry_instances : callable
        Returns the instances currently taking new requests (mixed, or prefill).
    with_hashes : bool
        Pass prompts' block ids to the instances (the system caches prefixes).
    """

    def __init__(self, env: simpy.Environment, records: RequestRecords, in_system: TimeWeightedLevel,
                 router: Router, entry_instances: Callable[[], list[Instance]], with_hashes: bool):
        self.env = env
        self.records = records
        self.in_system = in_system
        self.router = router
        self.entry_instances = entry_instances
        self.with_hashes = with_hashes
        self.submitted = 0
        self.completed = 0

    def submit(self, input_tokens: int, output_tokens: int, arrival_s: float | None = None, hashes: Any = None,
               sequence_hashes: Any = None, on_finish: Callable[[Sequence, float], None] | None = None) -> int:
        """A request arrives now (recorded at ``arrival_s`` if given); returns its id."""
        rid = self.records.add(self.env.now if arrival_s is None else arrival_s, input_tokens, output_tokens)
        if not self.with_hashes:
            hashes = sequence_hashes = None
        seq = Sequence(rid, input_tokens, output_tokens, on_finish=on_finish, hashes=hashes,
                       sequence_hashes=sequence_hashes)
        self.in_system.set(self.env.now, self.in_system.value + 1)
        self.submitted += 1
        self.route(seq)
        return rid

    def route(self, seq: Sequence) -> None:
        """Send a request to an entry instance: on arrival, or again when one it had not started
        on leaves the role."""
        instances = self.entry_instances()
        instances[self.router.choose(instances, seq)].submit(seq)

    def submit_and_wait(self, input_tokens: int, output_tokens: int, hashes: Any = None,
                        sequence_hashes: Any = None) -> simpy.Event:
        """Submit a request now; the event fires when it has finished."""
        done = self.env.event()
        self.submit(input_tokens, output_tokens, hashes=hashes, sequence_hashes=sequence_hashes,
                    on_finish=lambda _seq, _now: done.succeed())
        return done

    def finished(self, seq: Sequence, now: float) -> None:
        """The request's last token was emitted at ``now``."""
        self.in_system.set(now, self.in_system.value - 1)
        self.completed += 1
        if seq.on_finish is not None:
            seq.on_finish(seq, now)


def open_loop(env: simpy.Environment, front: FrontEnd, requests: RequestArrays):
    """Submit pre-drawn requests at their arrival times."""
    n = len(requests)
    hashes = requests.hash_ids if requests.hash_ids is not None else [None] * n
    for rid, (t, n_in, n_out) in enumerate(zip(requests.arrival_s.tolist(), requests.input_tokens.tolist(),
                                               requests.output_tokens.tolist())):
        if t > env.now:
            yield env.timeout(t - env.now)
        front.submit(n_in, n_out, arrival_s=t, hashes=hashes[rid])


def client(env: simpy.Environment, front: FrontEnd, stream: ClientStream, stop_s: float):
    """One closed-loop client: think, send, wait for the answer, until ``stop_s``."""
    while True:
        request = stream.next_request_with_hashes()
        if request.think_time_s > 0:
            yield env.timeout(request.think_time_s)
        if env.now >= stop_s:
            return
        yield front.submit_and_wait(request.input_tokens, request.output_tokens, request.hash_ids)


def session_starts(env: simpy.Environment, front: FrontEnd, all_sessions, stop_s: float):
    """Start each multi-turn session at its arrival time."""
    for one in all_sessions:
        if one.arrival_s > env.now:
            yield env.timeout(one.arrival_s - env.now)
        env.process(_session(env, front, one, stop_s))


def _session(env: simpy.Environment, front: FrontEnd, one, stop_s: float):
    for turn in one.turns():
        if turn.think_time_s > 0:
            yield env.timeout(turn.think_time_s)
        if env.now >= stop_s:
            return
        yield front.submit_and_wait(turn.input_tokens, turn.output_tokens, turn.hash_ids, turn.sequence_hash_ids)
