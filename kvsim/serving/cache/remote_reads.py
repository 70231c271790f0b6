"""KV read in place from a peer's HBM during attention (``peer_hbm: read_in_place``): the rate an
engine step gets over the scale-up links, and the bytes those reads carry.

Every engine step reads the whole context of each sequence in its batch. With read in place a
sequence's cached prefix may live in peers' HBM (:mod:`kvsim.serving.cache.domain_pool`), and
card ``c`` of the reader loads its share of those blocks from card ``c`` of the holder over the
scale-up links, while it reads the rest from its own HBM. The step model
(:class:`~kvsim.models.step_time.RooflineStepTime`) takes the memory phase as the longer of the
two::

    memory phase = max(local bytes / (HBM bandwidth x kv efficiency),
                       remote bytes / remote rate)

The remote rate is what this module works out, once per step (one computation per step, never
an event and never per block). Per card, a scale-up link delivers ``R = scale_up_bandwidth x
efficiency.interconnect`` (the catalog's derate of the link for card-to-card traffic). The
reader's own ingress link carries all its remote bytes; each holder's egress link is shared by
the steps reading from it at the time. With ``t_h`` remote tokens read from holder ``h`` and
``n_h`` steps (this one included) reading from ``h`` when this step starts::

    remote_s = max(sum_h t_h, max_h n_h * t_h) * kv_bytes_per_token_card / R

i.e. the reader gets ``R * sum t / max(sum t, max n_h t_h)``. Approximations: a step sees the
readers already reading when it starts (not those that start during it), the holder's egress is
split evenly among readers (not max-min fairly by their volumes), and these reads do not
contend with flows on the same links (peer copies, P->D handoffs), nor take HBM bandwidth from
the holder's own steps. The bytes are tallied per link for the utilisation report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.serving.cache.member import CacheMember

if TYPE_CHECKING:
    from kvsim.network.cluster_graph import Edge
    from kvsim.serving.cache.tiers import SystemCache

__all__ = ["RemoteReads"]


class RemoteReads:
    """The remote-read rate of engine steps and the bytes they carry over the scale-up links.

    Parameters
    ----------
    system : SystemCache
    """

    def __init__(self, system: SystemCache):
        self.system = system
        self.active: dict[int, int] = {}     # id(holder) -> steps now reading from it
        self.pair_bytes: dict[tuple[int, int], float] = {}  # (id(holder), id(reader)) -> bytes per card, in the window
        self._caches: dict[int, CacheMember] = {}

    def begin(self, reader: CacheMember, tokens_by_holder: dict[CacheMember, int]) -> float:
        """A step of ``reader`` starts, reading ``tokens_by_holder[holder]`` context tokens from each
        holder; returns the per-card rate of its remote reads, bytes/s (see the module docstring).
        Call :meth:`end` with the same arguments when the step ends."""
        rate_Bps = reader.remote_read_Bps
        if rate_Bps is None:
            raise RuntimeError(f"instance {reader.index} reads KV in place from peers, "
                               "but has no scale-up link to read over")
        total = worst = 0
        system = self.system
        inside = system.window[0] <= system.env.now <= system.window[1]
        per_token = reader.geometry.block_bytes_per_card / reader.geometry.block_tokens
        for holder, tokens in tokens_by_holder.items():
            key = id(holder)
            readers = self.active.get(key, 0) + 1
            self.active[key] = readers
            total += tokens
            worst = max(worst, readers * tokens)
            if inside:
                self._caches[key], self._caches[id(reader)] = holder, reader
                pair = (key, id(reader))
                self.pair_bytes[pair] = self.pair_bytes.get(pair, 0.0) + tokens * per_token
        # the reader's own link carries all of it; each holder's link its share of the readers
        return rate_Bps * total / max(total, worst) if total else rate_Bps

    def end(self, tokens_by_holder: dict[CacheMember, int]) -> None:
        """The step that :meth:`begin` started has ended."""
        for holder in tokens_by_holder:
            key = id(holder)
            left = self.active[key] - 1
            if left:
                self.active[key] = left
            else:
                del self.active[key]

    def edge_bytes(self) -> dict[Edge, float]:
        """Bytes read in place over each directed scale-up edge inside the window (all cards)."""
        topology = self.system.topology
        edges: dict[Edge, float] = {}
        for (holder_key, reader_key), nbytes in self.pair_bytes.items():
            holder, reader = self._caches[holder_key], self._caches[reader_key]
            for src, dst in zip(holder.gpus, reader.gpus):
                for edge in topology.peer_path(src, dst):
                    edges[edge] = edges.get(edge, 0.0) + nbytes
        return edges
