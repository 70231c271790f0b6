"""Every file a scenario references is opened and checked by ``kvsim validate`` (and ``kvsim run``
stops before simulating with the same message): one ``scenario:line: field: <file>:<line>: ...``
error, exit 2, never a traceback (issue 11, item 1).

The bad files are the kinds a fuzzing campaign found passing validate or ending in a traceback:
missing files, folders, garbage, truncated JSON, header-only CSVs, NaN / negative / fractional
tokens, NUL bytes in a path, non-UTF-8 bytes, JSON rows of the wrong shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import kvsim.input_files as input_files
from kvsim.cli import main
from kvsim.input_files import InputFileError, check_utf8

SHARED_TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

HEAD = """name: files
duration: 12 s
model: qwen3-8b
workload:
"""
TAIL = """systems:
  a: {node: l20-8x, instances: 1}
"""
MOONCAKE = "  arrival: {kind: trace, format: mooncake, file: %s}\n"  # line 5 of the scenario
CSV = "  arrival: {kind: trace, format: csv, file: %s, columns: {arrival: t, input_tokens: i, output_tokens: o}}\n"
GOOD_ROW = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}


def _row(**change) -> str:
    return json.dumps({**GOOD_ROW, **change})


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _refused(tmp_path: Path, capsys, arrival: str, field: str = "workload.arrival.file", line: int = 5,
             command: str = "validate", **files: str | bytes) -> str:
    """Write ``files`` and a scenario whose workload is ``arrival`` (a line or more of YAML), run
    ``kvsim <command>`` and return the one problem, after checking the exit status, that no
    traceback is printed and that the problem starts with ``scenario:line: field: ``."""
    for name, content in files.items():
        target = tmp_path / name.replace("__", ".")
        target.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(HEAD + arrival + TAIL, encoding="utf-8")
    argv = [command, scenario] + (["--out", tmp_path / "out", "--workers", "1"] if command == "run" else [])
    rc, out, err = _cli(capsys, *argv)
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err + out
    problems = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    assert len(problems) == 1, err
    assert problems[0].startswith(f"{scenario}:{line}: {field}: "), problems[0]
    return problems[0].split(f"{field}: ", 1)[1]


# ----------------------------------------------------------------------------- the file itself


def test_a_valid_trace_validates(tmp_path, capsys):
    (tmp_path / "t.jsonl").write_text(_row() + "\n" + _row(timestamp=500) + "\n")
    (tmp_path / "s.yaml").write_text(HEAD + MOONCAKE % "t.jsonl" + TAIL)
    rc, out, err = _cli(capsys, "validate", tmp_path / "s.yaml")
    assert rc == 0, err
    assert "valid scenario" in out


def test_a_missing_file(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, MOONCAKE % "absent.jsonl")
    assert problem == f"{tmp_path / 'absent.jsonl'}: cannot read trace file: no such file"


def test_a_folder(tmp_path, capsys):
    (tmp_path / "folder.jsonl").mkdir()
    assert "is a folder, not a trace file" in _refused(tmp_path, capsys, MOONCAKE % "folder.jsonl")


def test_a_device_is_not_a_regular_file(tmp_path, capsys):
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    problem = _refused(tmp_path, capsys, MOONCAKE % "/dev/zero")
    assert problem.startswith("/dev/zero: is not a regular file")


def test_a_nul_byte_in_the_path(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, MOONCAKE % '"t\\0.jsonl"')
    assert "cannot hold a NUL byte" in problem


def test_a_file_over_the_size_limit(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(input_files, "MAX_INPUT_FILE_BYTES", 100)
    problem = _refused(tmp_path, capsys, MOONCAKE % "t.jsonl", t__jsonl=(_row() + "\n") * 3)
    assert f"{len(_row()) * 3 + 3:,} bytes is more than a trace file may hold (100 bytes" in problem


def test_garbage_bytes_name_the_offset_and_line(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, MOONCAKE % "t.jsonl",
                       t__jsonl=(_row() + "\n").encode() + b"\x00\x01garbage\xfe\n")
    offset = len(_row()) + 1 + 9
    assert problem.startswith(f"{tmp_path / 't.jsonl'}:2: not UTF-8 text: byte 0xfe at byte offset {offset}"), problem


def test_non_utf8_in_a_field_the_format_ignores(tmp_path, capsys):
    # pyarrow's JSON reader skips unknown fields without decoding them; the file is refused anyway
    rows = (_row() + "\n").encode() + b'{"note": "caf\xe9", ' + _row()[1:].encode() + b"\n"
    problem = _refused(tmp_path, capsys, MOONCAKE % "t.jsonl", t__jsonl=rows)
    assert problem.startswith(f"{tmp_path / 't.jsonl'}:2: not UTF-8 text: byte 0xe9"), problem


def test_non_utf8_in_a_csv(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, CSV % "t.csv", t__csv=b"t,i,o\n0,5,1\n1,6,2\xff\n")
    assert problem.startswith(f"{tmp_path / 't.csv'}:3: not UTF-8 text: byte 0xff at byte offset 17 (column 6)")


# ----------------------------------------------------------------------------- JSON rows


def test_truncated_json(tmp_path, capsys):
    text = _row() + "\n" + _row(timestamp=5)[:-12] + "\n"
    problem = _refused(tmp_path, capsys, MOONCAKE % "t.jsonl", t__jsonl=text)
    assert problem.startswith(f"{tmp_path / 't.jsonl'}:2: row: not valid JSON"), problem


def test_an_empty_jsonl_file(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, MOONCAKE % "t.jsonl", t__jsonl="\n\n")
    assert problem == f"{tmp_path / 't.jsonl'}: holds no requests (no data rows)"


@pytest.mark.parametrize("line, field, words", [
    ("[1, 2, 3]", "row", "expected a JSON object {...}, got an array"),
    ('"text"', "row", "expected a JSON object {...}, got a string"),
    (_row(timestamp={"ms": 1}), "timestamp", "expected a number (ms)"),
    (_row(hash_ids="1 2"), "hash_ids", "expected a list of integers, got str"),
    (_row(hash_ids=[[1], [2]]), "hash_ids", "expected 64-bit integers"),
    (_row(input_length=True), "input_length", "expected a whole number, got true"),
    (json.dumps({"timestamp": 5, "output_length": 3, "hash_ids": [1, 2]}), "input_length", "missing"),
    ("[" * 50_000 + "]" * 50_000, "row", "nested too deeply"),
    ('{"timestamp": ' + "9" * 5000 + ', "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}',
     "row", "cannot read this JSON"),
    (_row(timestamp=10**400), "timestamp", "expected a finite number (ms), got a 1329-bit integer"),
    (_row(input_length=10**30), "input_length", "must be <= 2,147,483,647"),
])
def test_json_rows_of_the_wrong_shape_name_line_and_field(tmp_path, capsys, line, field, words):
    problem = _refused(tmp_path, capsys, MOONCAKE % "t.jsonl", t__jsonl=_row() + "\n\n" + line + "\n")
    assert problem.startswith(f"{tmp_path / 't.jsonl'}:3: {field}: "), problem
    assert words in problem
    assert len(problem) < 400  # a huge bad value is cut, not echoed


@pytest.mark.parametrize("change, field, words", [
    ({"input_length": 600.5}, "input_length", "expected a whole number, got 600.5"),
    ({"input_length": -3, "hash_ids": []}, "input_length", "must be >= 1, got -3"),
    ({"output_length": 0}, "output_length", "must be >= 1, got 0"),
    ({"timestamp": float("nan")}, "timestamp", "expected a finite number (ms), got nan"),
    ({"timestamp": -5}, "timestamp", "must not be negative, got -5"),
])
def test_bad_jsonl_values(tmp_path, capsys, change, field, words):
    problem = _refused(tmp_path, capsys, MOONCAKE % "t.jsonl", t__jsonl=_row() + "\n" + _row(**change) + "\n")
    assert problem.startswith(f"{tmp_path / 't.jsonl'}:2: {field}: {words}"), problem


# ----------------------------------------------------------------------------- CSV rows


def test_a_header_only_csv(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, CSV % "t.csv", t__csv="t,i,o\n")
    assert problem == f"{tmp_path / 't.csv'}: holds no requests: no data row after the header (line 1)"


def test_an_empty_csv(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, CSV % "t.csv", t__csv="")
    assert problem.startswith(f"{tmp_path / 't.csv'}:1: header: expected a header line naming the columns")


def test_a_binary_csv_header_is_shown_escaped(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, CSV % "t.csv", t__csv=b"\x00\x01\x1b[2J,i,o\n0,1,1\n")
    assert problem.startswith(f"{tmp_path / 't.csv'}:1: t: no such column; columns: '\\x00\\x01\\x1b[2J'"), problem


@pytest.mark.parametrize("row, column, words", [
    ("1,nan,5", "i", "expected a whole number of tokens, got nan"),
    ("1,NA,5", "i", "expected a whole number of tokens, got 'NA'"),
    ("1,,5", "i", "expected a whole number of tokens, got an empty cell"),
    ("1,-20,5", "i", "must be >= 1, got -20"),
    ("1,20.5,5", "i", "expected a whole number of tokens, got 20.5"),
    ("1,99999999999,5", "i", "must be <= 2,147,483,647, got 99999999999"),
    ("1,1e3,5", "i", "expected a whole number of tokens, got 1e3 (plain decimal digits"),
    ("1,20,inf", "o", "expected a whole number of tokens, got inf"),
    ("nan,20,5", "t", "expected a finite number (s), got nan"),
    ("-1,20,5", "t", "must not be negative, got -1"),
    ("1,20", "o", "expected 3 columns, got 2"),
])
def test_bad_csv_rows_name_line_and_column(tmp_path, capsys, row, column, words):
    problem = _refused(tmp_path, capsys, CSV % "t.csv", t__csv=f"t,i,o\n0,10,5\n\n{row}\n")
    assert problem.startswith(f"{tmp_path / 't.csv'}:4: {column}: {words}"), problem


def test_unsorted_timestamps_are_sorted_not_refused(tmp_path, capsys):
    # the loaders' convention: rows out of time order are sorted (stably), not refused
    (tmp_path / "t.csv").write_text("t,i,o\n5,10,5\n1,20,5\n3,30,5\n")
    (tmp_path / "s.yaml").write_text(HEAD + CSV % "t.csv" + TAIL)
    rc, out, err = _cli(capsys, "validate", tmp_path / "s.yaml")
    assert rc == 0, err
    from kvsim.workload import CsvColumnsSpec, load_csv
    trace = load_csv(tmp_path / "t.csv", CsvColumnsSpec(arrival="t", input_tokens="i", output_tokens="o"))
    assert trace.arrival_s.tolist() == [0.0, 2.0, 4.0] and trace.input_tokens.tolist() == [20, 30, 10]


# ----------------------------------------------------------------------------- where in the scenario


def test_run_stops_before_simulating_with_the_same_message(tmp_path, capsys):
    files = {"t__csv": "t,i,o\n0,10,5\n1,-20,5\n"}
    said = _refused(tmp_path, capsys, CSV % "t.csv", **files)
    assert _refused(tmp_path, capsys, CSV % "t.csv", command="run", **files) == said
    assert not (tmp_path / "out").exists()  # refused before the results folder is made


def test_a_trace_phase_is_checked_naming_the_phase(tmp_path, capsys):
    arrival = ("  arrival:\n    kind: phases\n    phases:\n"
               "      - {duration: 5 s, arrival: {kind: poisson, rate: 1/s}, input_tokens: {kind: fixed, value: 9},"
               " output_tokens: {kind: fixed, value: 9}}\n"
               "      - {duration: 5 s, arrival: {kind: trace, format: mooncake, file: t.jsonl}}\n")
    problem = _refused(tmp_path, capsys, arrival, "workload.arrival.phases[1].arrival.file", 9,
                       t__jsonl=_row(output_length=-1) + "\n")
    assert problem.startswith(f"{tmp_path / 't.jsonl'}:1: output_length: must be >= 1")


def test_a_trace_window_with_no_request(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, "  arrival: {kind: trace, format: mooncake, file: t.jsonl, start: 100 s}\n",
                       t__jsonl=_row() + "\n")
    assert "no request in the window [100 s, end)" in problem


def test_a_bad_swept_trace_names_the_sweep_key_and_points(tmp_path, capsys):
    (tmp_path / "good.jsonl").write_text(_row() + "\n")
    (tmp_path / "bad.jsonl").write_text(_row(input_length=0) + "\n")
    text = HEAD + MOONCAKE % "good.jsonl" + TAIL + "sweep:\n  workload.arrival.file: [good.jsonl, bad.jsonl]\n"
    (tmp_path / "s.yaml").write_text(text)
    rc, out, err = _cli(capsys, "validate", tmp_path / "s.yaml")
    assert rc == 2 and "Traceback" not in err
    assert (f"{tmp_path / 's.yaml'}:9: sweep.workload.arrival.file: at sweep point "
            f"[workload.arrival.file=bad.jsonl]: {tmp_path / 'bad.jsonl'}:1: input_length: must be >= 1") in err


def test_a_bad_trace_under_an_unrelated_sweep_is_blamed_on_its_file_line(tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text(_row(input_length=0) + "\n")
    text = HEAD + MOONCAKE % "bad.jsonl" + TAIL + "sweep:\n  workload.arrival.time_scale: [1.0, 2.0]\n"
    (tmp_path / "s.yaml").write_text(text)
    rc, out, err = _cli(capsys, "validate", tmp_path / "s.yaml")
    assert rc == 2
    problems = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    assert problems == [f"{tmp_path / 's.yaml'}:5: workload.arrival.file: {tmp_path / 'bad.jsonl'}:1: input_length: "
                        "must be >= 1, got 0"]


# ----------------------------------------------------------------------------- length and calibration files


LENGTHS = ("  arrival: {kind: poisson, rate: 1/s}\n"
           "  input_tokens: {kind: empirical, file: %s}\n"  # line 6
           "  output_tokens: {kind: fixed, value: 10}\n")


@pytest.mark.parametrize("name, content, words", [
    ("absent.txt", None, "absent.txt: cannot read length file: no such file"),
    ("l.txt", "100 200\n300 abc\n", "l.txt:2: value: number 4: expected a whole number of tokens, got 'abc'"),
    ("l.txt", "100 2.5\n", "l.txt:1: value: number 2: expected a whole number of tokens, got 2.5"),
    ("l.txt", "100\n\n-4\n", "l.txt:3: value: number 2: must be >= 1, got -4"),
    ("l.txt", " \n", "l.txt: holds no token lengths"),
    ("l.txt", b"100\n\xff\n", "l.txt:2: not UTF-8 text: byte 0xff"),
    ("l.csv", "a,n\n1,5\n", "l.csv: a CSV file needs column"),
    ("l.jsonl", '{"n": 5}\n', "l.jsonl: a JSONL file needs column"),
])
def test_bad_length_files(tmp_path, capsys, name, content, words):
    if content is not None:
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    problem = _refused(tmp_path, capsys, LENGTHS % name, "workload.input_tokens.file", 6)
    assert problem.startswith(f"{tmp_path}/{words}"), problem


@pytest.mark.parametrize("content, words", [
    ('{"n": 5}\n[5]\n', "l.jsonl:2: row: expected a JSON object {...}, got an array"),
    ('{"n": 5}\n{"m": 5}\n', "l.jsonl:2: n: missing"),
    ('{"n": 5}\n{"n": 5.5}\n', "l.jsonl:2: n: expected a whole number, got 5.5"),
    ('{"n": 5}\n{"n": "5"}\n', "l.jsonl:2: n: expected a whole number, got '5'"),
])
def test_bad_jsonl_length_files(tmp_path, capsys, content, words):
    (tmp_path / "l.jsonl").write_text(content)
    problem = _refused(tmp_path, capsys, LENGTHS.replace("file: %s", "file: l.jsonl, column: n"),
                       "workload.input_tokens.file", 6)
    assert problem.startswith(f"{tmp_path}/{words}"), problem


def test_a_csv_length_file_reads_its_column(tmp_path, capsys):
    (tmp_path / "l.csv").write_text("a,n\n1,5\n2,7\n")
    (tmp_path / "s.yaml").write_text(HEAD + LENGTHS.replace("file: %s", "file: l.csv, column: n") + TAIL)
    from kvsim.scenario.load import load_scenario

    assert load_scenario(tmp_path / "s.yaml").spec.workload.input_tokens.values == [5, 7]
    problem = _refused(tmp_path, capsys, LENGTHS.replace("file: %s", "file: l.csv, column: m"),
                       "workload.input_tokens.file", 6)
    assert problem == f"{tmp_path / 'l.csv'}:1: m: no such column; columns: a, n"


def test_a_length_file_in_a_phase_is_read(tmp_path, capsys):
    (tmp_path / "l.txt").write_text("100 200 300\n")
    arrival = ("  arrival:\n    kind: phases\n    phases:\n"
               "      - {duration: 5 s, arrival: {kind: poisson, rate: 1/s}, input_tokens: {kind: empirical, "
               "file: l.txt}, output_tokens: {kind: fixed, value: 9}}\n")
    (tmp_path / "s.yaml").write_text(HEAD + arrival + TAIL)
    from kvsim.scenario.load import load_scenario

    phase = load_scenario(tmp_path / "s.yaml").spec.workload.arrival.phases[0]
    assert phase.input_tokens.values == [100, 200, 300]
    (tmp_path / "l.txt").write_text("100 0\n")
    problem = _refused(tmp_path, capsys, arrival, "workload.arrival.phases[0].input_tokens.file", 8)
    assert problem.startswith(f"{tmp_path / 'l.txt'}:1: value: number 2: must be >= 1")


def test_a_swept_length_file_takes_effect_and_is_checked(tmp_path, capsys):
    # each point reads its own file (the values read for the file as written once leaked into
    # every point); a bad one is named with the sweep key and its point
    (tmp_path / "a.txt").write_text("100 200\n")
    (tmp_path / "b.txt").write_text("5000\n")
    (tmp_path / "bad.txt").write_text("5000 0\n")
    text = HEAD + LENGTHS % "a.txt" + TAIL + "sweep:\n  workload.input_tokens.file: [a.txt, b.txt]\n"
    (tmp_path / "s.yaml").write_text(text)
    from kvsim.scenario.load import load_scenario

    scenario = load_scenario(tmp_path / "s.yaml")
    assert [p.spec.workload.input_tokens.values for p in scenario.points] == [[100, 200], [5000]]
    changed = scenario.with_changes({"workload.input_tokens.file": str(tmp_path / "b.txt"), "sweep": {}})
    assert changed.spec.workload.input_tokens.values == [5000]
    (tmp_path / "s.yaml").write_text(text.replace("[a.txt, b.txt]", "[a.txt, bad.txt]"))
    rc, out, err = _cli(capsys, "validate", tmp_path / "s.yaml")
    assert rc == 2 and "Traceback" not in err
    assert (f"{tmp_path / 's.yaml'}:11: sweep.workload.input_tokens.file: at sweep point "
            f"[workload.input_tokens.file=bad.txt]: workload.input_tokens.file: {tmp_path / 'bad.txt'}:1: value: "
            "number 2: must be >= 1, got 0") in err, err


@pytest.mark.parametrize("name, words", [
    ('"c\\0.yaml"', "cannot hold a NUL byte"),
    ("folder", "is a folder, not a calibration file"),
])
def test_bad_calibration_paths(tmp_path, capsys, name, words):
    (tmp_path / "folder").mkdir()
    (tmp_path / "t.jsonl").write_text(_row() + "\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(HEAD + MOONCAKE % "t.jsonl" + TAIL + f"calibration: {name}\n")
    rc, out, err = _cli(capsys, "validate", scenario)
    assert rc == 2 and "Traceback" not in err, err
    assert f"{scenario}:8: calibration: " in err and words in err


# ----------------------------------------------------------------------------- shipped data, size


def test_utf8_check_across_chunk_boundaries(tmp_path, monkeypatch):
    # a tiny chunk puts multi-byte characters and the bad byte on every side of a boundary
    monkeypatch.setattr(input_files, "_CHUNK_BYTES", 3)
    good = "ab\nc\u00e9d\n\u20ac\u20ac\n".encode()
    for cut in range(len(good) + 1):
        data = good[:cut] + b"\xff" + good[cut:]
        path = tmp_path / "f.txt"
        path.write_bytes(data)
        with pytest.raises(InputFileError) as info:
            check_utf8(path)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            offset = exc.start
        line = data[:offset].count(b"\n") + 1
        column = offset - (data[:offset].rfind(b"\n") + 1) + 1
        assert info.value.line == line, (cut, str(info.value))
        assert f"at byte offset {offset} (column {column})" in str(info.value), (cut, str(info.value))
    path.write_bytes(good)
    check_utf8(path)  # no error


@pytest.mark.parametrize("name, fmt", [
    ("mooncake_conversation_trace.jsonl", "mooncake"),
    ("mooncake_synthetic_trace.jsonl", "mooncake"),
    ("AzureLLMInferenceTrace_code_2023.csv", "azure_2023"),
    ("AzureLLMInferenceTrace_conv_2023.csv", "azure_2023"),
])
def test_the_shipped_traces_validate(tmp_path, capsys, name, fmt):
    trace = SHARED_TRACES / name
    if not trace.exists():
        pytest.skip(f"{trace} not present")
    (tmp_path / "s.yaml").write_text(HEAD + f"  arrival: {{kind: trace, format: {fmt}, file: {trace}}}\n"
                                     + TAIL.replace("instances: 1", "instances: 8"))
    rc, out, err = _cli(capsys, "validate", tmp_path / "s.yaml")
    assert rc == 0, err


def test_the_shipped_scenarios_that_reference_files_validate(capsys):
    referencing = [p for p in sorted(SCENARIOS.glob("*.yaml"))
                   if any(word in p.read_text() for word in ("kind: trace", "kind: empirical", "calibration:"))]
    if not (SHARED_TRACES.exists() and referencing):
        pytest.skip("no shipped scenario references a file here")
    for path in referencing:  # every shipped scenario validates: tests/test_headline.py
        rc, out, err = _cli(capsys, "validate", path)
        assert rc == 0, (path, err)


def test_a_million_row_csv_validates(tmp_path, capsys):
    # the checks are vectorised: validate reads this file (twice: the check, then the request
    # count) in about a second on one idle core; nothing is asserted about time here
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(0)
    n = 1_000_000
    rows = pa.table({"t": np.round(np.cumsum(rng.exponential(0.01, n)), 4), "i": rng.integers(1, 8192, n),
                     "o": rng.integers(1, 1024, n)})
    with pa.OSFile(str(tmp_path / "t.csv"), "wb") as sink:
        sink.write(b"t,i,o\n")
        pacsv.write_csv(rows, sink, pacsv.WriteOptions(include_header=False))
    (tmp_path / "s.yaml").write_text(HEAD + CSV % "t.csv" + TAIL)
    rc, out, err = _cli(capsys, "validate", tmp_path / "s.yaml")
    assert rc == 0, err
    with open(tmp_path / "t.csv", "a") as handle:  # and a bad last row is still found, by its line
        handle.write("1e5,5,-1\n")
    problem = _refused(tmp_path, capsys, CSV % "t.csv")
    assert problem == f"{tmp_path / 't.csv'}:{n + 2}: o: must be >= 1, got -1"
