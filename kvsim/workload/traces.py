"""Trace replay: request logs read into :class:`RequestArrays`, with time scaling and windowing.

Formats (see ``shared/traces/README.md``):

- ``mooncake`` (FAST'25 JSONL): ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``
  of **512-token** blocks, ``len(hash_ids) == ceil(input_length / 512)``.
- ``azure_2023`` (Splitwise CSV): header ``TIMESTAMP,ContextTokens,GeneratedTokens``, wall-clock
  timestamps such as ``2023-11-16 18:17:03.9799600``; no prefix information (``hash_ids`` is None).
- ``bailian`` (Qwen-Bailian JSONL): ``chat_id``, ``parent_chat_id`` (-1 = first turn), ``timestamp``
  (s), ``input_length``, ``output_length``, ``type``, ``turn``, ``hash_ids`` of **16-token** blocks,
  ``len(hash_ids) == ceil(input_length / 16)``. Every row must have all eight fields. Replay is open
  loop at the recorded times (which already contain the users' think times); the session fields
  are validated but not used.
- ``burstgpt`` (HPMLL/BurstGPT CSV): header ``Timestamp,Model,Request tokens,Response tokens,Total tokens,
  Log Type`` (``Timestamp`` in s); no prefix information. Rows with 0 ``Response tokens`` are the
  failed requests the BurstGPT README describes and are dropped; other columns are ignored.
- ``csv`` (any CSV): ``columns:`` names the arrival, input and output columns, the arrival unit and
  optionally a column of prefix hashes with their block size
  (:class:`~kvsim.workload.trace_csv.CsvColumnsSpec`).

The CSV formats are read vectorised (:mod:`kvsim.workload.trace_csv`): millions of rows in seconds.

Time. Timestamps are finite and not negative. A row's trace time is its timestamp minus the
earliest timestamp in the file (so the first request is at 0 s); rows out of time order are
sorted, stably (the file need not be sorted). The window keeps rows with
``start_s <= trace time < start_s + duration_s`` (trace seconds, before scaling), then
``max_requests`` keeps the first rows of the window. Arrival times are
``(trace time - start_s) * time_scale``: ``time_scale = 0.5`` replays the window twice as fast (twice
the request rate), ``2.0`` half as fast.

Checks. Before parsing, the file is checked by :func:`kvsim.input_files.open_checked` (exists, a
regular file, at most 4 GiB, UTF-8 throughout). Then every row: token counts are whole numbers
from 1 to :data:`MAX_TOKENS` (no NaN, no fractions, no negatives), timestamps finite and not
negative, JSON rows are objects holding every field the format needs, and a file with no data
row is refused. The first problem raises :class:`~kvsim.input_files.InputFileError`
(``"<file>:<line>: <field>: <problem>"``, a ``ValueError``) with the 1-based line number of the
file (the CSV header is line 1). Extra JSON fields are ignored. ``kvsim validate`` and
``kvsim run`` call the same loaders (:mod:`kvsim.scenario.files`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from kvsim.input_files import InputFileError, open_checked
from kvsim.spec_types import FrozenSpec, PositiveFloat, PositiveInt, PositiveSeconds, Seconds
from kvsim.workload.requests import RequestArrays
from kvsim.workload.trace_csv import AZURE_2023_COLUMNS, BURSTGPT_COLUMNS, MAX_TOKENS, CsvColumnsSpec, read_csv_trace
from kvsim.workload.trace_jsonl import (
    RowError,
    json_rows,
    read_hashed_jsonl,
    row_hash_ids,
    row_int,
    row_timestamp,
    row_tokens,
    row_value,
    show,
)

__all__ = ["TraceSpec", "TRACE_FORMATS", "load_trace", "load_mooncake", "load_azure_2023", "load_bailian",
           "load_burstgpt", "load_csv", "CsvColumnsSpec", "native_block_tokens", "MAX_TOKENS"]

MOONCAKE_BLOCK_TOKENS = 512
BAILIAN_BLOCK_TOKENS = 16
TRACE_FORMATS: dict[str, int | None] = {"mooncake": MOONCAKE_BLOCK_TOKENS, "azure_2023": None,
                                        "bailian": BAILIAN_BLOCK_TOKENS, "burstgpt": None, "csv": None}
"""Format name -> block size (tokens) of its ``hash_ids``, or None when it has none (a ``csv`` trace's
comes from its ``columns.hash_block_tokens``)."""


class TraceSpec(FrozenSpec):
    """Requests replayed from a trace file: arrival times *and* token counts come from the file.

    Used as a workload's ``arrival:`` (``{kind: trace, format: mooncake, file: ..., time_scale: 1.0}``);
    the workload then takes no ``input_tokens``, ``output_tokens`` or ``prefix``, and its
    ``block_tokens`` is the format's (512 for mooncake, 16 for bailian). ``file`` is kept as written;
    a relative path is resolved against the ``base_dir`` given to :meth:`load` (the scenario loader
    passes the scenario file's folder, or rewrites ``file`` to an absolute path).
    ``start``/``duration`` window the trace in its own time (before scaling).
    """

    kind: Literal["trace"] = "trace"
    format: Literal["mooncake", "azure_2023", "bailian", "burstgpt", "csv"]
    file: str = Field(min_length=1)
    time_scale: PositiveFloat = 1.0
    start: Seconds = 0.0
    duration: PositiveSeconds | None = None  # 0 s would replay nothing
    max_requests: PositiveInt | None = None
    columns: CsvColumnsSpec | None = None  # format csv only: which column holds what

    @model_validator(mode="after")
    def _columns_for_csv(self) -> TraceSpec:
        if self.format == "csv" and self.columns is None:
            raise ValueError("a csv trace needs columns: {arrival, input_tokens, output_tokens} "
                             "(and arrival_unit, prefix_hashes, hash_block_tokens as needed)")
        if self.format != "csv" and self.columns is not None:
            raise ValueError(f"columns are for format csv; a {self.format} trace has fixed columns")
        return self

    @property
    def block_tokens(self) -> int | None:
        """Block size of the trace's ``hash_ids`` (None for a format without them)."""
        if self.columns is not None:
            return self.columns.hash_block_tokens
        return TRACE_FORMATS[self.format]

    def path(self, base_dir: str | Path | None = None) -> Path:
        file = Path(self.file)
        return file if file.is_absolute() or base_dir is None else Path(base_dir) / file

    def load(self, base_dir: str | Path | None = None) -> RequestArrays:
        """Read the trace (reads the file: call it where file access belongs, once per run)."""
        if self.format == "csv":
            if self.columns is None:  # (refused when the spec is made)
                raise ValueError("a csv trace needs columns")
            return load_csv(self.path(base_dir), self.columns, time_scale=self.time_scale, start_s=self.start,
                            duration_s=self.duration, max_requests=self.max_requests)
        return load_trace(self.format, self.path(base_dir), time_scale=self.time_scale, start_s=self.start,
                          duration_s=self.duration, max_requests=self.max_requests)


def native_block_tokens(arrival: object) -> int | None:
    """Block size of the ``hash_ids`` of a trace arrival (a :class:`TraceSpec` or its raw mapping),
    or None when it is not a trace or has no hashes."""
    if isinstance(arrival, TraceSpec):
        return arrival.block_tokens
    if not (isinstance(arrival, dict) and arrival.get("kind") == "trace"):
        return None
    if arrival.get("format") == "csv":
        columns = arrival.get("columns")
        block = columns.get("hash_block_tokens") if isinstance(columns, dict) else None
        return block if isinstance(block, int) and not isinstance(block, bool) else None
    trace_format = arrival.get("format")
    return TRACE_FORMATS.get(trace_format) if isinstance(trace_format, str) else None


def load_trace(format: str, path: str | Path, **window: Any) -> RequestArrays:
    """Load a trace of the named format; keyword arguments as for :func:`load_mooncake`
    (a ``csv`` trace needs its columns: :func:`load_csv`)."""
    loaders = {"mooncake": load_mooncake, "azure_2023": load_azure_2023, "bailian": load_bailian,
               "burstgpt": load_burstgpt}
    if format not in loaders:
        raise ValueError(f"unknown trace format {format!r}; known: {', '.join(loaders)}")
    return loaders[format](path, **window)


# ---------------------------------------------------------------------------------------------
# rows -> requests (the row checks are in kvsim.workload.trace_jsonl and trace_csv)
# ---------------------------------------------------------------------------------------------


def _finish(path: Path, times: Sequence[float] | np.ndarray, inputs: Sequence[int] | np.ndarray,
            outputs: Sequence[int] | np.ndarray, hashes: Sequence[np.ndarray] | None, block_tokens: int | None, time_scale: float, start_s: float,
            duration_s: float | None, max_requests: int | None) -> RequestArrays:
    if not time_scale > 0 or not math.isfinite(time_scale):
        raise ValueError(f"time_scale must be a positive number (got {time_scale})")
    if start_s < 0 or (duration_s is not None and duration_s < 0):
        raise ValueError(f"start_s and duration_s must not be negative (got {start_s}, {duration_s})")
    if max_requests is not None and max_requests < 1:
        raise ValueError(f"max_requests must be >= 1 (got {max_requests})")
    if len(times) == 0:
        raise InputFileError(path, "holds no requests (no data rows)")
    t = np.asarray(times, dtype=float)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order[0]]
    keep = t >= start_s
    if duration_s is not None:
        keep &= t < start_s + duration_s
    index = order[keep]
    if len(index) == 0:
        end = "end" if duration_s is None else f"{start_s + duration_s:g} s"
        raise InputFileError(path, f"no request in the window [{start_s:g} s, {end}) of trace time "
                                   f"(the trace spans 0 to {t[-1]:g} s)")
    if max_requests is not None:
        index = index[:max_requests]
    arrival = (t[keep][: len(index)] - start_s) * time_scale
    return RequestArrays(
        arrival_s=arrival,
        input_tokens=np.asarray(inputs, dtype=np.int64)[index],
        output_tokens=np.asarray(outputs, dtype=np.int64)[index],
        hash_ids=None if hashes is None else [hashes[i] for i in index.tolist()],
        block_tokens=None if hashes is None else block_tokens,
    )


