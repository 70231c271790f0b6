"""A shared, independently sized KV pool (plan.shared_pools, kvsim.plan.pool_axis): compute units
x pool nodes, the pool priced on its own (bought, or rented per TB-month)."""

from __future__ import annotations

import math

import pytest

import kvsim
from kvsim.metrics.cost import bill_of_materials, cost_summary, line_cost_per_hour_usd
from kvsim.plan.answer import catalog_unit_cost, plan_answer
from kvsim.plan.planner import plan, scaled_scenario
from kvsim.plan.pool_axis import axis_costs, beats_compute_up_to
from kvsim.plan.search import ProbeOutcome
from kvsim.sim.sizing import size_system
from kvsim.yaml_io import SpecError

PLAN = """
name: shared-pool-plan
seed: 4
duration: 60 s
warmup: 10 s
model: qwen3-1.7b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 2000}}
  output_tokens: {{kind: fixed, value: 64}}
slo: {{ttft_p99: 1 s}}
systems:
  l20: {{node: l20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
  l20-pool: {{node: l20-8x, instances: 1, instance: {{max_num_seqs: 4}},
             kv_cache: {{remote: {{pool_node: nvme-storage-16x, nodes: 3}}}}}}
plan: {{targets: [4/s, 12/s], units: {{max: 16}}, rel_tol: 0.1, seed_checks: 0,
       shared_pools: {{l20-pool: {pool}}}}}
"""


def _scenario(pool="{nodes: [1, 2, 4]}"):
    return kvsim.parse_scenario(PLAN.format(pool=pool), "plan.yaml")


def test_a_shared_pool_keeps_its_size_while_the_units_multiply_the_compute():
    scenario = _scenario()
    shared = scaled_scenario(scenario, "l20-pool", 3, 5.0, pool_nodes=2).spec.systems["l20-pool"]
    assert (shared.nodes, shared.instances, shared.kv_cache.remote.nodes) == (3, 3, 2)
    # without a pool size the pool is bought per unit, as before: 3 units x 3 pool nodes
    assert scaled_scenario(scenario, "l20-pool", 3, 5.0).spec.systems["l20-pool"].kv_cache.remote.nodes == 9


def _capacity_per_unit(pool_nodes: int | None) -> float:
    """A stand-in physics whose answer is known: one unit sustains 1 request/s with one pool node
    (or none: the candidate without a pool), and each further node adds 0.5 requests/s per unit,
    up to 2.5 (the compute's own limit)."""
    return min(2.5, 0.5 + 0.5 * (pool_nodes or 1))


def _synthetic(run, probes):
    # a probe meets the SLO iff its load is within units x the per-unit capacity with its pool
    return [ProbeOutcome(p.load, p.load <= p.units * _capacity_per_unit(p.pool_nodes) + 1e-9,
                         "" if p.load <= p.units * _capacity_per_unit(p.pool_nodes) + 1e-9 else "too much load",
                         {"ttft_s": {}, "tpot_s": {}, "flags": []}) for p in probes]


