"""An internal error (a bug) prints a short report -- the error in one line, the scenario and seed,
the command that reproduces it, where the full traceback went -- and exits 3; never a traceback,
whichever command and whichever process (a sweep's worker) raised it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import kvsim.serving.instance as instance_module
from kvsim.cli import main

SCENARIO = """\
name: bug
seed: 5
duration: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 4/s}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
systems:
  s: {node: h20-8x, instance: {tp: 8}}
"""

SWEPT = SCENARIO + "sweep:\n  workload.arrival.rate: [2/s, 4/s]\n"


@pytest.fixture(autouse=True)
def _traces_in_tmp_path(tmp_path, monkeypatch):
    """Internal-error reports write their traceback into the temporary folder: this test's own."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _break_submit(monkeypatch) -> None:
    """Make a method deep in the run (an instance taking a request) fail as a bug would."""
    real = instance_module.Instance.submit

    def submit(self, seq):
        if seq.rid >= 3:
            raise ZeroDivisionError("a test's planted bug")
        return real(self, seq)

    monkeypatch.setattr(instance_module.Instance, "submit", submit)
    monkeypatch.setenv("KVSIM_BACKEND", "python")  # the reference's Instance (compiled: a cdef class)


def _report(err: str) -> dict[str, str]:
    """The report's lines by their label (``reproduce``, ``full traceback``, ``scenario``)."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^  ([a-z ]+): (.*)$", err, re.M)}


def test_a_bug_in_a_run_exits_3_with_a_reproduction(tmp_path, capsys, monkeypatch):
    path = tmp_path / "bug.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    _break_submit(monkeypatch)
    argv = ["run", str(path), "--out", str(tmp_path / "out"), "--workers", "1", "--no-progress"]
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "\nkvsim run: internal error (a bug): ZeroDivisionError: a test's planted bug\n" in err
    report = _report(err)
    assert report["scenario"].startswith(f"{path} (seed 5); while running point 0 (run seed 5)")
    assert report["reproduce"] == f"cd {shlex.quote(os.getcwd())} && kvsim " + shlex.join(argv)
    trace = Path(report["full traceback"].split(" (")[0])
    assert trace.parent == tmp_path and trace.name.startswith("kvsim-error-")
    text = trace.read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text and "in submit" in text and "planted bug" in text
    trace.unlink()
    # the command it gives fails the same way
    again = shlex.split(report["reproduce"].split(" && ", 1)[1])[1:]
    assert main(again) == 3
    assert "ZeroDivisionError: a test's planted bug" in capsys.readouterr().err


def test_the_seed_given_on_the_command_line_is_the_one_reported(tmp_path, capsys, monkeypatch):
    path = tmp_path / "bug.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    _break_submit(monkeypatch)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--workers", "1", "--seed", "11"]) == 3
    report = _report(capsys.readouterr().err)
    assert report["scenario"].startswith(f"{path} (seed 11); while running point 0 (run seed 11)")
    Path(report["full traceback"].split(" (")[0]).unlink()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_prints_the_traceback_too(tmp_path, capsys, monkeypatch, how):
    path = tmp_path / "bug.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    _break_submit(monkeypatch)
    argv = ["run", str(path), "--out", str(tmp_path / "out"), "--workers", "1"]
    if how == "flag":
        argv.append("--debug")
    else:
        monkeypatch.setenv("KVSIM_DEBUG", "1")
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "internal error (a bug)" in err and "Traceback (most recent call last)" in err and "in submit" in err
    Path(_report(err)["full traceback"].split(" (")[0]).unlink()


def test_a_bug_in_validate_is_reported_as_one(tmp_path, capsys, monkeypatch):
    import kvsim.plan.run_cost  # noqa: F401 - the module (kvsim.plan exports a function of its name)

    run_cost = sys.modules["kvsim.plan.run_cost"]
    path = tmp_path / "ok.yaml"
    path.write_text(SCENARIO, encoding="utf-8")

    def broken(*args, **kwargs):
        raise KeyError("planted")

    monkeypatch.setattr(run_cost, "run_cost", broken)
    assert main(["validate", str(path)]) == 3
    err = capsys.readouterr().err
    assert "kvsim validate: internal error (a bug): KeyError: 'planted'" in err and "Traceback" not in err
    report = _report(err)
    assert report["scenario"] == f"{path} (seed 5)"
    Path(report["full traceback"].split(" (")[0]).unlink()


def test_a_bug_in_report_is_reported_as_one(tmp_path, capsys, monkeypatch):
    import kvsim.report.run_report as run_report

    (tmp_path / "summary.json").write_text("{}", encoding="utf-8")

    def broken(*args, **kwargs):
        raise AttributeError("planted")

    monkeypatch.setattr(run_report, "run_report_files", broken)
    assert main(["report", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "kvsim report: internal error (a bug): AttributeError: planted" in err and "Traceback" not in err
    assert f"  results: {tmp_path}\n" in err
    Path(_report(err)["full traceback"].split(" (")[0]).unlink()


def test_input_errors_keep_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(SCENARIO.replace("rate: 4/s", "rate: -4/s"), encoding="utf-8")
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "invalid input" in err and "internal error" not in err


def test_a_full_disk_is_not_called_a_bug(tmp_path, capsys, monkeypatch):
    import errno

    import kvsim.report as report

    path = tmp_path / "ok.yaml"
    path.write_text(SCENARIO, encoding="utf-8")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "summary.json"))

    monkeypatch.setattr(report, "write_results", full)
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "internal error" not in err and "Traceback" not in err


SITECUSTOMIZE = """
import kvsim.serving.instance as m
_real = m.Instance.submit
def _submit(self, seq):
    if seq.rid >= 3:
        raise ZeroDivisionError("a test's planted bug")
    return _real(self, seq)
