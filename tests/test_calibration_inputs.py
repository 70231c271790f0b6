"""Calibration inputs are checked for physical sense (issue 22, item 10): ``kvsim calibrate``
refuses a measured TPOT of 0, an E2E of 1e300 s, ``max_num_seqs`` of 1e12 and every other
impossible or absurd value -- and columns that contradict each other -- with the file, the line
and the column, exit 2, one message, before anything is simulated. A ``calib.yaml`` read back by
a scenario is checked the same way. The shipped measurements and ``docs/calib_h100_vllm.yaml``
still read (``tests/test_calibration.py`` checks the fit)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from conftest import SHARED
from kvsim.cli import main

VLLM_RUNS = SHARED / "calibration" / "vllm_h100_runs.csv"
DOCS = Path(__file__).resolve().parent.parent / "docs"
STEP_HEADER = ("model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,prompt_time,token_time,"
               "e2e_time,tensor_parallel")
STEP_ROW = dict(model="llama2-70b", hardware="h100-80gb", prompt_size="512", batch_size="1", token_size="128",
                peak_power="1.0", average_power="0.7", prompt_time="83.9", token_time="37.0", e2e_time="4783",
                tensor_parallel="2")


def _runs_file(path: Path, *changes: dict[str, str]) -> Path:
    """The shipped table's first run (line 2), once per mapping of ``changes`` (one row each)."""
    lines = VLLM_RUNS.read_text(encoding="utf-8").splitlines()
    first = next(csv.DictReader(lines[:2]))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=lines[0].split(","), lineterminator="\n")
    writer.writeheader()
    for k, change in enumerate(changes or ({},)):
        writer.writerow({**first, "exp_id": f"{first['exp_id']}-{k}" if len(changes) > 1 else first["exp_id"],
                         **change})
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def _steps_file(path: Path, *changes: dict[str, str]) -> Path:
    rows = [STEP_HEADER] + [",".join({**STEP_ROW, **change}[c] for c in STEP_HEADER.split(",")) for change in changes]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def _never_simulate(monkeypatch):
    """Bad input is refused before anything is simulated: a calibration that gets as far as
    predicting a unit fails the test at once (rather than fitting for minutes)."""
    from kvsim.calibration import calibrate

    def simulate(self, values, ids):
        raise AssertionError("kvsim calibrate went on to simulate: the input was not refused")

    monkeypatch.setattr(calibrate._Predictor, "__call__", simulate)


