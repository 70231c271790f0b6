"""Sweeps as independent tasks (kvsim/plan): the same results whatever ran them.

One worker in this process, two local worker processes (with a worker that dies once), and a
Dask LocalCluster (when dask.distributed is installed) give identical summaries and records,
equal to :func:`kvsim.run`. Scenarios are tiny: 10 s simulated, one instance per system.
"""

from __future__ import annotations

import multiprocessing
import os

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
