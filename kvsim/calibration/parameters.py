"""The parameters a calibration may fit: one table, name -> where it applies, bounds, meaning.

A parameter is a physical quantity of one card family (an achieved fraction of a datasheet peak,
a fixed cost per iteration), never a per-workload fudge. Its *default* is the catalog's sourced
value (``kvsim/hardware/data/accelerators.yaml`` and its ``sources:``); its *bounds* are the
physically plausible range, so a fit cannot wander into nonsense to absorb a modelling gap.

Where a parameter applies:

- ``accelerator``: a field of the accelerator's :class:`~kvsim.hardware.specs.EfficiencySpec`,
  written into a scenario as ``catalog: {accelerators: {NAME: {efficiency: {FIELD: value}}}}``.

Adding a parameter is one entry in :data:`PARAMETERS`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Mapping

from kvsim.catalog import deep_merge
from kvsim.hardware.specs import AcceleratorSpec

__all__ = ["Parameter", "PARAMETERS", "DEFAULT_FIT", "parameter", "default_values", "apply_to_raw",
           "apply_to_accelerator"]


@dataclass(frozen=True)
class Parameter:
    """One fittable parameter.

    Attributes
    ----------
    name : str
        Dotted name as written in ``calib.yaml`` (``efficiency.memory``).
    target : str
        ``accelerator`` (a field of the card's efficiency spec).
    field : str
        The field within the target (``memory``).
    lower, upper : float
        Physical bounds (SI: seconds or a fraction).
    unit : str
        ``""`` for a fraction, ``"s"`` for seconds.
    meaning : str
        What the parameter stands for, and why its bounds.
    """

    name: str
    target: str
    field: str
    lower: float
    upper: float
    unit: str
    meaning: str


PARAMETERS: dict[str, Parameter] = {p.name: p for p in (
    Parameter("efficiency.compute", "accelerator", "compute", 0.15, 0.9, "",
              "achieved fraction of the dense peak in compute-bound work (MFU); FlashAttention-3 reaches "
              "0.75 on H100 BF16, large GEMMs 0.7-0.9 (hardware_facts.md section 5)"),
    Parameter("efficiency.memory", "accelerator", "memory", 0.4, 0.98, "",
              "achieved fraction of peak HBM bandwidth streaming weights and KV; measured decode "
              "attention reaches 0.63-0.96 (hardware_facts.md section 5)"),
    Parameter("efficiency.interconnect", "accelerator", "interconnect", 0.3, 0.95, "",
              "achieved fraction of NVLink bandwidth in all-reduce (NCCL measures 0.83-0.88)"),
    Parameter("efficiency.collective_latency_s", "accelerator", "collective_latency_s", 1e-6, 100e-6, "s",
              "fixed latency of one all-reduce (a few us on NVLink, up to tens of us with launch costs)"),
    Parameter("efficiency.iteration_overhead_s", "accelerator", "iteration_overhead_s", 0.0, 0.02, "s",
              "fixed time per engine iteration: scheduling, kernel launches, sampling (0-20 ms)"),
)}

DEFAULT_FIT = ("efficiency.memory", "efficiency.iteration_overhead_s", "efficiency.compute")
"""What ``kvsim calibrate`` fits unless told otherwise: few, physical, identifiable from the data."""


def parameter(name: str) -> Parameter:
    """The parameter called ``name``; ValueError naming the known ones otherwise."""
    if name not in PARAMETERS:
        raise ValueError(f"unknown calibration parameter {name!r}; known: {', '.join(PARAMETERS)}")
    return PARAMETERS[name]


def default_values(names: tuple[str, ...] | list[str], accelerator: AcceleratorSpec) -> dict[str, float]:
    """Each parameter's current (datasheet / catalog) value for ``accelerator``."""
    out = {}
    for name in names:
        p = parameter(name)
        out[name] = float(getattr(accelerator.efficiency, p.field))
    return out


def apply_to_accelerator(accelerator: AcceleratorSpec, values: Mapping[str, float]) -> AcceleratorSpec:
    """A copy of ``accelerator`` with the accelerator parameters of ``values`` set."""
    fields = {parameter(n).field: float(v) for n, v in values.items() if parameter(n).target == "accelerator"}
    if not fields:
        return accelerator
    efficiency = accelerator.efficiency.model_copy(update=fields)
    return accelerator.model_copy(update={"efficiency": efficiency})


def apply_to_raw(raw: dict[str, Any], accelerator: str, values: Mapping[str, float]) -> dict[str, Any]:
    """A copy of scenario data ``raw`` with ``values`` applied for card ``accelerator``.

    Values the scenario states itself (its own ``catalog:`` entry for that card) win over the
    calibration's: an explicit choice in the file is never silently replaced.
    """
    out = copy.deepcopy(raw)
    efficiency = {parameter(n).field: _yaml_value(parameter(n), v) for n, v in values.items()
                  if parameter(n).target == "accelerator"}
    if efficiency:
        catalog = out.setdefault("catalog", {}) or {}
        out["catalog"] = catalog
        accelerators = catalog.setdefault("accelerators", {}) or {}
        catalog["accelerators"] = accelerators
        own = accelerators.get(accelerator) or {}
        accelerators[accelerator] = deep_merge({"efficiency": efficiency}, own)
    return out


def _yaml_value(p: Parameter, value: float) -> float | str:
    """The value as a scenario file states it (catalog entries refuse bare numbers for quantities)."""
    return f"{float(value)!r} {p.unit}" if p.unit else float(value)
