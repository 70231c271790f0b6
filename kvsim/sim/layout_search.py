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

**Weight placements** (issue 28 item 3). A pool that also gives ``weight_offload_search:
[0.25, 0.5]`` has, beside each layout with every weight in HBM, the same layout with each share
of its weights kept off the card (:mod:`kvsim.models.weight_offload`: a dense model's last layers,
an MoE model's coldest experts), where offload is modelled (tensor parallelism inside one node)
and fits its home (host DRAM or the remote pool); such a candidate's
label reads ``tp2 offload 0.5``. It competes like any other: TP 2 with half its layers streamed
against TP 4 without is decided by the pilots' goodput, then by fewer cards per instance. The
summary's ``weight_offload`` says whether offload paid: the best pilot with and without it,
and a verdict -- offload *saves cards* (it wins on fewer cards per instance), *pays* (it wins
at the same or more cards: more KV room), *is the only fit* (no layout holds every weight in
HBM), or *only slows decode* (an all-in-HBM layout wins).

The chosen layouts are written into the spec at that sweep point (``layout: given`` with
``tp``, ``pp``, ``ep``, ``dp_attention`` and any ``weight_offload``), and the scores are kept in
the run's summary (``layout_search``: ``chosen`` and each pilot's and finalist's goodput by
label; with several pools a label reads ``prefill=tp8; decode=tp16 ep16 dpa16`` and ``pools``
gives each pool's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kvsim.models.parallel import Layout, candidate_layouts
from kvsim.models.weight_offload import WeightOffloadSpec
from kvsim.scenario.load import Catalogs
from kvsim.scenario.schema import ScenarioSpec
from kvsim.sim.sizing import SizingError, SystemSizing, size_pool, size_system

__all__ = ["PILOT_DURATION_S", "FINALISTS", "Candidate", "Choice", "SearchSpace", "searches_layout", "with_choice",
           "search_space", "pilot_sizings", "resolve_choice", "choose_layout", "offload_verdict"]

T = TypeVar("T")

FINALISTS = 3
"""Candidates whose pilots rank highest and that are then run at full length."""

PILOT_DURATION_S = 30.0
"""Simulated seconds of one pilot run (assumption: long enough for the batch to fill at the
loads of the shipped studies; shorter scenarios pilot over their own duration)."""


@dataclass(frozen=True)
class Candidate:
    """One way to run a pool's instances: a layout and the share of its layers kept in host
    DRAM (None: every weight in HBM)."""

    layout: Layout
    offload: float | None = None

    def label(self) -> str:
        return self.layout.label() + (f" offload {self.offload:g}" if self.offload is not None else "")

    @property
    def cards(self) -> int:
        return self.layout.cards


@dataclass(frozen=True)
class Choice:
    """One candidate for each searched pool, in the system's pool order."""

    layouts: tuple[tuple[str, Candidate], ...]
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

    pools: tuple[tuple[str, tuple[Candidate, ...]], ...]
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
        if pool.instance.weight_offload_search and pool.instance.weight_offload is not None:
            return system.pool_path(pool_name) + ("instance", "weight_offload_search"), \
                "give weight_offload (one share, every candidate) or weight_offload_search (shares to try), not both"
        if pool.roles is not None:
            return system.pool_path(pool_name) + ("roles",), (
                "roles counts instances, and layout: best changes how many the pool has: give the pool one "
                "role (and a switchable: true for a controller to move it), or give its layout")
    return None


def _fields(candidate: Candidate, instance) -> dict:
    layout = candidate.layout
    fields = {"tp": layout.tp, "pp": layout.pp, "ep": layout.ep, "dp_attention": layout.dp_attention,
              "layout": "given", "weight_offload_search": ()}
    if candidate.offload is not None:  # keeps a given buffer_layers
        base = instance.weight_offload or WeightOffloadSpec(fraction=candidate.offload)
        fields["weight_offload"] = base.model_copy(update={"fraction": candidate.offload})
    elif instance.weight_offload_search:  # the search's all-in-HBM candidate
        fields["weight_offload"] = None
    return fields


def with_choice(spec: ScenarioSpec, name: str, layouts: dict[str, Candidate]) -> ScenarioSpec:
    """``spec`` with the named pools of system ``name`` set to the given candidates (``layout:
    given``, with their weight offload)."""
    system = spec.systems[name]
    if system.pools is None:
        (candidate,) = layouts.values()
        instance = system.instance
        system = system.model_copy(update={"instance": instance.model_copy(update=_fields(candidate, instance))})
    else:
        pools = dict(system.pools)
        for pool_name, candidate in layouts.items():
            instance = pools[pool_name].instance
            pools[pool_name] = pools[pool_name].model_copy(
                update={"instance": instance.model_copy(update=_fields(candidate, instance))})
        system = system.model_copy(update={"pools": pools})
    return spec.model_copy(update={"systems": {**spec.systems, name: system}})


def _choice(spec: ScenarioSpec, name: str, layouts: dict[str, Candidate]) -> Choice:
    pools = spec.systems[name].pool_specs()
    return Choice(tuple((p, layouts[p]) for p in pools if p in layouts), several=len(pools) > 1)


def _start(candidates: tuple[Candidate, ...], per_node: int) -> Candidate:
    """The conventional layout: the widest plain tensor parallelism inside one node that fits,
    every weight in HBM if one does (else the least offloaded)."""
    plain = [c for c in candidates if c.layout.plain_tp and c.layout.tp <= per_node]
    if not plain:
        return candidates[0]
    return max(plain, key=lambda c: (c.offload is None, -(c.offload or 0.0), c.layout.tp))


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
        shares = (None,) + tuple(sorted(set(pool.instance.weight_offload_search)))
        found: list[Candidate] = []
        reasons: list[str] = []
        offload_reasons: list[str] = []
        for layout in candidate_layouts(model, pool.nodes * per_node):
            if per_node % layout.cards and layout.cards % per_node:
                continue
            for share in shares:
                candidate = Candidate(layout, share)
                try:
                    if len(pools) == 1:  # the whole system is this pool: its own checks are the system's
                        size_system(with_choice(spec, name, {pool_name: candidate}), name, catalogs)
                    else:  # the other pools' layouts are not chosen yet: this pool on its own
                        size_pool(with_choice(spec, name, {pool_name: candidate}), name, pool_name, catalogs)
                    found.append(candidate)
                except SizingError as exc:
                    (reasons if share is None else offload_reasons).append(f"{candidate.label()}: {exc.message}")
        pool_path = ("systems", name) + system.pool_path(pool_name) + ("instance",)
        if not found:
            raise SizingError(pool_path + ("layout",), "no layout of the pool's cards can run: "
                              + "; ".join((reasons + offload_reasons)[-3:]))
        if len(shares) > 1 and all(c.offload is None for c in found):
            raise SizingError(pool_path + ("weight_offload_search",), "no candidate layout can offload its weights: "
                              + "; ".join(offload_reasons[-2:]))
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
    layouts: dict[str, Candidate] = {}
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
    verdict = offload_verdict([(p[0][0], p[3]) for p in ranked], best_final[3])
    if verdict is not None:
        scores["weight_offload"] = verdict
    return best_final[3], best_final[4], scores


def _offloads(choice: Choice) -> bool:
    return any(candidate.offload is not None for _, candidate in choice.layouts)


def offload_verdict(ranked: list[tuple[float, Choice]], chosen: Choice) -> dict | None:
    """Whether weight offload paid in a search that tried it (None if it tried none).

    Parameters
    ----------
    ranked : list of (goodput, Choice)
        The pilots, best first; goodput in requests/s (all pilots run the same window).
    chosen : Choice
        The search's winner (from the full-length finals).

    Returns
    -------
    dict
        ``best_offloaded`` / ``best_in_hbm``: the best pilot with some layers on the host and
        with every weight in HBM (label, ``..._goodput_rps`` requests/s; the latter None when no
        layout holds every weight), and ``verdict``: ``saves_cards`` (an offloaded winner on fewer
        cards per instance than the best all-in-HBM layout), ``pays`` (an offloaded winner on as
        many cards or more: the HBM it frees holds KV), ``only_fit``, ``slows_decode`` (an
        all-in-HBM layout won) or ``undecided`` (no pilot completed a request), with ``text``
        saying it in a sentence.
    """
    offloaded = [(g, c) for g, c in ranked if _offloads(c)]
    in_hbm = [(g, c) for g, c in ranked if not _offloads(c)]
    if not offloaded:
        return None
    (g_off, c_off), best = offloaded[0], in_hbm[0] if in_hbm else None
    g_chosen = next((g for g, c in ranked if c.label() == chosen.label()), g_off)
    out: dict = {"best_offloaded": c_off.label(), "best_offloaded_goodput_rps": g_off,
                 "best_in_hbm": best[1].label() if best else None, "best_in_hbm_goodput_rps": best[0] if best else None}
    if best is not None and max(g_chosen, g_off, best[0]) == 0.0:
        out["verdict"] = "undecided"
        out["text"] = ("no pilot completed a request in its window (offloaded or not): lengthen the duration "
                       "for the search to weigh offload")
    elif best is None:
        out["verdict"] = "only_fit"
        out["text"] = f"no layout holds every weight in HBM; offloaded, {chosen.label()} runs"
    elif not _offloads(chosen):
        out["verdict"] = "slows_decode"
        # the finals may crown another all-in-HBM layout than the best pilot: name the winner first
        winner = "" if chosen.label() == best[1].label() else f"{chosen.label()} won the finals, every weight in HBM; "
        out["text"] = (f"offload only slows decode here: {winner}{best[1].label()} ({best[0]:.3g} req/s in the "
                       f"pilot) against the best offloaded {c_off.label()} ({g_off:.3g} req/s)")
    elif chosen.cards < best[1].cards:
        out["verdict"] = "saves_cards"
        out["text"] = (f"offload saves cards: {chosen.label()} on {chosen.cards} card(s) per instance against "
                       f"{best[1].label()} on {best[1].cards} ({g_chosen:.3g} against {best[0]:.3g} req/s in the pilot)")
    else:
        out["verdict"] = "pays"
        out["text"] = (f"offload pays: {chosen.label()} ({g_chosen:.3g} req/s in the pilot) against "
                       f"{best[1].label()} ({best[0]:.3g} req/s), on as many cards per instance")
    return out
