"""Benchmark result files read directly (issue 27 item 6): ``vllm bench serve --save-result`` JSON,
GuideLLM reports and inference-perf stage reports become measured runs ``kvsim calibrate``
simulates, with the engine settings from a YAML sidecar. The fixtures
(``tests/fixtures/bench``, see its README for the source files and commits they follow) are
hand-made; every expected value below is computed by hand from them."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from kvsim.calibration.bench_files import BenchRun
from kvsim.calibration.bench_runs import arrival_times, bench_workload
from kvsim.calibration.measurements import VllmRun, read_measurements
from kvsim.cli import main

BENCH = Path(__file__).resolve().parent / "fixtures" / "bench"


def _copy(tmp_path: Path, name: str, sidecar: str | None = None) -> Path:
    """A fixture copied into ``tmp_path`` with its own sidecar text (None: the fixture's own)."""
    src = BENCH / name
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    own = src.with_name(src.stem + ".kvsim.yaml")
    if sidecar is not None:
        dst.with_name(dst.stem + ".kvsim.yaml").write_text(sidecar, encoding="utf-8")
    elif own.exists():
        shutil.copy(own, dst.with_name(own.name))
    return dst


def _edited(tmp_path: Path, name: str, **changes) -> Path:
    path = _copy(tmp_path, name)
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record))
    return path


ENGINE = ("gpu: H100-SXM-80GB\ntp: 1\nprecision: BF16\nmax_num_seqs: 256\nmax_num_batched_tokens: 8192\n"
          "prefix_cache: true\n")

# ------------------------------------------------------------------------------------------ vLLM


def test_vllm_summary_maps_ms_to_seconds_and_takes_e2e_from_its_latencies():
    (run,) = read_measurements(BENCH / "vllm_summary.json").runs
    assert isinstance(run, BenchRun) and run.source_format == "vllm_bench"
    assert run.model == "meta-llama/Llama-3.1-8B-Instruct"  # model_id: the sidecar names none
    assert run.measured["ttft_mean_s"] == pytest.approx(45.2e-3) and run.measured["tpot_mean_s"] == pytest.approx(10.15e-3)
    assert run.measured["ttft_p90_s"] is None  # only p99 was asked for (vLLM's default percentiles)
    assert run.measured["ttft_p99_s"] == pytest.approx(52.8e-3)
    assert (run.engine, run.engine_version) == ("", "")  # the sidecar names no engine version
    # no E2E summary (not in the default --percentile-metrics), but every request's latency is kept
    # and none failed: 1.30 ... 1.37 s, mean 1.335 s; p90 at rank 0.9 x 7 = 6.3: 1.36 + 0.3 x 0.01
    assert run.measured["e2e_mean_s"] == pytest.approx(1.335) and run.measured["e2e_p90_s"] == pytest.approx(1.363)
    assert (run.process, run.rate, run.burstiness, run.requests) == ("poisson", 4.0, 1.0, 8)
    assert (run.lengths, run.input_tokens, run.output_tokens) == (None, 1024, 128)  # the sidecar's lengths
    assert "as the sidecar states" in run.notes[0]
    assert (run.gpu, run.tp, run.max_num_seqs, run.max_batched_tokens, run.prefix_cache) == (
        "H100-SXM-80GB", 1, 256, 8192, True)


def test_vllm_detailed_replays_the_successful_requests_lengths():
    record = json.loads((BENCH / "vllm_detailed.json").read_text())
    (run,) = read_measurements(BENCH / "vllm_detailed.json").runs
    ok = [k for k, e in enumerate(record["errors"]) if not e]
    assert len(ok) == 10 and len(record["errors"]) == 11  # request 11 failed: not replayed
    assert run.lengths == tuple((record["input_lens"][k], record["output_lens"][k]) for k in ok)
    assert (run.process, run.rate, run.burstiness, run.requests) == ("poisson", 5.0, 0.5, 10)
    assert run.measured["e2e_p90_s"] == pytest.approx(record["p90_e2el_ms"] / 1e3)  # asked for: the summary's
    assert run.measured["ttft_p90_s"] == pytest.approx(record["p90_ttft_ms"] / 1e3)
    assert not run.prefix_cache


