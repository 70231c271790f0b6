"""Resumable sweeps (kvsim/plan/store.py): finished points are kept and never recomputed.

A ``kvsim run`` killed (SIGKILL) after its first point finished, then run again, ends with every
point stored exactly once and the first point untouched; an unfinished folder (marker missing,
temporary file left) runs again; changing one point's input re-runs that point only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import kvsim
from kvsim.plan import SweepStats, run_sweep
from kvsim.plan.store import MARKER

TINY = """\
name: sweep-resume
seed: 2
duration: 10 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: fixed, value: 128}
  output_tokens: {kind: fixed, value: 24}
systems:
  a: {node: h20-8x, instances: 1}
  b: {node: l20-8x, instances: 1}
sweep:
  workload.arrival.rate: [1/s, 2/s, 3/s]
"""


def _markers(out: Path) -> dict[str, float]:
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "points").glob(f"*/{MARKER}")}


def test_a_killed_run_resumes_with_every_point_once(tmp_path):
    # point 0 is light; points 1-3 take about a second each, so the kill lands inside point 1
    text = TINY.replace("duration: 10 s", "duration: 60 s").replace(
        "[1/s, 2/s, 3/s]", "[1/s, 40/s, 41/s, 42/s]")
    source = tmp_path / "s.yaml"
    source.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "kvsim.cli", "run", str(source), "--out", str(out), "--workers", "1",
               "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not _markers(out) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    first = _markers(out)
    assert len(first) == 1, "the run was to be killed after its first point, before the others"
    assert not (out / "summary.json").exists()

    rc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert rc.returncode == 0, rc.stderr
    assert "1 already stored (skipped)" in rc.stderr and "3 point run(s) to do" in rc.stderr
    after = _markers(out)
    assert len(after) == 4 and set(first) <= set(after)
    assert {k: after[k] for k in first} == first  # the finished point was not written again
    summary = json.loads((out / "summary.json").read_text())
    assert [p["index"] for p in summary["points"]] == [0, 1, 2, 3]
    assert sorted(s for p in summary["points"] for s in p["stored"]) == sorted(f"points/{k}" for k in after)
    frame = pd.read_parquet(out / "requests.parquet")
    assert set(frame.groupby(["point", "system"]).size().index) == {(p, s) for p in range(4) for s in "ab"}
    assert not list((out / "points").glob("*/.*.tmp"))
    # the resumed results equal an uninterrupted run
    reference = kvsim.run(kvsim.load_scenario(source))
    for point in summary["points"]:
        for name, entry in point["systems"].items():
            assert entry["requests_completed"] == reference.run(name, point["index"]).summary["requests_completed"]


def test_a_folder_without_its_marker_runs_again_and_temporaries_are_cleared(tmp_path):
    scenario = kvsim.parse_scenario(TINY, "tiny.yaml")
    run_sweep(scenario, tmp_path, workers=1, log=False)
    before = _markers(tmp_path)
    victim = sorted(before)[1]
    (tmp_path / "points" / victim / MARKER).unlink()  # killed while writing this point
    leftover = tmp_path / "points" / victim / ".requests.parquet.123.0123456789ab.tmp"
    leftover.write_bytes(b"half a file")
    stats = SweepStats()
    result = run_sweep(scenario, tmp_path, workers=1, log=False, stats=stats)
    assert stats.ran == [victim] and sorted(stats.reused) == sorted(k for k in before if k != victim)
    assert not leftover.exists()
    after = _markers(tmp_path)
    assert set(after) == set(before)
    assert {k: v for k, v in after.items() if k != victim} == {k: v for k, v in before.items() if k != victim}
    assert result.records_digest() == kvsim.run(scenario).records_digest()


def test_changing_one_point_reruns_only_that_point(tmp_path):
    scenario = kvsim.parse_scenario(TINY, "tiny.yaml")
    first = SweepStats()
    run_sweep(scenario, tmp_path, workers=1, log=False, stats=first)
    changed = scenario.with_changes({"sweep": {"workload.arrival.rate": ["1/s", "2/s", "5/s"]}})
    stats = SweepStats()
    result = run_sweep(changed, tmp_path, workers=1, log=False, stats=stats)
    assert len(stats.ran) == 1 and stats.ran[0] not in first.ran
    assert sorted(stats.reused) == sorted(first.ran[:2])
    assert result.run("a", 2).params == {"workload.arrival.rate": "5/s"}
    # the same points in another order: all reused, labelled with their new indices
    reordered = scenario.with_changes({"sweep": {"workload.arrival.rate": ["3/s", "1/s", "2/s"]}})
    stats = SweepStats()
    result = run_sweep(reordered, tmp_path, workers=1, log=False, stats=stats)
    assert stats.ran == [] and stats.reused == [first.ran[2], first.ran[0], first.ran[1]]
    assert [result.run("a", i).params["workload.arrival.rate"] for i in range(3)] == ["3/s", "1/s", "2/s"]
    assert result.records_digest() == kvsim.run(reordered).records_digest()
    # a field every point shares (and the seed) changes every key
    for other in (scenario.with_changes({"workload.output_tokens.value": 25}), scenario):
        stats = SweepStats()
        run_sweep(other, tmp_path, seed=None if other is not scenario else 99, workers=1, log=False, stats=stats)
        assert len(stats.ran) == 3 and stats.reused == []


@pytest.mark.parametrize("field", ["model", "catalog"])
def test_the_key_covers_catalog_parts(tmp_path, field):
    """A catalog entry the scenario overrides changes its points' keys (the hash reads the parts used)."""
    from kvsim.plan.tasks import sweep_tasks

    scenario = kvsim.parse_scenario(TINY, "tiny.yaml")
    if field == "model":
        other = scenario.with_changes({"catalog": {"models": {"qwen3-8b": {"base": "qwen3-8b", "num_layers": 30}}}})
    else:
        other = scenario.with_changes({"catalog": {"accelerators": {"l20": {"base": "l20",
                                                                            "memory_bandwidth": "0.9 TB/s"}}}})
    assert not {t.key for t in sweep_tasks(scenario)} & {t.key for t in sweep_tasks(other)}


