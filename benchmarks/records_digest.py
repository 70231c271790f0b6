"""Records digests of the shipped scenarios and the speed cases: the check that a refactor kept
results ("Refactors keep results", DEVELOPERS.md).

    .venv/bin/python benchmarks/records_digest.py [--scale 0.05] [--json out.json] [--against base.json]
        [--only name ...]

Each shipped scenario (``scenarios/*.yaml``) runs with its durations and warm-ups multiplied by
``--scale`` (at most the first, middle and last point of a sweep; only the first where a system
searches its layout) and each speed case at the same scale; the records digest
(:meth:`kvsim.RunResult.records_digest`: every request record, bit for bit) is printed per
scenario with its CPU seconds. The backend is ``KVSIM_BACKEND``'s (``auto``: compiled where
built). ``--against`` compares with a JSON file written earlier by ``--json`` and exits 1 on any
difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import kvsim  # noqa: E402
from check_run_cost import chosen_points, scaled_point  # noqa: E402

SPEED_CASES = ("rr_conv_80", "mooncake", "offload-nocache", "offload-dram_nvme", "domains", "pd")


def scenario_digests(scale: float, only: set[str] | None) -> dict[str, dict]:
    from kvsim.sim.result import RunResult
    from kvsim.sim.run import run_point

    out = {}
    for path in sorted((HERE.parent / "scenarios").glob("*.yaml")):
        if only and path.stem not in only:
            continue
        scenario = kvsim.load_scenario(path)
        start = time.process_time()
        runs = []
        for index in chosen_points(scenario):
            runs.extend(run_point(scenario, scaled_point(scenario.points[index], scale)))
        digest = RunResult.from_runs(scenario, scenario.spec.seed, runs).records_digest()
        out[path.stem] = {"digest": digest, "cpu_s": round(time.process_time() - start, 2),
                          "requests": int(sum(r.records.n for r in runs))}
        print(f"{path.stem:28s} {out[path.stem]['digest'][:16]} {out[path.stem]['cpu_s']:8.2f} CPU-s "
              f"{out[path.stem]['requests']:>8,} requests", flush=True)
    return out


def case_digests(scale: float, only: set[str] | None) -> dict[str, dict]:
    import speed_cases

    out = {}
    for case in SPEED_CASES:
        if only and case not in only:
            continue
        start = time.process_time()
        result = kvsim.run(speed_cases.scenario_for(case, {"scale": scale, "capacity_per_s": 3.55}))
        out[f"case:{case}"] = {"digest": result.records_digest(), "cpu_s": round(time.process_time() - start, 2),
                               "requests": int(sum(r.records.n for r in result.runs))}
        entry = out[f"case:{case}"]
        print(f"{'case:' + case:28s} {entry['digest'][:16]} {entry['cpu_s']:8.2f} CPU-s {entry['requests']:>8,} "
              "requests", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--json", type=Path, help="write the digests here")
    parser.add_argument("--against", type=Path, help="compare with digests written earlier by --json")
    parser.add_argument("--only", nargs="*", help="scenario stems or speed case names")
    args = parser.parse_args(argv)
    only = set(args.only) if args.only else None
    digests = {**scenario_digests(args.scale, only), **case_digests(args.scale, only)}
    if args.json:
        args.json.write_text(json.dumps({"scale": args.scale, "digests": digests}, indent=1) + "\n")
    if args.against:
        base = json.loads(args.against.read_text())
        if base["scale"] != args.scale:
            print(f"--against was written at scale {base['scale']}, not {args.scale}", file=sys.stderr)
            return 2
        differ = [name for name, entry in digests.items()
                  if name in base["digests"] and base["digests"][name]["digest"] != entry["digest"]]
        missing = [name for name in digests if name not in base["digests"]]
        for name in differ:
            print(f"DIFFERS: {name}", file=sys.stderr)
        for name in missing:
            print(f"not in {args.against}: {name}", file=sys.stderr)
        print("identical" if not differ else f"{len(differ)} differ", file=sys.stderr)
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
