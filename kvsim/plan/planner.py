"""``kvsim plan``: the cheapest configuration that serves each target load within the SLO.

For each candidate (a system of the scenario, written as one *unit*, see
:mod:`kvsim.scenario.plan_spec`):

1. its **unit capacity** -- the most load one unit sustains within the SLO -- by the load search
   of :mod:`kvsim.plan.search` (the load is the arrival rate, requests/s, or for a closed loop
   the number of clients);
2. for each target load, the **fewest units** that serve it within the SLO: starting from
   ``ceil(target / unit capacity)`` (linear scaling), probed at the target load and moved down
   while one unit fewer still meets it, or up until one meets it.

Every probe is a run of the scenario with only that system, its node counts multiplied by the
units, at one load, over a window long enough to hold enough completions per instance (per
client, for a closed loop) to judge (:func:`probe_scenario`, :func:`run_probe`); the same seed at every probe, so the probes differ only in the load
(common random numbers). A probe flagged unstable or rejecting requests does not meet the SLO
(:mod:`kvsim.plan.slo`); one flagged too short or with too short a warm-up, whose verdict rests on
that flag, is run again over a longer window or warm-up until the flag clears or a budget is spent
(:func:`rerun_scenario`) -- if it met every objective and the flag remains, it meets the SLO
*unconfirmed*, and the answer says so. With ``replications: N`` a probe runs N seeds and is judged on their
mean statistics, not steady state if any replica is not (:func:`replicas_summary`). Probes run in parallel through ``map_probes`` (serial by default).
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kvsim.plan.probe_rules import (
    RESOLVE_FLAGS,
    RESOLVE_TRIES,
    WINDOW_MARGIN,
    certain_failure,
    rerun_scenario,
    untrusted,
)
from kvsim.plan.search import LoadSearch, ProbeOutcome, find_max_load
from kvsim.plan.slo import STATISTICS, Objective, objectives_from_slo, slo_verdict
from kvsim.scenario.load import Scenario

__all__ = ["Probe", "CandidatePlan", "PlanResult", "plan", "scaled_scenario", "probe_scenario", "run_probe",
           "rerun_scenario", "certain_failure", "load_unit", "RESOLVE_FLAGS", "RESOLVE_TRIES", "WINDOW_MARGIN"]


@dataclass(frozen=True)
class Probe:
    """One run a plan needs: ``units`` of candidate ``system`` at ``load`` (requests/s, or clients
    for a closed loop), with the scenario's seed or ``seed`` (a seed check's); ``pool_nodes``: the
    remote KV pool's node count, shared by the units (``plan.shared_pools``), or None for the
    pool as written times the units."""

    system: str
    units: int
    load: float
    seed: int | None = None
    pool_nodes: int | None = None


@dataclass
class CandidatePlan:
    """What the plan found for one candidate.

    Attributes
    ----------
    system : str
    capacity : LoadSearch
        The search for the most load one unit sustains within the SLO.
    units_for : dict
        Target load (requests/s, or clients) -> fewest units that serve it within the SLO, or None if even
        the largest allowed count does not.
    notes : dict
        Target load -> how its unit count was found, in words.
    seed_checks : dict
        Target load -> its unit count's check under other seeds (:func:`seed_check`), for the
        candidates checked there.
    pool_nodes_for : dict
        A shared-pool candidate's (``plan.shared_pools``): target load -> the pool node count of
        its cheapest ``(units, pool nodes)``; empty for any other candidate.
    pool_axis : list
        A shared-pool candidate's search per pool node count (:class:`kvsim.plan.pool_axis.PoolPoint`,
        ascending); empty for any other candidate. ``capacity`` is then the first's.
    """

    system: str
    capacity: LoadSearch
    units_for: dict[float, int | None] = field(default_factory=dict)
    notes: dict[float, str] = field(default_factory=dict)
    seed_checks: dict[float, dict[str, Any]] = field(default_factory=dict)
    pool_nodes_for: dict[float, int] = field(default_factory=dict)
    pool_axis: list[Any] = field(default_factory=list)


@dataclass
class PlanResult:
    """Every candidate's plan, and every probe run (``(probe, outcome)``, candidate by candidate,
    each in the order it ran)."""

    scenario: Scenario
    objectives: list[Objective]
    candidates: list[CandidatePlan]
    probes: list[tuple[Probe, ProbeOutcome]]

    def candidate(self, system: str) -> CandidatePlan:
        return next(c for c in self.candidates if c.system == system)


def load_unit(scenario: Scenario) -> str:
    """The unit of the plan's load: ``clients`` (closed loop, ``target_clients``) or ``requests/s``."""
    plan = scenario.spec.plan
    return "clients" if plan is not None and plan.by_clients else "requests/s"


