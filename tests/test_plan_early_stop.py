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
    assert certain_failure([Objective("tpot_s", "mean", 0.1), Objective("ttft_s", "mean", 1.0)], 0.0) is None


def test_the_check_counts_finished_window_requests_over_the_tpot_limit():
    stop = certain_failure([Objective("tpot_s", "p99", 0.1)], warmup_s=10.0)
    # 100 window arrivals: certainly over once more than 0.01 * 100 + 1 = 2 finished over 100 ms a token
    arrival = [5.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    first = [6.0, 12.0, 13.0, 14.0, 15.0, 16.0]
    finish = [26.0, 14.2, 14.0, 18.0, 15.5, np.nan]
    outputs = [11, 11, 11, 1, 2, 11]
    # the warm-up's (2 s a token) does not count; 11 -> 0.22 s and 12 -> 0.1 s (not over); the
    # one-token request has no TPOT; 14 -> 0.5 s; 15 is still decoding (it may never finish: not counted)
    records = _Records(arrival_s=arrival, first_token_s=first, finish_s=finish, output_tokens=outputs)
    assert stop(records, 30.0, 100) is None  # two over: 11 and 14
    finish[2] = 14.5  # 12 -> 0.15 s a token: three over
    records = _Records(arrival_s=arrival, first_token_s=first, finish_s=finish, output_tokens=outputs)
    assert "3 of the window's 100 arrivals already finished at over 100 ms per output token" in stop(records, 30.0, 100)
    assert stop(records, 30.0, 200) is None


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
        metric = "tpot" if "per output token" in stopped.reason else "ttft"
        assert metric in whole.reason  # the whole run fails it on that latency too (or on a flag beside it)


def test_stopping_on_tpot_never_changes_a_verdict(monkeypatch):
    # a TTFT limit no run misses and a TPOT limit the batches miss as load grows
    scenario = kvsim.parse_scenario(PLAN.replace("slo: {ttft_p99: 1 s, tpot_p99: 100 ms}",
                                                 "slo: {ttft_p99: 100 s, tpot_p99: 12 ms}"), "stop.yaml")
    objectives = objectives_from_slo(scenario.spec.slo)
    rates = [1.0, 2.0, 8.0]
    stopped = [run_probe(scenario, Probe("l20", 1, rate), objectives) for rate in rates]
    monkeypatch.setattr(planner, "certain_failure", lambda objectives, warmup_s: None)
    whole = [run_probe(scenario, Probe("l20", 1, rate), objectives) for rate in rates]
    assert [o.meets for o in stopped] == [o.meets for o in whole] == [True, False, False]
    for early, full in zip(stopped[1:], whole[1:]):
        assert "per output token" in early.reason and "tpot p99" in full.reason
        assert early.detail["stopped_at_s"] < full.detail["duration_s"]


def test_an_overloaded_probe_stops_inside_its_window():
    scenario = kvsim.parse_scenario(PLAN, "stop.yaml")
    outcome = run_probe(scenario, Probe("l20", 1, 40.0), objectives_from_slo(scenario.spec.slo))
    assert not outcome.meets and outcome.detail["stopped_at_s"] < 60.0
    assert "so ttft p99 > 1 s" in outcome.reason and outcome.detail["reruns"] == 0
