"""Build live objects from specs and run them: one SimPy environment per (sweep point, system).

Every system of a point serves the same request stream: open-loop requests are drawn once per
point from the scenario seed; closed-loop clients draw from per-client streams.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import simpy

from kvsim.kv.block_pool import BlockPool
from kvsim.metrics.levels import TimeWeightedLevel
from kvsim.metrics.records import RequestRecords
from kvsim.metrics.summary import summarize
from kvsim.rng import RandomStreams
from kvsim.scenario.load import Scenario, ScenarioPoint
from kvsim.scenario.schema import ScenarioSpec
from kvsim.serving.instance import Instance, SystemCounters
from kvsim.serving.router import ROUTERS
from kvsim.serving.scheduler import Sequence
from kvsim.metrics.cache_summary import bound_resource, cache_summary
from kvsim.serving.offload import TIERS
from kvsim.sim.cache_build import build_instance_cache, build_system_cache, warm_prompts
from kvsim.sim.result import RunResult, SystemRun
from kvsim.sim.sizing import SizingError, SystemSizing, size_system
from kvsim.workload import ClientStream, RequestArrays, open_loop_requests
from kvsim.workload.session import sessions
from kvsim.yaml_io import SpecError

__all__ = ["check_scenario", "run_scenario", "simulate_system"]


def check_scenario(scenario: Scenario) -> dict[tuple[int, str], SystemSizing]:
    """Size every system at every sweep point; raise :class:`SpecError` naming each that cannot run."""
    sizings: dict[tuple[int, str], SystemSizing] = {}
    problems: list[str] = []
    for point in scenario.points:
        for name in point.spec.systems:
            try:
                sizings[(point.index, name)] = size_system(point.spec, name, scenario.catalogs)
            except SizingError as exc:
                message = exc.message
                if point.params:
                    label = ", ".join(f"{k}={v}" for k, v in point.params.items())
                    message = f"at sweep point [{label}]: {message}"
                problem = scenario.problem(exc.path, message)
                if problem not in problems:
                    problems.append(problem)
    if problems:
        raise SpecError(problems)
    return sizings


@dataclass
class _Progress:
    bar: Any = None

    def advance(self, simulated_s: float) -> None:
        if self.bar is not None:
            self.bar.update(simulated_s)


def run_scenario(scenario: Scenario, seed: int | None = None, progress: bool = False) -> RunResult:
    """Run every system at every sweep point.

    Parameters
    ----------
    scenario : Scenario
    seed : int, optional
        Overrides the root seed of every point (a swept ``seed`` otherwise gives each point its own).
    progress : bool
        Show a progress bar (simulated seconds) on standard error.
    """
    sizings = check_scenario(scenario)
    root_seed = scenario.spec.seed if seed is None else int(seed)
    runs: list[SystemRun] = []
    total = sum(p.spec.duration * len(p.spec.systems) for p in scenario.points)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=round(total, 3), unit="sim-s", desc=scenario.name, leave=False, dynamic_ncols=True)
    tracker = _Progress(bar)
    try:
        for point in scenario.points:
            streams = RandomStreams(point.spec.seed if seed is None else int(seed))
            requests = None
            workload = point.spec.workload
            if not workload.closed_loop and not workload.multi_turn:
                try:
                    requests = open_loop_requests(workload, point.spec.duration, streams,
                                                  base_dir=scenario.base_dir)
                except (OSError, ValueError) as exc:
                    raise SpecError([scenario.problem(("workload", "arrival"), str(exc))]) from None
            for name in point.spec.systems:
                if bar is not None:
                    bar.set_postfix_str(f"{name} {_label(point)}".strip())
                runs.append(simulate_system(point, name, sizings[(point.index, name)], requests, streams, tracker))
    finally:
        if bar is not None:
            bar.close()
    return RunResult(scenario=scenario, seed=root_seed, runs=runs)


def _label(point: ScenarioPoint) -> str:
    return " ".join(f"{k.split('.')[-1]}={v}" for k, v in point.params.items())


def simulate_system(
    point: ScenarioPoint,
    name: str,
    sizing: SystemSizing,
    requests: RequestArrays | None,
    streams: RandomStreams,
    progress: _Progress | None = None,
) -> SystemRun:
    """Simulate system ``name`` at one sweep point and summarise it."""
    spec: ScenarioSpec = point.spec
    started = time.perf_counter()
    env = simpy.Environment()
    warmup, duration = spec.warmup, spec.duration
    records = RequestRecords(len(requests) if requests is not None else 4096)
    counters = SystemCounters(warmup, duration)
    in_system = TimeWeightedLevel(warmup, duration)
    inst = sizing.spec.instance
    step_model = sizing.step_model()
    cache = None
    if sizing.spec.kv_cache is not None:
        block_tokens = requests.block_tokens if requests is not None and requests.block_tokens else \
            spec.workload.block_tokens
        cache = build_system_cache(env, sizing, block_tokens, warmup, duration)
        if sizing.spec.kv_cache.prewarm:
            cache.prewarm(warm_prompts(spec.workload, duration, streams, block_tokens))
    instances = []
    for i in range(sizing.instances):
        pool = BlockPool(sizing.kv_blocks_per_instance, inst.block_size_tokens)
        hook = build_instance_cache(cache, sizing, i, pool, records) if cache is not None else None
        instance = Instance(env, i, step_model, pool, inst.max_batched_tokens, inst.max_num_seqs, records,
                            counters, in_system, warmup, duration, hook)
        if hook is not None:
            hook.scheduler, hook.wake = instance.scheduler, instance.wake
        instances.append(instance)
    router = ROUTERS[sizing.spec.router]()
    cached = cache is not None
    if requests is not None:
        env.process(_open_loop(env, requests, records, instances, router, cached))
    elif spec.workload.multi_turn:
        env.process(_sessions(env, sessions(spec.workload, duration, streams), records, instances, router,
                              duration, cached))
    else:
        for client in range(spec.workload.arrival.clients):
            env.process(_client(env, ClientStream(spec.workload, client, streams), records, instances, router,
                                duration, cached))
    occupancy: dict[str, TimeWeightedLevel] = {}
    timeseries: list[dict] = []
    if cache is not None:
        occupancy = {tier: TimeWeightedLevel(warmup, duration) for tier in TIERS}
        env.process(_sample_tiers(env, cache, occupancy, timeseries, duration / 200.0, duration))
    slices = 50
    for k in range(1, slices + 1):
        env.run(until=duration * k / slices)
        if progress is not None:
            progress.advance(duration / slices)
    # Drain: no more arrivals; let every request in the system finish (bounded).
    drain_end = duration + spec.drain_limit_s
    while in_system.value > 0 and env.now < drain_end:
        env.run(until=min(env.now + duration / slices, drain_end))
    kv_mean = sum(i.kv_utilization.mean() for i in instances) / len(instances)
    slo = {"ttft_s": spec.slo.ttft_p99, "tpot_s": spec.slo.tpot_p99, "e2e_s": spec.slo.e2e_p99}
    summary = summarize(records, warmup, duration, counters.output_tokens.in_window,
                        counters.input_tokens.in_window, kv_mean, slo)
    span = duration - warmup
    # an iteration that straddles the window start counts whole: clamp the fraction to 1
    busy = min(1.0, counters.busy_in_window_s / (len(instances) * span))
    summary["gpu_busy_fraction"] = busy
    links: list[dict] = []
    if cache is not None:
        links = [{"link": f"{u}->{v}", **stats} for (u, v), stats in cache.network.link_report().items()
                 if stats["bytes"] > 0]
        for row in links:
            row["bytes"] = float(row["bytes"])
        model = sizing.model
        last = timeseries[-1] if timeseries else {}
        summary_cache = cache_summary(
            records, warmup, duration, model.body_flops_per_token, model.attention_flops_per_pair(decode=False),
            cache.bytes_loaded, cache.bytes_written, links,
            {tier: level.mean() for tier, level in occupancy.items()})
        summary_cache["tier_bytes_at_end"] = {
            tier: {"physical": last.get(f"{tier}_bytes", 0.0), "logical": last.get(f"{tier}_logical_bytes", 0.0)}
            for tier in TIERS}
        summary["cache"] = summary_cache
    busy_total = counters.busy_in_window_s
    summary["gpu_time_share"] = {cause: (t / busy_total if busy_total else 0.0)
                                 for cause, t in counters.time_by_cause_s.items()}
    summary["bound"] = bound_resource(busy, counters.time_by_cause_s, links)
    return SystemRun(
        system=name, point_index=point.index, params=dict(point.params), sizing=sizing, records=records,
        summary=summary, in_system_mean=in_system.mean(), iterations=counters.iterations,
        busy_s=counters.busy_s, wall_s=time.perf_counter() - started, timeseries=timeseries, links=links,
    )


def _sample_tiers(env: simpy.Environment, cache, occupancy: dict, rows: list, every_s: float, until_s: float):
    """Tier occupancy over time: one sample per interval (bytes held per tier, all instances/nodes)."""
    stores = {"hbm": cache.hbm, "dram": list(cache.dram.values()), "nvme": list(cache.nvme.values()),
              "remote": cache.remote}
    while env.now <= until_s:
        row = {"time_s": env.now}
        for tier, group in stores.items():
            held = float(sum(store.physical_bytes for store in group))
            occupancy[tier].set(env.now, held)
            row[f"{tier}_bytes"] = held
            # what readers see: one block's bytes per reader (sharing makes it exceed physical)
            row[f"{tier}_logical_bytes"] = float(sum(store.logical_bytes for store in group))
        rows.append(row)
        yield env.timeout(every_s)


def _open_loop(env: simpy.Environment, requests: RequestArrays, records: RequestRecords, instances, router,
               cached: bool):
    n = len(requests)
    hashes = requests.hash_ids if cached and requests.hash_ids is not None else [None] * n
    for rid, (t, n_in, n_out) in enumerate(zip(requests.arrival_s.tolist(), requests.input_tokens.tolist(),
                                               requests.output_tokens.tolist())):
        if t > env.now:
            yield env.timeout(t - env.now)
        records.add(t, n_in, n_out)
        instances[router.choose(instances)].submit(Sequence(rid, n_in, n_out, hashes=hashes[rid]))
    assert records.n == n


def _submit_and_wait(env, records, instances, router, n_in, n_out, hashes=None, sequence_hashes=None):
    done = env.event()
    rid = records.add(env.now, n_in, n_out)
    seq = Sequence(rid, n_in, n_out, on_finish=lambda _seq, _now, ev=done: ev.succeed(),
                   hashes=hashes, sequence_hashes=sequence_hashes)
    instances[router.choose(instances)].submit(seq)
    return done


def _client(env: simpy.Environment, stream: ClientStream, records: RequestRecords, instances, router,
            stop_s: float, cached: bool):
    while True:
        request = stream.next_request_with_hashes()
        if request.think_time_s > 0:
            yield env.timeout(request.think_time_s)
        if env.now >= stop_s:
            return
        yield _submit_and_wait(env, records, instances, router, request.input_tokens, request.output_tokens,
                               request.hash_ids if cached else None)


def _sessions(env: simpy.Environment, all_sessions, records: RequestRecords, instances, router, stop_s: float,
              cached: bool):
    for session in all_sessions:
        if session.arrival_s > env.now:
            yield env.timeout(session.arrival_s - env.now)
        env.process(_session(env, session, records, instances, router, stop_s, cached))


def _session(env, session, records, instances, router, stop_s: float, cached: bool):
    for turn in session.turns():
        if turn.think_time_s > 0:
            yield env.timeout(turn.think_time_s)
        if env.now >= stop_s:
            return
        yield _submit_and_wait(env, records, instances, router, turn.input_tokens, turn.output_tokens,
                               turn.hash_ids if cached else None,
                               turn.sequence_hash_ids if cached else None)
