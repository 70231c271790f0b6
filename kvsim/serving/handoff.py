"""Prefill -> decode KV handoff in a disaggregated system.

When a prefill instance has computed a prompt (or, layer by layer, when the iteration that
completes it starts), :class:`KVHandoff` picks a decode instance and submits a decode-side copy
of the request there. The decode instance admits it through its :class:`HandoffReceiver` hook
only when it has KV room for the prompt (back-pressure: until then the prefill instance keeps
holding the prompt's pages, which count in its occupancy and can stall its admissions). The
receiver then moves the KV as flows on the topology, one per decode card, from the prefill card
holding the same heads: over the scale-up links when both instances sit in one scale-up domain,
otherwise NIC to NIC (GPU-Direct RDMA by default), contending with cache traffic on the same
links. When the bytes have landed, the prefill pages are released and the sequence joins the
decode batch; its first decode step emits the request's first token (what the client sees).

``layerwise``: the flow starts when the prompt's last prefill iteration starts; the handoff
ends when the flow has landed and, after the prefill ends, the last layer's share of the flow's
time has passed (the last layer's KV exists only once the iteration is over). ``whole``: the
flow starts after the prefill ends.

A client that gives up during the handoff (:meth:`KVHandoff.abort`) stops it where it is: a
copy still waiting for room leaves the decode queue; a flow in flight is cancelled (the bytes it
delivered stay counted on the links, ``handoff_bytes`` records them); the pages reserved on the
decode instance come back. The prompt's pages on the prefill side are the front end's to free,
like those of any request it aborts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import simpy

from kvsim.metrics.records import RequestRecords
from kvsim.network.transfers import Transfers
from kvsim.serving.instance import Instance
from kvsim.serving.router import Router
from kvsim.serving.scheduler import AdmissionHook, Sequence
from kvsim.serving.specs import HandoffSpec

__all__ = ["KVHandoff", "HandoffReceiver", "is_handoff"]


def is_handoff(seq: Sequence) -> bool:
    """``seq`` is a decode-side copy whose KV has not started moving."""
    return isinstance(seq.cache, _Handoff) and seq.cache.flow_start_s is None


@dataclass
class _Handoff:
    """One request's KV on its way from a prefill instance to a decode instance."""

    source: Instance
    prefill_seq: Sequence
    layerwise: bool            # the flow may start before the prefill ends
    decode: Instance | None = None
    decode_seq: Sequence | None = None
    flow_start_s: float | None = None
    flow_end_s: float | None = None
    prefill_end_s: float | None = None
    flow: simpy.Event | None = None  # the KV transfer, while it may still be cancelled
    aborted: bool = False            # the client gave up: nothing more happens to it


