"""Same scenario + seed gives identical records; a different seed gives different ones."""

from __future__ import annotations

import numpy as np

import kvsim
from kvsim.metrics.records import RequestRecords

SCENARIO = """
name: det
seed: 21
duration: 40 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: gamma, rate: 12/s, cv: 2.0}
  input_tokens: {kind: lognormal, median: 900, sigma: 0.9, max: 8000}
  output_tokens: {kind: lognormal, median: 200, sigma: 0.8, max: 1500}
systems:
  h20: {node: h20-8x, instances: 2}
  l20: {node: l20-8x, instances: 2, router: round_robin}
"""


def _columns(records: RequestRecords) -> dict[str, np.ndarray]:
    return {name: records.column(name).copy() for name in RequestRecords.fields}


def _equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return all(a[k].shape == b[k].shape and np.array_equal(a[k], b[k], equal_nan=True) for k in a)


def test_same_seed_gives_identical_records_and_summaries():
    scenario = kvsim.parse_scenario(SCENARIO, "det.yaml")
    first, second = kvsim.run(scenario), kvsim.run(scenario)
    for a, b in zip(first.runs, second.runs):
        assert _equal(_columns(a.records), _columns(b.records))
        assert a.summary == b.summary


def test_different_seed_gives_different_records():
    scenario = kvsim.parse_scenario(SCENARIO, "det.yaml")
    first, other = kvsim.run(scenario), kvsim.run(scenario, seed=22)
    assert not _equal(_columns(first.runs[0].records), _columns(other.runs[0].records))


def test_systems_side_by_side_see_the_same_request_stream():
    result = kvsim.run(kvsim.parse_scenario(SCENARIO, "det.yaml"))
    h20, l20 = result.run("h20").records, result.run("l20").records
    for name in ("arrival_s", "input_tokens", "output_tokens"):
        assert np.array_equal(h20.column(name), l20.column(name))
    # ...but are served differently
    assert not np.array_equal(h20.column("finish_s"), l20.column("finish_s"), equal_nan=True)
