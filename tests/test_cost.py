"""The cost model (kvsim/metrics/cost.py) against hand arithmetic.

Catalog figures are typed in from kvsim/hardware/data/*.yaml (and checked against the facts in
test_catalog_prices.py), not read back from kvsim, so a changed price or power figure fails here.
"""

from __future__ import annotations

import json
import math

import pytest

import kvsim
from conftest import REPO
from kvsim.metrics.cost import (
    capex_per_hour_usd,
    cost_summary,
    energy_per_hour_usd,
    opex_per_hour_usd,
    requests_per_usd,
    usd_per_million_tokens,
)
from kvsim.scenario.cost_spec import CostSpec
from kvsim.sim import check_scenario
from kvsim.yaml_io import SpecError

FOUR_YEARS_S = 4 * 365 * 24 * 3600.0  # 35,040 h
SUMMARY = {"output_tokens_per_s": 1000.0, "input_tokens_per_s": 4000.0, "goodput_requests_per_s": 5.0}

BASE = """
name: cost
duration: 20 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 2/s}}
  input_tokens: {{kind: fixed, value: 500}}
  output_tokens: {{kind: fixed, value: 20}}
systems:
  s: {system}
{extra}
"""


def _scenario(system: str = "{node: h20-8x, instance: {tp: 8}}", extra: str = ""):
    return kvsim.parse_scenario(BASE.format(system=system, extra=extra), "c.yaml")


def _cost(system: str = "{node: test-node, instance: {tp: 8}}", extra: str = "", summary=SUMMARY):
    scenario = _scenario(system, extra)
    sizing = check_scenario(scenario)[(0, "s")]
    return cost_summary(sizing, summary, scenario.points[0].spec.cost)


# A server of USD 100,000 drawing 10 kW: 8 H20 at their 400 W TDP + 6,800 W of host.
TEST_NODE = """catalog:
  nodes:
    test-node: {base: h20-8x, price_usd: 100000, price_date: 2026-Q3, host_power_w: 6800 W}
"""


def test_hourly_terms_by_hand():
    # USD 100,000 over 4 years of 8,760 h; 10 kW x PUE 1.3 x USD 0.10/kWh
    assert capex_per_hour_usd(100_000, FOUR_YEARS_S) == pytest.approx(100_000 / 35_040, rel=1e-12)
    assert energy_per_hour_usd(10_000, 1.3, 0.10) == pytest.approx(1.3, rel=1e-12)
    assert opex_per_hour_usd(2, 8_760) == pytest.approx(2.0, rel=1e-12)
    # USD 3.6/h serving 1,000 tokens/s = 3.6 M tokens/h: USD 1 per million
    assert usd_per_million_tokens(3.6, 1000) == pytest.approx(1.0, rel=1e-12)
    assert requests_per_usd(3.6, 5) == pytest.approx(5 * 3600 / 3.6, rel=1e-12)


def test_one_node_by_hand():
    out = _cost(extra=TEST_NODE)
    per_hour = 100_000 / 35_040 + 10.0 * 1.3 * 0.10  # 2.8539 + 1.3 = USD 4.1539/h
    assert out["capex_usd"] == 100_000
    assert out["it_power_w"] == pytest.approx(8 * 400 + 6800, rel=1e-12) == 10_000
    assert out["facility_power_w"] == pytest.approx(13_000, rel=1e-12)
    assert out["capex_per_hour_usd"] == pytest.approx(100_000 / 35_040, rel=1e-12)
    assert out["energy_per_hour_usd"] == pytest.approx(1.3, rel=1e-12)
    assert out["opex_per_hour_usd"] == 0
    assert out["cost_per_hour_usd"] == pytest.approx(per_hour, rel=1e-12)
    assert out["usd_per_million_output_tokens"] == pytest.approx(per_hour / (1000 * 3600) * 1e6, rel=1e-12)
    assert out["usd_per_million_prompt_tokens"] == pytest.approx(per_hour / (4000 * 3600) * 1e6, rel=1e-12)
    assert out["goodput_requests_per_usd"] == pytest.approx(5 * 3600 / per_hour, rel=1e-12)
    assert out["amortisation_h"] == 35_040 and out["pue"] == 1.3 and out["energy_usd_per_kwh"] == 0.10
    assert out["nodes_charged"] == 1
    assert out["bill"] == [{"label": "pool main: test-node", "part": "test-node", "count": 1, "share": 1.0,
                            "price_usd": 100_000, "power_w": 10_000, "kind": "compute",
                            "cost_per_hour_usd": pytest.approx(per_hour, rel=1e-12)}]