def test_vllm_appended_results_at_infinite_rate_with_a_cap_are_closed_loops():
    measurements = read_measurements(BENCH / "vllm_concurrency.json")
    runs = measurements.runs
    assert measurements.kind == "bench_runs" and measurements.ids == ["vllm_concurrency:1", "vllm_concurrency:2"]
    assert [(r.run_id, r.line, r.process, r.clients, r.duration_s) for r in runs] == [
        ("vllm_concurrency:1", 1, "closed_loop", 4, 21.7), ("vllm_concurrency:2", 2, "closed_loop", 8, 12.4)]
    # no per-request lengths and none in the sidecar: the means of the totals, 65,536 / 64 and 8,192 / 64
    assert (runs[0].input_tokens, runs[0].output_tokens) == (1024, 128) and "mean" in runs[0].notes[0]
    assert runs[1].measured["ttft_mean_s"] == pytest.approx(0.075)


def test_vllm_open_loop_whose_cap_never_bound_is_open(tmp_path):
    path = _edited(tmp_path, "vllm_summary.json", max_concurrency=16)  # the peak in flight was 6
    (run,) = read_measurements(path).runs
    assert run.process == "poisson" and any("never bound" in n for n in run.notes)


# -------------------------------------------------------------------------------------- GuideLLM


def test_guidellm_benchmarks_map_strategy_and_take_tpot_from_inter_token_latency():
    sync, constant = read_measurements(BENCH / "guidellm_report.json").runs
    assert (sync.process, sync.clients, sync.duration_s) == ("closed_loop", 1, 10.0)
    assert sync.model == "Qwen/Qwen3-8B" and sync.lengths == ((256, 32),) * 3  # the 3 requests kept
    # TPOT: inter_token_latency_ms (9.2 ms), not time_per_output_token_ms (which includes the first token)
    assert sync.measured["tpot_mean_s"] == pytest.approx(9.2e-3)
    assert sync.measured["ttft_mean_s"] == pytest.approx(28e-3) and sync.measured["ttft_p90_s"] == pytest.approx(
        28e-3 * 1.3)
    assert sync.measured["e2e_mean_s"] == pytest.approx(0.314)  # request_latency is in seconds already
    assert (constant.process, constant.rate, constant.requests) == ("constant", 2.0, 20)  # 2 rps x 10 s
    assert (constant.input_tokens, constant.output_tokens) == (256, 32)  # no samples kept: the means


# -------------------------------------------------------------------------------- inference-perf


def test_inference_perf_stage_with_a_shared_prefix_is_a_staged_run():
    (run,) = read_measurements(BENCH / "inference_perf" / "stage_0_lifecycle_metrics.json").runs
    assert isinstance(run, VllmRun)  # reproduced exactly as a row of the CSV runs table
    assert (run.system_prompts, run.users, run.system_tokens, run.question_tokens, run.output_tokens) == (4, 2, 128, 64, 64)
    assert run.distinct_prompts == 4 * 2  # a sidecar's own file: the prompts its config states
    ((rate, seconds),) = run.stages
    assert rate == 2.0 and math.floor(rate * seconds) == 30  # 30 requests at 2 rps
    assert run.measured == pytest.approx({"ttft_mean_s": 0.0655, "ttft_p90_s": 0.081, "ttft_p99_s": 0.0848225,
                                          "tpot_mean_s": 0.0072, "e2e_mean_s": 0.52, "e2e_p90_s": 0.55})  # seconds


def test_inference_perf_stage_without_a_workload_uses_its_mean_lengths(tmp_path):
    folder = tmp_path / "report"
    folder.mkdir()
    shutil.copy(BENCH / "inference_perf" / "stage_0_lifecycle_metrics.json", folder)
    (folder / "kvsim.yaml").write_text("model: meta-llama/Llama-3.1-8B-Instruct\n" + ENGINE)
    (run,) = read_measurements(folder / "stage_0_lifecycle_metrics.json").runs
    assert (run.process, run.rate, run.requests, run.input_tokens, run.output_tokens) == ("stages", 2.0, 30, 192, 64)


