"""Engine speed: simulated requests and engine iterations per wall-clock second.

Run on demand (not part of the test suite):

    .venv/bin/python benchmarks/bench_engine.py [--duration 300]

It runs the headline scenario's systems at each load of its sweep and prints, per run, the
simulated requests completed, engine iterations, wall time, and the rates per wall-second.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import kvsim

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=REPO / "scenarios" / "h20_vs_l20.yaml")
    parser.add_argument("--duration", default=None, help="override the simulated duration, e.g. '600 s'")
    args = parser.parse_args()
    scenario = kvsim.load_scenario(args.scenario)
    if args.duration:
        scenario = scenario.with_changes({"duration": args.duration})
    started = time.perf_counter()
    result = kvsim.run(scenario)
    total_wall = time.perf_counter() - started
    print(f"kvsim {kvsim.__version__} on Python {platform.python_version()} ({platform.machine()})")
    print(f"{'system':8s} {'point':28s} {'requests':>9s} {'iterations':>11s} {'wall s':>7s} "
          f"{'req/wall-s':>11s} {'iter/wall-s':>12s}")
    requests = iterations = 0
    for run in result.runs:
        n = run.records.n
        requests += n
        iterations += run.iterations
        label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in run.params.items())
        print(f"{run.system:8s} {label:28s} {n:9d} {run.iterations:11d} {run.wall_s:7.2f} "
              f"{n / run.wall_s:11.0f} {run.iterations / run.wall_s:12.0f}")
    print(f"total: {requests} simulated requests, {iterations} iterations in {total_wall:.1f} s wall "
          f"= {requests / total_wall:.0f} requests/wall-s, {iterations / total_wall:.0f} iterations/wall-s")


if __name__ == "__main__":
    main()