def test_cost_section_sets_the_model_and_is_no_longer_assumed():
    extra = TEST_NODE + "cost: {amortisation: 5 years, pue: 1.5, energy_usd_per_kwh: 0.2, opex_usd_per_node_year: 8760}\n"
    out = _cost(extra=extra)
    per_hour = 100_000 / (5 * 8760) + 10.0 * 1.5 * 0.2 + 8760 / 8760  # 2.2831 + 3 + 1
    assert out["cost_per_hour_usd"] == pytest.approx(per_hour, rel=1e-12)
    assert out["amortisation_h"] == 5 * 8760
    assert not [a for a in out["assumptions"] if "(default)" in a]
    # left at their defaults, each model parameter is named as an assumption
    defaults = _cost(extra=TEST_NODE)["assumptions"]
    for field in ("amortisation = 4 years", "pue = 1.3", "energy_usd_per_kwh = 0.1", "opex_usd_per_node_year = 0"):
        assert any(a.startswith(field) and "(default)" in a for a in defaults), field
    assert not any("remote_pool_share" in a for a in defaults)  # no remote pool here


@pytest.mark.parametrize("written", ["4 years", "35040 h", "1460 days"])
def test_amortisation_units(written):
    spec = _scenario(extra=f"cost: {{amortisation: {written}}}\n").points[0].spec
    assert spec.cost.amortisation == pytest.approx(FOUR_YEARS_S, rel=1e-12)


def test_default_cost_section():
    cost = _scenario().points[0].spec.cost
    assert cost == CostSpec()
    assert (cost.amortisation, cost.pue, cost.energy_usd_per_kwh) == (FOUR_YEARS_S, 1.3, 0.10)
    assert cost.opex_usd_per_node_year == 0 and cost.remote_pool_share == 1


@pytest.mark.parametrize("field, value, words", [
    ("pue", "0.9", "greater than or equal to 1"),
    ("amortisation", "4", "unit"),
    ("energy_usd_per_kwh", "-0.1", "greater than or equal to 0"),
    ("remote_pool_share", "0", "(0, 1]"),
    ("pue_factor", "1.2", "pue_factor"),
])
def test_bad_cost_fields_name_file_line_and_field(field, value, words):
    extra = f"cost:\n  {field}: {value}\n"
    with pytest.raises(SpecError) as info:
        _scenario(extra=extra)
    message = str(info.value)
    text = BASE.format(system="{node: h20-8x, instance: {tp: 8}}", extra=extra)
    line = text.splitlines().index(f"  {field}: {value}") + 1
    assert f"c.yaml:{line}: cost.{field}" in message and words in message


REMOTE = "{node: l20-8x, instance: {tp: 8}, kv_cache: {remote: {pool_node: nvme-storage-16x, nodes: 4}}}"