# -------------------------------------------------------------------------------------- arrivals


def _run(**kw) -> BenchRun:
    base = dict(run_id="r", line=0, source_format="vllm_bench", model="meta-llama/Llama-3.1-8B-Instruct",
                gpu="H100-SXM-80GB", tp=1, precision="BF16", max_num_seqs=64, max_batched_tokens=2048,
                prefix_cache=False, workload="w", process="poisson", rate=4.0, requests=20, input_tokens=100,
                output_tokens=10)
    return BenchRun(**{**base, **kw})


def test_arrivals_follow_the_benchmark_that_sent_them():
    assert arrival_times(_run(process="constant"), 0) == pytest.approx(np.arange(20) / 4.0)
    assert not arrival_times(_run(process="burst"), 0).any()
    times = arrival_times(_run(), 0)
    assert np.all(np.diff(times) > 0) and times[-1] == pytest.approx(20 / 4.0)  # vLLM scales to n / rate
    # Gamma gaps of shape b have CV 1 / sqrt(b): burstiness 0.25 is twice as variable as Poisson
    gaps = np.diff(arrival_times(_run(burstiness=0.25, requests=40_000), 1))
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(2.0, rel=0.1)


def test_open_loop_replay_writes_each_requests_lengths_in_order(tmp_path, monkeypatch):
    import kvsim.calibration.bench_runs as bench_runs

    monkeypatch.setattr(bench_runs, "REPLAY_DIR", tmp_path)
    run = _run(lengths=((100, 10), (200, 20), (300, 30)), requests=8)
    workload, duration = bench_workload(run, 0.5, seed=3)  # half the run: the first 4 requests
    with open(workload["arrival"]["file"], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(int(r["input_tokens"]), int(r["output_tokens"])) for r in rows] == [
        (100, 10), (200, 20), (300, 30), (100, 10)]
    times = arrival_times(run, 3)[:4]
    assert [float(r["arrival_s"]) for r in rows] == times.tolist() and duration == pytest.approx(times[-1] - times[0] + 1)
    closed, length = bench_workload(_run(process="closed_loop", clients=3, duration_s=40.0, lengths=run.lengths), 0.25, 0)
    assert closed["arrival"] == {"kind": "closed_loop", "clients": 3} and length == 10.0
    assert closed["input_tokens"] == {"kind": "empirical", "values": [100, 200, 300]}


# ------------------------------------------------------------------------------------- refusals


@pytest.fixture
def _never_simulate(monkeypatch):
    from kvsim.calibration import calibrate

    def simulate(self, values, ids):
        raise AssertionError("kvsim calibrate went on to simulate: the input was not refused")

    monkeypatch.setattr(calibrate._Predictor, "__call__", simulate)


