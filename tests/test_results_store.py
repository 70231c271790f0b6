"""A results folder is data, never code (issue 22, item 1): kvsim/plan/store.py.

A resumed point is rebuilt from JSON and Parquet, checked against the format and the task; a
stored point that fails the checks is named in one line and recomputed, never executed and
never silently replaced. The round trip is exact: a resumed result equals the fresh one in every
table, summary and record.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import kvsim
from kvsim.plan import SweepStats, run_sweep
from kvsim.plan.store import MARKER, RUNS_FORMAT

sys.path.insert(0, str(Path(__file__).parent))
from random_scenarios import random_case  # noqa: E402

TINY = """\
name: store-check
seed: 3
duration: 8 s
warmup: 1 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 3/s}
  input_tokens: {kind: fixed, value: 256}
  output_tokens: {kind: fixed, value: 16}
systems:
  a: {node: h20-8x, instances: 1}
  b: {node: l20-8x, instances: 1}
sweep:
  workload.arrival.rate: [2/s, 4/s]
"""

FRAMES = ("summary_frame", "timeseries_frame", "links_frame", "storage_frame", "decisions_frame",
          "switches_frame", "requests_frame", "summary_long_frame")


def _assert_same(fresh, resumed) -> None:
    assert json.dumps(resumed.summary_dict(), sort_keys=True) == json.dumps(fresh.summary_dict(), sort_keys=True)
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(resumed, name)(), getattr(fresh, name)())
    assert resumed.records_digest() == fresh.records_digest()
    for a, b in zip(fresh.all_runs(), resumed.all_runs(), strict=True):
        assert b.sizing == a.sizing  # worked out again from the scenario, as before the run
        assert (b.system, b.point_index, b.params, b.replica, b.seed) == (a.system, a.point_index, a.params,
                                                                         a.replica, a.seed)


def _resume(scenario, out: Path):
    stats = SweepStats()
    result = run_sweep(scenario, out, workers=1, log=False, stats=stats)
    return result, stats


# ------------------------------------------------------------------------------ exact round trip

@pytest.mark.parametrize("case", [0, 3, 7, 12, 19, 26, 33, 41])
def test_a_resumed_random_scenario_equals_the_fresh_run(tmp_path, case):
    scenario = kvsim.parse_scenario(random_case(case).text, "case.yaml")
    fresh = run_sweep(scenario, tmp_path, workers=1, log=False)
    resumed, stats = _resume(scenario, tmp_path)
    assert stats.ran == [] and stats.reused
    _assert_same(fresh, resumed)


PD_CONTROLLER = """\
name: store-pd
seed: 5
duration: 30 s
warmup: 5 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 6/s}
  input_tokens: {kind: fixed, value: 512}
  output_tokens: {kind: fixed, value: 32}
systems:
  pd:
    pools:
      p: {node: h20-8x, instance: {tp: 1}, instances: 4, roles: {prefill: 2, decode: 2}}
    controller: {kind: threshold, signal: prefill_queue, low: 100, high: 2000, interval: 5 s, switch_time: 2 s}
"""

LAYOUT_BEST = """\
name: store-layout
seed: 1
duration: 20 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: fixed, value: 256}
  output_tokens: {kind: fixed, value: 16}
systems:
  s: {node: h20-8x, instances: 1, instance: {layout: best}}
