"""Read measured data into typed rows; a malformed file gets one ``file:line: column: message`` per problem.

Two formats, told apart by their header:

- **vLLM request-level runs** (``../shared/calibration/vllm_h100_runs.csv``): one serving run per
  row: the engine's settings, an inference-perf ``shared_prefix`` workload sent in constant-rate
  stages, and client-side latency summaries (seconds).
- **Per-iteration step table** (``../shared/traces/splitwise_sim_perf_model.csv``, Splitwise-sim
  ``data/perf_model.csv``): one measured batch per row: ``prompt_time`` (ms) to prefill
  ``batch_size`` prompts of ``prompt_size`` tokens in one iteration, and ``token_time`` (ms), the
  mean decode iteration while the batch generates ``token_size`` tokens each. Repeats of one point
  are averaged into one :class:`StepPoint`.

A JSON or YAML file is a benchmark result file instead (``vllm bench serve``, GuideLLM,
inference-perf), read by :mod:`kvsim.calibration.bench_files`.

Every cell is checked for physical sense before anything is simulated
(:mod:`kvsim.calibration.checks` holds the bounds and their reasons): latencies from 1 us to a
day, counts whole numbers in decimal digits within an engine's limits, rates and fractions in
range, and the columns that state one thing twice agreeing -- TTFT at most E2E, percentiles in
order, TPOT equal to ``(E2E - TTFT) / (output - 1)``, the request count and mean rate equal to
the stages', ``max_num_batched_tokens >= max_num_seqs``, a request within ``max_model_len``.
Columns of neither kind (provenance, notes) are not read.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kvsim.calibration.checks import (
    LATENCY_S,
    MAX_BATCHED_TOKENS,
    MAX_CARDS,
    MAX_PROMPTS,
    MAX_RATE_PER_S,
    MAX_REQUESTS,
    MAX_SEQS,
    MAX_TOKENS,
    MAX_TOKENS_PER_S,
    STAGE_S,
    RowCells,
    capped,
)
from kvsim.yaml_io import SpecError, read_utf8

__all__ = [
    "MeasurementError", "VllmRun", "StepPoint", "Measurements", "read_measurements", "METRICS",
    "VLLM_COLUMNS", "STEP_COLUMNS",
]

METRICS = ("ttft_mean_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s", "e2e_mean_s", "e2e_p90_s")
"""Request-level metrics compared (client side, seconds)."""

VLLM_COLUMNS = ("exp_id", "model", "gpu", "tp", "precision", "max_num_seqs", "max_num_batched_tokens",
                "prefix_cache", "workload", "dataset_or_synthetic", "arrival_detail", "ttft_mean_s", "ttft_p90_s",
                "tpot_mean_s", "e2e_mean_s", "e2e_p90_s")
"""The columns a measured-runs CSV must have (``ttft_p99_s`` and the other percentiles may be left out)."""
STEP_COLUMNS = ("model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time",
                "tensor_parallel")


class MeasurementError(SpecError):
    """A measurement file that cannot be read; one message per problem."""


@dataclass(frozen=True)
class VllmRun:
    """One measured vLLM serving run (an inference-perf ``shared_prefix`` workload).

    ``stages`` are the constant-rate stages ``(rate requests/s, seconds)`` sent back to back. The
    workload has ``system_prompts x users`` distinct prompts (``prompts_sent`` where the load
    generator sent another number: :data:`INFERENCE_SIM_PROMPTS`), each ``system_tokens`` shared by
    its group plus ``question_tokens`` of its own; every request asks for ``output_tokens``
    (ignore_eos). ``measured`` maps each of :data:`METRICS` to seconds (None when the file leaves
    it blank).
    """

    run_id: str
    line: int
    model: str
    gpu: str
    tp: int
    precision: str
    max_num_seqs: int
    max_batched_tokens: int
    prefix_cache: bool
    workload: str
    system_prompts: int
    users: int
    system_tokens: int
    question_tokens: int
    output_tokens: int
    stages: tuple[tuple[float, float], ...]
    measured: dict[str, float | None] = field(hash=False, compare=False)
    prompts_sent: int | None = None
    engine: str = ""
    engine_version: str = ""

    @property
    def distinct_prompts(self) -> int:
        """The distinct prompts the load generator sent (each in turn)."""
        return self.prompts_sent if self.prompts_sent is not None else self.system_prompts * self.users

    @property
    def prompt_tokens(self) -> int:
        return self.system_tokens + self.question_tokens

    @property
    def label(self) -> str:
        short = self.model.split("/")[-1]
        return f"{self.run_id} {short} tp{self.tp} {self.workload}"


@dataclass(frozen=True)
class StepPoint:
    """One measured batch shape of a per-iteration step table (repeats averaged).

    Times are seconds; ``lines`` are the file lines averaged.
    """

    model: str
    hardware: str
    tp: int
    prompt_tokens: int
    batch: int
    output_tokens: int
    prompt_time_s: float
    token_time_s: float
    repeats: int
    lines: tuple[int, ...]

    @property
    def point_id(self) -> str:
        return (f"{self.model}/{self.hardware}/tp{self.tp}/p{self.prompt_tokens}/b{self.batch}/"
                f"t{self.output_tokens}")


@dataclass(frozen=True)
class Measurements:
    """The rows of one measurement file, with its path and sha256 (provenance)."""

    path: str
    sha256: str
    kind: str  # "vllm_runs", "step_table" or "bench_runs"
    runs: tuple = ()  # VllmRun, or for "bench_runs" BenchRun (and VllmRun: inference-perf shared_prefix)
    steps: tuple[StepPoint, ...] = ()

    @property
    def ids(self) -> list[str]:
        return [r.run_id for r in self.runs] if self.runs else [p.point_id for p in self.steps]


_WORKLOAD = re.compile(
    r"shared_prefix \((?P<groups>[0-9]+) sys prompts? x (?P<users>[0-9]+) users?; sys (?P<sys>[0-9]+) \+ "
    r"q (?P<q>[0-9]+) tok;.*?out (?P<out>[0-9]+)\)")
_STAGE = re.compile(r"^\s*(?P<rate>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*rps\s*x\s*"
                    r"(?P<secs>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*s\s*$")
_PRECISIONS = ("FP16", "BF16", "FP8")
"""Weight precisions a run may state (``FP8...``: any FP8 scheme, e.g. ``FP8-dynamic``)."""
_CONSISTENT = 0.10
"""Relative tolerance of the cross-checks between columns that state one quantity twice (TPOT
against TTFT and E2E; the request count and mean rate against the stages): 10 %, well above the
rounding of a published table, well below a slip of a digit."""


def read_measurements(path: str | Path) -> Measurements:
    """Read a measurement file: a CSV (either format, told by its header), or a benchmark result
    file (JSON or YAML, told by its keys: :mod:`kvsim.calibration.bench_files`).

    Raises
    ------
    MeasurementError
        Naming file, line and column of every problem found.
    """
    path = Path(path)
    data, text = read_utf8(path, "measurement file", MeasurementError)
    if text.lstrip().startswith(("{", "[")) or path.suffix.lower() in (".json", ".jsonl", ".yaml", ".yml"):
        from kvsim.calibration.bench_files import read_bench_file  # vLLM / GuideLLM / inference-perf results

        return read_bench_file(path, data, text)
    digest = hashlib.sha256(data).hexdigest()
    # newline="": lines end only at \n or \r, as in the file (str.splitlines also ends them at
    # U+2028 and other separators a cell may hold, which would cut a row and shift every line)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise MeasurementError([f"{path}:1: header: cannot read as CSV: {exc}"]) from None
    if all(c in header for c in STEP_COLUMNS):
        return Measurements(str(path), digest, "step_table", steps=_read_steps(reader, path))
    if "dataset_or_synthetic" in header or "ttft_mean_s" in header:
        missing = [c for c in VLLM_COLUMNS if c not in header]
        if missing:
            raise MeasurementError([f"{path}:1: missing column(s) {', '.join(missing)} of a vLLM runs table"])
        return Measurements(str(path), digest, "vllm_runs", runs=_read_runs(reader, path))
    raise MeasurementError([
        f"{path}:1: unknown measurement format: expected the columns of a vLLM runs table "
        f"({', '.join(VLLM_COLUMNS[:4])}, ...) or of a per-iteration step table ({', '.join(STEP_COLUMNS)})"])


def _line(reader: csv.DictReader) -> int:
    return reader.line_num


def _rows(reader: csv.DictReader, path: Path, problems: list[str]) -> Iterator[dict[str, str | None]]:
    """The reader's rows, until one Python's CSV reader cannot read (a cell over its limit of
    131,072 characters, as :mod:`kvsim.workload.trace_csv` refuses one): that is a problem with
    the row's first line, and reading stops."""
    start = reader.line_num + 1
    try:
        for row in reader:
            yield row
            start = reader.line_num + 1
    except csv.Error as exc:
        problems.append(f"{path}:{start}: row: cannot read as CSV: {exc}")


