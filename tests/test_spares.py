"""Spares for failures (issue 26 item 10): k-out-of-n availability by hand, the closed form against
a simulation of failures and repairs over many seeds, the scenario field, and a plan that buys
its spares and picks the cheapest with them."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kvsim
from kvsim.plan.answer import catalog_unit_cost, plan_answer
from kvsim.plan.planner import CandidatePlan, PlanResult
from kvsim.plan.search import LoadSearch
from kvsim.plan.spares import (
    UnitParts,
    prob_at_least,
    simulate_time_enough_up,
    spares_needed,
    unit_availability,
    unit_parts,
)
from kvsim.report.document import to_markdown
from kvsim.report.plan_report import plan_document
from kvsim.rng import RandomStreams
from kvsim.scenario.failures_spec import FailureSpec
from kvsim.sim.sizing import size_system
from kvsim.yaml_io import SpecError

HOUR = 3600.0


def test_unit_availability_by_hand():
    # the SuperPoD's quote: 300 h between failures per 1,000 cards -> one card every 300,000 h;
    # an 8-card node fails every 37,500 h, plus its host every 50,000 h: rate 1/37,500 + 1/50,000
    failures = FailureSpec(mtbf="300 h", mtbf_cards=1000, node_mtbf="50000 h", repair="8 h")
    assert failures.mtbf == 300 * HOUR and failures.repair == 8 * HOUR
    rate = failures.unit_failure_rate_per_s(cards=8, nodes=1)
    assert rate == pytest.approx(1 / (37_500 * HOUR) + 1 / (50_000 * HOUR), rel=1e-12)
    mean_up_h = 1 / (rate * HOUR)  # 21,428.6 h
    assert unit_availability(UnitParts(8, 1), failures) == pytest.approx(mean_up_h / (mean_up_h + 8), rel=1e-12)
    # two such nodes in one unit fail twice as often
    two = unit_availability(UnitParts(16, 2), failures)
    assert 1 - two == pytest.approx(8 / (mean_up_h / 2 + 8), rel=1e-12)


def test_k_out_of_n_by_hand():
    a = 0.9
    assert prob_at_least(1, 1, a) == pytest.approx(0.9)
    assert prob_at_least(2, 1, a) == pytest.approx(1 - 0.1 ** 2)
    assert prob_at_least(3, 2, a) == pytest.approx(0.9 ** 3 + 3 * 0.9 ** 2 * 0.1)
    assert prob_at_least(4, 2, a) == pytest.approx(sum(math.comb(4, i) * a ** i * (1 - a) ** (4 - i) for i in (2, 3, 4)))
    assert prob_at_least(2, 3, a) == 0.0 and prob_at_least(5, 0, a) == 1.0
    # the fewest spares: 2 needed at 0.9 -> 0 spares give 0.81, 1 gives 0.972, 2 give 0.9963, 3 give 0.99954
    assert [spares_needed(2, a, c) for c in (0.8, 0.95, 0.99, 0.999)] == [0, 1, 2, 3]
    # more units needed need at least as many spares; a lower availability more
    assert spares_needed(20, 0.99, 0.999) >= spares_needed(2, 0.99, 0.999)
    assert spares_needed(8, 0.9, 0.999) > spares_needed(8, 0.99, 0.999)
    # a unit down most of the time: no count reaches the confidence
    assert spares_needed(4, 0.01, 0.999999) is None


@pytest.mark.parametrize("repair", ["fixed", "exponential"])
def test_the_closed_form_matches_simulated_failures_over_many_seeds(repair):
    # 6 units, 4 needed, a unit down 20 % of the time: P[B(6, 0.8) >= 4] = 0.90112. Availability
    # depends on the mean repair only (alternating renewal), so fixed and exponential repairs agree
    # with the same closed form. 40 seeds of 4,000 mean cycles each; the spread of the per-seed
    # shares gives the standard error, and the mean is within 4 of them of the closed form.
    rate, repair_s = 1 / (40 * HOUR), 10 * HOUR
    a = (40 / (40 + 10))
    closed = prob_at_least(6, 4, a)
    assert closed == pytest.approx(0.90112, abs=1e-5)
    shares = [simulate_time_enough_up(6, 4, rate, repair_s, 4000 * 50 * HOUR,
                                      RandomStreams(seed).generator("failures"), repair) for seed in range(40)]
    mean, error = float(np.mean(shares)), float(np.std(shares, ddof=1) / np.sqrt(len(shares)))
    assert 0 < error < 0.002
    assert abs(mean - closed) < 4 * error + 1e-4
    # and a wrong model is far outside it: the units as one block (all up or the whole lot down)
    assert abs(mean - a) > 20 * error


PLAN = """
name: spares
seed: 3
duration: 60 s
warmup: 10 s
model: qwen3-1.7b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 512}}
  output_tokens: {{kind: fixed, value: 16}}
