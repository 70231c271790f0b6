"""A trace request that can never fit an instance's KV pool is refused before the run, naming the
request (it once waited at the head of the queue for the whole drain while the rest starved)."""

from __future__ import annotations

import json

import pytest

import kvsim
from kvsim.yaml_io import SpecError

SCENARIO = """
name: trace-too-long
duration: 12 s
model: qwen3-8b
workload:
  arrival: {kind: trace, format: mooncake, file: t.jsonl}
systems:
  a: {node: l20-8x, instances: 1}
"""


def _trace(path, longest):
    rows = [{"timestamp": i * 500, "input_length": 1000, "output_length": 20, "hash_ids": [i * 10, i * 10 + 1]}
            for i in range(20)]
    rows[7].update(input_length=longest, hash_ids=list(range(1000, 1000 + -(-longest // 512))))
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_a_request_longer_than_the_kv_pool_is_refused_naming_it(tmp_path):
    _trace(tmp_path / "t.jsonl", 300_000)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    scenario = kvsim.load_scenario(tmp_path / "s.yaml")
    with pytest.raises(SpecError) as info:
        kvsim.run(scenario)
    message = str(info.value)
    assert "request 7 of the trace (arriving at 3.500 s) needs 300020 tokens" in message
    assert "s.yaml:6: workload.arrival.file: systems.a:" in message  # the line of arrival:


def test_a_trace_that_fits_runs(tmp_path):
    _trace(tmp_path / "t.jsonl", 100_000)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    run = kvsim.run(kvsim.load_scenario(tmp_path / "s.yaml")).runs[0]
    assert run.records.to_frame().finish_s.notna().all()
