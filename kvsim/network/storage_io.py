"""Storage I/O: what a transfer to or from an NVMe drive or a pool node costs beyond its links.

A storage access of ``B`` bytes is made of ``n = ceil(B / s)`` I/Os of size ``s``. Three costs come
on top of the bandwidth of the links the bytes cross, all closed-form over ``n`` (no event per I/O):

* **IOPS ceiling.** Each medium (a drive, a pool node) serves at most ``R`` I/Os per second per
  direction. It is a resource of capacity ``R`` in the flow network; a flow consumes ``n / B`` of
  it per byte, so concurrent flows share it max-min fairly and mixed I/O sizes are counted right.
  Alone, a flow's rate is bounded by ``R * B / n`` (= ``R * s`` for whole I/Os).
* **Per-I/O latency and queue depth.** Each I/O takes ``L`` seconds end to end (the path's
  latency: media access, PCIe hops, the fabric, and on the host-bounce path the CPU's per-I/O
  cost); one transfer keeps at most ``q`` I/Os outstanding, so it needs ``w = ceil(n / q)``
  round trips. The flow pays ``L`` once (its first wave) and is capped at
  ``B / ((w - 1) * L)`` bytes/s (no cap when ``w <= 1``). On otherwise idle links of bandwidth
  ``bw`` that gives exactly::

      T = max(L + B / bw, w * L)

  the latency-plus-size term when bandwidth binds, ``w`` round trips when latency does.
* **Host staging (no GPU-Direct).** Data bounced through host memory is handled by the CPU of the
  node that stages it: ``k`` copy threads copy each byte at ``m`` bytes/s per thread (one more
  read and write of each byte in DRAM), and each I/O costs ``c`` seconds of CPU (system call,
  file-system metadata, completion). The node's threads are a resource of capacity ``max(k, 1)``
  CPU-seconds per second; a flow consumes ``1/m + c * n / B`` of it per byte (``1/m`` only when
  ``k > 0``), so a single flow stages at most ``max(k, 1) / (1/m + c * n / B)`` bytes/s, and
  each I/O's latency grows by ``c``. GPU-Direct (GDS, GPUDirect RDMA) skips all of it.
* **The connector's host path** (:class:`HostPath`, from ``kv_cache.connector``) may override
  the node's staging: its copy threads ``k`` (0 for connectors whose NIC lands data in pinned
  memory and whose GPU kernel or copy engine moves it on), ``j`` threads sharing the per-I/O work
  (capacity ``max(k, j)``), its per-I/O cost ``c`` paid once per call of ``b`` batched I/Os
  (``c / b`` per I/O), its queue depth (a flow keeps ``min`` of it and the medium's) and a pinned
  buffer of ``P`` bytes per node: a staged byte holds its room for the flow's per-I/O latency
  ``L``, so the node's bounce flows share a resource of capacity ``P`` consumed ``L`` per byte
  (alone, a flow stages at most ``P / L`` bytes/s).

A medium's DRAM tier (host memory, HBM) is not storage: accesses to it cost only their links.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvsim.hardware.specs import HostStagingSpec
    from kvsim.network.flows import FlowNetwork
    from kvsim.network.topology import Edge, Topology

__all__ = [
    "MediaIO", "IoRequest", "FlowCost", "HostPath", "StorageIO", "io_count", "queue_rate_cap_Bps",
    "staging_cpu_s_per_byte", "access_time_s", "iops_resource", "staging_resource", "pinned_resource",
    "STORAGE_KINDS",
]

# What each kind of storage resource counts, as the unit-suffixed column names of its report rows:
# kind -> (capacity column, amount-used column). IOPS ceilings count I/Os (capacity in I/Os per
# second), staging CPUs count CPU-seconds (capacity in CPU-seconds per second, i.e. threads).
STORAGE_KINDS = {
    "read_iops": ("capacity_iops", "ios"),
    "write_iops": ("capacity_iops", "ios"),
    "cpu_staging": ("capacity_cpu_s_per_s", "cpu_s"),
    "pinned_buffer": ("capacity_bytes", "byte_s"),
}


@dataclass(frozen=True)
class MediaIO:
    """I/O figures of one storage medium (a drive, or a pool node's media).

    ``read_iops`` / ``write_iops``: I/Os per second it serves (None: no ceiling);
    ``queue_depth``: I/Os one transfer keeps outstanding against it.
    """

    read_iops: float | None
    write_iops: float | None
    queue_depth: int


@dataclass(frozen=True)
class HostPath:
    """A connector's overrides of the host-bounce staging (None: the node's ``host_staging``).

    ``copy_threads``: CPU threads copying each byte; ``io_threads``: threads sharing the per-I/O
    work; ``per_io_cpu_s``: CPU per I/O, seconds, paid once per ``batch_ios`` I/Os;
    ``queue_depth``: I/Os the transport keeps outstanding per flow; ``pinned_buffer_bytes``:
    pinned staging room per node (None: unbounded).
    """

    copy_threads: int | None = None
    io_threads: int = 1
    per_io_cpu_s: float | None = None
    batch_ios: int = 1
    queue_depth: int | None = None
    pinned_buffer_bytes: float | None = None


@dataclass(frozen=True)
class IoRequest:
    """One storage access of a transfer, as the cache code describes it.

    Attributes
    ----------
    source, target : str or None
        Topology endpoint of the medium read from / written to (either may be a non-storage
        endpoint such as host DRAM, or None; it then costs nothing here).
    io_size_bytes : float
        Size of one I/O, bytes.
    host : str or None
        Compute node whose CPU stages the bytes through host memory, or None (GPU-Direct, or a
        path that needs no CPU).
    """

    source: str | None
    target: str | None
    io_size_bytes: float
    host: str | None = None


@dataclass(frozen=True)
class FlowCost:
    """What one flow of a storage access consumes besides its path's byte links.

    ``resources`` maps a resource id to its use per byte moved; ``rate_cap_Bps`` is the
    queue-depth bound; ``latency_s`` the per-I/O latency, paid once by the flow; ``ios`` the
    flow's I/O count.
    """

    resources: dict[Hashable, float]
    rate_cap_Bps: float
    latency_s: float
    ios: int


def io_count(nbytes: float, io_size_bytes: float) -> int:
    """I/Os of ``io_size_bytes`` needed for ``nbytes``: ``ceil(nbytes / io_size_bytes)``."""
    if not io_size_bytes > 0:
        raise ValueError(f"io_size_bytes must be > 0, got {io_size_bytes!r}")
    # a relative slack so that float rounding of whole multiples (3 * s / s) never adds an I/O
    return max(0, math.ceil(nbytes / io_size_bytes * (1.0 - 1e-12)))


def queue_rate_cap_Bps(nbytes: float, ios: int, queue_depth: int, io_latency_s: float) -> float:
    """Rate cap of a flow whose ``ios`` I/Os go ``queue_depth`` at a time, bytes/s.

    The flow pays one ``io_latency_s`` as its latency; the remaining ``ceil(ios/q) - 1`` waves
    must fit in its transfer time, hence ``nbytes / ((waves - 1) * io_latency_s)``.
    """
    waves = math.ceil(ios / queue_depth)
    if waves <= 1 or io_latency_s <= 0.0:
        return math.inf
    return nbytes / ((waves - 1) * io_latency_s)


def staging_cpu_s_per_byte(io_bytes: float, copy_threads: int, memcpy_Bps: float, per_io_cpu_s: float) -> float:
    """CPU-seconds one byte of a host-bounce access costs: ``1/m`` (if copied) ``+ c / s``."""
    copy = 1.0 / memcpy_Bps if copy_threads > 0 else 0.0
    return copy + per_io_cpu_s / io_bytes


def iops_resource(media: str, write: bool) -> tuple[str, str]:
    """Resource id of a medium's IOPS ceiling in one direction."""
    return (media, "write_iops" if write else "read_iops")


