"""Refactors keep results: the records of the shipped scenarios, shortened, are pinned bit for bit.

The digests were taken before the System restructuring (issue 6, part 0) and must not move unless
a change is meant to move numbers; such a change says so and updates them here. The full-length
runs were compared the same way (see the commit that introduced this file).

Re-pinned for issue 7 (engine fidelity), a change meant to move numbers: the request path
(API server, tokenisation, streaming), a per-step overhead that grows with the batch instead of a
fixed 2 ms, size-aware all-reduce costs, a vLLM-style activation reserve instead of a fixed 2 GiB,
the ``aborted_s`` column, and async scheduling's cadence (a request arriving at a busy engine joins
the batch after next). offload_gap.yaml also moved with the storage I/O model (issue 7,
part 3): the remote pool's per-I/O latency, queue depth and the host-bounce CPU cost shifted 5 of
5,238 requests' times in the short run by at most 0.42 ms on their own.

Re-pinned again for issue 7, meant to move numbers: kernel launches as a GPU cost beside the
roofline (``engine.kernel_s`` x launches by layer type) with the cards' kernel-level memory and
paged-KV efficiencies (aiconfigurator's measured kernels; L20 and H20 by stand-in), in place of
the generic 0.8 derate.

offload_gap.yaml re-pinned for issue 24 (meant to move numbers): its suffixes are uniform on
[1/2, 3/2] of their former fixed lengths, so TTFT percentiles are not degenerate, and its remote
pool is reached through LMCache's connector (its I/O sizes, threads and loads before compute).

Re-pinned for issue 24, item 5, meant to move numbers: a prewarm counts a store's turnover in
blocks newly stored, not blocks offered, so offload_gap's 512 GiB DRAM tiers start warmed on the
same prompts as the pool (6,000, not 1,395) and full; the records of its DRAM systems move, those
of the other systems do not (the same digest both backends; with the old budget patched back in,
the old digest). The refresh of lower-tier copies by each lookup moves nothing in this short run.

Re-pinned for issue 27 (session 23), meant to move numbers: ``engine.host_overlap`` now follows
``async_scheduling`` (on by default: a busy engine's step takes the longer of its GPU and host
time). With ``engine.host_overlap: false`` all three runs give the digests pinned before, so
nothing else in that change (the micro-batching tokeniser, off by default) moved a record.
"""

from __future__ import annotations

import pytest

import kvsim
from kvsim.metrics.records import RequestRecords

SHORT = {
    "h20_vs_l20.yaml": {"duration": "60 s", "warmup": "10 s",
                        "sweep": {"workload.arrival.rate": ["5/s", "20/s", "30/s"]}},
    "offload_gap.yaml": {"duration": "40 s", "warmup": "10 s",
                         "sweep": {"workload.prefix.document_tokens.value, workload.prefix.suffix_tokens.low, "
                                   "workload.prefix.suffix_tokens.high": [[7680, 256, 768]],
                                   "workload.arrival.clients": [16]}},
    "offload_gap_decode.yaml": {"duration": "40 s", "warmup": "10 s",
                                "sweep": {"workload.arrival.clients": [32]}},
}

PINNED = {
    "h20_vs_l20.yaml": "1b8fc8e026821004bf6da0e4eff6a9c2061e17483a1e5656f792bd0b4fb07300",
    "offload_gap.yaml": "9a13c783a88d4f73bc09fd7ee805ad6d20a4351c6900b9f273b62bff405d0974",
    "offload_gap_decode.yaml": "7fd0aa92877661a1760eea8d6c10e14ff1eaf3ce65204489c0dca8e1eef9c963",
}


@pytest.mark.parametrize("name", list(SHORT))
def test_records_of_shipped_scenarios_are_unchanged(repo_root, name):
    scenario = kvsim.load_scenario(repo_root / "scenarios" / name).with_changes(SHORT[name])
    # the columns the runs had before the restructuring (disaggregation added columns after)
    assert kvsim.run(scenario).records_digest(RequestRecords.colocated_fields) == PINNED[name]
