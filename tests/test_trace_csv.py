"""CSV traces read vectorised (kvsim.workload.trace_csv): BurstGPT, a generic column mapping, and
one clear ``file:line: column: problem`` for each kind of bad row. Fixture files are written here."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from kvsim.rng import RandomStreams
from kvsim.scenario.load import parse_scenario
from kvsim.workload import CsvColumnsSpec, TraceSpec, WorkloadSpec, load_burstgpt, load_csv, open_loop_requests

BURSTGPT = """\
Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
110.5,GPT-4,417,505,922,API log
20,ChatGPT,100,7,107,Conversation log
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------- BurstGPT


def test_burstgpt_rows_sorted_failures_dropped(tmp_path):
    trace = load_burstgpt(write(tmp_path, "b.csv", BURSTGPT))
    # the 0-token response (a failed request) is dropped; times from the earliest, sorted stably
    assert trace.arrival_s.tolist() == [0.0, 15.0, 105.5]
    assert trace.input_tokens.tolist() == [472, 100, 417] and trace.output_tokens.tolist() == [18, 7, 505]
    assert trace.hash_ids is None and trace.block_tokens is None
    assert trace.input_tokens.dtype == np.int64


def test_burstgpt_window_and_scale(tmp_path):
    trace = load_burstgpt(write(tmp_path, "b.csv", BURSTGPT), time_scale=0.5, start_s=10.0, duration_s=90.0)
    assert trace.arrival_s.tolist() == [2.5]  # trace time 15 s: (15 - 10) * 0.5; 105.5 s is past [10, 100)


def test_burstgpt_missing_column_is_named_with_a_hint(tmp_path):
    path = write(tmp_path, "b.csv", BURSTGPT.replace("Request tokens", "Request token"))
    with pytest.raises(ValueError) as info:
        load_burstgpt(path)
    assert f"{path}:1: Request tokens: no such column (did you mean 'Request token'?)" in str(info.value)


# --------------------------------------------------------------------------------------- generic CSV

COLUMNS = CsvColumnsSpec(arrival="t_ms", arrival_unit="ms", input_tokens="prompt", output_tokens="gen",
                         prefix_hashes="blocks", hash_block_tokens=4)
GENERIC = """\
id,t_ms,prompt,gen,blocks
a,1500,8,3,"1 2"
b,1000,9,1,1;2;9

c,2250,3,2,[1]
"""


def test_generic_csv_with_prefix_hashes(tmp_path):
    trace = load_csv(write(tmp_path, "g.csv", GENERIC), COLUMNS)
    assert trace.arrival_s.tolist() == [0.0, 0.5, 1.25]  # sorted: b, a, c
    assert trace.input_tokens.tolist() == [9, 8, 3] and trace.output_tokens.tolist() == [1, 3, 2]
    assert trace.block_tokens == 4
    assert [h.tolist() for h in trace.hash_ids] == [[1, 2, 9], [1, 2], [1]]


@pytest.mark.parametrize("unit, times, expected", [
    ("s", ["2", "1.5"], [0.5, 0.0]),
    ("us", ["2000000", "1500000"], [0.5, 0.0]),
    ("ns", ["2000000000", "1500000000"], [0.5, 0.0]),
    ("datetime", ["2024-01-01 00:00:02.5", "2024-01-01 00:00:02"], [0.5, 0.0]),
])
def test_arrival_units(tmp_path, unit, times, expected):
    path = write(tmp_path, "u.csv", f"t,i,o\n{times[0]},5,1\n{times[1]},6,2\n")
    trace = load_csv(path, CsvColumnsSpec(arrival="t", arrival_unit=unit, input_tokens="i", output_tokens="o"))
    assert trace.arrival_s.tolist() == [expected[1], expected[0]]
    assert trace.input_tokens.tolist() == [6, 5]


BAD_ROWS = [
    ("9,nan,1,1", "prompt", "expected a whole number of tokens, got"),
    ("9,,1,1", "prompt", "an empty cell"),
    ("9,5,-2,1", "gen", "must be >= 1, got -2"),
    ("9,5,2.5,1", "gen", "expected a whole number of tokens, got"),
    ("9,5,0,1", "gen", "must be >= 1, got 0"),
    ("9,ten,1,1", "prompt", "'ten'"),
    ("x,5,1,1", "t_ms", "cannot be sorted"),
    ("nan,5,1,1", "t_ms", "cannot be sorted"),
    (",5,1,1", "t_ms", "an empty cell"),
    ("9,5,1", "blocks", "expected 4 columns, got 3"),
    ("9,5,1,1,7", "row", "expected 4 columns, got 5"),
    ("9,5,1,1 x", "blocks", "expected 64-bit integers"),
    ("9,5,1,1 2 3", "blocks", "has 3 ids, but prompt 5 needs ceil(5/4) = 2"),
    ("9,5,1,", "blocks", "has 0 ids"),
]