"""


@pytest.mark.parametrize("text", [PD_CONTROLLER, LAYOUT_BEST], ids=["pd_controller", "layout_best"])
def test_controller_tables_and_chosen_layouts_come_back(tmp_path, text):
    scenario = kvsim.parse_scenario(text, "s.yaml")
    fresh = run_sweep(scenario, tmp_path, workers=1, log=False)
    resumed, stats = _resume(scenario, tmp_path)
    assert stats.ran == []
    _assert_same(fresh, resumed)
    if "layout" in text:
        run = resumed.run("s")
        assert run.summary["layout_search"]["chosen"] == run.sizing.pools[0].layout.label()


# ------------------------------------------------------------------------------ nothing executed

class _Payload:
    """What a crafted runs.pickle would hold: unpickling it opens (creates) ``path``."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_crafted_pickle_in_a_results_folder_is_never_run(tmp_path, capsys):
    scenario = kvsim.parse_scenario(TINY, "tiny.yaml")
    first = SweepStats()
    fresh = run_sweep(scenario, tmp_path, workers=1, log=False, stats=first)
    sentinel = tmp_path / "pwned"
    for key in first.ran:  # a results folder as the old format wrote it, with a booby-trapped pickle
        folder = tmp_path / "points" / key
        (folder / "runs.json").unlink()
        (folder / "runs.pickle").write_bytes(pickle.dumps([_Payload(sentinel)]))
    stats = SweepStats()
    resumed = run_sweep(scenario, tmp_path, workers=1, log=True, stats=stats)
    assert not sentinel.exists()
    assert sorted(stats.ran) == sorted(first.ran)
    err = capsys.readouterr().err
    for task_label in ("point 0 [rate=2/s]", "point 1 [rate=4/s]"):
        assert f"kvsim: stored {task_label} (points/" in err
    assert err.count("runs.json: missing; recomputing") == 2
    _assert_same(fresh, resumed)


def test_the_package_never_loads_code_or_objects():
    """No pickle, marshal, shelve, eval, exec or dynamic import anywhere in kvsim (an AST scan,
    so a comment or a docstring naming them does not count), and YAML read only by kvsim's own
    reader (kvsim/yaml_parse.py: a safe loader with limits on size, values and nesting)."""
    import ast

    import yaml

    from kvsim.yaml_io import KvsimLoader

    banned_modules = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle", "joblib",
                      "runpy", "importlib", "code", "codeop"}
    safe_importlib = {"importlib.resources", "importlib.metadata"}  # packaged data files, not code
    banned_names = {"eval", "exec", "compile", "__import__", "execfile"}  # builtins (re.compile is fine)
    banned_methods = {"read_pickle", "to_pickle", "import_module", "unsafe_load", "full_load", "__import__"}
    root = Path(kvsim.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        where = f"{path.relative_to(root.parent).as_posix()}:"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] if node.module != "importlib" else [f"importlib.{a.name}" for a in node.names]
            else:
                modules = []
            found += [f"{where}{node.lineno} imports {m}" for m in modules
                      if m.split(".")[0] in banned_modules and m not in safe_importlib]
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in banned_names:
                found.append(f"{where}{node.lineno} calls {func.id}")
            if isinstance(func, ast.Attribute) and func.attr in banned_methods:
                found.append(f"{where}{node.lineno} calls .{func.attr}")
            reads_yaml = isinstance(func, ast.Attribute) and getattr(func.value, "id", None) == "yaml" and \
                func.attr in ("load", "safe_load", "load_all", "safe_load_all", "parse", "compose")
            if reads_yaml and not where.startswith(("kvsim/yaml_io.py", "kvsim/yaml_parse.py", "kvsim/yaml_syntax.py")):
                found.append(f"{where}{node.lineno} yaml.{func.attr} outside kvsim's one YAML reader")
            if any(k.arg == "allow_pickle" for k in node.keywords):
                found.append(f"{where}{node.lineno} passes allow_pickle")
    assert found == []
    assert issubclass(KvsimLoader, yaml.SafeLoader)


# ------------------------------------------------------------------------------ damaged folders

def _break_runs_json(folder: Path, change) -> None:
    path = folder / "runs.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _set(data, *path_and_value):
    *path, value = path_and_value
    target = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value


