"""plan.sensitivity (issue 25 item 3): the figures an answer rests on, varied over their ranges.

One plan on a synthetic catalog where one price decides the winner (the other assumed figure, a
host's power, does not), with the L20's compute efficiency re-planned as a physics figure."""

from __future__ import annotations

import json

import pytest

import kvsim
from kvsim.plan.command import run_plan
from kvsim.yaml_io import SpecError

AMORTISATION_H = 5 * 8760.0
PUE, ENERGY = 1.2, 0.12

PLAN = """
name: sensitivity-plan
seed: 4
duration: 60 s
warmup: 10 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 2000}
  output_tokens: {kind: fixed, value: 64}
slo: {ttft_p99: 1 s}
catalog:
  nodes:
    big: {base: h20-8x, price_usd: 166700, sources: {price_usd: "a quote (H)", host_power_w: "ASSUMPTION: a test figure"}}
    small: {base: l20-8x, price_usd: 100000, sources: {price_usd: "ASSUMPTION: a test price", host_power_w: "metered (H)"}}
cost: {pue: 1.2, energy_usd_per_kwh: 0.12, amortisation: 5 years}
systems:
  big: {node: big, instances: 1, instance: {max_num_seqs: 4}}
  small: {node: small, instances: 1, instance: {max_num_seqs: 4}}
plan:
  targets: [6/s]
  units: {max: 12}
  rel_tol: 0.15
  seed_checks: 0
  sensitivity:
    figures:
      - {field: catalog.nodes.small.price_usd, low: 10000, high: 1000000}
      - catalog.nodes.big.host_power_w
      - {field: catalog.accelerators.l20.efficiency.compute, low: 0.15, high: 0.9}
"""


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    out = tmp_path_factory.mktemp("sens")
    lines: list[str] = []
    scenario = kvsim.parse_scenario(PLAN, "plan.yaml")
    run_plan(scenario, out, workers=1, log=lines.append)
    return scenario, out, json.loads((out / "plan.json").read_text()), lines


def _unit_cost_per_hour(price_usd: float, cards: int, card_w: float, host_w: float) -> float:
    """The cost model written out by hand (docs/cost.md): capex over the amortisation, energy at PUE."""
    return price_usd / AMORTISATION_H + (cards * card_w + host_w) * PUE / 1000.0 * ENERGY


def test_the_deciding_price_is_named_with_its_exact_flip_point(planned):
    _, out, answer, _ = planned
    sens = answer["sensitivity"]
    (target,) = sens["targets"]
    units = {c["system"]: c["targets"][0]["units"] for c in answer["candidates"]}
    assert target["winner"] == answer["answers"][0]["cheapest"] and target["runner_up"] in units
    big = _unit_cost_per_hour(166700, 8, 400, 1800)  # h20: 400 W TDP; h20-8x host 1,800 W
    small_energy = _unit_cost_per_hour(0, 8, 275, 1600)  # l20: 275 W; l20-8x host 1,600 W
    by_system = {c["system"]: c["unit_cost"]["cost_per_hour_usd"] for c in answer["candidates"]}
    assert by_system["big"] == pytest.approx(big, rel=1e-12)
    assert by_system["small"] == pytest.approx(small_energy + 100000 / AMORTISATION_H, rel=1e-12)
    # where small's price makes its units cost what big's do
    flip = (units["big"] * big / units["small"] - small_energy) * AMORTISATION_H
    row = next(r for r in target["rows"] if r["field"] == "catalog.nodes.small.price_usd")
    (inside,) = [f for f in row["flips"] if f["in_range"]]
    assert inside["at"] == pytest.approx(flip, rel=1e-9)
    assert inside["direction"] == ("above" if target["winner"] == "small" else "below")
    assert inside["to"] == target["runner_up"] and not row["holds"]
    assert {row["cheapest_low"], row["cheapest_high"]} == {"small", "big"}
    # the tornado's order: the deciding price has the largest swing; the host power holds
    assert target["rows"][0]["field"] == "catalog.nodes.small.price_usd"
    power = next(r for r in target["rows"] if r["field"] == "catalog.nodes.big.host_power_w")
    assert power["holds"] and power["cheapest_low"] == power["cheapest_high"] == target["winner"]
    # and the report says so, at the price, with the chart
    md = (out / "plan.md").read_text()
    assert "## What the answer hinges on" in md and "plan_sensitivity.png" in md
    assert (out / "plan_sensitivity.png").stat().st_size > 10_000
    word = "exceeds" if target["winner"] == "small" else "falls below"
    assert f"price of a small server (flips to {target['runner_up']} if it {word} ${flip:,.0f})" in md


