"""Kill-and-resume fuzzing of sweeps with workers (issue 22): ``kvsim run --workers 2`` killed
(SIGKILL) at a random moment, its folder resumed, perhaps killed again, until a run finishes.

What must hold in every case:

- within GONE_WITHIN_S of each kill no process of the killed run is left (workers, forkserver,
  resource tracker) and its standard error is closed;
- the run that finishes exits 0, and ``summary.json`` holds every point exactly once, the store
  one folder per point (``points/<key>``, each complete);
- the records are bit for bit those of a serial run in one process (``kvsim.run``).

The kill moments are drawn from a seeded generator (case k is the same draw on every machine),
over the span from start-up to the end of the run, so kills land before any worker exists,
while points run, while a point is being stored and while the results are written. Only under
the marker (``pytest -m fuzz tests/test_fuzz_kill.py``: MARKER_CASES cases, about half a minute
each); the default suite's tests/test_orphans.py and tests/test_kill.py kill runs at fixed moments.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

import kvsim
from kvsim.plan import SweepStats, run_sweep
from kvsim.plan.store import MARKER
from test_orphans import GONE_WITHIN_S, Tree, _cmdline, pytestmark  # noqa: F401 - the same skip rule

MARKER_CASES = range(30)

SWEEP = """\
name: kill-resume
seed: 11
duration: 500 s
warmup: 10 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 4/s}
  input_tokens: {kind: lognormal, median: 300, sigma: 0.6, max: 2000}
  output_tokens: {kind: lognormal, median: 40, sigma: 0.5, max: 200}
systems:
  h20: {node: h20-8x, instances: 1}
  l20: {node: l20-8x, instances: 1, kv_cache: {dram: {capacity: 16 GiB}}}
sweep:
  workload.arrival.rate: [2/s, 4/s, 6/s, 8/s, 10/s]
"""
POINTS = 5
MAX_KILLS = 3
RUN_S = 12.0
"""About one whole run's wall time (s) on an idle 2-core machine (start-up, five points of about
3 s on two workers, results and report): kill moments are drawn in [0, 1.2 x it]."""


@pytest.fixture(scope="module")
def reference():
    scenario = kvsim.parse_scenario(SWEEP, "s.yaml")
    return scenario, kvsim.run(scenario).records_digest()


def _killed_and_gone(tree: Tree, after_s: float) -> bool:
    """Kill ``tree``'s kvsim process ``after_s`` seconds in (if it still runs); True if it was
    killed. Asserts every process of the tree is then gone and standard error closed."""
    deadline = time.monotonic() + after_s
    while time.monotonic() < deadline and tree.process.poll() is None:
        time.sleep(0.02)
    if tree.process.poll() is not None:
        return False
    os.kill(tree.process.pid, signal.SIGKILL)
    tree.process.wait(timeout=30)
    gone = time.monotonic() + GONE_WITHIN_S
    while tree.pids() and time.monotonic() < gone:
        time.sleep(0.1)
    left = {pid: _cmdline(pid).replace(b"\0", b" ")[:100] for pid in tree.pids()}
    assert not left, f"processes left {GONE_WITHIN_S:g} s after the kill: {left}"
    assert tree.eof.wait(max(0.0, gone - time.monotonic()) + 1.0), "standard error is still open"
    return True


def kill_and_resume(case: int, folder: Path, reference) -> list[str]:
    scenario, digest = reference
    (folder / "s.yaml").write_text(SWEEP, encoding="utf-8")
    rng = np.random.default_rng(case)
    argv = ["run", "s.yaml", "--out", "out", "--workers", "2", "--no-progress"]
    history = []
    for attempt in range(MAX_KILLS + 1):
        tree = Tree(folder, argv)
        try:
            if attempt < MAX_KILLS and rng.random() < 0.85:
                moment = float(rng.uniform(0.0, 1.2 * RUN_S))
                if _killed_and_gone(tree, moment):
                    history.append(f"killed at {moment:.1f} s")
                    continue
            code = tree.process.wait(timeout=600)
            tree.eof.wait(30)
            err = "".join(tree.text)
            assert code == 0, f"case {case} ({history}): exit {code}\n{err[-2000:]}"
            # B023: called within this iteration, never after it
            tree.wait_for(lambda: not tree.pids(), GONE_WITHIN_S, "every process gone after the run")  # noqa: B023
            history.append("finished")
            break
        finally:
            tree.kill_all()
    out = folder / "out"
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [p["index"] for p in summary["points"]] == list(range(POINTS)), f"case {case} ({history})"
    stored = sorted(s for p in summary["points"] for s in p["stored"])
    assert len(stored) == len(set(stored)) == POINTS, f"case {case} ({history}): {stored}"
    assert all((out / s / MARKER).is_file() for s in stored)
    stats = SweepStats()
    resumed = run_sweep(scenario, out, workers=1, log=False, stats=stats)
    assert stats.ran == [], f"case {case} ({history}): a finished folder did not read back: {stats.ran}"
    assert resumed.records_digest() == digest, f"case {case} ({history}): records differ from a serial run"
    return history


@pytest.mark.fuzz
@pytest.mark.parametrize("case", MARKER_CASES)
def test_kill_and_resume_marker(case, tmp_path, reference, record_property):
    record_property("kill_history", kill_and_resume(case, tmp_path, reference))
