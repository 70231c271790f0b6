"""What a run will cost before it runs: requests x systems x points x replications, and its
CPU time.

Open-loop requests are counted exactly for replica 0 (the arrival times are drawn from the
point's seed, as the run will draw them; a trace is read and cut at ``duration``); other
replicas are assumed to draw as many. Closed-loop and multi-turn workloads issue requests as
fast as the system answers them: their count is *estimated* (``clients x duration / (latency +
think time)``, the latency a bound from the system's step-time model; sessions x mean turns for
multi-turn), see :mod:`kvsim.plan.cost_model`.

The CPU time is the per-path model of :mod:`kvsim.plan.cost_model`: each system run's requests,
batch, engine iterations, KV blocks per cache tier, transfers, domain lookups, PD handoffs and
cache prewarm, times the rates ``benchmarks/cost_rates.py`` measured (:mod:`kvsim.plan.cost_rates`).
``benchmarks/check_run_cost.py`` compares it with measured runs of every shipped scenario
(docs/run_cost.md). It is an estimate for one core of the measuring machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.plan.cost_hits import distinct_contexts
from kvsim.plan.cost_model import PathCounts, WorkloadShape, system_counts, workload_reuse
from kvsim.rng import RandomStreams
from kvsim.scenario.limits import REQUESTS_PER_CPU_S
from kvsim.scenario.load import Scenario, ScenarioPoint
from kvsim.workload import open_loop_requests
from kvsim.workload.adapters import adapter_probabilities
from kvsim.workload.arrivals import open_loop_arrival_times

__all__ = ["RunCost", "point_requests", "run_cost", "point_cost", "REQUESTS_PER_CPU_S"]


def point_requests(scenario: Scenario, point: ScenarioPoint, read_files: bool = True) -> int | None:
    """Open-loop requests one system of ``point`` serves (replica 0); None for closed loop (and,
    without ``read_files``, for a trace, which would be read to count)."""
    spec = point.spec
    workload = spec.workload
    if workload.closed_loop or workload.multi_turn or (workload.trace and not read_files):
        return None
    streams = RandomStreams(spec.seed)
    try:
        if workload.trace or workload.phased:
            return len(open_loop_requests(workload, spec.duration, streams, base_dir=scenario.base_dir))
        return len(open_loop_arrival_times(workload.arrival, spec.duration, streams.generator("workload.arrival")))
    except (OSError, ValueError):
        return None  # the run reports an unreadable trace with its file and line


@dataclass(frozen=True)
class RunCost:
    """A run's size: ``runs`` = systems x replications summed over points; ``requests`` the
    open-loop requests simulated in all (None if any point is closed loop); ``estimated_requests``
    the same with the closed-loop points' estimated counts; ``counts`` the work on each path of
    the cost model summed over every run (:class:`~kvsim.plan.cost_model.PathCounts`)."""

    points: int
    systems: int
    runs: int
    replications: int
    requests: int | None
    closed_loop_points: int
    per_point: dict[int, int | None]  # point index -> requests over its systems and replicas
    auto_warmup: bool = False  # warmup: auto (every run simulated twice; counted in requests)
    estimated_requests: float = 0.0
    counts: PathCounts = field(default_factory=PathCounts)
    per_point_cpu_s: dict[int, float] = field(default_factory=dict)
    layout_searches: int = 0  # system runs with layout: best (their pilots are counted)
    backend: str = "python"

    @property
    def cpu_s(self) -> float:
        """Estimated CPU-seconds of the whole run (:mod:`kvsim.plan.cost_model`)."""
        return self.counts.cpu_s(self.backend)

    def describe(self) -> str:
        """Two to four lines for ``kvsim validate``."""
        from kvsim.plan.progress import format_duration

        lines = [f"cost: {self.points} point(s) x {self.systems} system(s) x {self.replications} replication(s) "
                 f"= {self.runs} system run(s)" + (", each simulated twice (warmup: auto)" if self.auto_warmup else "")]
        if self.requests is not None:
            lines.append(f"  ~{self.requests:,} requests simulated in all")
        else:
            known = sum(n for n in self.per_point.values() if n is not None)
            lines.append(f"  ~{self.estimated_requests:,.0f} requests simulated in all, an estimate: "
                         f"{self.closed_loop_points} point(s) are closed loop (or multi-turn), their count "
                         f"estimated from the clients, the think time and the latency the step-time model "
                         f"bounds" + (f" (the open-loop points: {known:,}, counted)" if known else ""))
        shares = sorted(((v * rate, k) for k, v, rate in _weighted(self.counts, self.backend)), reverse=True)
        total = sum(v for v, _ in shares) or 1.0
        top = ", ".join(f"{_PATH_WORDS[k]} {v / total:.0%}" for v, k in shares[:3] if v / total >= 0.05)
        from kvsim.plan.cost_rates import RATES

        engine = f"{self.backend} engine" + ("" if self.backend in RATES else
                                             ", at the pure-Python engine's rates: its own are not measured yet")
        lines.append(f"  estimated CPU time: {format_duration(self.cpu_s)} on one core ({engine}; "
                     f"per-path rates measured by benchmarks/cost_rates.py; docs/run_cost.md compares it "
                     f"with measured runs of every shipped scenario)"
                     + (f"; most of it {top}" if top else ""))
        if self.layout_searches:
            lines.append(f"  {self.layout_searches} run(s) search their layout (layout: best): their pilot "
                         "runs are in the estimate")
        return "\n".join(lines)


_PATH_WORDS = {
    "run": "building and summarising runs", "instance": "building instances", "request": "requests",
"iteration": "engine iterations", "prompt_block": "hashing prompt blocks",
    "hbm_block": "HBM cache blocks", "tier_block": "offload tier blocks", "flow": "transfers",
    "domain_block": "domain block lookups", "handoff": "PD handoffs", "handoff_flow": "PD handoff flows", "queued_request": "queued requests", "remote_flow": "remote pool transfers",
    "prewarm_prompt": "cache prewarm prompts", "prewarm_block": "cache prewarm blocks",
    "routed_candidate": "cache-aware routing", "miss_block": "prompt blocks computed and cached",
    "value_key": "LoRA value-reuse lookups", "refused_block": "refused LoRA value-reuse admissions",
    "extent_request": "KV caches kept as extents", "extent_miss": "prompts computed and cached as extents",
    "extent_tier": "lower tiers kept as extents", "prewarm_filing": "cache prewarm filings",
    "load": "prefixes loaded from lower tiers",
}


def _weighted(counts: PathCounts, backend: str):
    from kvsim.plan.cost_rates import rates_for

    rates = rates_for(backend)
    return [(k, v, rates[k]) for k, v in counts.as_dict().items()]


def run_cost(scenario: Scenario, sizings: dict | None = None, backend: str = "python") -> RunCost:
    """Count the runs and requests of ``scenario`` and estimate its CPU time (see the module
    docstring). ``sizings`` (from :func:`kvsim.sim.check_scenario`) saves sizing the systems again."""
    per_point: dict[int, int | None] = {}
    per_point_cpu: dict[int, float] = {}
    counted: dict[tuple, int | None] = {}  # a sweep that leaves the workload alone reads its trace once
    shapes: dict[tuple, WorkloadShape] = {}
    runs = 0
    requests = 0
    unknown = 0
    estimated = 0.0
    searches = 0
    total = PathCounts()
    for point in scenario.points:
        key = _requests_key(point)
        workload = point.spec.workload
        if key not in counted and (workload.trace or workload.phased):  # read once: the shape counts them
            shapes[key] = workload_shape(scenario, point, None)
            counted[key] = shapes[key].requests if shapes[key].input_tokens > 0 else None
        if key not in counted:
            counted[key] = point_requests(scenario, point)
        n = counted[key]
        if key not in shapes:
            shapes[key] = workload_shape(scenario, point, n)
        counts, searched = point_cost(scenario, point, shapes[key], sizings)
        systems = len(point.spec.systems)
        reps = point.spec.replications
        passes = 2 if point.spec.warmup_auto else 1  # warmup: auto simulates each run twice
        runs += systems * reps
        searches += searched * reps
        counts = counts.scaled(reps)
        total = total + counts
        per_point_cpu[point.index] = counts.cpu_s(backend)
        estimated += counts.request
        per_point[point.index] = None if n is None else n * systems * reps * passes
        if n is None:
            unknown += 1
        else:
            requests += n * systems * reps * passes
    return RunCost(len(scenario.points), len(scenario.spec.systems), runs, scenario.spec.replications,
                   None if unknown else requests, unknown, per_point, scenario.spec.warmup_auto, estimated, total,
                   per_point_cpu, searches, backend)


def workload_shape(scenario: Scenario, point: ScenarioPoint, n: int | None) -> WorkloadShape:
    """The mean lengths and reuse of ``point``'s workload (:class:`WorkloadShape`); ``n`` its
    open-loop request count (None: closed loop or multi-turn)."""
    workload = point.spec.workload
    shared, doc_tokens, popularity = workload_reuse(workload)
    adapters = adapter_probabilities(workload.adapters) if workload.adapters is not None else None
    block = workload.block_tokens
    hashed = workload.prefix is not None
    if workload.trace or workload.phased:
        try:
            arrays = open_loop_requests(workload, point.spec.duration, RandomStreams(point.spec.seed),
                                        base_dir=scenario.base_dir)
        except (OSError, ValueError):
            arrays = None
        if arrays is not None and len(arrays):
            return WorkloadShape(len(arrays), float(arrays.input_tokens.mean()), float(arrays.output_tokens.mean()),
                                 arrays.block_tokens or block, arrays.hash_ids is not None, 0, 0.0, shared,
                                 doc_tokens, popularity)
        return WorkloadShape(0, 0.0, 1.0, block)  # unreadable (the run reports it) or empty: nothing to simulate
    prefix = workload.prefix
    if workload.multi_turn:
        turns = prefix.turns.mean
        per_turn = prefix.message_tokens.mean + workload.output_tokens.mean
        inputs = prefix.system_prompt_tokens + (turns + 1) / 2 * per_turn  # the mean turn's conversation so far
        starts = len(open_loop_arrival_times(workload.arrival, point.spec.duration,
                                             RandomStreams(point.spec.seed).generator("workload.arrival")))
        # a turn repeats the conversation so far: its blocks mostly hit the session's earlier ones
        share = max(0.0, 1.0 - per_turn / max(inputs, 1.0))
        return WorkloadShape(round(starts * turns), inputs, workload.output_tokens.mean, block, True,
                             shared_fraction=share)
    if isinstance(prefix, type(None)) or not hasattr(prefix, "document_tokens"):
        inputs = workload.input_tokens.mean
    else:
        inputs = prefix.document_tokens.mean + prefix.suffix_tokens.mean
    if n is None:  # closed loop
        arrival = workload.arrival
        return WorkloadShape(None, inputs, workload.output_tokens.mean, block, hashed, arrival.clients,
                             arrival.think_time, shared, doc_tokens, popularity, adapters)
    return WorkloadShape(n, inputs, workload.output_tokens.mean, block, hashed, 0, 0.0, shared, doc_tokens, popularity,
                         adapters)


def point_cost(scenario: Scenario, point: ScenarioPoint, shape: WorkloadShape,
               sizings: dict | None = None) -> tuple[PathCounts, int]:
    """The work of one replica of every system at ``point`` (``warmup: auto`` runs counted twice),
    and how many of them search their layout."""
    from kvsim.sim.layout_search import FINALISTS, PILOT_DURATION_S, pilot_sizings, search_space, searches_layout
    from kvsim.sim.sizing import SizingError, size_system

    spec = point.spec
    passes = 2 if spec.warmup_auto else 1
    total = PathCounts()
    searched = 0
    if shape.hashed and shape.requests:
        total = total + PathCounts(prompt_block=hashed_blocks(shape))  # drawn once per point
    for name in spec.systems:
        try:
            if searches_layout(spec, name):
                searched += 1
                space = search_space(spec, name, scenario.catalogs_for(point))
                pilot_spec = spec.model_copy(update={"duration": min(spec.duration, PILOT_DURATION_S)})
                pilot_shape = _shorter(shape, pilot_spec.duration / spec.duration)
                tried = pilot_sizings(space, spec, name, scenario.catalogs_for(point))
                for sizing in tried:
                    total = total + system_counts(pilot_spec, sizing, pilot_shape)
                full = system_counts(spec, tried[0] if tried else space.start_sizing, shape)
                total = total + full.scaled(min(FINALISTS, space.pilots))
                continue
            sizing = (sizings or {}).get((point.index, name)) or size_system(spec, name, scenario.catalogs_for(point))
        except SizingError:
            continue  # validate reports it
        total = total + system_counts(spec, sizing, shape).scaled(passes)
    return total, searched


def hashed_blocks(shape: WorkloadShape) -> float:
    """Prompt blocks hashed when an open loop's requests are drawn: a shared document's blocks
    once for the process (its chain is memoised, :func:`kvsim.workload.reuse._document_chain`),
    so once per distinct document drawn, and each request's own blocks; every block of every
    prompt otherwise."""
    if shape.popularity is None or shape.document_tokens <= 0 or not shape.requests:
        return shape.requests * shape.blocks_per_request if shape.requests else 0.0
    documents = distinct_contexts(shape.popularity, shape.requests)
    own = max(shape.input_tokens - shape.document_tokens, 0.0) / shape.block_tokens + 1.0
    return documents * shape.document_tokens / shape.block_tokens + shape.requests * own


def _shorter(shape: WorkloadShape, k: float) -> WorkloadShape:
    from dataclasses import replace

    return shape if shape.requests is None else replace(shape, requests=round(shape.requests * k))
def _requests_key(point: ScenarioPoint) -> tuple:
    """What a point's open-loop request count depends on: its workload and duration, and its seed
    unless the requests are read from a trace."""
    spec = point.spec
    workload = spec.workload
    return (workload.model_dump_json(), spec.duration, None if workload.trace else spec.seed)
