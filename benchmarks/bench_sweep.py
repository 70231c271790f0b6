"""Sweep speed-up: one scenario's sweep run in this process, then on N local worker processes.

    python benchmarks/bench_sweep.py [SCENARIO] [--workers N] [--set FIELD=VALUE ...]

Prints the wall time of each, the speed-up and whether the two gave the same records (they
must). Default: scenarios/h20_vs_l20.yaml (6 points, 2 systems) on every core. The points of a
sweep differ in cost (the heaviest load dominates), so the speed-up is bounded by the longest
point, not only by the cores: with 6 points on 2 cores expect less than 2x.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kvsim.plan import default_workers, run_sweep  # noqa: E402
from kvsim.scenario.load import load_scenario  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default=str(REPO / "scenarios" / "h20_vs_l20.yaml"))
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    args = parser.parse_args()
    scenario = load_scenario(args.scenario, args.overrides)
    walls, digests = {}, {}
    for workers in (1, args.workers):
        with tempfile.TemporaryDirectory(prefix="kvsim-bench-sweep-") as out:
            started = time.perf_counter()
            result = run_sweep(scenario, out, workers=workers, log=False)
            walls[workers] = time.perf_counter() - started
            digests[workers] = result.records_digest()
    print(f"{scenario.name}: {len(scenario.points)} point(s) x {len(scenario.spec.systems)} system(s)")
    print(f"  1 worker (in process): {walls[1]:.1f} s wall")
    print(f"  {args.workers} worker processes: {walls[args.workers]:.1f} s wall")
    print(f"  speed-up {walls[1] / walls[args.workers]:.2f}x; same records: {digests[1] == digests[args.workers]}")
    return 0 if digests[1] == digests[args.workers] else 1


if __name__ == "__main__":
    sys.exit(main())
