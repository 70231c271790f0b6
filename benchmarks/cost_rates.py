"""Measure the per-path CPU rates of kvsim's run-cost model (kvsim/plan/cost_rates.py).

Run on demand (not part of the test suite), from the repository root, with nothing else heavy
beside it:

    .venv/bin/python benchmarks/cost_rates.py [--scale 0.1] [--capacity 3.55] [--repeat 3]
        [--json results/cost_rates.json]

Each case isolates paths of the model (kvsim/plan/cost_model.py): the speed cases of
``speed_cases.py`` -- ladder-8/64/256 (requests, batch, iterations, instances; no cache),
offload-nocache and offload-dram_nvme (the same requests without and with DRAM + NVMe tiers:
tier blocks and transfers), mooncake (HBM + DRAM cache on a trace), domains (its three systems:
per-block work across addressing domains), pd (handoffs; also as ``pd-tp4``, two servers of tp-4
instances, for the handoff's flows per card) -- at ``--scale`` of their durations,
ladder-64 again at 3x that scale, the ladder's saturation probe (a closed loop) and
``scenarios/plan_offload.yaml``'s pool systems (a cache prewarm; remote-pool transfers). Every system of a case is run alone, in this process, ``--repeat``
times (the least CPU time kept: on a shared machine the others carry noise); its path counts are
the model's estimate for that run (so the rates fit what the model will be given, not counts
the model cannot know before a run). The rates are the non-negative least-squares fit of

    measured CPU-s = sum(count[path] * rate[path])

weighted by 1 / measured CPU-s (every case counts by its relative error, not its size). The
script prints each case's measured and fitted CPU-s and the rates as Python to paste into
``kvsim/plan/cost_rates.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import kvsim  # noqa: E402
from kvsim.plan.cost_rates import PATHS  # noqa: E402
from kvsim.plan.run_cost import point_cost, point_requests, workload_shape  # noqa: E402
from kvsim.scenario.load import ScenarioPoint  # noqa: E402
from kvsim.sim.run import run_point  # noqa: E402
from speed_measure import machine  # noqa: E402

CASES = ("ladder-8", "ladder-64", "ladder-256", "ladder-64@3", "offload-nocache", "offload-dram_nvme", "mooncake",
         "domains", "pd", "pd-tp4", "probe", "prewarm", "remote")
"""The cases fitted, in order; ``CASE@k`` runs ``CASE`` at ``k`` times ``--scale`` (a longer run of
the same system separates the per-run costs from the per-request ones)."""


def case_scenario(case: str, scale: float, capacity: float) -> kvsim.Scenario:
    """The scenario of ``case``: a speed case; ``prewarm``, ``scenarios/plan_offload.yaml``'s L20
    with a remote pool (prewarmed) at 1/s, where the prewarm is most of the run; ``remote``, its
    H20 with the same pool at 8/s, where the requests' remote-pool transfers are."""
    from speed_cases import scenario_for

    if "@" in case:
        case, factor = case.split("@")
        scale *= float(factor)
    if case == "pd-tp4":  # the pd case on two servers of tp-4 instances: 4 flows per handoff
        pool = "systems.pd.pools.h20"
        return scenario_for("pd", {"scale": scale}).with_changes(
            {f"{pool}.nodes": 2, f"{pool}.instance.tp": 4, f"{pool}.roles": {"prefill": 2, "decode": 2}})
    if case in ("prewarm", "remote"):
        name, rate = ("l20-pool", "1/s") if case == "prewarm" else ("h20-pool", "8/s")
        plan = kvsim.load_scenario(HERE.parent / "scenarios" / "plan_offload.yaml")
        return plan.with_changes({"systems": {name: plan.raw["systems"][name]}, "plan": None,
                                  "workload.arrival.rate": rate, "duration": 240 * scale, "warmup": 60 * scale})
    return scenario_for(case, {"scale": scale, "capacity_per_s": capacity})