slo: {{ttft_p99: 1 s}}
systems:
  one-node: {{node: h20-8x, instances: 1}}
  four-nodes: {{node: l20-8x, nodes: 4, instances: 4}}
plan:
  targets: [10/s]
  failures: {failures}
"""


def _scenario(failures: str):
    return kvsim.parse_scenario(PLAN.format(failures=failures), "spares.yaml")


def test_plan_failures_field_is_read_and_checked():
    scenario = _scenario("{mtbf: 300 h, mtbf_cards: 1000, repair: 4 h, confidence: 0.9999}")
    failures = scenario.spec.plan.failures
    assert (failures.mtbf, failures.mtbf_cards, failures.repair, failures.confidence) == (
        300 * HOUR, 1000, 4 * HOUR, 0.9999)
    for bad, field in (("{mtbf: 300 h, repair: 4 h, confidence: 1.5}", "confidence"),
                       ("{mtbf: 300 h}", "repair"), ("{mtbf: -3 h, repair: 4 h}", "mtbf"),
                       ("{mtbf: 300 h, repair: 4 h, mtbf_card: 1000}", "mtbf_card")):
        with pytest.raises(SpecError) as caught:
            _scenario(bad)
        assert "spares.yaml" in str(caught.value) and f"plan.failures.{field}" in str(caught.value)


def _answer(failures: str, units: dict[str, int | None]):
    scenario = _scenario(failures)
    candidates = [CandidatePlan(name, LoadSearch(5.0, 6.0, (), True, ""), units_for={10.0: n}, notes={10.0: ""})
                  for name, n in units.items()]
    return scenario, plan_answer(PlanResult(scenario, [], candidates, []), catalog_unit_cost(scenario))


@pytest.mark.filterwarnings("ignore:No artists with labels")  # a made-up result with no probes to draw
def test_a_plan_with_failures_buys_spares_and_picks_the_cheapest_with_them():
    # cards fail often here (a card every 2,000 h, a day to repair): the 4-node unit (32 cards)
    # is down far more often than the one-node unit (8 cards) and needs more spares
    failures = "{mtbf: 2000 h, repair: 24 h, confidence: 0.999}"
    scenario, answer = _answer(failures, {"one-node": 3, "four-nodes": 2})
    spec = scenario.spec.plan.failures
    by_name = {c["system"]: c for c in answer["candidates"]}
    for name, needed in (("one-node", 3), ("four-nodes", 2)):
        parts = unit_parts(size_system(scenario.spec, name, scenario.catalogs))
        a = unit_availability(parts, spec)
        candidate = by_name[name]
        assert candidate["failures"]["unit_availability"] == a
        assert candidate["failures"]["cards_per_unit"] == parts.cards
        (row,) = candidate["targets"]
        k = spares_needed(needed, a, 0.999)
        assert row["spares"]["units"] == k and row["spares"]["units_with_spares"] == needed + k
        assert row["spares"]["prob_enough_up"] >= 0.999 > prob_at_least(needed + k - 1, needed, a)
        assert row["spares"]["cost_per_hour_usd"] == pytest.approx(candidate["unit_cost"]["cost_per_hour_usd"]
                                                                   * (needed + k))
    assert by_name["four-nodes"]["failures"]["cards_per_unit"] == 32
    assert by_name["four-nodes"]["targets"][0]["spares"]["units"] >= 1
    # the cheapest is the one whose units and spares together cost least
    rows = {name: c["targets"][0] for name, c in by_name.items()}
    expected = min(rows, key=lambda name: rows[name]["spares"]["cost_per_hour_usd"])
    assert answer["answers"][0]["cheapest"] == expected
    assert "spare(s)" in answer["answers"][0]["note"]
    md = to_markdown(plan_document(answer))
    assert "Spares for failures" in md and "k-out-of-n" in md


@pytest.mark.filterwarnings("ignore:No artists with labels")
def test_without_failures_the_answer_has_no_spares():
    scenario = kvsim.parse_scenario(PLAN.format(failures="null"), "spares.yaml")
    candidates = [CandidatePlan("one-node", LoadSearch(5.0, 6.0, (), True, ""), units_for={10.0: 2}, notes={10.0: ""})]
    answer = plan_answer(PlanResult(scenario, [], candidates, []), catalog_unit_cost(scenario))
    assert "failures" not in answer["candidates"][0] and "spares" not in answer["candidates"][0]["targets"][0]
    assert "Spares for failures" not in to_markdown(plan_document(answer))
