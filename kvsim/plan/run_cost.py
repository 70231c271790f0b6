"""What a run will cost before it runs: requests x systems x points x replications, and a rough
CPU time.

Open-loop requests are counted exactly for replica 0 (the arrival times are drawn from the
point's seed, as the run will draw them; a trace is read and cut at ``duration``); other
replicas are assumed to draw as many. Closed-loop and multi-turn workloads issue requests as
fast as the system answers them, so their count is not known before the run.

The CPU time uses :data:`REQUESTS_PER_CPU_S`, a rough rate taken from docs/speed.md: a
colocated Qwen3-8B ladder on H20 simulates 5,102-7,240 requests per CPU-second (rr_conv_80
7,198; ladder-1024 5,102), while KV offload and Mooncake cases run at 1,269-1,728 and a no-cache
offload case at 4,854. It is an order of magnitude, not a prediction: the rate depends on the
model, the batch sizes (iterations per request), caches and the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.rng import RandomStreams
from kvsim.scenario.limits import REQUESTS_PER_CPU_S
from kvsim.scenario.load import Scenario, ScenarioPoint
from kvsim.workload import open_loop_requests
from kvsim.workload.arrivals import open_loop_arrival_times

__all__ = ["RunCost", "point_requests", "run_cost", "REQUESTS_PER_CPU_S"]


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
    open-loop requests simulated in all (None if any point is closed loop)."""

    points: int
    systems: int
    runs: int
    replications: int
    requests: int | None
    closed_loop_points: int
    per_point: dict[int, int | None]  # point index -> requests over its systems and replicas
    auto_warmup: bool = False  # warmup: auto (every run simulated twice; counted in requests)

    @property
    def cpu_s(self) -> float | None:
        """Rough CPU-seconds at :data:`REQUESTS_PER_CPU_S` (None when requests are unknown)."""
        return None if self.requests is None else self.requests / REQUESTS_PER_CPU_S

    def describe(self) -> str:
        """Two or three lines for ``kvsim validate``."""
        from kvsim.plan.progress import format_duration

        lines = [f"cost: {self.points} point(s) x {self.systems} system(s) x {self.replications} replication(s) "
                 f"= {self.runs} system run(s)" + (", each simulated twice (warmup: auto)" if self.auto_warmup else "")]
        if self.requests is not None:
            lines.append(f"  ~{self.requests:,} requests simulated in all; roughly "
                         f"{format_duration(self.cpu_s)} of CPU time at ~{REQUESTS_PER_CPU_S:,.0f} requests "
                         f"per CPU-second (a rough rate from docs/speed.md; KV offload runs ~4x slower)")
        else:
            known = sum(n for n in self.per_point.values() if n is not None)
            lines.append(f"  {self.closed_loop_points} point(s) are closed loop: their request count depends on "
                         f"latency and is not estimated" + (f" (the open-loop points: ~{known:,} requests)"
                                                           if known else ""))
        return "\n".join(lines)


def run_cost(scenario: Scenario) -> RunCost:
    """Count the runs and requests of ``scenario`` (see the module docstring)."""
    per_point: dict[int, int | None] = {}
    counted: dict[tuple, int | None] = {}  # a sweep that leaves the workload alone reads its trace once
    runs = 0
    requests = 0
    unknown = 0
    for point in scenario.points:
        key = _requests_key(point)
        if key not in counted:
            counted[key] = point_requests(scenario, point)
        n = counted[key]
        systems = len(point.spec.systems)
        reps = point.spec.replications
        passes = 2 if point.spec.warmup_auto else 1  # warmup: auto simulates each run twice
        runs += systems * reps
        per_point[point.index] = None if n is None else n * systems * reps * passes
        if n is None:
            unknown += 1
        else:
            requests += n * systems * reps * passes
    return RunCost(len(scenario.points), len(scenario.spec.systems), runs, scenario.spec.replications, None if unknown else requests,
                   unknown, per_point, scenario.spec.warmup_auto)


def _requests_key(point: ScenarioPoint) -> tuple:
    """What a point's open-loop request count depends on: its workload and duration, and its seed
    unless the requests are read from a trace."""
    spec = point.spec
    workload = spec.workload
    return (workload.model_dump_json(), spec.duration, None if workload.trace else spec.seed)
