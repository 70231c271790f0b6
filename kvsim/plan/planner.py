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
(common random numbers), and a probe flagged unstable or too short does not meet the SLO
(:mod:`kvsim.plan.slo`). With ``replications: N`` a probe runs N seeds and is judged on their
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

from kvsim.plan.search import LoadSearch, ProbeOutcome, find_max_load
from kvsim.plan.slo import STATISTICS, Objective, objectives_from_slo, slo_verdict
from kvsim.scenario.load import Scenario

__all__ = ["Probe", "CandidatePlan", "PlanResult", "plan", "scaled_scenario", "probe_scenario", "run_probe",
           "load_unit"]


@dataclass(frozen=True)
class Probe:
    """One run a plan needs: ``units`` of candidate ``system`` at ``load`` (requests/s, or clients
    for a closed loop)."""

    system: str
    units: int
    load: float


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
    """

    system: str
    capacity: LoadSearch
    units_for: dict[float, int | None] = field(default_factory=dict)
    notes: dict[float, str] = field(default_factory=dict)


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


def scaled_scenario(scenario: Scenario, system: str, units: int, load: float) -> Scenario:
    """``scenario`` with only ``system``, every node count of it times ``units``, at ``load``: its
    arrival rate (requests/s), or its closed loop's clients under ``target_clients``.

    The node counts multiplied are each pool's ``nodes`` (and ``instances`` and the P:D split
    ``roles`` where given) and the remote KV pool's ``nodes``; the study, comparison and plan sections are dropped (they name
    other systems).
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
        remote["nodes"] = int(remote.get("nodes", 1)) * units
    if load_unit(scenario) == "clients":
        changes: dict[str, Any] = {"systems": {system: spec}, "workload.arrival.clients": int(load)}
    else:
        changes = {"systems": {system: spec}, "workload.arrival.rate": float(load)}
    for key in ("plan", "study", "compare"):
        if key in raw:
            changes[key] = None
    return scenario.with_changes(changes)


WINDOW_MARGIN = 1.5
"""A probe's window holds this many times the completions per instance (per client, for a closed
loop) below which a run is flagged too short (:mod:`kvsim.metrics.steady_state`)."""
LENGTHEN_TRIES = 3
"""Times a closed-loop probe flagged too short is run again over a longer window."""
LENGTHEN_MAX = 8.0
"""Most a closed-loop probe's window grows in one try."""


def probe_scenario(scenario: Scenario, probe: Probe) -> Scenario:
    """The scenario one probe runs: :func:`scaled_scenario`, its duration lengthened where needed
    so that its window holds enough completions per instance to be judged (a light load on many
    instances needs a long window, never a verdict of "too short"). Simulated time costs little
    when it is idle: the work is in the requests.

    A closed loop's completions per client depend on its latencies, unknown before it runs: its
    probe starts with the scenario's duration and :func:`run_probe` lengthens it if needed."""
    from kvsim.metrics.steady_state import MIN_COMPLETIONS_PER_INSTANCE
    from kvsim.sim.sizing import size_system

    scaled = scaled_scenario(scenario, probe.system, probe.units, probe.load)
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


def _longer(scenario: Scenario, summary: dict, objectives: Sequence[Objective]) -> Scenario | None:
    """A closed-loop probe's scenario over a longer window, if its run was flagged ``too_short``
    while its latencies met the SLO (a longer window could change the verdict; a run that failed
    the SLO on latency fails it either way). None if it need not or cannot be lengthened."""
    from kvsim.metrics.steady_state import LATENCY_SHARE, MIN_COMPLETIONS_PER_CLIENT

    if "too_short" not in (summary.get("flags") or ()) or "unstable" in summary["flags"]:
        return None
    if not slo_verdict({**summary, "flags": []}, objectives)[0]:
        return None
    spec = scenario.spec
    window_s = spec.duration - spec.warmup
    state = summary.get("steady_state") or {}
    per_client = state.get("completions_per_client") or 0.0
    share = state.get("e2e_p50_window_share")
    factor = max(WINDOW_MARGIN * MIN_COMPLETIONS_PER_CLIENT / max(per_client, 0.5),
                 WINDOW_MARGIN * share / LATENCY_SHARE if share else 1.0)
    factor = min(LENGTHEN_MAX, max(2.0, factor))
    start_s = 0.0 if spec.warmup_auto else spec.warmup
    return scenario.with_changes({"duration": float(math.ceil(start_s + factor * window_s))})


