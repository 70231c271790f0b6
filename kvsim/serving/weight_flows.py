"""An instance's weight stream through the flow network (``weight_offload.contend: true``): each
iteration's transfer of the offloaded weights is a flow per card on the links it crosses, sharing
them max-min fairly with the KV traffic, and the iteration is timed at the rate the flow gets as
it starts (the model: :mod:`kvsim.models.weight_offload`, "Through the flow network").

:class:`StreamedStepTime` wraps the instance's roofline step model: the engine loop calls its
:meth:`~StreamedStepTime.breakdown` once per iteration, as the iteration starts, which starts the
iteration's flows (:meth:`WeightFlows.begin`: one solve of the network, at that instant) and
times the iteration with their rate. Its iterations run one by one: a coalesced run would start
no flows, so the KV flows on its links would not see the stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvsim.models.step_time import BatchShape, StepBreakdown
from kvsim.models.weight_offload import WeightStream

if TYPE_CHECKING:
    from kvsim.network.flows import FlowNetwork, _Route
    from kvsim.network.transfers import Transfers

__all__ = ["WeightFlows", "StreamedStepTime", "streamed_step_model", "stream_paths"]


class WeightFlows:
    """The flows of one instance's weight stream: one per card and source of the weights.

    Parameters
    ----------
    stream : WeightStream
        What each iteration streams, and its nominal rate per card.
    network : FlowNetwork
    transfers : Transfers
        Counts the stream's bytes (purpose ``weights``) beside the KV traffic's.
    routes : list of _Route
        The network's route of each flow: for each card, one from each source.
    sources : int
        Sources each card streams from (the node's host DRAM: 1; a pool: its nodes, each holding
        an equal share of the weights).
    """

    __slots__ = ("stream", "network", "transfers", "routes", "sources", "cap_Bps", "_bytes")

    def __init__(self, stream: WeightStream, network: FlowNetwork, transfers: Transfers, routes: list[_Route],
                 sources: int):
        self.stream = stream
        self.network = network
        self.transfers = transfers
        self.routes = routes
        self.sources = sources
        self.cap_Bps = stream.rate_Bps / sources  # each flow's share of the card's nominal rate
        self._bytes: dict[int, float] = {}  # tokens -> bytes of each flow

    def begin(self, tokens: int) -> float:
        """An iteration of ``tokens`` tokens starts now: start its flows, and return how many times
        its nominal transfer time the stream takes at the rate they get now (1.0: every flow at
        its nominal rate; else the nominal rate over the slowest flow's, whose card the
        iteration waits for)."""
        nbytes = self._bytes.get(tokens)
        if nbytes is None:
            nbytes = self._bytes[tokens] = self.stream.step_bytes(tokens) / self.sources
        if not nbytes > 0.0:
            return 1.0
        network, cap = self.network, self.cap_Bps
        events = [network.transfer_on(route, nbytes, 0.0, cap) for route in self.routes]
        self.transfers.count("weights", nbytes * len(events))
        network.solve_now()
        least = min(network.rate_of(event) for event in events)
        return 1.0 if least >= cap else cap / least


class StreamedStepTime:
    """A roofline step model whose weight stream runs through the flow network.

    Parameters
    ----------
    step : RooflineStepTime
        The instance's step model (its stream at the nominal rate).
    flows : WeightFlows
    """

    __slots__ = ("step", "flows")

    def __init__(self, step: Any, flows: WeightFlows):
        self.step = step
        self.flows = flows

    def breakdown(self, batch: BatchShape, remote_kv_Bps: float | None = None) -> StepBreakdown:
        """The components of an iteration of ``batch`` that starts now, seconds: its weight
        stream's flows start (:meth:`WeightFlows.begin`), and its transfers take the time their
        rate gives. Call it once per iteration, as it starts (the engine loop does)."""
        parts: StepBreakdown = self.step.breakdown(batch, remote_kv_Bps, self.flows.begin(batch.tokens))
        return parts

    def iteration_time_s(self, batch: BatchShape) -> float:
        """Duration of an iteration of ``batch`` that starts now, seconds (see :meth:`breakdown`)."""
        return self.breakdown(batch).total_s


def stream_paths(topology: Any, node: str, gpus: list[str] | tuple[str, ...], home: str) -> tuple[list[list[tuple[str, str]]], int]:
    """The paths of an instance's weight stream, for each card one from each source, and the
    sources per card: ``home: host`` the node's host DRAM (the path a KV load from it takes:
    the DDR channels, the switch, the card's host link and its copy engine); ``home: pool`` each
    pool node's media, over the NICs straight into the card (GPU-Direct, as a KV load from the
    pool with ``gpu_direct``)."""
    if home == "pool":
        sources = [topology.pool_media(pool) for pool in topology.pool_nodes]
    else:
        sources = [topology.dram(node)]
    return [topology.load_path(source, gpu, True) for gpu in gpus for source in sources], len(sources)


def streamed_step_model(system: Any, place: Any, step: Any) -> Any:
    """``step``, the step model of the instance at ``place`` (a :class:`~kvsim.sim.build.Placement`)
    of the built ``system``, or, when its weights stream through the flow network
    (``weight_offload.contend``), a :class:`StreamedStepTime` over it."""
    stream = place.pool.stream
    if stream is None or not stream.contend:
        return step
    paths, sources = stream_paths(system.topology, place.node, place.gpus, stream.home)
    routes = [system.network.route(path) for path in paths]
    return StreamedStepTime(step, WeightFlows(stream, system.network, system.transfers, routes, sources))
