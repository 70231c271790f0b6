"""kvsim.plan.planner: the fewest units per target load, checked by probing around the answer."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.plan.planner import Probe, plan, run_probe, scaled_scenario
from kvsim.yaml_io import SpecError

PLAN = """
name: tiny-plan
seed: 4
duration: 120 s
warmup: 20 s
model: qwen3-1.7b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 2000}}
  output_tokens: {{kind: fixed, value: 64}}
slo: {{ttft_p99: 1 s}}
systems:
  h20: {{node: h20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
  l20: {{node: l20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
plan: {{targets: {targets}, units: {{max: {max_units}}}, rel_tol: 0.1}}
"""


def _scenario(targets="[4/s, 12/s]", max_units=8):
    return kvsim.parse_scenario(PLAN.format(targets=targets, max_units=max_units), "plan.yaml")


def test_scaling_multiplies_node_and_instance_counts_and_keeps_one_system():
    scenario = scaled_scenario(_scenario(), "l20", 3, 7.5)
    assert list(scenario.spec.systems) == ["l20"]
    system = scenario.spec.systems["l20"]
    assert (system.nodes, system.instances) == (3, 3)
    assert scenario.spec.workload.arrival.rate == 7.5
    assert scenario.spec.plan is None
    # disaggregated candidates: separate prefill and decode pools, or one pool split by roles
    text = PLAN.format(targets="[4/s]", max_units=8).replace(
        "  l20: {node: l20-8x, instances: 1, instance: {max_num_seqs: 4}}\n",
        "  pd: {pools: {p: {node: h20-8x, nodes: 1, instances: 2, role: prefill},\n"
        "               d: {node: h20-8x, nodes: 1, instances: 6, role: decode}}}\n"
        "  split: {pools: {dt: {node: h20-8x, nodes: 1, roles: {prefill: 2, decode: 6}}}}\n")
    scenario = kvsim.parse_scenario(text, "plan.yaml")
    pools = scaled_scenario(scenario, "pd", 3, 5.0).spec.systems["pd"].pools
    assert (pools["p"].nodes, pools["p"].instances, pools["d"].nodes, pools["d"].instances) == (3, 6, 3, 18)
    split = scaled_scenario(scenario, "split", 3, 5.0)
    assert split.spec.systems["split"].pools["dt"].roles == {"prefill": 6, "decode": 18}
    from kvsim.sim.sizing import size_system

    assert size_system(split.spec, "split", split.catalogs).instances == 24  # every card of 3 nodes in use


@pytest.fixture(scope="module")
def planned():
    return plan(_scenario())


def test_the_fewest_units_meet_the_slo_and_one_fewer_does_not(planned):
    scenario, objectives = planned.scenario, planned.objectives
    outcomes = dict(planned.probes)
    for candidate in planned.candidates:
        assert candidate.capacity.max_load is not None
        for target, units in candidate.units_for.items():
            assert units is not None, candidate.notes[target]
            assert outcomes[Probe(candidate.system, units, target)].meets
            if units > 1:
                assert not outcomes[Probe(candidate.system, units - 1, target)].meets
            # a probe run again, outside the plan, gives the same verdict (same seed)
            assert run_probe(scenario, Probe(candidate.system, units, target), objectives).meets
    h20, l20 = planned.candidate("h20"), planned.candidate("l20")
    # the faster card sustains more load per unit and never needs more units
    assert h20.capacity.max_load > l20.capacity.max_load
    assert all(h20.units_for[t] <= l20.units_for[t] for t in h20.units_for)
    # three times the load needs more units
    assert l20.units_for[12.0] > l20.units_for[4.0]


def test_a_target_no_allowed_count_can_serve_is_answered_not_raised():
    result = plan(_scenario(targets="[200/s]", max_units=2))
    for candidate in result.candidates:
        assert candidate.units_for[200.0] is None
        assert "none up to the 2 units allowed" in candidate.notes[200.0]


@pytest.mark.parametrize("plan_section, message", [
    ("plan: {targets: [4/s], candidates: [h100]}", "'h100' is not one of the systems"),
    ("plan: {targets: [4/s], candidates: []}", "is empty"),
    ("plan: {targets: []}", "targets"),
    ("plan: {targets: [4/s], baseline: a100}", "'a100' is not one of the candidates"),
    ("plan: {targets: [4/s], units: {min: 5, max: 2}}", "min (5) exceeds max (2)"),
])
def test_bad_plan_sections_are_refused_with_the_field(plan_section, message):
    text = PLAN.format(targets="[4/s]", max_units=8).split("plan:")[0] + plan_section + "\n"
    with pytest.raises(SpecError) as info:
        kvsim.parse_scenario(text, "plan.yaml")
    assert message in str(info.value) and "plan.yaml:" in str(info.value)


def test_a_plan_needs_an_slo_and_a_rate_to_vary():
    text = PLAN.format(targets="[4/s]", max_units=8).replace("slo: {ttft_p99: 1 s}\n", "")
    with pytest.raises(SpecError, match="give slo"):
        kvsim.parse_scenario(text, "plan.yaml")
    text = PLAN.format(targets="[4/s]", max_units=8).replace("{kind: poisson, rate: 1/s}",
                                                              "{kind: closed_loop, clients: 4}")
    with pytest.raises(SpecError, match="give target_clients"):
        kvsim.parse_scenario(text, "plan.yaml")


def _unit_cost(system):
    # a stand-in cost model for the report: the h20 unit dearer than the l20 one
    return {"capex_usd": {"h20": 200_000.0, "l20": 90_000.0}[system],
            "cost_per_hour_usd": {"h20": 7.0, "l20": 3.5}[system],
            "assumptions": [f"{system}: test prices"]}


def test_the_answer_names_the_cheapest_and_the_savings(planned):
    from kvsim.plan.answer import plan_answer

    answer = plan_answer(planned, _unit_cost)
    for row in answer["answers"]:
        costs = {c["system"]: next(t for t in c["targets"] if t["load"] == row["load"])
                 for c in answer["candidates"]}
        assert row["cheapest"] == min(costs, key=lambda s: costs[s]["cost_per_hour_usd"])
        l20, h20 = costs["l20"], costs["h20"]
        assert l20["capex_usd"] == 90_000.0 * l20["units"]
        assert row["savings_vs_baseline"]["l20"]["capex_usd"] == pytest.approx(l20["capex_usd"] / h20["capex_usd"] - 1)
    assert answer["baseline"] == "h20" and "h20" not in answer["answers"][0]["savings_vs_baseline"]


def test_the_report_is_self_contained_and_names_every_assumption(planned, tmp_path):
    import json
    import re

    from kvsim.plan.answer import plan_answer
    from kvsim.report.plan_report import write_plan_report

    answer = plan_answer(planned, _unit_cost)
    paths = {p.name for p in write_plan_report(answer, tmp_path)}
    assert {"plan.json", "plan.md", "plan.html", "plan_capacity.png", "plan_probes.png"} <= paths
    page = (tmp_path / "plan.html").read_text()
    # no external resource of any kind: data, or an id of the page's own inline figures
    assert not re.search(r"(src|href)=\"(?!data:|#)", page)
    assert "http://" not in page and "https://" not in page
    for c in answer["candidates"]:
        for assumption in c["unit_cost"]["assumptions"]:
            assert assumption in page and assumption in (tmp_path / "plan.md").read_text()
    assert json.loads((tmp_path / "plan.json").read_text()) == answer
    assert not list(tmp_path.glob(".*.tmp"))


def test_without_prices_no_candidate_is_called_cheapest(planned):
    from kvsim.plan.answer import plan_answer
    from kvsim.report.plan_report import plan_document

    answer = plan_answer(planned)
    assert all(row["cheapest"] is None and "no candidate that serves it has a price" in row["note"]
               for row in answer["answers"])
    assert "cost is unknown" in str(plan_document(answer).blocks)


def test_replicated_probes_are_judged_on_the_mean_and_any_flag():
    from kvsim.plan.planner import replicas_summary

    a = {"ttft_s": {"mean": 0.5, "p50": 0.4, "p90": 0.8, "p99": 1.2}, "tpot_s": {"p99": 0.05},
         "e2e_s": {}, "requests_per_s": 3.0, "output_tokens_per_s": 100.0, "requests_unfinished": 1, "flags": []}
    b = {**a, "ttft_s": {"mean": 0.7, "p50": 0.6, "p90": 1.0, "p99": 2.4}, "flags": ["too_short"],
         "requests_per_s": 5.0}
    combined = replicas_summary([a, b])
    assert combined["ttft_s"]["p99"] == pytest.approx(1.8) and combined["ttft_s"]["mean"] == pytest.approx(0.6)
    assert combined["tpot_s"]["p99"] == pytest.approx(0.05) and combined["tpot_s"]["mean"] is None
    assert combined["requests_per_s"] == 4.0 and combined["flags"] == ["too_short"]
    assert replicas_summary([a]) is a
    # end to end: two replicas at a comfortable load meet, and the probe says how many ran
    scenario = _scenario().with_changes({"replications": 2})
    outcome = run_probe(scenario, Probe("h20", 1, 2.0), planned_objectives(scenario))
    assert outcome.meets and outcome.detail["replicas"] == 2


def planned_objectives(scenario):
    from kvsim.plan.slo import objectives_from_slo

    return objectives_from_slo(scenario.spec.slo)


# ------------------------------------------------------------------ a plan by closed-loop clients

CLIENTS = """
name: tiny-clients
seed: 4
duration: 40 s
warmup: 5 s
model: qwen3-1.7b
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: {think}}}
  input_tokens: {{kind: fixed, value: 2000}}
  output_tokens: {{kind: fixed, value: 64}}
slo: {{ttft_p99: 1 s}}
systems:
  h20: {{node: h20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
  l20: {{node: l20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
plan: {{target_clients: [6, 20], units: {{max: 8}}, rel_tol: 0.1}}
"""


def _clients(think="2 s"):
    return kvsim.parse_scenario(CLIENTS.format(think=think), "clients.yaml")


def test_a_closed_loop_is_planned_by_whole_numbers_of_clients():
    scenario = _clients()
    assert scaled_scenario(scenario, "l20", 2, 17).spec.workload.arrival.clients == 17
    result = plan(scenario)
    outcomes = dict(result.probes)
    assert all(isinstance(p.load, int) for p, _ in result.probes)
    for candidate in result.candidates:
        search = candidate.capacity
        assert search.converged and search.max_load < search.fail_load
        assert outcomes[Probe(candidate.system, 1, search.max_load)].meets
        assert not outcomes[Probe(candidate.system, 1, search.fail_load)].meets
        for target, units in candidate.units_for.items():
            assert units is not None, candidate.notes[target]
            assert outcomes[Probe(candidate.system, units, target)].meets
            if units > 1:
                assert not outcomes[Probe(candidate.system, units - 1, target)].meets
    h20, l20 = result.candidate("h20"), result.candidate("l20")
    assert h20.capacity.max_load > l20.capacity.max_load
    assert l20.units_for[20] > l20.units_for[6]
    from kvsim.plan.answer import plan_answer
    from kvsim.report.document import to_markdown
    from kvsim.report.plan_report import plan_document, summary_paragraph

    answer = plan_answer(result, _unit_cost)
    assert answer["load"]["unit"] == "clients" and answer["targets"] == [6, 20]
    assert "At 20 clients the cheapest is" in summary_paragraph(answer)
    assert f"| l20 | {l20.capacity.max_load} clients | {l20.capacity.fail_load} clients |" in \
        to_markdown(plan_document(answer))


def test_a_closed_loop_probe_too_short_to_judge_is_run_longer():
    # 10 s of thinking: a 35 s window holds ~3 requests per client, under the 10 to judge by
    scenario = _clients("10 s")
    outcome = run_probe(scenario, Probe("h20", 1, 4), planned_objectives(scenario))
    assert outcome.meets and outcome.detail["flags"] == []
    assert outcome.detail["duration_s"] > 40.0
    # one that fails on latency is not lengthened: a longer window cannot make it meet the SLO
    crowded = run_probe(scenario, Probe("l20", 1, 200), planned_objectives(scenario))
    assert not crowded.meets and crowded.detail["duration_s"] == 40.0


def test_a_plan_by_clients_needs_a_closed_loop_and_one_kind_of_target():
    text = CLIENTS.format(think="2 s")
    with pytest.raises(SpecError, match="closed_loop"):
        kvsim.parse_scenario(text.replace("{kind: closed_loop, clients: 1, think_time: 2 s}",
                                          "{kind: poisson, rate: 1/s}"), "c.yaml")
    with pytest.raises(SpecError, match="not both"):
        kvsim.parse_scenario(text.replace("target_clients: [6, 20]", "target_clients: [6], targets: [1/s]"), "c.yaml")
    with pytest.raises(SpecError, match="give the loads to serve"):
        kvsim.parse_scenario(text.replace("target_clients: [6, 20], ", ""), "c.yaml")
