"""The cluster as a directed graph of capacitated links, built from hardware specs (the figures and
the construction; routing over the graph is :class:`kvsim.network.topology.Topology`).

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

Cards with a scale-up link (NVLink, UB) connect to their *scale-up domain*'s switch ``su{k}``,
one edge per card and direction at the card's ``scale_up_bandwidth``; a domain is one node by
default, or several nodes sharing one scale-up fabric (a SuperPoD). These edges carry only
card-to-card copies inside the domain (:meth:`Topology.peer_path`); host, NIC and storage paths
never cross them, and no path transits a card.

With supernode tiers (:mod:`kvsim.network.tiers`, two layers) a domain's switch ``su{k}`` is the
second layer's spine, and each first-layer group of ``tiers[0].nodes`` nodes (in the domain's
order) has a leaf switch ``su{k}.g{j}``: its cards link to the leaf at the first tier's bandwidth
and latency, and the leaf links to the spine at the sum of its cards' second-tier share
(``bandwidth / oversubscription``) per direction, with the second tier's extra latency over the
first split over the two uplinks. A copy between groups crosses card -> leaf -> spine -> leaf ->
card, sharing the uplinks through the flow network. Memory-semantic pool nodes join the spine.

A remote pool node ``P`` is ``P/media -- P/pcie -- P/nic{j} -- fabric``; its media edges carry
the pool's read bandwidth (``media -> pcie``) and write bandwidth (``pcie -> media``). ``fabric``
is one non-blocking scale-out switch that every NIC connects to.

A memory-semantic pool node (:attr:`PoolNodeSpec.scale_up_bandwidth`) named in a scale-up domain
also links ``P/pcie -- su{k}`` at its scale-up ports' bandwidth: the domain's cards load and store
its media over ``media -- P/pcie -- su{k} -- card`` (:meth:`Topology.load_path`), with no NIC,
host DRAM or copy engine on the way.

A NIC's two links are its PCIe slot (``nic -- switch``, at the slot's generation and width when
the node describes it, :attr:`NicSpec.pcie`) and its network link (``nic -- fabric``, at line rate
x :attr:`NicSpec.efficiency`, the delivered-over-line-rate fraction: RDMA's own loss on a compute
node, the storage service's on a pool node). A NIC sits on the card switch the node names
(:attr:`NicSpec.switch`), sharing that switch's uplink with its two cards, or on a root port of
its own (``root``).

Assumptions (figures from /work/shared/reference/hardware_facts.md):

* one PCIe switch per two accelerators, each card on an x16 link at ``host_link_bandwidth``;
* a switch's uplink to the root complex runs at 2 x ``host_link_bandwidth`` (assumption: two x16
  uplinks, or one x32, so two cards behind a switch are not starved by it);
* an NVMe drive, and a NIC whose node does not place it, hang off the switches round-robin in
  index order; a NIC whose node gives no slot runs its PCIe link at the card's
  ``host_link_bandwidth`` (same PCIe generation; ConnectX-7 is Gen5 x16, §2c);
* cards without a scale-up link talk to peers over PCIe and RDMA (the path through the NICs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvsim.hardware.specs import GPUS_PER_PCIE_SWITCH, AcceleratorSpec, NodeSpec, NvmeSpec, PoolNodeSpec
from kvsim.network.storage_io import MediaIO
from kvsim.network.tiers import ScaleUpSpec, Tier, card_tiers

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "cluster_graph", "copy_engine", "Edge", "FABRIC", "GPUS_PER_SWITCH", "ROOT_UPLINK_FACTOR",
    "PCIE_HOP_LATENCY_S", "RDMA_LATENCY_S", "COPY_OVERHEAD_S", "NVME_READ_LATENCY_S",
    "NVME_WRITE_LATENCY_S", "SCALE_UP_LATENCY_S",
]

Edge = tuple[str, str]

FABRIC = "fabric"
GPUS_PER_SWITCH = GPUS_PER_PCIE_SWITCH
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
# Local NVMe drive access when the catalog gives no figure (NvmeSpec defaults): Kioxia Gen5 read
# 90 -> 70 us, write 20 -> 10 us (hardware_facts.md §2b, M); the midpoints. A drive's figures are
# added to its PCIe edge in the read and write directions.
NVME_READ_LATENCY_S = NvmeSpec.model_fields["read_latency_s"].default
NVME_WRITE_LATENCY_S = NvmeSpec.model_fields["write_latency_s"].default
# Card to card over the scale-up fabric when the catalog gives no figure: P2P over NVLink on an
# 8 x H100 box measures ~2.3-3.3 us (p2pBandwidthLatencyTest log, hardware_facts.md section 2a, M);
# 3 us, half charged on each card-switch edge.
SCALE_UP_LATENCY_S = 3e-6



def copy_engine(gpu: str, direction: str) -> str:
    """The virtual endpoint of a GPU's host<->device copy engine (``"h2d"`` or ``"d2h"``)."""
    return f"{gpu}/{direction}"


