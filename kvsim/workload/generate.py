"""Turn a workload spec into concrete requests, drawing from named random streams.

Stream names (stable, so adding a component never shifts these draws):
``workload.arrival``, ``workload.input_tokens``, ``workload.output_tokens`` for open loop;
``workload.client.<i>`` for closed-loop client ``i``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvsim.rng import RandomStreams
from kvsim.spec_types import FrozenSpec
from kvsim.workload.arrivals import ArrivalSpec, ClosedLoop, open_loop_arrival_times
from kvsim.workload.lengths import LengthSpec

__all__ = ["WorkloadSpec", "RequestArrays", "open_loop_requests", "ClientStream"]


class WorkloadSpec(FrozenSpec):
    """Arrival process plus prompt and output length distributions (tokens)."""

    arrival: ArrivalSpec
    input_tokens: LengthSpec
    output_tokens: LengthSpec

    @property
    def closed_loop(self) -> bool:
        return isinstance(self.arrival, ClosedLoop)


@dataclass(frozen=True)
class RequestArrays:
    """Open-loop requests, columnar: arrival times (s) and token counts."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)


def open_loop_requests(spec: WorkloadSpec, duration_s: float, streams: RandomStreams) -> RequestArrays:
    """All requests arriving in ``[0, duration_s)`` for an open-loop workload."""
    if spec.closed_loop:
        raise ValueError("open_loop_requests needs an open-loop arrival process")
    arrival_s = open_loop_arrival_times(spec.arrival, duration_s, streams.generator("workload.arrival"))
    n = len(arrival_s)
    return RequestArrays(
        arrival_s=arrival_s,
        input_tokens=spec.input_tokens.sample(streams.generator("workload.input_tokens"), n),
        output_tokens=spec.output_tokens.sample(streams.generator("workload.output_tokens"), n),
    )


class ClientStream:
    """The request sequence of one closed-loop client: think time (s), prompt and output tokens.

    Client ``i`` always draws the same sequence for the same root seed, whatever the system
    serving it, so systems compared side by side see the same requests per client.
    """

    _CHUNK = 64

    def __init__(self, spec: WorkloadSpec, client: int, streams: RandomStreams):
        if not isinstance(spec.arrival, ClosedLoop):
            raise ValueError("ClientStream needs a closed-loop arrival process")
        self._spec = spec
        self._arrival: ClosedLoop = spec.arrival
        self._rng = streams.generator(f"workload.client.{client}")
        self._buffer: list[tuple[float, int, int]] = []
        self._first = True

    def next_request(self) -> tuple[float, int, int]:
        """``(think_time_s, input_tokens, output_tokens)`` of the client's next request.

        The first request of each client is sent at time 0 (no think time).
        """
        if not self._buffer:
            n = self._CHUNK
            think = self._arrival.think_times(self._rng, n)
            inputs = self._spec.input_tokens.sample(self._rng, n)
            outputs = self._spec.output_tokens.sample(self._rng, n)
            self._buffer = list(zip(think.tolist(), inputs.tolist(), outputs.tolist()))[::-1]
        think_s, n_in, n_out = self._buffer.pop()
        if self._first:
            self._first = False
            think_s = 0.0
        return think_s, n_in, n_out