def _read_runs(reader: csv.DictReader, path: Path) -> tuple[VllmRun, ...]:
    runs: list[VllmRun] = []
    problems: list[str] = []
    seen: set[str] = set()
    for row in _rows(reader, path, problems):
        run = _run(RowCells(row, path, _line(reader), problems), seen)
        if run is not None:
            runs.append(run)
    if problems:
        raise MeasurementError(capped(problems))
    if not runs:
        raise MeasurementError([f"{path}: holds no runs (a header only)"])
    return tuple(runs)


def _run(cells: RowCells, seen: set[str]) -> VllmRun | None:
    """One row of a vLLM runs table, every column checked for sense; None if it has a problem
    (added to ``cells.problems``)."""
    run_id = cells.text("exp_id")
    if run_id and run_id in seen:
        cells.bad("exp_id", f"duplicate run id {run_id!r}")
    seen.add(run_id)
    model = cells.text("model")
    precision = cells.text("precision", required=False).upper()
    if precision and not precision.startswith(_PRECISIONS):
        cells.bad("precision", f"expected FP16, BF16 or FP8 (the weight formats kvsim reproduces), got {precision[:40]!r}")
    shape = _workload(cells)
    stages = _stages(cells)
    cache = cells.choice("prefix_cache", ("on", "off"))
    cells.choice("chunked_prefill", ("on", "off"), required=False)
    cards = "a calibration run is reproduced on one node"
    tp = cells.count("tp", high=MAX_CARDS, why=cards)
    dp = cells.count("dp", required=False, high=MAX_CARDS, why=cards)
    gpus = cells.count("num_gpus", required=False, high=MAX_CARDS, why=cards)
    seqs = cells.count("max_num_seqs", high=MAX_SEQS, why="vLLM's defaults are 256 to 1,024")
    budget = cells.count("max_num_batched_tokens", high=MAX_BATCHED_TOKENS, why="vLLM's defaults are 2,048 to 16,384")
    model_len = cells.count("max_model_len", required=False, high=MAX_TOKENS, why="beyond any model's context")
    cells.count("gpu_kv_blocks", required=False, high=MAX_TOKENS, why="pages of 16 tokens: beyond any card's memory")
    cells.count("cpu_kv_blocks", required=False, low=0, high=MAX_TOKENS, why="pages of 16 tokens: beyond any host's memory")
    cells.real("gpu_mem_util", required=False, high=1.0, why="a fraction of the card's memory")
    stated = cells.count("num_requests", required=False, high=MAX_REQUESTS, why="each is simulated")
    failed = cells.count("num_failed", required=False, low=0, high=MAX_REQUESTS, why="each is simulated")
    rate = cells.real("arrival_rate_rps", required=False, high=MAX_RATE_PER_S, unit="requests/s",
                      why="one engine's API server accepts hundreds a second")
    for column in ("mean_input_tokens", "mean_output_tokens"):
        cells.real(column, required=False, low=1.0, low_open=False, high=float(MAX_TOKENS), unit="tokens",
                   why="beyond any model's context")
    for column in ("throughput_tok_s", "output_throughput_tok_s"):
        cells.real(column, required=False, high=MAX_TOKENS_PER_S, unit="tokens/s",
                   why="one 8-card node reaches about a million")
    cells.real("throughput_req_s", required=False, high=MAX_RATE_PER_S, unit="requests/s",
               why="one engine's API server accepts hundreds a second")
    measured = {m: cells.latency(m) for m in METRICS}
    latencies = {**measured, **{m: cells.latency(m) for m in _MORE_LATENCIES}}
    if measured["tpot_mean_s"] is None and measured["ttft_mean_s"] is None and not cells.failed:
        cells.bad("ttft_mean_s", "the run states neither TTFT nor TPOT: nothing to compare")
    _latencies_agree(cells, latencies, shape[4] if shape else None)
    if tp is not None and gpus is not None and gpus < tp * (dp or 1):
        cells.bad("num_gpus", f"{gpus} card(s), fewer than tp x dp = {tp * (dp or 1)}")
    if seqs is not None and budget is not None and budget < seqs:
        cells.bad("max_num_batched_tokens", f"{budget:,} is below max_num_seqs {seqs:,}: vLLM refuses such an engine "
                                            "(a step's token budget holds at least one token of every running sequence)")
    if model_len is not None and shape is not None and shape[2] + shape[3] + shape[4] > model_len:
        cells.bad("max_model_len", f"{model_len:,} tokens, but every request holds {shape[2] + shape[3]} prompt + "
                                   f"{shape[4]} output tokens: vLLM refuses a request longer than max_model_len")
    if failed is not None and stated is not None and failed > stated:
        cells.bad("num_failed", f"{failed:,} failed of {stated:,} requests sent (num_requests)")
    if stages:
        _stages_agree(cells, stages, stated, rate)
    if cells.failed:
        return None
    groups, users, system_tokens, question_tokens, output_tokens = shape
    return VllmRun(
        run_id=run_id, line=cells.line, model=model, gpu=cells.text("gpu", required=False),
        tp=tp, precision=precision, max_num_seqs=seqs, max_batched_tokens=budget, prefix_cache=cache == "on",
        workload=cells.text("workload", required=False), system_prompts=groups, users=users,
        system_tokens=system_tokens, question_tokens=question_tokens, output_tokens=output_tokens,
        stages=tuple(stages), measured=measured,
        engine=cells.text("engine", required=False), engine_version=cells.text("engine_version", required=False),
        prompts_sent=INFERENCE_SIM_PROMPTS if cells.text("metrics_source", required=False).startswith("inference-sim/")
        else None)


