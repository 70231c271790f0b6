"""``instance: {layout: best}``: try the valid layouts of a system's hardware, keep the best.

For each pool that asks for ``layout: best``, the candidates are the layouts of
:func:`kvsim.models.parallel.candidate_layouts` whose instance fits the pool's nodes (a divisor
of one node's cards, or whole nodes) and that size (weights and the longest request fit). The
search is rounds of ordinary simulator runs, so every cost the full run pays (cache hits,
transfers, queueing, the prefill-to-decode handoff) informs the choice:

1. a *pilot* of each candidate: the same system on the point's workload for
   ``min(duration, PILOT_DURATION_S)`` of simulated time (warm-up scaled in proportion);
2. the :data:`FINALISTS` best pilots run at full length; the best of them is the result (its
   full run is the system's run at that point, not repeated).

**Several pools** (a disaggregated system, or colocated pools of different nodes) are searched
one pool at a time (coordinate search, one pass): decode pools first -- their layout sets the
time per output token and the KV room every handed-off prompt needs -- then the others in the
order the scenario gives them. A pool not yet searched runs at its *start* layout, the
conventional one (the widest plain tensor parallelism inside one node that fits; else its
first candidate); a searched pool keeps its best pilot while the next is searched. So the
pilots number the sum of the pools' candidates, not their product (a product would be hundreds
of pilots for a trillion-parameter MoE on two pools); the price is that a pair of layouts that
only wins together, against both pools' start layouts, can be missed. The finalists are the best
pilots of every round (all pilots are the same window of the same requests, so their scores
compare).

"Best" is the highest goodput (requests/s meeting every SLO; requests/s when the scenario sets
none), then the lower mean end-to-end latency (a short pilot completes few requests, so equal
counts are common), then the fewer cards per instance (summed over the searched pools), then
the search order.

The chosen layouts are written into the spec at that sweep point (``layout: given`` with
``tp``, ``pp``, ``ep``, ``dp_attention``), and the scores are kept in the run's summary
(``layout_search``: ``chosen`` and each pilot's and finalist's goodput by label; with several
pools a label reads ``prefill=tp8; decode=tp16 ep16 dpa16`` and ``pools`` gives each pool's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kvsim.models.parallel import Layout, candidate_layouts
from kvsim.scenario.load import Catalogs
from kvsim.scenario.schema import ScenarioSpec
from kvsim.sim.sizing import SizingError, SystemSizing, size_pool, size_system

__all__ = ["PILOT_DURATION_S", "FINALISTS", "Choice", "SearchSpace", "searches_layout", "with_choice",
           "search_space", "pilot_sizings", "resolve_choice", "choose_layout"]

T = TypeVar("T")

FINALISTS = 3
"""Candidates whose pilots rank highest and that are then run at full length."""

PILOT_DURATION_S = 30.0
"""Simulated seconds of one pilot run (assumption: long enough for the batch to fill at the
loads of the shipped studies; shorter scenarios pilot over their own duration)."""


@dataclass(frozen=True)
class Choice:
    """One layout for each searched pool, in the system's pool order."""

    layouts: tuple[tuple[str, Layout], ...]
    several: bool  # the system has more than one pool: labels name the pool

    def label(self) -> str:
        if not self.several:
            return self.layouts[0][1].label()
        return "; ".join(f"{pool}={layout.label()}" for pool, layout in self.layouts)

    @property
    def cards(self) -> int:
        """Cards per instance, summed over the searched pools."""
        return sum(layout.cards for _, layout in self.layouts)


@dataclass(frozen=True)
class SearchSpace:
    """What a system's search will try: each searched pool's fitting layouts, in search order,
    and the layouts the pools start at."""

    pools: tuple[tuple[str, tuple[Layout, ...]], ...]
    start: Choice
    start_sizing: SystemSizing

    @property
    def pilots(self) -> int:
        """Pilot runs at most (a joint choice met twice is piloted once)."""
        return sum(len(layouts) for _, layouts in self.pools)


def searches_layout(spec: ScenarioSpec, name: str) -> bool:
    """Whether system ``name`` asks for ``layout: best`` (in any pool)."""
    return any(p.instance.layout == "best" for p in spec.systems[name].pool_specs().values())


def _searched(spec: ScenarioSpec, name: str) -> list[str]:
    """The pools that ask for ``layout: best``, in search order (decode pools first)."""
    pools = spec.systems[name].pool_specs()
    best = [p for p, pool in pools.items() if pool.instance.layout == "best"]
    return [p for p in best if pools[p].role == "decode"] + [p for p in best if pools[p].role != "decode"]