def staging_resource(node: str) -> tuple[str, str]:
    """Resource id of a compute node's CPU staging threads."""
    return (f"{node}/cpu", "staging")


def pinned_resource(node: str) -> tuple[str, str]:
    """Resource id of a compute node's pinned staging buffer."""
    return (f"{node}/pinned", "buffer")


def access_time_s(nbytes: float, io_size_bytes: float, bandwidth_Bps: float, io_latency_s: float,
                  queue_depth: int, iops: float | None = None, staging_Bps: float = math.inf) -> float:
    """Uncontended time of one storage access, seconds (the closed form the flows reproduce).

    ``T = max(L + B / r, w * L)`` with ``r = min(bandwidth, iops * B / n, staging rate)``,
    ``n = ceil(B / s)`` and ``w = ceil(n / q)``.
    """
    ios = io_count(nbytes, io_size_bytes)
    if ios == 0:
        return io_latency_s
    rate = min(bandwidth_Bps, staging_Bps, iops * nbytes / ios if iops else math.inf)
    return max(io_latency_s + nbytes / rate, math.ceil(ios / queue_depth) * io_latency_s)


class StorageIO:
    """The storage media and staging CPUs of a topology, and the cost of each access.

    Media are the graph's ``nvme`` and ``pool_media`` nodes carrying a :class:`MediaIO` under
    ``io``; staging CPUs are the ``dram`` nodes carrying a ``HostStagingSpec`` under ``staging``.
    ``host_path``: the system's connector's overrides of that staging (None: the nodes' own).
    """

    def __init__(self, topology: Topology, host_path: HostPath | None = None):
        self.topology = topology
        self.host_path = host_path
        graph = topology.graph
        self.media: dict[str, MediaIO] = {}
        self.staging: dict[str, HostStagingSpec] = {}  # compute node -> its host staging
        for name, attrs in graph.nodes(data=True):
            if attrs.get("io") is not None:
                self.media[name] = attrs["io"]
            if attrs.get("staging") is not None:
                self.staging[attrs["owner"]] = attrs["staging"]

    def capacities(self) -> dict[Hashable, float]:
        """Capacity of every storage resource (IOPS: I/Os per second; staging: CPU threads)."""
        out: dict[Hashable, float] = {}
        for media, io in self.media.items():
            for write, iops in ((False, io.read_iops), (True, io.write_iops)):
                if iops is not None:
                    out[iops_resource(media, write)] = float(iops)
        for node in self.staging:
            out[staging_resource(node)] = float(self._threads(node))
        if self.host_path is not None and self.host_path.pinned_buffer_bytes is not None:
            for node in self.staging:
                out[pinned_resource(node)] = float(self.host_path.pinned_buffer_bytes)
        return out

    def _staging(self, node: str) -> tuple[int, float, float]:
        """(copy threads, memcpy bytes/s per thread, CPU seconds per I/O) of ``node``'s staging,
        the connector's overrides applied (the per-I/O cost already spread over its batch)."""
        staging = self.staging[node]
        host = self.host_path
        if host is None:
            return staging.copy_threads, staging.memcpy_bandwidth, staging.per_io_cpu_s
        copy = staging.copy_threads if host.copy_threads is None else host.copy_threads
        per_io = staging.per_io_cpu_s if host.per_io_cpu_s is None else host.per_io_cpu_s
        return copy, staging.memcpy_bandwidth, per_io / host.batch_ios

    def _threads(self, node: str) -> int:
        """CPU threads staging ``node``'s bounce I/O: the copy threads, or the connector's I/O
        threads if more (at least one)."""
        copy = self._staging(node)[0]
        return max(copy, self.host_path.io_threads if self.host_path is not None else 1, 1)

    def resources(self) -> list[tuple[Hashable, str, str]]:
        """Every storage resource as ``(resource id, name, kind)``, in :meth:`capacities` order.

        ``name`` is the medium (``pool0/media``) or the staging node's CPU (``node0/cpu``);
        ``kind`` is a key of :data:`STORAGE_KINDS`.
        """
        out: list[tuple[Hashable, str, str]] = []
        for media, io in self.media.items():
            for write, iops in ((False, io.read_iops), (True, io.write_iops)):
                if iops is not None:
                    out.append((iops_resource(media, write), media, "write_iops" if write else "read_iops"))
        for node in self.staging:
            out.append((staging_resource(node), f"{node}/cpu", "cpu_staging"))
        if self.host_path is not None and self.host_path.pinned_buffer_bytes is not None:
            for node in self.staging:
                out.append((pinned_resource(node), f"{node}/pinned", "pinned_buffer"))
        return out

    def report(self, network: FlowNetwork) -> list[dict[str, object]]:
        """Every storage resource that was used, in its own units (not bytes).

        One row per resource: ``resource`` (its name), ``kind`` (``read_iops``, ``write_iops``,
        ``cpu_staging``), its capacity and the amount used under the unit-suffixed names of
        :data:`STORAGE_KINDS` (IOPS rows: ``capacity_iops`` I/Os per second, ``ios`` I/Os; staging
        rows: ``capacity_cpu_s_per_s`` CPU-seconds per second, ``cpu_s`` CPU-seconds), and
        ``utilization_mean`` (fraction of capacity, time-weighted over the network's window).
        """
        capacities = self.capacities()
        rows: list[dict[str, object]] = []
        for resource, name, kind in self.resources():
            used = network.bytes_moved(resource)  # a resource's carried amount is in its own units
            if used > 0:
                capacity_col, used_col = STORAGE_KINDS[kind]
                rows.append({"resource": name, "kind": kind, capacity_col: capacities[resource],
                             used_col: float(used), "utilization_mean": network.utilization_mean(resource)})
        return rows

    def is_storage(self, endpoint: str | None) -> bool:
        """Whether accesses to ``endpoint`` are storage I/O (a drive or a pool node's media)."""
        return endpoint is not None and endpoint in self.media

    def cost(self, path: Sequence[Edge], request: IoRequest, nbytes: float) -> FlowCost | None:
        """What one flow of ``nbytes`` over ``path`` for ``request`` consumes (None: plain bytes)."""
        ends = [(end, write) for end, write in ((request.source, False), (request.target, True))
                if end is not None and self.is_storage(end)]
        if not ends or nbytes <= 0.0:
            return None
        ios = io_count(nbytes, request.io_size_bytes)
        latency = self.topology.path_latency_s(path)
        resources: dict[Hashable, float] = {}
        for media, write in ends:
            io = self.media[media]
            if (write and io.write_iops is not None) or (not write and io.read_iops is not None):
                resources[iops_resource(media, write)] = ios / nbytes
        host = self.host_path
        if request.host is not None:
            copy_threads, memcpy_Bps, per_io_cpu_s = self._staging(request.host)
            cpu_s_per_byte = staging_cpu_s_per_byte(nbytes / ios, copy_threads, memcpy_Bps, per_io_cpu_s)
            if cpu_s_per_byte > 0:  # a staging that costs nothing is no resource to share
                resources[staging_resource(request.host)] = cpu_s_per_byte
            if copy_threads > 0:  # the copy reads and writes each byte in host memory
                resources[self.topology.dram_channel(request.host)] = 2.0
            latency += per_io_cpu_s
            if host is not None and host.pinned_buffer_bytes is not None and latency > 0.0:
                resources[pinned_resource(request.host)] = latency  # byte-seconds of room per byte
        depth = min(self.media[media].queue_depth for media, _ in ends)
        if host is not None and host.queue_depth is not None:
            depth = min(depth, host.queue_depth)
        return FlowCost(resources, queue_rate_cap_Bps(nbytes, ios, depth, latency), latency, ios)
