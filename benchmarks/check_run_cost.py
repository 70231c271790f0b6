"""Check ``kvsim validate``'s CPU-time estimate (kvsim/plan/run_cost.py) against measured runs of
every shipped scenario.

Run on demand (not part of the test suite), from the repository root, with nothing else heavy
beside it:

    .venv/bin/python benchmarks/check_run_cost.py [--backend compiled] [--scale 0.1]
        [--only domains_128,...] [--out docs/run_cost.md] [--json results/check_run_cost.json]

``--backend`` (``python`` or ``compiled``; default: the one ``engine.backend: auto`` runs here)
is the engine every point runs on and whose rates (``RATES[backend]``) the estimate uses; the
table goes between that backend's markers of ``--out``.

For each ``scenarios/*.yaml`` every point's duration and warm-up are multiplied by ``--scale``
(the sweep's own durations too); then a deterministic subset of the points runs -- all of them
when the sweep has at most ``MAX_ALL_POINTS``, else its first, middle and last point; only the
first of a scenario whose systems search their layout (``layout: best``) -- each point
with all its systems, in this process (``kvsim.sim.run.run_point``, as a sweep worker runs it:
requests drawn once per point). Measured: ``time.process_time()`` of the point. Estimated: the
cost model on the same scaled point (``kvsim.plan.run_cost.point_cost``). The table gives, per
scenario, requests and CPU-s measured and estimated and their ratio (estimate / measured); the
target is a ratio within [0.5, 2] on every scenario.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import kvsim  # noqa: E402
from cost_rates import machine_text, use_backend, write_between  # noqa: E402
from kvsim.plan.run_cost import point_cost, point_requests, workload_shape  # noqa: E402
from kvsim.scenario.load import ScenarioPoint  # noqa: E402
from kvsim.sim.run import run_point  # noqa: E402
from kvsim.workload.reuse import forget_document_chains  # noqa: E402

SCENARIOS = HERE.parent / "scenarios"
MAX_ALL_POINTS = 4
BACKENDS = ("python", "compiled")


def markers(backend: str) -> tuple[str, str]:
    """The lines of docs/run_cost.md between which ``backend``'s table goes."""
    return f"<!-- run-cost-table:{backend} -->", f"<!-- /run-cost-table:{backend} -->"


