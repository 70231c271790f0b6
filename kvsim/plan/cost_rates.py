"""CPU cost of each simulation path, per engine backend: the rates :mod:`kvsim.plan.cost_model`
multiplies by the work a run will do.

Each backend (``engine.backend``: the pure-Python reference and the compiled kernels) has its own
mapping, fitted by ``benchmarks/cost_rates.py --backend NAME`` with every case run on that
backend; ``kvsim validate`` prices a run at the rates of the backend that will run it.

Every rate is CPU-seconds per unit of one path (see :class:`kvsim.plan.cost_model.PathCounts` for
what each unit is). They were fitted by ``benchmarks/cost_rates.py`` (non-negative least squares
over small cases that each isolate a path: the speed cases of ``benchmarks/speed_cases.py`` --
ladder, offload-nocache, offload-dram_nvme, mooncake, domains, pd -- at reduced durations, plus
prewarmed tiers kept per block and as extents, one probe each of the planning question's DRAM and
pool candidates, LoRA caches and a closed loop; docs/run_cost.md lists them); the run that
measured them is named beside the mapping. They
are a machine's figures: a faster or slower CPU moves them all by about the same factor.
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["RATES", "PATHS", "rates_for"]

PATHS = ("run", "instance", "request", "iteration", "prompt_block", "hbm_block", "tier_block", "flow",
         "domain_block", "handoff", "handoff_flow", "queued_request", "remote_flow", "prewarm_prompt", "prewarm_block",
         "routed_candidate", "miss_block", "value_key",
         "refused_block", "extent_request", "extent_miss", "extent_tier", "prewarm_filing", "load")
"""The paths a run's CPU time is split into (the fields of ``PathCounts``)."""

_PYTHON = MappingProxyType({
    # measured by `python benchmarks/cost_rates.py --backend python --scale 0.1 --repeat 3 --json
    # /tmp/speed/rates-python.json --write-rates --out docs/run_cost.md` (each run the least CPU time
    # of --repeat) at kvsim commit d61f7a2, with uncommitted changes to kvsim/, Python 3.11.7,
    # Intel(R) Xeon(R) Processor, on the project's 2-core machine while other jobs shared it
    # (docs/run_cost.md). Zero: the fit found no cost there beyond what the other paths carry.
    "run": 0.0,
    "instance": 0.000209,
    "request": 0.000187,
    "iteration": 6.12e-08,
    "prompt_block": 1.11e-06,
    "hbm_block": 3.76e-07,
    "tier_block": 1.22e-06,
    "flow": 8.41e-05,
    "domain_block": 0.0,
    "handoff": 8.39e-05,
    "handoff_flow": 2.34e-05,
    "queued_request": 0.000278,
    "remote_flow": 9.04e-06,
    "prewarm_prompt": 0.0,
    "prewarm_block": 9.85e-07,
    "routed_candidate": 3.37e-06,
    "miss_block": 1.35e-06,
    "value_key": 3.39e-07,
    "refused_block": 5.95e-07,
    "extent_request": 8.01e-05,
    "extent_miss": 8.17e-06,
    "extent_tier": 0.0,
    "prewarm_filing": 4.81e-05,
    "load": 0.00112,
})

_COMPILED = MappingProxyType({
    # measured by `python benchmarks/cost_rates.py --backend compiled --scale 0.1 --repeat 3 --json
    # /tmp/speed/rates-compiled.json --write-rates --out docs/run_cost.md` (each run the least CPU
    # time of --repeat) at kvsim commit d61f7a2, with uncommitted changes to kvsim/, Python 3.11.7,
    # Intel(R) Xeon(R) Processor, on the project's 2-core machine while other jobs shared it (load
    # average 8-9), and refitted from those measurements with `--reuse` after the model's last
    # change to its counts (docs/run_cost.md, session 17). Zero: the fit found no cost there
    # beyond what the other paths carry.
    "run": 0.00351,
    "instance": 6.07e-05,
    "request": 4.06e-05,
    "iteration": 8.87e-08,
    "prompt_block": 4.79e-07,
    "hbm_block": 3.59e-07,
    "tier_block": 1.38e-06,
    "flow": 5.28e-05,
    "domain_block": 0.0,
    "handoff": 3.55e-05,
    "handoff_flow": 8.62e-06,
    "queued_request": 0.000376,
    "remote_flow": 2.16e-06,
    "prewarm_prompt": 1.87e-05,
    "prewarm_block": 0.0,
    "routed_candidate": 2.67e-06,
    "miss_block": 6.92e-07,
    "value_key": 2.89e-07,
    "refused_block": 5.37e-07,
    "extent_request": 7.33e-05,
    "extent_miss": 4.97e-05,
    "extent_tier": 0.0,
    "prewarm_filing": 2.96e-05,
    "load": 0.000619,
})

RATES = MappingProxyType({"python": _PYTHON, "compiled": _COMPILED})
"""Rates (CPU-seconds per unit) by engine backend (``engine.backend``)."""


def rates_for(backend: str = "python") -> MappingProxyType:
    """The rates of ``backend``; the pure-Python engine's for a backend with none measured (an
    upper bound: no backend is slower than the reference)."""
    return RATES.get(backend, RATES["python"])