def test_a_price_just_past_the_flip_point_changes_the_cheapest(planned):
    from kvsim.plan.answer import catalog_unit_cost
    from kvsim.plan.sensitivity_figures import Figure, with_figure

    scenario, _, answer, _ = planned
    (target,) = answer["sensitivity"]["targets"]
    row = next(r for r in target["rows"] if r["field"] == "catalog.nodes.small.price_usd")
    (inside,) = [f for f in row["flips"] if f["in_range"]]
    units = {c["system"]: c["targets"][0]["units"] for c in answer["candidates"]}
    figure = Figure("catalog.nodes.small.price_usd", "", "cost", 100000, 1e4, 1e6, "usd", "", "")
    for factor, cheapest in ((0.999, "small"), (1.001, "big")):
        costs = catalog_unit_cost(with_figure(scenario, figure, inside["at"] * factor))
        per_hour = {name: units[name] * costs(name)["cost_per_hour_usd"] for name in units}
        assert min(per_hour, key=per_hour.get) == cheapest


def test_a_physics_figure_is_re_planned_and_moves_the_units_its_way(planned):
    _, out, answer, _ = planned
    (target,) = answer["sensitivity"]["targets"]
    row = next(r for r in target["rows"] if r["field"] == "catalog.accelerators.l20.efficiency.compute")
    base = next(c["targets"][0]["units"] for c in answer["candidates"] if c["system"] == "small")
    low, high = row["units_low"]["small"], row["units_high"]["small"]
    # a slower prefill needs more L20 servers for the same TTFT; a faster one no more
    assert low is None or low > base
    assert high is not None and high <= base
    # the H20 candidate does not use the L20: its count is the plan's, and no probe ran for it
    big = next(c["targets"][0]["units"] for c in answer["candidates"] if c["system"] == "big")
    assert row["units_low"]["big"] == row["units_high"]["big"] == big
    probes = answer["sensitivity"]["probes"]
    assert probes and {p["system"] for p in probes} == {"small"}
    assert {p["field"] for p in probes} == {"catalog.accelerators.l20.efficiency.compute"}
    assert len(list((out / "sensitivity").glob("*.json"))) == len(probes)


def test_a_second_run_reuses_every_sensitivity_probe(planned):
    scenario, out, answer, lines = planned
    assert "sensitivity: 0 probes run" not in lines[-1] and "sensitivity:" in lines[-1]
    assert any("sensitivity probe 1 (catalog.accelerators.l20.efficiency.compute=" in line for line in lines)
    # the answer is said as soon as it is known, before the first sensitivity probe
    (early,) = [k for k, line in enumerate(lines) if "answer, before what it hinges on: " in line]
    first = next(k for k, line in enumerate(lines) if "sensitivity probe 1 " in line)
    assert early < first and "the cheapest is" in lines[early]
    again: list[str] = []
    run_plan(scenario, out, workers=1, log=again.append)
    stored = len(list((out / "sensitivity").glob("*.json")))
    assert f"sensitivity: 0 probes run, {stored} reused" in again[-1]
    second = json.loads((out / "plan.json").read_text())
    assert second["sensitivity"] == answer["sensitivity"]