def _search_problem(spec: ScenarioSpec, name: str) -> tuple[tuple[str, ...], str] | None:
    system = spec.systems[name]
    pools = system.pool_specs()
    for pool_name in _searched(spec, name):
        pool = pools[pool_name]
        given = [f for f in ("tp", "pp", "ep", "dp_attention") if f in pool.instance.model_fields_set]
        if given:
            return system.pool_path(pool_name) + ("instance", given[0]), \
                f"give layout: best or the layout ({', '.join(given)}), not both"
        if pool.roles is not None:
            return system.pool_path(pool_name) + ("roles",), (
                "roles counts instances, and layout: best changes how many the pool has: give the pool one "
                "role (and a switchable: true for a controller to move it), or give its layout")
    return None


def with_choice(spec: ScenarioSpec, name: str, layouts: dict[str, Layout]) -> ScenarioSpec:
    """``spec`` with the named pools of system ``name`` set to the given layouts (``layout: given``)."""
    system = spec.systems[name]
    if system.pools is None:
        (layout,) = layouts.values()
        fields = {"tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "dp_attention": layout.dp_attention,
                  "layout": "given"}
        system = system.model_copy(update={"instance": system.instance.model_copy(update=fields)})
    else:
        pools = dict(system.pools)
        for pool_name, layout in layouts.items():
            fields = {"tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "dp_attention": layout.dp_attention,
                      "layout": "given"}
            pool = pools[pool_name]
            pools[pool_name] = pool.model_copy(update={"instance": pool.instance.model_copy(update=fields)})
        system = system.model_copy(update={"pools": pools})
    return spec.model_copy(update={"systems": {**spec.systems, name: system}})


def _choice(spec: ScenarioSpec, name: str, layouts: dict[str, Layout]) -> Choice:
    pools = spec.systems[name].pool_specs()
    return Choice(tuple((p, layouts[p]) for p in pools if p in layouts), several=len(pools) > 1)


def _start(pool_layouts: tuple[Layout, ...], per_node: int) -> Layout:
    """The conventional layout: the widest plain tensor parallelism inside one node that fits."""
    plain = [lay for lay in pool_layouts if lay.pp == lay.ep == lay.dp_attention == 1 and lay.tp <= per_node]
    return max(plain, key=lambda lay: lay.tp) if plain else pool_layouts[0]


def search_space(spec: ScenarioSpec, name: str, catalogs: Catalogs) -> SearchSpace:
    """Each searched pool's layouts that fit, and the start layouts, for system ``name``.

    Raises
    ------
    SizingError
        The system cannot search (layout fields given too, a pool split by ``roles``), no layout
        of a pool fits, or the system at the start layouts cannot run.
    """
    problem = _search_problem(spec, name)
    if problem is not None:
        raise SizingError(("systems", name) + problem[0], problem[1])
    system = spec.systems[name]
    pools = system.pool_specs()
    searched = _searched(spec, name)
    space, start = [], {}
    for pool_name in searched:
        pool = pools[pool_name]
        per_node = catalogs.nodes[pool.node].accelerators_per_node
        model = catalogs.models[spec.system_model(name)]
        found, reasons = [], []
        for layout in candidate_layouts(model, pool.nodes * per_node):
            if per_node % layout.cards and layout.cards % per_node:
                continue
            try:
                if len(pools) == 1:  # the whole system is this pool: its own checks are the system's
                    size_system(with_choice(spec, name, {pool_name: layout}), name, catalogs)
                else:  # the other pools' layouts are not chosen yet: this pool on its own
                    size_pool(with_choice(spec, name, {pool_name: layout}), name, pool_name, catalogs)
                found.append(layout)
            except SizingError as exc:
                reasons.append(f"{layout.label()}: {exc.message}")
        if not found:
            path = ("systems", name) + system.pool_path(pool_name) + ("instance", "layout")
            raise SizingError(path, "no layout of the pool's cards can run: " + "; ".join(reasons[-3:]))
        space.append((pool_name, tuple(found)))
        start[pool_name] = _start(tuple(found), per_node)
    choice = _choice(spec, name, start)
    sizing = size_system(with_choice(spec, name, start), name, catalogs)  # raises if the start cannot run
    return SearchSpace(tuple(space), choice, sizing)


