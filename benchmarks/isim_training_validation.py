"""kvsim's datasheet predictions against the 16 inference-sim/training H100 runs (nothing fitted).

    .venv/bin/python benchmarks/isim_training_validation.py [--csv benchmarks/data/isim_training_h100_runs.csv]
        [--runs ID,ID,...] [--client-timeout 300] [--json out.json] [--from-json out.json]

Each run of ``benchmarks/data/isim_training_h100_runs.csv`` is simulated at full length, one at a
time, by :func:`kvsim.calibration.runs.predict_run` with no calibration values (catalog and
datasheet figures only). Errors are ``predicted / measured - 1``. Prints, per run and overall,
the error of TTFT mean / p90 / p99, TPOT mean and E2E mean, and the median |error| and the signed
median per metric: over all runs, and over the 13 runs that are not overloaded (the three
reasoning runs whose requests mostly failed at inference-perf's 300 s timeout, which kvsim does
not model). Also compares kvsim's KV blocks per instance with the ``gpu_kv_blocks`` the file
states. ``--json`` writes everything; ``--from-json`` reprints a written file without simulating.

``--client-timeout S`` is a what-if, not :func:`predict_run`: the same scenario with
``workload.timeout: S`` (each client gives up S s after sending, and vLLM aborts the request).
inference-perf's client as inference-sim ran it had one: its ``request_timeout`` is null in every
``results/config.yaml``, and the pinned build then hands aiohttp its default session timeout,
``ClientTimeout(total=300)`` (kubernetes-sigs/inference-perf@e8e0aa9
``inference_perf/client/modelserver/openai_client.py``: ``aiohttp.helpers.sentinel``); the failed
requests of the overloaded runs all ended at 300.0-301.0 s (``failures.request_latency``).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CSV = HERE / "data" / "isim_training_h100_runs.csv"
METRICS = ("ttft_mean_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s", "e2e_mean_s")
OVERLOAD = 0.01
"""A run whose failed requests exceed this share of those sent is overloaded (reported apart)."""


def predict(run, timeout: float | None) -> tuple[dict[str, float], dict]:
    """kvsim's datasheet prediction of ``run`` (the scenario :func:`predict_run` simulates; with
    ``timeout``, its clients give up after that many seconds) and the request counts: one
    simulation."""
    from kvsim.calibration.runs import SUMMARY_COLUMNS, run_scenario
    from kvsim.sim import run_scenario as simulate

    scenario = run_scenario(run)
    if timeout is not None:
        scenario = scenario.with_changes({"workload.timeout": timeout})
    row = simulate(scenario).summary_frame().iloc[0]
    counts = {k: int(row[k]) for k in ("requests_arrived", "requests_aborted", "requests_undrained")}
    return {m: float(row[SUMMARY_COLUMNS[m]]) for m in METRICS}, counts


def evaluate(path: Path, only: set[str] | None, timeout: float | None = None) -> dict:
    from kvsim.calibration.measurements import read_measurements
    from kvsim.calibration.memory_check import kv_capacity_rows

    measurements = read_measurements(path)
    blocks = {r["run"]: (r["vllm_blocks"], r["kvsim_blocks"]) for r in kv_capacity_rows(path)}
    with path.open(encoding="utf-8", newline="") as handle:
        cells = {row["exp_id"]: row for row in csv.DictReader(handle)}
    rows = []
    for run in measurements.runs:
        if only and run.run_id not in only:
            continue
        row = cells[run.run_id]
        sent, failed = int(float(row["num_requests"])), int(float(row["num_failed"] or 0))
        start = time.perf_counter()
        predicted, counts = predict(run, timeout)
        if timeout is None and not failed:
            counts = {}  # the counts matter where the measured run lost requests
        seconds = time.perf_counter() - start
        stated, ours = blocks.get(run.run_id, (None, None))
        entry = {
            "run": run.run_id, "model": run.model, "tp": run.tp, "workload": run.workload,
            "overloaded": failed > OVERLOAD * sent, "failed": failed, "sent": sent,
            "measured": {m: run.measured[m] for m in METRICS}, "predicted": {m: predicted[m] for m in METRICS},
            "error": {m: (predicted[m] / run.measured[m] - 1.0) if run.measured[m] else None for m in METRICS},
            "kv_blocks": {"stated": stated, "kvsim": ours, "error": (ours / stated - 1.0) if stated and ours else None},
            "simulated_s": round(seconds, 1), "kvsim_counts": counts,
        }
        rows.append(entry)
        print(f"  simulated {run.label} in {seconds:.0f} s", file=sys.stderr, flush=True)
    shown = path.resolve().relative_to(HERE.parent) if path.resolve().is_relative_to(HERE.parent) else path
    return {"csv": str(shown), "sha256": measurements.sha256, "values": "datasheet (none fitted)",
            "client_timeout_s": timeout,
            "error": "predicted / measured - 1", "runs": rows, "summary": summarise(rows)}


def summarise(rows: list[dict]) -> dict:
    out = {}
    for name, subset in (("all", rows), ("not_overloaded", [r for r in rows if not r["overloaded"]])):
        out[name] = {"n": len(subset)}
        for m in METRICS:
            errs = [r["error"][m] for r in subset if r["error"][m] is not None]
            out[name][m] = {"median_abs": statistics.median(abs(e) for e in errs) if errs else None,
                            "median_signed": statistics.median(errs) if errs else None}
        kv = [r["kv_blocks"]["error"] for r in subset if r["kv_blocks"]["error"] is not None]
        out[name]["kv_blocks"] = {"median_abs": statistics.median(abs(e) for e in kv) if kv else None,
                                  "median_signed": statistics.median(kv) if kv else None}
    return out


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f} %"


def report(result: dict) -> None:
    short = {"ttft_mean_s": "TTFT mean", "ttft_p90_s": "TTFT p90", "ttft_p99_s": "TTFT p99",
             "tpot_mean_s": "TPOT mean", "e2e_mean_s": "E2E mean"}
    timeout = result.get("client_timeout_s")
    what = "" if timeout is None else f", what-if: clients give up after {timeout:g} s"
    print(f"kvsim datasheet predictions vs {result['csv']} (error = predicted / measured - 1{what})\n")
    print("| run | model | tp | workload | " + " | ".join(short[m] for m in METRICS) + " | KV blocks |")
    print("|---|---|---:|---|" + "---:|" * (len(METRICS) + 1))
    for r in result["runs"]:
        flag = ""
        if r["overloaded"]:
            aborted = r.get("kvsim_counts", {}).get("requests_aborted")
            flag = f" (overload: {r['failed']:,} failed" + ("" if aborted is None else f", kvsim {aborted:,}") + ")"
        print(f"| {r['run']} | {r['model'].split('/')[-1]} | {r['tp']} | {r['workload']}{flag} | "
              + " | ".join(pct(r["error"][m]) for m in METRICS) + f" | {pct(r['kv_blocks']['error'])} |")
    print()
    for name, s in result["summary"].items():
        print(f"{name} ({s['n']} runs): median |error| / signed median")
        for m in METRICS:
            print(f"  {short[m]:<10} {pct(s[m]['median_abs']).lstrip('+'):>9} / {pct(s[m]['median_signed']):>9}")
        print(f"  {'KV blocks':<10} {pct(s['kv_blocks']['median_abs']).lstrip('+'):>9} / "
              f"{pct(s['kv_blocks']['median_signed']):>9}")
    print("\nKV blocks per instance: kvsim (catalog, memory_utilization 0.9) / stated")
    for r in result["runs"]:
        k = r["kv_blocks"]
        stated = "-" if k["stated"] is None else f"{k['stated']:.0f}"
        ours = "-" if k["kvsim"] is None else str(k["kvsim"])
        print(f"  {r['run']} {r['model'].split('/')[-1]:<26} {ours:>7} / {stated:>7}  {pct(k['error'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--csv", type=Path, default=CSV)
    parser.add_argument("--runs", default="", help="comma-separated exp_ids (default: all)")
    parser.add_argument("--client-timeout", type=float, help="what-if: clients give up after this many seconds")
    parser.add_argument("--json", type=Path, help="write the predictions, errors and medians here")
    parser.add_argument("--from-json", type=Path, help="reprint a file --json wrote, without simulating")
    args = parser.parse_args(argv)
    if args.from_json:
        result = json.loads(args.from_json.read_text(encoding="utf-8"))
    else:
        result = evaluate(args.csv, {r for r in args.runs.split(",") if r} or None, args.client_timeout)
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
