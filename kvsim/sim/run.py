"""Run a scenario: one SimPy environment and one live System per (sweep point, system).

Every system of a point serves the same request stream: open-loop requests are drawn once per
point from the scenario seed; closed-loop clients draw from per-client streams.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from kvsim.metrics.cost import cost_summary
from kvsim.metrics.records import RequestRecords
from kvsim.metrics.steady_state import mser5_warmup_s, request_ends_s
from kvsim.rng import RandomStreams, replica_seed
from kvsim.scenario.load import Scenario, ScenarioPoint
from kvsim.scenario.problems import PointProblems
from kvsim.scenario.schema import ScenarioSpec
from kvsim.sim.build import build_system
from kvsim.sim.collect import collect
from kvsim.sim.layout_search import choose_layout, search_space, searches_layout
from kvsim.sim.result import RunResult, SystemRun
from kvsim.sim.sizing import SizingError, SystemSizing, size_system, too_long, too_long_note
from kvsim.sim.watchdog import Watchdog, run_until, stall_seconds
from kvsim.workload import ClientStream, RequestArrays, open_loop_requests
from kvsim.workload.session import sessions
from kvsim.yaml_io import SpecError

__all__ = ["check_scenario", "run_scenario", "run_point", "point_seed", "simulate_system", "RunProgress"]


def check_scenario(scenario: Scenario) -> dict[tuple[int, str], SystemSizing]:
    """Size every system at every sweep point; raise :class:`SpecError` naming each that cannot run."""
    sizings: dict[tuple[int, str], SystemSizing] = {}
    problems = PointProblems(len(scenario.points), scenario.problem)
    for point in scenario.points:
        for name in point.spec.systems:
            try:
                if searches_layout(point.spec, name):
                    search_space(point.spec, name, scenario.catalogs_for(point))  # sized when the layout is chosen
                    continue
                sizings[(point.index, name)] = size_system(point.spec, name, scenario.catalogs_for(point))
            except SizingError as exc:
                problems.add(exc.path, exc.message, point.params)  # once, naming the points it holds at
    if problems:
        raise SpecError(problems.lines())
    return sizings


@dataclass
class RunProgress:
    """Advances a tqdm bar (if any) by simulated seconds as runs go."""

    bar: Any = None

    def advance(self, simulated_s: float) -> None:
        if self.bar is not None:
            self.bar.update(simulated_s)


StopCheck = Callable[[Any, float, int], "str | None"]
"""``stop(records, now_s, window_arrivals)``: read between slices of a run; a reason (text) stops it
early (a plan's probe whose verdict is already certain, :func:`kvsim.plan.planner.certain_failure`)."""


def run_scenario(scenario: Scenario, seed: int | None = None, progress: bool = False,
                 stop: StopCheck | None = None) -> RunResult:
    """Run every system at every sweep point (and every replication), in this process.

    Parameters
    ----------
    scenario : Scenario
    seed : int, optional
        Overrides the root seed of every point (a swept ``seed`` otherwise gives each point its own).
    progress : bool
        Show a progress bar (simulated seconds) on standard error.
    stop : callable, optional
        :data:`StopCheck`, asked between slices of each open-loop run with a fixed warm-up; the
        reason it gives stops the run and is kept as the summary's ``stopped_early``.

    See :mod:`kvsim.plan` to run the points in parallel processes or on a Dask cluster and keep
    finished points on disk: it runs the same :func:`run_point` per task, so results are identical.
    """
    sizings = check_scenario(scenario)
    root_seed = scenario.spec.seed if seed is None else checked_seed(seed)
    runs: list[SystemRun] = []
    total = sum(p.spec.duration * len(p.spec.systems) * p.spec.replications * (2 if p.spec.warmup_auto else 1)
                for p in scenario.points)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=round(total, 3), unit="sim-s", desc=scenario.name, leave=False, dynamic_ncols=True)
    tracker = RunProgress(bar)
    try:
        for point in scenario.points:
            for replica in range(point.spec.replications):
                runs += run_point(scenario, point, seed, replica, sizings, tracker, stop=stop)
    finally:
        if bar is not None:
            bar.close()
    return RunResult.from_runs(scenario, root_seed, runs)


