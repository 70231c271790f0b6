"""The request front end: the one way a request enters a system and leaves it.

:meth:`FrontEnd.submit` records the arrival, counts the request in the system and routes it to
an instance of the entry role (mixed, or prefill when disaggregated); :meth:`FrontEnd.finished`
is called when its last token is emitted, wherever that happens. The workload drivers below
(open loop, closed-loop clients, multi-turn sessions) are SimPy processes that only call these.

A kernel of the compiled backend (:mod:`kvsim.backend`): ``frontend.pxd`` beside this file types
the front end (a ``cdef`` class over the compiled level, load board, instances and sequences)
and the open loop's arrivals (a C generator), so a request is recorded, routed and handed to its
instance by C calls; the pure-Python reference ignores it and keeps ``__slots__``. A system makes
its front end from its backend's module (``kernels.frontend.FrontEnd``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import cython
import simpy

from kvsim.metrics.levels import TimeWeightedLevel
from kvsim.models.engine import EngineSpec
from kvsim.metrics.records import RequestRecords
from kvsim.serving.adapters import adapter_block_ids, value_keys
from kvsim.serving.instance import Instance
from kvsim.serving.load_board import LoadBoard
from kvsim.serving.sequence import Sequence
from kvsim.sim.tokenizer_batch import TokenizerBatcher

if TYPE_CHECKING:
    from kvsim.serving.router import Router
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
    board : LoadBoard
        The system's instances by role.
    entry_role : str
        The role that takes new requests (``mixed``, or ``prefill``): the board's members of it
        are the instances a request is routed among.
    with_hashes : bool
        Pass prompts' block ids to the instances (the system caches prefixes).
    holder : callable, optional
        ``holder(index)`` is the system's instance of that index (to abort a request on).
    timeout_s : float, optional
        A client gives up on a request not finished this long after sending it; the instances
        holding it abort it and give back its KV pages (None: clients wait for ever). In a
        disaggregated system that is wherever it is: its prompt on the prefill instance (queued,
        computing, or held for the handoff), its KV on the way (the flow is cancelled), its
        decode-side copy on the decode instance.
    abort_handoff : callable, optional
        ``abort_handoff(decode_copy)`` ends a disaggregated request's handoff where it is
        (:meth:`kvsim.serving.handoff.KVHandoff.abort`).
    lora_sharing : str
        The system's ``lora.kv_sharing`` (``none``, ``value_reuse``, ``byte_sharing``).
    block_tokens : int
        Tokens per prompt block id (to count a shared context's whole blocks).
    adapter_count : int
        LoRA adapters the workload names (value reuse looks for the others' copies).
    engine : EngineSpec, optional
        The request path's costs: a request reaches an instance ``engine.request_in_s(prompt)``
        after it arrives (API server, tokenisation), and its client hears it has finished
        ``engine.output_s`` after its last step (none by default).
    """

    __slots__ = ("env", "sequence_type", "holder", "abort_handoff", "timeout_s", "aborted", "request_in_s",
                 "batcher", "output_s", "records", "in_system", "router", "board", "entry_role", "with_hashes", "lora_sharing",
                 "block_tokens", "adapter_count", "prompt_hashes", "held_hashes", "submitted", "completed",
                 "rejected")

    def __init__(self, env: simpy.Environment, records: RequestRecords, in_system: TimeWeightedLevel,
                 router: Router, board: LoadBoard, entry_role: str, with_hashes: bool,
                 engine: EngineSpec | None = None, timeout_s: float | None = None,
                 lora_sharing: str = "none", block_tokens: int = 16, adapter_count: int = 0,
                 holder: Callable[[int], Instance] | None = None,
                 abort_handoff: Callable[[Sequence], None] | None = None,
                 sequence_type: type[Sequence] = Sequence):
        self.env = env
        self.sequence_type = sequence_type  # the engine backend's (kvsim.backend.Kernels.sequence)
        self.holder = holder
        self.abort_handoff = abort_handoff
        self.timeout_s = timeout_s
        self.aborted = 0
        self.request_in_s = engine.request_in_s if engine is not None else None
        # vLLM 0.10-0.23's API server tokenises prompts in micro-batches (kvsim.sim.tokenizer_batch)
        self.batcher = (TokenizerBatcher(env, engine.tokenizer_batch_wait_s, engine.tokenizer_batch_max,
                                         engine.api_s, engine.tokenize_s_per_token, self.route)
                        if engine is not None and engine.tokenizer_batch_wait_s > 0 else None)
        self.output_s = engine.output_s if engine is not None else 0.0
        self.records = records
        self.in_system = in_system
        self.router = router
        self.board = board
        self.entry_role = entry_role
        self.with_hashes = with_hashes
        self.lora_sharing = lora_sharing
        self.block_tokens = block_tokens
        self.adapter_count = adapter_count
        # per request id, its prompt's block ids and those it leaves cached (prompt + output when
        # the workload gives them), whether the system caches or not: for the infinite-cache
        # bound of the routing summary
        self.prompt_hashes: list[Any] = []
        self.held_hashes: list[Any] = []
        self.submitted = 0
        self.completed = 0
        self.rejected = 0

    @cython.locals(seq=Sequence)
    def submit(self, input_tokens: int, output_tokens: int, arrival_s: float | None = None, hashes: Any = None,
               sequence_hashes: Any = None, on_finish: Callable[[Sequence, float], None] | None = None,
               adapter: int = -1, shared_tokens: int = 0, rejected: bool = False) -> int:
        """A request arrives now (recorded at ``arrival_s`` if given); returns its id.

        A ``rejected`` request (one that could never fit an instance's KV pool) is recorded as
        refused at arrival (``rejected_s``) and goes no further.

        ``adapter`` names its LoRA adapter (-1: the base model) and ``shared_tokens`` how much of
        its prompt is shared context: its KV is the adapter's own, except the shared context's
        when the system shares bytes across adapters (``lora.kv_sharing: byte_sharing``); with
        ``value_reuse`` the adapter keeps its own copy, filled from another's when one exists.
        """
        rid = self.records.add(self.env.now if arrival_s is None else arrival_s, input_tokens, output_tokens)
        self.prompt_hashes.append(hashes)
        self.held_hashes.append(sequence_hashes if sequence_hashes is not None else hashes)
        if rejected:
            self.records.rejected_s[rid] = self.env.now
            self.rejected += 1
            return rid
        base, shared_blocks = hashes, 0
        if not self.with_hashes:
            hashes = sequence_hashes = None
        elif adapter >= 0:
            shared_blocks = shared_tokens // self.block_tokens
            keep = shared_blocks if self.lora_sharing == "byte_sharing" else 0
            hashes = adapter_block_ids(hashes, adapter, keep)
            sequence_hashes = adapter_block_ids(sequence_hashes, adapter, keep)
        seq = self.sequence_type(rid, input_tokens, output_tokens, on_finish=on_finish, hashes=hashes,
                       sequence_hashes=sequence_hashes)
        if adapter >= 0 and self.lora_sharing == "value_reuse" and hashes is not None and shared_blocks:
            seq.value_keys = value_keys(base, adapter, shared_blocks, self.adapter_count)
        if adapter >= 0:
            seq.adapter = adapter
            self.records.adapter[rid] = adapter
        self.in_system.set(self.env.now, self.in_system.value + 1)
        self.submitted += 1
        if self.timeout_s is not None:
            self.env.timeout(self.timeout_s).callbacks.append(_GiveUp(self, seq))
        if self.batcher is not None:
            self.batcher.add(seq, input_tokens)
            return rid
        delay_s = self.request_in_s(input_tokens) if self.request_in_s is not None else 0.0
        if delay_s > 0:
            self.env.timeout(delay_s).callbacks.append(_Route(self, seq))
        else:
            self.route(seq)
        return rid

    @cython.locals(instance=Instance)
    def route(self, seq: Sequence) -> None:
        """Send a request to an entry instance: on arrival, or again when one it had not started
        on leaves the role."""
        if seq.aborted:
            return  # its client gave up before the API server passed it on
        instances = self.board.members(self.entry_role)
        instance = instances[self.router.choose(instances, seq)]
        instance.submit(seq)

    def submit_and_wait(self, input_tokens: int, output_tokens: int, hashes: Any = None,
                        sequence_hashes: Any = None, adapter: int = -1, shared_tokens: int = 0) -> simpy.Event:
        """Submit a request now; the event fires when it has finished."""
        done = self.env.event()
        self.submit(input_tokens, output_tokens, hashes=hashes, sequence_hashes=sequence_hashes,
                    on_finish=lambda _seq, _now: done.succeed(), adapter=adapter, shared_tokens=shared_tokens)
        return done

    def finished(self, seq: Sequence, now: float) -> None:
        """The request's last token was emitted at ``now``; its client has it ``output_s`` later."""
        if self.output_s > 0:
            self.env.timeout(self.output_s).callbacks.append(_Leave(self, seq))
        else:
            self._leave(seq)

    def _give_up(self, seq: Sequence) -> None:
        """The client's timeout expired: abort the request unless its last token has reached it."""
        rid = seq.rid
        if seq.aborted or not math.isnan(self.records.finish_s[rid]):
            return
        records = self.records
        # disaggregated: the prompt on its prefill instance (queued, computing, or held until
        # its KV has been handed off; once handed off it is gone from there and nothing happens)
        self._abort_on(records.prefill_instance[rid], seq)
        copy = seq.decode_copy
        if copy is not None and self.abort_handoff is not None:
            self.abort_handoff(copy)  # its KV on the way: the flow stops, reserved pages come back
        last = copy if copy is not None else seq  # the sequence that emits the client's tokens
        # the engine may be done with it while the last token is still on its way (output_s): the
        # client gives up first all the same, and :meth:`_leave` will not count it
        if last.generated < last.output_tokens:
            self._abort_on(records.instance[rid], last)
        seq.aborted = last.aborted = True
        now = self.env.now
        self.records.aborted_s[rid] = now
        if self.records.first_token_s[rid] > now:
            # its first token was still on its way (engine.output_s): the client never saw it
            self.records.first_token_s[rid] = math.nan
        self.aborted += 1
        self.in_system.set(now, self.in_system.value - 1)
        if seq.on_finish is not None:
            seq.on_finish(seq, now)

    def _abort_on(self, index: int, seq: Sequence) -> None:
        if index < 0:
            return  # it never reached an instance of that role
        instance = self.holder(index)
        instance.scheduler.abort(seq)
        instance.wake()  # the pages and the sequence slot it freed may let queued work run

    def _leave(self, seq: Sequence) -> None:
        if seq.aborted:
            return  # its client gave up while the last token was on its way
        now = self.env.now
        self.records.finish_s[seq.rid] = now
        self.in_system.set(now, self.in_system.value - 1)
        self.completed += 1
        if seq.on_finish is not None:
            seq.on_finish(seq, now)


