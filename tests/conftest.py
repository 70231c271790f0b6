"""Shared helpers for the test suite."""

from __future__ import annotations

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
