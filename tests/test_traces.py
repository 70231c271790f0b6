"""Tests for trace replay (kvsim.workload.traces).

Real files come from ``../shared/traces/`` relative to the repository root (skipped if absent);
their expected counts and means are the ones stated in that folder's README, and windowing
expectations are recomputed here from the raw rows with the standard library.
"""

import csv
import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from kvsim.rng import RandomStreams
from kvsim.workload import TraceSpec, WorkloadSpec, load_azure_2023, load_bailian, load_mooncake, open_loop_requests

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
MOONCAKE = TRACES / "mooncake_conversation_trace.jsonl"
MOONCAKE_SYNTH = TRACES / "mooncake_synthetic_trace.jsonl"
AZURE_CONV = TRACES / "AzureLLMInferenceTrace_conv_2023.csv"
AZURE_CODE = TRACES / "AzureLLMInferenceTrace_code_2023.csv"


def _need(path):
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


@pytest.fixture(scope="module")
def mooncake():
    return load_mooncake(_need(MOONCAKE))


@pytest.fixture(scope="module")
def mooncake_rows():
    return [json.loads(line) for line in _need(MOONCAKE).read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# Mooncake
# ---------------------------------------------------------------------------------------------


def test_mooncake_conversation_matches_the_readme(mooncake):
    assert len(mooncake) == 12_031
    assert mooncake.arrival_s[0] == 0.0 and mooncake.arrival_s[-1] == pytest.approx(3536.999, abs=1e-9)
    assert np.all(np.diff(mooncake.arrival_s) >= 0)
    assert abs(mooncake.input_tokens.mean() - 12_035) <= 1
    assert abs(mooncake.output_tokens.mean() - 343) <= 1
    assert mooncake.block_tokens == 512
    assert all(len(h) == math.ceil(n / 512) for h, n in zip(mooncake.hash_ids, mooncake.input_tokens.tolist()))


def test_mooncake_rows_are_read_as_written(mooncake, mooncake_rows):
    for i in (0, 1, 5000, len(mooncake_rows) - 1):
        row = mooncake_rows[i]
        assert mooncake.arrival_s[i] == row["timestamp"] / 1000.0
        assert mooncake.input_tokens[i] == row["input_length"]
        assert mooncake.output_tokens[i] == row["output_length"]
        assert mooncake.hash_ids[i].tolist() == row["hash_ids"]
        assert mooncake.hash_ids[i].dtype == np.int64


def test_mooncake_distinct_blocks_match_the_readme(mooncake):
    assert len(set(np.concatenate(mooncake.hash_ids).tolist())) == 182_790


def test_time_scale_halves_arrival_times(mooncake):
    half = load_mooncake(MOONCAKE, time_scale=0.5)
    assert np.allclose(half.arrival_s, mooncake.arrival_s * 0.5, rtol=0, atol=1e-12)
    assert half.arrival_s[-1] == pytest.approx(3536.999 / 2)
    assert np.array_equal(half.input_tokens, mooncake.input_tokens)


def test_window_and_max_requests(mooncake_rows):
    start, duration = 600.0, 300.0
    window = load_mooncake(MOONCAKE, start_s=start, duration_s=duration, time_scale=2.0)
    kept = [r for r in mooncake_rows if 600_000 <= r["timestamp"] < 900_000]
    assert len(window) == len(kept) > 100
    assert np.allclose(window.arrival_s, [(r["timestamp"] / 1000 - start) * 2.0 for r in kept], rtol=0, atol=1e-9)
    assert window.input_tokens.tolist() == [r["input_length"] for r in kept]
    assert window.arrival_s.min() >= 0 and window.arrival_s.max() < duration * 2.0
    first = load_mooncake(MOONCAKE, start_s=start, max_requests=10)
    assert first.input_tokens.tolist() == [r["input_length"] for r in kept[:10]]
    with pytest.raises(ValueError, match="no request in the window"):
        load_mooncake(MOONCAKE, start_s=10_000.0)


def test_mooncake_synthetic_matches_the_readme():
    trace = load_mooncake(_need(MOONCAKE_SYNTH))
    assert len(trace) == 3_993
    assert trace.arrival_s[-1] == pytest.approx(1022.025)
    assert abs(trace.input_tokens.mean() - 15_325) <= 1 and abs(trace.output_tokens.mean() - 149) <= 1


@pytest.mark.parametrize("row, field", [
    ({"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1]}, "hash_ids"),  # needs 2
    ({"timestamp": 5, "input_length": 600, "output_length": 3}, "hash_ids"),
    ({"timestamp": "5", "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}, "timestamp"),
    ({"timestamp": 5, "input_length": 0, "output_length": 3, "hash_ids": []}, "input_length"),
    ({"timestamp": 5, "input_length": 10, "output_length": 2.5, "hash_ids": [1]}, "output_length"),
    ({"timestamp": 5, "input_length": 10, "output_length": 3, "hash_ids": ["a"]}, "hash_ids"),
])
def test_mooncake_bad_row_names_file_line_and_field(tmp_path, row, field):
    good = {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [7]}
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + json.dumps(row) + "\n")  # line 2 blank: the bad row is line 3
    with pytest.raises(ValueError) as info:
        load_mooncake(path)
    assert f"{path}:3: {field}:" in str(info.value)


def test_mooncake_bad_json(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n{oops\n')
    with pytest.raises(ValueError, match=r"trace.jsonl:2: row: not valid JSON"):
        load_mooncake(path)


# ---------------------------------------------------------------------------------------------
# Azure 2023
# ---------------------------------------------------------------------------------------------


def _azure_reference(path):
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    stamps = [datetime.strptime(r["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f") for r in rows]
    return rows, [(s - stamps[0]).total_seconds() for s in stamps]


def test_azure_conv_matches_the_readme():
    trace = load_azure_2023(_need(AZURE_CONV))
    assert len(trace) == 19_366
    assert trace.hash_ids is None and trace.block_tokens is None
    assert abs(trace.input_tokens.mean() - 1_155) <= 1 and abs(trace.output_tokens.mean() - 211) <= 1
    assert np.median(trace.input_tokens) == 1_020 and np.median(trace.output_tokens) == 129
    # 18:15:46.68 -> 19:14:08.40 in the README
    assert trace.arrival_s[0] == 0.0 and trace.arrival_s[-1] == pytest.approx(3501.72, abs=0.01)
    rows, seconds = _azure_reference(AZURE_CONV)
    assert np.allclose(trace.arrival_s, seconds, rtol=0, atol=2e-6)  # strptime keeps 6 of 7 digits
    assert trace.input_tokens.tolist() == [int(r["ContextTokens"]) for r in rows]


def test_azure_code_matches_the_readme():
    trace = load_azure_2023(_need(AZURE_CODE))
    assert len(trace) == 8_819
    assert abs(trace.input_tokens.mean() - 2_048) <= 1 and abs(trace.output_tokens.mean() - 28) <= 1
    assert trace.arrival_s[-1] == pytest.approx(3435.95, abs=0.01)


def test_azure_fractional_seconds_and_scaling(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 23:59:59.9999999,10,2\n"
                    "2023-11-17 00:00:01.0000001,20,3\n"
                    "2023-11-17 00:00:03,30,4\n")
    trace = load_azure_2023(path, time_scale=0.5)
    assert trace.arrival_s.tolist() == [0.0, 0.5000001, 1.50000005]
    assert trace.input_tokens.tolist() == [10, 20, 30] and trace.output_tokens.tolist() == [2, 3, 4]


@pytest.mark.parametrize("line, field", [
    ("2023-11-16 18:17:0x.1,10,2", "TIMESTAMP"),
    ("2023-02-30 18:17:03.1,10,2", "TIMESTAMP"),
    ("2023-11-16 18:17:03.1,ten,2", "ContextTokens"),
    ("2023-11-16 18:17:03.1,10,0", "GeneratedTokens"),
    ("2023-11-16 18:17:03.1,10", "GeneratedTokens"),
])
def test_azure_bad_row_names_file_line_and_field(tmp_path, line, field):
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,374,44\n" + line + "\n")
    with pytest.raises(ValueError) as info:
        load_azure_2023(path)
    assert f"{path}:3: {field}:" in str(info.value)


def test_azure_bad_header(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text("time,in,out\n2023-11-16 18:17:03.9799600,374,44\n")
    with pytest.raises(ValueError, match=r"azure.csv:1: header"):
        load_azure_2023(path)


# ---------------------------------------------------------------------------------------------
# Bailian (rows written here: the real files are not available)
# ---------------------------------------------------------------------------------------------

BAILIAN_ROWS = [
    {"chat_id": 0, "parent_chat_id": -1, "timestamp": 100.0, "input_length": 40, "output_length": 20,
     "type": "text", "turn": 1, "hash_ids": [0, 1, 2]},
    {"chat_id": 1, "parent_chat_id": -1, "timestamp": 100.5, "input_length": 16, "output_length": 5,
     "type": "search", "turn": 1, "hash_ids": [7]},
    {"chat_id": 2, "parent_chat_id": 0, "timestamp": 103.25, "input_length": 90, "output_length": 11,
     "type": "text", "turn": 2, "hash_ids": [0, 1, 3, 4, 5, 6]},
]


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_bailian_rows(tmp_path):
    path = _write(tmp_path / "qwen.jsonl", BAILIAN_ROWS)
    trace = load_bailian(path)
    assert trace.arrival_s.tolist() == [0.0, 0.5, 3.25]
    assert trace.input_tokens.tolist() == [40, 16, 90] and trace.output_tokens.tolist() == [20, 5, 11]
    assert trace.block_tokens == 16
    assert [h.tolist() for h in trace.hash_ids] == [[0, 1, 2], [7], [0, 1, 3, 4, 5, 6]]
    scaled = load_bailian(path, time_scale=4.0, start_s=0.25)
    assert scaled.arrival_s.tolist() == [1.0, 12.0] and scaled.input_tokens.tolist() == [16, 90]


def test_bailian_unsorted_rows_are_sorted_stably(tmp_path):
    path = _write(tmp_path / "qwen.jsonl", [BAILIAN_ROWS[2], BAILIAN_ROWS[0], BAILIAN_ROWS[1]])
    trace = load_bailian(path)
    assert trace.arrival_s.tolist() == [0.0, 0.5, 3.25] and trace.input_tokens.tolist() == [40, 16, 90]


@pytest.mark.parametrize("change, field", [
    ({"hash_ids": [0, 1]}, "hash_ids"),  # 40 tokens need ceil(40/16) = 3 ids
    ({"hash_ids": [0, 1, 2, 3]}, "hash_ids"),
    ({"hash_ids": [0, 1, 2**63]}, "hash_ids"),
    ({"timestamp": None}, "timestamp"),
    ({"input_length": -4}, "input_length"),
    ({"output_length": "7"}, "output_length"),
    ({"parent_chat_id": -2}, "parent_chat_id"),
    ({"turn": 0}, "turn"),
    ({"type": 3}, "type"),
    ({"chat_id": None}, "chat_id"),
])
def test_bailian_bad_row_names_file_line_and_field(tmp_path, change, field):
    bad = {**BAILIAN_ROWS[0], **change}
    path = _write(tmp_path / "qwen.jsonl", BAILIAN_ROWS[:2] + [bad])
    with pytest.raises(ValueError) as info:
        load_bailian(path)
    assert f"{path}:3: {field}:" in str(info.value)


def test_bailian_missing_field(tmp_path):
    row = {k: v for k, v in BAILIAN_ROWS[1].items() if k != "turn"}
    path = _write(tmp_path / "qwen.jsonl", [BAILIAN_ROWS[0], row])
    with pytest.raises(ValueError, match=r"qwen.jsonl:2: turn: missing"):
        load_bailian(path)


# ---------------------------------------------------------------------------------------------
# TraceSpec as a workload's arrival source
# ---------------------------------------------------------------------------------------------


def test_trace_spec_in_a_workload(tmp_path):
    _write(tmp_path / "qwen.jsonl", BAILIAN_ROWS)
    spec = WorkloadSpec.model_validate({"arrival": {"kind": "trace", "format": "bailian", "file": "qwen.jsonl",
                                                    "time_scale": 2.0}})
    assert spec.trace and spec.has_hashes and not spec.closed_loop
    assert spec.block_tokens == 16 and spec.max_input_tokens is None
    requests = open_loop_requests(spec, 5.0, RandomStreams(0), base_dir=tmp_path)
    assert requests.arrival_s.tolist() == [0.0, 1.0]  # 6.5 s is cut by the 5 s duration
    direct = spec.arrival.load(tmp_path)
    assert direct.arrival_s.tolist() == [0.0, 1.0, 6.5]


def test_trace_spec_block_size_follows_the_format():
    mooncake = {"kind": "trace", "format": "mooncake", "file": "x.jsonl"}
    assert WorkloadSpec.model_validate({"arrival": mooncake}).block_tokens == 512
    assert WorkloadSpec.model_validate({"arrival": mooncake, "block_tokens": 512}).block_tokens == 512
    azure = WorkloadSpec.model_validate({"arrival": {"kind": "trace", "format": "azure_2023", "file": "a.csv"}})
    assert azure.block_tokens == 16 and not azure.has_hashes
    with pytest.raises(ValidationError, match="block_tokens"):
        WorkloadSpec.model_validate({"arrival": mooncake, "block_tokens": 16})


@pytest.mark.parametrize("fields, where", [
    ({"input_tokens": {"kind": "fixed", "value": 5}}, "input_tokens"),
    ({"output_tokens": {"kind": "fixed", "value": 5}}, "output_tokens"),
    ({"prefix": {"kind": "fixed_hit", "hit_ratio": 0.5}}, "prefix"),
])
def test_trace_workload_takes_lengths_from_the_trace(fields, where):
    with pytest.raises(ValidationError) as info:
        WorkloadSpec.model_validate({"arrival": {"kind": "trace", "format": "mooncake", "file": "x"}, **fields})
    assert where in str(info.value) and "omitted" in str(info.value)


@pytest.mark.parametrize("arrival", [
    {"kind": "trace", "format": "sharegpt", "file": "x"},  # not a format kvsim reads
    {"kind": "trace", "format": "csv", "file": "x"},  # csv needs its columns
    {"kind": "trace", "format": "mooncake", "file": "x", "time_scale": 0},
    {"kind": "trace", "format": "mooncake", "file": ""},
    {"kind": "trace", "format": "mooncake", "file": "x", "max_requests": 0},
    {"kind": "trace", "format": "mooncake", "file": "x", "speed": 2},
])
def test_invalid_trace_specs(arrival):
    with pytest.raises(ValidationError):
        TraceSpec.model_validate(arrival)


def test_trace_spec_units_and_window(tmp_path):
    spec = TraceSpec.model_validate({"kind": "trace", "format": "bailian", "file": str(tmp_path / "q.jsonl"),
                                     "start": "500 ms", "duration": "3 s"})
    assert spec.start == 0.5 and spec.duration == 3.0
    _write(tmp_path / "q.jsonl", BAILIAN_ROWS)
    assert spec.load().arrival_s.tolist() == [0.0, 2.75]
