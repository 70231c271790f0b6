"""Plans resolve their own flags: a probe whose verdict rests on a ``too_short`` or ``warmup_short``
flag is run again longer until the flag clears or the budget is spent; a verdict still resting on a
flag is reported as unconfirmed, never as a failure (kvsim.plan.planner.run_probe)."""

from __future__ import annotations

import math

import pytest

import kvsim
import kvsim.plan.planner as planner
from kvsim.plan.answer import plan_answer
from kvsim.plan.planner import Probe, plan, rerun_scenario, run_probe
from kvsim.plan.slo import Objective, objectives_from_slo
from kvsim.report.document import to_markdown
from kvsim.report.plan_report import plan_document, summary_paragraph
from test_queueing import _service_time_s  # one instance, one request at a time: a deterministic server

# A closed loop of N clients with no think time on that server (512-token prompts, one-token
# answers, max_num_seqs 1): the server is never idle once N >= 2, every client waits for the N - 1
# requests ahead of it and its own, so in steady state every TTFT is N * D (D the service time).
# With TTFT p99 <= 8.5 D the capacity is exactly 8 clients. The window (0.7 s, about 38 D) holds
# 38 / N completions per client: from 4 clients on, fewer than the 10 a closed-loop point needs.
CLOSED = """
name: closed-form-clients
seed: 2
duration: 1.2 s
warmup: 0.5 s
model: qwen3-1.7b
engine: {{host_overlap: false}}  # (the host's work added to every step, as test_queueing's server)
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: 0 s}}
  input_tokens: {{kind: fixed, value: 512}}
  output_tokens: {{kind: fixed, value: 1}}
slo: {{ttft_p99: {limit_ms} ms}}
systems:
  one: {{node: h20-8x, instances: 1, instance: {{max_num_seqs: 1}}}}
plan: {{target_clients: [8], units: {{max: 2}}, rel_tol: 0.01}}
"""


def _closed_form_scenario():
    d = _service_time_s()
    return kvsim.parse_scenario(CLOSED.format(limit_ms=8.5 * d * 1e3), "closed.yaml"), d


def test_a_plan_whose_deciding_probe_is_flagged_finds_the_closed_form_capacity():
    scenario, d = _closed_form_scenario()
    # the deciding probe, run once over the scenario's own window, is flagged too short
    first = kvsim.run(planner.probe_scenario(scenario, Probe("one", 1, 8))).runs[0].summary
    assert "too_short" in first["flags"]
    assert first["ttft_s"]["p99"] == pytest.approx(8 * d, rel=1e-6)
    result = plan(scenario)
    capacity = result.candidate("one").capacity
    assert (capacity.max_load, capacity.fail_load) == (8, 9)  # the closed form: floor(8.5 D / D)
    assert result.candidate("one").units_for[8] == 1
    outcomes = dict(result.probes)
    deciding = outcomes[Probe("one", 1, 8)]
    assert deciding.meets and deciding.detail["flags"] == [] and deciding.detail["reruns"] >= 1
    assert deciding.detail["duration_s"] > scenario.spec.duration
    assert "unconfirmed" not in deciding.detail
    # nine clients fail on latency (9 D > 8.5 D): a longer window would not change that, so it is not re-run
    assert not outcomes[Probe("one", 1, 9)].meets and outcomes[Probe("one", 1, 9)].detail["reruns"] == 0
    answer = plan_answer(result)
    assert answer["candidates"][0]["capacity"]["unconfirmed"] is None
    assert "unconfirmed" not in summary_paragraph(answer)