# ---------------------------------------------------------------------------------------------
# loaders
# ---------------------------------------------------------------------------------------------


def load_mooncake(path: str | Path, *, time_scale: float = 1.0, start_s: float = 0.0,
                  duration_s: float | None = None, max_requests: int | None = None) -> RequestArrays:
    """Mooncake FAST'25 JSONL (``timestamp`` ms, 512-token ``hash_ids``) -> requests.

    Parameters
    ----------
    path : str or Path
    time_scale : float
        Arrival times are multiplied by it (0.5 = twice the rate).
    start_s, duration_s : float
        Window in trace seconds (before scaling): ``start_s <= t < start_s + duration_s``.
    max_requests : int, optional
        Keep at most this many requests (the first of the window).
    """
    return _load_hashed_jsonl(Path(path), MOONCAKE_BLOCK_TOKENS, 1000.0, None,
                              time_scale, start_s, duration_s, max_requests)


def load_bailian(path: str | Path, *, time_scale: float = 1.0, start_s: float = 0.0,
                 duration_s: float | None = None, max_requests: int | None = None) -> RequestArrays:
    """Qwen-Bailian JSONL (``timestamp`` s, 16-token ``hash_ids``, session fields) -> requests.

    Arguments as for :func:`load_mooncake`.
    """
    return _load_hashed_jsonl(Path(path), BAILIAN_BLOCK_TOKENS, 1.0, _check_bailian_session,
                              time_scale, start_s, duration_s, max_requests)


