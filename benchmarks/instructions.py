"""Instructions a speed case executes, counted by valgrind's callgrind: a deterministic measure of
simulator speed, where CPU time on a shared machine drifts by 10-20 % within the hour.

    .venv/bin/python benchmarks/instructions.py mooncake [rr_conv_80 ...] [--scale 0.1] [--against 637b053] [--ceiling]
        [--backend python,compiled]

For each case (see ``speed_cases.py``) it runs ``kvsim.run`` under callgrind twice, at ``--scale``
and at a near-empty scale, with ``PYTHONHASHSEED=0``, and prints the difference: the instructions
of the simulation itself, without start-up and scenario loading (Arrow's readers on one thread,
``OMP_NUM_THREADS=1``, so that a count repeats exactly). ``--against REV`` counts the same
in a temporary git worktree of ``REV`` (the scenarios and traces come from this checkout) and
prints the change. ``--ceiling`` also counts the case with decode runs' per-step work removed
(``run_ceiling.py``): the most that closed-form run sums could save. Each count takes a minute or
two (callgrind runs Python about 50x slower). ``--backend`` counts with that engine backend
(``KVSIM_BACKEND``; comma-separated: each in turn; default: as ``auto`` resolves here).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EMPTY_SCALE = 0.001
"""Scale of the near-empty run whose count is subtracted (start-up, imports, building the system)."""

_CHILD = """
import sys
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import kvsim, speed_cases
assert kvsim.__file__.startswith(sys.argv[1]), kvsim.__file__
if sys.argv[6] == "ceiling":
    import run_ceiling
    run_ceiling.apply()
kvsim.run(speed_cases.scenario_for(sys.argv[3], {"scale": float(sys.argv[4]), "capacity_per_s": float(sys.argv[5])}))
"""


def count(root: Path, case: str, scale: float, capacity_per_s: float = 3.55, ceiling: bool = False,
          backend: str | None = None) -> int:
    """Instructions callgrind collects for ``case`` at ``scale`` with kvsim from ``root``
    (``capacity_per_s``: the ladder's saturation throughput per instance, requests/s; ``ceiling``:
    with decode runs' per-step work removed, see ``run_ceiling.py``; ``backend``: the engine
    backend, None for the one ``auto`` resolves to)."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", _CHILD,
               str(root), str(HERE), case, repr(scale), repr(capacity_per_s), "ceiling" if ceiling else "-"]
    # one Arrow thread: the CSV reader's thread pool spins a varying number of instructions under
    # valgrind (+-2-3 % of rr_conv_80 at --scale 0.05 from count to count); one thread repeats exactly
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    if backend is not None:
        env["KVSIM_BACKEND"] = backend
    if ceiling:
        env["KVSIM_BACKEND"] = "python"  # run_ceiling patches the pure-Python engine's decode runs
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        own = [line for line in done.stderr.strip().splitlines() if not re.match(r"==\d+==", line)]  # not valgrind's
        tail = "\n".join(own[-5:])
        raise SystemExit(f"instructions.py: case {case} failed under callgrind (exit {done.returncode}):\n{tail}")
    return int(found.group(1))


def run_instructions(root: Path, case: str, scale: float, capacity_per_s: float = 3.55, ceiling: bool = False,
                     backend: str | None = None) -> int:
    """Instructions of the simulation alone: ``case`` at ``scale`` less a near-empty run of it."""
    return (count(root, case, scale, capacity_per_s, ceiling, backend)
            - count(root, case, EMPTY_SCALE, capacity_per_s, ceiling, backend))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", help="speed cases (speed_cases.py), e.g. rr_conv_80 mooncake")
    parser.add_argument("--scale", type=float, default=0.1, help="multiply simulated durations (default 0.1)")
    parser.add_argument("--against", default=None, help="a git revision to count the same cases at")
    parser.add_argument("--ceiling", action="store_true",
                        help="also count with decode runs' per-step work removed (run_ceiling.py): the most "
                             "closed-form run sums could save")
    parser.add_argument("--capacity", type=float, default=3.55,
                        help="the ladder's saturation throughput per instance, requests/s (as speed.py --capacity)")
    parser.add_argument("--backend", default=None,
                        help="engine backend(s) to count with, comma-separated (default: as auto resolves here)")
    args = parser.parse_args(argv)
    if not args.scale > EMPTY_SCALE:
        parser.error(f"--scale must be above {EMPTY_SCALE}")
    sys.path.insert(0, str(HERE))
    from speed_cases import GROUPS

    known = [case for cases in GROUPS.values() for case in cases if case != "plan"]  # plan: not one kvsim.run
    unknown = [case for case in args.cases if case not in known]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; cases: {', '.join(known)}")
    if shutil.which("valgrind") is None:
        raise SystemExit("instructions.py: valgrind is not installed (Debian: apt install valgrind)")
    with tempfile.TemporaryDirectory(prefix="kvsim-instructions-") as folder:
        other = None
        if args.against is not None:
            other = Path(folder) / "rev"
            made = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(other), args.against],
                                  capture_output=True, text=True)
            if made.returncode != 0:
                raise SystemExit(f"instructions.py: --against {args.against}: {made.stderr.strip()}")
        backends = [None] if args.backend is None else [b.strip() for b in args.backend.split(",")]
        try:
            for case, backend in ((c, b) for c in args.cases for b in backends):
                here = run_instructions(REPO, case, args.scale, args.capacity, backend=backend)
                line = (f"{case} (--scale {args.scale:g}" + (f", {backend}" if backend else "")
                        + f"): {here / 1e9:.3f} G instructions")
                if other is not None:
                    then = run_instructions(other, case, args.scale, args.capacity, backend=backend)
                    line += f"; at {args.against}: {then / 1e9:.3f} G ({100 * (here - then) / then:+.1f} %)"
                if args.ceiling:
                    bound = run_instructions(REPO, case, args.scale, args.capacity, ceiling=True)
                    line += f"; per-step run work removed: {bound / 1e9:.3f} G ({100 * (bound - here) / here:+.1f} %)"
                print(line, flush=True)
        finally:
            if other is not None:
                subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(other)],
                               capture_output=True)


if __name__ == "__main__":
    main()