def _refused(capsys, tmp_path, measurements: Path) -> list[str]:
    """Run ``kvsim calibrate`` on ``measurements``; return its problems after checking exit 2,
    one message and no traceback, and that nothing was written."""
    out = tmp_path / "calib.yaml"
    assert main(["calibrate", str(measurements), "--out", str(out), "--no-loo"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("kvsim calibrate: invalid input\n"), err
    assert not out.exists()
    return [line.strip() for line in err.splitlines()[1:]]


# ------------------------------------------------------------------------------ vLLM runs table


@pytest.mark.parametrize("change, column, words", [
    # the three
    ({"tpot_mean_s": "0"}, "tpot_mean_s", "must be >= 1e-06 s (a measured latency lies between one kernel launch"),
    ({"e2e_mean_s": "1e300"}, "e2e_mean_s", "must be at most 86400 s"),
    ({"max_num_seqs": "1e12"}, "max_num_seqs", "expected a number: a whole number in decimal digits"),
    ({"max_num_seqs": "1000000000000"}, "max_num_seqs", "must be at most 65,536 (vLLM's defaults are 256 to 1,024)"),
    # times: > 0, finite, below a day
    ({"ttft_mean_s": "-0.5"}, "ttft_mean_s", "must be >= 1e-06 s"),
    ({"ttft_p90_s": "inf"}, "ttft_p90_s", "expected a finite number"),
    ({"e2e_p90_s": "nan"}, "e2e_p90_s", "expected a finite number, got nan"),
    ({"e2e_p99_s": "90000"}, "e2e_p99_s", "must be at most 86400 s"),
    ({"ttft_p99_s": "0x10"}, "ttft_p99_s", "expected a number: a decimal number"),
    # counts: whole, >= 1, bounded
    ({"tp": "inf"}, "tp", "expected a number: a whole number"),
    ({"tp": "0"}, "tp", "must be >= 1"),
    ({"tp": "١"}, "tp", "expected a number: a whole number"),
    ({"tp": "2000"}, "tp", "must be at most 1,024 (a calibration run is reproduced on one node)"),
    ({"max_num_batched_tokens": "2048.5"}, "max_num_batched_tokens", "expected a number: a whole number"),
    ({"max_num_batched_tokens": "4194304"}, "max_num_batched_tokens", "must be at most 1,048,576"),
    ({"max_num_seqs": "+128"}, "max_num_seqs", "expected a number: a whole number"),
    ({"gpu_kv_blocks": "0"}, "gpu_kv_blocks", "must be >= 1"),
    ({"cpu_kv_blocks": "-1"}, "cpu_kv_blocks", "must be >= 0"),
    ({"num_requests": "0"}, "num_requests", "must be >= 1"),
    ({"max_model_len": "99999999999"}, "max_model_len", "must be at most 2,147,483,647"),
    # rates and fractions
    ({"arrival_rate_rps": "0"}, "arrival_rate_rps", "must be > 0"),
    ({"throughput_tok_s": "1e12"}, "throughput_tok_s", "must be at most 1e+09 tokens/s"),
    ({"throughput_req_s": "-3"}, "throughput_req_s", "must not be negative"),
    ({"gpu_mem_util": "1.5"}, "gpu_mem_util", "must be at most 1 (a fraction of the card's memory)"),
    ({"gpu_mem_util": "0"}, "gpu_mem_util", "must be > 0"),
    ({"mean_input_tokens": "0"}, "mean_input_tokens", "must be >= 1 tokens"),
    # the stages
    ({"arrival_detail": "0 rps x 600 s"}, "arrival_detail", "its rate must be > 0"),
    ({"arrival_detail": "2.5 rps x 600 s;60000 rps x 600 s"}, "arrival_detail", "at most 10,000 requests/s"),
    ({"arrival_detail": "1.2.3 rps x 600 s"}, "arrival_detail", "expected stages like"),
    ({"arrival_detail": "2.5 rps x 9000000 s"}, "arrival_detail", "its length must be from"),
    ({"arrival_detail": "0.001 rps x 600 s"}, "arrival_detail", "the stages send 0 requests"),
    # the workload
    ({"dataset_or_synthetic": "shared_prefix (9 sys prompts x 5 users; sys 100 + q 447 tok; ignore_eos, out 0)"},
     "dataset_or_synthetic", "out 0: every request asks for at least one output token"),
    ({"dataset_or_synthetic": "shared_prefix (0 sys prompts x 5 users; sys 100 + q 447 tok; ignore_eos, out 9)"},
     "dataset_or_synthetic", "each must be at least 1"),
    ({"dataset_or_synthetic": "shared_prefix (9 sys prompts x 5 users; sys 0 + q 1 tok; ignore_eos, out 248)"},
     "dataset_or_synthetic", "a prompt of 0 + 1 tokens: at least 2"),
    ({"dataset_or_synthetic": "shared_prefix (9999 sys prompts x 9999 users; sys 100 + q 447 tok; ignore_eos, "
                              "out 248)"}, "dataset_or_synthetic", "more than 1,000,000 distinct prompts"),
    ({"dataset_or_synthetic": "shared_prefix (9 sys prompts x 5 users; sys 100 + q ٤٤٧ tok; ignore_eos, out 248)"},
     "dataset_or_synthetic", "expected 'shared_prefix"),
    ({"precision": "INT4"}, "precision", "expected FP16, BF16 or FP8"),
])
def test_an_impossible_value_is_refused_with_file_line_and_column(tmp_path, capsys, change, column, words):
    path = _runs_file(tmp_path / "runs.csv", change)
    problems = _refused(capsys, tmp_path, path)
    assert problems[0].startswith(f"{path}:2: {column}: ") and words in problems[0], problems


@pytest.mark.parametrize("change, column, words", [
    ({"ttft_mean_s": "6.0"}, "ttft_mean_s", "6 s exceeds e2e_mean_s 5.27009 s: a request's first token comes before"),
    ({"ttft_p99_s": "7.5"}, "ttft_p99_s", "7.5 s exceeds e2e_p99_s 6.00126 s"),
    ({"ttft_p99_s": "0.07"}, "ttft_p99_s", "0.07 s is below ttft_p90_s 0.074093 s: percentiles never decrease"),
    ({"e2e_p90_s": "6.5"}, "e2e_p99_s", "6.00126 s is below e2e_p90_s 6.5 s"),
    ({"tpot_mean_s": "0.05"}, "tpot_mean_s", "0.05 s, but (e2e_mean_s - ttft_mean_s) / (output - 1) = "
                                             "(5.27009 - 0.06274) / 247 = 0.02108 s"),
    ({"max_num_batched_tokens": "64"}, "max_num_batched_tokens", "64 is below max_num_seqs 128: vLLM refuses"),
    ({"max_model_len": "512"}, "max_model_len", "512 tokens, but every request holds 547 prompt + 248 output tokens"),
    ({"num_gpus": "1"}, "num_gpus", "1 card(s), fewer than tp x dp = 2"),
    ({"num_failed": "6000"}, "num_failed", "6,000 failed of 5,100 requests sent"),
    ({"num_requests": "51000"}, "num_requests", "51,000 requests, but the stages of arrival_detail send 5,100"),
    ({"arrival_rate_rps": "42.5"}, "arrival_rate_rps", "42.5 requests/s, but the stages of arrival_detail average 4.25"),
])
def test_columns_that_contradict_each_other_are_refused(tmp_path, capsys, change, column, words):
    path = _runs_file(tmp_path / "runs.csv", change)
    problems = _refused(capsys, tmp_path, path)
    assert problems[0].startswith(f"{path}:2: {column}: {words}"), problems


@pytest.mark.parametrize("change, column, words", [
    ({"tp": "16", "num_gpus": "16"}, "tp", "16 cards, but the reproduction runs on one h100-8x node of 8 cards"),
    ({"model": "nobody/none"}, "model", "no kvsim catalog model for 'nobody/none'"),
])
def test_a_run_kvsim_cannot_reproduce_is_refused_with_its_line(tmp_path, capsys, change, column, words):
    path = _runs_file(tmp_path / "runs.csv", {}, change)
    problems = _refused(capsys, tmp_path, path)
    assert problems == [f"{path}:3: {column}: {words}" + problems[0].split(words, 1)[1]], problems


def test_many_bad_rows_are_listed_in_one_message_capped(tmp_path, capsys):
    path = _runs_file(tmp_path / "runs.csv", *({"tpot_mean_s": "0"} for _ in range(25)), {})
    problems = _refused(capsys, tmp_path, path)
    assert [p.split(": ")[0] for p in problems[:20]] == [f"{path}:{line}" for line in range(2, 22)]
    assert problems[20:] == ["... and 5 more problem(s)"]


# ------------------------------------------------------------------------------ step tables


@pytest.mark.parametrize("change, column, words", [
    ({"prompt_time": "0"}, "prompt_time", "must be >= 1e-06 s (a measured iteration lies between"),
    ({"token_time": "inf"}, "token_time", "expected a finite number"),
    ({"token_time": "4e9"}, "token_time", "must be at most 3600 s"),
    ({"batch_size": "0"}, "batch_size", "must be >= 1"),
    ({"batch_size": "1000000"}, "batch_size", "must be at most 65,536"),
    ({"prompt_size": "0x10"}, "prompt_size", "expected a number: a whole number in decimal digits"),
    ({"tensor_parallel": "2.5"}, "tensor_parallel", "expected a number: a whole number"),
    ({"prompt_size": "8192", "batch_size": "512"}, "prompt_size", "512 prompts of 8,192 tokens prefill 4,194,304"),
    ({"e2e_time": "50"}, "e2e_time", "50 ms is below prompt_time 83.9 ms"),
    ({"average_power": "1.5"}, "average_power", "1.5 is above peak_power 1"),
    ({"peak_power": "-1"}, "peak_power", "must not be negative"),
])
def test_a_step_table_row_out_of_sense_is_refused(tmp_path, capsys, change, column, words):
    path = _steps_file(tmp_path / "steps.csv", {}, change)
    problems = _refused(capsys, tmp_path, path)
    assert problems[0].startswith(f"{path}:3: {column}: ") and words in problems[0], problems


def test_a_step_table_point_on_more_cards_than_its_node_is_refused(tmp_path, capsys):
    path = _steps_file(tmp_path / "steps.csv", {}, {"tensor_parallel": "16"})
    assert _refused(capsys, tmp_path, path) == [
        f"{path}:3: tensor_parallel: 16 cards, but the reproduction runs on one h100-8x node of 8 cards"]


def test_the_shipped_measurements_still_read_whole():
    from kvsim.calibration.calibrate import load_units
    from kvsim.calibration.measurements import read_measurements

    runs = read_measurements(VLLM_RUNS)
    assert len(runs.runs) == 13
    files, units, notes = load_units([VLLM_RUNS, SHARED / "traces" / "splitwise_sim_perf_model.csv"], "h100-sxm")
    assert sum(u.kind == "vllm_run" for u in units) == 13 and any(u.kind == "step" for u in units)


# ------------------------------------------------------------------------------ calib.yaml read back

SCENARIO = """name: calibrated
duration: 20 s
model: llama-3.1-8b
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: fixed, value: 256}
  output_tokens: {kind: fixed, value: 16}
systems:
  h100: {node: h100-8x, nodes: 1, instances: 1, instance: {tp: 1}}
calibration: calib.yaml
"""


@pytest.mark.parametrize("body, where, words", [
    ("kvsim_calibration: true\naccelerator: h100-sxm\nfitted: {efficiency.memory: {value: 0.7}}\n",
     "1: kvsim_calibration", "expected format version 1, got True"),
    ("kvsim_calibration: 1.0\naccelerator: h100-sxm\nfitted: {efficiency.memory: {value: 0.7}}\n",
     "1: kvsim_calibration", "expected format version 1, got 1.0"),
    ("kvsim_calibration: 1\naccelerator: h100-sxm\nfitted:\n  efficiency.memory: {value: .nan}\n",
     "4: fitted.efficiency.memory.value", "expected a finite number, got nan"),
    ("kvsim_calibration: 1\naccelerator: h100-sxm\nfitted:\n  engine.api_s: {value: .inf}\n",
     "4: fitted.engine.api_s.value", "expected a finite number, got inf"),
    ("kvsim_calibration: 1\naccelerator: h100-sxm\nfitted:\n  engine.api_s: {value: true}\n",
     "4: fitted.engine.api_s.value", "expected a number, got 'True'"),
    ("kvsim_calibration: 1\naccelerator: h100-sxm\nfitted:\n  efficiency.memory: 0.7\n",
     "4: fitted.efficiency.memory", "expected a mapping with the fitted value"),
])
def test_a_calibration_file_read_back_is_checked_the_same_way(tmp_path, capsys, body, where, words):
    (tmp_path / "calib.yaml").write_text(body, encoding="utf-8")
    (tmp_path / "s.yaml").write_text(SCENARIO, encoding="utf-8")
    assert main(["validate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    problems = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    assert len(problems) == 1, err
    assert problems[0].startswith(f"{tmp_path / 's.yaml'}:10: calibration: {tmp_path / 'calib.yaml'}:{where}: {words}")


def test_the_shipped_calibration_file_still_reads_back(tmp_path, capsys):
    from kvsim.calibration.calibfile import read_calibration

    calibration = read_calibration(str(DOCS / "calib_h100_vllm.yaml"))  # a str path too
    assert calibration.accelerator == "h100-sxm"
    assert set(calibration.values) == {"efficiency.memory", "efficiency.kv_memory", "engine.kernel_s", "engine.api_s"}
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("calib.yaml", str(DOCS / "calib_h100_vllm.yaml")))
    assert main(["validate", str(tmp_path / "s.yaml")]) == 0, capsys.readouterr().err


# ------------------------------------------------------------------------------ limits of the CSV reader

BIG_CELL = "x" * 200_000  # over Python's CSV field limit of 131,072 characters


def test_a_cell_over_the_csv_limit_is_refused_with_its_line(tmp_path, capsys):
    # csv.Error: field larger than field limit (131072) was an internal error (exit 3)
    path = _runs_file(tmp_path / "runs.csv", {}, {"notes": BIG_CELL}, {})
    assert _refused(capsys, tmp_path, path) == [
        f"{path}:3: row: cannot read as CSV: field larger than field limit (131072)"]
    path = _steps_file(tmp_path / "steps.csv", {}, {}, {"model": BIG_CELL})
    assert _refused(capsys, tmp_path, path) == [
        f"{path}:4: row: cannot read as CSV: field larger than field limit (131072)"]


def test_a_cell_over_the_limit_keeps_the_problems_before_it(tmp_path, capsys):
    path = _runs_file(tmp_path / "runs.csv", {"tpot_mean_s": "0"}, {"notes": BIG_CELL})
    problems = _refused(capsys, tmp_path, path)
    assert [p.split(": ")[0] for p in problems] == [f"{path}:2", f"{path}:3"]
    assert problems[1] == f"{path}:3: row: cannot read as CSV: field larger than field limit (131072)"


def test_a_header_over_the_csv_limit_is_refused_on_line_1(tmp_path, capsys):
    path = tmp_path / "steps.csv"
    path.write_text(STEP_HEADER + "," + BIG_CELL + "\n", encoding="utf-8")
    assert _refused(capsys, tmp_path, path) == [
        f"{path}:1: header: cannot read as CSV: field larger than field limit (131072)"]


def test_the_kv_capacity_check_refuses_such_a_cell_with_its_line(tmp_path):
    from kvsim.calibration.measurements import MeasurementError
    from kvsim.calibration.memory_check import kv_capacity_rows

    path = _runs_file(tmp_path / "runs.csv", {"notes": BIG_CELL})
    with pytest.raises(MeasurementError) as caught:  # it read the file with csv first: csv.Error
        kv_capacity_rows(path)
    assert caught.value.problems == [f"{path}:2: row: cannot read as CSV: field larger than field limit (131072)"]


@pytest.mark.parametrize("change, column, words", [
    # 5,000 digits: Python's int() refuses over 4,300 (a message with no file, line or column)
    ({"max_num_seqs": "1" * 5000}, "max_num_seqs", "must be at most 65,536 (vLLM's defaults are 256 to 1,024), got "
                                                   "'" + "1" * 54 + "...'"),
    ({"max_num_seqs": "1" * 5000 + ".0"}, "max_num_seqs", "must be at most 65,536"),
    ({"tp": "0" * 5000 + "2"}, None, None),  # leading zeros: still 2
    ({"tp": "-" + "1" * 5000}, "tp", "must be >= 1, got '-" + "1" * 53 + "...'"),
    ({"num_requests": "9" * 19}, "num_requests", "must be at most 10,000,000 (each is simulated)"),
])
def test_a_count_of_thousands_of_digits_is_out_of_range_with_file_line_and_column(tmp_path, capsys, change, column,
                                                                                  words):
    from kvsim.calibration.measurements import read_measurements

    path = _runs_file(tmp_path / "runs.csv", {}, change)
    if column is None:
        assert read_measurements(path).runs[1].tp == 2
        return
    problems = _refused(capsys, tmp_path, path)
    assert problems[0].startswith(f"{path}:3: {column}: {words}"), problems


def test_a_step_table_count_of_thousands_of_digits_is_out_of_range(tmp_path, capsys):
    path = _steps_file(tmp_path / "steps.csv", {}, {"batch_size": "1" * 5000})
    problems = _refused(capsys, tmp_path, path)
    assert problems[0].startswith(f"{path}:3: batch_size: must be at most 65,536"), problems


def test_a_line_separator_inside_a_cell_does_not_cut_its_row(tmp_path):
    # str.splitlines ended lines at U+2028, U+0085 and the like inside a notes cell: the row was
    # cut in two and the lines after it named one line too far
    from kvsim.calibration.measurements import read_measurements

    path = _runs_file(tmp_path / "runs.csv", {"notes": "one\u2028two\x85three\x0cfour"}, {}, {})
    runs = read_measurements(path).runs
    assert [run.line for run in runs] == [2, 3, 4]
