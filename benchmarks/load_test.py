"""Load test (issue 22): ``kvsim run`` as a user runs it, on 1,024 cards and about a million requests.

Run on demand (not part of the test suite), from the repository root, with nothing else heavy
beside it:

    .venv/bin/python benchmarks/load_test.py [--requests 1000000] [--capacity 3.55]
        [--out benchmarks/load_test.md] [--json benchmarks/load_test.json] [--keep DIR]

It writes the 1,024-card rung of the speed ladder (``ladder.yaml``: Qwen3-8B, one H20 per
instance, 128 servers, Poisson arrivals at 70 % of ``--capacity`` requests/s per instance, Azure
conversation lengths) for as long as it takes about ``--requests`` requests to arrive, and runs
the command line on it in a child process, exactly as a planner would: default watchdog, the
records written (``requests.parquet`` and every other result file) and the report rendered. It
reports the wall time, the child's CPU time and peak resident set (``getrusage(RUSAGE_CHILDREN)``),
the size of the results folder, and the checks:

- the command exits 0 (an exit of 3 with "watchdog" in its report would mean the watchdog fired
  on a healthy run: its event-count and stall limits must scale with the run);
- ``summary.json`` and ``requests.parquet`` are there, and the records agree with the summary
  (the rows of ``requests.parquet`` arriving in the window are the summary's ``requests_arrived``).

``--capacity`` is the saturation throughput of one instance that ``speed.py`` probes (3.55
requests/s at kvsim 0.1.0); the rate is ``0.7 x capacity x 1,024``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CARDS = 1024
CARDS_PER_NODE = 8
LOAD = 0.7
GIB = 2**30


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _revision() -> str:
    """``kvsim 0.1.0, commit abc1234`` (the commit when run from a git checkout)."""
    from kvsim import __version__

    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return f"kvsim {__version__}" + (f", commit {done.stdout.strip()}" if done.returncode == 0 else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000, help="requests to arrive (about)")
    parser.add_argument("--capacity", type=float, default=3.55, help="saturation requests/s of one instance")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown report here")
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here")
    parser.add_argument("--keep", type=Path, default=None, help="keep the results folder here")
    args = parser.parse_args(argv)
    rate = LOAD * args.capacity * CARDS
    duration = args.requests / rate
    work = Path(tempfile.mkdtemp(prefix="kvsim-load-"))
    out = args.keep if args.keep is not None else work / "results"
    command = [sys.executable, "-m", "kvsim.cli", "run", str(HERE / "ladder.yaml"), "--out", str(out),
               "--no-progress", "--workers", "1",
               "--set", f"systems.h20.nodes={CARDS // CARDS_PER_NODE}",
               "--set", f"workload.arrival.rate={rate:.6g}/s",
               "--set", f"duration={duration:.6g} s", "--set", f"warmup={duration / 6:.6g} s"]
    print("running: " + " ".join(command[2:]), file=sys.stderr, flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall_s = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    checks = {"exit 0": done.returncode == 0, "no watchdog report": "watchdog" not in done.stderr.lower()}
    requests_rows = arrived = None
    if (out / "summary.json").is_file() and (out / "requests.parquet").is_file():
        import pyarrow.parquet as pq

        summary = json.loads((out / "summary.json").read_text())
        system = summary["points"][0]["systems"]["h20"]
        arrived = system["requests_arrived"]
        arrival_s = pq.read_table(out / "requests.parquet", columns=["arrival_s"]).column(0).to_numpy()
        requests_rows = len(arrival_s)
        start_s, end_s = system["window"]["start_s"], system["window"]["end_s"]
        in_window = int(((arrival_s >= start_s) & (arrival_s < end_s)).sum())
    checks["summary.json and requests.parquet written"] = requests_rows is not None
    # the summary's arrivals in the window are the written records' arrivals in it
    checks["records agree with the summary"] = requests_rows is not None and in_window == arrived
    measured = {
        "command": "kvsim " + " ".join(command[3:]).replace(str(out), "OUT").replace(str(HERE), "benchmarks"),
        "rate_per_s": rate, "duration_s": duration, "requests_arrived": arrived, "requests_rows": requests_rows,
        "wall_s": wall_s, "cpu_s": (usage.ru_utime + usage.ru_stime) - (before.ru_utime + before.ru_stime),
        "peak_rss_bytes": usage.ru_maxrss * 1024,  # KiB on Linux; the largest child of this process
        "results_bytes": _folder_bytes(out) if out.is_dir() else 0, "exit": done.returncode,
        "checks": checks, "stderr_tail": done.stderr.splitlines()[-8:],
    }
    measured["revision"] = _revision()
    lines = [f"# Load test: {CARDS:,} cards, {requests_rows or 0:,} requests through `kvsim run`", "",
             f"Measured at {measured['revision']} on {os.cpu_count()} cores "
             f"(`benchmarks/load_test.py`; wall time depends on what else runs).", "",
             f"`{measured['command']}`", "",
             "| measure | value |", "|---|---|",
             f"| requests simulated (in the window) | {requests_rows or 0:,} ({arrived or 0:,}) |",
             f"| simulated window | {duration:.0f} s at {rate:.0f} requests/s |",
             f"| wall time (load, simulate, write records and report) | {wall_s:.0f} s |",
             f"| CPU time | {measured['cpu_s']:.0f} s |",
             f"| peak resident set | {measured['peak_rss_bytes'] / GIB:.2f} GiB |",
             f"| results folder | {measured['results_bytes'] / 2**20:.0f} MiB |", "",
             "| check | |", "|---|---|", *[f"| {name} | {'yes' if ok else '**no**'} |" for name, ok in checks.items()]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    if args.json is not None:
        args.json.write_text(json.dumps(measured, indent=1) + "\n", encoding="utf-8")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    if not all(checks.values()):
        print("\n".join(measured["stderr_tail"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
