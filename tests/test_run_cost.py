"""The run's cost before it runs (kvsim/plan/run_cost.py): requests x systems x points x replications."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.plan.run_cost import REQUESTS_PER_CPU_S, run_cost

SCENARIO = """\
name: cost
seed: 4
duration: 20 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 3/s}
  input_tokens: {kind: fixed, value: 128}
  output_tokens: {kind: fixed, value: 16}
systems:
  a: {node: h20-8x, instances: 1}
  b: {node: l20-8x, instances: 1}
sweep:
  workload.arrival.rate: [1/s, 3/s]
"""


def test_open_loop_requests_are_counted_as_the_run_draws_them():
    scenario = kvsim.parse_scenario(SCENARIO, "cost.yaml")
    cost = run_cost(scenario)
    result = kvsim.run(scenario)
    # every drawn request is a record of each system: the estimate is exact for replica 0
    assert cost.requests == sum(r.records.n for r in result.runs) > 0
    assert (cost.points, cost.systems, cost.runs) == (2, 2, 4)
    assert cost.cpu_s == pytest.approx(cost.requests / REQUESTS_PER_CPU_S)
    assert "2 point(s) x 2 system(s) x 1 replication(s) = 4 system run(s)" in cost.describe()


def test_replications_multiply_the_count():
    one = run_cost(kvsim.parse_scenario(SCENARIO, "cost.yaml"))
    three = run_cost(kvsim.parse_scenario(SCENARIO + "replications: 3\n", "cost.yaml"))
    assert three.runs == 3 * one.runs and three.requests == 3 * one.requests


def test_closed_loop_is_not_estimated():
    text = SCENARIO.replace("{kind: poisson, rate: 3/s}", "{kind: closed_loop, clients: 2}").replace(
        "workload.arrival.rate: [1/s, 3/s]", "workload.arrival.clients: [1, 2]")
    cost = run_cost(kvsim.parse_scenario(text, "cost.yaml"))
    assert cost.requests is None and cost.cpu_s is None and cost.closed_loop_points == 2
    assert "closed loop" in cost.describe()



def test_a_trace_is_read_once_however_many_points_leave_the_workload_alone(tmp_path, monkeypatch):
    # a seed sweep over a trace replay read the trace at every point (10,000 points: minutes)
    import kvsim.workload.traces as traces

    (tmp_path / "t.csv").write_text("t,prompt,gen\n0.5,100,10\n1.5,200,20\n30,10,1\n", encoding="utf-8")
    text = SCENARIO.replace("{kind: poisson, rate: 3/s}", (
        "{kind: trace, format: csv, file: t.csv, columns: {arrival: t, input_tokens: prompt, output_tokens: gen}}"
    )).replace("workload.arrival.rate: [1/s, 3/s]", "seed: [1, 2, 3, 4, 5]")
    text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(("  input_tokens:", "  output_tokens:")))
    scenario = kvsim.parse_scenario(text, "cost.yaml", tmp_path)
    reads = []
    real = traces.load_csv
    monkeypatch.setattr(traces, "load_csv", lambda *a, **k: reads.append(1) or real(*a, **k))
    cost = run_cost(scenario)
    assert cost.per_point == {i: 2 * 2 for i in range(5)}  # two requests before 20 s, two systems each
    assert len(reads) == 1
