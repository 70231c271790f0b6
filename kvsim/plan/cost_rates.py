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
         "routed_candidate")
"""The paths a run's CPU time is split into (the fields of ``PathCounts``)."""

_PYTHON = MappingProxyType({
    # measured by `python benchmarks/cost_rates.py --backend python --reuse
    # /tmp/b-bench/rates2-python.json --write-rates --out docs/run_cost.md` (each run the least CPU
    # time of --repeat) at kvsim commit 887566b, with uncommitted changes to kvsim/, Python 3.11.7,
    # AMD EPYC, on the project's 2-core machine while other jobs shared it (docs/run_cost.md). Zero:
    # the fit found no cost there beyond what the other paths carry.
    "run": 0.0,
    "instance": 0.000581,
    "request": 0.000162,
    "iteration": 0.0,
    "prompt_block": 0.0,
    "hbm_block": 1.63e-06,
    "tier_block": 0.0,
    "flow": 0.000115,
    "domain_block": 1.54e-06,
    "handoff": 4.21e-05,
    "handoff_flow": 2.22e-05,
    "queued_request": 0.000282,
    "remote_flow": 0.0,
    "prewarm_prompt": 8.11e-05,
    "prewarm_block": 0.0,
    "routed_candidate": 2.48e-06,
})

_COMPILED = MappingProxyType({
    # measured by `python benchmarks/cost_rates.py --backend compiled --reuse
    # /tmp/b-bench/rates2-compiled.json --write-rates --out docs/run_cost.md` (each run the least CPU
    # time of --repeat) at kvsim commit 887566b, with uncommitted changes to kvsim/, Python 3.11.7,
    # AMD EPYC, on the project's 2-core machine while other jobs shared it (docs/run_cost.md). Zero:
    # the fit found no cost there beyond what the other paths carry.
    "run": 0.0,
    "instance": 0.000607,
    "request": 8.37e-05,
    "iteration": 4.14e-08,
    "prompt_block": 0.0,
    "hbm_block": 1.78e-06,
    "tier_block": 8.36e-06,
    "flow": 0.0,
    "domain_block": 1.38e-06,
    "handoff": 6.44e-05,
    "handoff_flow": 2.5e-05,
    "queued_request": 0.000409,
    "remote_flow": 0.000365,
    "prewarm_prompt": 0.0,
    "prewarm_block": 7.84e-07,
    "routed_candidate": 2.21e-06,
})

RATES = MappingProxyType({"python": _PYTHON, "compiled": _COMPILED})
"""Rates (CPU-seconds per unit) by engine backend (``engine.backend``)."""


def rates_for(backend: str = "python") -> MappingProxyType:
    """The rates of ``backend``; the pure-Python engine's for a backend with none measured (an
    upper bound: no backend is slower than the reference)."""
    return RATES.get(backend, RATES["python"])
