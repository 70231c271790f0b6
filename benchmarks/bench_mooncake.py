"""Engine speed with prefix caching and offload: the Mooncake conversation trace on 16 H20 servers.

Run on demand (not part of the test suite), from the repository root:

    .venv/bin/python benchmarks/bench_mooncake.py [--time-scale 1.0]

Prints the speed report's figures for this one case (see ``speed_measure.py``): simulated
requests per CPU-second, simulated seconds per wall-second, SimPy events per request, engine
iterations and peak memory (this process, result files written), then the hit rates and
latencies a faster engine must reproduce. ``benchmarks/speed.py --only mooncake`` runs the same
case in a fresh process and compares it with a saved baseline. The trace lives in
../shared/traces/ beside the repository.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import kvsim  # noqa: E402
from speed_measure import machine, measure, summary_line  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="multiply arrival times (0.5 = twice the request rate)")
    args = parser.parse_args()
    scenario = kvsim.load_scenario(HERE / "mooncake_16xh20.yaml")
    if args.time_scale != 1.0:
        scenario = scenario.with_changes({"workload.arrival.time_scale": args.time_scale})
    m = measure(scenario)
    where = machine()
    print(f"kvsim {where['kvsim']} ({where['commit']}) on Python {where['python']}, {where['cpu']}")
    print(f"{scenario.name}: {summary_line(m)}")
    answers = m["results"][0]
    hit = answers["hit_rate"]
    print(f"  token hit rate {hit['total']:.1%} (HBM {hit['hbm']:.1%}, DRAM {hit['dram']:.1%}); "
          f"TTFT p50 {answers['ttft_s']['p50']:.3f} s, p99 {answers['ttft_s']['p99']:.3f} s; "
          f"records sha256 {m['records_digest'][:16]}")


if __name__ == "__main__":
    main()