DAMAGE = {  # what is done to point 1's folder, and what the line then says once the marker is sealed again
    "truncated": (lambda f: (f / "runs.json").write_bytes((f / "runs.json").read_bytes()[:200]),
                  "runs.json: not JSON: "),
    "empty": (lambda f: (f / "runs.json").write_bytes(b""), "runs.json: not JSON: Expecting value (line 1)"),
    "binary": (lambda f: (f / "runs.json").write_bytes(b"\x80\x04\x95" + bytes(range(256))),
               "runs.json: not UTF-8 text"),
    "deeply nested": (lambda f: (f / "runs.json").write_text("[" * 200_000 + "]" * 200_000),
                      "runs.json: not JSON kvsim writes: nested too deeply"),
    "a repeated key": (lambda f: (f / "runs.json").write_text('{"format": 1, "format": 1}'),
                       "runs.json: not JSON kvsim writes: the key 'format' repeats in one object"),
    "another format": (lambda f: _break_runs_json(f, lambda d: _set(d, "format", RUNS_FORMAT + 1)),
                       f"runs.json: format {RUNS_FORMAT + 1}, this kvsim reads format {RUNS_FORMAT}"),
    "another version": (lambda f: _break_runs_json(f, lambda d: _set(d, "kvsim_version", "0.0.1")),
                        "runs.json: written by kvsim '0.0.1'"),
    "another point's runs": (lambda f: _break_runs_json(f, lambda d: _set(d, "key", "0" * 20)),
                             "runs.json: the runs of point '00000000000000000000'"),
    "a list": (lambda f: (f / "runs.json").write_text("[]"), "runs.json: not an object"),
    "a counter as text": (lambda f: _break_runs_json(f, lambda d: _set(d, "runs", 0, "iterations", "7")),
                          "runs.json: run 0: iterations is not a number of the right kind"),
    "a negative time": (lambda f: _break_runs_json(f, lambda d: _set(d, "runs", 1, "busy_s", -1.0)),
                        "runs.json: run 1: busy_s is -1.0"),
    "an unknown field": (lambda f: _break_runs_json(f, lambda d: _set(d, "runs", 0, "__reduce__", "os.system")),
                         "runs.json: run 0: fields ['__reduce__'] missing or unknown"),
    "a nested table cell": (lambda f: _break_runs_json(f, lambda d: _set(d, "runs", 0, "links", [{"x": [1]}])),
                            "runs.json: run 0: links is not a list of rows of scalars"),
    "systems swapped": (lambda f: _break_runs_json(f, lambda d: d["runs"].reverse()),
                        "runs.json: holds systems ['b', 'a'], the point has ['a', 'b']"),
    "requests not parquet": (lambda f: (f / "requests.parquet").write_bytes(b"PAR1 not really"),
                             "requests.parquet: "),
    "a record column dropped": (
        lambda f: pd.read_parquet(f / "requests.parquet").drop(columns=["first_token_s"]).to_parquet(f / "requests.parquet"),
        "requests.parquet: no column 'first_token_s'"),
    "another point's records": (
        lambda f: shutil.copy(next(p for p in f.parent.iterdir() if p != f) / "requests.parquet", f),
        "requests.parquet: the records of system 'a' are not the ones its run wrote (their SHA-256 is not "
        "runs.json's)"),
    "one record edited": (
        lambda f: pd.read_parquet(f / "requests.parquet").assign(output_tokens=lambda d: d["output_tokens"] + 1)
        .to_parquet(f / "requests.parquet"), "requests.parquet: the records of system 'a' are not the ones"),
    "a latency as text": (lambda f: _break_runs_json(f, lambda d: _set(d, "runs", 0, "summary", "ttft_s", "abc")),
                          "runs.json: run 0: summary: ttft_s is not mean, p50, p90 and p99 in seconds"),
    "flags as a number": (lambda f: _break_runs_json(f, lambda d: _set(d, "runs", 1, "summary", "flags", 7)),
                          "runs.json: run 1: summary: flags is not a list of flags"),
    "a metric dropped": (lambda f: _break_runs_json(f, lambda d: d["runs"][0]["summary"].pop("requests_per_s")),
                         "runs.json: run 0: summary: no requests_per_s"),
    "foreign systems' records": (
        lambda f: pd.read_parquet(f / "requests.parquet").assign(system="zz").to_parquet(f / "requests.parquet"),
        "requests.parquet: rows of systems the point does not have: ['zz']"),
}

