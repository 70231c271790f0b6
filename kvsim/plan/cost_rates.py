"""CPU cost of each simulation path, per engine backend: the rates :mod:`kvsim.plan.cost_model`
multiplies by the work a run will do.

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
         "domain_block", "handoff", "handoff_flow", "queued_request", "remote_flow", "prewarm_prompt", "prewarm_block")
"""The paths a run's CPU time is split into (the fields of ``PathCounts``)."""

_PYTHON = MappingProxyType({
    # measured by `python benchmarks/cost_rates.py --scale 0.1 --repeat 2` (each run the least CPU
    # time of two) at commit 5276a9b, the pd-tp4 case at ba8b185, on the project's 2-core AMD EPYC
    # machine (Python 3.11.7) while other jobs shared it; refitted on those measurements with
    # `--reuse` for the model's paths as committed with these rates (docs/run_cost.md). Zero: the
    # fit found no cost there beyond what the other paths carry (e.g. domain lookups are in the
    # per-block rates, local-tier transfers in tier_block).
    "run": 0.0,
    "instance": 0.0017,
    "request": 0.000488,
    "iteration": 1.93e-07,
    "prompt_block": 0.0,
    "hbm_block": 1.29e-05,
    "tier_block": 2.11e-05,
    "flow": 0.0,
    "domain_block": 0.0,
    "handoff": 8.17e-05,
    "handoff_flow": 0.00015,
    "queued_request": 0.0016,
    "remote_flow": 0.000922,
    "prewarm_prompt": 0.000254,
    "prewarm_block": 0.0,
})

RATES = MappingProxyType({
    "python": _PYTHON,
    # "compiled": the typed compiled core (issue 23, item 2) is being built elsewhere; its rates go
    # here, measured the same way (benchmarks/cost_rates.py run with that backend) once it runs.
    # Until then rates_for("compiled") answers with the python rates (an upper bound).
})
"""Rates (CPU-seconds per unit) by engine backend (``engine.backend``)."""


def rates_for(backend: str = "python") -> MappingProxyType:
    """The rates of ``backend``; the pure-Python engine's when that backend has none measured yet."""
    return RATES.get(backend, RATES["python"])
