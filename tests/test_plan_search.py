"""The capacity search (kvsim.plan.search) and SLO verdicts (kvsim.plan.slo): against a threshold
known exactly, and end to end against the M/D/1 queue's closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kvsim
from kvsim.plan.search import ProbeOutcome, find_max_load
from kvsim.plan.slo import Objective, objectives_from_slo, slo_verdict
from test_queueing import MD1, _service_time_s  # the M/D/1 server test_queueing checks


def _threshold_probe(threshold, calls=None):
    def probe(rates):
        if calls is not None:
            calls.append(list(rates))
        return [ProbeOutcome(r, r <= threshold, "" if r <= threshold else "too slow") for r in rates]
    return probe


@pytest.mark.parametrize("start", [0.5, 7.0, 7.3, 40.0])
@pytest.mark.parametrize("parallel", [1, 3])
def test_search_brackets_a_known_threshold_within_tolerance(start, parallel):
    result = find_max_load(_threshold_probe(7.3), start, rel_tol=0.01, parallel=parallel)
    assert result.converged
    assert result.max_load <= 7.3 < result.fail_load
    assert result.fail_load - result.max_load <= 0.01 * result.max_load
    assert all(p.meets == (p.load <= 7.3) for p in result.probes)


def test_more_rates_per_round_need_fewer_rounds():
    rounds = {}
    for parallel in (1, 4):
        calls = []
        find_max_load(_threshold_probe(7.3), 1.0, rel_tol=0.001, parallel=parallel, max_rounds=100)
        find_max_load(_threshold_probe(7.3, calls), 1.0, rel_tol=0.001, parallel=parallel, max_rounds=100)
        rounds[parallel] = len(calls)
        assert all(len(c) <= parallel for c in calls)
    # bisection halves the bracket per round, 4 rates per round divide it by 5
    assert rounds[4] < rounds[1] * 0.75, rounds


def test_search_reports_when_nothing_or_everything_meets_the_slo():
    none = find_max_load(_threshold_probe(0.001), 1.0, floor=0.1)
    assert none.max_load is None and none.fail_load == pytest.approx(0.1)
    assert not none.converged and "floor" in none.note and "too slow" in none.note
    every = find_max_load(_threshold_probe(1e9), 1.0, ceiling=50.0)
    assert every.max_load == 50.0 and every.fail_load is None
    assert not every.converged and "ceiling" in every.note


def test_a_non_monotone_probe_never_widens_the_bracket():
    # noise: a probe that fails one rate inside an otherwise-met region
    def probe(rates):
        return [ProbeOutcome(r, r <= 10.0 and not 6.0 <= r <= 6.2) for r in rates]
    result = find_max_load(probe, 1.0, rel_tol=0.01, max_rounds=60)
    # the bracket only ever narrows: every later probe lies inside the one before
    lo, hi = 0.0, math.inf
    for outcome in result.probes[1:]:
        assert lo <= outcome.load <= hi or not math.isfinite(hi)
        if outcome.meets and outcome.load < hi:
            lo = max(lo, outcome.load)
        elif not outcome.meets:
            hi = min(hi, outcome.load)
    assert result.max_load < result.fail_load <= 10.0 * 1.01


def test_bad_arguments_are_refused():
    probe = _threshold_probe(1.0)
    for kwargs in ({"rel_tol": 0}, {"growth": 1.0}, {"parallel": 0}, {"floor": 2.0}):
        with pytest.raises(ValueError):
            find_max_load(probe, 1.0, **kwargs)
    with pytest.raises(ValueError):
        find_max_load(probe, 0.0)
    with pytest.raises(ValueError, match="outcomes"):
        find_max_load(lambda rates: [], 1.0)


def test_slo_verdict_reads_statistics_and_refuses_flagged_runs():
    summary = {"ttft_s": {"mean": 0.4, "p50": 0.3, "p90": 0.9, "p99": 1.5}, "tpot_s": {"p99": 0.08},
               "e2e_s": {"p99": None}}
    assert slo_verdict(summary, [Objective("ttft_s", "p99", 2.0), Objective("tpot_s", "p99", 0.1)]) == (True, "")
    ok, why = slo_verdict(summary, [Objective("ttft_s", "p90", 0.5)])
    assert not ok and why == "ttft p90 900 ms > 500 ms"
    ok, why = slo_verdict(summary, [Objective("e2e_s", "p99", 5.0)])
    assert not ok and "no e2e measured" in why
    ok, why = slo_verdict({**summary, "flags": ["unstable"]}, [Objective("ttft_s", "p99", 2.0)])
    assert not ok and "unstable" in why
    ok, why = slo_verdict({**summary, "flags": ["rejected"]}, [Objective("ttft_s", "p99", 2.0)])
    assert not ok and why == "run flagged rejected"  # it refused requests it could never hold
    assert slo_verdict({**summary, "flags": ["warmup_short"]}, [Objective("ttft_s", "p99", 2.0)]) == (True, "")
    with pytest.raises(ValueError):
        Objective("ttft", "p99", 1.0)
    with pytest.raises(ValueError):
        Objective("ttft_s", "p95", 1.0)
    spec = kvsim.parse_scenario(MD1.format(seed=0, duration=10, rate=1) + "slo: {ttft_p99: 2 s, e2e_p99: 9 s}\n",
                                "md1.yaml").spec
    assert objectives_from_slo(spec.slo) == [Objective("ttft_s", "p99", 2.0), Objective("e2e_s", "p99", 9.0)]


def _md1_run(rate, customers, seed=3):
    scenario = kvsim.parse_scenario(MD1.format(seed=seed, duration=customers / rate, rate=rate), "md1.yaml")
    return kvsim.run(scenario).runs[0]


def test_search_finds_the_md1_rate_that_meets_a_mean_wait_target():
    # max_num_seqs=1 and one-token outputs make the instance one deterministic server fed by
    # Poisson arrivals (tests/test_queueing.py checks that it is M/D/1). Mean TTFT = W_q + c,
    # with c the TTFT of a request that finds the server idle. For a mean-wait target W*,
    # W_q = rho D / (2 (1 - rho)) <= W*  <=>  rate <= 2 W* / (D (D + 2 W*)).
    idle = _md1_run(0.01, 3)  # three requests, minutes apart: none waits
    frame = idle.records.to_frame()
    c = float(frame.ttft_s.min())
    assert len(frame) == 3 and np.allclose(frame.ttft_s, c)
    d = float(_service_time_s())
    wait_target = d  # rho* = 2/3
    expected = 2 * wait_target / (d * (d + 2 * wait_target))
    objective = Objective("ttft_s", "mean", c + wait_target)

    def probe(rates):
        # the same seed at every rate: the same exponential gaps, scaled (common random numbers)
        outcomes = []
        for rate in rates:
            ok, why = slo_verdict(_md1_run(rate, 8_000).summary, [objective])
            outcomes.append(ProbeOutcome(rate, ok, why))
        return outcomes

    result = find_max_load(probe, expected / 3, rel_tol=0.02, parallel=2)
    assert result.converged
    # 8,000 customers: the sample mean wait at rho = 2/3 has a relative standard error of about
    # 4 %, which moves the crossing rate by a third of that (d ln W / d ln rho = 1 / (1 - rho) = 3)
    assert result.max_load == pytest.approx(expected, rel=0.06)
    assert result.fail_load == pytest.approx(expected, rel=0.08)
    print(f"M/D/1: expected {expected:.3f}/s, found [{result.max_load:.3f}, {result.fail_load:.3f}]/s"
          f" in {len(result.probes)} probes")


@pytest.mark.parametrize("start", [1, 7, 8, 40])
@pytest.mark.parametrize("parallel", [1, 3])
def test_an_integer_search_probes_whole_numbers_and_stops_one_apart(start, parallel):
    calls = []
    result = find_max_load(_threshold_probe(23.5, calls), start, rel_tol=0.001, parallel=parallel, integer=True,
                           unit="clients")
    assert result.converged and (result.max_load, result.fail_load) == (23, 24)
    assert all(float(x).is_integer() for round_ in calls for x in round_)
    assert len({p.load for p in result.probes}) == len(result.probes)  # never the same load twice
    assert "one client" in result.note
    # a wide tolerance stops earlier, still on whole numbers
    loose = find_max_load(_threshold_probe(23.5), 1, rel_tol=0.25, integer=True)
    assert loose.max_load <= 23 < loose.fail_load <= 1.25 * loose.max_load
    with pytest.raises(ValueError, match="whole number"):
        find_max_load(_threshold_probe(23.5), 1.5, integer=True)
