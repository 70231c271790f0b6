"""The parameters a calibration may fit: one table, name -> where it applies, bounds, meaning.

A parameter is a physical quantity of one card family (an achieved fraction of a datasheet peak,
a fixed cost per iteration), never a per-workload fudge. Its *default* is the catalog's sourced
value (``kvsim/hardware/data/accelerators.yaml`` and its ``sources:``); its *bounds* are the
physically plausible range, so a fit cannot wander into nonsense to absorb a modelling gap.

Where a parameter applies:

- ``accelerator``: a field of the accelerator's :class:`~kvsim.hardware.specs.EfficiencySpec`,
  written into a scenario as ``catalog: {accelerators: {NAME: {efficiency: {FIELD: value}}}}``;
- ``engine``: a field of the scenario's :class:`~kvsim.models.engine.EngineSpec` (``engine:``).

Adding a parameter is one entry in :data:`PARAMETERS`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvsim.catalog import deep_merge
from kvsim.hardware.specs import AcceleratorSpec
from kvsim.models.engine import EngineSpec

__all__ = ["Parameter", "PARAMETERS", "DEFAULT_FIT", "parameter", "default_values", "apply_to_raw",
           "apply_to_accelerator", "engine_with"]


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
              "achieved fraction of the dense peak in compute-bound work (MFU), for every number format the "
              "card's efficiency.compute_formats does not give a figure of its own (the H100's FP8 has one); "
              "FlashAttention-3 reaches 0.75 on H100 BF16, large GEMMs 0.7-0.9 (hardware_facts.md section 5)"),
    Parameter("efficiency.compute_half_tokens", "accelerator", "compute_half_tokens", 0.0, 4096.0, "",
              "tokens in an iteration at which GEMMs reach half their large-batch efficiency (0: flat); "
              "small-m GEMMs reach 0.07-0.58 of peak (InferSim DeepGEMM data, hardware_facts.md section 5)"),
    Parameter("efficiency.memory", "accelerator", "memory", 0.4, 0.98, "",
              "achieved fraction of peak HBM bandwidth streaming weights (aiconfigurator derates 0.8)"),
    Parameter("efficiency.kv_memory", "accelerator", "kv_memory", 0.3, 0.98, "",
              "achieved fraction of peak HBM bandwidth reading paged KV in attention; measured decode "
              "attention reaches 0.63-0.96 on Hopper (hardware_facts.md section 5)"),
    Parameter("efficiency.interconnect", "accelerator", "interconnect", 0.3, 0.95, "",
              "achieved fraction of NVLink bandwidth in all-reduce (NCCL measures 0.83-0.88)"),
    Parameter("efficiency.collective_latency_s", "accelerator", "collective_latency_s", 1e-6, 100e-6, "s",
              "latency of one card-to-card step of a collective (a few us on NVLink, tens with launch costs)"),
    Parameter("engine.step_fixed_s", "engine", "step_fixed_s", 0.0, 0.02, "s",
              "host and launch time of every iteration (0-20 ms; CUDA graphs keep it under ~1 ms)"),
    Parameter("engine.step_per_seq_s", "engine", "step_per_seq_s", 0.0, 200e-6, "s",
              "host time per sequence in an iteration: scheduler bookkeeping, block tables, sampling"),
    Parameter("engine.step_per_token_s", "engine", "step_per_token_s", 0.0, 10e-6, "s",
              "host time per scheduled token of an iteration (input tensors)"),
    Parameter("engine.kernel_s", "engine", "kernel_s", 0.0, 30e-6, "s",
              "GPU time per kernel launch outside the roofline (setup, tail, gap; a few us with CUDA graphs)"),
    Parameter("engine.api_s", "engine", "api_s", 0.0, 0.05, "s",
              "per request, arrival at the API server to the engine's queue (HTTP, template, IPC)"),
    Parameter("engine.tokenize_s_per_token", "engine", "tokenize_s_per_token", 0.0, 20e-6, "s",
              "tokenisation time per prompt token"),
    Parameter("engine.output_s", "engine", "output_s", 0.0, 0.02, "s",
              "end of the step that sampled a token to the client receiving it (detokenise, stream)"),
)}

DEFAULT_FIT = ("efficiency.memory", "efficiency.kv_memory", "engine.kernel_s", "engine.api_s")
"""What ``kvsim calibrate`` fits unless told otherwise: few, physical, identifiable from the data
(weight streaming and KV reads set TPOT at small and large batches; kernel launches, a cost per
layer, set the part of a step no roofline sees and tell models of different depth apart; the
request path sets the part of TTFT outside the engine)."""


def parameter(name: str) -> Parameter:
    """The parameter called ``name``; ValueError naming the known ones otherwise."""
    if name not in PARAMETERS:
        raise ValueError(f"unknown calibration parameter {name!r}; known: {', '.join(PARAMETERS)}")
    return PARAMETERS[name]


def default_values(names: tuple[str, ...] | list[str], accelerator: AcceleratorSpec,
                   engine: EngineSpec | None = None) -> dict[str, float]:
    """Each parameter's current (datasheet / catalog / engine default) value for ``accelerator``.

    ``efficiency.kv_memory`` unset in the catalog means "same as memory", and starts there.
    """
    engine = engine if engine is not None else EngineSpec()
    out = {}
    for name in names:
        p = parameter(name)
        if p.target == "engine":
            out[name] = float(getattr(engine, p.field))
            continue
        value = getattr(accelerator.efficiency, p.field)
        if value is None and p.field == "kv_memory":
            value = accelerator.efficiency.memory
        out[name] = float(value)
    return out


def engine_with(engine: EngineSpec | None, values: Mapping[str, float]) -> EngineSpec:
    """``engine`` (default: :class:`EngineSpec`) with the engine parameters of ``values`` set."""
    engine = engine if engine is not None else EngineSpec()
    fields = {parameter(n).field: float(v) for n, v in values.items() if parameter(n).target == "engine"}
    return engine.model_copy(update=fields) if fields else engine


def apply_to_accelerator(accelerator: AcceleratorSpec, values: Mapping[str, float]) -> AcceleratorSpec:
    """A copy of ``accelerator`` with the accelerator parameters of ``values`` set."""
    fields = {parameter(n).field: float(v) for n, v in values.items() if parameter(n).target == "accelerator"}
    if not fields:
        return accelerator
    efficiency = accelerator.efficiency.model_copy(update=fields)
    return accelerator.model_copy(update={"efficiency": efficiency})


def apply_to_raw(raw: dict[str, Any], accelerator: str, values: Mapping[str, float],
                 systems: Sequence[str] | None = None) -> dict[str, Any]:
    """A copy of scenario data ``raw`` with ``values`` applied for card ``accelerator``.

    Values the scenario states itself (its own ``catalog:`` entry for that card, its own
    ``engine:`` fields) win over the calibration's: an explicit choice in the file is never
    silently replaced. A system's own ``engine:`` fields win over both, as always.

    Engine values were fitted with the calibration's card, so they belong to the systems that run
    on it: with ``systems`` given they go to those systems' own ``engine:`` (and to no other);
    without, to the scenario's ``engine:`` (a scenario of one system, as a calibration run is).
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
    engine = {parameter(n).field: _yaml_value(parameter(n), v) for n, v in values.items()
              if parameter(n).target == "engine"}
    if not engine:
        return out
    if systems is None:
        out["engine"] = deep_merge(engine, out.get("engine") or {})
        return out
    stated = out.get("engine") or {}
    engine = {k: v for k, v in engine.items() if k not in stated}
    for name in systems:
        system = out["systems"][name]
        system["engine"] = deep_merge(engine, system.get("engine") or {})
    return out


def _yaml_value(p: Parameter, value: float) -> float | str:
    """The value as a scenario file states it (catalog entries refuse bare numbers for quantities)."""
    return f"{float(value)!r} {p.unit}" if p.unit else float(value)