def test_remote_pool_share_and_opex_by_hand():
    # L20 server USD 104,400 + a quarter of 4 pool nodes at USD 65,600 = USD 170,000; power 8 x 275 W
    # + 1,600 W host + 1 x 1,600 W; opex USD 8,760 per node-year over 2 nodes charged = USD 2/h.
    out = _cost(REMOTE, "cost: {remote_pool_share: 0.25, opex_usd_per_node_year: 8760}\n")
    assert out["capex_usd"] == pytest.approx(170_000, rel=1e-12)
    assert out["it_power_w"] == pytest.approx(5_400, rel=1e-12)
    assert out["nodes_charged"] == pytest.approx(2.0, rel=1e-12)
    assert out["opex_per_hour_usd"] == pytest.approx(2.0, rel=1e-12)
    assert out["cost_per_hour_usd"] == pytest.approx(170_000 / 35_040 + 5.4 * 1.3 * 0.1 + 2.0, rel=1e-12)
    assert [line["share"] for line in out["bill"]] == [1.0, 0.25]


def test_unknown_price_gives_none_not_nan():
    extra = "catalog:\n  nodes:\n    test-node: {base: h20-8x, price_usd: null, price_date: null}\n"
    out = _cost(extra=extra)
    assert out["capex_usd"] is None and out["capex_per_hour_usd"] is None and out["cost_per_hour_usd"] is None
    for key in ("usd_per_million_output_tokens", "usd_per_million_prompt_tokens", "goodput_requests_per_usd"):
        assert out[key] is None
    assert out["energy_per_hour_usd"] == pytest.approx((8 * 400 + 1800) * 1.3 / 1000 * 0.1, rel=1e-12)
    assert out["unknown"] == ["node test-node: price_usd"]
    json.dumps(out, allow_nan=False)  # plain JSON: no NaN, no infinity


def test_unknown_power_gives_none():
    extra = "catalog:\n  nodes:\n    test-node: {base: h20-8x, host_power_w: null}\n"
    out = _cost(extra=extra)
    assert out["it_power_w"] is None and out["energy_per_hour_usd"] is None and out["cost_per_hour_usd"] is None
    assert out["capex_usd"] == 166_700
    assert out["unknown"] == ["node test-node: host_power_w"]


@pytest.mark.parametrize("rate", [0.0, float("nan"), None, float("inf")])
def test_no_throughput_gives_none_not_infinity(rate):
    summary = {"output_tokens_per_s": rate, "input_tokens_per_s": rate, "goodput_requests_per_s": rate}
    out = _cost(extra=TEST_NODE, summary=summary)
    assert out["usd_per_million_output_tokens"] is None and out["usd_per_million_prompt_tokens"] is None
    assert out["goodput_requests_per_usd"] in (None, 0.0)
    json.dumps(out, allow_nan=False)


def test_replicated_summary_reads_the_mean():
    summary = {k: {"mean": v, "ci95": [v - 1, v + 1]} for k, v in SUMMARY.items()}
    assert _cost(extra=TEST_NODE, summary=summary) == _cost(extra=TEST_NODE)


def test_missing_summary_key_is_an_error():
    with pytest.raises(KeyError, match="output_tokens_per_s"):
        _cost(extra=TEST_NODE, summary={"input_tokens_per_s": 1.0, "goodput_requests_per_s": 1.0})


def test_typical_draw_replaces_the_tdp():
    extra = TEST_NODE + "  accelerators:\n    h20: {typical_power_w: 300 W}\n"
    out = _cost(extra=extra)
    assert out["it_power_w"] == pytest.approx(8 * 300 + 6800, rel=1e-12)
    assert not any("draws its TDP" in a for a in out["assumptions"])
    assert any("card h20 draws its TDP, 400 W" in a for a in _cost(extra=TEST_NODE)["assumptions"])


# ---------------------------------------------------------------------------------------------
# A shipped scenario: scenarios/offload_gap.yaml (one 8x H20 or 8x L20 server with one 400G NIC,
# optionally a remote pool of 4 nvme-storage-16x nodes)
# ---------------------------------------------------------------------------------------------

