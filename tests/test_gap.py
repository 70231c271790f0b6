"""The gap study report: gap = high / low per option and point, narrowing, and its files."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.cli import main
from kvsim.report.gap import gap_frame

SCENARIO = """
name: tiny-gap
seed: 3
duration: 25 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: closed_loop, clients: 4}
  prefix: {kind: shared_documents, documents: 20, zipf_s: 1.0, document_tokens: {kind: fixed, value: 2048},
           suffix_tokens: {kind: fixed, value: 128}}
  output_tokens: {kind: fixed, value: 1}
systems:
  hi-none: {node: h20-8x, instances: 1}
  hi-dram: {node: h20-8x, instances: 1, kv_cache: {dram: {capacity: 64 GiB}, prewarm: true}}
  lo-none: {node: l20-8x, instances: 1}
  lo-dram: {node: l20-8x, instances: 1, kv_cache: {dram: {capacity: 64 GiB}, prewarm: true}}
study:
  kind: gap
  high: H
  low: L
  configs: {none: [hi-none, lo-none], dram: [hi-dram, lo-dram]}
  x: workload.arrival.clients
sweep:
  workload.arrival.clients: [2, 8]
"""


def test_gap_is_the_ratio_of_the_paired_systems_and_narrowing_is_relative_to_the_first_option():
    result = kvsim.run(kvsim.parse_scenario(SCENARIO, "g.yaml"))
    frame = gap_frame(result)
    assert len(frame) == 2 * 2  # points x options
    for _, row in frame.iterrows():
        high, low = row.option == "none" and ("hi-none", "lo-none") or ("hi-dram", "lo-dram")
        h = result.run(high, row.point).summary["input_tokens_per_s"]
        lo = result.run(low, row.point).summary["input_tokens_per_s"]
        assert row.gap == pytest.approx(h / lo)
        base = frame[(frame.point == row.point) & (frame.option == "none")].gap.iloc[0]
        assert row.narrowed_pct == pytest.approx(100 * (base - row.gap) / (base - 1))
    # caching the shared documents raises both systems' prompt throughput
    for point in result.points():
        assert result.run("hi-dram", point).summary["input_tokens_per_s"] > \
            result.run("hi-none", point).summary["input_tokens_per_s"]


def test_run_writes_the_gap_table_and_figure(tmp_path):
    source = tmp_path / "g.yaml"
    source.write_text(SCENARIO, encoding="utf-8")
    assert main(["run", str(source), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    markdown = (tmp_path / "out" / "gap.md").read_text()
    assert "| option |" in markdown and "gap (x)" in markdown and "| dram |" in markdown
    assert (tmp_path / "out" / "gap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "out" / "gap.csv").read_text().startswith("point,")
    # per-link traffic and tier occupancy over time are written for runs with a KV cache
    import pandas as pd

    links = pd.read_parquet(tmp_path / "out" / "links.parquet")
    assert {"system", "link", "capacity_Bps", "bytes", "utilization_mean"} <= set(links.columns)
    assert set(links.system) == {"hi-dram", "lo-dram"} and (links.bytes > 0).all()
    series = pd.read_parquet(tmp_path / "out" / "timeseries.parquet")
    assert {"time_s", "hbm_bytes", "dram_bytes", "hbm_logical_bytes"} <= set(series.columns)
    assert series.dram_bytes.max() > 0
    # a running sequence reads its cached prefix: HBM has readers while requests are in flight
    assert series.hbm_logical_bytes.max() > 0


def test_study_naming_an_unknown_system_is_refused():
    bad = SCENARIO.replace("dram: [hi-dram, lo-dram]", "dram: [hi-dram, nope]")
    with pytest.raises(kvsim.SpecError, match=r"g\.yaml:\d+: study\.configs\.dram: 'nope' is not one of"):
        kvsim.parse_scenario(bad, "g.yaml")


def test_buyer_gaps_divide_by_cards_and_dollars_and_best_picks_each_side_alone():
    from kvsim.report.gap import ERASED_WITHIN, best_frame, gap_markdown

    result = kvsim.run(kvsim.parse_scenario(SCENARIO, "g.yaml"))
    frame = gap_frame(result)
    for _, row in frame.iterrows():
        high, low = ("hi-none", "lo-none") if row.option == "none" else ("hi-dram", "lo-dram")
        h, lo = result.run(high, row.point), result.run(low, row.point)
        # one 8-card server each; the cost model's hourly cost, all of it the server (no pool here)
        assert row.H_cards == row.L_cards == 8
        assert row.H_server_usd_per_h == pytest.approx(h.summary["cost"]["cost_per_hour_usd"], rel=1e-12)
        assert row.L_usd_per_h == pytest.approx(lo.summary["cost"]["cost_per_hour_usd"], rel=1e-12)
        assert row.gap_per_card == pytest.approx(row.gap)
        per_dollar = (h.summary["input_tokens_per_s"] / h.summary["cost"]["cost_per_hour_usd"]) / \
            (lo.summary["input_tokens_per_s"] / lo.summary["cost"]["cost_per_hour_usd"])
        assert row.gap_per_server_usd == pytest.approx(per_dollar) and row.gap_per_usd == pytest.approx(per_dollar)
        # the H20 server costs more than the L20 one: per dollar the gap is smaller
        assert row.gap_per_usd < row.gap
    best = best_frame(result, frame)
    assert len(best) == 2
    for _, row in best.iterrows():
        rows = frame[frame.point == row.point]
        for side in ("H", "L"):
            top = rows.loc[rows[f"{side}_input_tokens_per_s"].idxmax()]
            assert row[f"{side}_option"] == top.option  # no cell is flagged here
        h = rows[rows.option == row.H_option].H_input_tokens_per_s.iloc[0]
        lo = rows[rows.option == row.L_option].L_input_tokens_per_s.iloc[0]
        assert row.gap == pytest.approx(h / lo)
    text = gap_markdown(result, frame)
    assert "## Each server at its best option" in text and "gap per $ with KV pool (x)" in text
    assert f"erased (at most {ERASED_WITHIN:g}x) at" in text
    assert "## prompt 2,176 tokens (mean): workload.arrival.clients = 2" in text  # 2,048 + 128


def test_best_option_prefers_steady_cells_and_a_pool_counts_in_the_dollar_gap():
    import pandas as pd

    from kvsim.report.gap import _pick, _ratio

    rows = pd.DataFrame({"option": ["a", "b"], "H_flags": ["unstable", ""], "H_tps": [10.0, 5.0]})
    assert _pick(rows, "H", rows["H_tps"]).option == "b"  # the faster cell is not steady state
    rows["H_flags"] = ["unstable", "unstable"]
    assert _pick(rows, "H", rows["H_tps"]).option == "a"  # none is: the fastest, flagged by the caller
    assert _ratio(None, 1.0) is None and _ratio(1.0, 0.0) is None and _ratio(3.0, 2.0) == 1.5


def test_the_pool_bought_for_a_server_is_in_the_dollar_gap_and_not_in_the_server_one():
    pooled = SCENARIO.replace(
        "  lo-none: {node: l20-8x, instances: 1}",
        "  hi-pool: {node: h20-8x, instances: 1, kv_cache: {remote: {pool_node: nvme-storage-16x, nodes: 2},"
        " prewarm: true}}\n"
        "  lo-pool: {node: l20-8x, instances: 1, kv_cache: {remote: {pool_node: nvme-storage-16x, nodes: 2},"
        " prewarm: true}}\n"
        "  lo-none: {node: l20-8x, instances: 1}").replace(
        "dram: [hi-dram, lo-dram]}", "dram: [hi-dram, lo-dram], pool: [hi-pool, lo-pool]}").replace(
        "[2, 8]", "[8]")
    result = kvsim.run(kvsim.parse_scenario(pooled, "g.yaml"))
    row = gap_frame(result).set_index("option").loc["pool"]
    h, lo = result.run("hi-pool", 0).summary, result.run("lo-pool", 0).summary
    pool_h = next(b["cost_per_hour_usd"] for b in h["cost"]["bill"] if b["kind"] == "kv_pool")
    assert row.H_usd_per_h == pytest.approx(row.H_server_usd_per_h + pool_h, rel=1e-12)
    server_gap = (h["input_tokens_per_s"] / row.H_server_usd_per_h) / (lo["input_tokens_per_s"] / row.L_server_usd_per_h)
    assert row.gap_per_server_usd == pytest.approx(server_gap)
    # the same pool added to both sides pulls the per-dollar gap towards the per-server one
    assert row.gap_per_server_usd < row.gap_per_usd < row.gap


def test_a_line_drawn_under_another_is_named_in_the_legend():
    # the decode study's remote-rdma and remote-gdr options give the same gaps: drawn later, gdr's
    # line hides rdma's, so the legend says so instead of showing a line nobody can find
    import pandas as pd

    from kvsim.report.gap import coinciding

    frame = pd.DataFrame({"option": ["a", "a", "b", "b", "c", "c", "d", "d"],
                          "gap": [1.5, 2.0, 1.7, 2.2, 1.5, 2.0, 1.5, 2.0 * 1.001],
                          "gap_per_usd": [1.1, None, 1.2, 1.3, 1.1, None, 1.1, None]})
    assert coinciding(frame, ["a", "b", "c", "d"], ["gap", "gap_per_usd"]) == {"a": "d", "c": "d"}
    assert coinciding(frame, ["a", "b", "c", "d"], ["gap"], rel=1e-6) == {"a": "c"}
    assert coinciding(frame, ["b"], ["gap"]) == {}