def test_the_two_dimensional_search_picks_the_cheapest_pair():
    scenario = _scenario("{nodes: [1, 2, 3, 4, 6, 16]}")
    result = plan(scenario, map_probes=_synthetic)
    found = result.candidate("l20-pool")
    costs = axis_costs(scenario, "l20-pool")
    assert costs.unit_usd_per_hour and costs.pool_node_usd_per_hour  # the catalog prices both
    for target in (4.0, 12.0):
        # the closed form: n(P) = ceil(target / capacity(P)), then the cheapest (n(P), P) by brute force
        expected = {p: math.ceil(target / _capacity_per_unit(p) - 1e-9) for p in (1, 2, 3, 4, 6, 16)}
        for point in found.pool_axis:
            assert point.units_for[target] == expected[point.pool_nodes]
        best = min(expected, key=lambda p: (expected[p] * costs.unit_usd_per_hour
                                            + p * costs.pool_node_usd_per_hour, p))
        assert (found.units_for[target], found.pool_nodes_for[target]) == (expected[best], best)
    # every probe of the candidate names its pool size; none buys a pool per unit. 16 nodes are not
    # probed: one unit with them (USD 3.47 + 16 x 2.08 per hour) costs more than the cheapest pair
    # found at either target (13.19 and 25.69 per hour), and the answer is the brute force's anyway
    assert {p.pool_nodes for p, _ in result.probes if p.system == "l20-pool"} == {1, 2, 3, 4, 6}
    assert all(p.pool_nodes is None for p, _ in result.probes if p.system == "l20")
    answer = plan_answer(result, lambda s: {"capex_usd": 1.0, "cost_per_hour_usd": 1.0, "assumptions": []})
    entry = next(c for c in answer["candidates"] if c["system"] == "l20-pool")
    row = next(t for t in entry["targets"] if t["load"] == 12.0)
    assert row["cost_per_hour_usd"] == pytest.approx(costs.total(row["units"], row["pool_nodes"]))
    assert entry["shared_pool"]["not_probed"] == [16]
    table = next(t for t in entry["shared_pool"]["frontier"] if t["load"] == 12.0)
    assert [r["units"] for r in table["rows"]] == [math.ceil(12 / _capacity_per_unit(p) - 1e-9) for p in (1, 2, 3, 4, 6)]
    steps = [r["step_usd_per_hour"] for r in table["rows"][1:]]
    for r, step in zip(table["rows"][1:], steps):
        assert step == pytest.approx(-r["units_saved"] * costs.unit_usd_per_hour
                                     + r["pool_nodes_added"] * costs.pool_node_usd_per_hour)
    assert table["beats_compute_up_to"] == beats_compute_up_to(table["rows"])


def test_adding_pool_beats_compute_up_to_the_last_step_that_lowers_the_cost():
    rows = [{"pool_nodes": 1, "pool_beats_compute": None}, {"pool_nodes": 2, "pool_beats_compute": True},
            {"pool_nodes": 4, "pool_beats_compute": True}, {"pool_nodes": 8, "pool_beats_compute": False}]
    assert beats_compute_up_to(rows) == 4
    rows[1]["pool_beats_compute"] = False
    assert beats_compute_up_to(rows) == 1  # never: the smallest pool is already the cheapest start
    assert beats_compute_up_to(rows[:1]) is None


def test_a_pool_rented_per_tb_month_replaces_its_price_and_power():
    scenario = _scenario("{nodes: [2], usd_per_tb_month: 20}")
    one = scaled_scenario(scenario, "l20-pool", 1, 1.0, pool_nodes=2)
    sizing = size_system(one.spec, "l20-pool", one.catalogs)
    capacity = sizing.pool_node.capacity_bytes
    lines = bill_of_materials(sizing, 1.0, 20.0)
    pool = next(line for line in lines if line.kind == "kv_pool")
    # closed form: capacity in TB (1e12 bytes) x USD 20 per TB-month / 730 h a month, per node
    assert pool.rent_usd_per_hour == pytest.approx(capacity / 1e12 * 20.0 / 730.0)
    assert (pool.price_usd, pool.power_w, pool.count) == (0.0, 0.0, 2)
    assert line_cost_per_hour_usd(pool, one.spec.cost) == pytest.approx(2 * capacity / 1e12 * 20.0 / 730.0)
    idle = {"output_tokens_per_s": 0.0, "input_tokens_per_s": 0.0, "goodput_requests_per_s": 0.0}
    bought = cost_summary(sizing, idle, one.spec.cost)
    rented = cost_summary(sizing, idle, one.spec.cost, 20.0)
    compute = next(line for line in lines if line.kind == "compute")
    # the rented bill: the compute as bought, plus the rent, and no pool capex, power or running cost
    assert rented["capex_usd"] == pytest.approx(compute.price_usd)
    assert rented["it_power_w"] == pytest.approx(compute.power_w)
    assert rented["nodes_charged"] == 1
    assert rented["rent_per_hour_usd"] == pytest.approx(2 * capacity / 1e12 * 20.0 / 730.0)
    assert rented["cost_per_hour_usd"] == pytest.approx(line_cost_per_hour_usd(compute, one.spec.cost)
                                                       + rented["rent_per_hour_usd"])
    assert bought["rent_per_hour_usd"] == 0 and bought["capex_usd"] > rented["capex_usd"]
    costs = axis_costs(scenario, "l20-pool")
    assert costs.rented and costs.pool_node_capex_usd == 0.0
    assert costs.pool_node_usd_per_hour == pytest.approx(capacity / 1e12 * 20.0 / 730.0)


