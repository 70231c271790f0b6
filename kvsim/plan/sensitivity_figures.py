"""The figures a plan's answer is tested against (``plan.sensitivity``): which, their ranges, and how
to set one in a scenario.

A figure is *assumed* when its catalog source says so: the text under ``sources:`` contains
"assumption" or "unconfirmed" (the rule the cost model uses to list assumptions,
:mod:`kvsim.metrics.cost`), or it is a model default the code documents as an assumption (the
engine's per-step fixed cost, a node's host staging, the cost model's defaults). Only the figures
of the parts a candidate uses count, and only those of the candidates that win or come second at
some target are varied (:mod:`kvsim.plan.sensitivity`).

Two kinds:

- **cost** figures (prices, power draws, the cost model's electricity price, PUE and
  amortisation) leave every unit count as it is: a candidate's cost per hour is affine in each of
  them (in 1 / amortisation for the amortisation), so where the answer flips is solved exactly.
- **physics** figures (efficiencies without a measurement, host staging rates, pool-node
  bandwidths, the engine's fixed cost per step) change capacities: the two candidates are
  re-planned at each end of the range with probes.

Default ranges (``DEFAULT_RANGES``), each a multiple of the catalog figure unless sourced:

=============================  =================  =============================================
figure                          range              why
=============================  =================  =============================================
price_usd (marked assumed)      x0.5 - x1.5        the L20's own source names ~USD 4,000 a card
                                                   against the 7,500 taken (server x0.73); NVMe
                                                   $/TB 60-185 (pool nodes, x0.53 - x1)
host_power_w, power_w, tdp_w    x0.75 - x1.25      parts summed at TDP; typical draw is lower
cost.energy_usd_per_kwh         0.068 - 0.21       EIA 2024 industrial low to commercial high
cost.pue                        1.1 - 1.58         hyperscale to the 2023 industry average
cost.amortisation               3 - 6 years        cloud depreciation before and after 2022
efficiency.compute (assumed)    x0.75 - x1.25      measured cards sit 0.35-0.70 (catalog)
efficiency.memory, kv_memory    x0.9 - x1.1        stand-ins from a sibling card's kernels
engine.step_fixed_s (default)   x0.5 - x2          "assumption, L" (kvsim/models/engine.py)
engine.kernel_s (default, on a  x0.5 - x2          measured (derived) on the H100 only; another
card measured on no kin)                           family takes the H100's graph-mode gap as is
                                                   (a card is measured if its catalog sources
                                                   have ``engine.kernel_s``)
host_staging.memcpy_bandwidth   x0.5 - x2          9-20 GB/s per thread measured on client cores
pool read/write_bandwidth       x0.75 - x1.25      write taken as half of read (assumption)
pool access_latency_s           x0.5 - x2          70-90 us drives; software on top unknown
=============================  =================  =============================================

Efficiencies are capped at 1. ``plan.sensitivity.figures`` replaces the list and may give any
range (:mod:`kvsim.scenario.sensitivity_spec`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from kvsim.scenario.load import Scenario
from kvsim.yaml_io import SpecError

__all__ = ["Figure", "find_figures", "chosen_figures", "with_figure", "PRIORITY", "DEFAULT_RANGES"]

YEAR_S = 8760.0 * 3600.0

DEFAULT_RANGES: dict[str, tuple[str, float, float]] = {
    # key: (how, low, high): "x" multiplies the figure, "=" gives the ends
    "price_usd": ("x", 0.5, 1.5),
    "power": ("x", 0.75, 1.25),
    "energy_usd_per_kwh": ("=", 0.068, 0.21),
    "pue": ("=", 1.1, 1.58),
    "amortisation": ("=", 3 * YEAR_S, 6 * YEAR_S),
    "efficiency.compute": ("x", 0.75, 1.25),
    "efficiency.memory": ("x", 0.9, 1.1),
    "step_fixed_s": ("x", 0.5, 2.0),
    "kernel_s": ("x", 0.5, 2.0),
    "memcpy_bandwidth": ("x", 0.5, 2.0),
    "pool_bandwidth": ("x", 0.75, 1.25),
    "access_latency_s": ("x", 0.5, 2.0),
}

PRIORITY = ("efficiency.compute", "step_fixed_s", "memcpy_bandwidth", "pool_bandwidth", "efficiency.memory",
            "access_latency_s", "kernel_s")
"""Order in which physics figures are taken up to ``plan.sensitivity.physics``: the card's compute
efficiency first (it sets prefill time, hence TTFT), then the engine's fixed cost per step (it
sets TPOT at small batches), host staging, the pool's bandwidths, memory efficiencies (stand-ins
from a sibling card, closer to measured), the pool's latency, and the kernel-launch gap taken from
another card family (a few per cent of a step but for deep models at small batches)."""

_UNIT = {"power": "W", "bandwidth": "B/s", "time": "s"}


@dataclass
class Figure:
    """One figure varied: where it is, what it is now, its range and why.

    Attributes
    ----------
    field : str
        Dotted path (``catalog.nodes.l20-8x.price_usd``), as ``--set`` writes it.
    label : str
        In words, for the report.
    kind : str
        ``cost`` (unit counts unchanged; exact flip point) or ``physics`` (re-planned with probes).
    base, low, high : float
        The figure as the plan ran, and the ends of its range (SI units; US dollars for prices).
    dimension : str or None
        ``usd``, ``power``, ``bandwidth``, ``time``, ``years`` (an amortisation) or None (a number).
    source : str
        The catalog's source text, or why it counts as an assumption.
    range_note : str
        Where the range comes from.
    systems : list of str
        Candidates that use it.
    rule : str
        Its key in :data:`DEFAULT_RANGES` (empty for a field the scenario names that no rule knows).
    """

    field: str
    label: str
    kind: str
    base: float
    low: float
    high: float
    dimension: str | None
    source: str
    range_note: str
    systems: list[str] = dataclass_field(default_factory=list)
    rule: str = ""

    @property
    def reciprocal(self) -> bool:
        """Cost is affine in 1 / the figure (the amortisation period), not in the figure."""
        return self.field == "cost.amortisation"

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "label": self.label, "kind": self.kind, "base": self.base, "low": self.low,
                "high": self.high, "dimension": self.dimension, "source": self.source, "range_note": self.range_note,
                "confidence": confidence(self.source), "systems": list(self.systems)}


def confidence(source: str) -> str:
    """The confidence a source states: ``ASSUMPTION``/``UNCONFIRMED`` and its letter (H, M, L) if any."""
    words = [w for w in ("UNCONFIRMED", "ASSUMPTION", "stand-in") if w.lower() in source.lower()]
    letters = re.findall(r"\((?:[^()]*, )?([HML](?:/[HML])?)\)", source)
    text = ", ".join(dict.fromkeys(w.upper() for w in words)) or "documented default"
    return text + (f" ({'/'.join(dict.fromkeys(letters))})" if letters else "")


def _assumed(source: str | None) -> bool:
    text = (source or "").lower()
    return "assumption" in text or "unconfirmed" in text


def _ends(rule: str, base: float, cap: float | None = None) -> tuple[float, float, str]:
    how, a, b = DEFAULT_RANGES[rule]
    if how == "=":
        return a, b, "sourced range (kvsim/plan/sensitivity_figures.py)"
    low, high = base * a, base * b
    if cap is not None:
        high = min(high, cap)
    return low, high, f"x{a:g} to x{b:g} of the figure" + (f", capped at {cap:g}" if cap is not None else "")


def find_figures(scenario: Scenario, systems: Sequence[str]) -> list[Figure]:
    """Every assumed figure the ``systems`` depend on, each once (its ``systems`` those that use
    it), with its default range: cost figures first, then physics ones in :data:`PRIORITY` order."""
    from kvsim.hardware.specs import HostStagingSpec
    from kvsim.metrics.cost import _model_assumptions  # the defaults the cost model names
    from kvsim.models.engine import EngineSpec
    from kvsim.sim.sizing import size_system

    spec = scenario.spec
    found: dict[str, Figure] = {}

    def add(path: str, label: str, kind: str, base: float | None, rule: str, dimension: str | None, source: str,
            system: str, cap: float | None = None) -> None:
        if base is None or not base > 0:
            return
        if path in found:
            if system not in found[path].systems:
                found[path].systems.append(system)
            return
        low, high, note = _ends(rule, float(base), cap)
        found[path] = Figure(path, label, kind, float(base), low, high, dimension, source, note, [system], rule)

    for system in systems:
        sizing = size_system(spec, system, scenario.catalogs)
        for pool in sizing.pools:
            node, card = pool.node, pool.accelerator
            n, c = f"catalog.nodes.{node.name}", f"catalog.accelerators.{card.name}"
            if _assumed(node.sources.get("price_usd")):
                add(f"{n}.price_usd", f"price of a {node.name} server", "cost", node.price_usd, "price_usd", "usd",
                    node.sources["price_usd"], system)
            if _assumed(node.sources.get("host_power_w")):
                add(f"{n}.host_power_w", f"host power of {node.name}", "cost", node.host_power_w, "power", "power",
                    node.sources["host_power_w"], system)
            power_field = "typical_power_w" if card.typical_power_w is not None else "tdp_w"
            if _assumed(card.sources.get(power_field)):
                add(f"{c}.{power_field}", f"{card.name} card draw", "cost", getattr(card, power_field), "power",
                    "power", card.sources[power_field], system)
            if _assumed(card.sources.get("efficiency.compute")):
                add(f"{c}.efficiency.compute", f"{card.name} compute efficiency (MFU)", "physics",
                    card.efficiency.compute, "efficiency.compute", None, card.sources["efficiency.compute"], system, 1.0)
            for name in ("memory", "kv_memory"):
                value = getattr(card.efficiency, name, None)
                source = card.sources.get(f"efficiency.{name}")
                if value is not None and _assumed(source):
                    add(f"{c}.efficiency.{name}", f"{card.name} {name.replace('_', ' ')} efficiency", "physics",
                        value, "efficiency.memory", None, source or "", system, 1.0)
            cache = sizing.spec.kv_cache
            bounce = cache is not None and (cache.nvme is not None
                                            or (cache.remote is not None and not cache.gpu_direct))
            if bounce and node.host_staging == HostStagingSpec():
                add(f"{n}.host_staging.memcpy_bandwidth", f"{node.name} host staging copy rate per thread", "physics",
                    node.host_staging.memcpy_bandwidth, "memcpy_bandwidth", "bandwidth",
                    "assumption: HostStagingSpec default, 10 GB/s per thread (kvsim/hardware/specs.py, UNCONFIRMED)",
                    system)
        pool_node = sizing.pool_node
        if pool_node is not None:
            p = f"catalog.pool_nodes.{pool_node.name}"
            if _assumed(pool_node.sources.get("price_usd")):
                add(f"{p}.price_usd", f"price of a {pool_node.name} pool node", "cost", pool_node.price_usd,
                    "price_usd", "usd", pool_node.sources["price_usd"], system)
            if _assumed(pool_node.sources.get("power_w")):
                add(f"{p}.power_w", f"power of a {pool_node.name} pool node", "cost", pool_node.power_w, "power",
                    "power", pool_node.sources["power_w"], system)
            for name in ("read_bandwidth", "write_bandwidth"):
                if _assumed(pool_node.sources.get(name)):
                    add(f"{p}.{name}", f"{pool_node.name} {name.replace('_', ' ')}", "physics",
                        getattr(pool_node, name), "pool_bandwidth", "bandwidth", pool_node.sources[name], system)
            if _assumed(pool_node.sources.get("access_latency_s")):
                add(f"{p}.access_latency_s", f"{pool_node.name} access latency", "physics", pool_node.access_latency_s,
                    "access_latency_s", "time", pool_node.sources["access_latency_s"], system)
        engine = spec.system_engine(system)
        if engine.step_fixed_s == EngineSpec().step_fixed_s and spec.engine.step_fixed_s == engine.step_fixed_s:
            add("engine.step_fixed_s", "engine fixed cost per step", "physics", engine.step_fixed_s, "step_fixed_s",
                "time", "assumption (L): the per-step floor above the roofline (kvsim/models/engine.py)", system)
        unmeasured = [pool.accelerator.name for pool in sizing.pools if "engine.kernel_s" not in pool.accelerator.sources]
        if unmeasured and engine.kernel_s == EngineSpec().kernel_s and spec.engine.kernel_s == engine.kernel_s:
            add("engine.kernel_s", "GPU gap per kernel launch", "physics", engine.kernel_s, "kernel_s", "time",
                "assumption: the H100's graph-mode gap per kernel (derived from Hazy Research's SGLang "
                "measurement, M; kvsim/models/engine.py) taken as is for cards of families it was not measured on",
                system)
    defaults = " ".join(_model_assumptions(spec.cost, remote_pool=False))
    first = systems[0] if systems else ""
    for name, label, dimension in (("energy_usd_per_kwh", "electricity price (USD/kWh)", None),
                                   ("pue", "PUE", None), ("amortisation", "amortisation period", "years")):
        if f"{name} = " in defaults:
            text = next(t for t in _model_assumptions(spec.cost, remote_pool=False) if t.startswith(f"{name} ="))
            add(f"cost.{name}", label, "cost", getattr(spec.cost, name), name, dimension,
                f"assumption: cost model default; {text}", first)
            found[f"cost.{name}"].systems = list(systems)
    cost = [f for f in found.values() if f.kind == "cost"]
    physics = sorted((f for f in found.values() if f.kind == "physics"), key=lambda f: PRIORITY.index(f.rule))
    return cost + physics


def chosen_figures(scenario: Scenario, systems: Sequence[str]) -> tuple[list[Figure], list[Figure]]:
    """The figures the plan varies under its ``plan.sensitivity`` section, and those found but left
    out (physics figures beyond ``physics``).

    Raises
    ------
    SpecError
        A figure the section names that is not a number of the scenario, or a range that is not
        one (low >= high, or an end a field refuses): one message naming the figure.
    """
    plan = scenario.spec.plan
    assert plan is not None
    sens = plan.sensitivity
    if not sens.enabled:
        return [], []
    found = find_figures(scenario, systems)
    if sens.figures is None:
        physics = [f for f in found if f.kind == "physics"]
        kept = [f for f in found if f.kind == "cost"] + physics[:sens.physics]
        return kept, physics[sens.physics:]
    by_field = {f.field: f for f in found}
    chosen = []
    for k, given in enumerate(sens.figures):
        where = f"plan.sensitivity.figures[{k}] ({given.field})"
        figure = by_field.get(given.field) or _named_figure(scenario, given.field, where, systems)
        if given.low is not None:
            figure.low = given.low
            figure.range_note = "given in the scenario"
        if given.high is not None:
            figure.high = given.high
            figure.range_note = "given in the scenario"
        if not figure.low < figure.high:
            raise SpecError([f"{where}: low ({figure.low:g}) must be below high ({figure.high:g})"])
        for end in (figure.low, figure.high):
            with_figure(scenario, figure, end, where)  # refused here, before any probe, if a field refuses it
        chosen.append(figure)
    return chosen, []


_COST_FIELDS = ("price_usd", "host_power_w", "power_w", "tdp_w", "typical_power_w")


def _named_figure(scenario: Scenario, path: str, where: str, systems: Sequence[str]) -> Figure:
    """A figure the scenario names that no rule found: its current value read from the scenario,
    cost or physics by its name (prices, power and ``cost.*`` are cost), no default range."""
    value = read_figure(scenario, path)
    if value is None:
        raise SpecError([f"{where}: not a number of this scenario (expected a dotted path to a numeric field, e.g. "
                         f"catalog.nodes.l20-8x.price_usd, catalog.accelerators.l20.efficiency.compute, "
                         f"engine.step_fixed_s, cost.energy_usd_per_kwh)"])
    last = path.split(".")[-1]
    kind = "cost" if path.startswith("cost.") or last in _COST_FIELDS else "physics"
    dimension = "usd" if last == "price_usd" else "power" if last in _COST_FIELDS else None
    return Figure(path, path, kind, value, value, value, dimension, "named in plan.sensitivity", "", list(systems))


def read_figure(scenario: Scenario, path: str) -> float | None:
    """The value of the numeric field at dotted ``path`` as the scenario resolves it (SI), or None."""
    parts = path.split(".")
    node: Any
    if parts[0] == "catalog" and len(parts) >= 4:
        catalog = getattr(scenario.catalogs, parts[1], None)
        if catalog is None or parts[2] not in catalog:
            return None
        node, rest = catalog[parts[2]], parts[3:]
    else:
        node, rest = scenario.spec, parts
    for part in rest:
        if isinstance(node, dict):
            node = node.get(part)
        else:
            node = getattr(node, part, None)
        if node is None:
            return None
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return None
    return float(node)


def with_figure(scenario: Scenario, figure: Figure, value: float, where: str = "") -> Scenario:
    """``scenario`` with ``figure`` set to ``value`` (SI): through the scenario's own ``catalog:``
    or field, as ``--set`` would, written with its unit where the field takes one.

    Raises
    ------
    SpecError
        The field refuses the value (one message naming the figure).
    """
    dimension = figure.dimension
    units: list[str | None] = [_UNIT[dimension]] if dimension in _UNIT else ["s"] if dimension == "years" else [None]
    if figure.dimension is None and figure.rule == "" and figure.kind == "physics":
        units = [None, "s", "B/s", "W", "B", "FLOP/s", "/s"]  # a field no rule knows: the first it accepts
    problem = None
    for unit in units:
        text: Any = value if unit is None else f"{value!r} {unit}"
        try:
            changed = scenario.with_changes({figure.field: text})
        except SpecError as exc:
            problem = exc
            continue
        if read_figure(changed, figure.field) is not None and \
                abs(read_figure(changed, figure.field) - value) <= 1e-9 * abs(value):  # type: ignore[operator]
            return changed
    detail = "; ".join(problem.problems) if problem is not None else "the value did not take"
    raise SpecError([f"{where or figure.field}: cannot set {figure.field} to {value:g}: {detail}"])
