"""Addressing-domain metrics of a run: logical vs physical KV bytes in each domain's HBM, hits by
source, bytes crossing domain boundaries, scale-up link utilisation (issue 8).

*Physical* bytes are what the domain's HBM holds for KV: every page in use (sequences' own pages,
cached prompt blocks, blocks being loaded), each once. *Logical* bytes are what the readers see:
the same, plus one more block for every extra reader of a block that several sequences read in
place (``readers - 1`` per read block). A block cached with no reader counts once in both. So
``logical / physical`` (the dedup ratio) is 1 without sharing and k for one block read by k
sequences. Bytes are summed over an instance's cards (a block on a TP group of ``t`` cards is
``t x`` its bytes per card, replicated KV heads included).

Units: bytes, bytes/s, fractions, tokens. Levels are sampled at the system's sampling period
(``duration / 200``): the time average is over the samples in the measurement window, the peak
is the largest sample (a peak shorter than the period can be missed).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any, Protocol

from kvsim.metrics.levels import TimeWeightedLevel


class PagePool(Protocol):
    """What the HBM bytes of a domain read of an instance's page pool (a :class:`~kvsim.kv.BlockPool`)."""

    @property
    def used_blocks(self) -> int: ...


class SharedStore(Protocol):
    """What they read of an HBM block store (a BlockStore or an ExtentStore): its reader references
    and the distinct blocks they are on."""

    @property
    def reader_refs(self) -> int: ...

    @property
    def read_blocks(self) -> int: ...


Domains = dict[str, tuple[list[tuple[PagePool, float]], list[tuple[SharedStore, float]]]]
"""Domain name -> (each instance's page pool and the HBM bytes of one page, each HBM block store and
the HBM bytes of one block)."""

__all__ = ["DomainLevels", "domain_summary", "scale_up_summary"]


class DomainLevels:
    """Sampled logical and physical HBM KV bytes of each addressing domain.

    Parameters
    ----------
    window_start_s, window_end_s : float
        The measurement window, seconds.
    domains : dict
        Domain name -> ``(pools, stores)``: ``pools`` a list of ``(pool, page_bytes)`` for every
        instance in the domain (a :class:`~kvsim.kv.BlockPool` and the HBM bytes of one of its
        pages), ``stores`` a list of ``(store, block_bytes)`` for every HBM block store whose
        bytes live in the domain (each once, with the HBM bytes of one of its blocks).
    """

    def __init__(self, window_start_s: float, window_end_s: float, domains: Domains):
        self.window = (window_start_s, window_end_s)
        self.domains = domains
        names = list(domains) + ["all"]
        self.physical = {name: TimeWeightedLevel(window_start_s, window_end_s) for name in names}
        self.logical = {name: TimeWeightedLevel(window_start_s, window_end_s) for name in names}
        self.peak = {name: [0.0, 0.0] for name in names}  # physical, logical
        # each domain as (name, its pool, the pool's page bytes, its stores) when it has one pool
        # and at most one store (an instance per domain), else (name, None, 0, None): measure()
        self._plain = [(name, pools[0][0], pools[0][1], stores) if len(pools) == 1 and len(stores) <= 1
                       else (name, None, 0, None) for name, (pools, stores) in domains.items()]

    def measure(self, domain: str) -> tuple[float, float]:
        """Physical and logical HBM KV bytes of ``domain`` now."""
        pools, stores = self.domains[domain]
        physical = float(sum(pool.used_blocks * page_bytes for pool, page_bytes in pools))
        extra = float(sum((store.reader_refs - store.read_blocks) * block_bytes for store, block_bytes in stores))
        return physical, physical + extra

    def sample(self, t: float) -> None:
        """Record every domain's levels at time ``t`` (seconds)."""
        inside = self.window[0] <= t <= self.window[1]
        physical_all = logical_all = 0.0
        for name, pool, page_bytes, stores in self._plain:
            if pool is None:
                physical, logical = self.measure(name)
            else:
                # one pool: what measure() works out (the sum of one term is that term; every
                # term is >= 0), without its two generators -- a run samples 200 times
                physical = float(pool.used_blocks * page_bytes)
                if stores:
                    store, block_bytes = stores[0]
                    logical = physical + float((store.reader_refs - store.read_blocks) * block_bytes)
                else:
                    logical = physical + 0.0
            self._record(name, t, (physical, logical), inside)
            physical_all += physical
            logical_all += logical
        self._record("all", t, (physical_all, logical_all), inside)

    def _record(self, name: str, t: float, levels: tuple[float, float], inside: bool) -> None:
        self.physical[name].set(t, levels[0])
        self.logical[name].set(t, levels[1])
        if inside:
            peak = self.peak[name]
            peak[0], peak[1] = max(peak[0], levels[0]), max(peak[1], levels[1])

    def summary(self, name: str) -> dict[str, float | None]:
        """Time-average and peak physical and logical bytes of ``name`` (or ``"all"``) and the dedup
        ratio of the averages (None if it held no KV in the window: no ratio to state)."""
        physical, logical = self.physical[name].mean(), self.logical[name].mean()
        return {
            "physical_bytes_mean": physical, "physical_bytes_peak": self.peak[name][0],
            "logical_bytes_mean": logical, "logical_bytes_peak": self.peak[name][1],
            "dedup_ratio": logical / physical if physical > 0 else None,
        }


