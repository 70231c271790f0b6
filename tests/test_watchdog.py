"""The watchdog stops a run that spins instead of advancing -- a component rescheduling itself
at one instant for ever, or creeping forward by ever smaller steps -- with the state it was in,
exit 3 and the command that reproduces it; and it changes nothing in a healthy run."""

from __future__ import annotations

import re
import time

import pytest
import simpy

import kvsim.serving.instance as instance_module
import kvsim.sim.watchdog as watchdog_module
from kvsim import parse_scenario
from kvsim.cli import main
from kvsim.sim.run import run_scenario
from kvsim.sim.watchdog import Watchdog, WatchdogError, run_until

SCENARIO = """\
name: stuck
seed: 3
duration: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 4/s}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
systems:
  s: {node: h20-8x, instance: {tp: 8}}
"""


@pytest.fixture(autouse=True)
def _traces_in_tmp_path(tmp_path, monkeypatch):
    """Internal-error reports write their traceback into the temporary folder: this test's own."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def _spin(self):
    """An engine loop with a bug: from t = 1 s it reschedules itself at the same instant for ever."""
    yield self.env.timeout(1.0)
    while True:
        yield self.env.timeout(0)


def _creep(self):
    """An engine loop with a bug: from t = 1 s it advances by a nanosecond at a time."""
    yield self.env.timeout(1.0)
    while True:
        yield self.env.timeout(1e-9)


def _run(tmp_path, capsys, *extra: str) -> tuple[int, str]:
    path = tmp_path / "stuck.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    code = main(["run", str(path), "--out", str(tmp_path / "out"), "--workers", "1", "--no-progress", *extra])
    return code, capsys.readouterr().err


def _unlink_trace(err: str) -> None:
    from pathlib import Path

    match = re.search(r"full traceback: (\S+)", err)
    if match:
        Path(match.group(1)).unlink(missing_ok=True)


def test_a_run_stuck_at_one_instant_is_stopped_with_its_state(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVSIM_BACKEND", "python")  # the reference's Instance (compiled: a cdef class)
    monkeypatch.setattr(instance_module.Instance, "_run", _spin)
    started = time.monotonic()
    code, err = _run(tmp_path, capsys, "--watchdog-s", "0.5")
    assert code == 3
    assert time.monotonic() - started < 60
    assert "Traceback" not in err
    assert ("kvsim run: the run of system 's' was stopped by the watchdog: no progress for 0.5 s of wall time: "
            "simulated time stayed at 1 s and no request arrived or finished") in err
    assert re.search(r"state: simulated time 1 s, [\d,]+ events processed, \d+ requests arrived, 0 finished", err)
    assert re.search(r"the events due next: at 1 s: 1 x instance 0 \(mixed\) _spin", err)  # who was spinning
    assert f"scenario: {tmp_path / 'stuck.yaml'} (seed 3); while running point 0 (run seed 3)" in err
    assert "reproduce: cd " in err and "--watchdog-s 0.5" in err
    _unlink_trace(err)


def test_a_run_creeping_forward_is_stopped_by_the_event_bound(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVSIM_BACKEND", "python")  # the reference's Instance (compiled: a cdef class)
    monkeypatch.setattr(instance_module.Instance, "_run", _creep)
    monkeypatch.setattr(watchdog_module, "BASE_EVENTS", 100_000)  # the default takes ~10 s of events
    code, err = _run(tmp_path, capsys)
    assert code == 3 and "Traceback" not in err
    match = re.search(r"stopped by the watchdog: ([\d,]+) events processed, more than the ([\d,]+) a run of this "
                      r"size may use", err)
    assert match, err
    events, bound = (int(g.replace(",", "")) for g in match.groups())
    assert bound < events <= bound + 2 * watchdog_module.CHECK_EVERY_EVENTS
    assert re.search(r"simulated time 1\.000\d+ s", err)  # it did creep: time moved, so no stall
    _unlink_trace(err)


def test_with_the_watchdog_off_a_run_runs_as_usual(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, "--watchdog-s", "0", "--no-report")
    assert code == 0, err


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "soon"])
def test_watchdog_seconds_must_be_a_number(tmp_path, capsys, text):
    with pytest.raises(SystemExit) as stop:
        _run(tmp_path, capsys, "--watchdog-s", text)
    assert stop.value.code == 2


def test_results_do_not_depend_on_the_watchdog(monkeypatch):
    """The watchdog's chunked loop processes the events env.run would, in the same order."""
    scenario = parse_scenario(SCENARIO.replace("5 s", "20 s").replace("4/s", "30/s"), "w.yaml")
    import dataclasses

    on = run_scenario(scenario).runs[0]
    off = run_scenario(dataclasses.replace(scenario, watchdog_s=0.0)).runs[0]
    assert on.summary == off.summary
    for column in ("arrival_s", "admit_s", "first_token_s", "finish_s"):
        assert (getattr(on.records, column) == getattr(off.records, column)).all()


def test_run_until_counts_every_event_and_stops_where_env_run_does():
    def ticker(env, period):
        while True:
            yield env.timeout(period)

    class Front:
        submitted = completed = 0

    def environment():
        env = simpy.Environment()
        env.process(ticker(env, 0.001))
        env.process(ticker(env, 0.0007))
        return env

    reference = environment()
    stepped = []
    real_step = reference.step
    reference.step = lambda: stepped.append(real_step())  # counts the events env.run processes
    reference.run(until=20.0)
    reference.run(until=30.0)

    env = environment()
    dog = Watchdog(60.0, 1, Front(), "test")
    run_until(env, 20.0, dog)
    run_until(env, 30.0, dog)
    assert env.now == reference.now == 30.0
    # the same events, plus the two stop events (the step that processes one raises, so the
    # reference's counter misses them)
    assert dog.events == len(stepped) + 2 > 2 * watchdog_module.CHECK_EVERY_EVENTS
    assert len(env._queue) == len(reference._queue)
    assert [(t, p) for t, p, _, _ in sorted(env._queue)] == [(t, p) for t, p, _, _ in sorted(reference._queue)]


def test_watchdog_error_survives_a_trip_between_processes():
    import pickle

    error = WatchdogError("the run of x was stopped", ["state: a", "next: b"])
    again = pickle.loads(pickle.dumps(error))
    assert again.headline == error.headline and again.details == error.details
