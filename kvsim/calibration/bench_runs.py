"""The workload of a :class:`~kvsim.calibration.bench_files.BenchRun` as kvsim scenario data.

- **Open loop** (``poisson``, ``constant``, ``burst``): the run's request count is sent as a kvsim
  trace (``arrival: {kind: trace, format: csv}``), so every request keeps its own (prompt, output)
  lengths, in the file's order (cycled when the file keeps fewer, e.g. GuideLLM's sampled
  requests). Arrival times are drawn as the benchmark drew them: vLLM's ``get_request`` draws Gamma
  gaps of shape ``burstiness`` and mean ``1 / rate`` (1: Poisson) and scales them so the last
  request goes at ``requests / rate`` (vllm-project/vllm ``vllm/benchmarks/serve.py``); GuideLLM's
  ``constant`` spaces them evenly; ``request_rate inf`` sends them all at 0 s. The trace file is
  written once to a cache folder (:data:`REPLAY_DIR`), named by its content's hash.
- **Stages** (inference-perf without a ``shared_prefix`` workload): kvsim's ``stages`` arrival with
  fixed lengths.
- **Closed loop** (vLLM ``max_concurrency`` at ``request_rate inf``, GuideLLM synchronous /
  concurrent / throughput, inference-perf concurrency stages): ``closed_loop`` of ``clients`` for
  the run's duration; lengths drawn from the file's (``empirical``) or fixed.

Random draws come from the named stream ``calibration.replay.arrival`` of the scenario's seed.
``time_scale`` (the fit's shortened runs) keeps the rate and sends the first
``ceil(requests x time_scale)`` requests (open loop), or shortens the duration (stages, closed loop).
None of these workloads has a shared prefix: vLLM's random dataset, GuideLLM's synthetic data and
the lengths-only reproduction send distinct prompts, so prefix caching, even when on, finds nothing.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.atomic import write_text_atomic
from kvsim.calibration.bench_files import BenchRun
from kvsim.rng import RandomStreams

__all__ = ["REPLAY_DIR", "arrival_times", "bench_workload"]

REPLAY_DIR = Path(tempfile.gettempdir()) / "kvsim-calibration-replay"
"""Where the replay traces of open-loop runs are written (content-addressed, so shared by processes)."""


def arrival_times(run: BenchRun, seed: int) -> np.ndarray:
    """Send times of all ``run.requests`` requests of an open-loop run, seconds, ascending."""
    n = run.requests
    if run.process == "burst":
        return np.zeros(n)
    if run.process == "constant":
        return np.arange(n) / run.rate
    rng = RandomStreams(seed).generator("calibration.replay.arrival")
    gaps = rng.gamma(run.burstiness, 1.0 / (run.rate * run.burstiness), size=n)
    times = np.cumsum(gaps)
    return times * ((n / run.rate) / times[-1])


def bench_workload(run: BenchRun, time_scale: float, seed: int) -> tuple[dict[str, Any], float]:
    """``(workload, duration)`` of ``run``'s scenario: the workload data and the run's length, seconds."""
    if run.process == "closed_loop":
        workload = {"arrival": {"kind": "closed_loop", "clients": run.clients}, **_lengths(run), "block_tokens": 16}
        return workload, run.duration_s * time_scale
    if run.process == "stages":
        stage = {"rate": run.rate, "duration": run.duration_s * time_scale}
        workload = {"arrival": {"kind": "stages", "stages": [stage]}, **_lengths(run), "block_tokens": 16}
        return workload, stage["duration"] + 1.0
    times = arrival_times(run, seed)[:max(1, math.ceil(run.requests * time_scale))]
    pairs = run.lengths or ((run.input_tokens, run.output_tokens),)
    rows = ["arrival_s,input_tokens,output_tokens"]
    rows += [f"{t!r},{pairs[k % len(pairs)][0]},{pairs[k % len(pairs)][1]}" for k, t in enumerate(times.tolist())]
    text = "\n".join(rows) + "\n"
    path = REPLAY_DIR / f"{hashlib.sha256(text.encode()).hexdigest()[:24]}.csv"
    if not path.is_file():
        REPLAY_DIR.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text)
    arrival = {"kind": "trace", "format": "csv", "file": str(path),
               "columns": {"arrival": "arrival_s", "input_tokens": "input_tokens", "output_tokens": "output_tokens"}}
    # the trace starts at its first request (kvsim shifts it to 0 s); a little past the last one,
    # as for the stages of a CSV run
    return {"arrival": arrival, "block_tokens": 16}, float(times[-1] - times[0]) + 1.0


def _lengths(run: BenchRun) -> dict[str, Any]:
    if run.lengths:
        return {"input_tokens": {"kind": "empirical", "values": [p[0] for p in run.lengths]},
                "output_tokens": {"kind": "empirical", "values": [p[1] for p in run.lengths]}}
    return {"input_tokens": {"kind": "fixed", "value": run.input_tokens},
            "output_tokens": {"kind": "fixed", "value": run.output_tokens}}