m.Instance.submit = _submit
"""


def test_a_bug_in_a_sweep_worker_process_is_reported_with_its_point(tmp_path):
    """Two worker processes (started by the sweep with forkserver): the bug planted in every
    Python process through sitecustomize comes back from a worker as the same short report."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    path = tmp_path / "bug.yaml"
    path.write_text(SWEPT, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
           "TMPDIR": str(tmp_path), "KVSIM_BACKEND": "python"}  # the reference's Instance: compiled, a cdef class
    env.pop("KVSIM_DEBUG", None)
    done = subprocess.run([sys.executable, "-m", "kvsim.cli", "run", str(path), "--out", str(tmp_path / "out"),
                           "--workers", "2", "--no-progress"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert "kvsim run: internal error (a bug): ZeroDivisionError: a test's planted bug" in done.stderr
    report = _report(done.stderr)
    assert re.match(rf"{re.escape(str(path))} \(seed 5\); while running point [01] \[rate=[24]/s\] "
                    rf"\(run seed 5\)$", report["scenario"])
    assert report["reproduce"].startswith(f"cd {shlex.quote(str(tmp_path))} && kvsim run {path}")
    trace = Path(report["full traceback"].split(" (")[0])
    text = trace.read_text(encoding="utf-8")
    assert "in _submit" in text  # the worker's own traceback, not only the parent's
    trace.unlink()


def test_an_argument_that_is_not_utf8_still_gets_its_report(tmp_path, capfd, monkeypatch):
    """A shell passes bytes that are not UTF-8 as lone surrogates: the traceback file keeps them
    escaped (writing it used to fail with UnicodeEncodeError: exit 1 and a raw traceback)."""
    path = tmp_path / "bug.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    _break_submit(monkeypatch)
    # capfd: the process's own standard error, which escapes such characters (capsys's would refuse them)
    assert main(["run", str(path), "--out", str(tmp_path / "out\udcff"), "--workers", "1", "--no-progress"]) == 3
    err = capfd.readouterr().err
    assert "internal error (a bug): ZeroDivisionError" in err and "Traceback" not in err
    trace = Path(_report(err)["full traceback"].split(" (")[0])
    assert "out\\udcff" in trace.read_text(encoding="utf-8")