def checked_seed(seed: object) -> int:
    """``seed`` as a root seed: a non-negative integer (``1.5`` or ``-1`` is refused, never rounded)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return int(seed)


def point_seed(point: ScenarioPoint, seed: int | None = None, replica: int = 0) -> int:
    """Root seed of one run of ``point``: the point's seed (or the override ``seed``), then
    replica ``replica``'s (:func:`kvsim.rng.replica_seed`; replica 0 keeps it)."""
    return replica_seed(point.spec.seed if seed is None else checked_seed(seed), replica)


def run_point(scenario: Scenario, point: ScenarioPoint, seed: int | None = None, replica: int = 0,
              sizings: dict[tuple[int, str], SystemSizing] | None = None,
              tracker: RunProgress | None = None, stop: StopCheck | None = None) -> list[SystemRun]:
    """Every system of one sweep point, replica ``replica``: one task of a sweep.

    The systems share one request stream drawn from the run's seed (:func:`point_seed`), so a
    point is the unit of work that can run anywhere. ``sizings`` (from :func:`check_scenario`)
    saves sizing again; without it the point's systems are sized here.
    """
    if sizings is None:
        sizings = {}
        for name in point.spec.systems:
            if not searches_layout(point.spec, name):
                sizings[(point.index, name)] = size_system(point.spec, name, scenario.catalogs_for(point))
    tracker = tracker if tracker is not None else RunProgress()
    run_seed = point_seed(point, seed, replica)
    streams = RandomStreams(run_seed)
    requests = None
    workload = point.spec.workload
    if not workload.closed_loop and not workload.multi_turn:
        try:
            requests = open_loop_requests(workload, point.spec.duration, streams, base_dir=scenario.base_dir)
        except (OSError, ValueError) as exc:
            raise SpecError([scenario.problem(("workload", "arrival"), str(exc))]) from None
    runs = []
    for name in point.spec.systems:
        if tracker.bar is not None:
            tracker.bar.set_postfix_str(f"{name} {_label(point)}".strip())
        if (point.index, name) not in sizings:  # layout: best
            run = _run_best_layout(scenario, point, name, requests, streams, tracker)
        else:
            run = simulate_system(point, name, sizings[(point.index, name)], requests, streams, tracker,
                                  watchdog_s=scenario.watchdog_s, stop=stop)
        run.replica, run.seed = replica, run_seed
        runs.append(run)
    return runs


def _run_best_layout(scenario: Scenario, point: ScenarioPoint, name: str, requests: RequestArrays | None,
                     streams: RandomStreams, tracker: RunProgress) -> SystemRun:
    """Search the layouts of system ``name`` (see :mod:`kvsim.sim.layout_search`) and return the
    winner's full run."""
    arrivals: dict[float, RequestArrays | None] = {point.spec.duration: requests}
    spent_s = [0.0]  # every pilot's and the winner's own wall time: what the point cost

    def simulate(spec: ScenarioSpec, sizing: SystemSizing) -> SystemRun:
        if requests is not None and spec.duration not in arrivals:
            arrivals[spec.duration] = open_loop_requests(spec.workload, spec.duration, streams,
                                                         base_dir=scenario.base_dir)
        simulated = simulate_system(ScenarioPoint(point.index, point.params, spec), name, sizing,
                                    arrivals.get(spec.duration), streams, watchdog_s=scenario.watchdog_s)
        spent_s[0] += simulated.wall_s
        return simulated

    choice, run, scores = choose_layout(point.spec, name, scenario.catalogs_for(point), simulate)
    run.wall_s = spent_s[0]  # the progress line's "done in" and the cost model's rates count the pilots too
    tracker.advance(point.spec.duration)
    run.summary["layout_search"] = {"chosen": choice.label(), **scores}
    return run


def _label(point: ScenarioPoint) -> str:
    return " ".join(f"{k.split('.')[-1]}={v}" for k, v in point.params.items())