H20_SERVER = (166_700, 8 * 400 + 1_800)  # 1.2 M CNY / 7.2; 8 x 400 W TDP + 1,800 W host
L20_SERVER = (104_400, 8 * 275 + 1_600)  # assumed: 8 x 7,500 + 44,400; 8 x 275 W TDP + 1,600 W host
POOL = (4 * 65_600, 4 * 1_600)  # 4 storage nodes


@pytest.fixture(scope="module")
def offload_gap():
    scenario = kvsim.load_scenario(REPO / "scenarios" / "offload_gap.yaml")
    return scenario, check_scenario(scenario)


@pytest.mark.parametrize("system, parts", [
    ("h20-none", [H20_SERVER]), ("h20-dram", [H20_SERVER]), ("h20-gdr", [H20_SERVER, POOL]),
    ("l20-none", [L20_SERVER]), ("l20-rdma", [L20_SERVER, POOL]),
])
def test_offload_gap_systems_by_hand(offload_gap, system, parts):
    scenario, sizings = offload_gap
    capex = sum(price for price, _ in parts)
    power_w = sum(watts for _, watts in parts)
    per_hour = capex / 35_040 + power_w / 1000 * 1.3 * 0.10
    for point in scenario.points:  # the sweep changes the workload, not the hardware
        out = cost_summary(sizings[(point.index, system)], SUMMARY, point.spec.cost)
        assert out["capex_usd"] == pytest.approx(capex, rel=1e-12)
        assert out["it_power_w"] == pytest.approx(power_w, rel=1e-12)
        assert out["cost_per_hour_usd"] == pytest.approx(per_hour, rel=1e-12)
        assert out["usd_per_million_prompt_tokens"] == pytest.approx(per_hour / (4000 * 3600) * 1e6, rel=1e-12)
        # each bill line's own hourly cost: the server alone, the pool (whole, the default share) alone
        lines = [(line["kind"], line["cost_per_hour_usd"]) for line in out["bill"]]
        assert lines == [(kind, pytest.approx(price / 35_040 + watts / 1000 * 1.3 * 0.10, rel=1e-12))
                         for kind, (price, watts) in zip(("compute", "kv_pool"), parts)]
        assert sum(cost for _, cost in lines) == pytest.approx(out["cost_per_hour_usd"], rel=1e-12)
        json.dumps(out, allow_nan=False)


def test_offload_gap_assumptions_name_what_is_assumed(offload_gap):
    scenario, sizings = offload_gap
    spec = scenario.points[0].spec.cost
    h20 = cost_summary(sizings[(0, "h20-none")], SUMMARY, spec)["assumptions"]
    l20 = cost_summary(sizings[(0, "l20-rdma")], SUMMARY, spec)["assumptions"]
    # the H20 server's price is sourced (M), the L20 server's and the pool nodes' are assumed
    assert not any("price_usd" in a for a in h20)
    assert any(a.startswith("node l20-1nic price_usd = USD 104,400 (2024-Q2): ASSUMPTION") for a in l20)
    assert any(a.startswith("pool node nvme-storage-16x price_usd") for a in l20)
    assert any(a.startswith("pool node nvme-storage-16x power_w") for a in l20)
    assert any(a.startswith("node h20-1nic host_power_w = 1800 W: ASSUMPTION") for a in h20)
    assert any(a.startswith("remote_pool_share = 1 (default)") for a in l20)
    assert len(l20) == len(set(l20))


def test_cost_summary_of_a_real_run():
    # The keys the cost model reads are the ones a run's summary holds.
    result = kvsim.run(_scenario(extra=TEST_NODE))
    run = result.runs[0]
    out = cost_summary(run.sizing, run.summary, result.scenario.points[0].spec.cost)
    tokens = run.summary["output_tokens_per_s"]
    assert tokens > 0
    assert out["usd_per_million_output_tokens"] == pytest.approx(out["cost_per_hour_usd"] / (tokens * 3600) * 1e6)
    assert math.isfinite(out["goodput_requests_per_usd"])
