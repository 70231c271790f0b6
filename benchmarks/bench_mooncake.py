"""Engine speed with prefix caching and offload: the Mooncake conversation trace on 16 H20 servers.

Run on demand (not part of the test suite), from the repository root:

    .venv/bin/python benchmarks/bench_mooncake.py [--time-scale 1.0]

Prints simulated requests, engine iterations and network flows per wall-clock second. The trace
lives in ../shared/traces/ beside the repository.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import kvsim

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="multiply arrival times (0.5 = twice the request rate)")
    args = parser.parse_args()
    scenario = kvsim.load_scenario(HERE / "mooncake_16xh20.yaml")
    if args.time_scale != 1.0:
        scenario = scenario.with_changes({"workload.arrival.time_scale": args.time_scale})
    started = time.perf_counter()
    result = kvsim.run(scenario)
    wall_s = time.perf_counter() - started
    run = result.runs[0]
    summary = run.summary
    n = run.records.n
    print(f"kvsim {kvsim.__version__} on Python {platform.python_version()} ({platform.machine()})")
    print(f"{scenario.name}: {n} requests, {run.iterations} engine iterations, "
          f"{run.sizing.instances} instances, {wall_s:.1f} s wall")
    print(f"  {n / wall_s:,.0f} simulated requests per wall-second; "
          f"{run.iterations / wall_s:,.0f} iterations per wall-second")
    cache = summary["cache"]
    print(f"  token hit rate {cache['hit_rate']['total']:.1%} (HBM {cache['hit_rate']['hbm']:.1%}, "
          f"DRAM {cache['hit_rate']['dram']:.1%}); TTFT p50 {summary['ttft_s']['p50']:.3f} s, "
          f"p99 {summary['ttft_s']['p99']:.3f} s")


if __name__ == "__main__":
    main()
