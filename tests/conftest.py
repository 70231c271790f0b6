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
