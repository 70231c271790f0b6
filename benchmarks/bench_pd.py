"""Disaggregation's cost in wall time: a PD run against the colocated run on the same requests.

Run on demand (not part of the test suite):

    .venv/bin/python benchmarks/bench_pd.py [--rate 20/s] [--duration '300 s']

Both systems serve the same Poisson stream of chat requests (Qwen3-8B in BF16 on one 8x H20
server): colocated, every card its own instance; disaggregated, 5 prefill and 3 decode
instances with a layer-by-layer KV handoff over NVLink. A PD request costs more events (a
handoff flow, a second admission) and the prefill and decode iterations no longer share one
batch; the target is at most 1.5x the colocated wall time (issue 6). Each system is timed alone,
best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import platform
import time

import kvsim

SCENARIO = """
name: bench-pd
seed: 3
duration: {duration}
warmup: 30 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: {rate}}}
  input_tokens: {{kind: lognormal, median: 1024, sigma: 0.8, max: 8192}}
  output_tokens: {{kind: lognormal, median: 256, sigma: 0.7, max: 2048}}
slo: {{ttft_p99: 2 s, tpot_p99: 100 ms}}
systems:
  colocated: {{node: h20-8x, instance: {{tp: 1}}}}
  pd:
    pools:
      h20: {{node: h20-8x, instance: {{tp: 1}}, roles: {{prefill: 5, decode: 3}}}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default="20/s")
    parser.add_argument("--duration", default="300 s")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    scenario = kvsim.parse_scenario(SCENARIO.format(rate=args.rate, duration=args.duration), "bench-pd.yaml")
    print(f"kvsim {kvsim.__version__} on Python {platform.python_version()} ({platform.machine()})")
    wall = {}
    for system in ("colocated", "pd"):
        alone = scenario.with_changes({"systems": {system: scenario.raw["systems"][system]},
                                       "compare": {"baseline": system}})
        best = None
        for _ in range(args.repeat):
            started = time.perf_counter()
            run = kvsim.run(alone).runs[0]
            elapsed = time.perf_counter() - started
            best = elapsed if best is None else min(best, elapsed)
        wall[system] = best
        print(f"{system:10s} {run.records.n:7d} requests {run.iterations:9d} iterations "
              f"{best:6.2f} s wall = {run.records.n / best:7.0f} requests/wall-s; "
              f"goodput {run.summary['goodput_requests_per_s']:.2f} req/s")
    print(f"PD / colocated wall time: {wall['pd'] / wall['colocated']:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
