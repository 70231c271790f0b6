"""Routing over the cluster graph: deterministic paths and the KV data paths between media and
cards, and between cards (see :mod:`kvsim.network.cluster_graph` for the graph itself)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvsim.hardware.specs import AcceleratorSpec, NodeSpec, PoolNodeSpec
from kvsim.network.cluster_graph import (  # noqa: F401  (figures re-exported for callers)
    COPY_OVERHEAD_S,
    FABRIC,
    GPUS_PER_SWITCH,
    NVME_READ_LATENCY_S,
    NVME_WRITE_LATENCY_S,
    PCIE_HOP_LATENCY_S,
    RDMA_LATENCY_S,
    ROOT_UPLINK_FACTOR,
    SCALE_UP_LATENCY_S,
    Edge,
    cluster_graph,
    copy_engine,
)
from kvsim.network.tiers import ScaleUpSpec

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "Topology", "build_topology", "Edge", "FABRIC", "GPUS_PER_SWITCH", "ROOT_UPLINK_FACTOR",
    "PCIE_HOP_LATENCY_S", "RDMA_LATENCY_S", "COPY_OVERHEAD_S", "NVME_READ_LATENCY_S",
    "NVME_WRITE_LATENCY_S", "SCALE_UP_LATENCY_S",
]

_MEDIA_KINDS = ("dram", "nvme", "pool_media")


def _stable_index(key: str, n: int) -> int:
    """An index in [0, n) from ``key`` that is the same in every process (unlike ``hash``)."""
    return zlib.crc32(key.encode("utf-8")) % n


class Topology:
    """The cluster graph with deterministic routing and the KV data paths.

    Attributes
    ----------
    graph : networkx.DiGraph
        Nodes carry ``kind`` and ``owner`` (the compute or pool node); edges carry
        ``capacity_Bps`` (bytes/s), ``latency_s`` (seconds) and ``kind``. Read-only: paths are
        cached, so a changed graph needs a new :func:`build_topology`.
    compute_nodes, pool_nodes : tuple of str
        Names in the order given to :func:`build_topology`.
    """

    def __init__(self, graph: nx.DiGraph[str], compute_nodes: tuple[str, ...], pool_nodes: tuple[str, ...]):
        self.graph = graph
        self.compute_nodes = compute_nodes
        self.pool_nodes = pool_nodes
        import networkx as nx  # here, not at import: only a run that builds a topology needs it

        # routes never cross scale-up edges (card-to-card copies take peer_path) nor transit a card
        self._routes = nx.subgraph_view(graph, filter_edge=lambda u, v: graph.edges[u, v]["kind"] != "scale_up")
        self._paths: dict[tuple[str, str], tuple[Edge, ...]] = {}
        self._kv_paths: dict[tuple[str, str, str, bool], tuple[Edge, ...]] = {}
        self._members: dict[tuple[str, str], list[str]] = {}  # (owner, kind) -> names, index order
        self._latencies: dict[Edge, tuple[float, bool]] = {}  # edge -> (latency_s, a host<->device copy)
        for name, attrs in graph.nodes(data=True):
            if attrs["owner"] is not None:
                self._members.setdefault((attrs["owner"], attrs["kind"]), []).append(name)

    # ------------------------------------------------------------------ lookups

    def _kind(self, name: str) -> str:
        if name not in self.graph:
            raise KeyError(f"unknown topology node {name!r}")
        kind: str = self.graph.nodes[name]["kind"]  # (node attributes are untyped to networkx)
        return kind

    def _owner(self, name: str) -> str:
        self._kind(name)
        owner: str = self.graph.nodes[name]["owner"]
        return owner

    def _list(self, owner: str, kind: str) -> list[str]:
        if owner not in self.compute_nodes and owner not in self.pool_nodes:
            raise KeyError(f"unknown node {owner!r}; known: {', '.join(self.compute_nodes + self.pool_nodes)}")
        return list(self._members.get((owner, kind), []))

    def gpus(self, node: str) -> list[str]:
        """Accelerator names of compute node ``node``, by index."""
        return self._list(node, "gpu")

    def nics(self, node: str) -> list[str]:
        """NIC names of a compute or pool node, by index."""
        return self._list(node, "nic")

    def nvmes(self, node: str) -> list[str]:
        """Local NVMe drive names of compute node ``node``, by index."""
        return self._list(node, "nvme")

    def dram(self, node: str) -> str:
        """The host-memory endpoint of compute node ``node``."""
        found = self._list(node, "dram")
        if not found:
            raise KeyError(f"{node!r} is not a compute node")
        return found[0]

    def dram_channel(self, node: str) -> Edge:
        """The edge standing for the DDR channels of ``node`` (shared by reads and writes)."""
        self.dram(node)
        return (f"{node}/imc", f"{node}/ddr")

    def pool_media(self, pool: str) -> str:
        """The media endpoint (DRAM or drives) of pool node ``pool``."""
        found = self._list(pool, "pool_media")
        if not found:
            raise KeyError(f"{pool!r} is not a pool node")
        return found[0]

    def capacity_Bps(self) -> dict[Edge, float]:
        """Capacity of every directed edge, bytes/s, in construction order (for FlowNetwork)."""
        return {(u, v): d["capacity_Bps"] for u, v, d in self.graph.edges(data=True)}

    # ------------------------------------------------------------------ routing

    def path(self, src: str, dst: str) -> list[Edge]:
        """Fewest-hop path from ``src`` to ``dst`` as a list of edges (empty if equal).

        Ties are broken by construction order (networkx breadth-first search follows adjacency
        insertion order), so the same inputs give the same path in every run.
        """
        key = (src, dst)
        if key not in self._paths:
            self._kind(src)
            self._kind(dst)
            if src == dst:
                self._paths[key] = ()
            else:
                import networkx as nx

                try:
                    nodes = nx.shortest_path(self._routes, src, dst)
                except nx.NetworkXNoPath:
                    raise ValueError(f"no path from {src!r} to {dst!r}") from None
                self._paths[key] = tuple(zip(nodes[:-1], nodes[1:]))
        return list(self._paths[key])

    def path_latency_s(self, edges: Sequence[Edge]) -> float:
        """Latency of a path, seconds: its edges' latencies plus one copy overhead per
        host<->device copy.

        A KV path's leg between host DRAM and a GPU is a driver-issued copy (cudaMemcpy): it
        crosses the GPU's copy-engine edge, and pays :data:`COPY_OVERHEAD_S` once.
        """
        total = 0.0
        known = self._latencies  # (the graph is read-only: an edge's figures never change)
        for edge in edges:
            entry = known.get(edge)
            if entry is None:
                if not self.graph.has_edge(*edge):
                    raise KeyError(f"unknown topology edge {edge!r}")
                attributes = self.graph.edges[edge]
                entry = known[edge] = (attributes["latency_s"], attributes["kind"] == "copy_engine")
            total += entry[0]
            if entry[1]:
                total += COPY_OVERHEAD_S
        return total

    def _local_nic(self, gpu: str) -> str:
        """The NIC a GPU uses: one on its own PCIe switch if any, else one spread by switch."""
        node = self._owner(gpu)
        nics = self.nics(node)
        if not nics:
            raise ValueError(f"node {node!r} has no NIC, so {gpu!r} cannot reach the network")
        switch = self.graph.nodes[gpu]["switch"]
        near = [nic for nic in nics if self.graph.nodes[nic]["switch"] == switch]
        if near:
            peers = [g for g in self.gpus(node) if self.graph.nodes[g]["switch"] == switch]
            return near[peers.index(gpu) % len(near)]
        switches = self._list(node, "pcie")
        return nics[switches.index(switch) * len(nics) // len(switches)]

    def _remote_nic(self, media: str, gpu: str) -> str:
        """The NIC of a remote media's node serving ``gpu``: by a stable hash of the GPU name,
        among the NICs on the media's own switch when it has one (a drive) and any are there."""
        owner = self._owner(media)
        nics = self.nics(owner)
        if not nics:
            raise ValueError(f"node {owner!r} has no NIC, so {media!r} is unreachable over the network")
        switch = self.graph.nodes[media].get("switch")
        near = [nic for nic in nics if switch is not None and self.graph.nodes[nic]["switch"] == switch]
        candidates = near or nics
        return candidates[_stable_index(gpu, len(candidates))]

    def _memory_port(self, media: str, gpu: str) -> str | None:
        """The scale-up port of ``media``'s pool node when it is memory-semantic and shares
        ``gpu``'s scale-up domain, else None (the network path applies)."""
        domain = self.graph.nodes[media].get("scale_up")
        if domain is None or domain != self.graph.nodes[gpu].get("scale_up"):
            return None
        return f"{self._owner(media)}/pcie"

    def _check_kv_ends(self, media: str, gpu: str) -> str:
        if self._kind(gpu) != "gpu":
            raise ValueError(f"{gpu!r} is not a GPU")
        kind = self._kind(media)
        if kind not in _MEDIA_KINDS:
            raise ValueError(f"{media!r} is a {kind}, not a KV media endpoint (dram, nvme or pool media)")
        return kind

    def load_path(self, src: str, gpu: str, gpu_direct: bool) -> list[Edge]:
        """Edges a KV load from media ``src`` into ``gpu`` crosses.

        Parameters
        ----------
        src : str
            ``"{node}/dram"``, ``"{node}/nvme{j}"`` or ``"{pool}/media"``.
        gpu : str
            ``"{node}/gpu{i}"``.
        gpu_direct : bool
            True: GPUDirect RDMA / GDS, NIC or drive -> PCIe -> GPU without host memory.
            False: host bounce, staged through ``"{node}/dram"`` of the GPU's node, so the path
            crosses its DDR channels twice (in and out). Ignored when ``src`` is that DRAM, and
            for a memory-semantic pool in the GPU's scale-up domain, which the card reaches
            over its scale-up link (``media -> P/pcie -> su{k} -> gpu``).

        Returns
        -------
        list of tuple
            Directed edges in order; a remote source leaves by one of its NICs (stable hash of
            the GPU name) and enters by the NIC on the GPU's own PCIe switch.
        """
        key = ("load", src, gpu, bool(gpu_direct))
        if key not in self._kv_paths:
            self._kv_paths[key] = tuple(self._load_path(src, gpu, gpu_direct))
        return list(self._kv_paths[key])

    def _load_path(self, src: str, gpu: str, gpu_direct: bool) -> list[Edge]:
        self._check_kv_ends(src, gpu)
        node = self._owner(gpu)
        dram = self.dram(node)
        h2d = (gpu, copy_engine(gpu, "h2d"))  # host -> device copies run at the copy-engine rate
        if self._owner(src) == node:
            if src == dram:
                return self.path(src, gpu) + [h2d]
            if gpu_direct:
                return self.path(src, gpu)
            return self.path(src, dram) + self.path(dram, gpu) + [h2d]
        port = self._memory_port(src, gpu)
        if port is not None:  # a memory-semantic pool in the card's scale-up domain
            domain = self.graph.nodes[src]["scale_up"]
            return [(src, port), (port, domain)] + self._from_spine(domain, gpu)
        remote, local = self._remote_nic(src, gpu), self._local_nic(gpu)
        edges = self.path(src, remote) + [(remote, FABRIC), (FABRIC, local)]
        if gpu_direct:
            return edges + self.path(local, gpu)
        return edges + self.path(local, dram) + self.path(dram, gpu) + [h2d]

    def store_path(self, gpu: str, dst: str, gpu_direct: bool) -> list[Edge]:
        """Edges a KV store from ``gpu`` to media ``dst`` crosses (mirror of :meth:`load_path`)."""
        key = ("store", gpu, dst, bool(gpu_direct))
        if key not in self._kv_paths:
            self._kv_paths[key] = tuple(self._store_path(gpu, dst, gpu_direct))
        return list(self._kv_paths[key])

    def _store_path(self, gpu: str, dst: str, gpu_direct: bool) -> list[Edge]:
        self._check_kv_ends(dst, gpu)
        node = self._owner(gpu)
        dram = self.dram(node)
        d2h = (copy_engine(gpu, "d2h"), gpu)
        if self._owner(dst) == node:
            if dst == dram:
                return [d2h] + self.path(gpu, dst)
            if gpu_direct:
                return self.path(gpu, dst)
            return [d2h] + self.path(gpu, dram) + self.path(dram, dst)
        port = self._memory_port(dst, gpu)
        if port is not None:
            domain = self.graph.nodes[dst]["scale_up"]
            return self._to_spine(gpu, domain) + [(domain, port), (port, dst)]
        remote, local = self._remote_nic(dst, gpu), self._local_nic(gpu)
        edges = self.path(gpu, local) if gpu_direct else [d2h] + self.path(gpu, dram) + self.path(dram, local)
        return edges + [(local, FABRIC), (FABRIC, remote)] + self.path(remote, dst)


    def _to_spine(self, gpu: str, domain: str) -> list[Edge]:
        """Edges from ``gpu`` up to its domain's switch (through its first-layer leaf, if tiered)."""
        leaf = self.graph.nodes[gpu].get("leaf")
        return [(gpu, domain)] if leaf is None else [(gpu, leaf), (leaf, domain)]

    def _from_spine(self, domain: str, gpu: str) -> list[Edge]:
        leaf = self.graph.nodes[gpu].get("leaf")
        return [(domain, gpu)] if leaf is None else [(domain, leaf), (leaf, gpu)]

    def scale_up_domain(self, gpu: str) -> str | None:
        """The scale-up switch ``gpu`` hangs off, or None if it has no scale-up link."""
        if self._kind(gpu) != "gpu":
            raise ValueError(f"{gpu!r} is not a GPU")
        domain: str | None = self.graph.nodes[gpu].get("scale_up")
        return domain

    def peer_path(self, src: str, dst: str, gpu_direct: bool = True) -> list[Edge]:
        """Edges a copy from card ``src``'s memory into card ``dst``'s crosses.

        Inside one scale-up domain: ``src -> su{k} -> dst`` over the scale-up links (with supernode
        tiers, ``src -> leaf -> dst`` inside a first-layer group and ``src -> leaf -> su{k} -> leaf
        -> dst`` between groups). Otherwise
        over the scale-out network: with ``gpu_direct`` the NICs read and write device memory
        (GPU-Direct RDMA), else each side bounces through its host DRAM (copy engines and DDR
        channels). Two cards of one node without a scale-up link copy through host DRAM.
        """
        key = ("peer", src, dst, bool(gpu_direct))
        if key not in self._kv_paths:
            self._kv_paths[key] = tuple(self._peer_path(src, dst, gpu_direct))
        return list(self._kv_paths[key])

    def _peer_path(self, src: str, dst: str, gpu_direct: bool) -> list[Edge]:
        if src == dst:
            return []
        domain = self.scale_up_domain(src)
        if domain is not None and domain == self.scale_up_domain(dst):
            leaf = self.graph.nodes[src].get("leaf")
            if leaf is not None and leaf == self.graph.nodes[dst].get("leaf"):
                return [(src, leaf), (leaf, dst)]
            return self._to_spine(src, domain) + self._from_spine(domain, dst)
        a, b = self._owner(src), self._owner(dst)
        d2h, h2d = (copy_engine(src, "d2h"), src), (dst, copy_engine(dst, "h2d"))
        if a == b:  # no peer link: a staged copy through the node's host memory
            dram = self.dram(a)
            return [d2h] + self.path(src, dram) + self.path(dram, dst) + [h2d]
        out, into = self._local_nic(src), self._local_nic(dst)
        if gpu_direct:
            first, last = self.path(src, out), self.path(into, dst)
        else:
            src_dram, dst_dram = self.dram(a), self.dram(b)
            first = [d2h] + self.path(src, src_dram) + self.path(src_dram, out)
            last = self.path(into, dst_dram) + self.path(dst_dram, dst) + [h2d]
        return first + [(out, FABRIC), (FABRIC, into)] + last



def build_topology(
    compute_nodes: Sequence[tuple[str, NodeSpec, AcceleratorSpec]],
    pool_nodes: Sequence[tuple[str, PoolNodeSpec]] = (),
    scale_up_domains: Sequence[Sequence[str]] | None = None,
    scale_up: ScaleUpSpec | None = None,
) -> Topology:
    """Build the cluster's :class:`Topology` from hardware specs.

    Parameters and errors are those of :func:`kvsim.network.cluster_graph.cluster_graph`; the
    topology is built in the order given, so routing ties break the same way in every run.
    """
    graph = cluster_graph(compute_nodes, pool_nodes, scale_up_domains, scale_up)
    return Topology(graph, tuple(name for name, *_ in compute_nodes), tuple(name for name, _ in pool_nodes))