def scaled_scenario(scenario: Scenario, system: str, units: int, load: float,
                    pool_nodes: int | None = None) -> Scenario:
    """``scenario`` with only ``system``, every node count of it times ``units``, at ``load``: its
    arrival rate (requests/s), or its closed loop's clients under ``target_clients``.

    The node counts multiplied are each pool's ``nodes`` (and ``instances`` and the P:D split
    ``roles`` where given) and the remote KV pool's ``nodes`` -- unless ``pool_nodes`` is given:
    then the remote pool is that many nodes, one pool shared by all the units. The study,
    comparison and plan sections are dropped (they name other systems).
    """
    raw = copy.deepcopy(scenario.raw)
    spec = copy.deepcopy(raw["systems"][system])
    pools = list(spec.get("pools", {}).values()) if isinstance(spec.get("pools"), dict) else [spec]
    for pool in pools:
        pool["nodes"] = int(pool.get("nodes", 1)) * units
        if pool.get("instances") is not None:
            pool["instances"] = int(pool["instances"]) * units
        if isinstance(pool.get("roles"), dict):  # a P:D split of one pool keeps its ratio
            pool["roles"] = {role: int(count) * units for role, count in pool["roles"].items()}
    remote = (spec.get("kv_cache") or {}).get("remote")
    if isinstance(remote, dict):
        remote["nodes"] = int(remote.get("nodes", 1)) * units if pool_nodes is None else int(pool_nodes)
    if load_unit(scenario) == "clients":
        changes: dict[str, Any] = {"systems": {system: spec}, "workload.arrival.clients": int(load)}
    else:
        changes = {"systems": {system: spec}, "workload.arrival.rate": float(load)}
    for key in ("plan", "study", "compare"):
        if key in raw:
            changes[key] = None
    return scenario.with_changes(changes)


def probe_scenario(scenario: Scenario, probe: Probe) -> Scenario:
    """The scenario one probe runs: :func:`scaled_scenario`, its duration lengthened where needed
    so that its window holds enough completions per instance to be judged (a light load on many
    instances needs a long window, never a verdict of "too short"). Simulated time costs little
    when it is idle: the work is in the requests.

    A closed loop's completions per client depend on its latencies, unknown before it runs: its
    probe starts with the scenario's duration and :func:`run_probe` lengthens it if needed (as it
    does an open loop's whose requests last too long for the window, :func:`rerun_scenario`)."""
    from kvsim.metrics.steady_state import MIN_COMPLETIONS_PER_INSTANCE
    from kvsim.sim.sizing import size_system

    scaled = scaled_scenario(scenario, probe.system, probe.units, probe.load, probe.pool_nodes)
    if probe.seed is not None:
        scaled = scaled.with_changes({"seed": probe.seed})
    spec = scaled.spec
    if load_unit(scenario) == "clients":
        return scaled
    instances = size_system(spec, probe.system, scaled.catalogs).instances
    window_s = WINDOW_MARGIN * MIN_COMPLETIONS_PER_INSTANCE * instances / probe.load
    # MSER-5 may keep as little as the second half of the run (it searches the first half only)
    needed_s = 2.0 * window_s if spec.warmup_auto else spec.warmup + window_s
    if needed_s <= spec.duration:
        return scaled
    return scaled.with_changes({"duration": float(math.ceil(needed_s))})


