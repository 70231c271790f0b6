"""Effect of ``engine.step_variance`` on the validation page's short serving runs (issue 27 item 3).

    .venv/bin/python benchmarks/step_variance_validation.py [--seeds 3] [--json out.json]

Runs 48, 66 and 67 of ``../shared/calibration/vllm_h100_runs.csv`` (1 request/s, reasoning-lite;
the runs ``tests/test_validation_gate.py`` recomputes) are simulated as the validation page
simulates them (:func:`kvsim.calibration.runs.run_scenario`, datasheet values, full length), with
step variance off and with each setting in ``SETTINGS``, for ``--seeds`` root seeds. Printed per
run and setting: kvsim's TTFT p90 / p99, TPOT mean / p99 and E2E p99 (mean over seeds) and their
errors against the measured figures the file has (TTFT p90 / p99, TPOT mean, E2E p99; it has no
TPOT p99). A check, never a fit: no parameter is chosen from these numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO.parent / "shared" / "calibration" / "vllm_h100_runs.csv"
SHORT = ("48", "66", "67")
SETTINGS = {
    "off": None,
    "published": {"kind": "lognormal"},
    "cv 0.12": {"kind": "lognormal", "cv": 0.12},
    "published + 1 % 38 ms stalls (assumed p)": {"kind": "lognormal", "stall_probability": 0.01, "stall_s": 0.038},
    "cv 0.12 + unfrozen-GC stalls": {"kind": "lognormal", "cv": 0.12, "stall_probability": 0.005, "stall_s": 0.2},  # ~7 ms / 1.5 s
}
"""The settings compared (kvsim/models/step_variance.py says where each figure comes from; the 1 % stall
probability is an assumption, no published figure gives it)."""


def main(argv=None) -> int:
    from kvsim.calibration.calibrate import load_units
    from kvsim.calibration.runs import run_scenario
    from kvsim.sim import run_scenario as simulate

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--runs", nargs="*", default=list(SHORT))
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    _, units, _ = load_units([RUNS], "h100-sxm")
    out = {}
    for unit in [u for u in units if u.uid in args.runs]:
        row = unit.row
        measured = {"ttft_p90_s": row.measured.get("ttft_p90_s"), "ttft_p99_s": _csv(unit.uid, "ttft_p99_s"),
                    "tpot_mean_s": row.measured.get("tpot_mean_s"), "e2e_p99_s": _csv(unit.uid, "e2e_p99_s")}
        print(f"run {unit.uid}: measured " + ", ".join(f"{k} {v:.4g}" for k, v in measured.items() if v), flush=True)
        for name, setting in SETTINGS.items():
            got = []
            for seed in range(args.seeds):
                scenario = run_scenario(row, None, 1.0, seed)
                if setting is not None:
                    scenario = scenario.with_changes({"engine.step_variance": setting})
                summary = simulate(scenario).runs[0].summary
                got.append({"ttft_p90_s": summary["ttft_s"]["p90"], "ttft_p99_s": summary["ttft_s"]["p99"],
                            "tpot_mean_s": summary["tpot_s"]["mean"], "tpot_p99_s": summary["tpot_s"]["p99"],
                            "e2e_p99_s": summary["e2e_s"]["p99"]})
            mean = {k: float(np.mean([g[k] for g in got])) for k in got[0]}
            spread = {k: float(np.std([g[k] for g in got], ddof=1)) if len(got) > 1 else 0.0 for k in got[0]}
            errors = {k: mean[k] / measured[k] - 1 for k in mean if measured.get(k)}
            out.setdefault(unit.uid, {})[name] = {"mean": mean, "sd_over_seeds": spread, "error": errors}
            print(f"  {name:30s} " + "  ".join(
                f"{k} {mean[k]:.4g}" + (f" ({errors[k]:+.1%})" if k in errors else "") for k in mean), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


def _csv(uid: str, column: str) -> float | None:
    import pandas as pd

    frame = pd.read_csv(RUNS, dtype={"exp_id": str})
    value = frame.loc[frame.exp_id == uid, column]
    return float(value.iloc[0]) if len(value) and not pd.isna(value.iloc[0]) else None


if __name__ == "__main__":
    sys.exit(main())