@pytest.mark.parametrize("row, column, words", BAD_ROWS)
def test_a_bad_row_names_file_line_and_column(tmp_path, row, column, words):
    # line 1 header, line 2 good, line 3 blank, line 4 the bad row
    path = write(tmp_path, "bad.csv", f"t_ms,prompt,gen,blocks\n0,5,1,1 2\n\n{row}\n1,5,1,3 4\n")
    with pytest.raises(ValueError) as info:
        load_csv(path, COLUMNS.model_copy(update={}))
    message = str(info.value)
    assert message.startswith(f"{path}:4: {column}: "), message
    assert words in message
    assert "\n" not in message  # one error, not one per bad row


def test_only_the_first_bad_row_is_reported(tmp_path):
    path = write(tmp_path, "bad.csv", "t,i,o\n0,5,1\n1,-1,1\n2,-3,1\n")
    with pytest.raises(ValueError) as info:
        load_csv(path, CsvColumnsSpec(arrival="t", input_tokens="i", output_tokens="o"))
    assert str(info.value) == f"{path}:3: i: must be >= 1, got -1"


def test_header_only_file_holds_no_requests(tmp_path):
    path = write(tmp_path, "empty.csv", "t,i,o\n")
    with pytest.raises(ValueError, match="holds no requests"):
        load_csv(path, CsvColumnsSpec(arrival="t", input_tokens="i", output_tokens="o"))


def test_columns_spec_rules():
    with pytest.raises(ValidationError, match="go together"):
        CsvColumnsSpec(arrival="t", input_tokens="i", output_tokens="o", prefix_hashes="h")
    with pytest.raises(ValidationError, match="columns are for format csv"):
        TraceSpec.model_validate({"kind": "trace", "format": "burstgpt", "file": "b.csv",
                                  "columns": {"arrival": "t", "input_tokens": "i", "output_tokens": "o"}})


# --------------------------------------------------------------------------------------- in a workload


def test_csv_trace_block_size_comes_from_its_columns(tmp_path):
    write(tmp_path, "g.csv", GENERIC)
    arrival = {"kind": "trace", "format": "csv", "file": "g.csv", "columns": COLUMNS.model_dump()}
    spec = WorkloadSpec.model_validate({"arrival": arrival})
    assert spec.block_tokens == 4 and spec.has_hashes
    with pytest.raises(ValidationError, match="block_tokens"):
        WorkloadSpec.model_validate({"arrival": arrival, "block_tokens": 16})
    requests = open_loop_requests(spec, 1.0, RandomStreams(0), base_dir=tmp_path)
    assert requests.arrival_s.tolist() == [0.0, 0.5]


SCENARIO = """\
name: csv-trace
duration: 200 s
model: qwen3-8b
workload:
  arrival:
    kind: trace
    format: {format}
    file: {file}
{columns}systems:
  h20: {{node: h20-8x, instance: {{tp: 1}}}}
"""


def test_scenarios_with_burstgpt_and_csv_traces_run(tmp_path):
    import kvsim

    write(tmp_path, "b.csv", BURSTGPT)
    write(tmp_path, "g.csv", GENERIC)
    burst = parse_scenario(SCENARIO.format(format="burstgpt", file="b.csv", columns=""), "s.yaml", tmp_path)
    columns = ("    columns: {arrival: t_ms, arrival_unit: ms, input_tokens: prompt, output_tokens: gen,\n"
               "              prefix_hashes: blocks, hash_block_tokens: 4}\n")
    generic = parse_scenario(SCENARIO.format(format="csv", file="g.csv", columns=columns), "s.yaml", tmp_path)
    assert generic.spec.workload.block_tokens == 4
    for scenario, finished in ((burst, 3), (generic, 3)):
        result = kvsim.run(scenario)
        assert len(result.requests_frame()) == finished


def test_a_misspelt_column_field_suggests_the_right_one(tmp_path):
    from kvsim.yaml_io import SpecError

    columns = "    columns: {arrival: t, input_token: i, output_tokens: o}\n"
    with pytest.raises(SpecError) as info:
        parse_scenario(SCENARIO.format(format="csv", file="g.csv", columns=columns), "s.yaml", tmp_path)
    assert any("input_token: unknown field (did you mean 'input_tokens'?)" in p for p in info.value.problems)
