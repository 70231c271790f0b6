"""Benchmark result files read directly as measured runs: ``vllm bench serve --save-result`` JSON,
GuideLLM reports and inference-perf stage reports (``kvsim calibrate``, the validation page).

Each file becomes one or more :class:`BenchRun` (or, for an inference-perf stage with a
``shared_prefix`` workload, a :class:`~kvsim.calibration.measurements.VllmRun`), with the engine
settings from the file's YAML sidecar (:mod:`kvsim.calibration.bench_sidecar`). The format is told
by the JSON keys, not the file's name:

- **vLLM** (vllm-project/vllm ``vllm/benchmarks/serve.py`` @ 009e6d4a1c, ``main_async``): one JSON
  object (or several, one a line, with ``--append-result``) holding ``model_id``, ``request_rate``
  (a number or ``"inf"``), ``burstiness``, ``max_concurrency``, ``duration`` (s), ``completed``,
  ``failed``, ``total_input_tokens``, ``total_output_tokens``, ``{mean,median,std}_{ttft,tpot,itl}_ms``
  and ``p<q>_<metric>_ms`` for each of ``--metric-percentiles`` (default 99 only) over
  ``--percentile-metrics`` (default ttft,tpot,itl: no E2E summary unless asked). ``latencies`` (s,
  per request) is always kept; ``--save-detailed`` adds ``input_lens``, ``output_lens``, ``ttfts``
  (s), ``itls``, ``start_times``, ``errors``.
- **GuideLLM** (vllm-project/guidellm @ ee7a77457b, ``src/guidellm/benchmark/schemas``): a report
  ``{metadata, config, benchmarks: [...]}`` in JSON or YAML; each benchmark has
  ``config.strategy`` (``type_`` synchronous / concurrent (``streams``) / throughput / constant /
  poisson (``rate``)), ``duration`` (s), ``metrics.<name>.successful`` distribution summaries
  (``mean``, ``percentiles.p90``; ``*_ms`` in ms, ``request_latency`` in s) and
  ``requests.successful`` (``prompt_tokens``, ``output_tokens`` per request, possibly sampled). Its
  ``time_per_output_token_ms`` includes the first token; kvsim's TPOT is its
  ``inter_token_latency_ms``, ``(last - first) / (output - 1)``.
- **inference-perf** (kubernetes-sigs/inference-perf @ 7de5ef2ed6, ``inference_perf/reportgen/base.py``
  ``summarize_requests``): ``stage_N_lifecycle_metrics.json`` with ``load_summary`` (``count``,
  ``requested_rate``, ``send_duration``, and ``concurrency`` for a ``concurrent`` load stage,
  ``inference_perf/config/loadgen/config.py`` ``ConcurrentLoadStage``) and
  ``successes.latency.<metric>`` summaries in seconds (``mean``, ``p90``, ...).

Metrics map to :data:`~kvsim.calibration.measurements.METRICS` in seconds; one a file lacks is None
(a p90 or p99 not requested). Where a summary lacks E2E but the file holds every successful
request's latency, the mean and p90 are computed from those, and a missing TTFT p90 or p99 from
the per-request TTFTs (numpy's default percentile, as vLLM's).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.calibration.bench_sidecar import Engine, read_sidecar
from kvsim.calibration.checks import LATENCY_S, MAX_RATE_PER_S, MAX_REQUESTS, MAX_SEQS
from kvsim.calibration.measurements import MeasurementError, Measurements, VllmRun
from kvsim.workload.trace_csv import MAX_TOKENS
from kvsim.yaml_io import SpecError, load_yaml

__all__ = ["BenchRun", "read_bench_file", "bench_format", "FORMATS"]

FORMATS = ("vllm_bench", "guidellm", "inference_perf")


@dataclass(frozen=True)
class BenchRun:
    """One measured run of a benchmark result file, as kvsim reproduces it.

    ``process`` is how requests arrive: ``poisson`` (``requests`` at ``rate`` requests/s, Gamma gaps
    of shape ``burstiness``, 1 = Poisson, scaled to end at ``requests / rate`` as vLLM does),
    ``constant`` (evenly spaced at ``rate``), ``burst`` (all at 0), ``stages`` (inference-perf:
    ``requests`` in ``duration_s`` at ``rate``, kvsim's ``stages`` arrival) or ``closed_loop``
    (``clients`` users back to back for ``duration_s``). ``lengths`` are the (prompt, output)
    tokens of each request in the file's order, replayed in turn; None: every request has
    ``input_tokens`` and ``output_tokens``. ``notes`` say where the workload came from.
    """

    run_id: str
    line: int
    source_format: str
    model: str
    gpu: str
    tp: int
    precision: str
    max_num_seqs: int
    max_batched_tokens: int
    prefix_cache: bool
    workload: str
    process: str
    rate: float = 0.0
    burstiness: float = 1.0
    requests: int = 0
    duration_s: float = 0.0
    clients: int = 0
    lengths: tuple[tuple[int, int], ...] | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    notes: tuple[str, ...] = ()
    measured: dict[str, float | None] = field(default_factory=dict, hash=False, compare=False)
    engine: str = ""
    engine_version: str = ""

    @property
    def label(self) -> str:
        return f"{self.run_id} {self.model.split('/')[-1]} tp{self.tp} {self.workload}"


class _Problems:
    """Problems of one file: ``<file>[:<line>]: <field>: <message>``."""

    def __init__(self, path: Path):
        self.path, self.items = path, []

    def bad(self, where: str, message: str, line: int | None = None) -> None:
        self.items.append(f"{self.path}{f':{line}' if line else ''}: {where}: {message}")


def bench_format(data: Any) -> str | None:
    """The format of parsed file content, by its keys (None: none of :data:`FORMATS`)."""
    if isinstance(data, dict):
        if "benchmarks" in data and isinstance(data["benchmarks"], list):
            return "guidellm"
        if "load_summary" in data and "successes" in data:
            return "inference_perf"
        if "request_rate" in data and ("model_id" in data or "backend" in data):
            return "vllm_bench"
    return None


def read_bench_file(path: str | Path, data: bytes, text: str) -> Measurements:
    """The measured runs of a benchmark result file (JSON, JSON lines or YAML).

    Raises
    ------
    MeasurementError
        One message per problem, naming the file, field (and line where the file has lines).
    """
    path = Path(path)
    records = _parse(path, text)
    kinds = [bench_format(r) for _, r in records]
    if any(k is None for k in kinds):
        line, record = records[kinds.index(None)]
        keys = ", ".join(list(record)[:8]) if isinstance(record, dict) else type(record).__name__
        raise MeasurementError([
            f"{path}{f':{line}' if line > 1 else ''}: unknown benchmark result format (found {keys or 'nothing'}): "
            "expected vllm bench serve --save-result JSON (request_rate, model_id, mean_ttft_ms, ...), a GuideLLM "
            "report (benchmarks: [...]) or an inference-perf stage report (load_summary, successes)"
            + (": an inference-perf per-request report; give the stage_N_lifecycle_metrics.json files"
               if isinstance(record, list) else "")])
    try:
        engine = read_sidecar(path, needs_model=kinds[0] != "vllm_bench")
    except SpecError as exc:
        raise MeasurementError(exc.problems) from None
    problems = _Problems(path)
    runs: list[BenchRun | VllmRun] = []
    for (line, record), kind in zip(records, kinds):
        if kind == "vllm_bench":
            run = _vllm(record, engine, path, line if len(records) > 1 else 0, problems)
            runs += [run] if run else []
        elif kind == "guidellm":
            runs += _guidellm(record, engine, path, problems)
        else:
            run = _inference_perf(record, engine, path, problems)
            runs += [run] if run else []
    if problems.items:
        raise MeasurementError(problems.items[:20])
    if not runs:
        raise MeasurementError([f"{path}: holds no benchmark runs"])
    return Measurements(str(path), hashlib.sha256(data).hexdigest(), "bench_runs", runs=tuple(runs))


def _parse(path: Path, text: str) -> list[tuple[int, Any]]:
    """``(line, record)`` of a JSON file, a JSON-lines file (``--append-result``) or a YAML file."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        try:
            return [(1, load_yaml(text, str(path)).data)]
        except SpecError as exc:
            raise MeasurementError(exc.problems) from None
    try:
        return [(1, json.loads(text))]
    except json.JSONDecodeError as whole:
        records = []  # JSON lines (vLLM's --append-result), or one broken JSON text
        for number, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                try:
                    records.append((number, json.loads(line)))
                except json.JSONDecodeError as exc:
                    where, why = (whole.lineno, whole) if not records else (number, exc)
                    raise MeasurementError([f"{path}:{where}: not JSON: {why.msg} (column {why.colno})"]) from None
        return records


# ---------------------------------------------------------------------------------------- values


def _get(record: Any, dotted: str) -> Any:
    value = record
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _number(record: Any, dotted: str, problems: _Problems, line: int = 0, required: bool = True,
            low: float = 0.0, high: float = math.inf, unit: str = "", zero: bool = False) -> float | None:
    """A finite number at ``dotted`` within ``(low, high]`` (``zero``: 0 too); None (and a problem if
    required) if absent."""
    value = _get(record, dotted)
    if value is None:
        if required:
            problems.bad(dotted, "required, not in the file", line)
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        problems.bad(dotted, f"expected a finite number, got {str(value)[:40]!r}", line)
        return None
    if not low < value <= high and not (zero and value == 0):
        problems.bad(dotted, f"must be {'at least' if zero else 'above'} {low:g} and at most {high:g}"
                             f"{f' {unit}' if unit else ''}, got {value:g}", line)
        return None
    return float(value)


def _latency(record: Any, dotted: str, per_s: float, problems: _Problems, line: int = 0) -> float | None:
    """A latency at ``dotted`` (``per_s``: 1e3 for ms) in seconds, within :data:`LATENCY_S`; None if absent."""
    value = _number(record, dotted, problems, line, required=False, low=-math.inf)
    if value is None:
        return None
    seconds = value / per_s
    if not LATENCY_S[0] <= seconds <= LATENCY_S[1]:
        problems.bad(dotted, f"{seconds:g} s: a measured latency lies between one kernel launch, 1 us, and a day", line)
        return None
    return seconds


def _lengths(inputs: Any, outputs: Any, keep: list[bool] | None) -> tuple[tuple[int, int], ...] | None:
    """Per-request (prompt, output) tokens of the requests kept, or None if the lists are unusable."""
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        return None
    if keep is None or len(keep) != len(inputs):
        keep = [o != 0 for o in outputs]  # vLLM counts 0 output tokens for a failed request
    pairs = []
    for k, (i, o) in enumerate(zip(inputs, outputs)):
        if not keep[k]:
            continue
        if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_TOKENS for v in (i, o)):
            return None
        pairs.append((i, o))
    return tuple(pairs) or None


