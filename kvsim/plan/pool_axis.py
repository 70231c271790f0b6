"""A candidate whose remote KV pool is sized on its own axis: compute units x pool nodes.

A candidate named in ``plan.shared_pools`` (:mod:`kvsim.scenario.shared_pool_spec`) keeps one
remote KV pool of ``P`` nodes shared by all its ``n`` compute units over the scale-out network
(its probes are :class:`~kvsim.plan.planner.Probe` with ``pool_nodes = P``: the compute node
counts times ``n``, the pool's ``P``; the simulator's remote pool is one pool per system that
every compute node's NICs reach over the fabric). For each ``P`` on the axis, in ascending order,
the plan runs the ordinary unit search with ``P`` fixed -- the most load one unit sustains with
the pool (started from the previous ``P``'s answer: a larger pool holds more, so it rarely
sustains less), then the fewest units ``n(P)`` per target -- so every probe is a sweep point like
any other (parallel, stored, resumed). A size is not probed when it cannot win: at every target
even the fewest units allowed with it would cost at least the cheapest pair already found (a
larger pool then cannot win either, so the search stops there; with a price unknown it never stops).

Its cost is ``n x (one compute unit) + P x (one pool node)``, each from the catalog's price and
power and the scenario's ``cost:`` section (:func:`kvsim.metrics.cost.bill_of_materials`), or for
the pool a rent per TB-month (``usd_per_tb_month``). The candidate's answer at a target is the
cheapest ``(n(P), P)`` by cost per hour (ties: the smaller pool); where a price is unknown, the
fewest units, then the smallest pool. The *frontier* per target lists every ``P`` with ``n(P)``,
its cost and the marginal trade: the units the step from the previous ``P`` saved against the
pool nodes it added; adding pool capacity beats adding compute while those steps lower the cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvsim.plan.search import LoadSearch, ProbeOutcome

__all__ = ["PoolPoint", "AxisCosts", "axis_costs", "plan_pool_axis", "cheapest_point", "frontier",
           "beats_compute_up_to", "pool_axis_answer"]


@dataclass
class PoolPoint:
    """The unit search of a shared-pool candidate with its pool fixed at ``pool_nodes`` nodes.

    Attributes
    ----------
    pool_nodes : int
    capacity : LoadSearch
        The most load one unit with the whole pool sustains within the SLO.
    units_for : dict
        Target load -> fewest units sharing the pool that serve it (None: none allowed does).
    notes : dict
        Target load -> how that count was found, in words.
    """

    pool_nodes: int
    capacity: LoadSearch
    units_for: dict[float, int | None] = field(default_factory=dict)
    notes: dict[float, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AxisCosts:
    """What one compute unit and one pool node of a shared-pool candidate cost.

    Attributes
    ----------
    unit_capex_usd, unit_usd_per_hour : float or None
        One compute unit (its compute pools' nodes, no KV pool): purchase price, US dollars, and
        cost per hour (capital, energy, running), US dollars; None where a price or power is unknown.
    pool_node_capex_usd, pool_node_usd_per_hour : float or None
        One pool node likewise; a rented pool has no capex (0) and its rent as the cost per hour.
    pool_node_capacity_bytes : float
        Raw capacity of one pool node, bytes.
    rented : bool
        The pool is priced per TB-month (``usd_per_tb_month``).
    assumptions, unknown : tuple of str
        Assumed and missing figures behind the costs (:func:`kvsim.metrics.cost.cost_summary`).
    """

    unit_capex_usd: float | None
    unit_usd_per_hour: float | None
    pool_node_capex_usd: float | None
    pool_node_usd_per_hour: float | None
    pool_node_capacity_bytes: float
    rented: bool
    assumptions: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()

    def total(self, units: int | None, pool_nodes: int, key: str = "usd_per_hour") -> float | None:
        """Cost of ``units`` compute units sharing ``pool_nodes`` pool nodes: ``usd_per_hour`` or
        ``capex_usd``; None where either part is unknown or ``units`` is None."""
        unit, node = getattr(self, f"unit_{key}"), getattr(self, f"pool_node_{key}")
        if units is None or unit is None or node is None:
            return None
        return units * unit + pool_nodes * node


def axis_costs(scenario: Any, system: str) -> AxisCosts:
    """The cost of one compute unit and of one pool node of ``system`` (a candidate of
    ``plan.shared_pools``), from the catalog and the scenario's ``cost:`` section."""
    from kvsim.metrics.cost import bill_of_materials, cost_summary, line_cost_per_hour_usd
    from kvsim.plan.planner import scaled_scenario
    from kvsim.sim.sizing import size_system

    plan = scenario.spec.plan
    rent = plan.shared_pools[system].usd_per_tb_month
    one = scaled_scenario(scenario, system, 1, 1.0, pool_nodes=1)
    sizing = size_system(one.spec, system, one.catalogs)
    cost_spec = one.spec.cost
    lines = bill_of_materials(sizing, 1.0, rent)  # the whole pool node: the candidate owns its pool
    idle = {"output_tokens_per_s": 0.0, "input_tokens_per_s": 0.0, "goodput_requests_per_s": 0.0}
    whole = cost_summary(sizing, idle, cost_spec, rent)

    def part(kind: str) -> tuple[float | None, float | None]:
        chosen = [line for line in lines if line.kind == kind]
        hourly = [line_cost_per_hour_usd(line, cost_spec) for line in chosen]
        capex = [None if line.price_usd is None else line.count * line.price_usd for line in chosen]
        return _sum(capex), _sum(hourly)

    unit_capex, unit_hour = part("compute")
    pool_capex, pool_hour = part("kv_pool")
    assert sizing.pool_node is not None  # plan.shared_pools names systems with a remote pool
    return AxisCosts(unit_capex, unit_hour, pool_capex, pool_hour, sizing.pool_node.capacity_bytes, rent is not None,
                     tuple(whole["assumptions"]), tuple(whole["unknown"]))


Judge = Callable[[Sequence[Any]], list[ProbeOutcome]]


def plan_pool_axis(scenario: Any, system: str, start: float, judge: Judge, parallel: int | Callable[[], int]) -> Any:
    """Plan a shared-pool candidate: for each pool node count on its axis, one unit's capacity
    with the pool and the fewest units per target (:func:`kvsim.plan.planner._fewest_units`),
    then the cheapest ``(units, pool nodes)`` per target.

    Parameters
    ----------
    scenario : Scenario
    system : str
        A candidate named in ``plan.shared_pools``.
    start : float
        First load of the first capacity search (requests/s, or clients).
    judge : callable
        ``judge(probes)``: their outcomes, run (or read back) by the planner.
    parallel : int or callable
        Probes per round of a load search.

    Returns
    -------
    CandidatePlan
        ``units_for`` and ``notes`` per target at the cheapest pool size, ``pool_nodes_for`` that
        size, ``pool_axis`` every :class:`PoolPoint`, ``capacity`` the smallest pool's search.
    """
    from kvsim.plan.planner import CandidatePlan, unit_search

    plan = scenario.spec.plan
    targets = plan.loads
    floor = start / 64
    points: list[PoolPoint] = []
    begin = start
    costs = axis_costs(scenario, system)
    best: dict[float, float] = {}  # target -> the cheapest pair's cost per hour so far
    for pool_nodes in plan.shared_pools[system].nodes:
        least = costs.total(plan.units.min, pool_nodes)  # the fewest units allowed with this pool
        if points and least is not None and all(target in best and least >= best[target] for target in targets):
            break  # cannot win at any target, nor can a larger pool: the rest of the axis is not probed
        def with_pool(probes: Sequence[Any], nodes: int = pool_nodes) -> list[ProbeOutcome]:
            return judge([replace(probe, pool_nodes=nodes) for probe in probes])

        searched = unit_search(scenario, system, begin, with_pool, parallel, floor=min(floor, begin))
        search = searched.capacity
        point = PoolPoint(pool_nodes, search, searched.units_for, searched.notes)
        points.append(point)
        for target in targets:
            cost = costs.total(point.units_for[target], pool_nodes)
            if cost is not None:
                best[target] = min(best.get(target, cost), cost)
        begin = search.max_load or begin  # a larger pool: start where the smaller one stopped
    found = CandidatePlan(system, points[0].capacity, pool_axis=points)
    for target in targets:
        best = cheapest_point(points, target, costs)
        found.units_for[target] = best.units_for[target]
        found.pool_nodes_for[target] = best.pool_nodes
        found.notes[target] = f"{best.notes[target]} with {_nodes(best.pool_nodes)} shared"
    return found


def cheapest_point(points: Sequence[PoolPoint], target: float, costs: AxisCosts) -> PoolPoint:
    """The pool size whose ``(n(P), P)`` costs least per hour at ``target`` (ties: the smaller
    pool); where no cost is known, the fewest units, then the smallest pool; where no size
    serves the target, the largest pool (its nearest miss)."""
    serving = [p for p in points if p.units_for.get(target) is not None]
    if not serving:
        return points[-1]
    priced = [(costs.total(p.units_for[target], p.pool_nodes), p) for p in serving]
    known = [(cost, p) for cost, p in priced if cost is not None]
    if known:
        return min(known, key=lambda pair: (pair[0], pair[1].pool_nodes))[1]
    return min(serving, key=lambda p: (p.units_for[target], p.pool_nodes))


def frontier(points: Sequence[PoolPoint], target: float, costs: AxisCosts) -> list[dict[str, Any]]:
    """The frontier at ``target``: per pool size, ``pool_nodes``, ``units`` (n(P), None: none
    allowed serves it), ``capex_usd`` and ``cost_per_hour_usd`` of the pair, and the step from the
    previous size: ``units_saved`` (compute units fewer), ``pool_nodes_added``, ``step_usd_per_hour``
    (the change in cost per hour) and ``pool_beats_compute`` (the step lowered the cost: the pool
    nodes added cost less than the units they saved; None where a cost or count is unknown)."""
    rows: list[dict[str, Any]] = []
    for k, point in enumerate(points):
        n = point.units_for.get(target)
        row: dict[str, Any] = {"pool_nodes": point.pool_nodes, "units": n,
                               "capex_usd": costs.total(n, point.pool_nodes, "capex_usd"),
                               "cost_per_hour_usd": costs.total(n, point.pool_nodes),
                               "units_saved": None, "pool_nodes_added": None, "step_usd_per_hour": None,
                               "pool_beats_compute": None}
        if k:
            before = rows[-1]
            row["pool_nodes_added"] = point.pool_nodes - before["pool_nodes"]
            if n is not None and before["units"] is not None:
                row["units_saved"] = before["units"] - n
            if row["cost_per_hour_usd"] is not None and before["cost_per_hour_usd"] is not None:
                row["step_usd_per_hour"] = row["cost_per_hour_usd"] - before["cost_per_hour_usd"]
                row["pool_beats_compute"] = row["step_usd_per_hour"] < 0
        rows.append(row)
    return rows


def beats_compute_up_to(rows: Sequence[dict[str, Any]]) -> int | None:
    """The largest pool size up to which every step of the frontier lowered the cost (adding pool
    capacity beat adding compute up to it); the first size when the first step does not; None
    where the first step's cost is unknown or the axis has one size."""
    if len(rows) < 2 or rows[1]["pool_beats_compute"] is None:
        return None
    reached = rows[0]["pool_nodes"]
    for row in rows[1:]:
        if not row["pool_beats_compute"]:
            break
        reached = row["pool_nodes"]
    return reached


def pool_axis_answer(candidate: dict[str, Any], found: Any, scenario: Any) -> None:
    """Rewrite a shared-pool candidate's entry of ``plan.json`` (:func:`kvsim.plan.answer.plan_answer`)
    in place: its ``unit_cost`` is one compute unit's, each target carries ``pool_nodes`` and the
    cost of ``(units, pool nodes)`` (``pool_cost_per_hour_usd``: the pool's part), and
    ``shared_pool`` holds the pool node's cost, the rent, one unit's capacity per size probed, the
    sizes ``not_probed`` (they could not win), and per target the frontier and ``beats_compute_up_to``."""
    costs = axis_costs(scenario, found.system)
    spec = scenario.spec.plan.shared_pools[found.system]
    points = found.pool_axis
    first = points[0]
    per_hour = costs.total(1, first.pool_nodes)
    candidate["capacity"]["load_per_usd_hour"] = (first.capacity.max_load / per_hour
                                                  if first.capacity.max_load and per_hour else None)
    candidate["capacity"]["note"] += (f" (one unit with the smallest pool, {_nodes(points[0].pool_nodes)}; its "
                                      "unit_cost is the compute's alone: the pool is priced on its own)")
    candidate["unit_cost"] = {"capex_usd": costs.unit_capex_usd, "cost_per_hour_usd": costs.unit_usd_per_hour,
                              "assumptions": list(costs.assumptions), "unknown": list(costs.unknown)}
    for row in candidate["targets"]:
        pool = found.pool_nodes_for[row["load"]]
        row["pool_nodes"] = pool
        row["capex_usd"] = costs.total(row["units"], pool, "capex_usd")
        row["cost_per_hour_usd"] = costs.total(row["units"], pool)
        row["pool_cost_per_hour_usd"] = (None if costs.pool_node_usd_per_hour is None
                                         else pool * costs.pool_node_usd_per_hour)
    from kvsim.plan.answer import _unit_text

    raw = scenario.raw["systems"][found.system]
    remote = (raw.get("kv_cache") or {}).get("remote") or {}
    compute = {**raw, "kv_cache": {k: v for k, v in (raw.get("kv_cache") or {}).items() if k != "remote"}}
    candidate["unit"] = (f"{_unit_text(compute)}; shared remote KV pool: P x {remote.get('pool_node')}, "
                         f"P in {', '.join(map(str, spec.nodes))}")
    tables = []
    for target in scenario.spec.plan.loads:
        rows = frontier(points, target, costs)
        tables.append({"load": target, "rows": rows, "beats_compute_up_to": beats_compute_up_to(rows),
                       "chosen_pool_nodes": found.pool_nodes_for[target]})
    candidate["shared_pool"] = {
        "pool_node": remote.get("pool_node"), "nodes": list(spec.nodes),
        "pool_node_capacity_bytes": costs.pool_node_capacity_bytes,
        "usd_per_tb_month": spec.usd_per_tb_month,
        "pool_node_capex_usd": costs.pool_node_capex_usd, "pool_node_usd_per_hour": costs.pool_node_usd_per_hour,
        "unit_usd_per_hour": costs.unit_usd_per_hour,
        "not_probed": [n for n in spec.nodes if n > points[-1].pool_nodes],
        "capacity": [{"pool_nodes": p.pool_nodes, "max_load": p.capacity.max_load, "fail_load": p.capacity.fail_load,
                      "converged": p.capacity.converged} for p in points],
        "frontier": tables,
    }


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(sum(known)) if len(known) == len(values) else None


def _nodes(n: int) -> str:
    return f"{n} pool node" if n == 1 else f"{n} pool nodes"