def _refused(capsys, tmp_path, measurement: Path) -> str:
    out = tmp_path / "calib.yaml"
    assert main(["calibrate", str(measurement), "--out", str(out), "--no-loo"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("kvsim calibrate: invalid input\n"), err
    assert not out.exists()
    return err


@pytest.mark.usefixtures("_never_simulate")
@pytest.mark.parametrize("sidecar, words", [
    (None, "the engine settings are not in this file: write them in vllm_summary.kvsim.yaml"),
    (ENGINE.replace("tp: 1\n", ""), "vllm_summary.kvsim.yaml: tp: required"),
    (ENGINE.replace("tp: 1\n", "tp: two\n"), "vllm_summary.kvsim.yaml:2: tp: expected a whole number, got 'two'"),
    (ENGINE + "max_num_seq: 4\n", "vllm_summary.kvsim.yaml:7: max_num_seq: unknown field (did you mean 'max_num_seqs'?)"),
    (ENGINE.replace("H100-SXM-80GB", "H200"), "vllm_summary.kvsim.yaml:1: gpu: 'H200' is no GPU kvsim reproduces"),
    (ENGINE.replace("8192", "128"), "max_num_batched_tokens: 128 is below max_num_seqs 256"),
    (ENGINE + "engine: vLLM\nengine_version: latest\n", "vllm_summary.kvsim.yaml:8: engine_version: expected a "
                                                          "version such as 0.15.1, got 'latest'"),
])
def test_a_sidecar_problem_is_refused_with_file_line_and_field(tmp_path, capsys, sidecar, words):
    path = tmp_path / "vllm_summary.json"
    shutil.copy(BENCH / "vllm_summary.json", path)
    if sidecar is not None:
        (tmp_path / "vllm_summary.kvsim.yaml").write_text(sidecar)
    assert words in _refused(capsys, tmp_path, path)


@pytest.mark.usefixtures("_never_simulate")
@pytest.mark.parametrize("changes, words", [
    ({"mean_ttft_ms": 1e12}, "vllm_summary.json: mean_ttft_ms: 1e+09 s: a measured latency lies between"),
    ({"request_rate": -2}, "vllm_summary.json: request_rate: must be above 0"),
    ({"max_concurrency": 4}, "vllm_summary.json: max_concurrency: 4 with request_rate 4: kvsim reproduces an open loop "
                             "or a closed loop"),
    ({"ramp_up_strategy": "linear"}, "ramp_up_strategy: a ramp-up run is not reproduced"),
    ({"completed": None}, "vllm_summary.json: completed: required, not in the file"),
])
def test_a_vllm_result_that_cannot_be_reproduced_is_refused(tmp_path, capsys, changes, words):
    path = _edited(tmp_path, "vllm_summary.json", **changes)
    assert words in _refused(capsys, tmp_path, path)


@pytest.mark.usefixtures("_never_simulate")
def test_no_lengths_anywhere_is_refused_naming_the_sidecar(tmp_path, capsys):
    path = _copy(tmp_path, "vllm_summary.json", sidecar=ENGINE)
    record = json.loads(path.read_text())
    del record["total_input_tokens"], record["total_output_tokens"]
    path.write_text(json.dumps(record))
    assert "input_tokens: the file has no per-request lengths" in _refused(capsys, tmp_path, path)


@pytest.mark.usefixtures("_never_simulate")
@pytest.mark.parametrize("content, words", [
    ({"hello": 1}, "unknown benchmark result format (found hello)"),
    ([{"request": 1}], "an inference-perf per-request report; give the stage_N_lifecycle_metrics.json files"),
    ({"load_summary": {"count": 5}, "successes": {}}, "load_summary.requested_rate: not in the file: a summary report"),
])
def test_an_unknown_or_unusable_file_is_refused(tmp_path, capsys, content, words):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(content))
    (tmp_path / "kvsim.yaml").write_text("model: meta-llama/Llama-3.1-8B-Instruct\n" + ENGINE)
    assert words in _refused(capsys, tmp_path, path)


# ------------------------------------------------------------------------------------ end to end


def test_calibrate_reads_a_vllm_result_end_to_end(tmp_path, capsys):
    out = tmp_path / "calib.yaml"
    assert main(["calibrate", str(BENCH / "vllm_detailed.json"), "--out", str(out), "--no-loo",
                 "--params", "engine.api_s", "--fit-time-scale", "1"]) == 0
    err = capsys.readouterr().err
    assert "vllm_detailed: replays the file's 10 successful requests' lengths in order" in err
    import yaml

    from kvsim.calibration.calibfile import read_calibration

    document = yaml.safe_load(out.read_text())
    (data,) = document["data"]
    assert data["format"] == "bench_runs" and data["rows"] == ["vllm_detailed"]
    assert data["workloads"]["vllm_detailed"][0].startswith("replays the file's 10 successful requests")
    assert set(document["residuals"]["vllm_detailed"]) == {"ttft_mean_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s",
                                                            "e2e_mean_s", "e2e_p90_s"}
    assert set(read_calibration(out).values) == {"engine.api_s"}  # a scenario can name it


@pytest.mark.parametrize("name, requests", [("vllm_detailed.json", 10), ("vllm_summary.json", 8),
                                            ("inference_perf/stage_0_lifecycle_metrics.json", 30)])
def test_a_reproduced_open_loop_run_sends_exactly_the_files_requests(name, requests):
    from kvsim.calibration.runs import run_scenario
    from kvsim.sim import run_scenario as simulate

    (run,) = read_measurements(BENCH / name).runs
    row = simulate(run_scenario(run)).summary_frame().iloc[0]
    assert row["requests_arrived"] == requests and row["requests_completed"] == requests


def test_a_guidellm_yaml_report_reads_as_its_json(tmp_path):
    import yaml

    path = tmp_path / "guidellm_report.yaml"
    path.write_text(yaml.safe_dump(json.loads((BENCH / "guidellm_report.json").read_text())))
    shutil.copy(BENCH / "guidellm_report.kvsim.yaml", tmp_path)
    runs = read_measurements(path).runs
    assert [(r.process, r.measured) for r in runs] == [
        (r.process, r.measured) for r in read_measurements(BENCH / "guidellm_report.json").runs]


@pytest.mark.usefixtures("_never_simulate")
def test_broken_json_is_refused_with_its_line(tmp_path, capsys):
    path = _copy(tmp_path, "vllm_concurrency.json")
    lines = path.read_text().split("\n")
    path.write_text(lines[0] + "\n" + lines[1][:-5] + "\n")  # the appended second result cut short
    assert "vllm_concurrency.json:2: not JSON" in _refused(capsys, tmp_path, path)
    path.write_text('{\n  "request_rate": 4.0,\n  "model_id": oops\n}\n')
    assert "vllm_concurrency.json:3: not JSON: Expecting value" in _refused(capsys, tmp_path, path)


@pytest.mark.usefixtures("_never_simulate")
def test_a_model_kvsim_does_not_know_points_at_the_sidecar(tmp_path, capsys):
    path = _copy(tmp_path, "vllm_summary.json", sidecar="model: my-org/private-model\n" + ENGINE)
    assert ("vllm_summary.json: model: no kvsim catalog model for 'my-org/private-model'" in
            (err := _refused(capsys, tmp_path, path))) and "state model: in its sidecar" in err


def test_an_inference_perf_concurrent_stage_is_a_closed_loop(tmp_path):
    folder = tmp_path / "report"
    folder.mkdir()
    stage = json.loads((BENCH / "inference_perf" / "stage_0_lifecycle_metrics.json").read_text())
    stage["load_summary"].update(concurrency=6, requested_rate=3.7)  # the rate set at run time is not the load
    (folder / "stage_2_lifecycle_metrics.json").write_text(json.dumps(stage))
    shutil.copy(BENCH / "inference_perf" / "kvsim.yaml", folder)
    (run,) = read_measurements(folder / "stage_2_lifecycle_metrics.json").runs
    assert (run.run_id, run.process, run.clients, run.duration_s) == ("report/stage_2", "closed_loop", 6, 14.6)


def test_a_vllm_metric_written_as_zero_was_not_measured(tmp_path):
    # vLLM writes np.mean([] or 0) * 1000 = 0 when the endpoint does not stream: no TTFT, no TPOT
    path = _edited(tmp_path, "vllm_summary.json", mean_ttft_ms=0.0, mean_tpot_ms=0.0)
    (run,) = read_measurements(path).runs
    assert run.measured["ttft_mean_s"] is None and run.measured["tpot_mean_s"] is None
    assert run.measured["e2e_mean_s"] == pytest.approx(1.335) and "mean_ttft_ms is 0 in the file" in run.notes[1]


def test_a_sidecar_engine_version_sets_what_that_version_fixes(tmp_path):
    from kvsim.calibration.runs import run_scenario_raw

    path = _copy(tmp_path, "vllm_summary.json", ENGINE + "input_tokens: 1024\noutput_tokens: 128\n"
                 "engine: vLLM\nengine_version: 0.15\n")
    (run,) = read_measurements(path).runs
    assert (run.engine, run.engine_version) == ("vLLM", "0.15")  # (YAML's number 0.15, read as the version)
    assert run_scenario_raw(run)["engine"] == {"tokenizer_batch_wait_s": 0.002, "tokenizer_batch_max": 32}
    (plain,) = read_measurements(_copy(tmp_path / "x" if (tmp_path / "x").mkdir() is None else tmp_path,
                                       "vllm_summary.json")).runs
    assert "engine" not in run_scenario_raw(plain)
