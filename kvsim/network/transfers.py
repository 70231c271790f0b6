"""The one way bytes move: every KV transfer (cache load, write-down, write-back, swap, P->D
handoff) becomes flows on the topology through :class:`Transfers`.

A transfer is one flow per path (per card, usually), all started at the same instant; the
returned event fires when the last has landed. Each flow pays its path's latency once. Bytes are
also counted by *purpose* (``load``, ``write``, ``swap``, ``handoff`` ...) for transfers started
inside the measurement window, so a run can say what its links carried and why. A transfer
started ``cancellable`` may be stopped part-way (:meth:`Transfers.cancel`: a P->D handoff whose
client gave up); it then counts only the bytes it delivered.

A transfer to or from a storage medium (an NVMe drive, a pool node) also describes its access as
an :class:`~kvsim.network.storage_io.IoRequest`; :class:`~kvsim.network.storage_io.StorageIO`
turns it into what each flow consumes besides its links (IOPS, CPU staging, a queue-depth cap,
the per-I/O latency).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import simpy

from kvsim.network.flows import FlowNetwork, _Route
from kvsim.network.storage_io import IoRequest, StorageIO
from kvsim.network.topology import Edge, Topology

__all__ = ["Transfers", "network_capacities"]


def network_capacities(topology: Topology, storage: StorageIO) -> dict[Hashable, float]:
    """Every capacity a :class:`FlowNetwork` over ``topology`` needs: its links, then the storage
    resources (IOPS ceilings, staging CPUs)."""
    capacities: dict[Hashable, float] = {link: rate for link, rate in topology.capacity_Bps().items()}
    capacities.update(storage.capacities())
    return capacities


class Transfers:
    """Start transfers over a topology's links, shared max-min fairly by a :class:`FlowNetwork`.

    Parameters
    ----------
    env : simpy.Environment
    topology : Topology
        Paths and latencies.
    network : FlowNetwork
        Bandwidth sharing over the topology's directed edges (and, for storage accesses, the
        resources of ``storage``: build it from :func:`network_capacities`).
    storage : StorageIO, optional
        The storage media of the topology (default: read from it).
    """

    def __init__(self, env: simpy.Environment, topology: Topology, network: FlowNetwork,
                 storage: StorageIO | None = None):
        self.env = env
        self.topology = topology
        self.network = network
        self.storage = storage if storage is not None else StorageIO(topology)
        self.capacity_Bps = network_capacities(topology, self.storage)
        self.bytes_by_purpose: dict[str, float] = {}
        self.transfers_by_purpose: dict[str, int] = {}
        # what one flow of a path costs besides its links -- (latency, rate cap, the network's
        # route over its links and resources) --
        # by (path, storage access, bytes): a function of the three (the topology and the media
        # never change), worked out once for each (an access is keyed by its id, and the entry
        # keeps the access alive, so the id cannot come back as another's)
        self._flow_costs: dict[tuple[tuple[Edge, ...], int, float], tuple[IoRequest | None, float, float, _Route]] = {}
        # (links, resources' items) -> the network's route
        self._routes: dict[tuple[tuple[Edge, ...], tuple[tuple[Hashable, float], ...] | None], _Route] = {}
        # cancellable transfers in flight: their event -> (flow events, bytes each, purpose, counted)
        self._cancellable: dict[simpy.Event, tuple[list[simpy.Event], float, str, bool]] = {}

    def _count(self, purpose: str, nbytes: float) -> bool:
        if self.network.window_start_s <= self.env.now <= self.network.window_end_s:
            self.bytes_by_purpose[purpose] = self.bytes_by_purpose.get(purpose, 0.0) + nbytes
            self.transfers_by_purpose[purpose] = self.transfers_by_purpose.get(purpose, 0) + 1
            return True
        return False

    def count(self, purpose: str, nbytes: float) -> None:
        """Count ``nbytes`` moved for ``purpose`` (inside the window) by flows started on the
        network directly, not by :meth:`move` (a weight stream, :mod:`kvsim.serving.weight_flows`)."""
        self._count(purpose, nbytes)

    def move(self, paths: Sequence[Sequence[Edge]], nbytes_each: float, purpose: str,
             io: IoRequest | None = None, cancellable: bool = False) -> simpy.Event:
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
        io : IoRequest, optional
            The storage access the flows make (each flow does its own I/Os).
        cancellable : bool
            Remember the flows until the transfer lands, so :meth:`cancel` can stop them.
        """
        counted = self._count(purpose, nbytes_each * len(paths))
        flows = []
        costs, transfer_on = self._flow_costs, self.network.transfer_on
        for links in paths:
            key = (tuple(links), id(io), nbytes_each)
            entry = costs.get(key)
            if entry is None:
                cost = self.storage.cost(links, io, nbytes_each) if io is not None else None
                if cost is None:
                    entry = (io, self.topology.path_latency_s(links), math.inf, self._route(key[0], None))
                else:
                    entry = (io, cost.latency_s, cost.rate_cap_Bps, self._route(key[0], cost.resources))
                costs[key] = entry
            flows.append(transfer_on(entry[3], nbytes_each, entry[1], entry[2]))
        done = flows[0] if len(flows) == 1 else simpy.AllOf(self.env, flows)
        if cancellable:
            self._cancellable[done] = (flows, nbytes_each, purpose, counted)

            def forget(_event: simpy.Event) -> None:
                self._cancellable.pop(done, None)

            done.callbacks.append(forget)
        return done

    def _route(self, links: tuple[Edge, ...], resources: dict[Hashable, float] | None) -> _Route:
        """The network's route over ``links`` and ``resources``, made once for each (a flow's
        resources per byte depend on its bytes, its route on the weights alone)."""
        key = (links, None if not resources else tuple(resources.items()))
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self.network.route(links, resources)
        return route

    def cancel(self, event: simpy.Event) -> float:
        """Stop a ``cancellable`` transfer :meth:`move` returned ``event`` for, part-way.

        Each of its flows still moving bytes stops where it is (see
        :meth:`FlowNetwork.cancel`); the bytes it will not move come off
        :attr:`bytes_by_purpose`. A flow whose bytes have all arrived is not stopped, so if
        every flow had delivered, ``event`` still fires; otherwise it never does.

        Returns
        -------
        float
            Bytes the transfer delivered, over all its flows (0 if it is not a cancellable
            transfer in flight).
        """
        entry = self._cancellable.pop(event, None)
        if entry is None:
            return 0.0
        flows, nbytes_each, purpose, counted = entry
        delivered = 0.0
        for flow in flows:
            moved = self.network.cancel(flow)
            delivered += nbytes_each if moved is None else moved
        if counted:
            self.bytes_by_purpose[purpose] -= nbytes_each * len(flows) - delivered
        return delivered

    def uncontended_s(self, paths: Sequence[Sequence[Edge]], nbytes_each: float,
                      io: IoRequest | None = None) -> float:
        """Time the flows of :meth:`move` would take on idle links, seconds.

        Flows of one transfer that share a link (a NIC that every card's flow crosses) share its
        capacity; the most loaded link or resource, or a flow's own queue-depth cap, decides,
        plus the longest latency.
        """
        crossings: dict[Hashable, float] = {}
        latency = 0.0
        slowest_cap_s = 0.0
        for links in paths:
            cost = self.storage.cost(links, io, nbytes_each) if io is not None else None
            latency = max(latency, cost.latency_s if cost is not None else self.topology.path_latency_s(links))
            for link in links:
                crossings[link] = crossings.get(link, 0) + 1
            if cost is not None:
                for resource, weight in cost.resources.items():
                    crossings[resource] = crossings.get(resource, 0) + weight
                slowest_cap_s = max(slowest_cap_s, nbytes_each / cost.rate_cap_Bps)
        if not crossings:
            return latency
        busiest = max(n * nbytes_each / self.capacity_Bps[link] for link, n in crossings.items())
        return max(busiest, slowest_cap_s) + latency