INFERENCE_SIM_PROMPTS = 10 * 10
"""Distinct prompts inference-sim's collection pipeline sent, whatever its profile's ``N`` system
prompts x ``M`` users: the inference-perf build it pins (kubernetes-sigs/inference-perf at
e8e0aa99, inference-sim/tektonc-data-collection@2b75124 ``tekton/tasks/install-inference-perf.yaml``)
knew neither ``num_unique_system_prompts`` nor ``num_users_per_system_prompt`` (accepted as aliases
from inference-perf v0.4.0) and dropped them, so it sent its defaults, ``num_groups`` 10 x
``num_prompts_per_group`` 10. The resolved ``config.yaml`` of the 16 runs at
inference-sim/training@ed5c1d2 (``default_args/*/results/config.yaml``, run 20260217-155451 among
them) reads 10 x 10 (H); those of the trainval runs 17-67 are not published, but they came from
the same pipeline and vLLM (M). Applied to rows whose ``metrics_source`` is an inference-sim
repository."""


_MORE_LATENCIES = ("ttft_p50_s", "e2e_p50_s", "e2e_p99_s")
"""Latency columns not compared, but checked (their order against the compared ones)."""


def _workload(cells: RowCells) -> tuple[int, int, int, int, int] | None:
    """``(system prompts, users, system tokens, question tokens, output tokens)`` of the row's
    ``shared_prefix`` workload, checked; None if it has a problem."""
    column = "dataset_or_synthetic"
    match = _WORKLOAD.search(cells.row.get(column) or "")
    if match is None:
        cells.bad(column, "expected 'shared_prefix (N sys prompts x M users; sys S + q Q tok; ..., out O)'")
        return None
    groups, users, system, question, output = (int(match[k]) for k in ("groups", "users", "sys", "q", "out"))
    problems_before = len(cells.problems)
    if groups < 1 or users < 1:
        cells.bad(column, f"{groups} system prompts x {users} users: each must be at least 1")
    elif groups * users > MAX_PROMPTS:
        cells.bad(column, f"{groups:,} system prompts x {users:,} users: more than {MAX_PROMPTS:,} distinct prompts "
                          "(kvsim builds each; inference-perf's sets hold tens)")
    if system + question < 2:
        cells.bad(column, f"a prompt of {system} + {question} tokens: at least 2 (kvsim models it as a cached "
                          "document and the one token vLLM always recomputes)")
    if output < 1:
        cells.bad(column, "out 0: every request asks for at least one output token")
    if system + question + output > MAX_TOKENS:
        cells.bad(column, f"{system + question + output:,} tokens a request: beyond any model's context "
                          f"(at most {MAX_TOKENS:,})")
    return (groups, users, system, question, output) if len(cells.problems) == problems_before else None


