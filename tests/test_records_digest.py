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
"""

from __future__ import annotations

import pytest

import kvsim
from kvsim.metrics.records import RequestRecords

SHORT = {
    "h20_vs_l20.yaml": {"duration": "60 s", "warmup": "10 s",
                        "sweep": {"workload.arrival.rate": ["5/s", "20/s", "30/s"]}},
    "offload_gap.yaml": {"duration": "40 s", "warmup": "10 s",
                         "sweep": {"workload.prefix.document_tokens.value, workload.prefix.suffix_tokens.value":
                                   [[7680, 512]], "workload.arrival.clients": [16]}},
    "offload_gap_decode.yaml": {"duration": "40 s", "warmup": "10 s",
                                "sweep": {"workload.arrival.clients": [32]}},
}

PINNED = {
    "h20_vs_l20.yaml": "3f97a85845159a723756e21f63d41b320856454550f5c3700648c2ebfe2f527b",
    "offload_gap.yaml": "b6a0373b6f5067b5230f60e256e74e5b9381e28bd4002acecaaebea7efc99b29",
    "offload_gap_decode.yaml": "0ad9b992ee462b3e3b2adfcbaafd549c8f042b0141b947d5660739f4f295d6b2",
}


@pytest.mark.parametrize("name", list(SHORT))
def test_records_of_shipped_scenarios_are_unchanged(repo_root, name):
    scenario = kvsim.load_scenario(repo_root / "scenarios" / name).with_changes(SHORT[name])
    # the columns the runs had before the restructuring (disaggregation added columns after)
    assert kvsim.run(scenario).records_digest(RequestRecords.colocated_fields) == PINNED[name]
