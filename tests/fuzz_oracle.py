"""The fuzzer's oracle: run one case (tests/fuzz_mutate.py) and say what happened.

In-process through ``kvsim.cli.main`` (or the Python API), each call under a wall-clock alarm
so a hang is caught as one, and a memory cap so a runaway allocation fails instead of taking
the machine. Outcomes:

- ``ok-valid``: validate said 0 and a capped run of the same scenario succeeded (or the case
  was not run: a slow base, or the cap itself made it invalid);
- ``ok-invalid``: exit 2 with every problem naming a file (and a line when it is in the
  scenario text);
- ``traceback``: an exception out of ``main``, "Traceback" in the output, or exit 3 (an internal
  error: bad input must give exit 2);
- ``hang``: a call ran out of its wall-clock budget;
- ``accepted-invalid``: validate said 0 but the run refused the same scenario (exit 2);
- ``bad-message``: exit 2 without the file, or without a line for a problem in the scenario text.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import re
import resource
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fuzz_mutate import DIRECTORY, Case

OUTCOMES = ("ok-valid", "ok-invalid", "traceback", "hang", "accepted-invalid", "bad-message")
FAILURES = ("traceback", "hang", "accepted-invalid", "bad-message")
VALIDATE_BUDGET_S = 60.0
"""Wall seconds a validate (or an API load) may take. A normal one takes 0.01-0.2 s; the largest the
fuzzer draws (a 10,000-point sweep of a 128-instance, 8-system scenario) 10-15 s on a loaded
2-core machine. Only a real hang or a quadratic blow-up exceeds this."""
RUN_BUDGET_S = 60.0
"""Wall seconds a capped run (CAP_S simulated seconds, at most two points per sweep axis) may take."""
MEMORY_BYTES = 6 * 2**30
"""Address space a case may add (a scenario needs well under 1 GB)."""
CAP_S = 1.0
"""Simulated seconds of the capped run."""
WHOLE_FILE = ("cannot read", "not a UTF-8", "characters is more than", "nested too deeply", "is not a file",
              "is a directory", "is a folder", "no such file", "not a regular file", "the file is empty or blank",
              "an empty file", "(no rows)")
"""Problems about a whole file, which have no line to name."""


class CaseTimeout(BaseException):
    """Raised by the alarm; a BaseException so kvsim's own ``except Exception`` cannot take it for a bug."""


@dataclass
class Outcome:
    kind: str
    detail: str = ""


@contextlib.contextmanager
def limits(seconds: float):
    """Raise :class:`CaseTimeout` after ``seconds``; cap memory. The faulthandler backstop ends
    the worker (the case then shows as a crashed worker) if the code is stuck where no Python
    signal handler runs."""
    def on_alarm(signum, frame):
        raise CaseTimeout()
    old = signal.signal(signal.SIGALRM, on_alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (min(hard, _address_space() + MEMORY_BYTES)
                                                 if hard != resource.RLIM_INFINITY else _address_space() + MEMORY_BYTES,
                                                 hard))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(seconds * 3 + 30, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, old)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def cli(argv: list[str], seconds: float) -> tuple[int | None, str, str, str | None]:
    """(exit status, stdout, stderr, problem): problem is "hang" or the exception out of main."""
    from kvsim.cli import main

    out, err = io.StringIO(), io.StringIO()
    rc, problem = None, None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), limits(seconds):
            rc = main(argv)
    except CaseTimeout:
        problem = "hang"
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 2
    except BaseException as exc:  # noqa: BLE001 - exactly what the fuzzer looks for
        problem = f"{type(exc).__name__}: {exc}"[:300]
    return rc, out.getvalue(), err.getvalue(), problem


