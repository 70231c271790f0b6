"""The cluster as a directed graph of capacitated links, built from hardware specs.

Every physical full-duplex link is two directed edges ``u -> v`` and ``v -> u``, each with its own
``capacity_Bps`` (bytes/s) and ``latency_s`` (seconds) attributes; an edge ``(u, v)`` is the link id
fed to :class:`kvsim.network.flows.FlowNetwork`. Inside a compute node ``N``::

    N/gpu{i} -- N/pcie{k} -- N/root -- (host memory, below)
    N/nic{j} -- N/pcie{k}           N/nic{j} -- fabric
    N/nvme{j} -- N/pcie{k}

Host memory is half-duplex: reads and writes share the DDR channels, whose figure
(``host_dram_bandwidth``) is a total, not a per-direction rate. So it is one directed edge
``N/imc -> N/ddr`` (the channels) that every access crosses: a write goes
``root -> imc -> ddr -> dram``, a read ``dram -> imc -> ddr -> root``. A host-bounce copy (write
into DRAM, then read out) crosses the channels twice and uses twice its rate of their bandwidth.

A remote pool node ``P`` is ``P/media -- P/pcie -- P/nic{j} -- fabric``; its media edges carry
the pool's read bandwidth (``media -> pcie``) and write bandwidth (``pcie -> media``). ``fabric``
is one non-blocking scale-out switch that every NIC connects to.

Assumptions (figures from /work/shared/reference/hardware_facts.md):

* one PCIe switch per two accelerators, each card on an x16 link at ``host_link_bandwidth``;
* a switch's uplink to the root complex runs at 2 x ``host_link_bandwidth`` (assumption: two x16
  uplinks, or one x32, so two cards behind a switch are not starved by it);
* a NIC and an NVMe drive hang off the switches round-robin in index order; a NIC's PCIe link runs
  at the card's ``host_link_bandwidth`` (same PCIe generation; ConnectX-7 is Gen5 x16, §2c);
* scale-up (NVLink) links are not modelled here; peer traffic inside a node goes over PCIe.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import networkx as nx

from kvsim.hardware.specs import AcceleratorSpec, NodeSpec, PoolNodeSpec

__all__ = [
    "Topology", "build_topology", "Edge", "FABRIC", "GPUS_PER_SWITCH", "ROOT_UPLINK_FACTOR",
    "PCIE_HOP_LATENCY_S", "RDMA_LATENCY_S", "COPY_OVERHEAD_S", "NVME_READ_LATENCY_S",
    "NVME_WRITE_LATENCY_S",
]

Edge = tuple[str, str]

FABRIC = "fabric"
GPUS_PER_SWITCH = 2
ROOT_UPLINK_FACTOR = 2.0
# Per PCIe edge (card, NIC or drive to switch; switch to root). Assumption: ~1 us per hop, the
# order of a posted DMA round trip; hardware_facts.md gives no per-hop figure (UNCONFIRMED).
PCIE_HOP_LATENCY_S = 1e-6
# NIC to NIC through the fabric: ib_send_lat average 2.97 us on a 100G RoCE cluster
# (hardware_facts.md §2c, L/M); half is charged on each NIC-fabric edge.
RDMA_LATENCY_S = 3e-6
# Fixed cost of one host-DRAM <-> GPU copy: "cudaMemcpy can incur a 6-7 us overhead" (gdrcopy
# README, hardware_facts.md §2c, M); the midpoint is charged once per such leg of a path.
COPY_OVERHEAD_S = 6.5e-6
# Local NVMe drive access: Kioxia Gen5 read 90 -> 70 us, write 20 -> 10 us (hardware_facts.md
# §2b, M); the midpoints, added to the drive's PCIe edge in the read and write directions.
NVME_READ_LATENCY_S = 80e-6
NVME_WRITE_LATENCY_S = 15e-6

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

    def __init__(self, graph: nx.DiGraph, compute_nodes: tuple[str, ...], pool_nodes: tuple[str, ...]):
        self.graph = graph
        self.compute_nodes = compute_nodes
        self.pool_nodes = pool_nodes
        self._paths: dict[tuple[str, str], tuple[Edge, ...]] = {}
        self._kv_paths: dict[tuple[str, str, str, bool], tuple[Edge, ...]] = {}
        self._members: dict[tuple[str, str], list[str]] = {}  # (owner, kind) -> names, index order
        for name, attrs in graph.nodes(data=True):
            if attrs["kind"] != "fabric":
                self._members.setdefault((attrs["owner"], attrs["kind"]), []).append(name)

    # ------------------------------------------------------------------ lookups

    def _kind(self, name: str) -> str:
        if name not in self.graph:
            raise KeyError(f"unknown topology node {name!r}")
        return self.graph.nodes[name]["kind"]

    def _owner(self, name: str) -> str:
        self._kind(name)
        return self.graph.nodes[name]["owner"]

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
                try:
                    nodes = nx.shortest_path(self.graph, src, dst)
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
        for edge in edges:
            if not self.graph.has_edge(*edge):
                raise KeyError(f"unknown topology edge {edge!r}")
            attributes = self.graph.edges[edge]
            total += attributes["latency_s"]
            if attributes["kind"] == "copy_engine":
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
            crosses its DDR channels twice (in and out). Ignored when ``src`` is that DRAM.

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
        remote, local = self._remote_nic(dst, gpu), self._local_nic(gpu)
        edges = self.path(gpu, local) if gpu_direct else [d2h] + self.path(gpu, dram) + self.path(dram, local)
        return edges + [(local, FABRIC), (FABRIC, remote)] + self.path(remote, dst)


# ---------------------------------------------------------------------- construction


def copy_engine(gpu: str, direction: str) -> str:
    """The virtual endpoint of a GPU's host<->device copy engine (``"h2d"`` or ``"d2h"``)."""
    return f"{gpu}/{direction}"


