"""Seed checks (plan.seed_checks): each deciding unit count, and one fewer, run again under other
seeds, the same for every candidate; the answer says how many seeds agree and which candidates it
cannot tell apart (kvsim.plan.planner.seed_check, kvsim.plan.answer)."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.plan.answer import plan_answer
from kvsim.plan.planner import Probe, plan, seed_check
from kvsim.plan.search import ProbeOutcome
from kvsim.report.document import to_markdown
from kvsim.report.plan_report import plan_document, summary_paragraph

PLAN = """
name: seeds
seed: 5
duration: 60 s
warmup: 10 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 2000}
  output_tokens: {kind: fixed, value: 64}
slo: {ttft_p99: 1 s}
systems:
  h20: {node: h20-8x, instances: 1, instance: {max_num_seqs: 4}}
  l20: {node: l20-8x, instances: 1, instance: {max_num_seqs: 4}}
plan: {targets: [12/s], units: {max: 8}, rel_tol: 0.15, seed_checks: 2}
"""


def _outcome(meets):
    return ProbeOutcome(1.0, meets)


def test_a_seed_check_brackets_the_units_the_seeds_call_for():
    def outcomes(at_n, at_fewer):
        found = {Probe("a", 4, 1.0, s): _outcome(m) for s, m in zip((2, 3), at_n)}
        found.update({Probe("a", 3, 1.0, s): _outcome(m) for s, m in zip((2, 3), at_fewer)})
        return found

    agree = seed_check(4, 1, 1, [2, 3], outcomes([True, True], [False, False]), "a", 1.0)
    assert agree["agree"] and (agree["units_low"], agree["units_high"]) == (4, 4)
    assert agree["meets"] == [True, True, True] and agree["fewer_meets"] == [False, False, False]
    more = seed_check(4, 1, 1, [2, 3], outcomes([True, False], [False, False]), "a", 1.0)
    assert not more["agree"] and (more["units_low"], more["units_high"]) == (4, 5)
    fewer = seed_check(4, 1, 1, [2, 3], outcomes([True, True], [True, False]), "a", 1.0)
    assert (fewer["units_low"], fewer["units_high"]) == (3, 4)
    fewest = seed_check(1, 1, 1, [2, 3], {Probe("a", 1, 1.0, s): _outcome(True) for s in (2, 3)}, "a", 1.0)
    assert fewest["fewer_meets"] is None and fewest["agree"]


def test_the_plan_checks_the_cheapest_and_the_runner_up_under_the_same_extra_seeds():
    scenario = kvsim.parse_scenario(PLAN, "seeds.yaml")
    price = {"h20": 7.0, "l20": 3.5}
    result = plan(scenario, unit_cost=price.get)
    extra = [p for p, _ in result.probes if p.seed is not None]
    assert {p.seed for p in extra} == {6, 7}  # the plan's seed 5, then 6 and 7, for both candidates
    for candidate in result.candidates:
        n = candidate.units_for[12.0]
        check = candidate.seed_checks[12.0]
        assert check["seeds"] == [5, 6, 7]
        assert {(p.units, p.seed) for p in extra if p.system == candidate.system} == \
            {(u, s) for u in (n, n - 1) if u >= 1 for s in (6, 7)}
        outcomes = dict(result.probes)
        assert check["meets"][1:] == [outcomes[Probe(candidate.system, n, 12.0, s)].meets for s in (6, 7)]
    answer = plan_answer(result, lambda s: {"capex_usd": 1e5 * price[s], "cost_per_hour_usd": price[s],
                                            "assumptions": []})
    row = answer["answers"][0]
    cheapest = next(c for c in answer["candidates"] if c["system"] == row["cheapest"])["targets"][0]
    text = summary_paragraph(answer)
    if cheapest["seed_check"]["agree"]:
        assert f"3 of 3 seeds call for {cheapest['units']} unit" in text
    else:
        assert "uncertain by seed" in text
    page = to_markdown(plan_document(answer))
    assert "| seed |" in page and "**" in page  # the seeds of every probe; the cheapest in bold


def test_candidates_whose_costs_overlap_across_seeds_cannot_be_told_apart():
    from kvsim.plan.answer import _indistinct

    costs = {"a": {"cost_per_hour_usd": 3.0}, "b": {"cost_per_hour_usd": 4.0}}
    priced = {"a": {"seed_check": {"units_low": 4, "units_high": 5}},
              "b": {"seed_check": {"units_low": 3, "units_high": 3}}}
    assert _indistinct("a", priced, costs) == ["b"]  # a: 12-15 USD/h, b: 12 USD/h
    priced["b"]["seed_check"] = {"units_low": 4, "units_high": 4}
    assert _indistinct("a", priced, costs) == []  # b: 16 USD/h, above a's 15 at worst
    assert _indistinct(None, priced, costs) == []


def test_seed_checks_off_run_no_extra_probe():
    scenario = kvsim.parse_scenario(PLAN.replace("seed_checks: 2", "seed_checks: 0"), "seeds.yaml")
    result = plan(scenario)
    assert all(p.seed is None for p, _ in result.probes)
    assert all(not c.seed_checks for c in result.candidates)
    with pytest.raises(kvsim.SpecError if hasattr(kvsim, "SpecError") else Exception):
        kvsim.parse_scenario(PLAN.replace("seed_checks: 2", "seed_checks: -1"), "seeds.yaml")
