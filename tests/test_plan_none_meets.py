"""``kvsim plan`` when no candidate meets the SLO: it says so, and names the nearest miss (which
candidate came closest, the SLO value it reached against the limit) in words and in plan.json --
never a "best" candidate that "sustains 0 requests/s per unit"."""

from __future__ import annotations

import json

import pytest

from kvsim.cli import main
from kvsim.plan.answer import PLAN_FORMAT
from kvsim.plan.planner import CandidatePlan, PlanResult, Probe
from kvsim.plan.search import LoadSearch, ProbeOutcome
from kvsim.plan.slo import Objective

PLAN = """
name: none-meets
seed: 4
duration: 60 s
warmup: 10 s
model: qwen3-1.7b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 2000}}
  output_tokens: {{kind: fixed, value: 64}}
slo: {{ttft_p99: {ttft}}}
systems:
  h20: {{node: h20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
  l20: {{node: l20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
plan: {{targets: {targets}, units: {{max: 2}}, rel_tol: 0.15}}
"""


def _plan(tmp_path, capsys, ttft, targets):
    scenario = tmp_path / "plan.yaml"
    scenario.write_text(PLAN.format(ttft=ttft, targets=targets))
    out = tmp_path / "out"
    assert main(["plan", str(scenario), "--out", str(out), "--workers", "1"]) == 0  # an answer, not an error
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err
    return json.loads((out / "plan.json").read_text()), printed.out, out


def _attempts(answer, target):
    """Each candidate's probe at ``target`` with the most units, as plan.json lists them."""
    best = {}
    for p in answer["probes"]:
        if p["load"] == target and (p["system"] not in best or p["units"] > best[p["system"]]["units"]):
            best[p["system"]] = p
    return best


def test_an_slo_no_candidate_can_meet_is_said_with_the_nearest_miss(tmp_path, capsys):
    # 1 ms TTFT p99 for 2,000-token prompts: no card prefills that fast at any load
    answer, printed, out = _plan(tmp_path, capsys, "1 ms", "[3/s]")
    assert answer["format"] == PLAN_FORMAT == 7
    assert answer["no_candidate_meets_slo"] is True
    assert all(c["capacity"]["max_load"] is None for c in answer["candidates"])
    row = answer["answers"][0]
    assert row["cheapest"] is None
    miss = row["nearest_miss"]
    # the nearest miss is the candidate whose attempt with the most units came closest to the limit
    attempts = _attempts(answer, 3.0)
    assert set(attempts) == {"h20", "l20"} and all(p["units"] == 2 for p in attempts.values())
    closest = min(attempts.values(), key=lambda p: p["ttft_p99_s"])
    assert (miss["system"], miss["units"], miss["load"]) == (closest["system"], 2, 3.0)
    (reached,) = miss["slo"]
    assert (reached["metric"], reached["statistic"], reached["limit_s"]) == ("ttft_s", "p99", 0.001)
    assert reached["value_s"] == pytest.approx(closest["ttft_p99_s"])
    assert reached["ratio"] == pytest.approx(closest["ttft_p99_s"] / 0.001) and miss["worst_ratio"] > 1
    assert miss["meets_per_unit"] is None and miss["lowest_load_probed"] > 0
    # in words: none meets it, and how close the nearest came; no "best" that "sustains 0"
    for text in (printed, (out / "plan.md").read_text(), (out / "plan.html").read_text()):
        assert "sustains 0" not in text and "the best," not in text
    assert "none meets it at any load probed" in printed
    value_ms = f"{closest['ttft_p99_s'] * 1e3:.3g} ms"
    assert f"nearest miss: {closest['system']} with 2 units reached TTFT p99 {value_ms} against 1 ms" in printed
    assert "cheapest by cost per hour" not in printed
    md = (out / "plan.md").read_text()
    assert "## Nearest miss" in md and f"| 3/s | {closest['system']} | 2 | TTFT p99 {value_ms} against 1 ms" in md
    # kvsim report reads the answer back (format 3) and renders the same page
    assert main(["report", str(out), "--out", str(tmp_path / "again")]) == 0
    assert (tmp_path / "again" / "plan.md").read_text() == md


def test_a_target_out_of_reach_names_the_nearest_miss_beside_a_served_one(tmp_path, capsys):
    # 3/s is served; 200/s is beyond 2 units of either card, which do meet the SLO at lighter loads
    answer, printed, out = _plan(tmp_path, capsys, "1 s", "[3/s, 200/s]")
    assert answer["no_candidate_meets_slo"] is False
    served, beyond = answer["answers"]
    assert served["cheapest"] is not None and served["nearest_miss"] is None
    miss = beyond["nearest_miss"]
    assert beyond["cheapest"] is None and miss is not None and miss["units"] == 2 and miss["load"] == 200.0
    capacity = {c["system"]: c["capacity"]["max_load"] for c in answer["candidates"]}
    assert miss["meets_per_unit"] == capacity[miss["system"]] > 0
    assert "At 3/s the cheapest is" in printed and "At 200/s: no candidate serves it within 2 units" in printed
    assert f"one unit meets the SLO up to {capacity[miss['system']]:.3g} requests/s" in printed
    assert "sustains 0" not in printed


def _result(attempts):
    """A PlanResult holding one failed attempt per candidate at 10/s: ``{system: (ttft p99 s, flags)}``."""
    objectives = [Objective("ttft_s", "p99", 0.5), Objective("tpot_s", "p99", 0.05)]
    candidates, probes = [], []
    for system, (ttft, flags) in attempts.items():
        candidates.append(CandidatePlan(system, LoadSearch(None, 0.1, (), False, "failed down to the floor")))
        probes.append((Probe(system, 1, 0.1), ProbeOutcome(0.1, False, "too slow", {})))
        reason = "run flagged unstable" if flags else f"ttft p99 {ttft} s > 0.5 s"
        detail = {"ttft_s": {"p99": ttft}, "tpot_s": {"p99": 0.01}, "flags": flags}
        probes.append((Probe(system, 4, 10.0), ProbeOutcome(10.0, False, reason, detail)))
    return PlanResult(None, objectives, candidates, probes)


def test_the_nearest_miss_is_the_smallest_multiple_of_a_limit():
    from kvsim.plan.answer import miss_text, nearest_miss

    miss = nearest_miss(_result({"a": (2.0, []), "b": (0.75, []), "c": (None, [])}), 10.0)
    assert miss["system"] == "b" and miss["worst_ratio"] == pytest.approx(1.5) and miss["units"] == 4
    assert miss["lowest_load_probed"] == 0.1
    text = miss_text(miss, "requests/s")
    assert text.startswith("b with 4 units reached TTFT p99 750 ms against 500 ms (1.5x the limit), "
                           "TPOT p99 10 ms against 50 ms (0.2x the limit)")
    assert "one unit meets the SLO at no load probed, down to 0.1 requests/s" in text
    # within every limit but flagged: closest, and said why it does not count
    flagged = nearest_miss(_result({"a": (2.0, []), "b": (0.25, ["unstable"])}), 10.0)
    assert flagged["system"] == "b" and "but did not count (run flagged unstable)" in miss_text(flagged, "requests/s")
    # a value not measured ranks last; ties go to the earlier candidate
    assert nearest_miss(_result({"c": (None, []), "a": (2.0, [])}), 10.0)["system"] == "a"
    assert nearest_miss(_result({"x": (2.0, []), "y": (2.0, [])}), 10.0)["system"] == "x"
    assert nearest_miss(_result({"x": (2.0, [])}), 3.0) is None  # nothing probed at that load