def run_probe(scenario: Scenario, probe: Probe, objectives: Sequence[Objective]) -> ProbeOutcome:
    """Run one probe and judge it against ``objectives`` (a module-level function, so a process
    pool can run it).

    A run flagged ``too_short`` or ``warmup_short`` whose verdict rests on the flag is run again
    (:func:`rerun_scenario`), at most :data:`RESOLVE_TRIES` times. ``detail`` keeps the flags of
    the run judged, ``reruns`` (how many re-runs it took) and, for a probe that met the SLO while a
    flag remained after the budget, ``unconfirmed`` (why, in words)."""
    from kvsim.sim.run import run_scenario

    started = time.perf_counter()
    by_clients = load_unit(scenario) == "clients"
    probed = probe_scenario(scenario, probe)
    reruns = 0
    while True:
        stop = None if probed.spec.warmup_auto else certain_failure(objectives, probed.spec.warmup)
        runs = run_scenario(probed, stop=stop).runs_of(probe.system, 0)  # one per replication
        summary = replicas_summary([run.summary for run in runs])
        again = rerun_scenario(probed, summary, objectives, by_clients) if reruns < RESOLVE_TRIES else None
        if again is None:
            break
        probed, reruns = again, reruns + 1
    meets, reason = slo_verdict(summary, objectives)
    stopped = summary.get("stopped_early")
    if stopped:
        meets, reason = False, stopped["reason"]
    left = [flag for flag in summary.get("flags") or () if flag in RESOLVE_FLAGS]
    unconfirmed = ""
    if left and not untrusted(summary):
        if not meets and slo_verdict({**summary, "flags": []}, objectives)[0]:
            meets, reason = True, ""  # met every objective: only the flag stood in the way
        if meets:
            unconfirmed = (f"still flagged {', '.join(left)} after {reruns} longer run{'' if reruns == 1 else 's'} "
                           f"({probed.spec.duration - probed.spec.warmup:g} s window)")
    detail = {key: summary.get(key) for key in ("ttft_s", "tpot_s", "e2e_s", "flags", "requests_per_s",
                                                "output_tokens_per_s", "requests_unfinished")}
    if stopped:
        detail["stopped_at_s"] = float(stopped["at_s"])
    detail["duration_s"] = probed.spec.duration
    detail["warmup_s"] = probed.spec.warmup
    detail["reruns"] = reruns
    if unconfirmed:
        detail["unconfirmed"] = unconfirmed
    if len(runs) > 1:
        detail["replicas"] = len(runs)
    detail["wall_s"] = time.perf_counter() - started  # what the probe cost (progress lines; not in plan.json)
    return ProbeOutcome(probe.load, meets, reason, detail)


def replicas_summary(summaries: Sequence[dict]) -> dict:
    """What a probe is judged on: with one replica its summary; with several (``replications:``),
    each latency statistic and rate averaged over them, and every flag any of them raised (one
    replica that is not steady state makes the probe not steady state)."""
    if len(summaries) == 1:
        return summaries[0]
    combined: dict = {}
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        stats = [s.get(key) or {} for s in summaries]
        combined[key] = {stat: (None if any(x.get(stat) is None for x in stats)
                                else sum(x[stat] for x in stats) / len(stats)) for stat in STATISTICS}
    for key in ("requests_per_s", "output_tokens_per_s", "requests_unfinished"):
        values = [s.get(key) for s in summaries]
        combined[key] = None if any(v is None for v in values) else sum(values) / len(values)
    combined["flags"] = list(dict.fromkeys(flag for s in summaries for flag in s.get("flags") or ()))
    stopped = [s["stopped_early"] for s in summaries if s.get("stopped_early")]
    if stopped:  # one replica certain to fail fails the probe
        combined["stopped_early"] = stopped[0]
    return combined