UNSEALED = {  # damage the marker's digests catch, or the marker itself
    "no requests": (lambda f: (f / "requests.parquet").unlink(), "requests.parquet: missing"),
    "no runs": (lambda f: (f / "runs.json").unlink(), "runs.json: missing"),
    "another point's records": (
        lambda f: shutil.copy(next(p for p in f.parent.iterdir() if p != f) / "requests.parquet", f),
        "requests.parquet: changed since it was written (its SHA-256 is not the marker's)"),
    "one byte flipped": (lambda f: _flip(f / "runs.json", 40), "runs.json: changed since it was written"),
    "the summary edited": (lambda f: (f / "summary.parquet").write_bytes(b"x"), "summary.parquet: changed since"),
    "another marker": (lambda f: _reseal(f, key="elsewhere"), f"{MARKER}: the marker of point 'elsewhere'"),
    "a pipe for a marker": (lambda f: ((f / MARKER).unlink(), os.mkfifo(f / MARKER)),
                            f"{MARKER}: is not a regular file (a pipe, socket or device)"),
    "/dev/zero for a marker": (lambda f: ((f / MARKER).unlink(), (f / MARKER).symlink_to("/dev/zero")),
                               f"{MARKER}: is not a regular file (a pipe, socket or device)"),
    "an old marker": (lambda f: (f / MARKER).write_text('{"key": "k", "finished": 1}'),
                      f"{MARKER}: not a marker this kvsim writes"),
    "a marker naming other files": (lambda f: _reseal(f, extra="/dev/zero"),
                                    f"{MARKER}: names a file kvsim does not write ('/dev/zero')"),
}


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _reseal(folder: Path, key: str | None = None, extra: str | None = None) -> None:
    """Seal ``folder`` as kvsim would after the damage (so what lies below the digests is reached)."""
    from kvsim.plan.store import seal

    seal(folder, key or folder.name)
    if extra is not None:
        marker = json.loads((folder / MARKER).read_text())
        marker["sha256"][extra] = "0" * 64
        (folder / MARKER).write_text(json.dumps(marker))


@pytest.fixture(scope="module")
def stored_tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("stored")
    scenario = kvsim.parse_scenario(TINY, "tiny.yaml")
    stats = SweepStats()
    fresh = run_sweep(scenario, out, workers=1, log=False, stats=stats)
    return scenario, out, stats.ran, fresh


def _damaged_run(stored_tiny, out: Path, change, capsys) -> str:
    """Copy the stored folder, ``change`` point 1's, resume: its one line (checked), after
    checking that only point 1 ran again and the result equals the fresh one."""
    scenario, original, keys, fresh = stored_tiny
    shutil.copytree(original, out)
    change(out / "points" / keys[1])
    capsys.readouterr()
    stats = SweepStats()
    resumed = run_sweep(scenario, out, workers=1, log=True, stats=stats)
    assert stats.ran == [keys[1]] and stats.reused == [keys[0]]
    lines = [line for line in capsys.readouterr().err.splitlines() if "cannot be read" in line]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"kvsim: stored point 1 [rate=4/s] (points/{keys[1]}) cannot be read: ")
    assert lines[0].endswith("; recomputing") and "Traceback" not in lines[0] and len(lines[0]) < 400
    _assert_same(fresh, resumed)
    again, stats = _resume(scenario, out)  # the recomputed point was stored again and reads back cleanly
    assert stats.ran == []
    return lines[0]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_stored_point_is_named_and_recomputed(stored_tiny, tmp_path, damage, capsys):
    change, expected = DAMAGE[damage]
    # as damaged: the marker's digest of the file no longer matches
    line = _damaged_run(stored_tiny, tmp_path / "as-is", change, capsys)
    assert "changed since it was written (its SHA-256 is not the marker's)" in line
    # sealed again over the damage (as a careless copy tool or an old kvsim might): the checks below it
    line = _damaged_run(stored_tiny, tmp_path / "sealed", lambda f: (change(f), _reseal(f)), capsys)
    assert expected in line


