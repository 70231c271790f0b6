"""What a plan's answer hinges on: the assumed figures (:mod:`kvsim.plan.sensitivity_figures`)
varied over their ranges for the winner and the runner-up at each target.

- A **cost** figure leaves every unit count as the plan found it; each candidate's cost per hour
  at a target is affine in the figure (in its reciprocal for the amortisation period), so the
  cheapest candidate at each end of the range and the point where the winner stops being the
  cheapest (against every candidate that serves the target) are exact: two cost evaluations per
  figure, no probe.
- A **physics** figure changes capacities: the winner and the runner-up are re-planned at each end
  of its range -- the fewest units that serve the target, searched from the plan's own count (two
  probes where it holds) -- through the plan's own probe executor, so the probes run in parallel,
  are stored beside the plan's and are reused when the plan runs again. Where the cheapest of the
  two changes at an end, the flip lies between that end and the figure as the plan ran (no flip
  point is searched: that would cost a bisection of probes per figure).

The tornado (:mod:`kvsim.report.plan_tornado`) shows, per target, the winner's cost over the
runner-up's at each end of each figure's range.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from kvsim.plan.planner import MapProbes, Probe, _fewest_units, _Runner, load_unit
from kvsim.plan.search import ProbeOutcome
from kvsim.plan.sensitivity_figures import Figure, chosen_figures, with_figure
from kvsim.plan.slo import objectives_from_slo
from kvsim.scenario.load import Scenario

__all__ = ["plan_sensitivity", "pairs", "cost_rows", "flip_point"]

OnProbe = Callable[[str, Probe, ProbeOutcome], None]


def pairs(answer: dict[str, Any]) -> list[tuple[float, str, str | None]]:
    """Per target that some priced candidate serves: ``(load, winner, runner-up)``, the runner-up the
    next cheapest by cost per hour (ties in the plan's order; None if no other serves it)."""
    order = [c["system"] for c in answer["candidates"]]
    found = []
    for k, row in enumerate(answer["answers"]):
        if row["cheapest"] is None:
            continue
        priced = [(c["targets"][k]["cost_per_hour_usd"], order.index(c["system"]), c["system"])
                  for c in answer["candidates"] if c["targets"][k]["cost_per_hour_usd"] is not None]
        ranked = [name for _, _, name in sorted(priced) if name != row["cheapest"]]
        found.append((row["load"], row["cheapest"], ranked[0] if ranked else None))
    return found


def _g(figure: Figure, x: float) -> float:
    return 1.0 / x if figure.reciprocal else x


def flip_point(figure: Figure, winner: tuple[float, float], other: tuple[float, float]) -> float | None:
    """Where ``other`` costs what the winner does, as the figure's value: the costs of each at the
    figure's low and high ends given, each affine in the figure (or its reciprocal). None where
    their difference does not change with it or the crossing is not a positive value."""
    g_low, g_high = _g(figure, figure.low), _g(figure, figure.high)
    d_low, d_high = other[0] - winner[0], other[1] - winner[1]
    if d_high == d_low:
        return None
    g = g_low - d_low * (g_high - g_low) / (d_high - d_low)
    if not g > 0:
        return None
    return 1.0 / g if figure.reciprocal else g


def cost_rows(scenario: Scenario, answer: dict[str, Any], figure: Figure,
              targets: list[tuple[float, str, str | None]]) -> list[dict[str, Any]]:
    """One row per target for a cost figure: the cheapest at each end (over every candidate that
    serves the target, at the units the plan found), the winner's cost over the runner-up's at
    each end, and the nearest flip point on each side of the figure as it is."""
    from kvsim.plan.answer import catalog_unit_cost

    changed = [with_figure(scenario, figure, value) for value in (figure.low, figure.high)]
    ends = [catalog_unit_cost(one) for one in changed]
    order = [c["system"] for c in answer["candidates"]]
    unit_costs: dict[str, list[float | None]] = {}
    for name in order:
        per_hour = []
        for costs in ends:
            cost = costs(name)
            per_hour.append(None if cost is None else cost.get("cost_per_hour_usd"))
        unit_costs[name] = per_hour
    rows = []
    for load, winner, runner in targets:
        k = answer["targets"].index(load)
        units = {c["system"]: c["targets"][k]["units"] for c in answer["candidates"]}
        base = {c["system"]: c["targets"][k]["cost_per_hour_usd"] for c in answer["candidates"]}
        at: dict[str, tuple[float, float]] = {}
        pools = {c["system"]: c["targets"][k].get("pool_nodes") for c in answer["candidates"]}
        for name in order:
            n, (low, high) = units[name], unit_costs[name]
            if pools[name] is not None and n is not None and base[name] is not None:
                # a shared pool (plan.shared_pools): its units and its pool nodes, each priced at the end
                shared = [_shared_total(one, name, n, pools[name]) for one in changed]
                if shared[0] is not None and shared[1] is not None:
                    at[name] = (shared[0], shared[1])
            elif n is not None and low is not None and high is not None and base[name] is not None:
                at[name] = (n * low, n * high)
        cheapest = [min(at, key=lambda name: (at[name][end], order.index(name))) for end in (0, 1)]
        above: tuple[float, str] | None = None
        below: tuple[float, str] | None = None
        for name, pair in at.items():
            if name == winner:
                continue
            x = flip_point(figure, at[winner], pair)
            if x is None:
                continue
            if x > figure.base and (above is None or x < above[0]):
                above = (x, name)
            elif x < figure.base and (below is None or x > below[0]):
                below = (x, name)
        flips = [{"direction": direction, "at": x, "to": name, "in_range": figure.low <= x <= figure.high}
                 for direction, found in (("above", above), ("below", below)) if found is not None
                 for x, name in [found]]
        rows.append({
            "load": load, "field": figure.field, "winner": winner, "runner_up": runner,
            "cheapest_low": cheapest[0], "cheapest_high": cheapest[1],
            "ratio_base": _ratio(base.get(winner), base.get(runner)),
            "ratio_low": _ratio(*(at[s][0] if s in at else None for s in (winner, runner))),
            "ratio_high": _ratio(*(at[s][1] if s in at else None for s in (winner, runner))),
            "flips": flips, "flips_between": None,
            "holds": not any(f["in_range"] for f in flips),
        })
    return rows


def _shared_total(scenario: Scenario, system: str, units: int, pool_nodes: int) -> float | None:
    """Cost per hour, US dollars, of ``units`` compute units sharing ``pool_nodes`` pool nodes."""
    from kvsim.plan.pool_axis import axis_costs

    return axis_costs(scenario, system).total(units, pool_nodes)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def plan_sensitivity(scenario: Scenario, answer: dict[str, Any], map_for: Callable[[Scenario], MapProbes] | None = None,
                     on_probe: OnProbe | None = None, concurrent: int = 1) -> dict[str, Any] | None:
    """The sensitivity section of ``plan.json`` (None when ``plan.sensitivity`` is off or no target
    has a priced winner).

    Parameters
    ----------
    scenario : Scenario
        The plan's scenario.
    answer : dict
        Its answer (:func:`kvsim.plan.answer.plan_answer`).
    map_for : callable, optional
        ``map_for(scenario)``: the ``map_probes`` that runs (and stores) probes of that scenario
        (:class:`kvsim.plan.command._StoredMap`); default: one after another in this process.
    on_probe : callable, optional
        ``on_probe(label, probe, outcome)`` as each physics probe finishes; ``label`` names the
        figure and the end of its range.
    concurrent : int
        Re-plans run at once (threads), so a pool of workers behind ``map_for`` stays busy.

    Returns
    -------
    dict
        ``figures`` (each :meth:`Figure.as_dict`), ``left_out`` (physics figures found beyond
        ``plan.sensitivity.physics``), ``targets`` (per target: ``load``, ``winner``, ``runner_up``
        and ``rows``, one per figure, sorted by swing) and ``probes`` (every physics probe).
    """
    plan = scenario.spec.plan
    if plan is None or not plan.sensitivity.enabled:
        return None
    targets = pairs(answer)
    if not targets:
        return None
    systems = list(dict.fromkeys(name for _, w, r in targets for name in (w, r) if name is not None))
    figures, left_out = chosen_figures(scenario, systems)
    rows: dict[str, list[dict[str, Any]]] = {}
    for figure in figures:
        if figure.kind == "cost":
            rows[figure.field] = cost_rows(scenario, answer, figure, targets)
    probes: list[dict[str, Any]] = []
    physics = [f for f in figures if f.kind == "physics"]
    if physics:
        found = _replan(scenario, answer, physics, targets, map_for, on_probe, concurrent, probes)
        for figure in physics:
            rows[figure.field] = [_physics_row(answer, figure, load, w, r, found) for load, w, r in targets]
    order = [f.field for f in figures]  # the threads finish in any order: the list does not depend on it
    probes.sort(key=lambda p: (order.index(p["field"]), p["side"] != "low", p["system"], p["load"], p["units"]))
    per_target = []
    for k, (load, winner, runner) in enumerate(targets):
        mine = [rows[f.field][k] for f in figures]
        mine.sort(key=lambda row: -_swing(row))
        per_target.append({"load": load, "winner": winner, "runner_up": runner, "rows": mine})
    return {"figures": [f.as_dict() for f in figures], "left_out": [f.as_dict() for f in left_out],
            "targets": per_target, "probes": probes}


def _swing(row: dict[str, Any]) -> float:
    values = [v for v in (row["ratio_low"], row["ratio_high"], row["ratio_base"]) if v is not None]
    return max(values) - min(values) if values else 0.0


Found = dict[tuple[str, str, str, float], int | None]


def _replan(scenario: Scenario, answer: dict[str, Any], figures: list[Figure], targets: list[tuple[float, str, str | None]],
            map_for: Callable[[Scenario], MapProbes] | None, on_probe: OnProbe | None, concurrent: int,
            log: list[dict[str, Any]]) -> Found:
    """The fewest units of the winner and the runner-up at each target, with each physics figure at
    each end of its range: ``(field, "low"/"high", system, load) -> units`` (None: none allowed
    serves it). A system that does not use the figure keeps the plan's count (no probe)."""
    plan = scenario.spec.plan
    assert plan is not None
    objectives = objectives_from_slo(scenario.spec.slo)
    unit = load_unit(scenario)
    lock = threading.Lock()
    jobs = []
    for figure in figures:
        for side, value in (("low", figure.low), ("high", figure.high)):
            changed = with_figure(scenario, figure, value, f"plan.sensitivity: {figure.field}")
            mapper = map_for(changed) if map_for is not None else None
            runner = _Runner(changed, objectives)
            done: dict[Probe, ProbeOutcome] = {}
            for load, winner, other in targets:
                for system in (winner, other):
                    if system is not None:
                        jobs.append((figure, side, value, system, load, mapper, runner, done))
    found: Found = {}

    def run(job: tuple) -> None:
        figure, side, value, system, load, mapper, runner, done = job
        k = answer["targets"].index(load)
        entry = next(c["targets"][k] for c in answer["candidates"] if c["system"] == system)
        base_units, pool_nodes = entry["units"], entry.get("pool_nodes")  # a shared pool keeps its size
        if system not in figure.systems:
            found[(figure.field, side, system, load)] = base_units
            return

        def judge(probes: Sequence[Probe]) -> list[ProbeOutcome]:
            if pool_nodes is not None:
                probes = [replace(probe, pool_nodes=pool_nodes) for probe in probes]
            todo = [p for p in dict.fromkeys(probes) if p not in done]
            if todo:
                outcomes = mapper(runner, todo) if mapper is not None else map(runner, todo)
                for probe, outcome in zip(todo, outcomes):
                    done[probe] = outcome
                    with lock:
                        log.append({"field": figure.field, "side": side, "value": value, "system": probe.system,
                                    "units": probe.units, "load": probe.load, "meets": outcome.meets,
                                    "reason": outcome.reason})
                        if on_probe is not None:
                            on_probe(f"{figure.field}={value:.4g}", probe, outcome)
            return [done[p] for p in probes]

        start = base_units if base_units is not None else plan.units.max
        units, _ = _fewest_units(system, load, None, plan.units, judge, unit, start=start)
        found[(figure.field, side, system, load)] = units

    if concurrent > 1 and len(jobs) > 1:
        with ThreadPoolExecutor(max_workers=min(concurrent, len(jobs))) as threads:
            list(threads.map(run, jobs))
    else:
        for job in jobs:
            run(job)
    return found


def _physics_row(answer: dict[str, Any], figure: Figure, load: float, winner: str, runner: str | None,
                 found: Found) -> dict[str, Any]:
    """A physics figure's row at one target: the re-planned units and costs of the two at each end."""
    k = answer["targets"].index(load)
    per_hour = {c["system"]: (c["unit_cost"] or {}).get("cost_per_hour_usd") for c in answer["candidates"]}
    base = {c["system"]: c["targets"][k]["cost_per_hour_usd"] for c in answer["candidates"]}
    two = [s for s in (winner, runner) if s is not None]
    units = {side: {s: found[(figure.field, side, s, load)] for s in two} for side in ("low", "high")}

    pools = {c["system"]: c["targets"][k].get("pool_nodes") for c in answer["candidates"]}
    pool_hour = {c["system"]: c["targets"][k].get("pool_cost_per_hour_usd") or 0.0 for c in answer["candidates"]}

    def cost(side: str, system: str) -> float | None:
        n, rate = units[side][system], per_hour[system]
        if n is None or rate is None:
            return None
        return n * rate + (pool_hour[system] if pools[system] is not None else 0.0)  # a shared pool's own nodes

    cheapest = {}
    for side in ("low", "high"):
        costs = [(cost(side, s), i, s) for i, s in enumerate(two) if cost(side, s) is not None]
        cheapest[side] = min(costs)[2] if costs else None
    between = []
    if cheapest["low"] != winner:
        between.append([figure.low, figure.base])
    if cheapest["high"] != winner:
        between.append([figure.base, figure.high])
    return {
        "load": load, "field": figure.field, "winner": winner, "runner_up": runner,
        "cheapest_low": cheapest["low"], "cheapest_high": cheapest["high"],
        "ratio_base": _ratio(base.get(winner), base.get(runner) if runner else None),
        "ratio_low": _ratio(cost("low", winner), cost("low", runner) if runner else None),
        "ratio_high": _ratio(cost("high", winner), cost("high", runner) if runner else None),
        "units_low": units["low"], "units_high": units["high"],
        "flips": [], "flips_between": between or None, "holds": not between,
    }


def sensitivity_cost(scenario: Scenario) -> str | None:
    """What the sensitivity section will cost, in one line for ``kvsim validate`` (None without a
    plan). The winner and the runner-up are not known before the plan runs: the count assumes
    every physics figure touches two candidates at every target, each re-plan one to four probes
    (two where the plan's count holds).

    Raises
    ------
    SpecError
        A figure ``plan.sensitivity.figures`` names that cannot be varied (as the plan would).
    """
    plan = scenario.spec.plan
    if plan is None:
        return None
    if not plan.sensitivity.enabled:
        return "sensitivity: off"
    systems = plan.chosen(list(scenario.spec.systems))
    figures, left = chosen_figures(scenario, systems)
    physics = [f for f in figures if f.kind == "physics"]
    searches = len(physics) * 2 * min(2, len(systems)) * len(plan.loads)
    text = (f"sensitivity: {len(figures) - len(physics)} cost figures (exact, no probes), {len(physics)} physics "
            f"figures re-planned at both ends for the winner and the runner-up: at most {searches} re-plans, "
            f"about {2 * searches} probes ({searches}-{4 * searches})")
    if left:
        text += f"; {len(left)} more physics figures found, left out (plan.sensitivity.physics)"
    return text