@pytest.mark.parametrize("pool, message", [
    ("{nodes: []}", "nodes"),
    ("{nodes: [4, 2]}", "ascending order without repeats, e.g. [2, 4], not [4, 2]"),
    ("{nodes: [1, 1]}", "ascending order without repeats"),
    ("{nodes: [0, 2]}", "nodes"),
    ("{nodes: [1], usd_per_tb_month: -3}", "usd_per_tb_month"),
    ("{nodes: [1], price: 3}", "price"),
])
def test_bad_shared_pools_are_refused_with_the_field(pool, message):
    with pytest.raises(SpecError) as info:
        _scenario(pool)
    assert message in str(info.value) and "plan.yaml:" in str(info.value)


def test_a_shared_pool_needs_a_candidate_with_a_remote_pool():
    text = PLAN.format(pool="{nodes: [1]}").replace("shared_pools: {l20-pool:", "shared_pools: {l20:")
    with pytest.raises(SpecError, match="system 'l20' has no remote KV pool to share"):
        kvsim.parse_scenario(text, "plan.yaml")
    text = PLAN.format(pool="{nodes: [1]}").replace("shared_pools: {l20-pool:", "shared_pools: {h20:")
    with pytest.raises(SpecError, match="'h20' is not one of the systems"):
        kvsim.parse_scenario(text, "plan.yaml")
    text = PLAN.format(pool="{nodes: [1]}").replace("rel_tol: 0.1,", "rel_tol: 0.1, candidates: [l20],")
    with pytest.raises(SpecError, match="'l20-pool' is not one of the plan's candidates"):
        kvsim.parse_scenario(text, "plan.yaml")


SHARED = """
name: shared-pool-{tag}
seed: 3
duration: 60 s
warmup: 0 s
model: qwen3-1.7b
workload:
  arrival: {{kind: trace, format: mooncake, file: {tag}.jsonl}}
systems:
  s: {{node: l20-8x, nodes: {units}, instances: {units}, router: round_robin,
      instance: {{tp: 1, memory_utilization: 0.15}},
      kv_cache: {{remote: {{pool_node: nvme-storage-16x, nodes: 1}}}}}}
"""


def _trace(copy: str | None) -> str:
    """120 requests 0.4 s apart, each one of 24 eight-block documents (cycled, so from the 25th on
    every prompt's document is in the pool: HBM at 15 % of the card holds none of them) plus a
    block of its own. ``copy``: each request also sent to a second unit -- ``same`` at the same
    time with the same blocks, ``own`` 0.1 s later with blocks of its own."""
    import json

    rows = []
    for t in range(120):
        row = {"timestamp": t * 400, "input_length": 8 * 512 + 300, "output_length": 20,
               "hash_ids": [1000 * ((t * 7) % 24) + b for b in range(8)] + [10**6 + t]}
        rows.append(row)
        if copy == "same":
            rows.append(dict(row))
        elif copy == "own":
            rows.append({**row, "timestamp": t * 400 + 100, "hash_ids": [5 * 10**6 + i for i in row["hash_ids"]]})
    return "".join(json.dumps(row) + "\n" for row in rows)


def _records(tmp_path, tag: str, units: int, copy: str | None) -> dict:
    from kvsim.sim.run import run_scenario

    (tmp_path / f"{tag}.jsonl").write_text(_trace(copy))
    (tmp_path / f"{tag}.yaml").write_text(SHARED.format(tag=tag, units=units))
    scenario = kvsim.load_scenario(tmp_path / f"{tag}.yaml")
    return run_scenario(scenario).runs_of("s", 0)[0].records.columns()


