"""Shared helpers for the test suite."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def built_systems(monkeypatch) -> list:
    """Every live System the runs of this test build, in order (to inspect after the run)."""
    import kvsim.sim.run as run_module

    systems: list = []
    real_build = run_module.build_system

    def capture(*args, **kwargs):
        systems.append(real_build(*args, **kwargs))
        return systems[-1]

    monkeypatch.setattr(run_module, "build_system", capture)
    return systems


@pytest.fixture
def refused(tmp_path, capsys):
    """``refused(system_yaml, model=...)``: validate a one-system scenario (the system's fields
    indented under ``systems: s:``) that must be refused; returns the error text."""
    from kvsim.cli import main

    def check(system: str, model: str = "qwen3-8b") -> str:
        path = tmp_path / "bad.yaml"
        path.write_text(f"""name: bad
duration: 10 s
model: {model}
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 100}}
  output_tokens: {{kind: fixed, value: 10}}
systems:
  s:
    {system}
""", encoding="utf-8")
        assert main(["validate", str(path)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return err

    return check


def pytest_terminal_summary(terminalreporter) -> None:
    """The invariant suite's tally (tests/test_invariants.py, tests/test_kill.py): scenarios
    checked, violations found, what the scenarios drew and what happened in their runs, and the
    kills. Read from the test reports' ``user_properties``, so it also counts tests that ran in
    pytest-xdist workers."""
    scenarios, kills, fuzz = [], [], {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for name, value in getattr(report, "user_properties", ()):
                if name == "invariant_scenario":
                    scenarios.append(value)
                elif name == "kill_outcomes":
                    kills += value
                elif name == "fuzz_outcomes":
                    for kind, count in value.items():
                        fuzz[kind] = fuzz.get(kind, 0) + count
    if scenarios:
        failed = sorted(s["case"] for s in scenarios if s["violations"])
        swept = sum(1 for s in scenarios if s.get("workers"))
        terminalreporter.write_line(
            f"invariants: {len(scenarios)} random scenarios checked ({swept} also swept with workers=1 and 2), "
            f"{sum(s['violations'] for s in scenarios)} violations" + (f" (cases {failed[:20]})" if failed else "")
            + f", {sum(s['seconds'] for s in scenarios):.1f} s")
        for key, label in (("features", "scenarios drawn with"), ("effects", "scenarios in which it happened")):
            counts: dict[str, int] = {}
            for s in scenarios:
                for item in s[key]:
                    counts[item] = counts.get(item, 0) + 1
            listed = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
            terminalreporter.write_line(f"invariants: {label}: {listed}")
    if fuzz:  # tests/test_fuzz.py (every chunk, passed or failed)
        terminalreporter.write_line(
            f"fuzz: {sum(fuzz.values()):,} cases, {fuzz.get('traceback', 0)} tracebacks, {fuzz.get('hang', 0)} hangs, "
            f"{fuzz.get('accepted-invalid', 0)} accepted-invalid, {fuzz.get('bad-message', 0)} bad messages "
            f"({fuzz.get('ok-valid', 0):,} valid and run or checked, {fuzz.get('ok-invalid', 0):,} invalid and refused)")
    if kills:
        terminalreporter.write_line(f"kill test: {len(kills)} kills: " + "; ".join(kills))


@pytest.fixture
def kernel_for_this_python(tmp_path, monkeypatch):
    # Pin the notebook kernel to the interpreter running the tests (the one with kvsim
    # installed), whatever kernels the machine has registered elsewhere.
    spec_dir = tmp_path / "jupyter" / "kernels" / "kvsim-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "kvsim test", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return "kvsim-test"