def _fixed(engine: Engine, mean_in: float | None, mean_out: float | None, what: str,
           problems: _Problems) -> tuple[int, int, str] | None:
    """Fixed lengths: the sidecar's, else the file's means; with the note saying which."""
    if engine.input_tokens is not None and engine.output_tokens is not None:
        return (engine.input_tokens, engine.output_tokens,
                f"fixed lengths {engine.input_tokens} + {engine.output_tokens} tokens, as the sidecar states")
    if mean_in is None or mean_out is None or mean_in < 1 or mean_out < 1:
        problems.bad("input_tokens", f"the file has no per-request lengths and no {what}: state input_tokens and "
                                     f"output_tokens (the lengths it was run with) in the sidecar {engine.path}")
        return None
    i, o = max(1, round(mean_in)), max(1, round(mean_out))
    return i, o, (f"fixed lengths {i} + {o} tokens, the file's mean {what} (it holds no per-request lengths; "
                  "state input_tokens / output_tokens in the sidecar to override)")


def _engine_fields(engine: Engine, model: str | None) -> dict[str, Any]:
    return dict(model=engine.model or model, gpu=engine.gpu, tp=engine.tp, precision=engine.precision,
                max_num_seqs=engine.max_num_seqs, max_batched_tokens=engine.max_batched_tokens,
                prefix_cache=engine.prefix_cache, engine=engine.engine, engine_version=engine.engine_version)


