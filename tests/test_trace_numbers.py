"""How numbers are written in trace and length files (issue 22, item 11).

A token count in a CSV trace, a length file or a CSV prefix-hash column is plain decimal digits
(spaces around it ignored); anything else -- ``0x10``, ``1e3``, ``1_000``, ``+5``, ``٣``, ``inf``,
``nan``, ``12.5``, ``12.0`` -- is refused with the file, the column and the line, not read as
some number. Numeric timestamps are decimal numbers (a fraction and an exponent are fine; hex,
separators, a plus sign are not). In JSONL traces, counts are JSON integers: ``true`` and ``40.0``
are refused. Every refusal goes through ``kvsim validate``: exit 2, one message, no traceback.
"""

from __future__ import annotations

import json

import pytest

from kvsim.cli import main

HEAD = """name: numbers
duration: 12 s
model: qwen3-8b
workload:
"""
TAIL = """systems:
  a: {node: l20-8x, instances: 1}
"""
CSV = ("  arrival: {kind: trace, format: csv, file: t.csv, columns: {arrival: t, arrival_unit: ms, "
       "input_tokens: prompt, output_tokens: gen}}\n")  # line 5
HASHED = ("  arrival: {kind: trace, format: csv, file: t.csv, columns: {arrival: t, input_tokens: prompt, "
          "output_tokens: gen, prefix_hashes: blocks, hash_block_tokens: 4}}\n")
LENGTHS = ("  arrival: {kind: poisson, rate: 1/s}\n"
           "  input_tokens: {kind: empirical, file: l.txt}\n"  # line 6
           "  output_tokens: {kind: fixed, value: 10}\n")
MOONCAKE = "  arrival: {kind: trace, format: mooncake, file: t.jsonl}\n"
JSONL_LENGTHS = ("  arrival: {kind: poisson, rate: 1/s}\n"
                 "  input_tokens: {kind: empirical, file: l.jsonl, column: n}\n"
                 "  output_tokens: {kind: fixed, value: 10}\n")
