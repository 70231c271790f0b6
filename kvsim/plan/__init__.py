"""Capacity planning: sweeps run as independent, resumable tasks in parallel (:mod:`.sweep`), the
size of a run before it runs (:mod:`.run_cost`), the cost model of a configuration (:mod:`.cost`),
and ``kvsim plan``'s search for the cheapest configuration within an SLO (:mod:`.planner`,
:mod:`.search`, :mod:`.command`).

Layering: ``plan`` sits above ``sim`` (it runs :func:`kvsim.sim.run.run_point` per task) and
below ``cli``; only :mod:`.store` and :mod:`.command` touch the filesystem, inside the results
folder they are given.
"""

from kvsim.plan.executor import ExecutorError, default_workers
from kvsim.plan.run_cost import RunCost, run_cost
from kvsim.plan.sweep import SweepStats, run_sweep

__all__ = ["run_sweep", "SweepStats", "run_cost", "RunCost", "ExecutorError", "default_workers"]
