"""Network: the cluster topology graph and flow-level bandwidth sharing between transfers."""

from kvsim.network.flows import FlowNetwork, max_min_fair_rates
from kvsim.network.storage_io import IoRequest, StorageIO
from kvsim.network.topology import Edge, Topology, build_topology
from kvsim.network.transfers import Transfers, network_capacities

__all__ = ["FlowNetwork", "max_min_fair_rates", "Topology", "build_topology", "Edge", "Transfers", "IoRequest",
           "StorageIO", "network_capacities"]
