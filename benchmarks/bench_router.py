"""Cost of the least-outstanding router per arrival against the number of instances: the load
board's heap against a scan, and a whole run of a large cluster both ways.

Run on demand (not part of the test suite), from the repository root:

    .venv/bin/python benchmarks/bench_router.py [--arrivals 20000] [--run-instances 1024] [--run-duration "6 s"]

Micro-benchmark: ``n`` instances in one role hold ``--load`` requests each on average; each step
is one arrival (route, the chosen instance takes the request) and one finish on an instance
drawn at random, so the loads keep moving. Three ways of routing the same steps:

- ``list+scan``: what the front end did before: build the role's member list, then scan it;
- ``scan``: scan the board's cached member list (the reference the tests compare with);
- ``board``: the board's heap (O(log n) per arrival).

Each instance stands in for :class:`~kvsim.serving.instance.Instance` with the same property
chain for ``outstanding`` (instance -> scheduler -> three container lengths). The three give the
same choices (checked). Then, unless ``--run-instances 0``, a colocated cluster of that many
H20 instances (tp 1, Qwen3-8B, chat lengths at 2.2 requests/s per instance) is run for
``--run-duration`` simulated seconds with the board and with the old list+scan, and the wall
times and the records digests are printed.
"""

from __future__ import annotations

import argparse
import platform
import random
import time
from collections import deque

from kvsim.serving.load_board import LoadBoard
from kvsim.serving.router import LeastOutstandingRouter, least_outstanding_scan


class _Scheduler:
    def __init__(self) -> None:
        self.waiting: deque = deque()
        self.running: list = []
        self.loading: dict = {}

    @property
    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.loading)


class _Instance:
    def __init__(self, index: int) -> None:
        self.index = index
        self.role = "mixed"
        self.accepting = True
        self.board = None
        self.scheduler = _Scheduler()

    @property
    def outstanding(self) -> int:
        return self.scheduler.outstanding


def _steps(n: int, arrivals: int, load: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(n) for _ in range(arrivals)]


def _bench(n: int, arrivals: int, load: int, way: str) -> tuple[float, list[int]]:
    """Seconds per step (routing, the chosen instance taking the request, one finish, and the
    board's notifications where the board is used) and the choices."""
    rng = random.Random(1)
    instances = [_Instance(i) for i in range(n)]
    board = LoadBoard()
    for inst in instances:
        board.add(inst)
        inst.scheduler.running.extend(range(rng.randint(0, 2 * load)))
        board.changed(inst)
    router = LeastOutstandingRouter(board)
    finishes = _steps(n, arrivals, load, 2)
    chosen = []
    notify = board.changed if way != "list+scan" else (lambda _inst: None)
    started = time.perf_counter()
    for k in range(arrivals):
        if way == "list+scan":
            members = [inst for inst in instances if inst.role == "mixed" and inst.accepting]
            best = least_outstanding_scan(members)
        elif way == "scan":
            members = board.members("mixed")
            best = least_outstanding_scan(members)
        else:
            members = board.members("mixed")
            best = router.choose(members)
        chosen.append(best)
        target = members[best]
        target.scheduler.waiting.append(k)
        notify(target)
        # a finish somewhere (an instance holding work)
        inst = instances[finishes[k]]
        if inst.scheduler.running:
            inst.scheduler.running.pop()
        elif inst.scheduler.waiting:
            inst.scheduler.waiting.popleft()
        notify(inst)
        if k % 7 == 0 and inst.scheduler.waiting:  # admissions move requests, the count stays
            inst.scheduler.running.append(inst.scheduler.waiting.popleft())
    return (time.perf_counter() - started) / arrivals, chosen


def _micro(args) -> None:
    print(f"least_outstanding routing, microseconds per arrival (route, submit, one finish, notifications), "
          f"{args.arrivals} arrivals, ~{args.load} requests per instance "
          f"(Python {platform.python_version()}, {platform.machine()})")
    print(f"{'instances':>9s} {'list+scan':>10s} {'scan':>8s} {'board':>8s} {'speedup':>8s}")
    for n in (8, 16, 32, 64, 128, 256, 512, 1024):
        results = {way: _bench(n, args.arrivals, args.load, way) for way in ("list+scan", "scan", "board")}
        same = results["list+scan"][1] == results["scan"][1] == results["board"][1]
        if not same:
            raise SystemExit(f"{n} instances: the board chose differently from the scan")
        old, scan, new = (1e6 * results[w][0] for w in ("list+scan", "scan", "board"))
        print(f"{n:9d} {old:10.2f} {scan:8.2f} {new:8.2f} {old / new:7.1f}x")


SCENARIO = """
name: router-bench
seed: 3
duration: {duration}
warmup: 2 s
model: qwen3-8b
dtype: bf16
workload:
  arrival: {{kind: poisson, rate: {rate}/s}}
  input_tokens: {{kind: lognormal, median: 1024, sigma: 0.8, max: 8192}}
  output_tokens: {{kind: lognormal, median: 256, sigma: 0.7, max: 2048}}
systems:
  h20: {{node: h20-8x, nodes: {nodes}, instance: {{tp: 1}}}}
"""


def _whole_run(args) -> None:
    import kvsim
    from kvsim.sim.build import System

    n = args.run_instances
    text = SCENARIO.format(duration=args.run_duration, rate=round(2.2 * n, 3), nodes=n // 8)
    scenario = kvsim.parse_scenario(text, "router-bench.yaml")
    real_role_instances = System.role_instances
    real_choose = LeastOutstandingRouter.choose
    timings = {}
    digests = {}
    for way in ("board", "list+scan"):
        if way == "list+scan":
            System.role_instances = lambda self, role: [i for i in self.instances if i.role == role and i.accepting]
            LeastOutstandingRouter.choose = lambda self, instances, seq=None: least_outstanding_scan(instances)
        try:
            started = time.process_time()
            result = kvsim.run(scenario)
            timings[way] = time.process_time() - started
        finally:
            System.role_instances = real_role_instances
            LeastOutstandingRouter.choose = real_choose
        digests[way] = result.records_digest()
        requests = result.runs[0].records.n
    print(f"\nwhole run: {n} H20 instances (tp 1), {args.run_duration} simulated, {requests} requests")
    for way, cpu_s in timings.items():
        print(f"  {way:10s} {cpu_s:7.2f} CPU-s  {requests / cpu_s:8.0f} requests per CPU-s")
    print(f"  speedup {timings['list+scan'] / timings['board']:.2f}x; same records: "
          f"{digests['board'] == digests['list+scan']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrivals", type=int, default=20000)
    parser.add_argument("--load", type=int, default=8, help="mean outstanding requests per instance")
    parser.add_argument("--run-instances", type=int, default=1024, help="0: skip the whole run")
    parser.add_argument("--run-duration", default="6 s")
    args = parser.parse_args()
    _micro(args)
    if args.run_instances:
        _whole_run(args)


if __name__ == "__main__":
    main()
