"""A trace request that can never fit an instance's KV pool is refused at arrival, recorded as
rejected and reported (it once waited at the head of the queue for the whole drain while the rest
starved); the requests behind it are served as if it had not been there."""

from __future__ import annotations

import json

import numpy as np

import kvsim
from kvsim.cli import main

SCENARIO = """
name: trace-too-long
duration: 12 s
model: qwen3-8b
workload:
  arrival: {kind: trace, format: mooncake, file: t.jsonl}
systems:
  a: {node: l20-8x, instances: 1}
"""


def _trace(path, longest, drop=False):
    rows = [{"timestamp": i * 500, "input_length": 1000, "output_length": 20, "hash_ids": [i * 10, i * 10 + 1]}
            for i in range(20)]
    rows[7].update(input_length=longest, hash_ids=list(range(1000, 1000 + -(-longest // 512))))
    if drop:
        del rows[7]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_a_request_longer_than_the_kv_pool_is_rejected_at_arrival_and_the_rest_are_served(tmp_path):
    _trace(tmp_path / "t.jsonl", 300_000)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    run = kvsim.run(kvsim.load_scenario(tmp_path / "s.yaml")).runs[0]
    records = run.records.to_frame()
    rejected = records.rejected_s.notna()
    assert rejected.tolist() == [i == 7 for i in range(20)]
    assert records.rejected_s[7] == records.arrival_s[7] == 3.5  # refused as it arrived
    assert records.loc[7, ["admit_s", "first_token_s", "finish_s", "aborted_s"]].isna().all()
    assert records.finish_s[~rejected].notna().all()  # nothing starved behind it
    summary = run.summary
    assert summary["requests_rejected"] == 1 and "rejected" in summary["flags"]
    assert summary["requests_undrained"] == 0 and summary["requests_unfinished"] == 0
    assert "request 7 (arriving at 3.500 s) with 300020 tokens of prompt + output" in summary["rejected_note"]

    # the others are served exactly as in the trace without it: a refused request takes nothing
    _trace(tmp_path / "t.jsonl", 300_000, drop=True)
    without = kvsim.run(kvsim.load_scenario(tmp_path / "s.yaml")).runs[0].records.to_frame()
    kept = records[~rejected].reset_index(drop=True)
    for column in ("arrival_s", "admit_s", "first_token_s", "finish_s"):
        np.testing.assert_array_equal(kept[column].to_numpy(), without[column].to_numpy())


def test_a_run_with_a_rejected_request_keeps_every_invariant(tmp_path, monkeypatch):
    from invariant_checks import observed_run, violations

    _trace(tmp_path / "t.jsonl", 300_000)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    monkeypatch.chdir(tmp_path)  # the checks read the trace again, relative to here
    scenario = kvsim.load_scenario(tmp_path / "s.yaml")
    assert violations(observed_run(scenario, monkeypatch), scenario, None) == []


def test_the_cli_warns_beside_the_table(tmp_path, capsys):
    _trace(tmp_path / "t.jsonl", 300_000)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--no-report"]) == 0
    err = capsys.readouterr().err
    assert "warning: system 'a': 1 request can never fit and was rejected at arrival" in err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "rejected" in json.dumps(summary)


def test_a_trace_that_fits_runs_with_nothing_rejected(tmp_path):
    _trace(tmp_path / "t.jsonl", 100_000)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    run = kvsim.run(kvsim.load_scenario(tmp_path / "s.yaml")).runs[0]
    assert run.records.to_frame().finish_s.notna().all()
    assert run.summary["requests_rejected"] == 0 and "rejected" not in run.summary["flags"]
    assert "rejected_note" not in run.summary
