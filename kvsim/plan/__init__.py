"""Capacity planning: sweeps run as independent, resumable tasks in parallel (:mod:`.sweep`), the
size of a run before it runs (:mod:`.run_cost`), the cost model of a configuration (:mod:`.cost`),
and ``kvsim plan``'s search for the cheapest configuration within an SLO (:mod:`.planner`,
:mod:`.search`, :mod:`.command`).

Layering: ``plan`` sits above ``sim`` (it runs :func:`kvsim.sim.run.run_point` per task) and
below ``cli``; only :mod:`.store` and :mod:`.command` touch the filesystem, inside the results
folder they are given.

The names below are imported when first read (a module ``__getattr__``, PEP 562): ``kvsim
validate`` reads a run's cost (:mod:`.run_cost`) without loading the sweep's executor and store.
"""

# eager: the function shares its submodule's name, so it must be bound here before anything
# imports the submodule (which would leave the module as the package's ``run_cost``)
from kvsim.plan.run_cost import RunCost, run_cost

__all__ = ["run_sweep", "SweepStats", "run_cost", "RunCost", "ExecutorError", "default_workers"]


def __getattr__(name: str) -> object:
    if name == "ExecutorError":
        from kvsim.plan.executor import ExecutorError as value
    elif name == "default_workers":
        from kvsim.plan.executor import default_workers as value
    elif name == "SweepStats":
        from kvsim.plan.sweep import SweepStats as value
    elif name == "run_sweep":
        from kvsim.plan.sweep import run_sweep as value
    else:
        raise AttributeError(f"module 'kvsim.plan' has no attribute {name!r}")
    globals()[name] = value  # later reads are plain lookups (and a patched value stays as set)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
