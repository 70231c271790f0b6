"""Measure one benchmark case in this process: CPU and wall time, simulated time, SimPy events,
engine iterations and peak memory, with the result files written as ``kvsim run`` writes them.

Used by ``benchmarks/speed.py`` (one fresh process per case, so the peak resident set belongs to
that case alone) and ``benchmarks/bench_mooncake.py``. :func:`measure_plan` measures a
``kvsim plan`` question the same way (its probes' requests, events and iterations summed).

Definitions (what the speed report prints):

- *requests*: requests simulated (every arrival of every system of the case);
- *CPU s*: ``time.process_time()`` of ``kvsim.run`` (trace reading, sizing, building, simulating,
  draining, summarising); *req/CPU-s* is requests / CPU s. Writing the result files is timed on
  its own (``write_cpu_s``) and not included;
- *sim-s/wall-s*: simulated seconds (the last request's finish, drain included) per
  ``time.perf_counter()`` second of ``kvsim.run``;
- *events*: SimPy events scheduled (each ``simpy.Environment``'s event-id counter at the end,
  read without slowing the run: the benchmark process patches ``Environment.__init__`` only to
  keep a reference to each environment);
- *iterations*: engine iterations (batched forward passes), all instances;
- *process CPU s*: the whole measuring process's CPU time (``getrusage``: interpreter start-up,
  imports, scenario loading, the run, writing the result files), read by ``speed.py``'s child at
  its end -- the "whole-process CPU second" of issue 23's real-time target;
- *backend*: the engine backend that ran (each summary's ``engine_backend``);
- *peak RSS*: ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` after the run *and* the result files
  (``summary.json``, ``requests.parquet``, ...) were written to a temporary folder; *RSS before*
  is the same reading after imports and scenario loading, so ``peak - before`` is what the run
  itself added (the per-million-requests figure uses that growth).
"""

from __future__ import annotations

import gc
import math
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import simpy

import kvsim
from kvsim.metrics.records import RequestRecords

ROOT = Path(__file__).resolve().parent.parent

_ENVIRONMENTS: list[simpy.Environment] = []


def _keep_environments() -> None:
    """Remember every SimPy environment this process creates (idempotent)."""
    if getattr(simpy.Environment.__init__, "_speed_kept", False):
        return
    original = simpy.Environment.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _ENVIRONMENTS.append(self)

    init._speed_kept = True
    simpy.Environment.__init__ = init


