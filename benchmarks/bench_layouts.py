"""The layout search at benchmark size: one point of the offload gap study at each server's best
layout, against the same point at tp 8, with the search's wall time.

Run on demand (not part of the test suite):

    .venv/bin/python benchmarks/bench_layouts.py [--duration '120 s'] [--clients 16] [--document 7680]

It runs ``scenarios/offload_gap.yaml`` (every server at tp 8) and
``scenarios/offload_gap_layouts.yaml`` (``layout: best``) at one sweep point, shortened, prints
both gap tables (the second with each server's chosen layout) and every candidate's pilot and
final goodput, and the wall time of each. The full study is
``kvsim run scenarios/offload_gap_layouts.yaml``; the search costs about
``candidates x 30 s / duration + 3`` full runs per system and point.
"""

from __future__ import annotations

import argparse
import time

import kvsim
from kvsim.report.gap import gap_markdown
from kvsim.units import parse_quantity

SUFFIX = {1920: 128, 7680: 512, 30720: 2048}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="120 s")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--document", type=int, default=7680, choices=sorted(SUFFIX))
    args = parser.parse_args()
    warmup = f"{parse_quantity(args.duration, 'time') / 4:g} s"
    point = {"duration": args.duration, "warmup": warmup, "sweep": {
        # the scenarios' suffixes: uniform on [1/2, 3/2] of SUFFIX
        "workload.prefix.document_tokens.value, workload.prefix.suffix_tokens.low, workload.prefix.suffix_tokens.high":
            [[args.document, SUFFIX[args.document] // 2, SUFFIX[args.document] * 3 // 2]],
        "workload.arrival.clients": [args.clients]}}
    for name in ("offload_gap.yaml", "offload_gap_layouts.yaml"):
        scenario = kvsim.load_scenario(f"scenarios/{name}").with_changes(point)
        started = time.perf_counter()
        result = kvsim.run(scenario)
        wall = time.perf_counter() - started
        print(f"## {name}: {wall:.1f} s wall\n")
        print(gap_markdown(result))
        for run in result.runs:
            search = run.summary.get("layout_search")
            if search:
                pilots = ", ".join(f"{k} {v:.3g}" for k, v in search["pilot"].items())
                finals = ", ".join(f"{k} {v:.3g}" for k, v in search["final"].items())
                print(f"- {run.system}: chose {search['chosen']}; finals {finals}; pilots {pilots}")
        print()


if __name__ == "__main__":
    main()
