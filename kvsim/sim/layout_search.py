"""``instance: {layout: best}``: try every valid layout of a system's hardware, keep the best.

For a system whose (one, colocated) pool asks for ``layout: best``, the candidates are the
layouts of :func:`kvsim.models.parallel.candidate_layouts` whose instance fits the pool's
nodes (a divisor of one node's cards, or whole nodes) and that size (weights and the longest
request fit). The search is two rounds of ordinary simulator runs, so every cost the full run
pays (cache hits, transfers, queueing) informs the choice:

1. a *pilot* of each candidate: the same system on the point's workload for
   ``min(duration, PILOT_DURATION_S)`` of simulated time (warm-up scaled in proportion);
2. the :data:`FINALISTS` best pilots run at full length; the best of them is the result (its
   full run is the system's run at that point, not repeated).

"Best" is the highest goodput (requests/s meeting every SLO; requests/s when the scenario sets
none), then the lower mean end-to-end latency (a short pilot completes few requests, so equal
counts are common), then the smaller instance, then the candidates' order. The search costs
about ``candidates x PILOT_DURATION_S / duration + FINALISTS`` full runs per system and point.

The chosen layout is written into the spec at that sweep point (``layout: given`` with its
``tp``, ``pp``, ``ep``, ``dp_attention``), and the scores are kept in the run's summary
(``layout_search``).
"""

from __future__ import annotations

from typing import Callable, TypeVar

from kvsim.models.parallel import Layout, candidate_layouts
from kvsim.scenario.load import Catalogs
from kvsim.scenario.schema import ScenarioSpec
from kvsim.sim.sizing import SizingError, SystemSizing, size_system

__all__ = ["PILOT_DURATION_S", "FINALISTS", "searches_layout", "with_layout", "candidates", "choose_layout"]

T = TypeVar("T")

FINALISTS = 3
"""Candidates whose pilots rank highest and that are then run at full length."""

PILOT_DURATION_S = 30.0
"""Simulated seconds of one pilot run (assumption: long enough for the batch to fill at the
loads of the shipped studies; shorter scenarios pilot over their own duration)."""


def searches_layout(spec: ScenarioSpec, name: str) -> bool:
    """Whether system ``name`` asks for ``layout: best``."""
    return any(p.instance.layout == "best" for p in spec.systems[name].pool_specs().values())


def _search_problem(spec: ScenarioSpec, name: str) -> tuple[tuple[str, ...], str] | None:
    system = spec.systems[name]
    pools = system.pool_specs()
    if len(pools) != 1 or system.disaggregated:
        return ("pools",), "layout: best searches a colocated system of one pool; give the layouts of each pool"
    (pool_name, pool), = pools.items()
    given = [f for f in ("tp", "pp", "ep", "dp_attention") if f in pool.instance.model_fields_set]
    if given:
        return system.pool_path(pool_name) + ("instance", given[0]), \
            f"give layout: best or the layout ({', '.join(given)}), not both"
    return None


def with_layout(spec: ScenarioSpec, name: str, layout: Layout) -> ScenarioSpec:
    """``spec`` with system ``name``'s one pool set to ``layout`` (``layout: given``)."""
    system = spec.systems[name]
    fields = {"tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "dp_attention": layout.dp_attention,
              "layout": "given"}
    if system.pools is None:
        system = system.model_copy(update={"instance": system.instance.model_copy(update=fields)})
    else:
        (pool_name, pool), = system.pools.items()
        pool = pool.model_copy(update={"instance": pool.instance.model_copy(update=fields)})
        system = system.model_copy(update={"pools": {pool_name: pool}})
    return spec.model_copy(update={"systems": {**spec.systems, name: system}})


def candidates(spec: ScenarioSpec, name: str, catalogs: Catalogs) -> list[tuple[Layout, SystemSizing]]:
    """The layouts system ``name`` could run, each with its sizing, in search order.

    Raises
    ------
    SizingError
        The system cannot search (several pools, layout fields given too), or no layout fits.
    """
    problem = _search_problem(spec, name)
    if problem is not None:
        raise SizingError(("systems", name) + problem[0], problem[1])
    (pool_name, pool), = spec.systems[name].pool_specs().items()
    node = catalogs.nodes[pool.node]
    per_node = node.accelerators_per_node
    model = catalogs.models[spec.system_model(name)]
    found, reasons = [], []
    for layout in candidate_layouts(model, pool.nodes * per_node):
        if per_node % layout.cards and layout.cards % per_node:
            continue
        try:
            found.append((layout, size_system(with_layout(spec, name, layout), name, catalogs)))
        except SizingError as exc:
            reasons.append(f"{layout.label()}: {exc.message}")
    if not found:
        path = ("systems", name) + spec.systems[name].pool_path(pool_name) + ("instance", "layout")
        raise SizingError(path, "no layout of the pool's cards can run: " + "; ".join(reasons[-3:]))
    return found


def _key(summary: dict, spec: ScenarioSpec) -> tuple[float, float]:
    """Goodput (requests/s meeting every SLO; requests/s without SLOs), then lower mean latency:
    completions in a short window are few, so equal counts are common."""
    slo = spec.slo
    rate = summary["requests_per_s"] if slo.ttft_p99 is None and slo.tpot_p99 is None and slo.e2e_p99 is None \
        else summary["goodput_requests_per_s"]
    e2e = summary["e2e_s"]["mean"]
    return float(rate), -(e2e if e2e is not None else float("inf"))


def choose_layout(spec: ScenarioSpec, name: str, catalogs: Catalogs,
                  simulate: Callable[[ScenarioSpec, SystemSizing], T]) -> tuple[Layout, T, dict[str, dict]]:
    """Pilot every candidate layout of system ``name``, run the :data:`FINALISTS` best at full
    length, and return the winner, its full run and every score.

    Parameters
    ----------
    spec : ScenarioSpec
        The scenario at one sweep point.
    simulate : callable
        ``simulate(spec, sizing) -> run`` (a run has a ``summary``): simulate the system of
        ``sizing`` at ``spec``.

    Returns
    -------
    layout, run, scores
        ``scores`` maps ``pilot`` and ``final`` to {layout label: goodput}.
    """
    duration = min(spec.duration, PILOT_DURATION_S)
    short = spec.model_copy(update={"duration": duration, "warmup": spec.warmup * duration / spec.duration})
    pilots = []
    for order, (layout, _) in enumerate(candidates(spec, name, catalogs)):
        resolved = with_layout(short, name, layout)
        summary = simulate(resolved, size_system(resolved, name, catalogs)).summary
        pilots.append((_key(summary, spec), -layout.cards, -order, layout))
    pilots.sort(reverse=True)
    finals = []
    for key, cards, order, layout in pilots[:FINALISTS]:
        resolved = with_layout(spec, name, layout)
        run = simulate(resolved, size_system(resolved, name, catalogs))
        finals.append((_key(run.summary, spec), cards, order, layout, run))
    best = max(finals, key=lambda f: f[:3])
    scores = {"pilot": {p[3].label(): p[0][0] for p in pilots}, "final": {f[3].label(): f[0][0] for f in finals}}
    return best[3], best[4], scores
