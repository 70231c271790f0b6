"""kvsim's speed report (issue 23): every case with both engine backends, the measured figures and
issue 23's targets judged per backend.

Run on demand (not part of the test suite), from the repository root; run nothing else heavy
beside it (each case runs alone, in its own process, on one core):

    .venv/bin/python benchmarks/speed.py [--only rr_conv_80,ladder,offload,mooncake,domains,pd,plan]
        [--backends python,compiled] [--million] [--scale 1.0] [--capacity 3.55] [--repeat 1]
        [--instructions [CASES]] [--instructions-scale 0.05] [--out docs/speed.md]
        [--json results/speed.json] [--baseline benchmarks/speed_baseline.json]

The cases are described in ``speed_cases.py``: rr_conv_80 (splitwise-sim's workload), the
cluster ladder (8 to 1,024 cards), the offload tiers against no cache, the Mooncake case, the
whole ``domains_128`` scenario, a PD case and ``plan_offload``'s planning question (the baseline
and its four alternatives); ``--million`` adds a million requests on 1,024 cards. Each case runs
once per backend of ``--backends`` (``KVSIM_BACKEND`` set in its process; default both, the
compiled one only where it is built). For each it prints and tabulates simulated requests per
CPU-second, the whole process's CPU time, simulated seconds per wall-second and per process
CPU-second, SimPy events per request, engine iterations and peak memory (``speed_measure.py``
defines them), and judges the targets of issue 23 per backend (``speed_report.py``):

- rr_conv_80 >= 30x splitwise-sim's CPU time (splitwise-sim is not installed here: its CPU time
  is derived from the issue's side-by-side figure, ``speed_cases.SPLITWISE_RR_CONV_80_CPU_S``)
  and >= 300x real time per whole-process CPU second;
- offload tiers + flows <= 1.5x the CPU time of no cache on the same requests;
- ``domains_128`` >= 20x the issue's 478 CPU-s (per request, so a shortened run compares too);
- Mooncake >= 10x the requests per CPU-second of ``--baseline``, with the same answers;
- requests per CPU-second falls < 2x from 8 to 1,024 cards; memory <= 1 GiB per million
  requests including writing the records (judged on ``--million``).

``--scale`` multiplies the simulated durations (targets are for 1.0). ``--capacity`` gives the
ladder's saturation throughput per instance (requests/s) instead of probing it. ``--instructions``
also counts each case's instructions with callgrind (``instructions.py``: the run at
``--instructions-scale`` less a near-empty one; a minute or more per case and backend, so a
comma-separated subset of cases may be named; the plan case is not counted). ``--out`` writes
the Markdown report: into a file holding ``<!-- speed-table -->`` ... ``<!-- /speed-table -->`` it
replaces the lines between them, otherwise it writes the whole file. ``--json`` saves the raw
measurements; ``--render`` reports saved ones without running; a saved file given as
``--baseline`` adds "x baseline" and "same answers" columns.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from speed_cases import GROUPS, ON_REQUEST, probe_capacity, scenario_for  # noqa: E402
from speed_measure import machine, measure, measure_plan, process_cpu_s, summary_line  # noqa: E402
from speed_report import Results, report, table, targets, write_out  # noqa: E402,F401  (targets, table: for the tests)

BACKENDS = ("python", "compiled")
NOT_COUNTED = ("plan",)
"""Cases ``--instructions`` skips: the plan's probes are runs like the other cases'."""


def run_case(case: str, params: dict[str, Any], repeat: int = 1, backend: str | None = None) -> dict[str, Any]:
    """Measure ``case`` in a fresh Python process (so its peak memory is its own) on ``backend``
    (None: as ``auto`` resolves), ``repeat`` times: the run with the least CPU time, with all its
    figures (on a shared machine the others carry noise, not the code's cost). Every run must
    give the same records."""
    runs = [_run_once(case, params, backend) for _ in range(repeat)]
    digests = {run["records_digest"] for run in runs}
    if len(digests) > 1:
        raise SystemExit(f"speed.py: case {case} gave different records in {repeat} runs: not deterministic")
    if backend is not None and any(run.get("backend", backend) != backend for run in runs):
        raise SystemExit(f"speed.py: case {case} was asked to run on {backend} but ran on "
                         f"{', '.join(sorted({run['backend'] for run in runs}))}")
    best = min(runs, key=lambda run: run["cpu_s"])
    best["runs"] = repeat
    best["cpu_s_all"] = [run["cpu_s"] for run in runs]
    return best


def _run_once(case: str, params: dict[str, Any], backend: str | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    if backend is not None:
        env["KVSIM_BACKEND"] = backend
    # The whole-process figure is a user's start-up: Python writes each module's bytecode once and
    # then reads it, unless told not to (some sandboxes and CI images set this, and every process
    # then compiles kvsim's sources again: about 0.2 CPU-s). An import first writes the cache.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-c", "import kvsim, kvsim.report, kvsim.plan.command"], env=env, check=True)
    with tempfile.TemporaryDirectory(prefix="kvsim-speed-") as folder:
        out = Path(folder) / "result.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--child-case", case,
                   "--child-params", json.dumps(params), "--child-out", str(out)]
        done = subprocess.run(command, env=env)
        if done.returncode != 0:
            raise SystemExit(f"speed.py: case {case} failed (exit {done.returncode})")
        return json.loads(out.read_text())


def _child(case: str, params: dict[str, Any], out: Path) -> None:
    gc.disable()  # as `kvsim run` loads: no collector passes over what loading makes (measure() freezes it)
    scenario = scenario_for(case, params)
    result = measure_plan(scenario) if case == "plan" else measure(scenario)
    # the whole process, read last: start-up, imports, loading, the run, writing the result files
    result.update({"case": case, "params": params, "process_cpu_s": process_cpu_s()})
    out.write_text(json.dumps(result))


def _print_case(m: dict[str, Any]) -> None:
    print(f"  {m['case']} [{m.get('backend', '?')}]: {summary_line(m)}", flush=True)
    if m.get("runs", 1) > 1:
        print(f"    (least CPU time of {m['runs']} runs: {', '.join(f'{t:.1f}' for t in m['cpu_s_all'])} CPU-s)",
              flush=True)
    if m.get("write_note"):
        print(f"    (writing the result files: {m['write_note']})", flush=True)
    if m.get("instructions"):
        print(f"    ({m['instructions']['count'] / 1e9:.3f} G instructions at --scale "
              f"{m['instructions']['scale']:g})", flush=True)


def by_backend(cases: list[dict[str, Any]]) -> Results:
    """Saved measurements (a --json file's ``cases``) as backend -> case -> measurement; those
    saved before backends were named ran the pure-Python engine."""
    results: Results = {}
    for m in cases:
        results.setdefault(m.get("backend", "python"), {})[m["case"]] = m
    return results


def _render(args: argparse.Namespace, baseline: dict[str, dict[str, Any]] | None) -> None:
    """Report saved measurements (``--render`` files, merged in order) without running anything."""
    results: Results = {}
    commands, saved = [], {}
    for path in args.render:
        saved = json.loads(path.read_text())
        for backend, cases in by_backend(saved["cases"]).items():
            results.setdefault(backend, {}).update(cases)
        commands.append(f"`{saved['command']}`")
    scales = {json.loads(path.read_text())["scale"] for path in args.render}
    if len(scales) > 1:
        raise SystemExit(f"speed.py: --render files were measured at different --scale values: {sorted(scales)}")
    text = report(results, baseline, " and ".join(commands), scales.pop(), saved.get("capacity_per_s"),
                  saved.get("probed", True), saved["machine"], saved.get("load"))
    print(text)
    if args.out is not None:
        write_out(args.out, text)
        print(f"wrote {args.out}")


def _cases(only: str | None, million: bool) -> list[str]:
    groups = [g for g in GROUPS if g not in ON_REQUEST] if only is None else [g.strip() for g in only.split(",")]
    unknown = [g for g in groups if g not in GROUPS and not any(g in cases for cases in GROUPS.values())]
    if unknown:
        raise SystemExit(f"speed.py: unknown case(s) {', '.join(unknown)}; groups: {', '.join(GROUPS)}, "
                         f"cases: {', '.join(c for cases in GROUPS.values() for c in cases)}")
    cases = [c for g in groups for c in GROUPS.get(g, [g])]
    if million and "million" not in cases:
        cases.append("million")
    return cases


def backends_to_run(choice: str) -> list[str]:
    """The backends of ``--backends`` (comma-separated); the compiled one is left out, with a
    warning, where it is not built (the report then has the reference alone)."""
    from kvsim.backend import compiled_problem

    asked = [b.strip() for b in choice.split(",") if b.strip()]
    unknown = [b for b in asked if b not in BACKENDS]
    if unknown or not asked:
        raise SystemExit(f"speed.py: --backends takes {' and/or '.join(BACKENDS)}, not {choice!r}")
    problem = compiled_problem()
    if "compiled" in asked and problem is not None:
        print(f"speed.py: warning: the compiled backend cannot run here ({problem}): measuring python only",
              file=sys.stderr)
        asked = [b for b in asked if b != "compiled"]
    if not asked:
        raise SystemExit("speed.py: no backend to measure")
    return list(dict.fromkeys(asked))


def _load() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _count_instructions(results: Results, chosen: str, scale: float, capacity: float | None) -> None:
    """Add each chosen case's callgrind count (``instructions.run_instructions``) to its measurement."""
    import instructions

    for backend, cases in results.items():
        for case, m in cases.items():
            if case in NOT_COUNTED or case == "probe" or (chosen != "all" and case not in chosen.split(",")):
                continue
            count = instructions.run_instructions(instructions.REPO, case, scale, capacity or 3.55, backend=backend)
            m["instructions"] = {"count": count, "scale": scale}
            print(f"  {case} [{backend}]: {count / 1e9:.3f} G instructions at --scale {scale:g}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help=f"comma-separated groups or cases (groups: {', '.join(GROUPS)})")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated engine backends to measure")
    parser.add_argument("--million", action="store_true", help="also run 1 M requests on 1,024 cards")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply simulated durations (0.1 = a quick look)")
    parser.add_argument("--capacity", type=float, default=None,
                        help="saturation throughput of one ladder instance, requests/s (default: probe it)")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    parser.add_argument("--json", type=Path, default=None, help="save the raw measurements here")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each case this many times (each in its own process) and keep the run with the "
                             "least CPU time")
    parser.add_argument("--instructions", nargs="?", const="all", default=None,
                        help="also count instructions with callgrind (all cases, or the comma-separated ones named)")
    parser.add_argument("--instructions-scale", type=float, default=0.05,
                        help="the scale the instructions are counted at (default 0.05)")
    parser.add_argument("--baseline", type=Path, action="append", default=None,
                        help="raw measurements (--json) to compare with; give it again to add more cases")
    parser.add_argument("--render", type=Path, action="append", default=None,
                        help="run nothing: report saved measurements (--json files; give it again to merge)")
    parser.add_argument("--child-case", help=argparse.SUPPRESS)
    parser.add_argument("--child-params", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_case:
        _child(args.child_case, json.loads(args.child_params), args.child_out)
        return
    if not args.scale > 0:
        parser.error("--scale must be positive")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    baseline, baseline_capacity = None, None
    for path in args.baseline or []:
        saved = json.loads(path.read_text())
        baseline_capacity = baseline_capacity or saved.get("capacity_per_s")
        baseline = {**(baseline or {}), **{m["case"]: m for m in saved["cases"]}}
        if saved["scale"] != args.scale:
            print(f"speed.py: warning: {path} was measured at --scale {saved['scale']:g}, not "
                  f"{args.scale:g}: its cases ran other requests", file=sys.stderr)
    if args.render:
        _render(args, baseline)
        return
    cases = _cases(args.only, args.million)
    backends = backends_to_run(args.backends)
    command = "python benchmarks/speed.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"kvsim speed report: {', '.join(cases)} on {', '.join(backends)}", flush=True)
    if "rr_conv_80" in cases:  # generate the trace here, not inside a measured process
        from speed_cases import rr_conv_80_scenario

        rr_conv_80_scenario()
    results: Results = {b: {} for b in backends}
    capacity, probed, probe = args.capacity, False, None
    started = time.perf_counter()
    loads = [_load()]
    if capacity is None and any(c.startswith("ladder-") or c == "million" for c in cases):
        probe = run_case("probe", {}, 1, backends[0])  # the same requests/s on every backend
        capacity, probed = probe_capacity(probe), True
        if baseline_capacity not in (None, capacity):
            print(f"speed.py: warning: the probe gives {capacity:g} requests/s per instance, the baseline used "
                  f"{baseline_capacity:g}: pass --capacity {baseline_capacity:g} to run the same requests",
                  file=sys.stderr)
        print(f"  probe: one instance saturates at {capacity:g} requests/s ({probe['cpu_s']:.1f} CPU-s)", flush=True)
    for case in cases:
        params: dict[str, Any] = {"scale": args.scale}
        if case.startswith("ladder-") or case == "million":
            params["capacity_per_s"] = capacity
        for backend in backends:
            results[backend][case] = run_case(case, params, args.repeat, backend)
            _print_case(results[backend][case])
        loads.append(_load())
    if args.instructions:
        _count_instructions(results, args.instructions, args.instructions_scale, capacity)
    where = machine()
    load = f"1/5/15-minute averages {loads[0]} at the start, {loads[-1]} at the end (2 cores)"
    text = report(results, baseline, f"`{command.strip()}`", args.scale, capacity, probed, where, load)
    print()
    print(text)
    print(f"\n({time.perf_counter() - started:.0f} s in all)")
    if args.out is not None:
        write_out(args.out, text)
        print(f"wrote {args.out}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": where, "command": command.strip(), "scale": args.scale,
                                         "capacity_per_s": capacity, "probed": probed, "load": load,
                                         "backends": backends, "probe": probe,
                                         "cases": [m for cases in results.values() for m in cases.values()]},
                                        indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
