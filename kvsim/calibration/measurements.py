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
"""

from __future__ import annotations

import csv
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from kvsim.yaml_io import SpecError, read_utf8

__all__ = [
    "MeasurementError", "VllmRun", "StepPoint", "Measurements", "read_measurements", "METRICS",
    "VLLM_COLUMNS", "STEP_COLUMNS",
]

METRICS = ("ttft_mean_s", "ttft_p90_s", "tpot_mean_s", "e2e_mean_s", "e2e_p90_s")
"""Request-level metrics compared (client side, seconds)."""

VLLM_COLUMNS = ("exp_id", "model", "gpu", "tp", "precision", "max_num_seqs", "max_num_batched_tokens",
                "prefix_cache", "workload", "dataset_or_synthetic", "arrival_detail") + METRICS
STEP_COLUMNS = ("model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time",
                "tensor_parallel")


class MeasurementError(SpecError):
    """A measurement file that cannot be read; one message per problem."""


@dataclass(frozen=True)
class VllmRun:
    """One measured vLLM serving run (an inference-perf ``shared_prefix`` workload).

    ``stages`` are the constant-rate stages ``(rate requests/s, seconds)`` sent back to back. The
    workload has ``system_prompts x users`` distinct prompts, each ``system_tokens`` shared by its
    group plus ``question_tokens`` of its own; every request asks for ``output_tokens`` (ignore_eos).
    ``measured`` maps each of :data:`METRICS` to seconds (None when the file leaves it blank).
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
    kind: str  # "vllm_runs" or "step_table"
    runs: tuple[VllmRun, ...] = ()
    steps: tuple[StepPoint, ...] = ()

    @property
    def ids(self) -> list[str]:
        return [r.run_id for r in self.runs] if self.kind == "vllm_runs" else [p.point_id for p in self.steps]


_WORKLOAD = re.compile(
    r"shared_prefix \((?P<groups>\d+) sys prompts? x (?P<users>\d+) users?; sys (?P<sys>\d+) \+ q (?P<q>\d+) tok;"
    r".*?out (?P<out>\d+)\)")
_STAGE = re.compile(r"^\s*(?P<rate>[0-9.]+)\s*rps\s*x\s*(?P<secs>[0-9.]+)\s*s\s*$")


def read_measurements(path: str | Path) -> Measurements:
    """Read a measurement file (either format, told by its header).

    Raises
    ------
    MeasurementError
        Naming file, line and column of every problem found.
    """
    path = Path(path)
    data, text = read_utf8(path, "measurement file", MeasurementError)
    digest = hashlib.sha256(data).hexdigest()
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
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


def _read_runs(reader: csv.DictReader, path: Path) -> tuple[VllmRun, ...]:
    runs: list[VllmRun] = []
    problems: list[str] = []
    seen: set[str] = set()
    for row in reader:
        line = _line(reader)

        def bad(column: str, message: str) -> None:
            problems.append(f"{path}:{line}: {column}: {message}")

        def number(column: str, kind=float, required: bool = True):
            text = (row.get(column) or "").strip()
            if not text:
                if required:
                    bad(column, "required, got an empty cell")
                return None
            try:
                value = float(text)
            except ValueError:
                bad(column, f"expected a number, got {text!r}")
                return None
            if kind is int:
                if value != int(value) or value < 1:
                    bad(column, f"expected a whole number >= 1, got {text!r}")
                    return None
                return int(value)
            if not value >= 0:
                bad(column, f"must not be negative, got {text!r}")
                return None
            return value

        run_id = (row.get("exp_id") or "").strip()
        if not run_id:
            bad("exp_id", "required, got an empty cell")
        elif run_id in seen:
            bad("exp_id", f"duplicate run id {run_id!r}")
        seen.add(run_id)
        workload = _WORKLOAD.search(row.get("dataset_or_synthetic") or "")
        if workload is None:
            bad("dataset_or_synthetic", "expected 'shared_prefix (N sys prompts x M users; sys S + q Q tok; ..., out O)'")
        stages = []
        for part in (row.get("arrival_detail") or "").split(";"):
            match = _STAGE.match(part)
            if match is None:
                bad("arrival_detail", f"expected stages like '2.5 rps x 600 s;6 rps x 600 s', got {part.strip()!r}")
                break
            stages.append((float(match["rate"]), float(match["secs"])))
        cache = (row.get("prefix_cache") or "").strip().lower()
        if cache not in ("on", "off"):
            bad("prefix_cache", f"expected on or off, got {cache!r}")
        values = dict(tp=number("tp", int), max_num_seqs=number("max_num_seqs", int),
                      max_batched_tokens=number("max_num_batched_tokens", int))
        measured = {m: number(m, required=False) for m in METRICS}
        if measured["tpot_mean_s"] is None and measured["ttft_mean_s"] is None:
            bad("ttft_mean_s", "the run states neither TTFT nor TPOT: nothing to compare")
        if problems and (problems[-1].startswith(f"{path}:{line}:")):
            continue
        runs.append(VllmRun(
            run_id=run_id, line=line, model=row["model"].strip(), gpu=(row.get("gpu") or "").strip(),
            tp=values["tp"], precision=(row.get("precision") or "").strip().upper(),
            max_num_seqs=values["max_num_seqs"], max_batched_tokens=values["max_batched_tokens"],
            prefix_cache=cache == "on", workload=(row.get("workload") or "").strip(),
            system_prompts=int(workload["groups"]), users=int(workload["users"]),
            system_tokens=int(workload["sys"]), question_tokens=int(workload["q"]),
            output_tokens=int(workload["out"]), stages=tuple(stages), measured=measured))
    if problems:
        raise MeasurementError(problems)
    if not runs:
        raise MeasurementError([f"{path}: holds no runs (a header only)"])
    return tuple(runs)


def _read_steps(reader: csv.DictReader, path: Path) -> tuple[StepPoint, ...]:
    groups: dict[tuple, list[tuple[int, float, float]]] = {}
    problems: list[str] = []
    for row in reader:
        line = _line(reader)
        try:
            key = (row["model"].strip(), row["hardware"].strip(), int(row["tensor_parallel"]),
                   int(row["prompt_size"]), int(row["batch_size"]), int(row["token_size"]))
        except (TypeError, ValueError):
            problems.append(f"{path}:{line}: model..tensor_parallel: expected names and whole numbers, got "
                            f"{[row.get(c) for c in STEP_COLUMNS if c not in ('prompt_time', 'token_time')]}")
            continue
        times = []
        for column in ("prompt_time", "token_time"):
            try:
                value = float(row[column])
            except (TypeError, ValueError):
                problems.append(f"{path}:{line}: {column}: expected a time in ms, got {row.get(column)!r}")
                break
            if not value > 0:
                problems.append(f"{path}:{line}: {column}: must be positive, got {value:g}")
                break
            times.append(value / 1e3)
        if len(times) == 2:
            groups.setdefault(key, []).append((line, times[0], times[1]))
    if problems:
        raise MeasurementError(problems)
    if not groups:
        raise MeasurementError([f"{path}: holds no measurements (a header only)"])
    points = []
    for (model, hardware, tp, prompt, batch, tokens), rows in groups.items():
        points.append(StepPoint(
            model=model, hardware=hardware, tp=tp, prompt_tokens=prompt, batch=batch, output_tokens=tokens,
            prompt_time_s=sum(r[1] for r in rows) / len(rows), token_time_s=sum(r[2] for r in rows) / len(rows),
            repeats=len(rows), lines=tuple(r[0] for r in rows)))
    return tuple(points)