def system_points(scenario: kvsim.Scenario):
    """``(point, system name, one-system point)`` for every system at every point."""
    for point in scenario.points:
        for name in point.spec.systems:
            alone = point.spec.model_copy(update={"systems": {name: point.spec.systems[name]}})
            yield point, name, ScenarioPoint(point.index, point.params, alone, point.catalogs)


def measure_point(scenario: kvsim.Scenario, point: ScenarioPoint, repeat: int = 1, earlier: dict | None = None) -> dict:
    """Run every system of ``point`` (``run_point``: requests drawn once) ``repeat`` times; the
    least CPU time, the requests simulated and the model's estimate of the same run. ``earlier``
    (a row of an earlier run) gives the measurement instead of running."""
    if earlier is not None:
        measured = {k: earlier[k] for k in ("cpu_s", "cpu_s_all", "requests", "iterations")}
    else:
        cpu = []
        for _ in range(repeat):
            start = time.process_time()
            runs = run_point(scenario, point)
            cpu.append(time.process_time() - start)
        measured = {"cpu_s": min(cpu), "cpu_s_all": cpu, "requests": int(sum(r.records.n for r in runs)),
                    "iterations": int(sum(r.iterations for r in runs))}
    shape = workload_shape(scenario, point, point_requests(scenario, point))
    counts, _ = point_cost(scenario, point, shape)
    return {**measured, "counts": counts.as_dict(), "estimate_cpu_s": counts.cpu_s(),
            "estimate_requests": counts.request}


def machine_text() -> str:
    """Where the rates were measured (the speed report's description of the machine)."""
    where = machine()
    return f"kvsim commit {where['commit']}, Python {where['python']}, {where['cpu']}"


def fit(rows: list[dict]) -> dict[str, float]:
    """Non-negative least squares of measured CPU-s on the path counts, relative errors."""
    a = np.array([[row["counts"][p] for p in PATHS] for row in rows], dtype=float)
    b = np.array([row["cpu_s"] for row in rows], dtype=float)
    w = 1.0 / np.maximum(b, 1e-3)
    scale = np.maximum(np.abs(a * w[:, None]).max(axis=0), 1e-30)  # columns of comparable size
    x, _ = nnls(a * w[:, None] / scale, b * w)
    return {p: float(v / s) for p, v, s in zip(PATHS, x, scale)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--capacity", type=float, default=3.55, help="ladder saturation per instance, requests/s")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--reuse", type=Path, help="a --json file of an earlier run at the same --scale: its "
                        "measurements are kept (nothing runs), the model's counts recomputed and refitted")
    args = parser.parse_args(argv)
    earlier = {}
    if args.reuse:
        earlier = {(r["case"], r["system"]): r for r in json.loads(args.reuse.read_text(encoding="utf-8"))["rows"]}
    rows = []
    for case in args.only.split(","):
        scenario = case_scenario(case, args.scale, args.capacity)
        for point, name, alone in system_points(scenario):
            row = {"case": case, "system": name,
                   **measure_point(scenario, alone, args.repeat, earlier.get((case, name)))}
            rows.append(row)
            print(f"{case:18s} {name:16s} {row['requests']:7,d} requests {row['cpu_s']:8.3f} CPU-s", flush=True)
    rates = fit(rows)
    how = f"measurements of {args.reuse}" if args.reuse else f"best of {args.repeat}"
    print(f"\nfitted on {len(rows)} runs ({machine_text()}, --scale {args.scale}, {how}):")
    print(f"{'case':18s} {'system':16s} {'measured':>9s} {'fitted':>9s} {'ratio':>6s}")
    for row in rows:
        fitted = sum(row["counts"][p] * rates[p] for p in PATHS)
        print(f"{row['case']:18s} {row['system']:16s} {row['cpu_s']:9.3f} {fitted:9.3f} {fitted / row['cpu_s']:6.2f}")
    print("\nrates (CPU-s per unit) for kvsim/plan/cost_rates.py:")
    for p in PATHS:
        print(f'    "{p}": {rates[p]:.3g},')
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine_text(), "scale": args.scale, "rows": rows,
                                         "rates": rates}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