MapProbes = Callable[[Callable[[Probe], ProbeOutcome], Sequence[Probe]], Iterable[ProbeOutcome]]


def _serial(function: Callable[[Probe], ProbeOutcome], probes: Sequence[Probe]) -> Iterable[ProbeOutcome]:
    return map(function, probes)


def plan(scenario: Scenario, map_probes: MapProbes | None = None, parallel: int = 1,
         start_load: float | None = None, on_probe: Callable[[Probe, ProbeOutcome], None] | None = None,
         concurrent: int = 1, unit_cost: Callable[[str], float | None] | None = None) -> PlanResult:
    """Run the plan of ``scenario`` (its ``plan:`` section).

    Parameters
    ----------
    scenario : Scenario
        A validated scenario with a ``plan:`` section.
    map_probes : callable, optional
        ``map_probes(function, probes)``: ``function`` applied to every probe (in any order or in
        parallel), results in order; called from ``concurrent`` threads at once. Default: one
        after another, in this process.
    parallel : int
        Probes each candidate's load search runs per round.
    start_load : float, optional
        First load the capacity search probes, requests/s or clients (default: each candidate's
        closed-form first guess, :func:`kvsim.plan.first_guess.capacity_guess`, or where there is
        none a quarter of the smallest target, at least one client; the search brackets from there).
    on_probe : callable, optional
        Called with each probe and its outcome as they finish (progress; from any thread).
    concurrent : int
        Candidates planned at once, each in its own thread, so a pool of workers behind
        ``map_probes`` stays busy while one candidate waits for its next probe. Each candidate's
        probes follow from its own outcomes only, so the units per target do not depend on it.
    unit_cost : callable, optional
        Cost per hour of one unit of a candidate (None: unknown), to choose the candidates whose
        unit counts are checked under other seeds (``plan.seed_checks``): the cheapest and the
        runner-up at each target. Without it, every candidate that serves a target is checked.
    Returns
    -------
    PlanResult
    """
    spec = scenario.spec.plan
    if spec is None:
        raise ValueError(f"{scenario.name}: the scenario has no plan: section")
    objectives = objectives_from_slo(scenario.spec.slo)
    mapper = map_probes or _serial
    runner = _Runner(scenario, objectives)
    lock = threading.Lock()
    targets = spec.loads
    clients = spec.by_clients
    default_start = max(1, math.floor(targets[0] / 4)) if clients else targets[0] / 4

    systems = spec.chosen(list(scenario.spec.systems))

    def plan_one(system: str) -> tuple[CandidatePlan, list[tuple[Probe, ProbeOutcome]]]:
        from kvsim.plan.first_guess import capacity_guess

        start = start_load or _round_load(capacity_guess(scenario, system)) or default_start
        done: dict[Probe, ProbeOutcome] = {}
        ran: list[tuple[Probe, ProbeOutcome]] = []

        def judge(probes: Sequence[Probe]) -> list[ProbeOutcome]:
            todo = [p for p in dict.fromkeys(probes) if p not in done]
            if todo:
                for probe, outcome in zip(todo, mapper(runner, todo)):
                    done[probe] = outcome
                    ran.append((probe, outcome))
                    if on_probe is not None:
                        with lock:
                            on_probe(probe, outcome)
            return [done[p] for p in probes]

        if spec.shared_pools and system in spec.shared_pools:  # units x pool nodes: kvsim.plan.pool_axis
            from kvsim.plan.pool_axis import plan_pool_axis

            return plan_pool_axis(scenario, system, start, judge, parallel), ran
        return unit_search(scenario, system, start, judge, parallel), ran

    if concurrent > 1 and len(systems) > 1:
        with ThreadPoolExecutor(max_workers=min(concurrent, len(systems))) as threads:
            planned = list(threads.map(plan_one, systems))
    else:
        planned = [plan_one(system) for system in systems]
    found = [candidate for candidate, _ in planned]
    ran = [item for _, items in planned for item in items]
    if spec.seed_checks:
        ran += _check_seeds(scenario, found, mapper, runner, unit_cost, on_probe)
    return PlanResult(scenario, objectives, found, ran)


