"""The options study: systems that differ in one choice, compared per swept x and load."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.cli import main
from kvsim.report.options import options_figure, options_frame, options_markdown

SCENARIO = """name: opts
duration: 40 s
warmup: 10 s
model: llama-3.1-8b
slo: {{ttft_p99: {ttft}, tpot_p99: 100 ms}}
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: 1 s}}
  prefix: {{kind: shared_documents, documents: 2, zipf_s: 0.0, document_tokens: {{kind: fixed, value: 2048}},
           suffix_tokens: {{kind: fixed, value: 64}}}}
  output_tokens: {{kind: fixed, value: 16}}
systems:
  cold: {{node: h100-8x, instances: 1, instance: {{tp: 1}}}}
  cached: {{node: h100-8x, instances: 1, instance: {{tp: 1}}, kv_cache: {{}}}}
sweep:
  workload.prefix.document_tokens.value: [1024, 4096]
  workload.arrival.clients: [1, 4]
study: {{kind: options, reference: cold, x: workload.prefix.document_tokens.value, load: workload.arrival.clients}}
"""


def test_frame_speed_up_capacity_and_outputs(tmp_path):
    result = kvsim.run(kvsim.parse_scenario(SCENARIO.format(ttft="2 s"), "opts.yaml"))
    frame = options_frame(result)
    assert list(frame.x) == [1024, 1024, 4096, 4096] and list(frame.system) == ["cold", "cached"] * 2
    for x, rows in frame.groupby("x"):
        cold, cached = rows.iloc[0], rows.iloc[1]
        # the speed-up is the reference's TTFT p50 over the option's, at the lightest load
        light = {s: result.run(s, next(p for p in result.points() if result.run(s, p).params ==
                                       {"workload.prefix.document_tokens.value": x, "workload.arrival.clients": 1}))
                 for s in ("cold", "cached")}
        assert cold.ttft_speedup == pytest.approx(1.0)
        assert cached.ttft_speedup == pytest.approx(light["cold"].summary["ttft_s"]["p50"]
                                                    / light["cached"].summary["ttft_s"]["p50"])
        assert cached.ttft_speedup > 1.5 and cached.hit_rate > 0.5 and cold.hit_rate == 0.0
        # both loads meet a loose SLO: capacity is at least the highest load swept
        assert (cold.capacity, cold.capacity_flag) == (4, ">=") and cached.capacity_flag == ">="
    text = options_markdown(result, frame)
    assert "## shared_documents" not in text and "| cached |" in text and ">=4" in text
    png = options_figure(result, tmp_path / "o.png", frame)
    assert png.stat().st_size > 10_000


def test_capacity_below_the_lightest_load_is_flagged():
    result = kvsim.run(kvsim.parse_scenario(SCENARIO.format(ttft="1 ms"), "opts.yaml"))
    frame = options_frame(result)
    assert (frame.capacity_flag == "<").all() and frame.capacity.isna().all()
    assert "< 1" in options_markdown(result, frame)


@pytest.mark.parametrize("change, message", [
    ("reference: cold", "reference: nope"),
    ("x: workload.prefix.document_tokens.value", "x: workload.output_tokens.value"),
])
def test_bad_study_fields_are_refused(tmp_path, capsys, change, message):
    text = SCENARIO.format(ttft="2 s").replace(change, message)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml:" in err and "study." in err and "Traceback" not in err


def test_capacity_needs_an_slo(tmp_path, capsys):
    text = SCENARIO.format(ttft="2 s").replace("slo: {ttft_p99: 2 s, tpot_p99: 100 ms}\n", "")
    path = tmp_path / "noslo.yaml"
    path.write_text(text)
    assert main(["validate", str(path)]) == 2
    assert "give slo.ttft_p99" in capsys.readouterr().err


def test_a_swept_rate_is_a_number_for_capacity():
    text = (SCENARIO.format(ttft="2 s")
            .replace("arrival: {kind: closed_loop, clients: 1, think_time: 1 s}", "arrival: {kind: poisson, rate: 1/s}")
            .replace("workload.arrival.clients: [1, 4]", "workload.arrival.rate: [8/s, 16/s]")
            .replace("load: workload.arrival.clients", "load: workload.arrival.rate"))
    result = kvsim.run(kvsim.parse_scenario(text, "rates.yaml"))
    frame = options_frame(result)
    assert set(frame.light_load) == {8.0}  # "8/s" < "16/s" as rates, not as strings
    assert "capacity (rate)" in options_markdown(result, frame)


def test_without_a_load_each_x_is_one_row_per_system_and_no_capacity(tmp_path):
    text = (SCENARIO.format(ttft="2 s")
            .replace("  workload.arrival.clients: [1, 4]\n", "")
            .replace(", load: workload.arrival.clients", ""))
    result = kvsim.run(kvsim.parse_scenario(text, "noload.yaml"))
    frame = options_frame(result)
    assert len(frame) == 4 and frame.capacity.isna().all() and (frame.capacity_flag == "").all()
    assert "| cold |" in options_markdown(result, frame)
    assert options_figure(result, tmp_path / "n.png", frame).stat().st_size > 10_000