def chosen_points(scenario: kvsim.Scenario) -> list[int]:
    """Indices of the points checked: all of a small sweep, else first, middle and last; only the
    first when a system searches its layout (every point pilots every layout: minutes each)."""
    from kvsim.sim.layout_search import searches_layout

    n = len(scenario.points)
    first = scenario.points[0].spec
    if any(searches_layout(first, name) for name in first.systems):
        return [0]
    return list(range(n)) if n <= MAX_ALL_POINTS else sorted({0, n // 2, n - 1})


def scaled_point(point: ScenarioPoint, scale: float) -> ScenarioPoint:
    spec = point.spec
    return ScenarioPoint(point.index, point.params,
                         spec.model_copy(update={"duration": spec.duration * scale, "warmup": spec.warmup * scale}),
                         point.catalogs)


def check(path: Path, scale: float, measured: dict | None = None, backend: str = "python") -> dict:
    """Estimate and run the chosen points of the scenario at ``path`` (the estimate at ``backend``'s
    rates; the runs on whatever backend this process runs, see :func:`cost_rates.use_backend`);
    ``measured`` (point index -> a row of an earlier run at the same scale) supplies the
    measurement instead of running."""
    scenario = kvsim.load_scenario(path)
    rows = []
    for index in chosen_points(scenario):
        point = scaled_point(scenario.points[index], scale)
        shape = workload_shape(scenario, point, point_requests(scenario, point))
        counts, _ = point_cost(scenario, point, shape)
        if measured is not None and index in measured:
            cpu_s, requests = measured[index]["cpu_s"], measured[index]["requests"]
        else:
            forget_document_chains()  # (hashed once per process: each point starts as a new one would)
            start = time.process_time()
            runs = run_point(scenario, point)
            cpu_s = time.process_time() - start
            requests = int(sum(r.records.n for r in runs))
        rows.append({"point": index, "params": {k: str(v) for k, v in point.params.items()},
                     "systems": len(point.spec.systems), "requests": requests,
                     "estimate_requests": counts.request, "cpu_s": cpu_s, "estimate_cpu_s": counts.cpu_s(backend),
                     "counts": counts.as_dict()})
        print(f"  {path.stem} point {index}: {rows[-1]['requests']:,} requests in {cpu_s:.2f} CPU-s, "
              f"estimated {counts.request:,.0f} in {counts.cpu_s(backend):.2f}", flush=True)
    measured = sum(r["cpu_s"] for r in rows)
    estimated = sum(r["estimate_cpu_s"] for r in rows)
    return {"scenario": path.name, "points": len(scenario.points), "checked": [r["point"] for r in rows],
            "system_runs": sum(r["systems"] for r in rows), "requests": sum(r["requests"] for r in rows),
            "estimate_requests": sum(r["estimate_requests"] for r in rows), "cpu_s": measured,
            "estimate_cpu_s": estimated, "ratio": estimated / measured if measured else float("nan"), "rows": rows}


def table(results: list[dict], command: str, backend: str = "python") -> str:
    lines = [f"The {backend} backend: measured by `{command}` on {dt.date.today().isoformat()} "
             f"({machine_text()}; one process, "
             "one core). Each scenario's durations and warm-ups scaled; the points checked are all of a sweep "
             f"of up to {MAX_ALL_POINTS} points, else its first, middle and last (numbered from 0; only the first "
             "where systems search their layout), every system of each. Ratio = estimated / measured CPU-s (target: 0.5 to 2).", "",
             "| scenario | points checked | system runs | requests | estimated requests | CPU-s | estimated CPU-s "
             "| ratio |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        checked = ", ".join(str(i) for i in r["checked"]) + f" of {r['points']}"
        lines.append(f"| {r['scenario']} | {checked} | {r['system_runs']} | {r['requests']:,} | "
                     f"{r['estimate_requests']:,.0f} | {r['cpu_s']:.2f} | {r['estimate_cpu_s']:.2f} | {r['ratio']:.2f} |")
    worst = max(results, key=lambda r: max(r["ratio"], 1 / r["ratio"]))
    within = all(0.5 <= r["ratio"] <= 2.0 for r in results)
    lines += ["", f"Within 2x on every scenario: {'yes' if within else 'no'} (farthest: {worst['scenario']}, "
                  f"ratio {worst['ratio']:.2f})."]
    return "\n".join(lines)


def write_table(out: Path, text: str, backend: str = "python") -> None:
    """Replace the lines between ``backend``'s run-cost markers of ``out`` (appending them if missing)."""
    write_between(out, *markers(backend), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="engine backend to run and price (default: the one engine.backend: auto runs here)")
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--only", help="comma-separated scenario names (file stems)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--reuse", type=Path, help="a --json file of an earlier run at the same --scale: "
                        "its measurements are kept (nothing runs), the estimates recomputed")
    args = parser.parse_args(argv)
    paths = sorted(SCENARIOS.glob("*.yaml"))
    if args.only:
        paths = [p for p in paths if p.stem in args.only.split(",")]
    earlier = {}
    if args.reuse:
        saved = json.loads(args.reuse.read_text(encoding="utf-8"))
        # files written before backends were named hold a bare list of python runs
        backend = "python" if isinstance(saved, list) else saved["backend"]
        if args.backend not in (None, backend):
            parser.error(f"--reuse {args.reuse} was measured with the {backend} backend, not {args.backend}")
        earlier = {r["scenario"]: {row["point"]: row for row in r["rows"]}
                   for r in (saved if isinstance(saved, list) else saved["scenarios"])}
    else:
        backend = use_backend(args.backend)
    results = []
    for path in paths:
        results.append(check(path, args.scale, earlier.get(path.name), backend))
    command = "python benchmarks/check_run_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.reuse:
        command += " (the CPU-s measured by the run that wrote that file)"
    text = table(results, command.strip(), backend)
    print(text)
    if args.out:
        write_table(args.out, text, backend)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"backend": backend, "scale": args.scale, "scenarios": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
