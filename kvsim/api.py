"""The Python API for notebooks and scripts.

>>> import kvsim
>>> scenario = kvsim.load_scenario("scenarios/h20_vs_l20.yaml")
>>> quick = scenario.with_changes({"duration": "60 s", "warmup": "10 s", "sweep": {}})
>>> result = kvsim.run(quick)
>>> result.summary_frame()          # one row per (sweep point, system)
>>> result.requests_frame()         # one row per request
"""

from __future__ import annotations

from kvsim.report.table import comparison_table
from kvsim.scenario.load import Scenario, load_scenario, parse_scenario
from kvsim.sim import RunResult, check_scenario, run_scenario

__all__ = ["load_scenario", "parse_scenario", "run", "check", "comparison_table", "Scenario", "RunResult"]


def run(scenario: Scenario, seed: int | None = None, progress: bool = False) -> RunResult:
    """Run every system of ``scenario`` at every sweep point (see :func:`kvsim.sim.run_scenario`)."""
    return run_scenario(scenario, seed=seed, progress=progress)


def check(scenario: Scenario) -> None:
    """Raise :class:`kvsim.yaml_io.SpecError` if any system cannot run (weights do not fit, ...)."""
    check_scenario(scenario)
