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