def test_cost_figures_found_by_default_and_their_exact_flip_under_amortisation():
    """Without figures listed, the assumed ones the candidates use are found; the amortisation,
    whose cost is affine in its reciprocal, flips exactly where brute force says."""
    from kvsim.plan.sensitivity import flip_point
    from kvsim.plan.sensitivity_figures import Figure, chosen_figures

    text = PLAN.split("  sensitivity:")[0].replace("cost: {pue: 1.2, energy_usd_per_kwh: 0.12, amortisation: 5 years}\n",
                                                  "")
    scenario = kvsim.parse_scenario(text, "plan.yaml")
    kept, left = chosen_figures(scenario, ["big", "small"])
    fields = [f.field for f in kept]
    assert fields[:2] == ["catalog.nodes.big.host_power_w", "catalog.nodes.small.price_usd"]
    assert {"cost.energy_usd_per_kwh", "cost.pue", "cost.amortisation"} <= set(fields)
    physics = [f.field for f in kept if f.kind == "physics"]
    assert physics == ["catalog.accelerators.l20.efficiency.compute", "engine.step_fixed_s"]  # PRIORITY, 2 by default
    # last in PRIORITY: the H100's kernel-launch gap, taken for the L20 (no measurement on its family)
    assert [f.field for f in left] == ["catalog.accelerators.l20.efficiency.memory", "engine.kernel_s"]
    assert "not measured on" in left[1].source and left[1].low == pytest.approx(0.5 * 3.64e-6)
    # two systems, costs a + b / T: where they cross, by the formula and by bisection
    years = 8760.0 * 3600.0
    figure = Figure("cost.amortisation", "", "cost", 4 * years, 1 * years, 9 * years, "years", "", "")

    def cost(capex: float, energy: float, t: float) -> float:
        return capex / (t / 3600.0) + energy

    a, b = (400_000.0, 1.0), (100_000.0, 9.0)  # a: dear to buy, cheap to run
    x = flip_point(figure, (cost(*a, figure.low), cost(*a, figure.high)), (cost(*b, figure.low), cost(*b, figure.high)))
    lo, hi = figure.low, figure.high
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cost(*a, mid) > cost(*b, mid) else (lo, mid)
    assert x == pytest.approx(lo, rel=1e-9)


@pytest.mark.parametrize("section, message", [
    ("sensitivity: maybe", "expected off, on or a mapping"),
    ("sensitivity: {physics: -1}", "physics"),
    ("sensitivity: {figures: [{field: catalog.nodes.small.price_usd, low: 9, high: 3}]}", "low (9) must be below high (3)"),
    ("sensitivity: {figures: [catalog.nodes.nope.price_usd]}", "not a number of this scenario"),
    ("sensitivity: {figures: [{field: catalog.accelerators.l20.efficiency.compute, high: 1.5}]}", "must be in (0, 1]"),
    ("sensitivity: {figures: [{field: engine.step_fixed_s, low: soon}]}", "neither a number nor a quantity"),
    ("sensitivity: {figures: [{field: catalog.nodes.small.price_usd, lo: 3}]}", "lo"),
    ("sensitivity: {figures: [{field: catalog.nodes.small.price_usd, low: -5}]}", "low: must be positive (got -5)"),
])
def test_bad_sensitivity_input_gets_one_clear_message(tmp_path, capsys, section, message):
    from kvsim.cli import main

    text = PLAN.split("  sensitivity:")[0] + "  " + section + "\n"
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "sensitivity" in err


def test_off_means_no_section_and_no_probes(tmp_path):
    text = PLAN.split("  sensitivity:")[0] + "  sensitivity: off\n"
    scenario = kvsim.parse_scenario(text, "plan.yaml")
    from kvsim.plan.sensitivity import plan_sensitivity, sensitivity_cost

    assert sensitivity_cost(scenario) == "sensitivity: off"
    assert plan_sensitivity(scenario, {"answers": []}) is None


def test_a_bad_figure_is_refused_before_any_probe(tmp_path):
    text = PLAN.split("  sensitivity:")[0] + "  sensitivity: {figures: [catalog.nodes.nope.price_usd]}\n"
    scenario = kvsim.parse_scenario(text, "plan.yaml")
    with pytest.raises(SpecError, match="not a number of this scenario"):
        run_plan(scenario, tmp_path, workers=1, log=lambda line: None)
    assert not (tmp_path / "probes").exists()


def test_a_format_4_answer_still_renders_without_the_section(planned, tmp_path):
    from kvsim.cli import main

    _, _, answer, _ = planned
    old = {key: value for key, value in answer.items() if key != "sensitivity"}
    old["format"] = 4
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "plan.json").write_text(json.dumps(old))
    assert main(["report", str(tmp_path / "old"), "--out", str(tmp_path / "docs")]) == 0
    md = (tmp_path / "docs" / "plan.md").read_text()
    assert "## Units and cost per target load" in md and "hinges on" not in md
    old["format"] = 3
    (tmp_path / "old" / "plan.json").write_text(json.dumps(old))
    assert main(["report", str(tmp_path / "old"), "--out", str(tmp_path / "docs3")]) == 2
