"""Run-level metrics of disaggregated serving: the prefill -> decode KV handoff and per-pool cards.

Units: seconds, bytes, bytes/s. Requests that arrived in the window are measured.
"""

from __future__ import annotations

from typing import Any


from kvsim.metrics.cache_summary import busiest_links
from kvsim.metrics.records import RequestRecords
from kvsim.metrics.summary import latency_stats

__all__ = ["pd_summary"]


def pd_summary(records: RequestRecords, window_start_s: float, window_end_s: float, handoff_bytes_in_window: float,
               links: list[dict[str, Any]], switches: list[dict[str, Any]], instances: list) -> dict[str, Any]:
    """Handoff metrics of one disaggregated run.

    Parameters
    ----------
    records : RequestRecords
    window_start_s, window_end_s : float
        Requests arriving in ``[window_start_s, window_end_s)`` are measured.
    handoff_bytes_in_window : float
        Bytes of handoff transfers started inside the window.
    links : list of dict
        Per link ``{"link", "capacity_Bps", "bytes", "utilization_mean"}``.
    switches : list of dict
        Role switches (``decided_s``, ``drained_s``, ``ready_s``).
    instances : list
        The instances (their ``role`` and ``gpus`` at the end of the run).
    """
    arrival = records.column("arrival_s")
    measured = arrival >= window_start_s
    start = records.column("handoff_start_s")[measured]
    landed = records.column("handoff_landed_s")[measured]
    end = records.column("handoff_end_s")[measured]
    prefill_end = records.column("prefill_end_s")[measured]
    span = window_end_s - window_start_s
    handed = records.column("handoff_bytes")[measured]
    return {
        # flow start to KV landed (a layer-by-layer flow starts during the last prefill iteration)
        "handoff_transfer_s": latency_stats(landed - start),
        # what a request waits for its KV once its prompt is computed: the transfer's exposed
        # tail plus any wait for a decode instance with room (back-pressure)
        "handoff_after_prefill_s": latency_stats(end - prefill_end),
        "handoff_bytes_per_request_mean": float(handed[handed > 0].mean()) if (handed > 0).any() else 0.0,
        "handoff_Bps": handoff_bytes_in_window / span,
        "switches": len(switches),
        # instance-seconds out of service: draining (no new work) and warming up in the new role
        "switch_out_of_service_s": float(sum(s["ready_s"] - s["decided_s"] for s in switches)),
        "cards_at_end": {role: sum(len(i.gpus) for i in instances if i.role == role) for role in ("prefill", "decode")},
        "busiest_links": busiest_links(links),
    }
