"""A ``kvsim run`` killed at any moment leaves a results folder that is complete or clearly
incomplete, never silently wrong; a rerun into it succeeds (issue 11, item 8).

Each kill is SIGKILL, at a moment drawn from a seeded generator: a random delay in ``[0, T]``
(``T`` the wall time of an uninterrupted run), or just after a given result file lands, or just
after the first file of a rerun replaces an earlier run's. After each kill:

- if ``manifest.json`` verifies (:func:`kvsim.report.manifest.verify_manifest`), every file it
  names is byte for byte that file of an uninterrupted run with the manifest's seed;
- otherwise the folder says it is incomplete (no manifest, or one that does not verify);
- either way every result file present is whole: byte for byte the file of an uninterrupted run,
  of this seed or of the run the folder held before (never a torn or mixed file);
- then the same command, run to the end into that folder, exits 0 with a verifying manifest and
  the uninterrupted run's files.

The default suite runs its kills in processes forked from a forkserver that has kvsim imported
(a fresh interpreter spends seconds importing before it writes anything); under the
``invariants`` marker, ``kvsim run`` itself is started as a subprocess and killed.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kill_child import kvsim_main
from kvsim.report.manifest import MANIFEST, read_manifest, verify_manifest

SCENARIO = """
name: killed
seed: 11
duration: 3 s
warmup: 0.5 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 10/s}
  prefix:
    kind: shared_documents
    documents: 5
    zipf_s: 1.0
    document_tokens: {kind: fixed, value: 600}
    suffix_tokens: {kind: uniform, low: 8, high: 120}
  output_tokens: {kind: uniform, low: 4, high: 60}
systems:
  cached: {node: h20-8x, instances: 2, kv_cache: {dram: {capacity: 4 GiB}}}
