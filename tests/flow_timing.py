"""Timing transfers on idle links: the shared helper of the network tests."""

from __future__ import annotations

import simpy

from kvsim.network.flows import FlowNetwork


def timed(topo, transfers):
    """Start (edges, nbytes) transfers together on idle links of ``topo``; the completion time of
    each, seconds."""
    env = simpy.Environment()
    net = FlowNetwork(env, topo.capacity_Bps())
    events = [net.transfer(edges, nbytes, topo.path_latency_s(edges)) for edges, nbytes in transfers]
    env.run()
    return [event.value for event in events]