def pilot_sizings(space: SearchSpace, spec: ScenarioSpec, name: str, catalogs: Catalogs) -> list[SystemSizing]:
    """A sizing per pilot for estimating the search's cost: each pool's layouts with the other
    pools at their start layouts (the search moves them as it goes; the estimate does not)."""
    out = []
    for pool_name, layouts in space.pools:
        for layout in layouts:
            try:
                out.append(size_system(with_choice(spec, name, {**dict(space.start.layouts), pool_name: layout}),
                                       name, catalogs))
            except SizingError:
                continue
    return out


def resolve_choice(spec: ScenarioSpec, name: str, label: str, catalogs: Catalogs) -> SystemSizing | None:
    """The sizing of system ``name`` at the choice labelled ``label`` (as a run's summary keeps it);
    None when the label names no layout the search could try."""
    space = search_space(spec, name, catalogs)
    several = space.start.several
    wanted = dict(part.split("=", 1) for part in label.split("; ")) if several else {space.pools[0][0]: label}
    layouts = {}
    for pool_name, tried in space.pools:
        match = [lay for lay in tried if lay.label() == wanted.get(pool_name)]
        if not match:
            return None
        layouts[pool_name] = match[0]
    return size_system(with_choice(spec, name, layouts), name, catalogs)


def _key(summary: dict, spec: ScenarioSpec) -> tuple[float, float]:
    """Goodput (requests/s meeting every SLO; requests/s without SLOs), then lower mean latency:
    completions in a short window are few, so equal counts are common."""
    slo = spec.slo
    rate = summary["requests_per_s"] if slo.ttft_p99 is None and slo.tpot_p99 is None and slo.e2e_p99 is None \
        else summary["goodput_requests_per_s"]
    e2e = summary["e2e_s"]["mean"]
    return float(rate), -(e2e if e2e is not None else float("inf"))


def choose_layout(spec: ScenarioSpec, name: str, catalogs: Catalogs,
                  simulate: Callable[[ScenarioSpec, SystemSizing], T]) -> tuple[Choice, T, dict[str, dict]]:
    """Pilot the candidate layouts of system ``name`` (pool by pool), run the :data:`FINALISTS`
    best at full length, and return the winner, its full run and every score.

    Parameters
    ----------
    spec : ScenarioSpec
        The scenario at one sweep point.
    simulate : callable
        ``simulate(spec, sizing) -> run`` (a run has a ``summary``): simulate the system of
        ``sizing`` at ``spec``.

    Returns
    -------
    choice, run, scores
        ``scores`` maps ``pilot`` and ``final`` to {label: goodput} (and, with several pools,
        ``pools`` to each pool's chosen layout label).
    """
    space = search_space(spec, name, catalogs)
    duration = min(spec.duration, PILOT_DURATION_S)
    short = spec.model_copy(update={"duration": duration, "warmup": spec.warmup * duration / spec.duration})
    current = dict(space.start.layouts)
    pilots: dict[str, tuple] = {}
    for pool_name, layouts in space.pools:
        best = None
        for layout in layouts:
            choice = _choice(spec, name, {**current, pool_name: layout})
            label = choice.label()
            if label not in pilots:
                resolved = with_choice(short, name, dict(choice.layouts))
                try:
                    sizing = size_system(resolved, name, catalogs)
                except SizingError:
                    continue  # this pool's layout fits, but not beside the others' (e.g. a handoff link)
                summary = simulate(resolved, sizing).summary
                pilots[label] = (_key(summary, spec), -choice.cards, -len(pilots), choice)
            if best is None or pilots[label][:3] > best[:3]:
                best = pilots[label]
        if best is not None:
            current[pool_name] = dict(best[3].layouts)[pool_name]
    ranked = sorted(pilots.values(), key=lambda p: p[:3], reverse=True)
    finals = []
    for _score, cards, order, choice in ranked[:FINALISTS]:
        resolved = with_choice(spec, name, dict(choice.layouts))
        run = simulate(resolved, size_system(resolved, name, catalogs))
        finals.append((_key(run.summary, spec), cards, order, choice, run))
    best_final = max(finals, key=lambda f: f[:3])
    scores: dict[str, dict] = {"pilot": {p[3].label(): p[0][0] for p in ranked},
                               "final": {f[3].label(): f[0][0] for f in finals}}
    if best_final[3].several:
        scores["pools"] = {pool: layout.label() for pool, layout in best_final[3].layouts}
    return best_final[3], best_final[4], scores