GOOD_ROW = {"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}


def _validate(tmp_path, capsys, workload, files):
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(HEAD + workload + TAIL, encoding="utf-8")
    rc = main(["validate", str(scenario)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return rc, captured.out, captured.err


def _refused(tmp_path, capsys, workload, files, field="workload.arrival.file", line=5):
    rc, out, err = _validate(tmp_path, capsys, workload, files)
    assert rc == 2, (out, err)
    problems = [p.strip() for p in err.splitlines() if p.startswith("  ")]
    assert len(problems) == 1, err
    prefix = f"{tmp_path / 's.yaml'}:{line}: {field}: "
    assert problems[0].startswith(prefix), problems[0]
    return problems[0][len(prefix):]


ODD_COUNTS = ["0x10", "1e3", "1_000", "+5", "٣", "١٢", "inf", "nan", "12.5", "12.0", "1,000", "1 000", "0b11", "NA"]


@pytest.mark.parametrize("cell", ODD_COUNTS)
def test_a_csv_token_count_not_in_decimal_digits_is_refused(tmp_path, capsys, cell):
    csv = f't,prompt,gen\n0,10,5\n1500,"{cell}",5\n'
    problem = _refused(tmp_path, capsys, CSV, {"t.csv": csv})
    assert problem.startswith(f"{tmp_path / 't.csv'}:3: prompt: expected a whole number of tokens, got "), problem
    assert "plain decimal digits" in problem


@pytest.mark.parametrize("cell", ["0x10", "1e3", "+5", "٣", "12.0"])
def test_the_output_column_and_a_length_file_follow_the_same_rule(tmp_path, capsys, cell):
    problem = _refused(tmp_path, capsys, CSV, {"t.csv": f"t,prompt,gen\n0,10,5\n\n1500,10,{cell}\n"})
    assert problem.startswith(f"{tmp_path / 't.csv'}:4: gen: expected a whole number of tokens, got "), problem
    problem = _refused(tmp_path, capsys, LENGTHS, {"l.txt": f"100 200\n{cell}\n"}, "workload.input_tokens.file", 6)
    assert problem.startswith(f"{tmp_path / 'l.txt'}:2: value: number 3: expected a whole number of tokens"), problem


def test_decimal_counts_are_read_as_written(tmp_path, capsys):
    # spaces around a cell are ignored (as around the header's names); leading zeros are decimal
    from kvsim.workload import CsvColumnsSpec, load_csv

    (tmp_path / "t.csv").write_text('t,prompt,gen\n0, 12 ,5\n1500,0012,\t7\n')
    rc, out, err = _validate(tmp_path, capsys, CSV, {})
    assert rc == 0, err
    trace = load_csv(tmp_path / "t.csv", CsvColumnsSpec(arrival="t", arrival_unit="ms", input_tokens="prompt",
                                                        output_tokens="gen"))
    assert trace.input_tokens.tolist() == [12, 12] and trace.output_tokens.tolist() == [5, 7]


@pytest.mark.parametrize("cell, words", [
    ("0x10", "expected a decimal number (ms) such as 12, 1.5 or 1.7e9, got '0x10'"),
    ("1_000", "expected a decimal number (ms) such as 12, 1.5 or 1.7e9, got '1_000'"),
    ("+5", "expected a decimal number (ms) such as 12, 1.5 or 1.7e9, got +5"),
    ("٣", "expected a decimal number (ms) such as 12, 1.5 or 1.7e9, got '٣'"),
    ("inf", "expected a finite number (ms), got inf"),
    ("1e999", "expected a finite number (ms), got 1e999"),
])
def test_a_timestamp_not_written_as_a_decimal_number_is_refused(tmp_path, capsys, cell, words):
    problem = _refused(tmp_path, capsys, CSV, {"t.csv": f't,prompt,gen\n0,10,5\n"{cell}",10,5\n'})
    assert problem.startswith(f"{tmp_path / 't.csv'}:3: t: {words}"), problem


def test_decimal_timestamps_with_a_fraction_or_an_exponent_are_read(tmp_path, capsys):
    from kvsim.workload import CsvColumnsSpec, load_csv

    (tmp_path / "t.csv").write_text("t,prompt,gen\n1.5e3,10,5\n 1000 ,10,5\n.5e3,10,5\n")
    rc, out, err = _validate(tmp_path, capsys, CSV, {})
    assert rc == 0, err
    trace = load_csv(tmp_path / "t.csv", CsvColumnsSpec(arrival="t", arrival_unit="ms", input_tokens="prompt",
                                                        output_tokens="gen"))
    assert trace.arrival_s.tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("ids", ["1 0x10", "1 +5", "1 1_0", "1 ٣", "1 2.0"])
def test_prefix_hash_ids_are_decimal_integers(tmp_path, capsys, ids):
    csv = f't,prompt,gen,blocks\n0,8,5,"1 2"\n1,8,5,"{ids}"\n'
    problem = _refused(tmp_path, capsys, HASHED, {"t.csv": csv})
    assert problem.startswith(f"{tmp_path / 't.csv'}:3: blocks: expected 64-bit integers in decimal digits"), problem


@pytest.mark.parametrize("value, words", [
    (True, "expected a whole number, got true"),
    (False, "expected a whole number, got false"),
    (40.0, "expected a whole number, got 40.0 (a JSON integer such as 512"),
    (4e1, "expected a whole number, got 40.0 (a JSON integer such as 512"),
    ("40", "expected a whole number, got '40'"),
    (None, "expected a whole number, got null"),
])
def test_jsonl_counts_are_json_integers(tmp_path, capsys, value, words):
    rows = [GOOD_ROW, {**GOOD_ROW, "input_length": value}]
    problem = _refused(tmp_path, capsys, MOONCAKE, {"t.jsonl": "\n".join(map(json.dumps, rows)) + "\n"})
    assert problem.startswith(f"{tmp_path / 't.jsonl'}:2: input_length: {words}"), problem
    rows = [GOOD_ROW, {**GOOD_ROW, "output_length": value}]
    problem = _refused(tmp_path, capsys, MOONCAKE, {"t.jsonl": "\n".join(map(json.dumps, rows)) + "\n"})
    assert problem.startswith(f"{tmp_path / 't.jsonl'}:2: output_length: {words}"), problem
    # a JSONL length file: the same rule
    text = json.dumps({"n": 5}) + "\n" + json.dumps({"n": value}) + "\n"
    problem = _refused(tmp_path, capsys, JSONL_LENGTHS, {"l.jsonl": text}, "workload.input_tokens.file", 6)
    assert problem.startswith(f"{tmp_path / 'l.jsonl'}:2: n: {words}"), problem


# --- numbers of thousands of digits, cells over the CSV reader's limit --------------------------

DIGITS = "1" * 5000  # over Python's 4,300-digit limit for int()


def test_a_prefix_hash_of_thousands_of_digits_is_refused_with_its_line(tmp_path, capsys):
    # int() raised ValueError: "cannot read trace: 'Exceeds the limit (4300 digits) ...'" with no line or column
    csv = f't,prompt,gen,blocks\n0,8,5,"1 2"\n1,8,5,"1 {DIGITS}"\n'
    problem = _refused(tmp_path, capsys, HASHED, {"t.csv": csv})
    assert problem == (f"{tmp_path / 't.csv'}:3: blocks: expected 64-bit integers in decimal digits separated by "
                       f"spaces or ';', got '1 {'1' * 52}...'")


@pytest.mark.parametrize("ids, read", [
    ("-9223372036854775808 9223372036854775807", [-2**63, 2**63 - 1]),
    ("0" * 5000 + "1 -0002", [1, -2]),  # leading zeros
    ("9223372036854775808 1", None),
    ("-9223372036854775809 1", None),
])
def test_prefix_hashes_are_read_to_the_64_bit_bounds(tmp_path, capsys, ids, read):
    from kvsim.workload import CsvColumnsSpec, load_csv

    csv = f't,prompt,gen,blocks\n0,8,5,"1 2"\n1,8,5,"{ids}"\n'
    if read is None:
        problem = _refused(tmp_path, capsys, HASHED, {"t.csv": csv})
        assert problem.startswith(f"{tmp_path / 't.csv'}:3: blocks: expected 64-bit integers in decimal digits")
        return
    rc, out, err = _validate(tmp_path, capsys, HASHED, {"t.csv": csv})
    assert rc == 0, err
    trace = load_csv(tmp_path / "t.csv", CsvColumnsSpec(arrival="t", input_tokens="prompt", output_tokens="gen",
                                                        prefix_hashes="blocks", hash_block_tokens=4))
    assert trace.hash_ids[1].tolist() == read


@pytest.mark.parametrize("where", ["prompt", "gen", "t"])
def test_a_count_or_time_of_thousands_of_digits_is_out_of_range_with_its_line(tmp_path, capsys, where):
    cells = {"t": "1500", "prompt": "10", "gen": "5", where: DIGITS}
    problem = _refused(tmp_path, capsys, CSV, {"t.csv": f"t,prompt,gen\n0,10,5\n{cells['t']},{cells['prompt']},"
                                                        f"{cells['gen']}\n"})
    shown = f"'{'1' * 54}...'"
    words = f"expected a finite number (ms), got {shown}" if where == "t" else f"must be <= 2,147,483,647, got {shown}"
    assert problem.startswith(f"{tmp_path / 't.csv'}:3: {where}: {words}"), problem
    problem = _refused(tmp_path, capsys, LENGTHS, {"l.txt": f"100\n200 {DIGITS}\n"}, "workload.input_tokens.file", 6)
    assert problem == f"{tmp_path / 'l.txt'}:2: value: number 3: must be <= 2,147,483,647, got {shown}"


def test_a_cell_over_the_csv_limit_in_a_row_pyarrow_cannot_read_names_its_line(tmp_path, capsys):
    # an unclosed quote runs to the end of the file: Python's reader stops at its field limit;
    # the line named was one past the row (and past the end of the file)
    csv = 't,prompt,gen\n0,10,5\n"1,10,' + "x" * 200_000 + "\n"
    problem = _refused(tmp_path, capsys, CSV, {"t.csv": csv})
    assert problem == f"{tmp_path / 't.csv'}:3: row: cannot read as CSV: field larger than field limit (131072)"


def test_a_header_over_the_csv_limit_is_refused_on_line_1(tmp_path, capsys):
    problem = _refused(tmp_path, capsys, CSV, {"t.csv": "t,prompt,gen" + "x" * 200_000 + "\n0,10,5\n"})
    assert problem == f"{tmp_path / 't.csv'}:1: header: cannot read as CSV: field larger than field limit (131072)"
    lengths = LENGTHS.replace("file: l.txt}", "file: l.csv, column: n}")
    problem = _refused(tmp_path, capsys, lengths, {"l.csv": "n," + "x" * 200_000 + "\n5,1\n"},
                       "workload.input_tokens.file", 6)
    assert problem == f"{tmp_path / 'l.csv'}:1: header: cannot read as CSV: field larger than field limit (131072)"