CACHE_COLUMNS = ("hit_tokens_remote", "hit_tokens_hbm", "computed_tokens", "loaded_bytes", "written_bytes",
                 "input_tokens", "output_tokens")


def test_two_units_sharing_one_pool_hold_the_same_requests_as_one_unit_at_half_load(tmp_path):
    import numpy as np

    one = _records(tmp_path, "one", 1, None)
    assert one["hit_tokens_remote"].sum() == 96 * 8 * 512  # the pool serves every repeated document
    # Two units (one node and instance each, round robin) share one pool at twice the load, each
    # with its own documents, the second unit's requests 0.1 s after the first's: no two pool
    # transfers overlap in time, so each unit's requests are served exactly as the one unit's
    # alone -- the pool holds both units' documents and is reached by both nodes' NICs.
    two = _records(tmp_path, "two", 2, "own")
    for unit, shift in ((0, 0.0), (1, 0.1)):
        mine = two["instance"] == unit
        for column in CACHE_COLUMNS:
            assert np.array_equal(two[column][mine], one[column]), (unit, column)
        for column in ("ttft_s", "tpot_s", "e2e_s"):
            assert np.allclose(two[column][mine], one[column], rtol=0, atol=1e-12), (unit, column)
        for column in ("first_token_s", "finish_s"):  # times shifted by the copy's 0.1 s (to rounding)
            assert np.allclose(two[column][mine], one[column] + shift, rtol=0, atol=1e-12), (unit, column)
    # The same requests sent to both units at the same time: one pool, so the second unit finds
    # in it exactly what the one unit alone found (per request, the same hits, loads and writes),
    # and the two units' loads from it at the same moment share its path: a request that loads
    # from the pool is no faster than alone and at least one is slower; one that loads nothing is
    # served exactly as alone.
    same = _records(tmp_path, "same", 2, "same")
    loads = one["hit_tokens_remote"] > 0
    slower = False
    for unit in (0, 1):
        mine = same["instance"] == unit
        for column in CACHE_COLUMNS:
            assert np.array_equal(same[column][mine], one[column]), (unit, column)
        ttft = same["ttft_s"][mine]
        assert np.array_equal(ttft[~loads], one["ttft_s"][~loads])
        assert np.all(ttft[loads] >= one["ttft_s"][loads] - 1e-12)
        slower = slower or bool(np.any(ttft[loads] > one["ttft_s"][loads] + 1e-6))
    assert slower


def test_the_report_shows_the_frontier_and_where_pool_beats_compute(tmp_path):
    from kvsim.report.document import to_markdown
    from kvsim.report.plan_report import plan_document, summary_paragraph, write_plan_report

    scenario = _scenario("{nodes: [1, 2, 3, 4, 6]}")
    answer = plan_answer(plan(scenario, map_probes=_synthetic), catalog_unit_cost(scenario))
    entry = next(c for c in answer["candidates"] if c["system"] == "l20-pool")
    table = next(t for t in entry["shared_pool"]["frontier"] if t["load"] == 12.0)
    # the catalog's prices (see the pair test): 12 units + 1 node, 8 + 2, 6 + 3, 5 + 4, 5 + 6; each
    # step to P=4 saves more compute than its nodes cost, the step to 6 saves none
    assert [r["pool_beats_compute"] for r in table["rows"]] == [None, True, True, True, False]
    assert table["beats_compute_up_to"] == 4 == table["chosen_pool_nodes"]
    page = to_markdown(plan_document(answer))
    assert "## Shared KV pool: pool nodes against compute units" in page
    assert "adding pool capacity beats adding compute up to P=4 (from 12 units" in page
    assert "beyond it the units saved no longer pay for the pool nodes added" in page
    assert "+ 4 shared pool nodes" in summary_paragraph(answer)
    written = [p.name for p in write_plan_report(answer, tmp_path)]
    assert "plan_shared_pool.png" in written