def simulate_system(
    point: ScenarioPoint,
    name: str,
    sizing: SystemSizing,
    requests: RequestArrays | None,
    streams: RandomStreams,
    progress: RunProgress | None = None,
    watchdog_s: float | None = None,
    stop: StopCheck | None = None,
) -> SystemRun:
    """Simulate system ``name`` at one sweep point and summarise it.

    ``watchdog_s`` (default ``KVSIM_WATCHDOG_S`` or 60 s; 0: off) is how long the run may go
    without progress before :mod:`kvsim.sim.watchdog` stops it, raising ``WatchdogError``.

    With ``warmup: auto`` the run is simulated twice: first with the window open from 0, whose
    records give MSER-5's truncation (:func:`~kvsim.metrics.steady_state.mser5_warmup_s`); then
    with that warm-up. The warm-up only places the window (the counters, levels and flows that
    measure it), never what the system does, so both passes serve the same requests the same way
    and the second is exactly a run with that fixed warm-up.
    """
    if not point.spec.warmup_auto:
        return _simulate(point, name, sizing, requests, streams, progress, watchdog_s, stop)
    pilot = _simulate(point, name, sizing, requests, streams, progress, watchdog_s)
    records = pilot.records
    warmup_s = mser5_warmup_s(records.column("arrival_s"), request_ends_s(records), point.spec.duration) \
        if records.n else 0.0
    if warmup_s > 0.0:
        measured = ScenarioPoint(point.index, point.params, point.spec.model_copy(update={"warmup": warmup_s}))
        run = _simulate(measured, name, sizing, requests, streams, progress, watchdog_s)
        run.wall_s += pilot.wall_s
    else:  # MSER-5 keeps the whole run: the first pass was already measured from 0
        run = pilot
        if progress is not None:
            progress.advance(point.spec.duration)
    run.summary["window"]["warmup"] = "mser5"
    return run


def _simulate(point: ScenarioPoint, name: str, sizing: SystemSizing, requests: RequestArrays | None,
              streams: RandomStreams, progress: RunProgress | None, watchdog_s: float | None,
              stop: StopCheck | None = None) -> SystemRun:
    spec: ScenarioSpec = point.spec
    started = time.perf_counter()
    env = simpy.Environment()
    duration = spec.duration
    records = RequestRecords(len(requests) if requests is not None else 4096)
    block_tokens = requests.block_tokens if requests is not None and requests.block_tokens else \
        spec.workload.block_tokens
    system = build_system(env, spec, sizing, records, streams, block_tokens)
    front = system.front
    frontend = system.kernels.frontend  # the workload drivers of the run's backend (the open loop is a kernel)
    rejected = None
    if requests is not None:
        rejected = too_long(sizing, requests.input_tokens, requests.output_tokens)
        rejected = rejected if rejected.any() else None
        env.process(frontend.open_loop(env, front, requests, rejected))
    elif spec.workload.multi_turn:
        env.process(frontend.session_starts(env, front, sessions(spec.workload, duration, streams), duration))
    else:
        for client in range(spec.workload.arrival.clients):
            env.process(frontend.client(env, front, ClientStream(spec.workload, client, streams), duration))
    system.start_sampling(duration / 200.0, duration)
    stall_s = stall_seconds(watchdog_s)
    label = f"system {name!r}" + (f" at {_label(point)}" if point.params else "")
    watchdog = Watchdog(stall_s, len(system.instances), front, label) if stall_s > 0 else None
    slices = 50
    window_arrivals = 0
    if stop is not None and requests is not None:  # the window's arrivals are known before they come
        arriving = (requests.arrival_s >= spec.warmup) & (requests.arrival_s <= duration)
        window_arrivals = int(np.count_nonzero(arriving & ~rejected if rejected is not None else arriving))
    else:
        stop = None
    stopped = None
    for k in range(1, slices + 1):
        run_until(env, duration * k / slices, watchdog)
        if progress is not None:
            progress.advance(duration / slices)
        if stop is not None and (stopped := stop(records, env.now, window_arrivals)):
            break
    # Drain: no more arrivals; let every request in the system finish (bounded).
    drain_end = duration + spec.drain_limit_s
    while stopped is None and system.in_system.value > 0 and env.now < drain_end:
        run_until(env, min(env.now + duration / slices, drain_end), watchdog)
        if stop is not None:
            stopped = stop(records, env.now, window_arrivals)
    run = collect(system, point, time.perf_counter() - started)
    if stopped:
        run.summary["stopped_early"] = {"at_s": env.now, "reason": stopped}
    run.summary["cost"] = cost_summary(sizing, run.summary, spec.cost)
    if rejected is not None:
        run.summary["rejected_note"] = too_long_note(sizing, rejected, requests.input_tokens, requests.output_tokens,
                                                     requests.arrival_s)
    return run