def _link(g: nx.DiGraph, u: str, v: str, cap_uv: float, cap_vu: float, lat_uv: float, lat_vu: float,
          kind: str) -> None:
    """One full-duplex physical link: two directed edges with their own figures."""
    g.add_edge(u, v, capacity_Bps=cap_uv, latency_s=lat_uv, kind=kind)
    g.add_edge(v, u, capacity_Bps=cap_vu, latency_s=lat_vu, kind=kind)


def _spread(j: int, count: int, slots: int) -> int:
    """Slot of item ``j`` of ``count`` spread evenly over ``slots`` in index order."""
    return j * slots // count


def _add_compute_node(g: nx.DiGraph, node: str, spec: NodeSpec, acc: AcceleratorSpec) -> None:
    pcie = acc.host_link_bandwidth
    root, imc, ddr, dram = f"{node}/root", f"{node}/imc", f"{node}/ddr", f"{node}/dram"
    n_sw = math.ceil(spec.accelerators_per_node / GPUS_PER_SWITCH)
    switches = [f"{node}/pcie{k}" for k in range(n_sw)]
    for name, kind in [(root, "root"), (imc, "imc"), (ddr, "ddr"), (dram, "dram")]:
        g.add_node(name, kind=kind, owner=node)
    for sw in switches:
        g.add_node(sw, kind="pcie", owner=node)
        _link(g, sw, root, pcie * ROOT_UPLINK_FACTOR, pcie * ROOT_UPLINK_FACTOR,
              PCIE_HOP_LATENCY_S, PCIE_HOP_LATENCY_S, "pcie")
    for i in range(spec.accelerators_per_node):
        gpu, sw = f"{node}/gpu{i}", switches[i // GPUS_PER_SWITCH]
        g.add_node(gpu, kind="gpu", owner=node, switch=sw)
        _link(g, gpu, sw, pcie, pcie, PCIE_HOP_LATENCY_S, PCIE_HOP_LATENCY_S, "pcie")
        # The copy engine a host<->device copy (cudaMemcpy from pinned memory) goes through: a
        # dead-end edge no route crosses, appended to paths whose leg touches host DRAM.
        copy_rate = pcie * acc.efficiency.host_copy
        for direction in ("h2d", "d2h"):
            g.add_node(copy_engine(gpu, direction), kind="copy_engine", owner=node)
        g.add_edge(gpu, copy_engine(gpu, "h2d"), capacity_Bps=copy_rate, latency_s=0.0, kind="copy_engine")
        g.add_edge(copy_engine(gpu, "d2h"), gpu, capacity_Bps=copy_rate, latency_s=0.0, kind="copy_engine")
    # Host memory, half-duplex: every access enters at imc and crosses the channels imc -> ddr.
    # The other edges only steer direction; at the channel figure they never bind on their own.
    bw = spec.host_dram_bandwidth
    for u, v, kind in [(root, imc, "dram_port"), (dram, imc, "dram_port"), (imc, ddr, "dram_channel"),
                       (ddr, dram, "dram_port"), (ddr, root, "dram_port")]:
        g.add_edge(u, v, capacity_Bps=bw, latency_s=0.0, kind=kind)
    for j in range(spec.nics.count):
        nic, sw = f"{node}/nic{j}", switches[_spread(j, spec.nics.count, n_sw)]
        g.add_node(nic, kind="nic", owner=node, switch=sw)
        _link(g, nic, sw, pcie, pcie, PCIE_HOP_LATENCY_S, PCIE_HOP_LATENCY_S, "pcie")
        _link(g, nic, FABRIC, spec.nics.bandwidth, spec.nics.bandwidth,
              RDMA_LATENCY_S / 2, RDMA_LATENCY_S / 2, "network")
    drives = spec.nvme
    for j in range(drives.count):
        nvme, sw = f"{node}/nvme{j}", switches[_spread(j, drives.count, n_sw)]
        g.add_node(nvme, kind="nvme", owner=node, switch=sw)
        # Drive -> switch is a read, switch -> drive a write.
        _link(g, nvme, sw, drives.read_bandwidth, drives.write_bandwidth,
              PCIE_HOP_LATENCY_S + NVME_READ_LATENCY_S, PCIE_HOP_LATENCY_S + NVME_WRITE_LATENCY_S, "nvme")


def _add_pool_node(g: nx.DiGraph, pool: str, spec: PoolNodeSpec) -> None:
    if spec.nics.count < 1:
        raise ValueError(f"pool node {pool!r} has no NIC, so it is unreachable")
    media, io = f"{pool}/media", f"{pool}/pcie"
    g.add_node(media, kind="pool_media", owner=pool)
    g.add_node(io, kind="pool_io", owner=pool)
    # The media figures are the node's aggregate, so one edge per direction carries all of it;
    # the access latency is paid once per transfer, on the media edge.
    _link(g, media, io, spec.read_bandwidth, spec.write_bandwidth,
          spec.access_latency_s, spec.access_latency_s, "pool_media")
    for j in range(spec.nics.count):
        nic = f"{pool}/nic{j}"
        g.add_node(nic, kind="nic", owner=pool, switch=io)
        # Assumption: the NIC's own PCIe slot is not narrower than its line rate.
        _link(g, nic, io, spec.nics.bandwidth, spec.nics.bandwidth, PCIE_HOP_LATENCY_S, PCIE_HOP_LATENCY_S, "pcie")
        _link(g, nic, FABRIC, spec.nics.bandwidth, spec.nics.bandwidth,
              RDMA_LATENCY_S / 2, RDMA_LATENCY_S / 2, "network")


def build_topology(
    compute_nodes: Sequence[tuple[str, NodeSpec, AcceleratorSpec]],
    pool_nodes: Sequence[tuple[str, PoolNodeSpec]] = (),
) -> Topology:
    """Build the cluster graph from hardware specs.

    Parameters
    ----------
    compute_nodes : sequence of (name, NodeSpec, AcceleratorSpec)
        Servers with accelerators; names must be unique and contain no ``/``.
    pool_nodes : sequence of (name, PoolNodeSpec)
        Remote KV pool nodes reached over the fabric.

    Returns
    -------
    Topology
        Built in the order given, so routing ties break the same way in every run.

    Raises
    ------
    ValueError
        A name is repeated, contains ``/`` or is ``"fabric"``; or a pool node has no NIC.
    """
    names = [name for name, *_ in compute_nodes] + [name for name, _ in pool_nodes]
    for name in names:
        if not name or "/" in name or name == FABRIC:
            raise ValueError(f"node name {name!r} must be non-empty, contain no '/' and not be {FABRIC!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"node names must be unique; repeated: {', '.join(repeated)}")
    g = nx.DiGraph()
    g.add_node(FABRIC, kind="fabric", owner=None)
    for name, spec, acc in compute_nodes:
        _add_compute_node(g, name, spec, acc)
    for name, spec in pool_nodes:
        _add_pool_node(g, name, spec)
    return Topology(g, tuple(name for name, *_ in compute_nodes), tuple(name for name, _ in pool_nodes))