def test_a_shared_pool_is_compared_like_for_like_with_a_shared_pool_only():
    from kvsim.plan.answer import like_for_like

    pool = {"remote": {"pool_node": "nvme-storage-16x", "nodes": 1}}
    systems = {"h20": {"node": "h20-8x"}, "h20-pool": {"node": "h20-8x", "kv_cache": pool},
               "h20-shared": {"node": "h20-8x", "kv_cache": {"remote": {"pool_node": "nvme-storage-16x"}}},
               "l20-shared": {"node": "l20-8x", "kv_cache": pool}}
    names = list(systems)
    # without shared pools the L20 would be paired with the H20 that buys a pool per unit
    assert like_for_like(systems, names, "h20")["l20-shared"] == "h20-pool"
    axis = {"nodes": [1, 2]}
    twins = like_for_like(systems, names, "h20", {"l20-shared": axis, "h20-shared": axis})
    assert twins["l20-shared"] == "h20-shared" and twins["h20-pool"] == "h20-pool"
    assert like_for_like(systems, names, "h20", {"l20-shared": axis})["l20-shared"] is None


def test_sensitivity_prices_a_shared_candidate_with_its_pool_at_each_end_of_a_figure():
    # the seam between plan.shared_pools and plan.sensitivity: a cost figure's row prices a shared
    # candidate as its units plus its own pool nodes, each at that end of the figure's range
    from kvsim.plan.sensitivity import cost_rows
    from kvsim.plan.sensitivity_figures import Figure, with_figure

    scenario = _scenario("{nodes: [1, 2, 3, 4, 6, 16]}")
    result = plan(scenario, map_probes=_synthetic)
    answer = plan_answer(result, catalog_unit_cost(scenario))
    price = scenario.catalogs.pool_nodes["nvme-storage-16x"].price_usd
    figure = Figure("catalog.pool_nodes.nvme-storage-16x.price_usd", "", "cost", price, 0.5 * price, 1.5 * price,
                    "usd", "", "")
    entry = next(c for c in answer["candidates"] if c["system"] == "l20-pool")
    l20 = next(c for c in answer["candidates"] if c["system"] == "l20")
    for k, load in enumerate(answer["targets"]):
        units, pool = entry["targets"][k]["units"], entry["targets"][k]["pool_nodes"]
        row = cost_rows(scenario, answer, figure, [(load, "l20-pool", "l20")])[0]
        for end, value in (("low", figure.low), ("high", figure.high)):
            shared = axis_costs(with_figure(scenario, figure, value), "l20-pool").total(units, pool)
            alone = l20["targets"][k]["units"] * catalog_unit_cost(with_figure(scenario, figure, value))("l20")[
                "cost_per_hour_usd"]
            assert row[f"ratio_{end}"] == pytest.approx(shared / alone, rel=1e-12)
        # the pool's price moves the shared candidate's cost: the two ends differ
        assert row["ratio_low"] < row["ratio_high"]


def test_frontier_lines_merge_targets_with_the_same_points():
    """Two targets whose frontiers are the same points are one line naming both (drawn apart, the
    later hid the earlier in docs/plan_offload_shared_pool.png); a different frontier stays apart."""
    from kvsim.report.pool_frontier import frontier_lines

    def table(load, costs, chosen=1):
        return {"load": load, "chosen_pool_nodes": chosen,
                "rows": [{"pool_nodes": p, "cost_per_hour_usd": c, "units": 1} for p, c in costs]}

    same = [(1, 5.55), (2, 7.63)]
    series = [("l20-pool", table(4.0, same)), ("l20-pool", table(8.0, same)),
              ("l20-pool", table(16.0, [(1, 9.03), (2, 11.11)])), ("h20-pool", table(4.0, same))]
    lines = frontier_lines(series, lambda load: f"{load:g}/s")
    assert [(system, loads) for system, loads, _, _ in lines] == [
        ("l20-pool", ["4/s", "8/s"]), ("l20-pool", ["16/s"]), ("h20-pool", ["4/s"])]
    assert lines[0][2] == [(1, 5.55, 1), (2, 7.63, 1)]
