"""The one way bytes move: every KV transfer (cache load, write-down, write-back, swap, P->D
handoff) becomes flows on the topology through :class:`Transfers`.

A transfer is one flow per path (per card, usually), all started at the same instant; the
returned event fires when the last has landed. Each flow pays its path's latency once. Bytes are
also counted by *purpose* (``load``, ``write``, ``swap``, ``handoff`` ...) for transfers started
inside the measurement window, so a run can say what its links carried and why.
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from kvsim.network.flows import FlowNetwork
from kvsim.network.topology import Edge, Topology

__all__ = ["Transfers"]


class Transfers:
    """Start transfers over a topology's links, shared max-min fairly by a :class:`FlowNetwork`.

    Parameters
    ----------
    env : simpy.Environment
    topology : Topology
        Paths and latencies.
    network : FlowNetwork
        Bandwidth sharing over the topology's directed edges.
    """

    def __init__(self, env: simpy.Environment, topology: Topology, network: FlowNetwork):
        self.env = env
        self.topology = topology
        self.network = network
        self.capacity_Bps = topology.capacity_Bps()
        self.bytes_by_purpose: dict[str, float] = {}
        self.transfers_by_purpose: dict[str, int] = {}

    def _count(self, purpose: str, nbytes: float) -> None:
        if self.network.window_start_s <= self.env.now <= self.network.window_end_s:
            self.bytes_by_purpose[purpose] = self.bytes_by_purpose.get(purpose, 0.0) + nbytes
            self.transfers_by_purpose[purpose] = self.transfers_by_purpose.get(purpose, 0) + 1

    def move(self, paths: Sequence[Sequence[Edge]], nbytes_each: float, purpose: str) -> simpy.Event:
        """Start one flow of ``nbytes_each`` bytes per path; the event fires when all have landed.

        Parameters
        ----------
        paths : sequence of edge lists
            One path per flow (from :meth:`Topology.load_path`, :meth:`Topology.store_path`,
            :meth:`Topology.path` or :meth:`Topology.peer_path`).
        nbytes_each : float
            Bytes each flow carries.
        purpose : str
            What the bytes are for, counted in :attr:`bytes_by_purpose`.
        """
        self._count(purpose, nbytes_each * len(paths))
        latency = self.topology.path_latency_s
        flows = [self.network.transfer(links, nbytes_each, latency(links)) for links in paths]
        return flows[0] if len(flows) == 1 else simpy.AllOf(self.env, flows)

    def uncontended_s(self, paths: Sequence[Sequence[Edge]], nbytes_each: float) -> float:
        """Time the flows of :meth:`move` would take on idle links, seconds.

        Flows of one transfer that share a link (a NIC that every card's flow crosses) share its
        capacity; the most loaded link decides, plus the longest path latency.
        """
        crossings: dict[Edge, int] = {}
        latency = 0.0
        for links in paths:
            latency = max(latency, self.topology.path_latency_s(links))
            for link in links:
                crossings[link] = crossings.get(link, 0) + 1
        if not crossings:
            return latency
        return max(n * nbytes_each / self.capacity_Bps[link] for link, n in crossings.items()) + latency