"""
"""One system with a DRAM tier, so links, storage and time series files are written too."""

SEED = 11  # the scenario's own
OTHER_SEED = 99


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(out: Path) -> dict[str, str]:
    """Every result file in ``out`` (not temporaries, not the points store) -> its SHA-256."""
    return {p.name: _sha(p) for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}


class Runner:
    """Starts ``kvsim run`` as a killable process: forked from a forkserver (default) or a fresh
    ``python -m kvsim.cli`` subprocess."""

    def __init__(self, tmp: Path, subprocesses: bool):
        self.tmp = tmp
        self.subprocesses = subprocesses
        self.scenario = tmp / "killed.yaml"
        self.scenario.write_text(SCENARIO)
        self.context = None
        if not subprocesses:
            self.context = multiprocessing.get_context("forkserver")
            # (if the server already runs, the children import what it has not)
            self.context.set_forkserver_preload(["kvsim.plan.tasks", "kvsim.cli", "kvsim.report", "pyarrow.parquet",
                                                 "kill_child"])
        self.log = str(tmp / "kvsim.log")

    def args(self, out: Path, seed: int | None, report: bool) -> list[str]:
        args = ["run", str(self.scenario), "--out", str(out), "--workers", "1", "--no-progress"]
        args += [] if report else ["--no-report"]
        return args + ([] if seed is None else ["--seed", str(seed)])

    def start(self, out: Path, seed: int | None, report: bool):
        args = self.args(out, seed, report)
        if self.subprocesses:
            with open(self.log, "ab") as log:
                return subprocess.Popen([sys.executable, "-c", "import sys; from kvsim.cli import main; "
                                         "sys.exit(main(sys.argv[1:]))", *args], stdout=log, stderr=log)
        process = self.context.Process(target=kvsim_main, args=(args, self.log))
        process.start()
        return process

    @staticmethod
    def alive(process) -> bool:
        return process.poll() is None if isinstance(process, subprocess.Popen) else process.is_alive()

    @staticmethod
    def kill(process) -> None:
        if Runner.alive(process):
            os.kill(process.pid, signal.SIGKILL)
        Runner.wait(process)

    @staticmethod
    def wait(process, timeout_s: float = 300.0) -> int:
        if isinstance(process, subprocess.Popen):
            return process.wait(timeout=timeout_s)
        process.join(timeout_s)
        assert process.exitcode is not None, "kvsim run did not finish"
        return process.exitcode

    def complete(self, out: Path, seed: int | None, report: bool) -> float:
        """Run to the end into ``out``; the wall time, seconds."""
        started = time.perf_counter()
        code = self.wait(self.start(out, seed, report))
        assert code == 0, Path(self.log).read_text()[-3000:]
        return time.perf_counter() - started


def _kill_at(runner: Runner, process, when) -> str:
    """Kill ``process`` when ``when()`` says so (polled every millisecond), or after it ended."""
    while runner.alive(process) and not when():
        time.sleep(0.001)
    alive = runner.alive(process)
    runner.kill(process)
    return "killed" if alive else "finished first"


def _check_folder(out: Path, references: dict[int, dict[str, str]], before: dict[str, str]) -> str:
    """The invariants of a killed folder (module docstring); what state it was left in."""
    if not out.exists():
        return "no folder yet"
    present = _files(out)
    known = list(references.values()) + [before]
    for name, digest in present.items():
        if name == MANIFEST:
            continue
        assert any(ref.get(name) == digest for ref in known), f"{name} is not any whole run's {name}"
    problems = verify_manifest(out)
    if problems:
        return "incomplete"
    manifest = read_manifest(out)
    seed = manifest["seed"]
    assert seed in references, f"a verifying manifest of seed {seed}, which no run used"
    reference = references[seed]
    listed = {entry["name"] for entry in manifest["files"]}
    assert listed == set(reference) - {MANIFEST}, (listed, set(reference))
    for name in listed:
        assert present[name] == reference[name], f"{name} verifies but is not the seed {seed} run's"
    return "complete"


def _kills(runner: Runner, tmp: Path, rng: np.random.Generator, kills: int, report: bool) -> list[str]:
    refs: dict[int, dict[str, str]] = {}
    for seed in (OTHER_SEED, SEED):
        out = tmp / f"reference-{seed}"
        wall = runner.complete(out, None if seed == SEED else seed, report)  # T: the second (warm) run's
        refs[seed] = _files(out)
    assert refs[SEED]["requests.parquet"] != refs[OTHER_SEED]["requests.parquet"]
    outcomes = []
    moments = ["random", "file", "replaced"]
    for k in range(kills):
        moment = moments[k % len(moments)] if k < len(moments) else str(rng.choice(moments))
        out = tmp / f"kill-{k}"
        before: dict[str, str] = {}
        if moment == "replaced" or (moment == "random" and rng.random() < 0.5):
            # a folder holding a complete run of the other seed: the killed run replaces its files
            out.mkdir()
            for name in refs[OTHER_SEED]:
                (out / name).write_bytes((tmp / f"reference-{OTHER_SEED}" / name).read_bytes())
            before = dict(refs[OTHER_SEED])
        process = runner.start(out, None, report)
        started = time.perf_counter()
        if moment == "random":
            delay = float(rng.uniform(0.0, wall))
            # B023: called within this iteration, never after it
            condition = lambda: time.perf_counter() - started >= delay  # noqa: E731, B023
        elif moment == "file":
            target = out / str(rng.choice(sorted(set(refs[SEED]) - {MANIFEST})))  # a file this run writes
            condition = target.exists
        else:
            inode = (out / "requests.parquet").stat().st_ino
            # B023: called within this iteration, never after it
            condition = lambda: (out / "requests.parquet").exists() and (  # noqa: E731, B023
                (out / "requests.parquet").stat().st_ino != inode)  # noqa: B023
        happened = _kill_at(runner, process, condition)
        state = _check_folder(out, refs, before)
        # a rerun into the killed folder completes it
        runner.complete(out, None, report)
        assert verify_manifest(out) == []
        after = _files(out)
        assert after == refs[SEED]
        outcomes.append(f"{moment}: {happened}, {state}")
    return outcomes


def test_a_killed_run_leaves_a_complete_or_clearly_incomplete_folder(tmp_path, record_property):
    outcomes = _kills(Runner(tmp_path, subprocesses=False), tmp_path, np.random.default_rng(2025), 3, report=False)
    record_property("kill_outcomes", outcomes)  # printed at the end of the session (tests/conftest.py)
    assert any("killed, incomplete" in o for o in outcomes)


@pytest.mark.invariants
def test_many_kvsim_run_subprocesses_killed_at_random(tmp_path, record_property):
    outcomes = _kills(Runner(tmp_path, subprocesses=True), tmp_path, np.random.default_rng(7), 24, report=True)
    record_property("kill_outcomes", [f"{o} (subprocess)" for o in outcomes])