def scale_up_summary(link_report: Mapping[Hashable, Mapping[str, float]], scale_up_edges: list[tuple[str, str]],
                     window_s: float, read_bytes: Mapping[tuple[str, str], float] | None = None) -> dict[str, Any]:
    """Utilisation of the scale-up links (card <-> scale-up switch, per direction).

    Parameters
    ----------
    link_report : dict
        :meth:`~kvsim.network.flows.FlowNetwork.link_report` (flows: copies, handoffs).
    scale_up_edges : list
        The directed scale-up edges of the topology.
    window_s : float
        Length of the measurement window, seconds.
    read_bytes : dict, optional
        Edge -> bytes read in place over it inside the window (not flows; see
        :mod:`kvsim.serving.cache.remote_reads`).
    """
    read_bytes = read_bytes or {}
    if not scale_up_edges:
        return {"links": 0, "utilization_mean": 0.0, "utilization_max": 0.0, "read_in_place_bytes": 0.0}
    utils = []
    for edge in scale_up_edges:
        row = link_report[edge]
        flows = row["utilization_mean"] if not math.isnan(row["utilization_mean"]) else 0.0
        utils.append(flows + read_bytes.get(edge, 0.0) / (row["capacity_Bps"] * window_s))
    return {
        "links": len(scale_up_edges),
        "utilization_mean": sum(utils) / len(utils),
        "utilization_max": max(utils),
        "read_in_place_bytes": float(sum(read_bytes.values())) / 2,  # each byte crosses two edges
    }


def domain_summary(peer_mode: str, levels: DomainLevels, hit_tokens: dict[str, int], cross_domain_bytes: float,
                   scale_up: dict[str, Any], moved_bytes: float = 0.0) -> dict[str, Any]:
    """The ``domains`` section of a cached system's summary.

    Parameters
    ----------
    peer_mode : str
        ``kv_cache.peer_hbm``.
    levels : DomainLevels
    hit_tokens : dict
        Prompt tokens served per source (``hbm`` is the instance's own HBM).
    cross_domain_bytes : float
        KV bytes copied from one domain's HBM into another's inside the window.
    scale_up : dict
        :func:`scale_up_summary`.
    moved_bytes : float
        KV bytes a shared domain pool moved between its cards to make room (read in place).
    """
    by_source = {("own_hbm" if source == "hbm" else source): int(tokens) for source, tokens in hit_tokens.items()}
    return {
        "peer_hbm": peer_mode,
        "domains": len(levels.domains),
        **levels.summary("all"),
        "by_domain": {name: levels.summary(name) for name in levels.domains},
        "hit_tokens_by_source": by_source,
        "cross_domain_bytes": float(cross_domain_bytes),
        "moved_bytes": float(moved_bytes),
        "scale_up": scale_up,
    }
