"""Bad input: one clear ``file:line: field.path: message`` per problem, exit status 2, never a traceback.

Each test writes a small scenario into ``tmp_path`` as text, derived from ``BASE`` by one edit, so
the line of every field is known (``line_no`` finds it in the written text and insists the
needle is unique, so a wrong needle cannot silently match the wrong line). ``BASE`` itself is
checked to be valid, so every failure below comes from the one edit.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvsim.cli import main

# Block style throughout, so every field sits on its own line.
BASE = """\
name: bad-input
seed: 1
duration: 20 s
warmup: 5 s
model: qwen3-8b
dtype: bf16
workload:
  arrival:
    kind: poisson
    rate: 2/s
  input_tokens:
    kind: fixed
    value: 128
  output_tokens:
    kind: fixed
    value: 32
slo:
  ttft_p99: 2 s
systems:
  h20:
    node: h20-8x
    nodes: 1
    instances: 1
    instance:
      tp: 1
  l20:
    node: l20-8x
    instances: 1
    instance:
      tp: 1
compare:
  baseline: l20
"""

L20_BLOCK = "  l20:\n    node: l20-8x\n    instances: 1\n    instance:\n      tp: 1\n"


def edit(old: str, new: str, text: str = BASE) -> str:
    """``text`` with the single occurrence of ``old`` replaced (fails loudly if it is not unique)."""
    assert text.count(old) == 1, f"test setup: {old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def line_no(text: str, needle: str) -> int:
    """1-based number of the only line of ``text`` containing ``needle``."""
    hits = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    assert len(hits) == 1, f"test setup: {needle!r} is on lines {hits}"
    return hits[0]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``kvsim.cli.main`` in-process; argparse errors arrive as SystemExit, mapped to their code."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def problem_lines(err: str) -> list[str]:
    # the CLI prints a header line, then one indented line per problem
    return [line.strip() for line in err.splitlines() if line.startswith("  ")]


def assert_bad(rc, out, err, path: Path, field: str | list[tuple[str, int]], line: int | None = None,
               single: bool = True) -> str:
    """Exit 2, no traceback, nothing on stdout, and a problem ``path:line: field: ...``; returns it.

    ``field`` may be a list of acceptable ``(field, line)`` pairs where more than one place in
    the file is a defensible answer.
    """
    assert rc == 2, (rc, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert out == "", "validate must print nothing on stdout for a bad scenario"
    problems = problem_lines(err)
    assert problems, err
    if single:
        assert len(problems) == 1, f"expected one clear error, got:\n{err}"
    accepted = field if isinstance(field, list) else [(field, line)]
    prefixes = [f"{path}:{ln}: {fld}: " for fld, ln in accepted]
    matching = [p for p in problems if any(p.startswith(prefix) for prefix in prefixes)]
    assert matching, f"no problem starts with any of {prefixes}; stderr was:\n{err}"
    return matching[0]


def validate_bad(tmp_path, capsys, name: str, text: str, field, line: int | None = None, **kw) -> str:
    path = write(tmp_path, name, text)
    rc, out, err = cli(capsys, "validate", path)
    return assert_bad(rc, out, err, path, field, line, **kw)


# --------------------------------------------------------------------------- the base is valid


def test_base_scenario_is_valid(tmp_path, capsys):
    # without this, every test below could pass for the wrong reason
    rc, out, err = cli(capsys, "validate", write(tmp_path, "base.yaml", BASE))
    assert rc == 0, err
    assert err == ""
    assert "valid scenario 'bad-input'" in out


# --------------------------------------------------------------------------- wrong types


def test_wrong_type_integer_field(tmp_path, capsys):
    text = edit("    nodes: 1\n", "    nodes: two\n")
    msg = validate_bad(tmp_path, capsys, "nodes_two.yaml", text, "systems.h20.nodes", line_no(text, "nodes: two"))
    assert "'two'" in msg  # the offending value is echoed


def test_wrong_type_fractional_tp(tmp_path, capsys):
    text = edit(L20_BLOCK, L20_BLOCK.replace("tp: 1", "tp: 1.5"))
    msg = validate_bad(tmp_path, capsys, "tp_float.yaml", text, "systems.l20.instance.tp", line_no(text, "tp: 1.5"))
    assert "1.5" in msg


def test_wrong_type_systems_not_a_mapping(tmp_path, capsys):
    text = edit("  h20:\n    node: h20-8x\n    nodes: 1\n    instances: 1\n    instance:\n      tp: 1\n", "  h20: h20-8x\n")
    validate_bad(tmp_path, capsys, "system_str.yaml", text, "systems.h20", line_no(text, "h20: h20-8x"))


def test_unknown_arrival_kind_names_the_known_ones(tmp_path, capsys):
    text = edit("kind: poisson", "kind: poison")
    msg = validate_bad(tmp_path, capsys, "kind.yaml", text,
                       [("workload.arrival", line_no(text, "  arrival:")),
                        ("workload.arrival.kind", line_no(text, "kind: poison"))])
    assert "poison" in msg and "poisson" in msg


def test_negative_seed_in_file(tmp_path, capsys):
    text = edit("seed: 1\n", "seed: -1\n")
    validate_bad(tmp_path, capsys, "seed.yaml", text, "seed", line_no(text, "seed: -1"))


# --------------------------------------------------------------------------- unknown keys


def test_unknown_top_level_key(tmp_path, capsys):
    text = edit("seed: 1\n", "seed: 1\nmodle: qwen3-8b\n")
    msg = validate_bad(tmp_path, capsys, "top_key.yaml", text, "modle", line_no(text, "modle:"))
    assert "unknown field" in msg


def test_unknown_nested_key_arrival_rat(tmp_path, capsys):
    text = edit("    rate: 2/s\n", "    rat: 2/s\n")
    # kvsim also (reasonably) reports the now-missing `rate`; the typo itself must be named on its line
    msg = validate_bad(tmp_path, capsys, "rat.yaml", text, "workload.arrival.rat", line_no(text, "rat:"),
                       single=False)
    assert "unknown field" in msg


def test_unknown_key_deep_in_a_system(tmp_path, capsys):
    text = edit(L20_BLOCK, L20_BLOCK + "      tpp: 2\n")
    validate_bad(tmp_path, capsys, "tpp.yaml", text, "systems.l20.instance.tpp", line_no(text, "tpp:"))


def test_missing_required_nested_field(tmp_path, capsys):
    # a missing field has no line of its own: the line of the mapping that should hold it
    text = edit("    node: l20-8x\n", "")
    msg = validate_bad(tmp_path, capsys, "no_node.yaml", text, "systems.l20.node", line_no(text, "  l20:"))
    assert "missing" in msg


# --------------------------------------------------------------------------- catalog names


def test_unknown_model(tmp_path, capsys):
    text = edit("model: qwen3-8b", "model: qwen9-8b")
    msg = validate_bad(tmp_path, capsys, "model.yaml", text, "model", line_no(text, "model: qwen9"))
    assert "qwen9-8b" in msg and "qwen3-8b" in msg  # names the bad one and lists known ones


def test_unknown_node(tmp_path, capsys):
    text = edit("node: l20-8x", "node: l30-8x")
    msg = validate_bad(tmp_path, capsys, "node.yaml", text, "systems.l20.node", line_no(text, "l30-8x"))
    assert "l30-8x" in msg and "l20-8x" in msg


def test_unknown_model_in_a_system(tmp_path, capsys):
    text = edit(L20_BLOCK, L20_BLOCK.replace("    instances: 1\n", "    instances: 1\n    model: gpt-9\n"))
    validate_bad(tmp_path, capsys, "sys_model.yaml", text, "systems.l20.model", line_no(text, "gpt-9"))


def test_catalog_entry_with_unknown_base_accelerator(tmp_path, capsys):
    text = BASE + "catalog:\n  accelerators:\n    h20-fast:\n      base: h30\n      memory_bandwidth: 5 TB/s\n"
    msg = validate_bad(tmp_path, capsys, "cat_base.yaml", text, "catalog.accelerators.h20-fast.base",
                       line_no(text, "base: h30"))
    assert "h30" in msg


def test_catalog_entry_with_unknown_base_node(tmp_path, capsys):
    text = BASE + "catalog:\n  nodes:\n    big:\n      base: h30-8x\n"
    validate_bad(tmp_path, capsys, "cat_node.yaml", text, "catalog.nodes.big.base", line_no(text, "base: h30-8x"))


def test_catalog_entry_with_bad_field_value(tmp_path, capsys):
    text = BASE + "catalog:\n  accelerators:\n    h20-fast:\n      base: h20\n      memory_bandwidth: fast\n"
    validate_bad(tmp_path, capsys, "cat_field.yaml", text, "catalog.accelerators.h20-fast.memory_bandwidth",
                 line_no(text, "memory_bandwidth: fast"))


# --------------------------------------------------------------------------- quantities and units


@pytest.mark.parametrize("rate", ["-5/s", "0/s"])
def test_non_positive_rate(tmp_path, capsys, rate):
    text = edit("rate: 2/s", f"rate: {rate}")
    msg = validate_bad(tmp_path, capsys, "rate.yaml", text, "workload.arrival.rate", line_no(text, "rate:"))
    assert "positive" in msg


def test_missing_unit(tmp_path, capsys):
    text = edit("duration: 20 s", "duration: 300")
    msg = validate_bad(tmp_path, capsys, "nounit.yaml", text, "duration", line_no(text, "duration:"))
    assert "unit" in msg and "300" in msg


def test_unit_string_without_unit(tmp_path, capsys):
    text = edit("rate: 2/s", "rate: '2'")
    msg = validate_bad(tmp_path, capsys, "nounit2.yaml", text, "workload.arrival.rate", line_no(text, "rate:"))
    assert "unit" in msg


def test_unknown_unit(tmp_path, capsys):
    text = edit("duration: 20 s", "duration: 20 parsecs")
    msg = validate_bad(tmp_path, capsys, "badunit.yaml", text, "duration", line_no(text, "duration:"))
    assert "parsecs" in msg


def test_unit_of_the_wrong_dimension(tmp_path, capsys):
    text = edit("ttft_p99: 2 s", "ttft_p99: 2 GB")
    msg = validate_bad(tmp_path, capsys, "dim.yaml", text, "slo.ttft_p99", line_no(text, "ttft_p99:"))
    assert "GB" in msg and "bytes" in msg  # says which dimension the unit belongs to


# --------------------------------------------------------------------------- consistency and sizing


def test_model_does_not_fit(tmp_path, capsys):
    # qwen3-235b-a22b in bf16 is ~438 GiB: fits on h20 at tp 8, not on one 48 GB l20 at tp 1
    text = edit("model: qwen3-8b", "model: qwen3-235b-a22b")
    text = edit("  h20:\n    node: h20-8x\n    nodes: 1\n    instances: 1\n    instance:\n      tp: 1\n",
                "  h20:\n    node: h20-8x\n    nodes: 1\n    instances: 1\n    instance:\n      tp: 8\n", text)
    msg = validate_bad(tmp_path, capsys, "nofit.yaml", text,
                       [("systems.l20.node", line_no(text, "node: l20-8x")),
                        ("systems.l20.instance.tp", line_no(text, "tp: 1")),
                        ("systems.l20", line_no(text, "  l20:"))])
    assert "weights" in msg
    assert "qwen3-235b-a22b" in msg
    assert re.search(r"\bl20\b(?!-8x)", msg), "the message should name the card (l20), not only the node"


def test_tp_must_divide_the_nodes_cards(tmp_path, capsys):
    text = edit(L20_BLOCK, L20_BLOCK.replace("tp: 1", "tp: 3"))
    msg = validate_bad(tmp_path, capsys, "tp3.yaml", text, "systems.l20.instance.tp", line_no(text, "tp: 3"))
    assert "8" in msg  # the node's card count


def test_more_instances_than_cards(tmp_path, capsys):
    text = edit("    nodes: 1\n    instances: 1\n", "    nodes: 1\n    instances: 9\n")
    validate_bad(tmp_path, capsys, "inst9.yaml", text, "systems.h20.instances", line_no(text, "instances: 9"))


def test_warmup_not_shorter_than_duration(tmp_path, capsys):
    # the field at fault is warmup (or duration), on its own line -- not "(top level)" on line 1
    text = edit("warmup: 5 s", "warmup: 20 s")
    msg = validate_bad(tmp_path, capsys, "warmup.yaml", text,
                       [("warmup", line_no(text, "warmup:")), ("duration", line_no(text, "duration:"))])
    assert "warmup" in msg


def test_compare_baseline_not_a_system(tmp_path, capsys):
    text = edit("baseline: l20", "baseline: a100")
    msg = validate_bad(tmp_path, capsys, "baseline.yaml", text, "compare.baseline", line_no(text, "baseline:"))
    assert "a100" in msg and "h20" in msg and "l20" in msg


def test_dtype_the_accelerator_lacks_written_at_top_level(tmp_path, capsys):
    # ascend-950pr lists fp8/fp4 only; the scenario's dtype line is what asks for bf16
    text = edit("node: l20-8x", "node: ascend-950pr-8x")
    msg = validate_bad(tmp_path, capsys, "dtype.yaml", text, "dtype", line_no(text, "dtype: bf16"))
    assert "bf16" in msg and "ascend-950pr" in msg and "fp8" in msg


def test_dtype_the_accelerator_lacks_by_default(tmp_path, capsys):
    # no dtype in the file (bf16 by default): line 1 / "dtype" points at nothing written; the
    # system whose node cannot do bf16 should be named on its own line
    text = edit("dtype: bf16\n", "")
    text = edit("node: l20-8x", "node: ascend-950pr-8x", text)
    msg = validate_bad(tmp_path, capsys, "dtype_default.yaml", text,
                       [("systems.l20.node", line_no(text, "ascend-950pr-8x")),
                        ("systems.l20.dtype", line_no(text, "  l20:")),
                        ("systems.l20", line_no(text, "  l20:"))])
    assert "bf16" in msg


# --------------------------------------------------------------------------- YAML itself


def test_bad_yaml_syntax_names_its_line(tmp_path, capsys):
    text = edit("duration: 20 s", "duration: 20 s: oops")
    path = write(tmp_path, "syntax.yaml", text)
    rc, out, err = cli(capsys, "validate", path)
    assert rc == 2 and "Traceback" not in err
    problems = problem_lines(err)
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}:{line_no(text, 'oops')}: ")
    assert "YAML" in problems[0]


def test_tab_indentation_names_its_line(tmp_path, capsys):
    text = edit("    kind: poisson", "\tkind: poisson")
    path = write(tmp_path, "tab.yaml", text)
    rc, out, err = cli(capsys, "validate", path)
    assert rc == 2 and "Traceback" not in err
    assert problem_lines(err)[0].startswith(f"{path}:{line_no(text, 'kind: poisson')}: ")


def test_duplicate_top_level_key(tmp_path, capsys):
    text = edit("warmup: 5 s\n", "warmup: 5 s\nduration: 30 s\n")
    msg = validate_bad(tmp_path, capsys, "dup.yaml", text, "duration", line_no(text, "duration: 30 s"))
    assert f"line {line_no(text, 'duration: 20 s')}" in msg  # points back at the first one


def test_duplicate_nested_key(tmp_path, capsys):
    text = edit("    kind: poisson\n", "    kind: poisson\n    kind: gamma\n")
    msg = validate_bad(tmp_path, capsys, "dup2.yaml", text, "workload.arrival.kind", line_no(text, "kind: gamma"))
    assert "duplicate" in msg


def test_scenario_that_is_not_a_mapping(tmp_path, capsys):
    path = write(tmp_path, "list.yaml", "- a\n- b\n")
    rc, out, err = cli(capsys, "validate", path)
    assert rc == 2 and "Traceback" not in err
    assert problem_lines(err)[0].startswith(f"{path}:1: ")


# --------------------------------------------------------------------------- sweeps


def test_sweep_with_an_invalid_value_points_at_the_sweep_line(tmp_path, capsys):
    text = BASE + "sweep:\n  workload.arrival.rate: [5/s, -1/s]\n"
    msg = validate_bad(tmp_path, capsys, "sweep.yaml", text, "sweep.workload.arrival.rate",
                       line_no(text, "workload.arrival.rate: ["))
    assert "-1/s" in msg and "positive" in msg


def test_sweep_with_an_invalid_value_in_block_list(tmp_path, capsys):
    # the sweep key's line, or (better) the offending item's line; never the original rate line
    text = BASE + "sweep:\n  workload.arrival.rate:\n    - 5/s\n    - -1/s\n"
    msg = validate_bad(tmp_path, capsys, "sweep_block.yaml", text,
                       [("sweep.workload.arrival.rate", line_no(text, "  workload.arrival.rate:")),
                        ("sweep.workload.arrival.rate[1]", line_no(text, "- -1/s"))])
    assert "-1/s" in msg


def test_sweep_over_an_unknown_node(tmp_path, capsys):
    text = BASE + "sweep:\n  systems.l20.node: [l20-8x, l99-8x]\n"
    msg = validate_bad(tmp_path, capsys, "sweep_node.yaml", text, "sweep.systems.l20.node",
                       line_no(text, "systems.l20.node:"))
    assert "l99-8x" in msg


def test_sweep_over_a_misspelt_field(tmp_path, capsys):
    text = BASE + "sweep:\n  workload.arrival.rat: [1/s, 2/s]\n"
    msg = validate_bad(tmp_path, capsys, "sweep_rat.yaml", text, "sweep.workload.arrival.rat",
                       line_no(text, "workload.arrival.rat:"))
    assert "unknown field" in msg


def test_sweep_through_a_scalar(tmp_path, capsys):
    text = BASE + "sweep:\n  name.x: [1, 2]\n"
    validate_bad(tmp_path, capsys, "sweep_scalar.yaml", text, "sweep.name.x", line_no(text, "name.x:"))


def test_sweep_with_no_values(tmp_path, capsys):
    # like warmup/baseline, a whole-scenario check: it must still name the sweep key and its line
    text = BASE + "sweep:\n  workload.arrival.rate: []\n"
    msg = validate_bad(tmp_path, capsys, "sweep_empty.yaml", text, "sweep.workload.arrival.rate",
                       line_no(text, "workload.arrival.rate: []"))
    assert "no values" in msg


def test_sweep_values_not_a_list(tmp_path, capsys):
    text = BASE + "sweep:\n  workload.arrival.rate: 5/s\n"
    validate_bad(tmp_path, capsys, "sweep_scalar2.yaml", text, "sweep.workload.arrival.rate",
                 line_no(text, "workload.arrival.rate: 5/s"))


# --------------------------------------------------------------------------- files and CLI arguments


def test_empirical_length_file_that_does_not_exist(tmp_path, capsys):
    text = edit("  output_tokens:\n    kind: fixed\n    value: 32\n",
                "  output_tokens:\n    kind: empirical\n    file: no_such_lengths.txt\n")
    msg = validate_bad(tmp_path, capsys, "empirical.yaml", text, "workload.output_tokens.file",
                       line_no(text, "no_such_lengths.txt"))
    assert "no_such_lengths.txt" in msg


def test_empirical_csv_without_column(tmp_path, capsys):
    (tmp_path / "lengths.csv").write_text("prompt,output\n100,20\n200,40\n", encoding="utf-8")
    text = edit("  output_tokens:\n    kind: fixed\n    value: 32\n",
                "  output_tokens:\n    kind: empirical\n    file: lengths.csv\n")
    msg = validate_bad(tmp_path, capsys, "empirical_csv.yaml", text, "workload.output_tokens.file",
                       line_no(text, "lengths.csv"))
    assert "column" in msg


def test_missing_scenario_file(tmp_path, capsys):
    path = tmp_path / "absent.yaml"
    rc, out, err = cli(capsys, "validate", path)
    assert rc == 2 and "Traceback" not in err and out == ""
    assert str(path) in err and "cannot read" in err


@pytest.mark.parametrize("argv", [
    ["run", "X", "--seed", "-3"],
    ["run", "X", "--seed", "three"],
    ["frobnicate"],
    ["catalog", "gpus"],
    [],
])
def test_bad_cli_arguments_exit_2(tmp_path, capsys, argv):
    argv = [str(write(tmp_path, "base.yaml", BASE)) if a == "X" else a for a in argv]
    rc, out, err = cli(capsys, *argv)
    assert rc == 2
    assert "Traceback" not in err
    assert "usage:" in err
    if "--seed" in argv:
        assert "--seed" in err and "non-negative" in err


def test_run_with_a_bad_scenario_writes_nothing(tmp_path, capsys):
    text = edit("rate: 2/s", "rate: -5/s")
    path = write(tmp_path, "run_bad.yaml", text)
    out_dir = tmp_path / "results"
    rc, out, err = cli(capsys, "run", path, "--out", out_dir)
    assert_bad(rc, out, err, path, "workload.arrival.rate", line_no(text, "rate:"))
    assert not out_dir.exists()


def test_run_with_a_sizing_error_writes_nothing(tmp_path, capsys):
    text = edit(L20_BLOCK, L20_BLOCK.replace("tp: 1", "tp: 3"))
    path = write(tmp_path, "run_tp3.yaml", text)
    out_dir = tmp_path / "results"
    rc, out, err = cli(capsys, "run", path, "--out", out_dir)
    assert_bad(rc, out, err, path, "systems.l20.instance.tp", line_no(text, "tp: 3"))
    assert not out_dir.exists()


def test_run_with_out_that_is_a_file(tmp_path, capsys):
    path = write(tmp_path, "ok.yaml", BASE)
    blocker = tmp_path / "taken"
    blocker.write_text("not a folder", encoding="utf-8")
    rc, out, err = cli(capsys, "run", path, "--out", blocker, "--no-progress")
    assert rc == 2
    assert "Traceback" not in err
    assert str(blocker) in err and "cannot write" in err


# --------------------------------------------------------------------------- real processes


def _subprocess(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvsim.cli", *map(str, argv)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def test_subprocess_wrong_type_exits_2_without_traceback(tmp_path):
    text = edit("    nodes: 1\n", "    nodes: two\n")
    path = write(tmp_path, "nodes_two.yaml", text)
    proc = _subprocess(tmp_path, "validate", path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{path}:{line_no(text, 'nodes: two')}: systems.h20.nodes: " in proc.stderr
    assert proc.stdout == ""


def test_subprocess_model_does_not_fit_on_run(tmp_path):
    text = edit("model: qwen3-8b", "model: qwen3-235b-a22b")
    path = write(tmp_path, "nofit.yaml", text)
    proc = _subprocess(tmp_path, "run", path, "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{path}:{line_no(text, 'node: l20-8x')}: systems.l20." in proc.stderr
    assert "weights" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_subprocess_missing_file_and_bad_seed(tmp_path):
    proc = _subprocess(tmp_path, "validate", tmp_path / "absent.yaml")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "absent.yaml" in proc.stderr
    proc = _subprocess(tmp_path, "run", write(tmp_path, "base.yaml", BASE), "--seed", "-3")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--seed" in proc.stderr
    assert not (tmp_path / "results").exists()