class _Route:
    """A request's arrival at the engine (a SimPy callback): the front end routes it."""

    __slots__ = ("front", "seq")

    def __init__(self, front: FrontEnd, seq: Sequence):
        self.front = front
        self.seq = seq

    def __call__(self, _event: simpy.Event) -> None:
        self.front.route(self.seq)


class _Leave:
    """A request's last token reaching its client (a SimPy callback)."""

    __slots__ = ("front", "seq")

    def __init__(self, front: FrontEnd, seq: Sequence):
        self.front = front
        self.seq = seq

    def __call__(self, _event: simpy.Event) -> None:
        self.front._leave(self.seq)


class _GiveUp:
    """A request's client timeout expiring (a SimPy callback)."""

    __slots__ = ("front", "seq")

    def __init__(self, front: FrontEnd, seq: Sequence):
        self.front = front
        self.seq = seq

    def __call__(self, _event: simpy.Event) -> None:
        self.front._give_up(self.seq)


@cython.locals(front=FrontEnd, rid=cython.Py_ssize_t)
def open_loop(env: simpy.Environment, front: FrontEnd, requests: RequestArrays, rejected=None):
    """Submit pre-drawn requests at their arrival times (those ``rejected``, a boolean array, are
    refused at arrival: they could never fit an instance's KV pool)."""
    n = len(requests)
    refused = rejected.tolist() if rejected is not None else [False] * n
    hashes = requests.hash_ids if requests.hash_ids is not None else [None] * n
    adapters = requests.adapter.tolist() if requests.adapter is not None else [-1] * n
    shared = requests.shared_tokens.tolist() if requests.shared_tokens is not None else [0] * n
    for rid, (t, n_in, n_out) in enumerate(zip(requests.arrival_s.tolist(), requests.input_tokens.tolist(),
                                               requests.output_tokens.tolist())):
        if t > env.now:
            yield env.timeout(t - env.now)
        front.submit(n_in, n_out, arrival_s=t, hashes=hashes[rid], adapter=adapters[rid], shared_tokens=shared[rid],
                     rejected=refused[rid])


def client(env: simpy.Environment, front: FrontEnd, stream: ClientStream, stop_s: float):
    """One closed-loop client: think, send, wait for the answer, until ``stop_s``."""
    while True:
        request = stream.next_request_with_hashes()
        if request.think_time_s > 0:
            yield env.timeout(request.think_time_s)
        if env.now >= stop_s:
            return
        yield front.submit_and_wait(request.input_tokens, request.output_tokens, request.hash_ids,
                                    adapter=request.adapter, shared_tokens=request.shared_tokens)


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
