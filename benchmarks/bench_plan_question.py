"""Time to answer issue 25's four-candidate question, and whether a longer window confirms it.

The question (docs/planning.md's quick-mode example): Qwen3-8B at 40 requests/s, 8,192-token
prompts of which 7,168 are a shared prefix, 200-token answers, TTFT p99 <= 2 s and TPOT p99 <=
100 ms; the cheapest of an H20 server, an L20 server, an L20 server with a 512 GiB host-DRAM tier
and an L20 server with a remote NVMe KV pool node. It runs ``kvsim plan`` in quick mode exactly as
a user would (a child process, ``--workers`` local processes, default 2), into a temporary folder,
and reports:

- wall seconds of the whole plan (the child and its worker processes), the seconds at which it
  printed the answer (before the sensitivity re-plans of what the answer hinges on), and the
  probes it ran (``plan.json``);
- each candidate's unit count at the target, and the check a sceptical planner would make: the
  deciding count and one fewer re-run with the probe's window doubled (duration and warm-up x2),
  judged by the same SLO verdict. "confirmed" means the count meets the SLO and one fewer does not,
  with the longer window too.

Issue 25's target: the answer in <= 3 minutes on 2 cores with the pure-Python engine, <= 60 s with
the compiled one, with capacities a longer-window re-run confirms. CPU and wall seconds depend on
what else the machine runs: the script prints the load average before and after.

Usage: ``python benchmarks/bench_plan_question.py [--workers N] [--backend compiled|python]
[--no-confirm] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUESTION = ["--model", "qwen3-8b", "--target", "40/s", "--slo", "ttft_p99=2s,tpot_p99=100ms",
            "--prompt-tokens", "8192", "--shared-prefix-tokens", "7168", "--output-tokens", "200",
            "--candidates", "h20-8x,l20-8x,l20-8x+dram=512GiB,l20-8x+pool=nvme-storage-16x"]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ask(out: Path, workers: int, backend: str) -> dict:
    """Run the question in a child ``kvsim plan`` and return its wall time and its answer (``cpu_s``
    counts only the processes the child reaped: not its pool's workers)."""
    env = {**os.environ, "KVSIM_BACKEND": backend}
    command = [sys.executable, "-c", "import sys; from kvsim.cli import main; sys.exit(main(sys.argv[1:]))", "plan",
               *QUESTION, "--out", str(out), "--workers", str(workers)]
    cpu0, wall0 = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall_s, cpu_s = time.perf_counter() - wall0, _children_cpu_s() - cpu0
    if done.returncode != 0:
        sys.exit(f"kvsim plan failed ({done.returncode}):\n{done.stderr}")
    answer = json.loads((out / "plan.json").read_text())
    # the progress line that says the answer before the sensitivity re-plans: "[  93.1 s] answer, ..."
    early = [line for line in done.stderr.splitlines() if "] answer, before what it hinges on" in line]
    answer_s = float(early[0].split("]")[0].strip("[ s")) if early else None
    return {"wall_s": wall_s, "cpu_s": cpu_s, "answer": answer, "printed": done.stdout, "answer_s": answer_s}


def confirm(out: Path, answer: dict) -> list[dict]:
    """Re-run each candidate's deciding count, and one fewer, with the window doubled."""
    import kvsim
    from kvsim.plan.planner import Probe, run_probe
    from kvsim.plan.slo import objectives_from_slo

    scenario = kvsim.load_scenario(out / "scenario.yaml")
    longer = scenario.with_changes({"duration": 2 * scenario.spec.duration, "warmup": 2 * scenario.spec.warmup})
    objectives = objectives_from_slo(scenario.spec.slo)
    target = float(scenario.spec.plan.targets[0])
    checks = []
    for candidate in answer["candidates"]:
        units = _units_at(candidate, target)
        row: dict = {"system": candidate["system"], "units": units}
        if units is not None:
            meets = run_probe(longer, Probe(candidate["system"], units, target), objectives)
            row["meets_longer"] = meets.meets
            row["fewer_meets_longer"] = (run_probe(longer, Probe(candidate["system"], units - 1, target), objectives).meets
                                         if units > 1 else False)
            row["confirmed"] = meets.meets and not row["fewer_meets_longer"]
        checks.append(row)
    return checks


def _units_at(candidate: dict, target: float) -> int | None:
    for entry in candidate["targets"]:
        if abs(float(entry["load"]) - target) <= 1e-9 * target:
            return entry["units"]
    raise SystemExit(f"plan.json has no unit count of {candidate['system']} at {target:g}/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--backend", choices=["compiled", "python"], default="compiled")
    parser.add_argument("--no-confirm", action="store_true", help="skip the longer-window re-runs")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kvsim-question-") as folder:
        out = Path(folder) / "plan"
        asked = ask(out, args.workers, args.backend)
        answer = asked["answer"]
        probes = len(answer.get("probes", []))
        early = "" if asked["answer_s"] is None else f"the answer at {asked['answer_s']:.1f} s, "
        print(f"{args.backend}, {args.workers} worker(s): {early}{asked['wall_s']:.1f} s wall in all, {probes} probes "
              f"(and {len((answer.get('sensitivity') or {}).get('probes') or [])} sensitivity probes)")
        print(next((line for line in asked["printed"].splitlines() if line.startswith("Serving")), "(no answer line)"))
        checks = [] if args.no_confirm else confirm(out, answer)
    load_after = os.getloadavg()
    for row in checks:
        if row["units"] is None:
            print(f"  {row['system']}: no unit count serves the target")
        else:
            print(f"  {row['system']}: {row['units']} units; window x2: {row['units']} "
                  f"{'meets' if row['meets_longer'] else 'FAILS'}, {row['units'] - 1} "
                  f"{'MEETS' if row['fewer_meets_longer'] else 'fails'} -> "
                  f"{'confirmed' if row['confirmed'] else 'NOT confirmed'}")
    print(f"load average (1/5/15 min): before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"backend": args.backend, "workers": args.workers, "wall_s": asked["wall_s"],
                                         "answer_s": asked["answer_s"], "cpu_s": asked["cpu_s"], "probes": probes, "checks": checks,
                                         "load_before": load_before, "load_after": load_after}, indent=1) + "\n")


if __name__ == "__main__":
    main()
