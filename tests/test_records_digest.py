"""Refactors keep results: the records of the shipped scenarios, shortened, are pinned bit for bit.

The digests were taken before the System restructuring (issue 6, part 0) and must not move unless
a change is meant to move numbers; such a change says so and updates them here. The full-length
runs were compared the same way (see the commit that introduced this file).

offload_gap.yaml moved with the storage I/O model (issue 7, part 3): the remote pool's per-I/O
latency, queue depth and the host-bounce CPU cost shift 5 of 5,238 requests' times in the short
run by at most 0.42 ms (the summary table is unchanged to every printed digit).
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
    "h20_vs_l20.yaml": "d1920da87cc335215d67a03e9716473449e3ffb946b3d0492bfca07619ba37bd",
    "offload_gap.yaml": "d35c2afbd88db75ab4afb1dba62d604677c0f8bfb026c83fbb3e422af109be2f",
    "offload_gap_decode.yaml": "b2ef2df5b8b51a56b63393afbc9c1a720a44affb6af57529c6a628d136ca6a8f",
}


@pytest.mark.parametrize("name", list(SHORT))
def test_records_of_shipped_scenarios_are_unchanged(repo_root, name):
    scenario = kvsim.load_scenario(repo_root / "scenarios" / name).with_changes(SHORT[name])
    # the columns the runs had before the restructuring (disaggregation added columns after)
    assert kvsim.run(scenario).records_digest(RequestRecords.colocated_fields) == PINNED[name]