def test_a_flag_the_budget_cannot_clear_leaves_the_verdict_unconfirmed_not_failed(monkeypatch):
    scenario, _ = _closed_form_scenario()
    monkeypatch.setattr(planner, "RESOLVE_TRIES", 0)  # no re-run allowed: every flag stays
    result = plan(scenario)
    capacity = result.candidate("one").capacity
    # the same capacity: the flagged probes that met the SLO are not taken as failures...
    assert (capacity.max_load, capacity.fail_load) == (8, 9)
    deciding = dict(result.probes)[Probe("one", 1, 8)]
    assert deciding.meets and "too_short" in deciding.detail["flags"]
    assert deciding.detail["unconfirmed"].startswith("still flagged too_short after 0 longer runs")
    # ...and every number resting on them says so
    answer = plan_answer(result, lambda system: {"capex_usd": 150_000.0, "cost_per_hour_usd": 5.0, "assumptions": []})
    assert answer["candidates"][0]["capacity"]["unconfirmed"] == deciding.detail["unconfirmed"]
    assert answer["candidates"][0]["targets"][0]["unconfirmed"] is not None
    assert answer["answers"][0]["unconfirmed"] is not None
    assert "(1 unit, $150,000 capex, $5.00/h)" in summary_paragraph(answer)
    assert "; unconfirmed: the 1 unit met the SLO but were still flagged too_short after 0 longer runs" \
        in summary_paragraph(answer)
    page = to_markdown(plan_document(answer))
    assert "= 8 clients, unconfirmed (still flagged" in page and "meets, unconfirmed (still flagged too_short" in page


BATCHED = """
name: batched
seed: 3
duration: 1 s
warmup: 0 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 10/s}
  input_tokens: {kind: fixed, value: 512}
  output_tokens: {kind: fixed, value: 256}
slo: {ttft_p99: 10 s}
systems:
  one: {node: h20-8x, instances: 1, instance: {max_num_seqs: 64}}
"""


def test_an_open_loop_probe_whose_requests_outlast_a_tenth_of_the_window_is_run_longer():
    # A window sized for 30 completions at 10 requests/s is 3 s; each request decodes 256 tokens
    # in a batch of a dozen or more (Little: rate x lifetime), so the median request lasts far
    # over a tenth of it: the case, where the planner used to call such a probe a failure
    scenario = kvsim.parse_scenario(BATCHED, "batched.yaml")
    objectives = objectives_from_slo(scenario.spec.slo)
    probed = planner.probe_scenario(scenario, Probe("one", 1, 10.0))
    summary = kvsim.run(probed).runs[0].summary
    assert "too_short" in summary["flags"] and summary["steady_state"]["e2e_p50_window_share"] > 0.1
    longer = rerun_scenario(probed, summary, objectives)
    assert longer is not None and longer.spec.duration >= 2 * probed.spec.duration
    outcome = run_probe(scenario, Probe("one", 1, 10.0), objectives)
    assert outcome.meets and outcome.detail["flags"] == [] and outcome.detail["reruns"] >= 1
    assert outcome.detail["duration_s"] >= longer.spec.duration
    # a probe that failed on latency in a short window is not re-run: a longer one cannot lower it
    strict = [Objective("e2e_s", "p99", summary["e2e_s"]["p50"])]
    assert rerun_scenario(probed, summary, strict) is None
    failed = run_probe(scenario, Probe("one", 1, 10.0), strict)
    assert not failed.meets and failed.detail["reruns"] == 0


def test_a_warmup_short_probe_is_run_again_after_a_longer_warmup():
    scenario, d = _closed_form_scenario()
    objectives = objectives_from_slo(scenario.spec.slo)
    probed = planner.probe_scenario(scenario, Probe("one", 1, 2))
    summary = {"flags": ["warmup_short"], "ttft_s": {"p99": 2 * d},
               "steady_state": {"mser5_warmup_s": 0.9, "warmup_bias_share": -0.2}}
    again = rerun_scenario(probed, summary, objectives, by_clients=True)
    # 1.5 x the warm-up MSER-5 found, rounded up to a second; the window keeps its length
    assert again.spec.warmup == math.ceil(1.5 * 0.9)
    assert again.spec.duration - again.spec.warmup == pytest.approx(math.ceil(again.spec.warmup + 0.7) - again.spec.warmup)
    # a failure from a window that starts too empty stands; one from a crowded start-up is run again
    failing = {**summary, "ttft_s": {"p99": 20 * d}}
    assert rerun_scenario(probed, failing, objectives, by_clients=True) is None
    crowded = {**failing, "steady_state": {"mser5_warmup_s": 0.9, "warmup_bias_share": 0.2}}
    assert rerun_scenario(probed, crowded, objectives, by_clients=True) is not None
    # unstable or rejected runs are failures whatever else they carry
    for flag in ("unstable", "rejected"):
        assert rerun_scenario(probed, {**summary, "flags": ["warmup_short", flag]}, objectives, True) is None
