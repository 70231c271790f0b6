"""Sweeps as independent tasks (kvsim/plan): the same results whatever ran them.

One worker in this process, two local worker processes (with a worker that dies once), and a
Dask LocalCluster (when dask.distributed is installed) give identical summaries and records,
equal to :func:`kvsim.run`. Scenarios are tiny: 10 s simulated, one instance per system.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import sys
import tempfile

import pandas as pd
import pytest

import kvsim
from kvsim.plan import SweepStats, run_sweep
from kvsim.plan import executor as executor_module

SCENARIO = """\
name: sweep-exec
seed: 5
duration: 10 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: lognormal, median: 200, sigma: 0.5, max: 800}
  output_tokens: {kind: lognormal, median: 40, sigma: 0.5, max: 160}
systems:
  h20: {node: h20-8x, instances: 1}
  l20: {node: l20-8x, instances: 1}
sweep:
  workload.arrival.rate: [1/s, 2/s, 4/s]
"""


@pytest.fixture(scope="module")
def scenario():
    return kvsim.parse_scenario(SCENARIO, "sweep-exec.yaml")


@pytest.fixture(scope="module")
def reference(scenario):
    return kvsim.run(scenario)


def _same(result, reference) -> None:
    """Equal summaries (all but the store folders) and records, bit for bit."""
    got, want = result.summary_dict(), reference.summary_dict()
    for point in got["points"]:
        assert point.pop("stored")  # a sweep run says where each point was kept
    assert got == want
    assert result.records_digest() == reference.records_digest()
    pd.testing.assert_frame_equal(result.requests_frame(), reference.requests_frame())
    assert [(r.system, r.point_index, r.seed) for r in result.runs] == \
           [(r.system, r.point_index, r.seed) for r in reference.runs]


def test_one_worker_in_process_equals_kvsim_run(scenario, reference, tmp_path):
    stats = SweepStats()
    result = run_sweep(scenario, tmp_path, workers=1, log=False, stats=stats)
    assert len(stats.ran) == 3 and stats.reused == []
    _same(result, reference)


def test_two_worker_processes_equal_one(scenario, reference, tmp_path):
    _same(run_sweep(scenario, tmp_path, workers=2, log=False), reference)


def test_a_finished_sweep_read_back_from_disk_is_the_same(scenario, reference, tmp_path):
    run_sweep(scenario, tmp_path, workers=1, log=False)
    stats = SweepStats()
    again = run_sweep(scenario, tmp_path, workers=2, log=False, stats=stats)
    assert stats.ran == [] and len(stats.reused) == 3  # nothing recomputed
    _same(again, reference)


def test_a_worker_that_dies_is_replaced_and_its_point_retried(scenario, reference, tmp_path, monkeypatch):
    """The first attempt at point 1 kills its worker process (as the OOM killer would); the pool is
    rebuilt and the point runs again. Uses fork so the patched worker function reaches the child."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the fork start method")
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    real = executor_module._run_in_worker

    def dies_once(task, seed):
        (attempts / f"{task.index}.{os.getpid()}").touch()
        if task.index == 1 and not (attempts / "died").exists():
            (attempts / "died").touch()
            os._exit(9)
        return real(task, seed)

    # pickled by reference: the name the worker looks up must lead to this function
    dies_once.__module__, dies_once.__qualname__ = executor_module.__name__, "_run_in_worker"
    monkeypatch.setattr(executor_module, "_run_in_worker", dies_once)
    monkeypatch.setattr(executor_module, "_context", lambda: multiprocessing.get_context("fork"))
    result = run_sweep(scenario, tmp_path / "out", workers=2, log=False)
    assert (attempts / "died").exists()
    assert len(list(attempts.glob("1.*"))) == 2  # point 1 started twice, in two processes
    _same(result, reference)


def test_dask_local_cluster_equals_one_worker(scenario, reference, tmp_path):
    pytest.importorskip("distributed")
    _same(run_sweep(scenario, tmp_path, workers=2, dask=True, log=False), reference)


