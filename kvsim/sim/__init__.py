"""Building live simulation objects from specs, running them, and their results."""

from kvsim.sim.result import RunResult, SystemRun
from kvsim.sim.run import check_scenario, run_scenario, simulate_system
from kvsim.sim.sizing import SizingError, SystemSizing, size_system

__all__ = [
    "RunResult", "SystemRun", "check_scenario", "run_scenario", "simulate_system",
    "SizingError", "SystemSizing", "size_system",
]