@pytest.mark.parametrize("damage", list(UNSEALED))
def test_a_changed_or_missing_file_is_caught_by_the_marker(stored_tiny, tmp_path, damage, capsys):
    change, expected = UNSEALED[damage]
    assert expected in _damaged_run(stored_tiny, tmp_path / "out", change, capsys)


def test_a_python_caller_is_warned_when_a_point_is_recomputed(stored_tiny, tmp_path):
    scenario, original, keys, fresh = stored_tiny
    out = tmp_path / "out"
    shutil.copytree(original, out)
    (out / "points" / keys[0] / "runs.json").write_text("{")
    with pytest.warns(RuntimeWarning, match=r"stored point 0 \[rate=2/s\] .* cannot be read: .*; recomputing"):
        run_sweep(scenario, out, workers=1, log=False)


def test_the_command_line_says_which_point_it_recomputes(tmp_path):
    source = tmp_path / "tiny.yaml"
    source.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "kvsim.cli", "run", str(source), "--out", str(out), "--workers", "1",
               "--no-progress", "--no-report"]
    assert subprocess.run(command, capture_output=True, text=True, timeout=300).returncode == 0
    victim = sorted((out / "points").iterdir())[0]
    (victim / "runs.json").write_text('{"format": 99}')
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"({victim.relative_to(out).as_posix()}) cannot be read: runs.json: changed since it was written " \
           f"(its SHA-256 is not the marker's); recomputing" in again.stderr
    assert "1 already stored (skipped)" in again.stderr


# ------------------------------------------------------------------------------ the plan's probes

PLAN = """
name: store-plan
seed: 4
duration: 30 s
warmup: 5 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 2000}
  output_tokens: {kind: fixed, value: 64}
slo: {ttft_p99: 1 s}
systems:
  h20: {node: h20-8x, instances: 1, instance: {max_num_seqs: 4}}
plan: {targets: [3/s], units: {max: 3}, rel_tol: 0.3}
"""

PROBE_DAMAGE = {
    "not json": (lambda d: "{", "not JSON: Expecting property name"),
    "another format": (lambda d: json.dumps({**d, "format": 7}), "format 7, this kvsim reads format 1"),
    "another probe's file": (lambda d: json.dumps({**d, "key": "x" * 20}), "key is 'xxxxxxxxxxxxxxxxxxxx'"),
    "another load": (lambda d: json.dumps({**d, "load": d["load"] * 2}), "load is "),
    "meets as text": (lambda d: json.dumps({**d, "meets": "yes"}), "meets, reason or detail of the wrong type"),
    "a list": (lambda d: "[]", "not an object"),
    "flags as a number": (lambda d: json.dumps({**d, "detail": {**d["detail"], "flags": 5}}),
                          "detail: flags is not a list of flags"),
    "a latency as text": (lambda d: json.dumps({**d, "detail": {**d["detail"], "ttft_s": "fast"}}),
                          "detail: ttft_s is not a set of latency statistics"),
}


@pytest.mark.parametrize("damage", list(PROBE_DAMAGE))
def test_a_damaged_stored_probe_is_named_and_recomputed(tmp_path, capsys, damage):
    from kvsim.plan.command import run_plan

    scenario = kvsim.parse_scenario(PLAN, "plan.yaml")
    first = run_plan(scenario, tmp_path, workers=1, log=lambda line: None)
    probes = sorted((tmp_path / "probes").glob("*.json"))
    change, expected = PROBE_DAMAGE[damage]
    probes[0].write_text(change(json.loads(probes[0].read_text())))
    capsys.readouterr()
    lines: list[str] = []
    again = run_plan(scenario, tmp_path, workers=1, log=lines.append)
    err = [line for line in capsys.readouterr().err.splitlines() if "cannot be read" in line]
    assert err == [f"kvsim plan: stored probe {probes[0]} cannot be read: " + err[0].split(": ", 2)[2]]
    assert expected in err[0] and err[0].endswith("; recomputing")
    assert f"1 probe run, {len(probes) - 1} reused" in lines[-1]
    for answer in (first, again):
        answer.pop("kvsim_version", None)
    assert again == first


