"""A probe stops once its failure is certain (kvsim.plan.planner.certain_failure): never a different
verdict, only less simulation."""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
import kvsim.plan.planner as planner
from kvsim.plan.planner import Probe, certain_failure, run_probe
from kvsim.plan.slo import Objective, objectives_from_slo

PLAN = """
name: stop
seed: 3
duration: 60 s
warmup: 10 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 2000}
  output_tokens: {kind: fixed, value: 64}
slo: {ttft_p99: 1 s, tpot_p99: 100 ms}
systems:
  l20: {node: l20-8x, instances: 1, instance: {max_num_seqs: 8}}
plan: {targets: [4/s], units: {max: 4}, rel_tol: 0.1}
"""


class _Records:
    def __init__(self, **columns):
        self.columns = {k: np.asarray(v, dtype=float) for k, v in columns.items()}

    def column(self, name):
        return self.columns[name]


def test_the_check_counts_late_and_still_waiting_window_arrivals():
    stop = certain_failure([Objective("ttft_s", "p99", 1.0)], warmup_s=10.0)
    # 200 window arrivals: the p99 is certainly over once more than 0.01 * 200 + 1 = 3 took over 1 s
    arrival = [5.0, 11.0, 12.0, 13.0, 14.0]
    first = [20.0, 13.0, 14.5, np.nan, np.nan]  # the warm-up's slow one does not count
    records = _Records(arrival_s=arrival, first_token_s=first, finish_s=[np.nan] * 5)
    assert stop(records, 15.0, 200) is None  # late: 11 -> 13, 12 -> 14.5, 13 still waiting; 14 waited 1 s: three
    assert "4 of the window's 200 arrivals already took over 1 s to their first token" in stop(records, 15.5, 200)
    assert stop(records, 15.5, 400) is None  # a larger window tolerates more
    assert certain_failure([Objective("tpot_s", "p99", 0.1), Objective("ttft_s", "mean", 1.0)], 0.0) is None


@pytest.mark.parametrize("rate", [3.0, 6.0, 9.0, 14.0, 30.0])
def test_stopping_early_never_changes_a_verdict(monkeypatch, rate):
    scenario = kvsim.parse_scenario(PLAN, "stop.yaml")
    objectives = objectives_from_slo(scenario.spec.slo)
    stopped = run_probe(scenario, Probe("l20", 1, rate), objectives)
    monkeypatch.setattr(planner, "certain_failure", lambda objectives, warmup_s: None)
    whole = run_probe(scenario, Probe("l20", 1, rate), objectives)
    assert stopped.meets == whole.meets
    if "stopped_at_s" in stopped.detail:
        assert not stopped.meets and stopped.reason.startswith("stopped at")
        assert stopped.detail["stopped_at_s"] <= whole.detail["duration_s"]
        assert "ttft" in whole.reason  # the whole run fails it on TTFT too (or on a flag beside it)


def test_an_overloaded_probe_stops_inside_its_window():
    scenario = kvsim.parse_scenario(PLAN, "stop.yaml")
    outcome = run_probe(scenario, Probe("l20", 1, 40.0), objectives_from_slo(scenario.spec.slo))
    assert not outcome.meets and outcome.detail["stopped_at_s"] < 60.0
    assert "so ttft p99 > 1 s" in outcome.reason and outcome.detail["reruns"] == 0
