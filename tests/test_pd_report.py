"""The P:D study report: tables, flags, per-card and per-dollar figures, the timeline figure."""

from __future__ import annotations

import pandas as pd

from kvsim.cli import main

SCENARIO = """
name: pd-report
seed: 2
duration: 60 s
warmup: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 6/s}
  input_tokens: {kind: fixed, value: 2000}
  output_tokens: {kind: fixed, value: 100}
slo: {ttft_p99: 2 s, tpot_p99: 60 ms}
systems:
  colocated: {node: h20-8x, instances: 2}
  pd:
    pools:
      h20: {node: h20-8x, instances: 2, roles: {prefill: 1, decode: 1}}
  starved:
    pools:
      h20: {node: h20-8x, instances: 2, roles: {prefill: 1, decode: 1}, instance: {max_batched_tokens: 256}}
    controller: {kind: threshold, signal: prefill_queue, interval: 10 s, low: 100, high: 1000}
study: {kind: pd, x: workload.arrival.rate, timeline: [pd, starved]}
sweep:
  workload.arrival.rate: [2/s, 6/s]
"""


def test_run_writes_the_pd_tables_flags_and_figures(tmp_path, capsys):
    source = tmp_path / "s.yaml"
    source.write_text(SCENARIO, encoding="utf-8")
    out = tmp_path / "out"
    assert main(["run", str(source), "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    for name in ("pd.md", "pd.csv", "pd_goodput.png", "pd_timeline.png", "decisions.parquet"):
        assert (out / name).stat().st_size > 0, name
    frame = pd.read_csv(out / "pd.csv", keep_default_na=False)
    assert set(frame.system) == {"colocated", "pd", "starved"}
    row = frame[(frame.system == "pd") & (frame["workload.arrival.rate"] == "2/s")].iloc[0]
    assert row.p_d_cards == "1:1" and row.cards == 2 and row.flag == ""
    assert abs(row.goodput_per_card_rps - row.goodput_rps / 2) < 1e-12
    assert row.goodput_per_musd_rps != ""  # an H20 server has a catalog price
    assert row.handoff_mb_per_request == 2000 * 147_456 / 1e6
    # 6/s of 2,000-token prompts through one prefill instance with a 256-token budget cannot keep up
    starved = frame[(frame.system == "starved") & (frame["workload.arrival.rate"] == "6/s")].iloc[0]
    assert "unstable" in starved.flag and starved.controller == "threshold on prefill_queue"
    text = (out / "pd.md").read_text()
    assert "(unstable" in text and "## workload.arrival.rate = 6/s" in text