def test_a_points_file_in_the_way_is_refused_with_a_message(tmp_path, capsys):
    from kvsim.cli import main

    source = tmp_path / "tiny.yaml"
    source.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "points").write_text("my notes")
    argv = ["run", str(source), "--out", str(out), "--workers", "1", "--no-progress", "--no-report"]
    assert main(argv) == 2  # not a kvsim folder: refused before anything (tests/test_output_paths.py)
    assert main([*argv, "--overwrite"]) == 2  # told to write anyway: the store still has no room
    err = capsys.readouterr().err
    assert f"cannot keep points in {out / 'points'}: it is not a folder" in err
    assert "Traceback" not in err and (out / "points").read_text() == "my notes"


def test_folders_and_pipes_in_a_point_folder_are_cleared_when_it_is_rewritten(stored_tiny, tmp_path, capsys):
    import os

    def folder_of(f):
        (f / "runs.json").unlink()
        (f / "runs.json").mkdir()
        (f / "runs.json" / "x").touch()

    def pipe(f):
        (f / "requests.parquet").unlink()
        os.mkfifo(f / "requests.parquet")

    for name, change in (("folder", folder_of), ("pipe", pipe)):
        line = _damaged_run(stored_tiny, tmp_path / name, change, capsys)
        assert "missing; recomputing" in line


@pytest.mark.parametrize("text, expected", [
    ("[" * 100_000 + "]" * 100_000, "nested more than"),
    ("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi")),
     "values"),
])
def test_kvsim_report_reads_a_folders_scenario_with_the_scenario_limits(stored_tiny, tmp_path, capsys, text,
                                                                         expected):
    """``kvsim report DIR`` reads DIR/scenario.yaml with kvsim's own YAML reader: a deeply nested
    or alias-bomb file there is refused in one line (it went through yaml.safe_load: RecursionError
    or a billion values)."""
    from kvsim.cli import main

    scenario, original, keys, fresh = stored_tiny
    out = tmp_path / "out"
    from kvsim.report import write_results

    write_results(fresh, out)
    (out / "scenario.yaml").write_text(text, encoding="utf-8")
    assert main(["report", str(out), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvsim report: cannot read {out / 'scenario.yaml'}: ") and expected in err
    assert "Traceback" not in err and len(err.splitlines()) == 1



def _run_cli(*argv) -> tuple[int, str]:
    import contextlib
    import io

    from kvsim.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(a) for a in argv])
    return code, err.getvalue()


@pytest.mark.parametrize("name", ["summary.json", "plan.json", "manifest.json"])
@pytest.mark.parametrize("content", ["nested", "pipe", "zero"])
def test_a_results_folder_file_that_is_no_file_or_too_deep_is_refused_at_once(stored_tiny, tmp_path, name, content):
    """``kvsim report DIR`` and ``kvsim run --out DIR`` read a folder's JSON files as data from
    anywhere: a FIFO waited for ever, /dev/zero filled memory, deep nesting was exit 3."""
    from kvsim.report import write_results

    scenario, original, keys, fresh = stored_tiny
    out = tmp_path / "out"
    write_results(fresh, out)
    path = out / name
    path.unlink(missing_ok=True)
    if content == "nested":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif content == "pipe":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    source = tmp_path / "tiny.yaml"
    source.write_text(TINY, encoding="utf-8")
    if name == "manifest.json":  # an unreadable manifest is no manifest: the folder is the user's, and refused
        code, err = _run_cli("run", source, "--out", out, "--workers", "1", "--no-progress", "--no-report")
        assert code == 2 and "is not a kvsim results folder" in err, err
        return
    if name == "plan.json" and content != "nested":
        code, err = _run_cli("report", out, "--out", tmp_path / "r")  # not a file: the run's report is rendered
        assert code == 0, err
        return
    code, err = _run_cli("report", out, "--out", tmp_path / "r")
    assert code == 2 and f"kvsim report: cannot read {path}: " in err and len(err.splitlines()) == 1, err
    assert ("nested too deeply" if content == "nested" else "is not a regular file") in err


