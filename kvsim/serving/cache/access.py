"""Who may read which KV store, from which cards, at what cost: the addressing domains of a
system's cache (DESIGN.md, "Addressing domains" and "Reuse is not sharing").

An *addressing domain* is a set of cards with one physical address space: the cards of one
scale-up domain of the topology (:meth:`~kvsim.network.topology.Topology.scale_up_domain`: an
NVLink server, a rack, a UB unit of ``scale_up_domain_nodes`` nodes). An instance whose cards
have no scale-up link is a domain of its own. Sizing refuses peer access when an instance's
cards lie in two domains, so every instance belongs to exactly one.

Where a prompt's cached block comes from (its *source*, recorded per request as
``hit_tokens_<source>``):

========================  ==========================================================================
``hbm``                   the reader's own HBM (no transfer)
``peer_hbm``              another instance's HBM in the reader's domain: copied in over the
                          scale-up links (``peer_hbm: copy_in``), or read in place there by every
                          step (``read_in_place``: one physical copy per domain, see
                          :mod:`~kvsim.serving.cache.domain_pool`)
``other_domain``          an instance's HBM in another domain: copied over the message-passing
                          path (GPU-Direct RDMA through the NICs, or through host memory), so the
                          bytes cross the domain boundary and are duplicated in the reader's domain
``dram``, ``nvme``        the reader's node's host DRAM and local NVMe tiers
``remote``                the remote pool
========================  ==========================================================================

Ranking. With ``peer_hbm: none`` the sources rank by tier, fastest first (HBM < DRAM < NVMe <
remote), as before peers existed. With read in place the reader's "own HBM" is its domain's
shared store: a block there is never loaded, wherever its home. With peer access on, a block
held in several places is taken
from the one with the shortest *estimated load time* of one block into the reader: the
uncontended time of the flows that would move it (:meth:`~kvsim.network.Transfers.uncontended_s`,
the estimate the ``faster`` load policy uses), 0 for the reader's own HBM. On catalog hardware
this orders own HBM < peer HBM (scale-up links, hundreds of GB/s) < host DRAM and other domains
(PCIe copy engine vs a NIC, tens of GB/s; which comes first depends on the figures) < NVMe and
the remote pool (per-I/O latency and media rates). Ties go to the store that acquired the block
first (:meth:`~kvsim.kv.KVIndex.tier_breakdown`). A peer's bytes are read card by card: card
``c`` of the reader loads its share from card ``c`` of the holder (sizing requires every caching
instance to have the same cards per instance, so their shares line up).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvsim.kv import BlockStore
from kvsim.serving.cache.member import CacheMember

if TYPE_CHECKING:
    from kvsim.network.cluster_graph import Edge
    from kvsim.network.topology import Topology
    from kvsim.serving.cache.domain_pool import DomainPoolBase
    from kvsim.serving.cache.tiers import SystemCache

__all__ = ["CacheAccess", "SOURCES", "addressing_domain"]

SOURCES = ("hbm", "peer_hbm", "other_domain", "dram", "nvme", "remote")
"""Where a cached block may come from (see the module docstring), fastest class first."""


def addressing_domain(topology: Topology, gpus: list[str], index: int) -> str:
    """The addressing domain of instance ``index`` on cards ``gpus``: its cards' scale-up domain
    (``su{k}``), or ``instance{index}`` when they have no scale-up link."""
    return topology.scale_up_domain(gpus[0]) or f"instance{index}"


class CacheAccess:
    """The one place that says which stores an instance may use, where their bytes are, and what
    a block from each costs (see the module docstring).

    Parameters
    ----------
    system : SystemCache
        The system's stores; instances join with :meth:`register`.
    """

    def __init__(self, system: SystemCache):
        self.system = system
        self.peer_mode = system.spec.peer_hbm
        self.holder: dict[int, CacheMember] = {}   # id(HBM store) -> instance whose cards hold it
        self.pools: dict[int, Any] = {}  # id(domain store) -> its pool (read in place): a DomainPoolBase
        self.members: dict[str, list[CacheMember]] = {}  # domain -> its caching instances
        self._usable: dict[int, Callable[[BlockStore], bool]] = {}
        self._rank: dict[int, Callable[[BlockStore], float]] = {}
        self._load_s: dict[tuple[int, int, int], float] = {}  # (id(reader), id(store), blocks) -> block_load_s
        # (id(reader), id(store)) -> load_routes
        self._routes: dict[tuple[int, int], tuple[list[list[Edge]], list[list[Edge]]]] = {}

    def register(self, cache: CacheMember, domain_pool: DomainPoolBase | None) -> str:
        """Enter ``cache``'s instance (its cards and HBM store: ``domain_pool``'s store with
        ``peer_hbm: read_in_place``, else its own); returns its domain's name."""
        domain = addressing_domain(self.system.topology, cache.gpus, cache.index)
        if domain_pool is not None:
            self.pools[id(cache.hbm)] = domain_pool
        else:
            self.holder[id(cache.hbm)] = cache
        self.members.setdefault(domain, []).append(cache)
        return domain

    # -- who may read what --------------------------------------------------------------------

    def usable(self, reader: CacheMember) -> Callable[[BlockStore], bool]:
        """``usable(store)``: may ``reader`` take blocks from ``store``? Its own HBM, its node's
        DRAM and NVMe, the remote pool; with peer access, every other instance's HBM too."""
        known = self._usable.get(id(reader))
        if known is not None:
            return known
        system = self.system
        peers = self.peer_mode != "none"
        # the stores it may use, as a set's membership test (a C call, asked for every location
        # tuple a prompt meets): every HBM store with peer access, else its own; its node's DRAM
        # and NVMe; every pool node. The system's stores are all made while it is built, and
        # adding one forgets these sets (stores_changed)
        allowed = [store for store in self.system.hbm if peers or store is reader.hbm]
        allowed += [store for store in (system.dram.get(reader.node), system.nvme.get(reader.node)) if store is not None]
        allowed += system.remote
        usable = frozenset(allowed).__contains__
        self._usable[id(reader)] = usable
        return usable

    def stores_changed(self) -> None:
        """A store was added to the system (while it is built): work out usable() and rank() anew."""
        self._usable.clear()
        self._rank.clear()

    def rank(self, reader: CacheMember) -> Callable[[BlockStore], float]:
        """``rank(store)``, lower is better: the tier's position without peer access, else the
        estimated time to load one block from ``store`` into ``reader`` (see the module docstring)."""
        known = self._rank.get(id(reader))
        if known is not None:
            return known
        system = self.system
        rank: Callable[[BlockStore], float]
        if self.peer_mode == "none":
            # the tier's position of every store of the system, looked up by the store (a C call)
            stores = [*system.hbm, *system.dram.values(), *system.nvme.values(), *system.remote]
            rank = {store: system.rank[id(store)] for store in stores}.__getitem__
        else:
            estimates: dict[int, float] = {}

            def estimate(store: BlockStore) -> float:
                key = id(store)
                if key not in estimates:
                    estimates[key] = 0.0 if store is reader.hbm else self.block_load_s(reader, store)
                return estimates[key]

            rank = estimate

        self._rank[id(reader)] = rank
        return rank

    # -- where the bytes are and what they cost ------------------------------------------------

    def source(self, reader: CacheMember, store: BlockStore, block: object = None) -> tuple[str, CacheMember | None]:
        """What taking ``block`` from ``store`` is for ``reader``: its source name (module
        docstring) and, for another instance's HBM, that instance. ``reader``'s own store (its
        domain's, with read in place) is ``hbm``: nothing to load. Another domain's shared store
        holds each block in its home; without ``block``, its first instance stands for all."""
        tier = self.system.tier_of[id(store)]
        if tier != "hbm":
            return tier, None
        if store is reader.hbm:
            return "hbm", None
        pool = self.pools.get(id(store))
        if pool is not None:
            holder = pool.home[block] if block is not None else pool.members[0]
        else:
            holder = self.holder[id(store)]
        return ("peer_hbm" if holder.domain == reader.domain else "other_domain"), holder

    def peer_paths(self, holder: CacheMember, reader: CacheMember) -> list[list[Edge]]:
        """One path per card: card ``c`` of ``holder`` to card ``c`` of ``reader`` (scale-up links
        inside a domain, the NICs or host memory across domains)."""
        system = self.system
        return [system.topology.peer_path(src, dst, system.spec.gpu_direct)
                for src, dst in zip(holder.gpus, reader.gpus)]

    def load_paths(self, reader: CacheMember, store: BlockStore) -> list[list[Edge]]:
        """One path per reading card of ``reader`` from a lower tier's medium into it: every card,
        or with ``once_per_node`` fan-out one per distinct shard (:meth:`load_routes`)."""
        return self.load_routes(reader, store)[0]

    def load_routes(self, reader: CacheMember, store: BlockStore) -> tuple[list[list[Edge]], list[list[Edge]]]:
        """(read paths, hop paths) of a load from ``store`` into ``reader``: a path from the medium
        into each reading card (:meth:`SystemCache.load_plan`), and a path for each card-to-card
        hop that hands the bytes on (the scale-up links inside the cards' domain, else PCIe
        card to card). Worked out once per reader and store."""
        key = (id(reader), id(store))
        known = self._routes.get(key)
        if known is None:
            system = self.system
            topology = system.topology
            plan = system.load_plan(reader.geometry)
            gpus = reader.gpus
            reads = [topology.load_path(system.endpoint[id(store)], gpus[rank], system.spec.gpu_direct)
                     for rank in plan.readers]
            hops = [self.hop_path(topology, gpus[a], gpus[b]) for a, b in plan.hops]
            known = self._routes[key] = (reads, hops)
        return known

    @staticmethod
    def hop_path(topology: Topology, src: str, dst: str) -> list[Edge]:
        """A fan-out hop from card ``src`` to card ``dst`` of one instance: over their scale-up
        domain if they share one (NVLink, UB), else PCIe peer to peer through the switches."""
        domain = topology.scale_up_domain(src)
        if domain is not None and domain == topology.scale_up_domain(dst):
            return topology.peer_path(src, dst)
        return topology.path(src, dst)

    def block_load_s(self, reader: CacheMember, store: BlockStore, blocks: int = 1) -> float:
        """Uncontended time to load ``blocks`` blocks from ``store`` into ``reader``, seconds.

        A function of the three alone (paths, media and capacities never change during a run):
        worked out once for each."""
        key = (id(reader), id(store), blocks)
        known = self._load_s.get(key)
        if known is None:
            known = self._load_s[key] = self._block_load_s(reader, store, blocks)
        return known

    def _block_load_s(self, reader: CacheMember, store: BlockStore, blocks: int) -> float:
        system = self.system
        per_card = blocks * reader.geometry.block_bytes_per_card
        kind, holder = self.source(reader, store)
        if kind == "hbm":
            return 0.0
        if holder is not None:
            return system.transfers.uncontended_s(self.peer_paths(holder, reader), per_card)
        io = system.io(store, False, reader.node, reader.geometry.block_bytes_per_card)
        reads, hops = self.load_routes(reader, store)
        load_s = system.transfers.uncontended_s(reads, per_card, io)
        if hops:  # the hand-on runs alongside the reads (pipelined by chunk): the slower decides
            load_s = max(load_s, system.transfers.uncontended_s(hops, per_card))
        return load_s