class KVHandoff:
    """Hands prompts' KV from prefill instances to decode instances (see the module docstring).

    Parameters
    ----------
    env : simpy.Environment
    spec : HandoffSpec
    transfers : Transfers
        The system's one way to move bytes.
    records : RequestRecords
    router : Router
        Picks among :attr:`decode_instances`.
    decode_instances : callable
        Returns the instances currently in the decode role.
    kv_bytes_per_card : callable
        ``kv_bytes_per_card(instance, tokens)``: KV bytes a prompt of ``tokens`` holds on each of
        the instance's cards (its TP degree decides how heads are split; sliding-window layers
        hold only the window).
    num_layers : int
        The model's layers (a layer-by-layer handoff's tail is one layer's share).
    """

    def __init__(self, env: simpy.Environment, spec: HandoffSpec, transfers: Transfers, records: RequestRecords,
                 router: Router, decode_instances: Callable[[], list[Instance]],
                 kv_bytes_per_card: Callable[[Instance, int], float], num_layers: int):
        self.env = env
        self.spec = spec
        self.transfers = transfers
        self.records = records
        self.router = router
        self.decode_instances = decode_instances
        self.kv_bytes_per_card = kv_bytes_per_card
        self.num_layers = num_layers
        self._early: dict[tuple[int, int], _Handoff] = {}  # (prefill index, rid) -> started early

    # -- prefill side ------------------------------------------------------------------------
    def final_chunk(self, source: Instance, seq: Sequence, now: float) -> None:
        """The iteration completing ``seq``'s prompt starts on ``source``: stream layer by layer."""
        if self.spec.mode != "layerwise":
            return
        state = _Handoff(source, seq, layerwise=True)
        self._early[(source.index, seq.rid)] = state
        self._send(state)

    def prefilled(self, source: Instance, seq: Sequence, now: float) -> None:
        """``source`` has computed ``seq``'s prompt and holds its KV until the handoff lands."""
        state = self._early.pop((source.index, seq.rid), None)
        if state is None:
            self._send(_Handoff(source, seq, layerwise=False, prefill_end_s=now))
            return
        state.prefill_end_s = now
        if state.flow_end_s is not None:
            self._finish_after(state, self._tail_s(state))

    def _send(self, state: _Handoff) -> None:
        pseq = state.prefill_seq
        dseq = type(pseq)(pseq.rid, pseq.prompt_tokens, pseq.output_tokens, on_finish=pseq.on_finish)
        dseq.adapter = pseq.adapter  # the decode instance runs it under the same adapter
        dseq.admitted = True  # admission was on the prefill side
        dseq.cache = state
        state.decode_seq = dseq
        pseq.decode_copy = dseq  # how the front end finds it to abort
        self.route(dseq)

    def route(self, seq: Sequence) -> None:
        """Send a decode-side copy to a decode instance: when it is made, or again when the one
        it waited on for room leaves the decode role (its KV is still on the prefill side)."""
        decodes = self.decode_instances()
        seq.cache.decode = target = decodes[self.router.choose(decodes, seq)]
        target.submit(seq)

    # -- decode side (called by the receiver) -------------------------------------------------
    def start_flow(self, target: Instance, state: _Handoff) -> None:
        """Pages are reserved on ``target``: move the prompt's KV, one flow per decode card."""
        source = state.source
        tokens = state.prefill_seq.prompt_tokens
        per_card = self.kv_bytes_per_card(target, tokens)
        tp_src, tp_dst = len(source.gpus), len(target.gpus)
        topology = self.transfers.topology
        paths = [topology.peer_path(source.gpus[(i * tp_src) // tp_dst], gpu, self.spec.gpu_direct)
                 for i, gpu in enumerate(target.gpus)]
        now = self.env.now
        state.flow_start_s = now
        rid = state.prefill_seq.rid
        self.records.handoff_start_s[rid] = now
        self.records.handoff_bytes[rid] = per_card * tp_dst
        state.flow = self.transfers.move(paths, per_card, "handoff", cancellable=True)
        state.flow.callbacks.append(lambda _event: self._landed(state))

    def abort(self, seq: Sequence) -> None:
        """The client of the decode-side copy ``seq`` gave up: end its handoff where it is (see
        the module docstring). Does nothing if the handoff is over (the copy is the decode
        instance's like any sequence then) or was aborted already."""
        state = seq.cache
        if not isinstance(state, _Handoff) or state.aborted:
            return
        state.aborted = seq.aborted = True
        rid = seq.rid
        self._early.pop((state.source.index, rid), None)
        decode = state.decode
        if state.flow_start_s is None:
            decode.scheduler.abort(seq)  # queued for room there: nothing reserved, nothing moving
        else:
            if state.flow_end_s is None:
                self.records.handoff_bytes[rid] = self.transfers.cancel(state.flow)
            # the KV will never be whole there: the decode instance lets go of the pages it reserved
            decode.scheduler.loaded(seq)
        state.flow = None
        seq.cache = None
        decode.wake()

    def _landed(self, state: _Handoff) -> None:
        if state.aborted:
            return  # every flow had delivered its bytes when the client gave up
        state.flow = None
        state.flow_end_s = self.env.now
        self.records.handoff_landed_s[state.prefill_seq.rid] = self.env.now
        if state.prefill_end_s is None:
            return  # layer by layer: the prompt's last iteration is still running
        if state.layerwise and state.flow_start_s < state.prefill_end_s:
            self._finish_after(state, max(0.0, state.prefill_end_s + self._tail_s(state) - self.env.now))
        else:
            self._finish(state)

    def _tail_s(self, state: _Handoff) -> float:
        return (state.flow_end_s - state.flow_start_s) / self.num_layers

    def _finish_after(self, state: _Handoff, delay_s: float) -> None:
        if delay_s <= 0:
            self._finish(state)
            return
        self.env.timeout(delay_s).callbacks.append(lambda _event: self._finish(state))

    def _finish(self, state: _Handoff) -> None:
        if state.aborted:
            return  # the client gave up while the last layer's share was still due
        rid = state.prefill_seq.rid
        self.records.handoff_end_s[rid] = self.env.now
        state.source.scheduler.release_detached(state.prefill_seq)
        state.source.wake()
        dseq = state.decode_seq
        dseq.cache = None
        state.decode.scheduler.loaded(dseq)
        state.decode.wake()


class HandoffReceiver(AdmissionHook):
    """A decode instance's admission hook: admits a handed-off request once its prompt's KV fits,
    then waits (``"load"``) for the handoff to land. A request it preempted later is recomputed
    here like on any instance."""

    def __init__(self, handoff: KVHandoff):
        self.handoff = handoff
        self.instance: Instance | None = None

    def attach(self, instance: Instance) -> None:
        self.instance = instance

    def admit(self, seq: Sequence, now: float) -> str | None:
        state = seq.cache
        if not isinstance(state, _Handoff):
            return "run"
        tokens = seq.prompt_tokens
        if not self.instance.pool.grow(seq, tokens):
            return None
        seq.kv_tokens = seq.prefill_target = tokens
        self.handoff.start_flow(self.instance, state)
        return "load"