def test_a_huge_scenario_file_in_a_results_folder_is_refused_before_it_is_read(stored_tiny, tmp_path):
    from kvsim.report import write_results

    out = tmp_path / "out"
    write_results(stored_tiny[3], out)
    with open(out / "scenario.yaml", "wb") as handle:  # sparse: 3 GB that take no disk
        handle.truncate(3 * 2**30)
    code, err = _run_cli("report", out, "--out", tmp_path / "r")
    assert code == 2 and "scenario.yaml" in err and "bytes is more than" in err, err


def test_temporaries_are_cleared_only_inside_the_store(stored_tiny, tmp_path):
    """A point folder that is a link to elsewhere: the files there are not kvsim's to delete."""
    scenario, original, keys, fresh = stored_tiny
    out = tmp_path / "out"
    shutil.copytree(original, out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    precious = elsewhere / ".notes.123.0123456789ab.tmp"
    precious.write_text("mine")
    (out / "points" / ("d" * 20)).symlink_to(elsewhere, target_is_directory=True)
    left = out / "points" / keys[0] / ".runs.json.99.0123456789ab.tmp"
    left.write_text("half")
    odd = out / "points" / keys[0] / ".notes.tmp"  # not a name kvsim gives its temporaries
    odd.write_text("mine too")
    run_sweep(scenario, out, workers=1, log=False)
    assert precious.read_text() == "mine" and odd.read_text() == "mine too" and not left.exists()


def test_a_linked_probe_store_is_refused(tmp_path):
    source = tmp_path / "plan.yaml"
    source.write_text(PLAN, encoding="utf-8")
    out = tmp_path / "out"
    assert _run_cli("plan", source, "--out", out, "--workers", "1")[0] == 0  # a folder of kvsim's, with its manifest
    shutil.rmtree(out / "probes")
    (tmp_path / "elsewhere").mkdir()
    (out / "probes").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    code, err = _run_cli("plan", source, "--out", out, "--workers", "1")
    assert code == 2 and f"cannot keep probes in {out / 'probes'}: it is a link" in err, err
    assert not list((tmp_path / "elsewhere").iterdir())


def test_a_manifest_naming_a_users_file_does_not_get_it_removed(tmp_path):
    source = tmp_path / "tiny.yaml"
    source.write_text(TINY, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["run", source, "--out", out, "--workers", "1", "--no-progress", "--no-report"]
    assert _run_cli(*argv)[0] == 0
    (out / "notes.txt").write_text("my notes")
    (out / "summary.csv").write_text("my own edit")  # a kvsim file changed since: kept too
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"].append({"name": "notes.txt", "bytes": 8, "sha256": "0" * 64})
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert _run_cli(*argv, "--set", "workload.output_tokens.value=9")[0] == 0
    assert (out / "notes.txt").read_text() == "my notes"
    # a file the manifest names that the new run does not write is removed only if it is still kvsim's
    manifest = json.loads((out / "manifest.json").read_text())
    assert {e["name"] for e in manifest["files"]} >= {"summary.csv", "summary.json"}


def test_a_stored_probe_reason_reaches_the_terminal_escaped(tmp_path):
    from kvsim.plan.command import run_plan

    scenario = kvsim.parse_scenario(PLAN, "plan.yaml")
    run_plan(scenario, tmp_path, workers=1, log=lambda line: None)
    probes = sorted((tmp_path / "probes").glob("*.json"))
    data = json.loads(probes[0].read_text())
    data.update(meets=False, reason="\x1b[2Jgone")
    probes[0].write_text(json.dumps(data))
    lines: list[str] = []
    run_plan(scenario, tmp_path, workers=1, log=lines.append)
    assert any("\\x1b[2Jgone" in line for line in lines) and not any("\x1b" in line for line in lines)