def _max_rss_bytes() -> int:
    # ru_maxrss is KiB on Linux, bytes on macOS
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def process_cpu_s() -> float:
    """CPU-seconds (user + system) this process has used since it started."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _import_what_a_run_uses() -> None:
    """Import the modules a run loads on first use (kvsim imports them lazily since session 10),
    so that *CPU s* times the run, as before, and start-up stays in *process CPU s*. Not pandas:
    a run reads its CSV trace and writes its records without it (kvsim/arrow_numpy.py)."""
    import networkx  # noqa: F401  (a system's topology graph)
    import pyarrow.csv  # noqa: F401  (CSV traces)

    import kvsim.sim.run  # noqa: F401
    from kvsim import backend

    backend.compiled_problem()  # loads the compiled kernels where they were built


def measure(scenario: kvsim.Scenario, write: bool = True) -> dict[str, Any]:
    """Run ``scenario`` once and return its speed figures (see the module docstring) and a few
    results to check that a faster engine still gives the same answers."""
    _keep_environments()
    _import_what_a_run_uses()
    # as `kvsim run` starts its run (kvsim/cli.py): what loading made frozen out of the cyclic
    # collector's reach, the collector on (a caller may have held it off while loading)
    gc.freeze()
    gc.enable()
    first_env = len(_ENVIRONMENTS)
    rss_before = _max_rss_bytes()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = kvsim.run(scenario)
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    answers = [_answers(run) for run in result.runs]
    write_cpu_s, write_note = 0.0, ""
    if write:
        cpu1 = time.process_time()
        write_note = _write(result)
        write_cpu_s = time.process_time() - cpu1
    rss_peak = _max_rss_bytes()
    envs = _ENVIRONMENTS[first_env:]
    events = sum(next(env._eid) for env in envs)
    requests = sum(run.records.n for run in result.runs)
    sim_s = 0.0
    for run in result.runs:
        n = run.records.n
        finished = run.records.finish_s[:n]
        if n and np.isfinite(finished).any():
            sim_s += float(np.nanmax(finished))
    return {
        "requests": int(requests),
        "cpu_s": cpu_s,
        "wall_s": wall_s,
        "write_cpu_s": write_cpu_s,
        "sim_s": sim_s,
        "events": int(events),
        "iterations": int(sum(run.iterations for run in result.runs)),
        "rss_before_bytes": rss_before,
        "rss_peak_bytes": rss_peak,
        "instances": int(sum(run.sizing.instances for run in result.runs)),
        "cards": int(sum(run.sizing.cards for run in result.runs)),
        "records_digest": result.records_digest(RequestRecords.colocated_fields),
        "results": answers,
        "write_note": write_note,
        "backend": _backend(run.summary for run in result.runs),
    }


def _backend(summaries) -> str:
    """The backend the runs ran on ("python" or "compiled"; both names joined by "+" if they
    differ). Summaries without the key (results stored before it was kept) are not counted."""
    names = sorted({summary["engine_backend"] for summary in summaries if "engine_backend" in summary})
    return "+".join(names) or "unknown"


def measure_plan(scenario: kvsim.Scenario) -> dict[str, Any]:
    """Answer ``scenario``'s plan (``kvsim plan``, one worker: every probe runs in this process,
    into a temporary folder) and return the figures of :func:`measure`, summed over the probes;
    ``cpu_s`` is the whole question's (searching, probing, writing the plan's report).

    The probes' runs are seen by wrapping :func:`kvsim.sim.run.run_scenario` (what each probe
    calls, :func:`kvsim.plan.planner.run_probe`), which leaves them as they are.
    """
    import hashlib
    import json

    import kvsim.sim.run as sim_run
    from kvsim.plan.command import run_plan

    _keep_environments()
    gc.freeze()  # as measure(): loading frozen, the collector on
    gc.enable()
    first_env = len(_ENVIRONMENTS)
    runs: list = []
    real = sim_run.run_scenario

    def counted(*args, **kwargs):
        done = real(*args, **kwargs)
        runs.extend(done.runs)
        return done

    rss_before = _max_rss_bytes()
    sim_run.run_scenario = counted
    try:
        with tempfile.TemporaryDirectory(prefix="kvsim-speed-plan-") as folder:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            answer = run_plan(scenario, folder, workers=1, log=lambda line: None)
            cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        sim_run.run_scenario = real
    sim_s = 0.0
    for run in runs:
        finished = run.records.finish_s[:run.records.n]
        if run.records.n and np.isfinite(finished).any():
            sim_s += float(np.nanmax(finished))
    # what a faster engine must reproduce: each candidate's capacity and the cheapest per target
    candidates = [{"system": c["system"], "max_load": c["capacity"]["max_load"],
                   "fail_load": c["capacity"]["fail_load"]} for c in answer["candidates"]]
    candidates += [{"load": a["load"], "cheapest": a["cheapest"], "note": a["note"]} for a in answer["answers"]]
    return {
        "requests": int(sum(run.records.n for run in runs)), "cpu_s": cpu_s, "wall_s": wall_s, "write_cpu_s": 0.0,
        "sim_s": sim_s, "events": int(sum(next(env._eid) for env in _ENVIRONMENTS[first_env:])),
        "iterations": int(sum(run.iterations for run in runs)), "rss_before_bytes": rss_before,
        "rss_peak_bytes": _max_rss_bytes(), "instances": 0, "cards": 0, "probes": len(answer["probes"]),
        "systems": len(scenario.spec.systems),
        "records_digest": hashlib.sha256(json.dumps(candidates, sort_keys=True).encode()).hexdigest(),
        "results": candidates, "write_note": "", "backend": _backend(run.summary for run in runs),
    }


def _write(result) -> str:
    """Write the run's result files to a temporary folder; returns "" or what had to be mended.

    kvsim (main at c9f9900) writes ``summary.json`` with ``allow_nan=False``, and a cached system's
    ``cache.domains.by_domain.<d>.dedup_ratio`` is NaN for a domain that held no KV in the window
    (short runs): ``kvsim run`` then fails. Here such values are set to None and the write
    retried, so the memory figure still includes writing the records.
    """
    from kvsim.report import write_results

    with tempfile.TemporaryDirectory(prefix="kvsim-speed-") as folder:
        try:
            write_results(result, folder)
            return ""
        except ValueError as exc:
            if "JSON compliant" not in str(exc):
                raise
            mended = sum(_finite_or_none(run.summary) for run in result.runs)
            write_results(result, folder)
            return f"{mended} non-finite summary value(s) written as null ({exc})"


def _finite_or_none(tree: Any) -> int:
    """Replace NaN and infinite floats in a nested dict/list by None, in place; returns how many."""
    count = 0
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in list(items):
        if isinstance(value, float) and not math.isfinite(value):
            tree[key] = None
            count += 1
        else:
            count += _finite_or_none(value)
    return count


def _answers(run) -> dict[str, Any]:
    """The figures a faster engine must reproduce: latencies, throughput, cache hit rates."""
    s = run.summary
    out: dict[str, Any] = {"system": run.system, "requests_completed": s["requests_completed"],
                           "requests_per_s": s["requests_per_s"], "gpu_busy_fraction": s["gpu_busy_fraction"]}
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        out[key] = {q: s[key][q] for q in ("p50", "p99")}
    cache = s.get("cache")
    if cache is not None:
        out["hit_rate"] = dict(cache["hit_rate"])
    return out


def rates(m: dict[str, Any]) -> dict[str, float]:
    """Derived figures of a measurement: requests per CPU-second, simulated seconds per wall-second,
    events per request, and the memory the run added per million requests (bytes)."""
    n = max(m["requests"], 1)
    return {
        "req_per_cpu_s": m["requests"] / m["cpu_s"] if m["cpu_s"] > 0 else float("nan"),
        "sim_per_wall": m["sim_s"] / m["wall_s"] if m["wall_s"] > 0 else float("nan"),
        "events_per_req": m["events"] / n,
        "iterations_per_req": m["iterations"] / n,
        # simulated seconds per whole-process CPU second (measurements before it was kept: none)
        "sim_per_process_cpu": m["sim_s"] / m["process_cpu_s"] if m.get("process_cpu_s") else float("nan"),
        "rss_growth_per_million_bytes": (m["rss_peak_bytes"] - m["rss_before_bytes"]) * 1e6 / n,
    }


def summary_line(m: dict[str, Any]) -> str:
    """One line of a measurement's figures."""
    r = rates(m)
    return (f"{m['requests']:,} requests on {m['cards']:,} cards in {m['cpu_s']:.1f} CPU-s ({m['wall_s']:.1f} s wall): "
            f"{r['req_per_cpu_s']:,.0f} req/CPU-s, {r['sim_per_wall']:,.1f} sim-s/wall-s, "
            f"{r['events_per_req']:.1f} events/req, {m['iterations']:,} iterations, peak RSS "
            f"{m['rss_peak_bytes'] / 2**20:,.0f} MiB (+{(m['rss_peak_bytes'] - m['rss_before_bytes']) / 2**20:,.0f} "
            f"over the run)")


def machine() -> dict[str, str]:
    """Where the figures were taken: kvsim version and commit, Python, CPU model."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        engine = git("log", "-1", "--format=%h", "--", "kvsim")
        if engine != commit:
            commit += f", kvsim/ as of {engine}"
        if git("status", "--porcelain", "--untracked-files=no", "--", "kvsim"):
            commit += ", with uncommitted changes to kvsim/"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"kvsim": kvsim.__version__, "commit": commit, "python": platform.python_version(),
            "simpy": simpy.__version__, "numpy": np.__version__, "cpu": cpu}
