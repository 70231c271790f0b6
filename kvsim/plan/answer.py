"""A plan's answer as plain data: what each candidate needs per target load, what it costs, which
is cheapest, and what each saves against the baseline -- the content of ``plan.json``, which the
report renders (:mod:`kvsim.report.plan_report`) without re-running anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvsim._version import __version__
from kvsim.metrics.steady_state import MIN_COMPLETIONS_PER_CLIENT, MIN_COMPLETIONS_PER_INSTANCE
from kvsim.plan.planner import WINDOW_MARGIN, PlanResult, load_unit
from kvsim.plan.pool_axis import pool_axis_answer

__all__ = ["plan_answer", "UnitCost", "catalog_unit_cost", "PLAN_FORMAT", "READABLE_FORMATS", "nearest_miss", "miss_text", "like_for_like"]

PLAN_FORMAT = 7
"""Version of ``plan.json``'s layout. 2: every load is under ``load`` (``max_load``, ...) with its
unit in ``load.unit`` (requests/s, or clients for a closed loop), where 1 had ``rate_per_s``.
3: an answer no candidate serves carries its ``nearest_miss`` (which candidate came closest and
the SLO values it reached), and ``no_candidate_meets_slo`` says whether any candidate met the SLO
at any load probed. 4: a verdict that rests on a probe still flagged after its re-runs says so:
``unconfirmed`` (words, or None) on a candidate's ``capacity``, on each of its ``targets``, on the
cheapest of each answer, and on each probe (with ``reruns``, the longer runs it took); each answer's
``savings_like_for_like`` quotes every candidate against its like-for-like baseline (``against``:
the candidate on the baseline's compute nodes with the same KV options, :func:`like_for_like`),
beside ``savings_vs_baseline``, against the baseline as named; each target of a candidate carries
its ``seed_check`` (None where not checked), each answer the candidates that ``cannot_tell_apart``
from the cheapest, and each probe its ``seed`` (None: the plan's own) and ``stopped_at_s`` (None: run whole; else the
simulated time its run stopped once its failure was certain). ``kvsim plan`` adds ``deployment``: per
target, the cheapest candidate's deployment files written (:mod:`kvsim.plan.deploy`).
5: ``kvsim plan`` adds ``sensitivity`` (None when off): the assumed figures varied, and per target
the cheapest at each end of each range, the winner's cost over the runner-up's and where the answer
flips (:func:`kvsim.plan.sensitivity.plan_sensitivity`).
6: a candidate of ``plan.shared_pools`` carries ``shared_pool`` (its pool node's cost and, per target, the
frontier of pool sizes, :func:`kvsim.plan.pool_axis.pool_axis_answer`), each of its targets ``pool_nodes``
and ``pool_cost_per_hour_usd``, and each probe its ``pool_nodes`` (None: the pool as written x the units).
7: with ``plan.failures``, each candidate carries ``failures`` (its unit's cards, nodes, failures a year and
availability) and each of its targets ``spares`` (spare units, the chance that enough units are up without
and with them, and the cost with them, :mod:`kvsim.plan.spares`); the cheapest is then chosen with its spares.
Format-4 to -6 answers read as ones without these (:data:`READABLE_FORMATS`)."""

READABLE_FORMATS = (4, 5, 6, PLAN_FORMAT)
"""``plan.json`` formats ``kvsim report`` renders: 5, 6 and 7 only add optional fields."""

UnitCost = Callable[[str], dict[str, Any] | None]
"""``unit_cost(system)``: the cost of one unit of a candidate (``capex_usd``, ``cost_per_hour_usd``
and ``assumptions``, floats or None where a price is unknown), or None if it cannot be costed."""


def catalog_unit_cost(scenario: Any) -> UnitCost:
    """The cost of one unit of each candidate from the catalog's prices and power and the
    scenario's ``cost:`` section (:func:`kvsim.metrics.cost.cost_summary` of the system as written)."""
    from kvsim.metrics.cost import cost_summary
    from kvsim.sim.sizing import size_system

    def unit_cost(system: str) -> dict[str, Any] | None:
        sizing = size_system(scenario.spec, system, scenario.catalogs)
        idle = {"output_tokens_per_s": 0.0, "input_tokens_per_s": 0.0, "goodput_requests_per_s": 0.0}
        cost = cost_summary(sizing, idle, scenario.spec.cost)
        return {key: cost[key] for key in ("capex_usd", "cost_per_hour_usd", "capex_per_hour_usd",
                                           "energy_per_hour_usd", "it_power_w", "assumptions", "unknown")}

    return unit_cost


def _unit_text(raw: dict[str, Any]) -> str:
    """One unit of a system in words, e.g. ``"1 x h20-8x (1 instance), remote pool: 1 x nvme-16x"``."""
    pools = list(raw["pools"].items()) if isinstance(raw.get("pools"), dict) else [("", raw)]
    parts = []
    for name, pool in pools:
        text = f"{pool.get('nodes', 1)} x {pool.get('node')}"
        if pool.get("instances") is not None:
            text += f" ({pool['instances']} instance{'s' if pool['instances'] != 1 else ''})"
        parts.append(f"{name}: {text}" if name else text)
    cache = raw.get("kv_cache") or {}
    tiers = [tier for tier in ("dram", "nvme") if tier in cache]
    if tiers:
        parts.append("KV tiers: " + ", ".join(tiers))
    remote = cache.get("remote")
    if isinstance(remote, dict):
        parts.append(f"remote KV pool: {remote.get('nodes', 1)} x {remote.get('pool_node')}")
    return "; ".join(parts)


def _scaled(cost: dict[str, Any] | None, units: int | None, key: str) -> float | None:
    if cost is None or units is None or cost.get(key) is None:
        return None
    return float(cost[key]) * units


def plan_answer(result: PlanResult, unit_cost: UnitCost | None = None) -> dict[str, Any]:
    """The plan's answer as a JSON-able dict (see the module docstring).

    Parameters
    ----------
    result : PlanResult
    unit_cost : callable, optional
        Cost of one unit of each candidate (:data:`UnitCost`); without it costs are None and no
        candidate is named cheapest.
    """
    scenario = result.scenario
    spec = scenario.spec
    plan = spec.plan
    if plan is None:
        raise ValueError(f"{scenario.name}: the scenario has no plan: section")
    names = [c.system for c in result.candidates]
    baseline = plan.baseline or names[0]
    costs = {name: unit_cost(name) if unit_cost is not None else None for name in names}
    outcomes = {(probe.system, probe.units, probe.load, probe.pool_nodes): outcome for probe, outcome in result.probes
                if probe.seed is None}

    def unconfirmed(system: str, units: int | None, load: float | None, pool: int | None = None) -> str | None:
        """Why the verdict of the probe that decided a number is not confirmed, or None."""
        outcome = outcomes.get((system, units, load, pool)) if units is not None and load is not None else None
        return (outcome.detail or {}).get("unconfirmed") if outcome is not None and outcome.meets else None

    candidates: list[dict[str, Any]] = []
    for found in result.candidates:
        cost = costs[found.system]
        search = found.capacity
        per_hour = cost.get("cost_per_hour_usd") if cost else None
        candidates.append({
            "system": found.system,
            "unit": _unit_text(scenario.raw["systems"][found.system]),
            "capacity": {
                "max_load": search.max_load, "fail_load": search.fail_load,
                "converged": search.converged, "note": search.note,
                "unconfirmed": unconfirmed(found.system, 1, search.max_load,
                                           found.pool_axis[0].pool_nodes if found.pool_axis else None),
                "load_per_usd_hour": search.max_load / per_hour if search.max_load and per_hour else None,
            },
            "unit_cost": cost,
            "targets": [{"load": target, "units": units, "note": found.notes[target],
                         "unconfirmed": unconfirmed(found.system, units, target, found.pool_nodes_for.get(target)),
                         "seed_check": found.seed_checks.get(target),
                         "capex_usd": _scaled(cost, units, "capex_usd"),
                         "cost_per_hour_usd": _scaled(cost, units, "cost_per_hour_usd")}
                        for target, units in found.units_for.items()],
        })
        if found.pool_axis:  # units x pool nodes, the pool priced on its own (kvsim.plan.pool_axis)
            pool_axis_answer(candidates[-1], found, scenario)
            costs[found.system] = candidates[-1]["unit_cost"]
    if plan.failures is not None:  # spares to hold the SLO through failures (kvsim.plan.spares)
        from kvsim.plan.spares import add_spares, unit_parts
        from kvsim.sim.sizing import size_system
        add_spares(candidates, {name: unit_parts(size_system(spec, name, scenario.catalogs)) for name in names},
                   plan.failures)
    twins = like_for_like(scenario.raw["systems"], names, baseline, plan.shared_pools)
    answers = []
    unit = load_unit(scenario)
    for k, target in enumerate(plan.loads):
        rows = {c["system"]: c["targets"][k] for c in candidates}
        served = {name: row for name, row in rows.items() if row["units"] is not None}
        priced = {name: row for name, row in served.items() if row["cost_per_hour_usd"] is not None}
        if plan.failures is not None:  # the units bought include their spares
            priced = {name: row for name, row in priced.items() if (row["spares"] or {}).get("cost_per_hour_usd") is not None}
        cheapest = min(priced, key=lambda name: (_hourly(priced[name]), names.index(name))) if priced else None
        savings = {name: _saving(row, rows[baseline]) for name, row in rows.items() if name != baseline}
        like = {name: {"against": twins[name], **_saving(row, rows[twins[name]])} if twins[name] is not None
                else {"against": None, "capex_usd": None, "cost_per_hour_usd": None}
                for name, row in rows.items() if name != baseline}
        miss = None
        if cheapest is not None:
            note = f"{cheapest}: {rows[cheapest]['units']} units" + (
                f" + {rows[cheapest]['spares']['units']} spare(s)" if plan.failures is not None else "")
        elif served:
            note = "served by " + ", ".join(served) + ", but no candidate that serves it has a price"
        else:
            miss = nearest_miss(result, target)
            note = f"no candidate serves it within {plan.units.max} units" + (
                f"; the nearest miss: {miss_text(miss, unit)}" if miss is not None else "")
        answers.append({"load": target, "cheapest": cheapest, "note": note, "savings_vs_baseline": savings,
                        "savings_like_for_like": like, "nearest_miss": miss,
                        "cannot_tell_apart": _indistinct(cheapest, priced, costs),
                        "unconfirmed": rows[cheapest]["unconfirmed"] if cheapest is not None else None})
    probes = []
    for probe, outcome in result.probes:
        detail = outcome.detail or {}
        probes.append({
            "system": probe.system, "units": probe.units, "load": probe.load, "pool_nodes": probe.pool_nodes,
            "meets": outcome.meets, "reason": outcome.reason, "flags": list(detail.get("flags") or []),
            "ttft_p99_s": (detail.get("ttft_s") or {}).get("p99"), "tpot_p99_s": (detail.get("tpot_s") or {}).get("p99"),
            "requests_per_s": detail.get("requests_per_s"),
            "reruns": int(detail.get("reruns") or 0), "unconfirmed": detail.get("unconfirmed"), "seed": probe.seed,
            "stopped_at_s": detail.get("stopped_at_s"),
        })
    return {
        "kind": "plan",
        "format": PLAN_FORMAT,
        "kvsim_version": __version__,
        "scenario": scenario.name,
        "description": spec.description,
        "model": spec.model,
        "seed": spec.seed,
        "window": {"warmup_s": spec.warmup, "warmup": "mser5" if spec.warmup_auto else "fixed",
                   "duration_s": spec.duration,
                   **({"completions_per_client": WINDOW_MARGIN * MIN_COMPLETIONS_PER_CLIENT} if unit == "clients" else
                      {"completions_per_instance": WINDOW_MARGIN * MIN_COMPLETIONS_PER_INSTANCE})},
        "slo": [{"metric": o.metric, "statistic": o.statistic, "limit_s": o.limit_s} for o in result.objectives],
        "load": {"kind": "clients" if unit == "clients" else "rate", "unit": unit,
                 "field": "workload.arrival.clients" if unit == "clients" else "workload.arrival.rate"},
        "targets": plan.loads,
        "units": {"min": plan.units.min, "max": plan.units.max},
        "rel_tol": plan.rel_tol,
        "baseline": baseline,
        "candidates": candidates,
        "answers": answers,
        "no_candidate_meets_slo": all(c.capacity.max_load is None for c in result.candidates),
        "probes": probes,
    }


def _hourly(row: dict[str, Any]) -> float:
    """What a candidate costs per hour at one target: with its spares when the plan has failures."""
    spares = row.get("spares")
    return float(spares["cost_per_hour_usd"] if spares else row["cost_per_hour_usd"])


def _indistinct(cheapest: str | None, priced: dict[str, dict[str, Any]],
                costs: dict[str, dict[str, Any] | None]) -> list[str]:
    """The candidates the seed checks cannot tell apart from the cheapest at one target: those
    whose cost at the fewest units any seed called for is not above the cheapest's at the most
    (both checked; :func:`kvsim.plan.planner.seed_check`)."""
    if cheapest is None or not (priced[cheapest].get("seed_check")):
        return []

    def cost(name: str, key: str) -> float:  # a shared pool's part is the same at any unit count
        return (float((costs[name] or {})["cost_per_hour_usd"]) * priced[name]["seed_check"][key]
                + (priced[name].get("pool_cost_per_hour_usd") or 0.0))

    worst = cost(cheapest, "units_high")
    return [name for name, row in priced.items()
            if name != cheapest and row.get("seed_check") and cost(name, "units_low") <= worst]


def _saving(row: dict[str, Any], base: dict[str, Any]) -> dict[str, float | None]:
    """A candidate's cost at one target relative to another's (-0.25: 25 % cheaper), None where either is unknown."""
    return {key: (row[key] / base[key] - 1.0 if row[key] is not None and base[key] else None)
            for key in ("capex_usd", "cost_per_hour_usd")}


def _compute_nodes(raw: dict[str, Any]) -> list[Any]:
    """The compute node of each pool of a system as written (one pool, or ``pools:``)."""
    pools = list(raw["pools"].values()) if isinstance(raw.get("pools"), dict) else [raw]
    return [pool.get("node") for pool in pools]


def like_for_like(systems: dict[str, Any], names: list[str], baseline: str,
                  shared: dict[str, Any] | None = None) -> dict[str, str | None]:
    """Each candidate's like-for-like baseline: the candidate on the named baseline's compute nodes
    whose KV options (its ``kv_cache:`` section as written) are the candidate's own -- the H20 with
    the same pool for an L20 with a pool -- or None where no candidate is that. A candidate whose KV
    options are the baseline's has the named baseline itself. The first such candidate, in the
    plan's order, where several are. With ``shared`` (``plan.shared_pools``), a pool shared by the
    units and sized on its own axis is a KV option too: the same axis and price, ``kv_cache.remote.nodes``
    (which the axis replaces) aside."""
    shared = shared or {}

    def options(name: str) -> tuple[Any, Any]:
        kv = systems[name].get("kv_cache") or {}
        if name in shared and isinstance(kv.get("remote"), dict):
            kv = {**kv, "remote": {k: v for k, v in kv["remote"].items() if k != "nodes"}}
        return kv, shared.get(name)

    base_nodes = _compute_nodes(systems[baseline])
    twins: dict[str, str | None] = {}
    for name in names:
        mine = options(name)
        twins[name] = next((other for other in [baseline, *names] if _compute_nodes(systems[other]) == base_nodes
                            and options(other) == mine), None)
    return twins


def nearest_miss(result: PlanResult, target: float) -> dict[str, Any] | None:
    """The candidate that came closest to serving ``target`` when none does, as data.

    Each candidate's closest attempt is its probe at the target with the most units (the planner
    always probes the largest count allowed before it gives up). Closest is the attempt whose
    worst objective is the smallest multiple of its limit (``worst_ratio``: 1.2 is 20 % over);
    an attempt that measured no value for an objective ranks last, and ties go to the earlier
    candidate. An attempt within every limit that still failed (flagged unstable, too short or
    rejecting requests) ranks first: its ``reason`` says why it does not count.

    Returns
    -------
    dict or None
        ``system``, ``units``, ``load`` (the target), ``meets_per_unit`` (the candidate's unit
        capacity, None if it met the SLO at no load probed), ``lowest_load_probed`` (one unit's
        lowest load in the capacity search), ``reason`` and ``flags`` of the attempt, ``slo``
        (per objective: ``metric``, ``statistic``, ``limit_s``, ``value_s`` -- None if not
        measured -- and ``ratio``), and ``worst_ratio`` (None if any value is missing); None when
        no candidate was probed at the target.
    """
    order = [c.system for c in result.candidates]
    attempts: dict[str, tuple[Any, Any]] = {}
    for probe, outcome in result.probes:
        if probe.seed is None and probe.load == target and (
                probe.system not in attempts or probe.units > attempts[probe.system][0].units):
            attempts[probe.system] = (probe, outcome)
    rows: list[dict[str, Any]] = []
    for system in order:
        if system not in attempts:
            continue
        probe, outcome = attempts[system]
        detail = outcome.detail or {}
        values = []
        for o in result.objectives:
            value = (detail.get(o.metric) or {}).get(o.statistic)
            values.append({"metric": o.metric, "statistic": o.statistic, "limit_s": o.limit_s,
                           "value_s": None if value is None else float(value),
                           "ratio": None if value is None else float(value) / o.limit_s})
        ratios = [v["ratio"] for v in values]
        worst = None if any(r is None for r in ratios) else max(ratios, default=0.0)
        capacity = result.candidate(system).capacity
        one_unit = [p.load for p, _ in result.probes if p.system == system and p.units == 1 and p.seed is None]
        rows.append({"system": system, "units": probe.units, "load": target, "meets_per_unit": capacity.max_load,
                     "lowest_load_probed": min(one_unit) if one_unit else None, "reason": outcome.reason,
                     "flags": list(detail.get("flags") or []), "slo": values, "worst_ratio": worst})
    if not rows:
        return None
    return min(rows, key=lambda r: (r["worst_ratio"] is None, r["worst_ratio"] or 0.0, order.index(r["system"])))


def miss_text(miss: dict[str, Any], unit: str) -> str:
    """A nearest miss (:func:`nearest_miss`) in words: ``h20 with 2 units reached TTFT p99 81.2 ms
    against 1 ms (81.2x the limit); one unit meets the SLO at no load probed, down to 0.0117 requests/s``."""
    reached = ", ".join(
        f"{v['metric'].removesuffix('_s').upper()} {v['statistic']} "
        + (f"{_seconds(v['value_s'])} against {_seconds(v['limit_s'])} ({v['ratio']:.3g}x the limit)" if v["value_s"] is not None
           else f"not measured (limit {_seconds(v['limit_s'])})")
        for v in miss["slo"])
    units = f"{miss['units']} unit" + ("" if miss["units"] == 1 else "s")
    text = f"{miss['system']} with {units} reached {reached}" if reached else f"{miss['system']} with {units}"
    if miss["worst_ratio"] is not None and miss["worst_ratio"] <= 1 and miss["reason"]:
        text += f", but did not count ({miss['reason']})"
    if miss["meets_per_unit"] is not None:
        text += f"; one unit meets the SLO up to {miss['meets_per_unit']:.3g} {unit}"
    elif miss["lowest_load_probed"] is not None:
        text += f"; one unit meets the SLO at no load probed, down to {miss['lowest_load_probed']:.3g} {unit}"
    return text


def _seconds(value: float) -> str:
    return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