def _stages(cells: RowCells) -> list[tuple[float, float]]:
    """The row's constant-rate stages ``(requests/s, seconds)``, checked; empty if one has a problem."""
    stages = []
    for part in (cells.row.get("arrival_detail") or "").split(";"):
        match = _STAGE.match(part)
        if match is None:
            cells.bad("arrival_detail", f"expected stages like '2.5 rps x 600 s;6 rps x 600 s', got {part.strip()[:60]!r}")
            return []
        rate, seconds = float(match["rate"]), float(match["secs"])
        if not 0 < rate <= MAX_RATE_PER_S:
            cells.bad("arrival_detail", f"stage {part.strip()!r}: its rate must be > 0 and at most {MAX_RATE_PER_S:,g} "
                                        "requests/s (one engine's API server accepts hundreds a second)")
            return []
        if not STAGE_S[0] <= seconds <= STAGE_S[1]:
            cells.bad("arrival_detail", f"stage {part.strip()!r}: its length must be from {STAGE_S[0]:g} s to a day, "
                                        f"{STAGE_S[1]:,g} s (kvsim simulates every stage at full length)")
            return []
        stages.append((rate, seconds))
    sent = sum(math.floor(rate * seconds) for rate, seconds in stages)  # as StagedArrivals sends them
    if not 1 <= sent <= MAX_REQUESTS:
        cells.bad("arrival_detail", f"the stages send {sent:,} requests: from 1 to {MAX_REQUESTS:,} "
                                    "(each is simulated, several times over in a fit)")
        return []
    return stages


