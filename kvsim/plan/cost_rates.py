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
         "refused_block", "extent_request", "extent_miss")
"""The paths a run's CPU time is split into (the fields of ``PathCounts``)."""

_PYTHON = MappingProxyType({
    # measured by `python benchmarks/cost_rates.py --backend python --scale 0.1 --repeat 3 --json
    # /tmp/speed/rates-python.json --write-rates --out docs/run_cost.md` (each run the least CPU time
    # of --repeat) at kvsim commit 92fe2f0, with uncommitted changes to kvsim/, Python 3.11.7,
    # Intel(R) Xeon(R) Processor, on the project's 2-core machine while other jobs shared it
    # (docs/run_cost.md). Zero: the fit found no cost there beyond what the other paths carry.
    "run": 0.00163,
    "instance": 0.000295,
    "request": 0.000123,
    "iteration": 2.17e-08,
    "prompt_block": 8.57e-07,
    "hbm_block": 3.09e-07,
    "tier_block": 0.0,
    "flow": 0.000127,
    "domain_block": 0.0,
    "handoff": 6.12e-05,
    "handoff_flow": 1.87e-05,
    "queued_request": 0.000271,
    "remote_flow": 2.18e-05,
    "prewarm_prompt": 5.25e-05,
    "prewarm_block": 0.0,
    "routed_candidate": 2.39e-06,
    "miss_block": 7.94e-07,
    "value_key": 2.39e-07,
    "refused_block": 4.73e-07,
    "extent_request": 0.000319,
    "extent_miss": 0.0,
})

_COMPILED = MappingProxyType({
    # measured by `python benchmarks/cost_rates.py --backend compiled --scale 0.1 --repeat 3 --json
    # /tmp/speed/rates-compiled.json --write-rates --out docs/run_cost.md` (each run the least CPU
    # time of --repeat) at kvsim commit 92fe2f0, with uncommitted changes to kvsim/, Python 3.11.7,
    # Intel(R) Xeon(R) Processor, on the project's 2-core machine while other jobs shared it
    # (docs/run_cost.md). Zero: the fit found no cost there beyond what the other paths carry.
    "run": 0.00196,
    "instance": 0.000122,
    "request": 2.56e-05,
    "iteration": 1.65e-08,
    "prompt_block": 8.38e-07,
    "hbm_block": 3.07e-07,
    "tier_block": 0.0,
    "flow": 6.82e-05,
    "domain_block": 0.0,
    "handoff": 3.04e-05,
    "handoff_flow": 7.38e-06,
    "queued_request": 0.000344,
    "remote_flow": 8.87e-06,
    "prewarm_prompt": 5.37e-05,
    "prewarm_block": 0.0,
    "routed_candidate": 1.76e-06,
    "miss_block": 6.07e-07,
    "value_key": 2.5e-07,
    "refused_block": 4.95e-07,
    "extent_request": 9.35e-05,
    "extent_miss": 0.0,
})

RATES = MappingProxyType({"python": _PYTHON, "compiled": _COMPILED})
"""Rates (CPU-seconds per unit) by engine backend (``engine.backend``)."""


def rates_for(backend: str = "python") -> MappingProxyType:
    """The rates of ``backend``; the pure-Python engine's for a backend with none measured (an
    upper bound: no backend is slower than the reference)."""
    return RATES.get(backend, RATES["python"])
