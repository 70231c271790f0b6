"""Run-level metrics of prefix caching and offload, from the request records and tier counters.

Units: tokens, FLOP, bytes, bytes/s, fractions. Rates are over the measurement window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kvsim.metrics.records import RequestRecords

__all__ = ["cache_summary", "bound_resource", "busiest_links", "TIER_NAMES", "HIT_SOURCES"]

TIER_NAMES = ("hbm", "dram", "nvme", "remote")
HIT_SOURCES = ("hbm", "peer_hbm", "other_domain", "dram", "nvme", "remote")
"""Where hit tokens come from: the tiers, plus other instances' HBM (``peer_hbm`` inside the
addressing domain, ``other_domain`` outside it); ``hbm`` is the instance's own."""


def cache_summary(
    records: RequestRecords,
    window_start_s: float,
    window_end_s: float,
    body_flops_per_token: float,
    attention_flops_per_pair: float,
    bytes_loaded: dict[str, float],
    bytes_written: dict[str, float],
    links: list[dict[str, Any]],
    occupancy_mean_bytes: dict[str, float],
    writes_skipped: dict[str, int] | None = None,
    write_bytes_skipped: dict[str, float] | None = None,
    write_flows_peak: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Cache metrics of one system run.

    Parameters
    ----------
    records : RequestRecords
        With the cache columns filled.
    window_start_s, window_end_s : float
        Requests arriving in ``[window_start_s, window_end_s)`` are measured.
    body_flops_per_token, attention_flops_per_pair : float
        The model's prefill costs, to convert hit tokens into FLOPs avoided.
    bytes_loaded, bytes_written : dict
        Bytes moved from / to each lower tier by transfers started inside the window.
    links : list of dict
        Per link ``{"link", "capacity_Bps", "bytes", "utilization_mean"}``.
    occupancy_mean_bytes : dict
        Time-weighted mean bytes held per tier over the window.
    writes_skipped, write_bytes_skipped : dict, optional
        Per lower tier, cache writes (one copy of a group of blocks into one store) refused
        inside the window because the store's write queue was full (``max_write_flows``), and
        their bytes. ``bytes_written + write_bytes_skipped`` is what the tier was offered.
    write_flows_peak : dict, optional
        Per lower tier, the most write flows one of its stores had in flight (seen when a write
        started inside the window).
    """
    span = window_end_s - window_start_s
    arrival = records.column("arrival_s")
    measured = arrival >= window_start_s
    inputs = records.column("input_tokens")[measured].astype(float)
    hits = {t: records.column(f"hit_tokens_{t}")[measured].astype(float) for t in HIT_SOURCES}
    computed = records.column("computed_tokens")[measured].astype(float)
    # Every admission needs KV for its prompt: some tokens come from a tier, the rest are
    # computed (a preempted request re-admitted needs them again). The hit rate of a tier is its
    # share of all those tokens, so the shares and the computed share add up to one.
    needed = computed.sum() + sum(h.sum() for h in hits.values())
    hit_rate = {t: (hits[t].sum() / needed if needed else 0.0) for t in HIT_SOURCES}
    hit_rate["total"] = sum(hit_rate[t] for t in HIT_SOURCES)
    # FLOPs avoided: per request, the leading hit tokens (at most its prompt) it did not compute
    total_hit = np.minimum(sum(hits.values()), inputs)
    # prefill FLOPs a hit of H leading tokens avoids: H linear passes and H(H+1)/2 attention pairs
    flops_avoided = float((total_hit * body_flops_per_token
                           + attention_flops_per_pair * total_hit * (total_hit + 1) / 2).sum())
    busiest = busiest_links(links)
    return {
        "hit_rate": hit_rate,
        "hit_tokens": {t: int(hits[t].sum()) for t in HIT_SOURCES},
        "computed_tokens": int(records.column("computed_tokens")[measured].sum()),
        "flops_avoided": flops_avoided,
        "bytes_loaded": dict(bytes_loaded),
        "bytes_written": dict(bytes_written),
        "writes_skipped": dict(writes_skipped or dict.fromkeys(bytes_written, 0)),
        "write_bytes_skipped": dict(write_bytes_skipped or dict.fromkeys(bytes_written, 0.0)),
        "write_flows_peak": dict(write_flows_peak or dict.fromkeys(bytes_written, 0)),
        "remote_read_Bps": bytes_loaded.get("remote", 0.0) / span,
        "remote_write_Bps": bytes_written.get("remote", 0.0) / span,
        "tier_occupancy_mean_bytes": dict(occupancy_mean_bytes),
        "busiest_links": busiest,
    }


def busiest_links(links: list[dict[str, Any]], count: int = 5, key: str = "link") -> list[dict[str, Any]]:
    """The ``count`` rows with the highest mean utilisation (ties by the name under ``key``).

    Rows are byte links (``key="link"``) or storage resources (``key="resource"``); never mix
    the two in one call, their utilisations measure different things.
    """
    return sorted(links, key=lambda row: (-row["utilization_mean"], row[key]))[:count]


_CAUSE_NAMES = {"compute": "gpu compute", "memory": "gpu memory bandwidth", "tp_comm": "tp all-reduce link",
                "kernels": "kernel launches", "overhead": "host overhead"}


_STORAGE_LABELS = {"read_iops": "read IOPS", "write_iops": "write IOPS", "cpu_staging": "CPU staging",
                   "pinned_buffer": "pinned buffer"}


def bound_resource(gpu_busy_fraction: float, time_by_cause_s: dict[str, float], links: list[dict[str, Any]],
                   storage: Sequence[dict[str, Any]] = (), threshold: float = 0.6) -> str:
    """Name the resource that limits a run: the busiest of engine time, the network links and the
    storage resources.

    Engine time splits into what each iteration spent it on (``time_by_cause_s``: the binding
    side of the roofline, TP all-reduce, fixed overhead); the largest share names the GPU-side
    limit. A byte link is named ``link <u->v>``; a storage resource (rows of
    :meth:`~kvsim.network.storage_io.StorageIO.report`) by its kind and name, e.g.
    ``read IOPS pool0/media`` or ``CPU staging node0/cpu``. Below ``threshold`` utilisation
    everywhere, nothing saturates ("none").
    """
    named = [(row["utilization_mean"], f"link {row['link']}") for row in links]
    named += [(r["utilization_mean"], f"{_STORAGE_LABELS[r['kind']]} {r['resource']}") for r in storage]
    top = max(named, default=None)
    link_util = top[0] if top else 0.0
    if max(gpu_busy_fraction, link_util) < threshold:
        return "none"
    if top is not None and link_util > gpu_busy_fraction:
        return top[1]
    if not any(time_by_cause_s.values()):
        return "gpu"
    cause = max(sorted(time_by_cause_s), key=lambda c: time_by_cause_s[c])
    return _CAUSE_NAMES.get(cause, cause)