def _latencies_agree(cells: RowCells, latencies: dict[str, float | None], output_tokens: int | None) -> None:
    """Cross-checks between the latency columns a row states (whichever are there)."""
    for metric in ("ttft", "e2e"):
        present = [(f"{metric}_{q}_s", latencies[f"{metric}_{q}_s"]) for q in ("p50", "p90", "p99")
                   if latencies[f"{metric}_{q}_s"] is not None]
        for (low_name, low), (high_name, high) in zip(present, present[1:]):
            if high < low:
                cells.bad(high_name, f"{high:g} s is below {low_name} {low:g} s: percentiles never decrease "
                                     "(p50 <= p90 <= p99)")
    for statistic in ("mean", "p50", "p90", "p99"):
        ttft, e2e = latencies[f"ttft_{statistic}_s"], latencies[f"e2e_{statistic}_s"]
        if ttft is not None and e2e is not None and ttft > e2e:
            cells.bad(f"ttft_{statistic}_s", f"{ttft:g} s exceeds e2e_{statistic}_s {e2e:g} s: a request's first "
                                             f"token comes before its last, so TTFT's {statistic} is at most E2E's")
    tpot, ttft, e2e = latencies["tpot_mean_s"], latencies["ttft_mean_s"], latencies["e2e_mean_s"]
    if tpot is None or output_tokens is None:
        return
    if output_tokens < 2:
        cells.bad("tpot_mean_s", "stated, but every request asks for 1 output token: TPOT, "
                                 "(E2E - TTFT) / (output - 1), is undefined")
    elif ttft is not None and e2e is not None and e2e > ttft:
        implied = (e2e - ttft) / (output_tokens - 1)
        if abs(tpot / implied - 1) > _CONSISTENT:
            cells.bad("tpot_mean_s", f"{tpot:g} s, but (e2e_mean_s - ttft_mean_s) / (output - 1) = "
                                     f"({e2e:g} - {ttft:g}) / {output_tokens - 1} = {implied:.4g} s: TPOT is defined so "
                                     f"(every request asks for {output_tokens} tokens), and they differ by "
                                     f"{abs(tpot / implied - 1):.0%} (more than {_CONSISTENT:.0%})")


