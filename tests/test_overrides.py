"""``--set FIELD=VALUE`` on ``kvsim run`` / ``kvsim validate`` (kvsim/scenario/overrides.py).

An override is validated like the file; a bad one is one line naming the ``--set`` argument,
exit status 2, no traceback.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

import kvsim
from kvsim.cli import main
from kvsim.scenario.overrides import parse_override
from kvsim.yaml_io import SpecError

SCENARIO = """\
name: set-tiny
seed: 3
duration: 10 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 128}
  output_tokens: {kind: fixed, value: 16}
systems:
  a: {node: h20-8x, instances: 1}
"""


def _main(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    return path


def test_values_are_read_as_yaml():
    assert parse_override("workload.arrival.rate=20/s").value == "20/s"
    assert parse_override("systems.a.instances=2").value == 2
    assert parse_override("sweep.x=[1/s, 2/s]").value == ["1/s", "2/s"]
    assert parse_override("sweep={}").value == {}
    assert parse_override("systems.a.instance.tp=2").path == ("systems", "a", "instance", "tp")


def test_run_with_set_equals_the_file_changed(source, tmp_path):
    rc, _, err = _main("run", source, "--out", tmp_path / "out", "--no-progress",
                       "--set", "workload.arrival.rate=4/s", "--set", "replications=1")
    assert rc == 0, err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    changed = kvsim.run(kvsim.parse_scenario(SCENARIO.replace("rate: 1/s", "rate: 4/s"), "x.yaml"))
    assert summary["points"][0]["systems"]["a"]["requests_completed"] == \
        changed.run("a").summary["requests_completed"] > kvsim.run(kvsim.parse_scenario(SCENARIO)).run(
            "a").summary["requests_completed"]
    assert "rate: 4/s" not in source.read_text()  # the file is not touched
    # the resolved scenario records the overridden value
    resolved = kvsim.load_scenario(tmp_path / "out" / "scenario.yaml")
    assert resolved.spec.workload.arrival.rate == 4.0


def test_a_later_set_wins(source):
    scenario = kvsim.load_scenario(source, ["duration=20 s", "duration=30 s"])
    assert scenario.spec.duration == 30.0


@pytest.mark.parametrize("argument, says", [
    ("workload.arrival.rate=-1/s", "--set workload.arrival.rate=-1/s: workload.arrival.rate: must be positive"),
    ("workload.arrival.rate=5", "--set workload.arrival.rate=5: workload.arrival.rate: a bare number"),
    ("workload.arival.rate=5/s", "--set workload.arival.rate=5/s: workload.arival: unknown field"),
    ("systems.a.node=nope-8x", "--set systems.a.node=nope-8x: systems.a.node: unknown node 'nope-8x'"),
    ("duration", "--set duration: expected FIELD=VALUE"),
    ("duration=[", "--set duration=[: the value is not valid YAML"),
    ("workload.arrival.rate.x=1", "--set workload.arrival.rate.x=1: workload.arrival.rate is not a mapping"),
])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_bad_set_is_one_line_naming_the_argument(source, tmp_path, command, argument, says):
    extra = ["--out", tmp_path / "out"] if command == "run" else []
    rc, out, err = _main(command, source, *extra, "--set", argument)
    assert rc == 2
    assert "Traceback" not in err
    problems = [line.strip() for line in err.splitlines()[1:]]
    assert len(problems) == 1 and problems[0].startswith(says), err
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_a_swept_field_cannot_be_set(source):
    text = SCENARIO + "sweep:\n  workload.arrival.rate: [1/s, 2/s]\n"
    source.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match=r"^--set workload.arrival.rate=3/s: workload.arrival.rate is swept"):
        kvsim.load_scenario(source, ["workload.arrival.rate=3/s"])
    # clearing the sweep first makes it settable
    assert kvsim.load_scenario(source, ["sweep={}", "workload.arrival.rate=3/s"]).spec.workload.arrival.rate == 3.0


def test_a_file_field_in_conflict_with_a_set_names_both(source):
    with pytest.raises(SpecError) as caught:
        kvsim.load_scenario(source, ["duration=2 s"])
    (problem,) = caught.value.problems
    assert problem.startswith(f"{source}:4: warmup:") and problem.endswith("(with --set duration=2 s)")