def run_probe(scenario: Scenario, probe: Probe, objectives: Sequence[Objective]) -> ProbeOutcome:
    """Run one probe and judge it against ``objectives`` (a module-level function, so a process
    pool can run it)."""
    from kvsim.sim.run import run_scenario

    started = time.perf_counter()
    probed = probe_scenario(scenario, probe)
    for _ in range(LENGTHEN_TRIES + 1):
        runs = run_scenario(probed).runs_of(probe.system, 0)  # one per replication
        summary = replicas_summary([run.summary for run in runs])
        longer = _longer(probed, summary, objectives) if load_unit(scenario) == "clients" else None
        if longer is None:
            break
        probed = longer
    meets, reason = slo_verdict(summary, objectives)
    detail = {key: summary.get(key) for key in ("ttft_s", "tpot_s", "e2e_s", "flags", "requests_per_s",
                                                "output_tokens_per_s", "requests_unfinished")}
    detail["duration_s"] = probed.spec.duration
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
    return combined


MapProbes = Callable[[Callable[[Probe], ProbeOutcome], Sequence[Probe]], Iterable[ProbeOutcome]]


def _serial(function: Callable[[Probe], ProbeOutcome], probes: Sequence[Probe]) -> Iterable[ProbeOutcome]:
    return map(function, probes)


def plan(scenario: Scenario, map_probes: MapProbes | None = None, parallel: int = 1,
         start_load: float | None = None, on_probe: Callable[[Probe, ProbeOutcome], None] | None = None,
         concurrent: int = 1) -> PlanResult:
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
        First load the capacity search probes, requests/s or clients (default: a quarter of the
        smallest target, at least one client; the search brackets from there).
    on_probe : callable, optional
        Called with each probe and its outcome as they finish (progress; from any thread).
    concurrent : int
        Candidates planned at once, each in its own thread, so a pool of workers behind
        ``map_probes`` stays busy while one candidate waits for its next probe. Each candidate's
        probes follow from its own outcomes only, so the units per target do not depend on it.
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
    start = start_load or (max(1, math.floor(targets[0] / 4)) if clients else targets[0] / 4)

    systems = spec.chosen(list(scenario.spec.systems))

    def plan_one(system: str) -> tuple[CandidatePlan, list[tuple[Probe, ProbeOutcome]]]:
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

        search = find_max_load(lambda loads: judge([Probe(system, 1, x) for x in loads]), start,
                               rel_tol=spec.rel_tol, parallel=parallel, floor=start / 64,
                               ceiling=max(targets[-1], start) * 2, integer=clients, unit=load_unit(scenario))
        found = CandidatePlan(system, search)
        for target in targets:
            found.units_for[target], found.notes[target] = _fewest_units(system, target, search, spec.units, judge,
                                                                         load_unit(scenario))
        return found, ran

    if concurrent > 1 and len(systems) > 1:
        with ThreadPoolExecutor(max_workers=min(concurrent, len(systems))) as threads:
            planned = list(threads.map(plan_one, systems))
    else:
        planned = [plan_one(system) for system in systems]
    return PlanResult(scenario, objectives, [found for found, _ in planned],
                      [item for _, ran in planned for item in ran])


class _Runner:
    """``run_probe`` bound to a scenario and objectives, picklable for a process pool."""

    def __init__(self, scenario: Scenario, objectives: Sequence[Objective]):
        self.scenario = scenario
        self.objectives = list(objectives)

    def __call__(self, probe: Probe) -> ProbeOutcome:
        return run_probe(self.scenario, probe, self.objectives)


def _fewest_units(system: str, target: float, capacity: LoadSearch, units: Any,
                  judge: Callable[[Sequence[Probe]], list[ProbeOutcome]], unit: str) -> tuple[int | None, str]:
    """The fewest units of ``system`` that serve the ``target`` load within the SLO.

    Starts at the linear-scaling guess and gallops (steps of 1, 2, 4, ... units) down while it
    still meets the SLO, or up until it does, then bisects the last step: a good guess costs two
    probes, a bad one a few more than log2 of its error.
    """
    per_unit = capacity.max_load
    guess = math.ceil(target / per_unit) if per_unit else units.max
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
