"""What the cache's helpers read of one instance's cache (:class:`CacheMember`).

An instance's cache (:class:`~kvsim.serving.cache.instance_cache.InstanceCache`) hands its
concerns to helpers below it -- the loader, the writer, the swapper -- and joins the system's
parts that know every instance (:class:`~kvsim.serving.cache.access.CacheAccess`, a domain's
pool, the remote reads). None of them imports or calls its owner (issue 29): each is handed the
callables it needs, and reads the instance's state through this protocol, which names that
state and nothing else (no methods). An instance is also an identity to them: the home of a
domain's block, the holder a reader copies from, a key of the remote reads.
"""

from __future__ import annotations

from typing import Any, Protocol

from kvsim.kv import BlockPool
from kvsim.serving.cache.geometry import CacheGeometry

__all__ = ["CacheMember"]


class CacheMember(Protocol):
    """One instance's cache as its helpers and the system's shared parts see it (read only).

    Attributes
    ----------
    index : int
        The instance's position in its system.
    node : str
        Its compute node (the DRAM and NVMe tiers it writes to and reads from).
    gpus : list of str
        Topology endpoints of its cards, in rank order.
    geometry : CacheGeometry
        Block sizes as the instance sees them.
    pool : BlockPool
        Its page pool.
    hbm : BlockStore or ExtentHbmStore
        Its HBM store (its addressing domain's shared one with ``peer_hbm: read_in_place``).
    inflight : dict or InflightMap
        Blocks whose bytes are still landing in ``hbm`` -> the event they land with.
    domain : str
        Its addressing domain (set when it registers with the system's access).
    remote_read_Bps : float or None
        Per card, the rate of reads in place from a peer's HBM, bytes/s.
    local_copy_Bps : float or None
        Per card, the rate of a copy inside its own HBM, bytes/s.
    """

    @property
    def index(self) -> int: ...
    @property
    def node(self) -> str: ...
    @property
    def gpus(self) -> list[str]: ...
    @property
    def geometry(self) -> CacheGeometry: ...
    @property
    def pool(self) -> BlockPool: ...
    @property
    def hbm(self) -> Any: ...  # BlockStore, or ExtentHbmStore for a system kept as extents
    @property
    def inflight(self) -> Any: ...  # dict, or InflightMap for a system kept as extents
    @property
    def domain(self) -> str: ...
    @property
    def remote_read_Bps(self) -> float | None: ...
    @property
    def local_copy_Bps(self) -> float | None: ...