# ------------------------------------------------------------------------------------------ vLLM


def _vllm(record: dict, engine: Engine, path: Path, line: int, problems: _Problems) -> BenchRun | None:
    before = len(problems.items)
    model = record.get("model_id") if isinstance(record.get("model_id"), str) else None
    if engine.model is None and not model:
        problems.bad("model_id", f"not in the file: state model in the sidecar {engine.path}", line)
    if record.get("ramp_up_strategy") is not None:
        problems.bad("ramp_up_strategy", "a ramp-up run is not reproduced: calibrate from runs at one request rate", line)
    rate_value = record.get("request_rate")
    rate = math.inf if rate_value == "inf" else _number(record, "request_rate", problems, line,
                                                        high=MAX_RATE_PER_S, unit="requests/s")
    burstiness = _number(record, "burstiness", problems, line, required=False, high=1e3) or 1.0
    cap = record.get("max_concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_SEQS * 16):
        problems.bad("max_concurrency", f"expected null or a whole number of requests, got {cap!r}", line)
        cap = None
    duration = _number(record, "duration", problems, line, high=LATENCY_S[1], unit="s")
    completed = _number(record, "completed", problems, line, high=MAX_REQUESTS)
    failed = int(_number(record, "failed", problems, line, required=False, high=MAX_REQUESTS, zero=True) or 0)
    totals = [_number(record, f"total_{k}_tokens", problems, line, required=False, high=MAX_TOKENS * MAX_REQUESTS)
              for k in ("input", "output")]
    errors = record.get("errors")
    keep = [not e for e in errors] if isinstance(errors, list) else None
    pairs = _lengths(record.get("input_lens"), record.get("output_lens"), keep)
    # vLLM writes 0 for a metric it could not measure (np.mean of an empty list: no streaming, or
    # no request of more than one output token): not a latency, so not compared
    zeros = [k for k in ("mean_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms") if record.get(k) == 0]
    record = {**record, **dict.fromkeys(zeros)}
    measured = {
        "ttft_mean_s": _latency(record, "mean_ttft_ms", 1e3, problems, line),
        "ttft_p90_s": _latency(record, "p90_ttft_ms", 1e3, problems, line),
        "ttft_p99_s": _latency(record, "p99_ttft_ms", 1e3, problems, line),
        "tpot_mean_s": _latency(record, "mean_tpot_ms", 1e3, problems, line),
        "e2e_mean_s": _latency(record, "mean_e2el_ms", 1e3, problems, line),
        "e2e_p90_s": _latency(record, "p90_e2el_ms", 1e3, problems, line),
    }
    notes = [f"{k} is 0 in the file (not measured): not compared" for k in zeros]
    for metric, key in (("e2e", "latencies"), ("ttft", "ttfts")):
        values = _successful(record.get(key), keep, failed)
        if values is not None and measured[f"{metric}_mean_s"] is None and metric == "e2e":
            measured["e2e_mean_s"] = float(np.mean(values))
            notes.append(f"E2E mean from the file's per-request {key}")
        if values is not None and measured[f"{metric}_p90_s"] is None:
            measured[f"{metric}_p90_s"] = float(np.percentile(values, 90))
            notes.append(f"{metric.upper()} p90 from the file's per-request {key}")
        if values is not None and metric == "ttft" and measured["ttft_p99_s"] is None:
            measured["ttft_p99_s"] = float(np.percentile(values, 99))
            notes.append(f"TTFT p99 from the file's per-request {key}")
    if all(v is None for v in measured.values()):
        problems.bad("mean_ttft_ms", "the file states no TTFT, TPOT or E2E latency: nothing to compare", line)
    if len(problems.items) > before:
        return None
    fields = _engine_fields(engine, model)
    run_id = f"{path.stem}" + (f":{line}" if line else "")
    if pairs is not None:
        lengths, inputs, outputs = pairs, 0, 0
        notes.insert(0, f"replays the file's {len(pairs)} successful requests' lengths in order")
    else:
        fixed = _fixed(engine, *(t / completed if t is not None else None for t in totals),
                       "lengths (total_input_tokens, total_output_tokens over completed)", problems)
        if fixed is None:
            return None
        lengths, (inputs, outputs, note) = None, fixed
        notes.insert(0, note)
    count = len(pairs) if pairs is not None else int(completed)
    common = dict(run_id=run_id, line=line, source_format="vllm_bench", **fields, lengths=lengths,
                  input_tokens=inputs, output_tokens=outputs, measured=measured)
    if cap is not None and math.isinf(rate):
        return BenchRun(**common, workload=f"vllm bench closed loop x{cap}", process="closed_loop", clients=cap,
                        duration_s=duration, notes=tuple(notes + [f"max_concurrency {cap} with request_rate inf: "
                                                                  f"a closed loop of {cap} clients for {duration:g} s"]))
    if cap is not None:
        peak = record.get("max_concurrent_requests")
        if not isinstance(peak, int) or peak >= cap:
            problems.bad("max_concurrency", f"{cap} with request_rate {rate:g}: kvsim reproduces an open loop or a "
                                            "closed loop, not an open loop held to a cap the run reached (max_concurrent_"
                                            f"requests {peak if peak is not None else 'not in the file'})", line)
            return None
        notes.append(f"max_concurrency {cap} never bound (peak {peak} in flight): an open loop")
    if math.isinf(rate):
        return BenchRun(**common, workload=f"vllm bench burst of {count}", process="burst", requests=count,
                        rate=math.inf, notes=tuple(notes + ["request_rate inf: every request sent at 0 s"]))
    arrivals = "Poisson" if burstiness == 1.0 else f"Gamma (burstiness {burstiness:g})"
    return BenchRun(**common, workload=f"vllm bench {rate:g} rps", process="poisson", rate=rate, burstiness=burstiness,
                    requests=count, notes=tuple(notes + [f"{count} requests, {arrivals} arrivals at {rate:g} requests/s"]))


def _successful(values: Any, keep: list[bool] | None, failed: int) -> list[float] | None:
    """A per-request list restricted to the successful requests, if that can be told."""
    if not isinstance(values, list) or not values or not all(isinstance(v, (int, float)) for v in values):
        return None
    if keep is not None and len(keep) == len(values):
        values = [v for v, k in zip(values, keep) if k]
    elif failed:
        return None  # which requests failed is not in the file
    values = [float(v) for v in values]
    return values if values and all(LATENCY_S[0] <= v <= LATENCY_S[1] for v in values) else None


# -------------------------------------------------------------------------------------- GuideLLM


def _guidellm(report: dict, engine: Engine, path: Path, problems: _Problems) -> list[BenchRun]:
    runs = []
    for k, bench in enumerate(report["benchmarks"]):
        where = f"benchmarks[{k}]"
        if not isinstance(bench, dict):
            problems.bad(where, "expected a benchmark mapping")
            continue
        before = len(problems.items)
        strategy = _get(bench, "config.strategy") or _get(bench, "args.strategy")  # report v2, or v1
        kind = strategy.get("type_") if isinstance(strategy, dict) else None
        sub = _Problems(path)
        if "duration" not in bench and all(isinstance(bench.get(k), (int, float)) for k in ("start_time", "end_time")):
            bench = {**bench, "duration": bench["end_time"] - bench["start_time"]}  # report v1: no duration field
        duration = _number(bench, "duration", sub, high=LATENCY_S[1], unit="s")
        metric = {m: _latency(bench, f"metrics.{key}.successful.{stat}", per_s, sub)
                  for m, key, stat, per_s in (("ttft_mean_s", "time_to_first_token_ms", "mean", 1e3),
                                               ("ttft_p90_s", "time_to_first_token_ms", "percentiles.p90", 1e3),
                                               ("ttft_p99_s", "time_to_first_token_ms", "percentiles.p99", 1e3),
                                               ("tpot_mean_s", "inter_token_latency_ms", "mean", 1e3),
                                               ("e2e_mean_s", "request_latency", "mean", 1.0),
                                               ("e2e_p90_s", "request_latency", "percentiles.p90", 1.0))}
        problems.items += [p.replace(f"{path}: ", f"{path}: {where}.", 1) for p in sub.items]
        notes = ["TPOT is GuideLLM's inter_token_latency_ms mean (weighted by each request's output - 1 tokens)"]
        samples = _get(bench, "requests.successful")
        pairs = _lengths([r.get("prompt_tokens") for r in samples if isinstance(r, dict)],
                         [r.get("output_tokens") for r in samples if isinstance(r, dict)],
                         None) if isinstance(samples, list) else None
        fixed = None if pairs else _fixed(
            engine, _get(bench, "metrics.prompt_token_count.successful.mean"),
            _get(bench, "metrics.output_token_count.successful.mean"),
            "lengths (metrics.prompt_token_count, output_token_count)", problems)
        if kind not in ("synchronous", "concurrent", "throughput", "constant", "poisson"):
            problems.bad(f"{where}.config.strategy.type_", f"{kind!r}: kvsim reproduces synchronous, concurrent, "
                                                           "throughput (with max_concurrency), constant and poisson")
        if len(problems.items) > before or (pairs is None and fixed is None):
            continue
        if pairs:
            notes.insert(0, f"replays the lengths of the {len(pairs)} successful requests the report keeps, in turn")
        else:
            notes.insert(0, fixed[2])
        common = dict(run_id=f"{path.stem}#{k}", line=0, source_format="guidellm", **_engine_fields(engine, None),
                      lengths=pairs, input_tokens=fixed[0] if fixed else 0, output_tokens=fixed[1] if fixed else 0,
                      measured=metric)
        if kind in ("synchronous", "concurrent", "throughput"):
            clients = {"synchronous": 1, "concurrent": strategy.get("streams"),
                       "throughput": strategy.get("max_concurrency")}[kind]
            if isinstance(clients, bool) or not isinstance(clients, int) or clients < 1:
                field_name = "streams" if kind == "concurrent" else "max_concurrency"
                problems.bad(f"{where}.config.strategy.{field_name}", f"a {kind} benchmark needs a whole number of "
                                                                      f"concurrent requests, got {clients!r}")
                continue
            runs.append(BenchRun(**common, workload=f"guidellm {kind} x{clients}", process="closed_loop",
                                 clients=clients, duration_s=duration,
                                 notes=tuple(notes + [f"{kind}: a closed loop of {clients} for {duration:g} s"])))
            continue
        rate = _number(strategy, "rate", sub := _Problems(path), high=MAX_RATE_PER_S, unit="requests/s")
        problems.items += [p.replace(f"{path}: ", f"{path}: {where}.config.strategy.", 1) for p in sub.items]
        if rate is None:
            continue
        count = max(1, round(rate * duration))
        process = "constant" if kind == "constant" else "poisson"
        runs.append(BenchRun(**common, workload=f"guidellm {kind} {rate:g} rps", process=process, rate=rate,
                             requests=count, notes=tuple(notes + [
                                 f"{count} requests ({rate:g} requests/s x {duration:g} s), "
                                 + ("evenly spaced" if kind == "constant" else "Poisson arrivals")])))
    return runs


# -------------------------------------------------------------------------------- inference-perf


def _inference_perf(report: dict, engine: Engine, path: Path, problems: _Problems) -> BenchRun | VllmRun | None:
    before = len(problems.items)
    summary = report.get("load_summary") or {}
    rate, concurrency = summary.get("requested_rate"), summary.get("concurrency")
    if rate is None and concurrency is None:
        problems.bad("load_summary.requested_rate", "not in the file: a summary report over all stages; give the "
                                                    "stage_N_lifecycle_metrics.json files (one run each)")
        return None
    count = _number(report, "load_summary.count", problems, high=MAX_REQUESTS)
    lat = "successes.latency"
    measured = {"ttft_mean_s": _latency(report, f"{lat}.time_to_first_token.mean", 1.0, problems),
                "ttft_p90_s": _latency(report, f"{lat}.time_to_first_token.p90", 1.0, problems),
                "ttft_p99_s": _latency(report, f"{lat}.time_to_first_token.p99", 1.0, problems),
                "tpot_mean_s": _latency(report, f"{lat}.time_per_output_token.mean", 1.0, problems),
                "e2e_mean_s": _latency(report, f"{lat}.request_latency.mean", 1.0, problems),
                "e2e_p90_s": _latency(report, f"{lat}.request_latency.p90", 1.0, problems)}
    if measured["ttft_mean_s"] is None and measured["e2e_mean_s"] is None:
        problems.bad(f"{lat}", "holds neither time_to_first_token nor request_latency: nothing to compare")
    closed = concurrency is not None  # a CONCURRENT stage (its rate, if any, is set at run time)
    if closed:
        clients = concurrency if isinstance(concurrency, int) and not isinstance(concurrency, bool) else None
        duration = _number(report, "load_summary.send_duration", problems, high=LATENCY_S[1], unit="s")
        if clients is None or clients < 1:
            problems.bad("load_summary.concurrency", f"expected a whole number of concurrent requests, got {concurrency!r}")
    else:
        rate = _number(report, "load_summary.requested_rate", problems, high=MAX_RATE_PER_S, unit="requests/s")
    if len(problems.items) > before:
        return None
    fields = _engine_fields(engine, None)
    stage = path.stem.replace("_lifecycle_metrics", "")
    run_id = f"{path.parent.name}/{stage}" if path.parent.name else stage
    if engine.shared_prefix is not None and not closed:
        groups, users, system, question, output = engine.shared_prefix
        return VllmRun(run_id=run_id, line=0, workload=f"inference-perf {stage}", system_prompts=groups, users=users,
                       system_tokens=system, question_tokens=question, output_tokens=output,
                       stages=((rate, _stage_s(count, rate)),), measured=measured, **fields)
    mean_in = _get(report, "successes.prompt_tokens.mean") or _get(report, "successes.prompt_len.mean")
    mean_out = _get(report, "successes.output_len.mean") or _get(report, "successes.output_tokens.mean")
    fixed = _fixed(engine, mean_in, mean_out, "lengths (successes.prompt_tokens / prompt_len, output_len)", problems)
    if fixed is None:
        return None
    common = dict(run_id=run_id, line=0, source_format="inference_perf", **fields, input_tokens=fixed[0],
                  output_tokens=fixed[1], measured=measured)
    if closed:
        return BenchRun(**common, workload=f"inference-perf {stage} x{clients}", process="closed_loop", clients=clients,
                        duration_s=duration, notes=(fixed[2], f"concurrency {clients}: a closed loop for {duration:g} s"))
    return BenchRun(**common, workload=f"inference-perf {stage}", process="stages", rate=rate, requests=int(count),
                    duration_s=_stage_s(count, rate), notes=(fixed[2], f"one constant-rate stage: {int(count)} requests "
                                                                        f"at {rate:g} requests/s over {count / rate:g} s"))


def _stage_s(count: float, rate: float) -> float:
    """The length of a stage sending ``count`` requests at ``rate``: kvsim's ``stages`` arrival sends
    ``floor(rate x seconds)``, so a hair over ``count / rate`` keeps the count whatever the rounding."""
    return (count + 1e-6) / rate