def _check_seeds(scenario: Scenario, found: list[CandidatePlan], mapper: MapProbes, runner: Callable,
                 unit_cost: Callable[[str], float | None] | None,
                 on_probe: Callable[[Probe, ProbeOutcome], None] | None) -> list[tuple[Probe, ProbeOutcome]]:
    """Run each deciding unit count, and one fewer, under ``plan.seed_checks`` other seeds (the
    same for every candidate), for the cheapest candidate and the runner-up at each target (every
    candidate that serves it without ``unit_cost``); record :func:`seed_check` on each."""
    spec = scenario.spec.plan
    assert spec is not None
    base = scenario.spec.seed
    seeds = [base + k for k in range(1, spec.seed_checks + 1)]
    probes: list[Probe] = []
    checked: list[tuple[CandidatePlan, float, int]] = []
    for target in spec.loads:
        serving = [c for c in found if c.units_for.get(target) is not None]
        if unit_cost is not None:
            priced = [(_target_cost(scenario, c, target, unit_cost), c) for c in serving]
            serving = [c for cost, c in sorted(((cost, c) for cost, c in priced if cost is not None),
                                               key=lambda pair: (pair[0], found.index(pair[1])))][:2]
        for candidate in serving:
            n = candidate.units_for[target]
            assert n is not None
            checked.append((candidate, target, n))
            pool = candidate.pool_nodes_for.get(target)  # a shared pool keeps its size
            for units in (n, n - 1) if n > spec.units.min else (n,):
                probes += [Probe(candidate.system, units, target, seed, pool) for seed in seeds]
    if not probes:
        return []
    outcomes = list(mapper(runner, probes))
    if on_probe is not None:
        for probe, outcome in zip(probes, outcomes):
            on_probe(probe, outcome)
    by_probe = dict(zip(probes, outcomes))
    for candidate, target, n in checked:
        candidate.seed_checks[target] = seed_check(n, spec.units.min, base, seeds, by_probe, candidate.system, target,
                                                   candidate.pool_nodes_for.get(target))
    return list(zip(probes, outcomes))


def _target_cost(scenario: Scenario, candidate: CandidatePlan, target: float,
                 unit_cost: Callable[[str], float | None]) -> float | None:
    """Cost per hour of a candidate at a target it serves: its units times a unit's cost, or for a
    shared pool (units x pool nodes) the pair's (:mod:`kvsim.plan.pool_axis`)."""
    n = candidate.units_for[target]
    if candidate.pool_axis:
        from kvsim.plan.pool_axis import axis_costs

        return axis_costs(scenario, candidate.system).total(n, candidate.pool_nodes_for[target])
    cost = unit_cost(candidate.system)
    return None if cost is None or n is None else cost * n


def seed_check(units: int, fewest: int, base_seed: int, seeds: Sequence[int], outcomes: dict[Probe, ProbeOutcome],
               system: str, target: float, pool_nodes: int | None = None) -> dict[str, Any]:
    """What the other seeds say about a unit count found under ``base_seed`` (with a shared pool
    of ``pool_nodes`` nodes, where the candidate has one).

    Returns
    -------
    dict
        ``seeds`` (every seed, the plan's first), ``meets`` (per seed, whether ``units`` met the
        SLO: True under the plan's own seed, which found it), ``fewer_meets`` (per seed, whether
        ``units - 1`` did: False under the plan's seed; None if ``units`` is the fewest allowed),
        ``units_low`` / ``units_high`` (the fewest and most units the seeds call for: ``units - 1``
        if any seed met with it, ``units + 1`` if any failed with ``units``, else ``units``), and
        ``agree`` (every seed gives ``units``).
    """
    meets = [True] + [outcomes[Probe(system, units, target, seed, pool_nodes)].meets for seed in seeds]
    fewer = None if units <= fewest else \
        [False] + [outcomes[Probe(system, units - 1, target, seed, pool_nodes)].meets for seed in seeds]
    low = units - 1 if fewer is not None and any(fewer) else units
    high = units if all(meets) else units + 1
    return {"seeds": [base_seed, *seeds], "meets": meets, "fewer_meets": fewer, "units_low": low,
            "units_high": high, "agree": low == high == units}


