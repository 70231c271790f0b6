"""Like-for-like baselines (kvsim.plan.answer.like_for_like): a saving is quoted against the
baseline as named and against the candidate on the baseline's compute nodes with the same KV options."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvsim
from kvsim.plan.answer import like_for_like, plan_answer
from kvsim.plan.planner import CandidatePlan, PlanResult
from kvsim.plan.search import LoadSearch
from kvsim.plan.slo import objectives_from_slo
from kvsim.report.document import to_markdown
from kvsim.report.plan_report import plan_document, summary_paragraph

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "plan_offload.yaml"


def test_each_candidate_is_paired_with_the_baseline_node_and_its_own_kv_options():
    scenario = kvsim.load_scenario(SCENARIO)
    names = list(scenario.spec.systems)
    twins = like_for_like(scenario.raw["systems"], names, "h20")
    # the L20 with a pool against the H20 with the same pool, not against the bare H20
    assert twins == {"h20": "h20", "l20": "h20", "l20-dram": None, "l20-pool": "h20-pool", "h20-pool": "h20-pool"}


def test_savings_are_quoted_as_named_and_like_for_like():
    scenario = kvsim.load_scenario(SCENARIO)
    # a plan's result written by hand: units per target, so the savings follow by arithmetic
    units = {"h20": 4, "l20": 6, "l20-dram": 5, "l20-pool": 3, "h20-pool": 2}
    price = {"h20": 10.0, "l20": 4.0, "l20-dram": 4.5, "l20-pool": 6.0, "h20-pool": 12.0}
    candidates = [CandidatePlan(name, LoadSearch(1.0, 1.1, (), True, "test"), {4.0: n, 8.0: n, 16.0: n},
                                {4.0: "", 8.0: "", 16.0: ""}) for name, n in units.items()]
    result = PlanResult(scenario, objectives_from_slo(scenario.spec.slo), candidates, [])
    answer = plan_answer(result, lambda s: {"capex_usd": 1000 * price[s], "cost_per_hour_usd": price[s],
                                            "assumptions": []})
    row = answer["answers"][0]
    assert row["cheapest"] == "l20-pool"  # 3 x 6 = 18 USD/h
    named = row["savings_vs_baseline"]["l20-pool"]["capex_usd"]
    like = row["savings_like_for_like"]["l20-pool"]
    assert named == pytest.approx(18 / 40 - 1) and like["against"] == "h20-pool"
    assert like["capex_usd"] == pytest.approx(18 / 24 - 1)
    assert row["savings_like_for_like"]["l20-dram"] == {"against": None, "capex_usd": None, "cost_per_hour_usd": None}
    text = summary_paragraph(answer)
    assert "-55% capex against h20 (-25% like for like, against h20-pool with the same KV options)" in text
    page = to_markdown(plan_document(answer))
    assert "| l20-pool | h20-pool (like for like) |" in page and "| l20-dram | like for like: no candidate |" in page
