"""The resolved scenario that `kvsim run` writes runs again and reproduces the same results."""

from __future__ import annotations

import json

from kvsim.cli import main

SCENARIO = """
name: repro
seed: 4
duration: 20 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {{kind: gamma, rate: 4/s, cv: 1.5}}
  input_tokens: {input}
  output_tokens: {{kind: uniform, low: 10, high: 200}}
slo: {{ttft_p99: 1 s}}
systems:
  a: {{node: mine-8x, instances: 2}}
  b: {{node: l20-8x, instances: 2, instance: {{max_batched_tokens: 1024}}}}
compare: {{baseline: b}}
sweep:
  workload.arrival.rate: [2/s, 4/s]
catalog:
  accelerators:
    mine: {{base: h20, memory_bandwidth: 3 TB/s}}
  nodes:
    mine-8x: {{base: h20-8x, accelerator: mine}}
"""


def _run_twice(tmp_path, input_tokens: str):
    source = tmp_path / "s.yaml"
    source.write_text(SCENARIO.format(input=input_tokens), encoding="utf-8")
    assert main(["run", str(source), "--out", str(tmp_path / "first"), "--seed", "9", "--no-progress"]) == 0
    resolved = tmp_path / "first" / "scenario.yaml"
    assert main(["validate", str(resolved)]) == 0
    assert main(["run", str(resolved), "--out", str(tmp_path / "second"), "--no-progress"]) == 0
    first = json.loads((tmp_path / "first" / "summary.json").read_text())
    second = json.loads((tmp_path / "second" / "summary.json").read_text())
    return first, second


def _systems(summary):
    """Every point's systems (their ``stored`` folders differ: the copy names its catalog parts in full)."""
    return [p["systems"] for p in summary["points"]]


def test_resolved_scenario_reproduces_the_run(tmp_path):
    first, second = _run_twice(tmp_path, "{kind: lognormal, median: 300, sigma: 0.5, max: 2000}")
    assert first["seed"] == second["seed"] == 9  # the --seed override is carried into the copy
    assert _systems(first) == _systems(second)
    assert first["points"][0]["systems"]["a"]["hardware"]["accelerator"] == "mine"


def test_resolved_scenario_with_lengths_from_a_file_reproduces_the_run(tmp_path):
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("100 200 300 400 1200\n", encoding="utf-8")
    first, second = _run_twice(tmp_path, "{kind: empirical, file: lengths.txt}")
    assert _systems(first) == _systems(second)