def test_store_files_are_complete_parquet(tmp_path):
    scenario = kvsim.parse_scenario(TINY, "tiny.yaml")
    result = run_sweep(scenario, tmp_path, workers=1, log=False)
    folders = sorted((tmp_path / "points").iterdir())
    assert len(folders) == 3
    for folder in folders:
        assert {p.name for p in folder.iterdir()} == {"requests.parquet", "summary.parquet", "point.json",
                                                      "inputs.json", "runs.json", MARKER}
        point = json.loads((folder / "point.json").read_text())
        summary = pd.read_parquet(folder / "summary.parquet")
        assert list(summary["system"]) == ["a", "b"]
        requests = pd.read_parquet(folder / "requests.parquet")
        run = result.run("a", point["index"])
        assert (requests["system"] == "a").sum() == run.records.n
        assert summary.set_index("system").loc["a", "requests_completed"] == run.summary["requests_completed"]
    assert os.path.getsize(tmp_path / "points" / folders[0].name / "inputs.json") > 0


TRACE = """\
name: trace-key
seed: 1
duration: 3 s
warmup: 0 s
model: qwen3-1.7b
workload:
  arrival: {kind: trace, format: azure_2023, file: trace.csv}
systems:
  one: {node: h20-8x, instances: 1}
"""


def test_a_changed_trace_file_reruns_its_points(tmp_path):
    trace = tmp_path / "trace.csv"
    source = tmp_path / "s.yaml"
    source.write_text(TRACE, encoding="utf-8")
    rows = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0000000,100,20\n"
    trace.write_text(rows + "2023-11-16 18:00:01.0000000,100,10\n")
    first = SweepStats()
    run_sweep(kvsim.load_scenario(source), tmp_path / "out", workers=1, log=False, stats=first)
    same = SweepStats()
    run_sweep(kvsim.load_scenario(source), tmp_path / "out", workers=1, log=False, stats=same)
    assert same.reused == first.ran and same.ran == []
    trace.write_text(rows + "2023-11-16 18:00:01.0000000,100,11\n")  # same file name, new contents
    changed = SweepStats()
    result = run_sweep(kvsim.load_scenario(source), tmp_path / "out", workers=1, log=False, stats=changed)
    assert len(changed.ran) == 1 and changed.ran != first.ran
    assert result.run("one").records.column("output_tokens").tolist() == [20, 11]


def test_other_kvsim_code_reruns_every_point(tmp_path, monkeypatch):
    """Stored points do not outlive the code that computed them, even under one version string."""
    import kvsim.plan.tasks as tasks_module

    scenario = kvsim.parse_scenario(TINY, "tiny.yaml")
    run_sweep(scenario, tmp_path, workers=1, log=False)
    assert len(tasks_module.code_fingerprint()) == 64
    monkeypatch.setattr(tasks_module, "code_fingerprint", lambda: "0" * 64)
    stats = SweepStats()
    run_sweep(scenario, tmp_path, workers=1, log=False, stats=stats)
    assert len(stats.ran) == 3 and stats.reused == []


def test_a_damaged_stored_point_runs_again(tmp_path):
    scenario = kvsim.parse_scenario(TINY, "tiny.yaml")
    first = SweepStats()
    run_sweep(scenario, tmp_path, workers=1, log=False, stats=first)
    (tmp_path / "points" / first.ran[0] / "requests.parquet").write_bytes(b"not parquet")
    stats = SweepStats()
    with pytest.warns(RuntimeWarning, match="requests.parquet: .*; recomputing"):
        result = run_sweep(scenario, tmp_path, workers=1, log=False, stats=stats)
    assert stats.ran == [first.ran[0]] and stats.reused == first.ran[1:]
    assert result.records_digest() == kvsim.run(scenario).records_digest()