def _stages_agree(cells: RowCells, stages: list[tuple[float, float]], stated: int | None, rate: float | None) -> None:
    """The request count and mean rate a row states, against its stages."""
    sent = sum(math.floor(r * s) for r, s in stages)
    if stated is not None and abs(stated / sent - 1) > _CONSISTENT:
        cells.bad("num_requests", f"{stated:,} requests, but the stages of arrival_detail send {sent:,}: one of the "
                                  "two is wrong")
    mean = sum(r * s for r, s in stages) / sum(s for _, s in stages)
    if rate is not None and abs(rate / mean - 1) > _CONSISTENT:
        cells.bad("arrival_rate_rps", f"{rate:g} requests/s, but the stages of arrival_detail average {mean:.4g}: one "
                                      "of the two is wrong")


def _read_steps(reader: csv.DictReader, path: Path) -> tuple[StepPoint, ...]:
    groups: dict[tuple, list[tuple[int, float, float]]] = {}
    problems: list[str] = []
    for row in _rows(reader, path, problems):
        cells = RowCells(row, path, _line(reader), problems)
        model, hardware = cells.text("model"), cells.text("hardware")
        tp = cells.count("tensor_parallel", high=MAX_CARDS, why="a calibration point is reproduced on one node")
        prompt = cells.count("prompt_size", high=MAX_TOKENS, why="beyond any model's context")
        batch = cells.count("batch_size", high=MAX_SEQS, why="vLLM's defaults are 256 to 1,024 sequences")
        tokens = cells.count("token_size", high=MAX_TOKENS, why="beyond any model's context")
        prompt_s, token_s = cells.iteration("prompt_time"), cells.iteration("token_time")
        e2e_s = cells.real("e2e_time", required=False, low=LATENCY_S[0], low_open=False, high=LATENCY_S[1], unit="s",
                           per_s=1e3, expected="a time in ms", why="a request's time lies between 1 us and a day")
        peak, average = (cells.real(c, required=False, low=0.0, low_open=False) for c in ("peak_power", "average_power"))
        if prompt is not None and batch is not None and prompt * batch > MAX_BATCHED_TOKENS:
            cells.bad("prompt_size", f"{batch} prompts of {prompt:,} tokens prefill {prompt * batch:,} tokens in one "
                                     f"iteration: more than {MAX_BATCHED_TOKENS:,}, no engine's token budget")
        if prompt is not None and tokens is not None and prompt + tokens > MAX_TOKENS:
            cells.bad("token_size", f"{prompt:,} + {tokens:,} tokens a sequence: beyond any model's context")
        for column, part in (("prompt_time", prompt_s), ("token_time", token_s)):
            if e2e_s is not None and part is not None and e2e_s < part:
                cells.bad("e2e_time", f"{e2e_s * 1e3:g} ms is below {column} {part * 1e3:g} ms: a request's time "
                                      "holds each of its iterations")
        if peak is not None and average is not None and average > peak:
            cells.bad("average_power", f"{average:g} is above peak_power {peak:g}")
        if not cells.failed:
            groups.setdefault((model, hardware, tp, prompt, batch, tokens), []).append((cells.line, prompt_s, token_s))
    if problems:
        raise MeasurementError(capped(problems))
    if not groups:
        raise MeasurementError([f"{path}: holds no measurements (a header only)"])
    points = []
    for (model, hardware, tp, prompt, batch, tokens), rows in groups.items():
        points.append(StepPoint(
            model=model, hardware=hardware, tp=tp, prompt_tokens=prompt, batch=batch, output_tokens=tokens,
            prompt_time_s=sum(r[1] for r in rows) / len(rows), token_time_s=sum(r[2] for r in rows) / len(rows),
            repeats=len(rows), lines=tuple(r[0] for r in rows)))
    return tuple(points)
