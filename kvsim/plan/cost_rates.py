"""CPU cost of each simulation path, per engine backend: the rates :mod:`kvsim.plan.cost_model`
multiplies by the work a run will do.

Each backend (``engine.backend``: the pure-Python reference and the compiled kernels) has its own
mapping, fitted by ``benchmarks/cost_rates.py --backend NAME`` with every case run on that
backend; ``kvsim validate`` prices a run at the rates of the backend that will run it.

Every rate is CPU-seconds per unit of one path (see :class:`kvsim.plan.cost_model.PathCounts` for
what each unit is). They were fitted by ``benchmarks/cost_rates.py`` (non-negative least squares
over small cases that each isolate a path: the speed cases of ``benchmarks/speed_cases.py`` --
ladder, offload-nocache, offload-dram_nvme, mooncake, domains, pd -- at reduced durations, plus a
prewarmed tier and a closed loop); the run that measured them is named beside the mapping. They
are a machine's figures: a faster or slower CPU moves them all by about the same factor.
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["RATES", "PATHS", "rates_for"]

PATHS = ("run", "instance", "request", "iteration", "prompt_block", "hbm_block", "tier_block", "flow",
         "domain_block", "handoff", "handoff_flow", "queued_request", "remote_flow", "prewarm_prompt", "prewarm_block",
         "routed_candidate", "miss_block", "value_key",
         "refused_block")
"""The paths a run's CPU time is split into (the fields of ``PathCounts``)."""

_PYTHON = MappingProxyType({
    # measured by `python benchmarks/cost_rates.py --backend python --scale 0.1 --repeat 3 --json
    # /tmp/ecost/final2-rates-python.json --write-rates --out docs/run_cost.md` (each run the least
    # CPU time of --repeat) at kvsim commit 2f400ed, Python 3.11.7, AMD EPYC, on the project's 2-core
    # machine while other jobs shared it (docs/run_cost.md). Zero: the fit found no cost there beyond
    # what the other paths carry.
    "run": 0.00286,
    "instance": 0.000377,
    "request": 0.000132,
    "iteration": 3.99e-08,
    "prompt_block": 1.27e-06,
    "hbm_block": 4.57e-07,
    "tier_block": 0.0,
    "flow": 0.000173,
    "domain_block": 9.83e-07,
    "handoff": 5.61e-05,
    "handoff_flow": 3.08e-05,
    "queued_request": 0.000303,
    "remote_flow": 3.6e-05,
    "prewarm_prompt": 5.68e-05,
    "prewarm_block": 2e-08,
    "routed_candidate": 3.03e-06,
    "miss_block": 7.98e-07,
    "value_key": 3.28e-07,
    "refused_block": 6.49e-07,
})

_COMPILED = MappingProxyType({
    # measured by `python benchmarks/cost_rates.py --reuse /tmp/ecost/final-rates-compiled.json
    # --write-rates --out docs/run_cost.md` (each run the least CPU time of --repeat) at kvsim commit
    # e300816, with uncommitted changes to kvsim/, Python 3.11.7, AMD EPYC, on the project's 2-core
    # machine while other jobs shared it (docs/run_cost.md). Zero: the fit found no cost there beyond
    # what the other paths carry.
    "run": 0.0,
    "instance": 0.000311,
    "request": 7e-05,
    "iteration": 2.03e-07,
    "prompt_block": 0.0,
    "hbm_block": 7.26e-07,
    "tier_block": 0.0,
    "flow": 0.000288,
    "domain_block": 1.36e-06,
    "handoff": 3.6e-05,
    "handoff_flow": 2.42e-05,
    "queued_request": 0.000398,
    "remote_flow": 3.96e-05,
    "prewarm_prompt": 7.2e-05,
    "prewarm_block": 0.0,
    "routed_candidate": 3.42e-06,
    "miss_block": 1.47e-06,
    "value_key": 5.22e-07,
    "refused_block": 1.73e-06,
})

RATES = MappingProxyType({"python": _PYTHON, "compiled": _COMPILED})
"""Rates (CPU-seconds per unit) by engine backend (``engine.backend``)."""


def rates_for(backend: str = "python") -> MappingProxyType:
    """The rates of ``backend``; the pure-Python engine's for a backend with none measured (an
    upper bound: no backend is slower than the reference)."""
    return RATES.get(backend, RATES["python"])