def test_dask_missing_is_a_clear_error(scenario, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_distributed(name, *args, **kwargs):
        if name == "distributed" or name.startswith("distributed."):
            raise ImportError("No module named 'distributed'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_distributed)
    with pytest.raises(executor_module.ExecutorError, match=r"pip install 'kvsim\[dask\]'"):
        run_sweep(scenario, tmp_path, dask=True, log=False)


def test_progress_lines_name_each_point_with_elapsed_and_eta(scenario, tmp_path, capsys):
    run_sweep(scenario, tmp_path, workers=1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("kvsim: 3 point run(s) to do")
    done = [line for line in lines if line.startswith("kvsim: [")]
    assert [line.split()[1] for line in done] == ["[1/3]", "[2/3]", "[3/3]"]
    assert all("elapsed" in line for line in done)
    assert all("ETA" in line for line in done[:-1]) and done[-1].endswith("all done")
    assert "[rate=1/s]" in done[0] and "[rate=4/s]" in done[2]


def test_kvsim_sweep_on_the_command_line(tmp_path, reference):
    import contextlib
    import io
    import json

    from kvsim.cli import main

    source = tmp_path / "s.yaml"
    source.write_text(SCENARIO, encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main(["sweep", str(source), "--out", str(tmp_path / "out"), "--workers", "2", "--no-progress"]) == 0
        with pytest.raises(SystemExit) as bad:
            main(["run", str(source), "--workers", "0"])
    assert bad.value.code == 2 and "expected a positive integer, got 0" in err.getvalue()
    assert "on 2 local worker processes" in err.getvalue()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [p["systems"]["l20"]["requests_completed"] for p in summary["points"]] == \
           [reference.run("l20", i).summary["requests_completed"] for i in range(3)]
    assert len(list((tmp_path / "out" / "points").iterdir())) == 3


# --------------------------------------------------------------------------- workers that fail (issue 22)


class _ForkserverDiesOnce:
    """A multiprocessing context whose first worker cannot be started, as when the forkserver was
    killed just before (``connect`` is refused); everything else is the real context's."""

    def __init__(self, real):
        self.real = real
        self.refused = 0

    def __getattr__(self, name):
        return getattr(self.real, name)

    def Process(self, *args, **kwargs):  # noqa: N802 - the context's own name
        process = self.real.Process(*args, **kwargs)
        if not self.refused:
            self.refused += 1

            def refused():
                raise ConnectionRefusedError(111, "Connection refused")

            process.start = refused
        return process


def test_a_worker_that_cannot_be_started_is_retried_on_a_fresh_pool(scenario, reference, tmp_path, monkeypatch,
                                                                     capsys):
    """Starting a worker fails once (its forkserver had died): the sweep starts a fresh pool, says
    so, and ends with every point, as an undisturbed run."""
    context = _ForkserverDiesOnce(executor_module._context())
    monkeypatch.setattr(executor_module, "_context", lambda: context)
    result = run_sweep(scenario, tmp_path, workers=2)
    assert context.refused == 1
    notes = [line for line in capsys.readouterr().err.splitlines() if "fresh worker processes" in line]
    assert len(notes) == 1 and "could not be started (ConnectionRefusedError" in notes[0], notes
    assert "running the 3 unfinished point run(s) on fresh worker processes (attempt 2 of 3)" in notes[0]
    _same(result, reference)


def _workers_killed_at(monkeypatch, tmp_path, points: set[int]):
    """Every attempt at a point in ``points`` SIGKILLs its worker (as the OOM killer would). Uses
    fork so the patched worker function reaches the child."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the fork start method")
    import signal

    real = executor_module._run_in_worker

    def killed(task, seed):
        if task.index in points:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(task, seed)

    killed.__module__, killed.__qualname__ = executor_module.__name__, "_run_in_worker"
    monkeypatch.setattr(executor_module, "_run_in_worker", killed)
    monkeypatch.setattr(executor_module, "_context", lambda: multiprocessing.get_context("fork"))
    monkeypatch.setattr(executor_module, "RETRY_PAUSE_S", 0.0, raising=False)


def test_workers_killed_every_time_stop_the_sweep_naming_the_points_and_the_signal(scenario, tmp_path,
                                                                                   monkeypatch):
    _workers_killed_at(monkeypatch, tmp_path, {0, 1, 2})
    with pytest.raises(executor_module.ExecutorError) as error:
        run_sweep(scenario, tmp_path, workers=2, log=False)
    message = str(error.value)
    assert "killed by signal 9 (SIGKILL)" in message
    assert "failed 3 times in a row" in message
    assert "3 point run(s) have no results: point 0 [rate=1/s], point 1 [rate=2/s], point 2 [rate=4/s]." in message
    assert "re-run the same command to resume" in message


def test_kvsim_run_whose_workers_die_exits_2_without_a_summary(scenario, tmp_path, monkeypatch, capsys):
    from kvsim.cli import main

    _workers_killed_at(monkeypatch, tmp_path, {1, 2})
    source = tmp_path / "s.yaml"
    source.write_text(SCENARIO, encoding="utf-8")
    code = main(["run", str(source), "--out", str(tmp_path / "out"), "--workers", "2", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "killed by signal 9 (SIGKILL)" in err
    assert "kvsim run: worker processes failed 3 times in a row" in err
    assert re.search(r"point run\(s\) have no results: (point 0 \[rate=1/s\], )?point 1 \[rate=2/s\], "
                     r"point 2 \[rate=4/s\]\.", err), err  # point 0 finished, unless its worker was stopped every time
    assert err.count("on fresh worker processes") >= 2  # the retries were said as they happened
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "summary.json").exists()


def test_a_broken_pipe_that_is_not_standard_output_is_a_failure(tmp_path, monkeypatch, capsys):
    """A BrokenPipeError from the sweep (a dead worker's pipe), not from printing: kvsim once
    exited 0 on it with no results and no word."""
    import kvsim.plan
    from kvsim.cli import main

    def broken(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(kvsim.plan, "run_sweep", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the error report goes
    source = tmp_path / "s.yaml"
    source.write_text(SCENARIO, encoding="utf-8")
    with open(tmp_path / "stdout.txt", "w", encoding="utf-8") as stdout:  # a real file, as a shell gives
        monkeypatch.setattr(sys, "stdout", stdout)
        code = main(["run", str(source), "--out", str(tmp_path / "out"), "--workers", "2", "--no-progress"])
        monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 3, err
    assert "kvsim run: internal error (a bug): BrokenPipeError: [Errno 32] Broken pipe" in err
    assert len(list(tmp_path.glob("kvsim-error-*.txt"))) == 1


def test_a_sweep_that_lost_a_result_is_an_error_not_a_summary(scenario, tmp_path, monkeypatch):
    """Should an executor ever return without every task's result, the sweep says which are
    missing instead of summarising the others (or failing on a missing key)."""
    from kvsim.plan import sweep as sweep_module

    def loses_the_last(scenario, tasks, on_done, **kwargs):
        for task in tasks[:-1]:
            on_done(task, executor_module.run_task(scenario, task, kwargs.get("seed")))

    monkeypatch.setattr(sweep_module, "execute", loses_the_last)
    with pytest.raises(RuntimeError) as error:
        run_sweep(scenario, tmp_path, workers=1, log=False)
    assert type(error.value).__name__ == "IncompleteSweepError"
    assert str(error.value).endswith("1 of 3 point run(s) without results and no error to say why: point 2 [rate=4/s]")
