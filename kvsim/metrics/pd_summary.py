"""Run-level metrics of disaggregated serving: the prefill -> decode KV handoff and per-pool cards.

Units: seconds, bytes, bytes/s. Requests that arrived in the window are measured.

Requests whose client gave up (``workload.timeout``) count as follows. A handoff whose flow was
cancelled part-way is *abandoned*: it is left out of the per-request handoff figures (its
transfer time and bytes are not a handoff's), while the bytes it did move count in
``handoff_Bps`` (the links carried them). A handoff that landed before the client gave up counts
like any other. ``requests_aborted_by_stage`` says where the aborted requests were, by the
milestones they reached: ``prefill`` (queued or computing on a prefill instance: the prompt was
not computed and no KV had started to move), ``handoff`` (prompt computed or KV moving, not yet
usable on the decode instance: held on the prefill side, waiting for decode room, in flight) and
``decode`` (on the decode instance, or its last token on its way to the client); the three add
up to the summary's ``requests_aborted``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from kvsim.metrics.cache_summary import busiest_links
from kvsim.metrics.records import RequestRecords
from kvsim.metrics.summary import latency_stats


class ServingInstance(Protocol):
    """What the handoff summary reads of an instance at the end of a run."""

    @property
    def role(self) -> str: ...

    @property
    def gpus(self) -> Sequence[str]: ...

__all__ = ["pd_summary"]


def pd_summary(records: RequestRecords, window_start_s: float, window_end_s: float, handoff_bytes_in_window: float,
               links: list[dict[str, Any]], switches: list[dict[str, Any]], instances: Sequence[ServingInstance]) -> dict[str, Any]:
    """Handoff metrics of one disaggregated run.

    Parameters
    ----------
    records : RequestRecords
    window_start_s, window_end_s : float
        Requests arriving in ``[window_start_s, window_end_s)`` are measured.
    handoff_bytes_in_window : float
        Bytes moved by handoff transfers started inside the window (all of a landed one's, the
        delivered part of a cancelled one's).
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
    aborted = ~np.isnan(records.column("aborted_s")[measured])
    abandoned = aborted & ~np.isnan(start) & np.isnan(landed)
    whole = (handed > 0) & ~abandoned
    in_decode = aborted & ~np.isnan(end)
    in_handoff = aborted & ~in_decode & (~np.isnan(prefill_end) | ~np.isnan(start))
    return {
        # flow start to KV landed (a layer-by-layer flow starts during the last prefill iteration)
        "handoff_transfer_s": latency_stats(landed - start),
        # what a request waits for its KV once its prompt is computed: the transfer's exposed
        # tail plus any wait for a decode instance with room (back-pressure)
        "handoff_after_prefill_s": latency_stats(end - prefill_end),
        "handoff_bytes_per_request_mean": float(handed[whole].mean()) if whole.any() else 0.0,
        # bytes the handoffs started in the window moved (an abandoned one: what it delivered)
        "handoff_Bps": handoff_bytes_in_window / span,
        "handoffs_abandoned": int(np.count_nonzero(abandoned)),
        "requests_aborted_by_stage": {
            "prefill": int(np.count_nonzero(aborted & ~in_decode & ~in_handoff)),
            "handoff": int(np.count_nonzero(in_handoff)),
            "decode": int(np.count_nonzero(in_decode)),
        },
        "switches": len(switches),
        # instance-seconds out of service: draining (no new work) and warming up in the new role
        "switch_out_of_service_s": float(sum(s["ready_s"] - s["decided_s"] for s in switches)),
        "cards_at_end": {role: sum(len(i.gpus) for i in instances if i.role == role) for role in ("prefill", "decode")},
        "busiest_links": busiest_links(links),
    }
