"""Planning: sweeps run as independent, resumable tasks in parallel (:mod:`.sweep`), and the
cost of a run before it runs (:mod:`.cost`).

Layering: ``plan`` sits above ``sim`` (it runs :func:`kvsim.sim.run.run_point` per task) and
below ``cli``; only :mod:`.store` touches the filesystem, inside the results folder it is given.
"""

from kvsim.plan.cost import RunCost, run_cost
from kvsim.plan.executor import ExecutorError, default_workers
from kvsim.plan.sweep import SweepStats, run_sweep

__all__ = ["run_sweep", "SweepStats", "run_cost", "RunCost", "ExecutorError", "default_workers"]