def _check_bailian_session(row: dict[str, object]) -> None:
    row_int(row, "chat_id")
    row_int(row, "parent_chat_id", minimum=-1)
    kind = row_value(row, "type")
    if not isinstance(kind, str):
        raise RowError("type", f"expected a string, got {show(kind)}")
    row_int(row, "turn", minimum=1)


def _load_hashed_jsonl(path: Path, block: int, units_per_second: float,
                       check_row: Callable[[dict[str, object]], None] | None, time_scale: float,
                       start_s: float, duration_s: float | None, max_requests: int | None) -> RequestArrays:
    """The JSONL trace formats with prefix hashes: one request per row, ``timestamp`` in
    ``1 / units_per_second`` s units, ``input_length``, ``output_length``, ``hash_ids`` of ``block`` tokens;
    ``check_row`` validates format-specific fields (a session check: Bailian's).

    A well-formed file is read vectorised (:func:`~kvsim.workload.trace_jsonl.read_hashed_jsonl`);
    otherwise row by row, which names the first bad line and field."""
    path = open_checked(path)
    fast = read_hashed_jsonl(path, block, units_per_second, session=check_row is not None)
    if fast is not None:
        times_s, inputs_, outputs_, hashes_ = fast
        return _finish(path, times_s, inputs_, outputs_, hashes_, block, time_scale, start_s, duration_s,
                       max_requests)
    units = {1.0: "s", 1000.0: "ms"}.get(units_per_second, f"1/{units_per_second:g} s")
    times: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    hashes: list[np.ndarray] = []
    for line_no, row in json_rows(path):
        try:
            if check_row is not None:
                check_row(row)
            times.append(row_timestamp(row, units) / units_per_second)
            n_in = row_tokens(row, "input_length")
            outputs.append(row_tokens(row, "output_length"))
            hashes.append(row_hash_ids(row, n_in, block))
            inputs.append(n_in)
        except RowError as exc:
            raise InputFileError(path, exc.problem, line_no, exc.field) from None
    return _finish(path, times, inputs, outputs, hashes, block, time_scale, start_s, duration_s, max_requests)