def _link(g: nx.DiGraph[str], u: str, v: str, cap_uv: float, cap_vu: float, lat_uv: float, lat_vu: float,
          kind: str) -> None:
    """One full-duplex physical link: two directed edges with their own figures."""
    g.add_edge(u, v, capacity_Bps=cap_uv, latency_s=lat_uv, kind=kind)
    g.add_edge(v, u, capacity_Bps=cap_vu, latency_s=lat_vu, kind=kind)


def _spread(j: int, count: int, slots: int) -> int:
    """Slot of item ``j`` of ``count`` spread evenly over ``slots`` in index order."""
    return j * slots // count


def _add_compute_node(g: nx.DiGraph[str], node: str, spec: NodeSpec, acc: AcceleratorSpec,
                      scale_up: str | None, leaf: str | None = None, tiers: tuple[Tier, ...] | None = None) -> None:
    pcie = acc.host_link_bandwidth
    root, imc, ddr, dram = f"{node}/root", f"{node}/imc", f"{node}/ddr", f"{node}/dram"
    n_sw = math.ceil(spec.accelerators_per_node / GPUS_PER_SWITCH)
    switches = [f"{node}/pcie{k}" for k in range(n_sw)]
    for name, kind in [(root, "root"), (imc, "imc"), (ddr, "ddr"), (dram, "dram")]:
        g.add_node(name, kind=kind, owner=node)
    g.nodes[dram]["staging"] = spec.host_staging  # how the CPU stages a host-bounce I/O
    for sw in switches:
        g.add_node(sw, kind="pcie", owner=node)
        _link(g, sw, root, pcie * ROOT_UPLINK_FACTOR, pcie * ROOT_UPLINK_FACTOR,
              PCIE_HOP_LATENCY_S, PCIE_HOP_LATENCY_S, "pcie")
    for i in range(spec.accelerators_per_node):
        gpu, sw = f"{node}/gpu{i}", switches[i // GPUS_PER_SWITCH]
        g.add_node(gpu, kind="gpu", owner=node, switch=sw, scale_up=scale_up, leaf=leaf)
        _link(g, gpu, sw, pcie, pcie, PCIE_HOP_LATENCY_S, PCIE_HOP_LATENCY_S, "pcie")
        if scale_up is not None and tiers is not None:  # supernode tiers: the first tier's figures
            first = tiers[0]
            _link(g, gpu, leaf or scale_up, first.card_Bps, first.card_Bps, first.latency_s / 2,
                  first.latency_s / 2, "scale_up")
        elif scale_up is not None and acc.scale_up_bandwidth is not None:  # (a domain's cards have a link)
            half = (acc.scale_up_latency_s if acc.scale_up_latency_s is not None else SCALE_UP_LATENCY_S) / 2
            _link(g, gpu, scale_up, acc.scale_up_bandwidth, acc.scale_up_bandwidth, half, half, "scale_up")
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
    nics = spec.nics
    slot = nics.slot_bandwidth if nics.slot_bandwidth is not None else pcie
    for j in range(nics.count):
        place = nics.switch_of(j, n_sw)
        nic, sw = f"{node}/nic{j}", root if place == "root" else switches[place]
        g.add_node(nic, kind="nic", owner=node, switch=sw)
        _link(g, nic, sw, slot, slot, PCIE_HOP_LATENCY_S, PCIE_HOP_LATENCY_S, "pcie")
        _link(g, nic, FABRIC, nics.delivered_bandwidth, nics.delivered_bandwidth,
              RDMA_LATENCY_S / 2, RDMA_LATENCY_S / 2, "network")
    drives = spec.nvme
    for j in range(drives.count):
        nvme, sw = f"{node}/nvme{j}", switches[_spread(j, drives.count, n_sw)]
        g.add_node(nvme, kind="nvme", owner=node, switch=sw,
                   io=MediaIO(drives.read_iops, drives.write_iops, drives.queue_depth))
        # Drive -> switch is a read, switch -> drive a write.
        _link(g, nvme, sw, drives.read_bandwidth, drives.write_bandwidth,
              PCIE_HOP_LATENCY_S + drives.read_latency_s, PCIE_HOP_LATENCY_S + drives.write_latency_s, "nvme")


def _add_pool_node(g: nx.DiGraph[str], pool: str, spec: PoolNodeSpec, scale_up: str | None) -> None:
    if spec.nics.count < 1 and scale_up is None:
        raise ValueError(f"pool node {pool!r} has no NIC and is in no scale-up domain, so it is unreachable")
    media, io = f"{pool}/media", f"{pool}/pcie"
    g.add_node(media, kind="pool_media", owner=pool, scale_up=scale_up,
               io=MediaIO(spec.read_iops, spec.write_iops, spec.queue_depth))
    g.add_node(io, kind="pool_io", owner=pool)
    # The media figures are the node's aggregate, so one edge per direction carries all of it;
    # the access latency is paid once per transfer, on the media edge.
    _link(g, media, io, spec.read_bandwidth, spec.write_bandwidth,
          spec.access_latency_s, spec.access_latency_s, "pool_media")
    if scale_up is not None and spec.scale_up_bandwidth is not None:
        # A memory-semantic pool: its ports join the domain's scale-up switch like a card's link
        # (only KV paths to the domain's cards use it; routes never cross scale-up edges).
        half = (spec.scale_up_latency_s if spec.scale_up_latency_s is not None else SCALE_UP_LATENCY_S) / 2
        _link(g, io, scale_up, spec.scale_up_bandwidth, spec.scale_up_bandwidth, half, half, "scale_up")
    nics = spec.nics
    # Without a described slot, assumption: the NIC's PCIe slot is not narrower than its line rate.
    slot = nics.slot_bandwidth if nics.slot_bandwidth is not None else nics.bandwidth
    for j in range(nics.count):
        nic = f"{pool}/nic{j}"
        g.add_node(nic, kind="nic", owner=pool, switch=io)
        _link(g, nic, io, slot, slot, PCIE_HOP_LATENCY_S, PCIE_HOP_LATENCY_S, "pcie")
        _link(g, nic, FABRIC, nics.delivered_bandwidth, nics.delivered_bandwidth,
              RDMA_LATENCY_S / 2, RDMA_LATENCY_S / 2, "network")


def cluster_graph(
    compute_nodes: Sequence[tuple[str, NodeSpec, AcceleratorSpec]],
    pool_nodes: Sequence[tuple[str, PoolNodeSpec]] = (),
    scale_up_domains: Sequence[Sequence[str]] | None = None,
    scale_up: ScaleUpSpec | None = None,
) -> nx.DiGraph[str]:
    """The cluster graph from hardware specs (see :func:`kvsim.network.topology.build_topology`).

    Parameters
    ----------
    compute_nodes : sequence of (name, NodeSpec, AcceleratorSpec)
        Servers with accelerators; names must be unique and contain no ``/``.
    pool_nodes : sequence of (name, PoolNodeSpec)
        Remote KV pool nodes reached over the fabric.
    scale_up_domains : sequence of sequences of str, optional
        Groups of compute nodes whose cards share one scale-up fabric (switch ``su{k}``, in
        the order given), and the memory-semantic pool nodes (``scale_up_bandwidth``) on it.
        Default: each node whose cards have a scale-up link is its own domain, and pool nodes
        join none. A node in no group, or whose cards have no scale-up link, gets none.
    scale_up : ScaleUpSpec, optional
        Supernode tiers: the cards' scale-up figures come from its first tier, and with two
        tiers each domain's compute nodes are split into first-layer groups of
        ``tiers[0].nodes`` (in order) joined by a spine (see the module docstring).

    Returns
    -------
    networkx.DiGraph
        Built in the order given, so routing ties break the same way in every run.

    Raises
    ------
    ValueError
        A name is repeated, contains ``/`` or is ``"fabric"``; a pool node has no NIC and no domain; a
        domain names an unknown node, a node twice, or a node whose cards have no scale-up link.
    """
    names = [name for name, *_ in compute_nodes] + [name for name, _ in pool_nodes]
    for name in names:
        if not name or "/" in name or name == FABRIC:
            raise ValueError(f"node name {name!r} must be non-empty, contain no '/' and not be {FABRIC!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"node names must be unique; repeated: {', '.join(repeated)}")
    linked = {name for name, _, acc in compute_nodes if acc.scale_up_bandwidth is not None}
    memory_semantic = {name for name, spec in pool_nodes if spec.scale_up_bandwidth is not None}
    if scale_up_domains is None:
        scale_up_domains = [[name] for name, *_ in compute_nodes if name in linked]
    domain_of: dict[str, str] = {}
    known = {name for name, *_ in compute_nodes} | memory_semantic
    for k, members in enumerate(scale_up_domains):
        for member in members:
            if member not in known:
                hint = " (a pool node joins a domain only with scale_up_bandwidth)" if member in names else ""
                raise ValueError(f"scale-up domain {k} names unknown node {member!r}{hint}")
            if member in domain_of:
                raise ValueError(f"node {member!r} is in two scale-up domains")
            if member not in linked and member not in memory_semantic:
                raise ValueError(f"node {member!r} has cards without a scale-up link; it cannot join a domain")
            domain_of[member] = f"su{k}"
    import networkx as nx  # here, not at import: only a run that builds a topology needs it

    leaf_of: dict[str, str] = {}
    if scale_up is not None and len(scale_up.tiers) > 1:
        compute = {name for name, *_ in compute_nodes}
        for k, members in enumerate(scale_up_domains):
            nodes = [m for m in members if m in compute]
            for i, member in enumerate(nodes):
                leaf_of[member] = f"su{k}.g{i // scale_up.group_nodes}"
    g: nx.DiGraph[str] = nx.DiGraph()
    g.add_node(FABRIC, kind="fabric", owner=None)
    for switch in dict.fromkeys(domain_of.values()):
        g.add_node(switch, kind="scale_up", owner=None)
    uplinks: dict[str, tuple[str, float, float]] = {}  # leaf -> (spine, capacity_Bps, latency_s per edge)
    for leaf in dict.fromkeys(leaf_of.values()):
        g.add_node(leaf, kind="scale_up", owner=None, tier=1)
    for name, spec, acc in compute_nodes:
        tiers = card_tiers(scale_up, acc) if scale_up is not None and name in domain_of else None
        own_leaf = leaf_of.get(name)
        _add_compute_node(g, name, spec, acc, domain_of.get(name), own_leaf, tiers)
        if own_leaf is not None and tiers is not None:  # (a node with a leaf is in a tiered domain)
            spine, cap, _ = uplinks.get(own_leaf, (domain_of[name], 0.0, 0.0))
            top = tiers[-1]
            uplinks[own_leaf] = (spine, cap + spec.accelerators_per_node * top.share_Bps,
                             max(0.0, top.latency_s - tiers[0].latency_s) / 2)
    for leaf, (spine, cap, half) in uplinks.items():
        g.add_edge(leaf, spine, capacity_Bps=cap, latency_s=half, kind="scale_up", tier=2)
        g.add_edge(spine, leaf, capacity_Bps=cap, latency_s=half, kind="scale_up", tier=2)
    for name, pool_spec in pool_nodes:
        _add_pool_node(g, name, pool_spec, domain_of.get(name))
    return g