def _round_load(load: float | None) -> float | None:
    """A first guess rounded to three significant figures (probe loads that read as numbers)."""
    if load is None or not load > 0:
        return None
    return float(f"{load:.3g}")


class _Runner:
    """``run_probe`` bound to a scenario and objectives, picklable for a process pool."""

    def __init__(self, scenario: Scenario, objectives: Sequence[Objective]):
        self.scenario = scenario
        self.objectives = list(objectives)

    def __call__(self, probe: Probe) -> ProbeOutcome:
        return run_probe(self.scenario, probe, self.objectives)


def unit_search(scenario: Scenario, system: str, start: float, judge: Callable[[Sequence[Probe]], list[ProbeOutcome]],
                parallel: int | Callable[[], int], floor: float | None = None) -> CandidatePlan:
    """One candidate's search: the most load one unit sustains (from ``start``, down to ``floor``,
    default ``start / 64``), then the fewest units per target load; ``judge`` runs the probes."""
    spec = scenario.spec.plan
    unit = load_unit(scenario)
    targets = spec.loads
    search = find_max_load(lambda loads: judge([Probe(system, 1, x) for x in loads]), start,
                           rel_tol=spec.rel_tol, parallel=parallel, floor=start / 64 if floor is None else floor,
                           ceiling=max(targets[-1], start) * 2, integer=spec.by_clients, unit=unit)
    found = CandidatePlan(system, search)
    for target in targets:
        found.units_for[target], found.notes[target] = _fewest_units(system, target, search, spec.units, judge, unit)
    return found


def _fewest_units(system: str, target: float, capacity: LoadSearch | None, units: Any,
                  judge: Callable[[Sequence[Probe]], list[ProbeOutcome]], unit: str,
                  start: int | None = None) -> tuple[int | None, str]:
    """The fewest units of ``system`` that serve the ``target`` load within the SLO.

    Starts at the linear-scaling guess (or at ``start``, a count known to be close: the
    sensitivity probes start from the plan's own) and gallops (steps of 1, 2, 4, ... units) down
    while it still meets the SLO, or up until it does, then bisects the last step: a good guess
    costs two probes, a bad one a few more than log2 of its error.
    """
    per_unit = capacity.max_load if capacity is not None else None
    guess = start if start is not None else math.ceil(target / per_unit) if per_unit else units.max
    n = min(max(guess, units.min), units.max)

    def meets(count: int) -> bool:
        return judge([Probe(system, count, target)])[0].meets

    if meets(n):
        ok, step = n, 1
        while ok > units.min:
            trial = max(units.min, ok - step)
            if not meets(trial):
                fail = trial
                break
            ok, step = trial, step * 2
        else:
            return ok, f"{_units(ok)} met the SLO (the fewest allowed)"
    else:
        fail, step = n, 1
        while True:
            if fail >= units.max:
                return None, f"none up to the {units.max} units allowed meets the SLO at {target:g} {unit}"
            trial = min(units.max, fail + step)
            if meets(trial):
                ok = trial
                break
            fail, step = trial, step * 2
    while ok - fail > 1:  # fail < ok: the fewest that meets lies in (fail, ok]
        mid = (ok + fail) // 2
        if meets(mid):
            ok = mid
        else:
            fail = mid
    return ok, f"{_units(ok)} met the SLO; {_units(fail)} did not"


def _units(n: int) -> str:
    return f"{n} unit" if n == 1 else f"{n} units"