def load_azure_2023(path: str | Path, *, time_scale: float = 1.0, start_s: float = 0.0,
                    duration_s: float | None = None, max_requests: int | None = None) -> RequestArrays:
    """Azure LLM inference trace 2023 CSV (wall-clock ``TIMESTAMP``, no prefixes) -> requests.

    Arrival times are seconds from the earliest row (naive wall clock; no time zone is applied).
    Arguments as for :func:`load_mooncake`; ``hash_ids`` and ``block_tokens`` are None.
    """
    rows = read_csv_trace(path, AZURE_2023_COLUMNS, exact_header=True)
    return _finish(Path(path), rows.arrival_s, rows.input_tokens, rows.output_tokens, None, None, time_scale,
                   start_s, duration_s, max_requests)


def load_burstgpt(path: str | Path, *, time_scale: float = 1.0, start_s: float = 0.0,
                  duration_s: float | None = None, max_requests: int | None = None) -> RequestArrays:
    """BurstGPT CSV (``Timestamp`` s, ``Request tokens``, ``Response tokens``; no prefixes) -> requests.

    Rows with 0 response tokens (failed requests, per the BurstGPT README) are dropped. Arguments as
    for :func:`load_mooncake`; ``hash_ids`` and ``block_tokens`` are None.
    """
    rows = read_csv_trace(path, BURSTGPT_COLUMNS, skip_zero_output=True)
    return _finish(Path(path), rows.arrival_s, rows.input_tokens, rows.output_tokens, None, None, time_scale,
                   start_s, duration_s, max_requests)


def load_csv(path: str | Path, columns: CsvColumnsSpec, *, time_scale: float = 1.0, start_s: float = 0.0,
             duration_s: float | None = None, max_requests: int | None = None) -> RequestArrays:
    """A CSV trace with the column mapping ``columns`` -> requests (``hash_ids`` when it maps
    ``prefix_hashes``). Arguments as for :func:`load_mooncake`."""
    rows = read_csv_trace(path, columns)
    return _finish(Path(path), rows.arrival_s, rows.input_tokens, rows.output_tokens, rows.hash_ids,
                   columns.hash_block_tokens, time_scale, start_s, duration_s, max_requests)