def write_case(case: Case, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        if data is None:
            continue
        if data == DIRECTORY:
            (folder / name).mkdir(exist_ok=True)
        else:
            (folder / name).write_bytes(data)
    path = folder / "s.yaml"
    path.write_bytes(case.text)
    return path


def message_problem(err: str, path: Path, folder: Path) -> str | None:
    """What is wrong with an exit-2 message, or None: every problem names a file (or its
    ``--set`` argument), and one in the scenario text names its line."""
    problems = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    if not problems:
        head = err.strip().splitlines()[-1] if err.strip() else ""
        problems = [head.split(": ", 1)[1]] if head.startswith("kvsim ") and ": " in head else [head]
    for problem in problems:
        if problem.startswith("--set ") or problem.startswith("... and "):
            continue
        if problem.startswith(str(path)):
            rest = problem[len(str(path)):]
            if not re.match(r":\d+: ", rest) and not any(w in problem for w in WHOLE_FILE):
                return f"no line: {problem}"
            continue
        if str(folder) in problem or "/dev/" in problem or "/etc/" in problem or "/proc/" in problem:
            continue
        return f"no file: {problem}"
    return None


def check_case(case: Case, folder: Path) -> Outcome:
    path = write_case(case, folder)
    if case.api:
        return _check_api(case, path)
    sets = [a for s in case.sets for a in ("--set", s)]
    rc, out, err, problem = cli(["validate", str(path), *sets], VALIDATE_BUDGET_S)
    bad = _bad(rc, out, err, problem, "validate")
    if bad:
        return bad
    if rc == 2:
        wrong = message_problem(err, path, folder)
        return Outcome("bad-message", wrong) if wrong else Outcome("ok-invalid")
    if rc != 0:
        return Outcome("traceback", f"validate exit {rc}: {err[-300:]}")
    if not case.runnable:
        return Outcome("ok-valid", "not run")
    caps = _caps(path, case.sets)
    if caps is None:
        return Outcome("ok-valid", "not run (too big to run in a case, or its duration swept)")
    argv = ["run", str(path), "--out", str(folder / "out"), "--workers", "1", "--no-progress",
            "--no-report", "--watchdog-s", "30", *sets, *caps]
    rc, out, err, problem = cli(argv, RUN_BUDGET_S)
    bad = _bad(rc, out, err, problem, "run")
    if bad:
        return bad
    if rc == 2:  # was it the cap? validate the capped scenario
        vrc, _, verr, vproblem = cli(["validate", str(path), *sets, *caps], VALIDATE_BUDGET_S)
        if vrc == 0:
            return Outcome("accepted-invalid", f"validate 0, run 2: {err.strip()[-300:]}")
        return Outcome("ok-valid", "not run (the cap made it invalid)")
    if rc != 0:
        return Outcome("traceback", f"run exit {rc}: {err[-300:]}")
    return Outcome("ok-valid")


def _bad(rc, out: str, err: str, problem: str | None, what: str) -> Outcome | None:
    if problem == "hang":
        return Outcome("hang", f"{what} ran out of its time budget")
    if problem is not None:
        return Outcome("traceback", f"{what}: exception out of main: {problem}")
    if "Traceback" in out or "Traceback" in err:
        return Outcome("traceback", f"{what}: traceback printed: {err[-300:]}")
    if rc == 3:
        line = next((row for row in err.splitlines() if "internal error" in row or "stopped" in row), err[-300:])
        return Outcome("traceback", f"{what}: internal error: {line}")
    return None


def _caps(path: Path, sets: list[str]) -> list[str] | None:
    """``--set`` arguments that shorten the run: at most CAP_S simulated seconds, one replication,
    at most two values per sweep axis; None if the scenario is too big to run in a case."""
    from kvsim.scenario.load import load_scenario

    try:
        with limits(VALIDATE_BUDGET_S):
            scenario = load_scenario(path, sets)
    except CaseTimeout:
        return None
    spec = scenario.spec
    sweep = scenario.raw.get("sweep") or {}
    if any(f.strip() in ("duration", "warmup") for key in sweep for f in str(key).split(",")):
        return None  # a swept duration would override the cap below: validated only
    caps = [f"duration={min(spec.duration, CAP_S):g} s"]
    if not spec.warmup_auto:
        caps.append(f"warmup={min(spec.warmup, min(spec.duration, CAP_S) / 2):g} s")
    if "replications" in scenario.raw:
        caps.append("replications=1")
    if any(isinstance(v, list) and len(v) > 2 for v in sweep.values()):
        short = {k: v[:2] if isinstance(v, list) else v for k, v in sweep.items()}
        caps.append("sweep=" + yaml.safe_dump(short, default_flow_style=True, width=10**6).strip())
    return [a for c in caps for a in ("--set", c)]


def _check_api(case: Case, path: Path) -> Outcome:
    """The Python API: load and check raise SpecError or succeed; a changed field too."""
    import kvsim
    from kvsim.yaml_io import SpecError

    def call(fn: Callable[[], Any]) -> tuple[Any, Outcome | None]:
        try:
            with limits(VALIDATE_BUDGET_S):
                return fn(), None
        except SpecError as exc:
            if not exc.problems or not all(isinstance(p, str) and p for p in exc.problems):
                return None, Outcome("bad-message", f"SpecError without problems: {exc.problems!r}")
            return None, Outcome("ok-invalid")
        except CaseTimeout:
            return None, Outcome("hang", "API call ran out of its time budget")
        except BaseException as exc:  # noqa: BLE001
            return None, Outcome("traceback", f"API: {type(exc).__name__}: {exc}"[:300])

    scenario, outcome = call(lambda: kvsim.load_scenario(path, case.sets))
    if outcome:
        return outcome
    _, outcome = call(lambda: kvsim.check(scenario))
    if outcome:
        return outcome
    dotted, value = case.api_change
    changed, outcome = call(lambda: scenario.with_changes({dotted: value}))
    if outcome:
        return outcome if outcome.kind != "ok-invalid" else Outcome("ok-valid", "API change refused")
    _, outcome = call(lambda: kvsim.check(changed))
    if outcome:
        return outcome if outcome.kind != "ok-invalid" else Outcome("ok-valid", "API change refused by check")
    return Outcome("ok-valid")


def tally(outcomes: list[tuple[str, Outcome]]) -> dict[str, int]:
    counts = {kind: 0 for kind in OUTCOMES}
    for _, outcome in outcomes:
        counts[outcome.kind] += 1
    return counts


def report_failures(outcomes: list[tuple[str, Outcome]], limit: int = 15) -> str:
    failed = [(d, o) for d, o in outcomes if o.kind in FAILURES]
    return "\n".join(f"[{o.kind}] {d}\n    {o.detail}" for d, o in failed[:limit]) + (
        f"\n... and {len(failed) - limit} more" if len(failed) > limit else "")
