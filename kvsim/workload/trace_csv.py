"""Vectorised reading of CSV traces (pyarrow): generic column mapping, BurstGPT, Azure 2023.

A multi-million-row trace is read by pyarrow's multithreaded CSV reader and checked column by
column with numpy, so loading costs seconds, not minutes (``benchmarks/bench_trace_load.py``).
Columns reach numpy through their buffers (:mod:`kvsim.arrow_numpy`), not pyarrow's conversions,
which import pandas; pandas reads wall-clock stamps only when they are not all plain
``YYYY-MM-DD HH:MM:SS[.fffffffff]`` (time zones, other ISO 8601 forms) or a stamp is refused.
The row-by-row work happens only once a problem is found: to name the file's line (1-based, the
header is line 1; blank lines are skipped by the reader and counted here) and the offending value.

Checks, each giving one :class:`~kvsim.input_files.InputFileError`
(``"<file>:<line>: <column>: <problem>"``, a ``ValueError``):

- the file exists, is a regular file of at most 4 GiB and is UTF-8 throughout
  (:func:`kvsim.input_files.open_checked`);
- the first line is a header and every mapped column is in it (a missing one is named, with the
  closest header as a hint); at least one data row follows;
- every row has as many cells as the header;
- token counts are whole numbers from 1 to :data:`MAX_TOKENS` written in plain decimal digits
  (:data:`TOKEN_TEXT`; spaces or tabs around them are ignored, as around the header's names):
  no empty cell, no ``nan`` or ``inf``, no fraction (``2.5``, nor ``12.0``), no exponent (``1e3``),
  no sign (``+5``; ``-5`` is refused as negative), no ``0x10``, no ``1_000``, no digits other than
  ASCII ``0-9`` (``٣``). Each of these is refused rather than read: a count written so is the sign of a
  file that went through something else (a float column, a hex dump, a locale), and what it was
  meant to be is a guess;
- arrival times are finite decimal numbers (:data:`TIME_TEXT`: digits with an optional fraction
  and exponent, ``12``, ``1.5``, ``1.7e9``; no ``0x10``, ``1_000``, ``+5``, ``inf`` or ``nan``), not
  negative (or, with ``arrival_unit: datetime``, readable ``YYYY-MM-DD HH:MM:SS[.fffffffff]``
  wall-clock stamps): rows out of order are sorted stably later, a time that cannot be sorted
  (empty, NaN, text) is refused;
- prefix hashes, when mapped, are lists of 64-bit integers in decimal digits, optionally negative
  (``"1 2 3"``, ``"1;2;3"`` or ``"[1, 2, 3]"``; no ``0x10``, no ``+5``),
  ``ceil(input_tokens / hash_block_tokens)`` of them.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, model_validator

from kvsim.arrow_numpy import to_numpy
from kvsim.input_files import InputFileError, cell_text, open_checked, quote
from kvsim.spec_types import FrozenSpec
from kvsim.yaml_io import did_you_mean

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CsvColumnsSpec", "CsvRows", "read_csv_trace", "read_token_column", "token_values", "split_rows", "BURSTGPT_COLUMNS",
           "AZURE_2023_COLUMNS", "MAX_TOKENS", "TOKEN_TEXT", "TIME_TEXT"]

MAX_TOKENS = 2**31 - 1
"""Most tokens one request's prompt or output may have in a trace or length file: far beyond any
model's context, so a larger count is a broken file; the bound also keeps token sums over
millions of rows exact in int64."""

TOKEN_TEXT = r"^[ \t]*-?[0-9]+[ \t]*$"
"""How a token count is written in a text file: ASCII decimal digits, spaces or tabs around them
ignored. A minus sign is read only so that a negative count is refused as out of range."""

TIME_TEXT = r"^[ \t]*-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[ \t]*$"
"""How a numeric timestamp is written: a decimal number, with an optional fraction and exponent
(``12``, ``1.5``, ``.5``, ``1.7e9``), spaces or tabs around it ignored."""

_HASH_TEXT = r"^-?0*[0-9]{1,19}$"
"""One prefix-hash id: a decimal integer, optionally negative (64-bit ids are signed), of at
most 19 digits after leading zeros (2**63 has 19; a longer one is refused before Python
converts it, which it refuses to do past 4,300 digits)."""


TIME_UNITS_S = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}
"""Divisor turning a numeric timestamp in each unit into seconds."""


class CsvColumnsSpec(FrozenSpec):
    """Which column of a CSV trace holds what (``arrival: {kind: trace, format: csv, columns: ...}``).

    Attributes
    ----------
    arrival : str
        Column of the request's arrival time.
    arrival_unit : {"s", "ms", "us", "ns", "datetime"}
        Unit of a numeric arrival column (default ``s``), or ``datetime`` for wall-clock stamps
        (``2023-11-16 18:15:46.6805900``, naive; no time zone is applied).
    input_tokens, output_tokens : str
        Columns of the prompt and output lengths (tokens).
    prefix_hashes : str, optional
        Column of each prompt's prefix-chained block ids (the ``hash_ids`` of
        :class:`~kvsim.workload.requests.RequestArrays`): integers separated by spaces, ``;`` or
        ``,`` (quoted), optionally in brackets. Equal ids must mean equal blocks and equal prefixes.
    hash_block_tokens : int, optional
        Tokens per block of ``prefix_hashes`` (required with it).
    """

    arrival: str = Field(min_length=1)
    arrival_unit: Literal["s", "ms", "us", "ns", "datetime"] = "s"
    input_tokens: str = Field(min_length=1)
    output_tokens: str = Field(min_length=1)
    prefix_hashes: str | None = Field(default=None, min_length=1)
    hash_block_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _hashes_need_a_block_size(self) -> CsvColumnsSpec:
        if (self.prefix_hashes is None) != (self.hash_block_tokens is None):
            raise ValueError("prefix_hashes and hash_block_tokens go together: give both or neither")
        return self


BURSTGPT_COLUMNS = CsvColumnsSpec(arrival="Timestamp", arrival_unit="s", input_tokens="Request tokens",
                                  output_tokens="Response tokens")
"""BurstGPT (HPMLL/BurstGPT, ``data/BurstGPT_*.csv``): header ``Timestamp,Model,Request tokens,
Response tokens,Total tokens,Log Type``; ``Timestamp`` in seconds from the start of collection.
Extra columns (``Model``, ``Log Type``, the ``Session ID`` of newer releases) are ignored."""

AZURE_2023_COLUMNS = CsvColumnsSpec(arrival="TIMESTAMP", arrival_unit="datetime", input_tokens="ContextTokens",
                                    output_tokens="GeneratedTokens")
"""Azure LLM inference trace 2023 (Splitwise): ``TIMESTAMP,ContextTokens,GeneratedTokens``."""


@dataclass(frozen=True)
class CsvRows:
    """The checked rows of a CSV trace, in file order."""

    arrival_s: np.ndarray  # seconds from the earliest row (float64)
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    hash_ids: list[np.ndarray] | None


def read_csv_trace(path: str | Path, columns: CsvColumnsSpec, exact_header: bool = False,
                   skip_zero_output: bool = False) -> CsvRows:
    """Read and check a CSV trace.

    Parameters
    ----------
    path : str or Path
    columns : CsvColumnsSpec
        Where each quantity is.
    exact_header : bool
        The header must be exactly the mapped columns, in order (a fixed published format).
    skip_zero_output : bool
        Drop rows whose output is 0 tokens (BurstGPT's failed requests) instead of refusing them.

    Raises
    ------
    InputFileError
        ``"<file>:<line>: <column>: <problem>"`` for the first problem found.
    """
    path = open_checked(path)
    wanted = [c for c in (columns.arrival, columns.input_tokens, columns.output_tokens, columns.prefix_hashes)
              if c is not None]
    header = _header(path, wanted)
    if exact_header and header != wanted:
        raise InputFileError(path, f"expected {','.join(wanted)}, got {_names(header, ',')}", 1, "header")
    for name in wanted:
        _need_column(path, header, name)
    table = _read_table(path, header, wanted)
    if table.num_rows == 0:
        raise InputFileError(path, "holds no requests: no data row after the header (line 1)")
    rows = _RowLines(path)
    inputs = token_values(table.column(columns.input_tokens), columns.input_tokens, rows, 1)
    if skip_zero_output:
        outputs = token_values(table.column(columns.output_tokens), columns.output_tokens, rows, 0)
        keep = outputs > 0
    else:
        outputs = token_values(table.column(columns.output_tokens), columns.output_tokens, rows, 1)
        keep = None
    times = _times(table.column(columns.arrival), columns, path, rows)
    hashes = None
    if columns.prefix_hashes is not None:
        hashes = _hashes(table.column(columns.prefix_hashes), inputs, columns, path, rows, keep)
    if keep is not None:
        times, inputs, outputs = times[keep], inputs[keep], outputs[keep]
    if len(times) == 0:
        raise InputFileError(path, f"holds no requests: every row has 0 {columns.output_tokens} (failed requests, "
                                   "dropped)")
    return CsvRows(times - times.min(), inputs, outputs, hashes)


def read_token_column(path: str | Path, column: str, what: str = "length file") -> np.ndarray:
    """The token counts in column ``column`` of a CSV file (int64, file order), checked as a trace's
    are: whole numbers from 1 to :data:`MAX_TOKENS`, at least one row.

    Raises
    ------
    InputFileError
        ``"<file>:<line>: <column>: <problem>"`` for the first problem found.
    """
    path = open_checked(path, what)
    header = _header(path, [column])
    _need_column(path, header, column)
    table = _read_table(path, header, [column])
    if table.num_rows == 0:
        raise InputFileError(path, "holds no token lengths: no data row after the header (line 1)")
    return token_values(table.column(column), column, _RowLines(path), 1)


def _need_column(path: Path, header: list[str], name: str) -> None:
    if name not in header:
        raise InputFileError(path, f"no such column{did_you_mean(name, header)}; columns: {_names(header)}", 1, name)


def _names(header: list[str], sep: str = ", ") -> str:
    """Header names for a message: unprintable ones quoted, at most 20 shown."""
    shown = [h if h.isprintable() and len(h) <= 60 else quote(h) for h in header[:20]]
    more = f"{sep}... ({len(header)} columns)" if len(header) > 20 else ""
    return sep.join(shown) + more if header else "none"


def _read_table(path: Path, header: list[str], wanted: list[str]) -> pa.Table:
    """Columns ``wanted`` of the CSV file, read by pyarrow (multithreaded) as text: each column's
    cells are checked as written (:data:`TOKEN_TEXT`, :data:`TIME_TEXT`), since pyarrow's own
    number inference would read ``0x10`` in a column of integers as 16. A file pyarrow cannot
    read is explained by the first row whose cell count differs from the header's."""
    # pyarrow here, not at import: a scenario without a CSV file never loads it
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        return pacsv.read_csv(path, read_options=pacsv.ReadOptions(block_size=1 << 24),
                              convert_options=pacsv.ConvertOptions(
                                  include_columns=wanted, column_types={c: pa.string() for c in wanted},
                                  # only an empty cell is missing: "nan" or "NA" is named as written
                                  null_values=[""], strings_can_be_null=False))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError) as exc:
        shape = _shape_problem(path, header)
        if shape is not None:
            raise shape from None
        reason = str(exc).splitlines()[0][:200]
        raise InputFileError(path, f"cannot read as CSV: {reason}") from None


# ---------------------------------------------------------------------------------------------
# file lines (only computed once a problem is found)
# ---------------------------------------------------------------------------------------------


def _header(path: Path, wanted: list[str]) -> list[str]:
    """The column names on line 1 (a UTF-8 byte-order mark is dropped); refused if there are none."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            header = [h.strip() for h in next(csv.reader(handle), [])]
    except csv.Error as exc:
        raise InputFileError(path, f"cannot read as CSV: {exc}", 1, "header") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if not any(header):
        got = "an empty file" if path.stat().st_size == 0 else "an empty line"
        raise InputFileError(path, f"expected a header line naming the columns ({', '.join(wanted)}), got {got}",
                             1, "header")
    return header


class _RowLines:
    """The file line of a data row (0-based, blank lines skipped, as pyarrow reads them)."""

    def __init__(self, path: Path):
        self.path = path

    def line(self, row: int) -> int:
        data = self.path.read_bytes()
        if b'"' not in data:
            # no quoted cell, so no new line inside a cell: lines are found with numpy (a million in
            # a fraction of a second); pyarrow skips empty lines ("" or a lone "\r")
            text = np.frombuffer(data, dtype=np.uint8)
            ends = np.flatnonzero(text == 10)
            starts = np.concatenate(([0], ends + 1))
            stops = np.concatenate((ends, [len(text)]))
            lengths = stops - starts
            lengths -= (lengths > 0) & (text[np.maximum(stops - 1, 0)] == 13) if len(text) else 0
            rows = np.flatnonzero(lengths[1:] > 0) + 2  # 1-based line numbers after the header
            return int(rows[row]) if row < len(rows) else row + 2
        with open(self.path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            try:
                next(reader, None)
                seen = -1
                for cells in reader:
                    if any(cell.strip() for cell in cells):
                        seen += 1
                        if seen == row:
                            return reader.line_num
            except csv.Error:
                pass  # pyarrow read the row; the line number is then a best guess
        return row + 2

    def problem(self, row: int, column: str, message: str) -> InputFileError:
        return InputFileError(self.path, message, self.line(row), column)


def _shape_problem(path: Path, header: list[str]) -> InputFileError | None:
    """The first row whose cell count differs from the header's (or that Python's CSV reader
    cannot read) as an error; None if all agree."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        start = 1  # the first line of the row read next (where a cell over the limit starts)
        try:
            next(reader, None)
            start = reader.line_num + 1
            for cells in reader:
                if any(cell.strip() for cell in cells) and len(cells) != len(header):
                    column = header[len(cells)] if len(cells) < len(header) else "row"
                    return InputFileError(path, f"expected {len(header)} columns, got {len(cells)}", reader.line_num,
                                          column)
                start = reader.line_num + 1
        except csv.Error as exc:
            return InputFileError(path, f"cannot read as CSV: {exc}", start, "row")
    return None


# ---------------------------------------------------------------------------------------------
# columns
# ---------------------------------------------------------------------------------------------


def _numbers(column: pa.ChunkedArray, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """``(float64 values, unreadable mask)`` of a text column: a cell not written as ``pattern``
    allows (empty, too) is NaN and flagged."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = column.cast(pa.string()) if not pa.types.is_string(column.type) else column
    matched = pc.match_substring_regex(text, pattern)
    readable = pc.and_kleene(matched, pc.is_valid(matched))  # a null cell is not readable
    kept = pc.if_else(readable, pc.utf8_trim(text, " \t"), pa.nulls(len(text), pa.string()))
    values = to_numpy(pc.cast(kept, pa.float64()))  # not readable: null -> NaN
    return values, ~to_numpy(readable)


def token_values(column: pa.ChunkedArray, name: str, rows, minimum: int = 1) -> np.ndarray:
    """Token counts of a text column as int64, or ``rows.problem(row, name, message)`` raised for
    the first that is not written as :data:`TOKEN_TEXT` or not from ``minimum`` to :data:`MAX_TOKENS`."""
    values, unreadable = _numbers(column, TOKEN_TEXT)
    with np.errstate(invalid="ignore"):
        bad = unreadable | (values < minimum) | (values > MAX_TOKENS)
    if bad.any():
        row = int(np.argmax(bad))
        raw = column[row].as_py()
        if unreadable[row]:
            what = cell_text(raw)
            hint = "" if what == "an empty cell" else " (plain decimal digits, e.g. 512: no fraction, exponent, sign, hex or separators)"
            raise rows.problem(row, name, f"expected a whole number of tokens, got {what}{hint}")
        shown = cell_text(raw)  # a number as written
        if values[row] > MAX_TOKENS:
            raise rows.problem(row, name, f"must be <= {MAX_TOKENS:,}, got {shown}")
        raise rows.problem(row, name, f"must be >= {minimum}, got {shown}")
    return values.astype(np.int64)


def split_rows(flat: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """``flat`` cut into consecutive views of ``counts`` items each (one per row): the same arrays
    as ``np.split(flat, np.cumsum(counts)[:-1])``, about 5x faster on a million rows (``np.split``
    pays several numpy calls per piece)."""
    ends = np.cumsum(counts).tolist()
    starts = [0] + ends[:-1]
    return [flat[a:b] for a, b in zip(starts, ends)]


_PLAIN_STAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?$"
"""A wall-clock stamp pyarrow reads as pandas does (``2023-11-16 18:15:46.6805900``): no zone, at
most nanoseconds; pyarrow refuses an impossible one (``2023-02-30``, ``24:00:00``), and pandas
then reads the column and names the stamp."""


def _plain_stamps_ns(column: pa.ChunkedArray) -> np.ndarray | None:
    """The stamps as int64 nanoseconds if all are plain (:data:`_PLAIN_STAMP`) and pyarrow reads
    them, else None."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count or not pc.all(pc.match_substring_regex(column, _PLAIN_STAMP)).as_py():
        return None
    try:
        return to_numpy(column.cast(pa.timestamp("ns")))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _times(column: pa.ChunkedArray, columns: CsvColumnsSpec, path: Path, rows: _RowLines) -> np.ndarray:
    name = columns.arrival
    if columns.arrival_unit == "datetime":
        ns = _plain_stamps_ns(column)
        if ns is not None:
            return (ns - ns.min()) / 1e9  # exact integer difference, then one rounding
        import pandas as pd  # other forms of stamps, and the one refused

        text = column.to_pandas()
        stamps = pd.to_datetime(text, format="ISO8601", errors="coerce")
        if getattr(stamps.dt, "tz", None) is not None:
            stamps = stamps.dt.tz_convert(None)
        nat = stamps.isna().to_numpy()
        if nat.any():
            row = int(np.argmax(nat))
            raise rows.problem(row, name, f"expected a time 'YYYY-MM-DD HH:MM:SS[.fffffff]', got {quote(text.iloc[row])} "
                                          "(a time that cannot be read cannot be sorted)")
        ns = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        return (ns - ns.min()) / 1e9  # exact integer difference, then one rounding
    values, unreadable = _numbers(column, TIME_TEXT)
    bad = unreadable | ~np.isfinite(values)  # 1e999 reads as inf
    if bad.any():
        row = int(np.argmax(bad))
        what = cell_text(column[row].as_py())
        not_a_number = what == "an empty cell" or what.lower().lstrip("+-") in ("nan", "inf", "infinity")
        if unreadable[row] and not not_a_number:
            raise rows.problem(row, name, f"expected a decimal number ({columns.arrival_unit}) such as 12, 1.5 or "
                                          f"1.7e9, got {what} (a time that cannot be read cannot be sorted)")
        raise rows.problem(row, name, f"expected a finite number ({columns.arrival_unit}), got {what} "
                                      "(a time that is not a number cannot be sorted)")
    negative = values < 0
    if negative.any():
        row = int(np.argmax(negative))
        raise rows.problem(row, name, f"must not be negative, got {cell_text(column[row].as_py())}")
    return values / TIME_UNITS_S[columns.arrival_unit]


def _is_hash_id(item: str) -> bool:
    """``item`` is written as :data:`_HASH_TEXT` and fits in 64 signed bits."""
    if re.fullmatch(_HASH_TEXT, item) is None:
        return False
    magnitude = int(item.lstrip("-").lstrip("0") or "0")  # Python's digit limit counts leading zeros
    return magnitude < 2**63 or (item[0] == "-" and magnitude == 2**63)


def _hashes(column: pa.ChunkedArray, inputs: np.ndarray, columns: CsvColumnsSpec, path: Path, rows: _RowLines,
            keep: np.ndarray | None) -> list[np.ndarray]:
    import pyarrow as pa
    import pyarrow.compute as pc

    name, block = columns.prefix_hashes, columns.hash_block_tokens
    text = pc.utf8_trim_whitespace(pc.replace_substring_regex(column, r"^\s*\[|\]\s*$", ""))
    text = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)  # no ids: counted below
    parts = pc.split_pattern_regex(text, r"[\s,;]+")
    # decimal ids only: pyarrow's cast alone would read "0x10" as 16
    readable = pc.all(pc.match_substring_regex(pc.list_flatten(parts), _HASH_TEXT)).as_py() is not False
    try:
        if not readable:
            raise pa.ArrowInvalid("not decimal")
        ids = parts.cast(pa.list_(pa.int64()))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        for row, cell in enumerate(parts.to_pylist()):
            if all(_is_hash_id(item) for item in cell or []):
                continue
            raise rows.problem(row, name, "expected 64-bit integers in decimal digits separated by spaces or ';', "
                                          f"got {quote(column[row].as_py())}") from None
        raise InputFileError(path, "cannot read the prefix hashes", field=name) from None
    ids = ids.combine_chunks()
    counts = pc.fill_null(pc.list_value_length(ids), 0).to_numpy(zero_copy_only=False)
    expected = -(-inputs // block)
    bad = counts != expected
    if bad.any():
        row = int(np.argmax(bad))
        raise rows.problem(row, name, f"has {counts[row]} ids, but {columns.input_tokens} {inputs[row]} needs "
                                      f"ceil({inputs[row]}/{block}) = {expected[row]}")
    flat = ids.flatten().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    arrays = split_rows(flat, counts)
    if keep is not None:
        arrays = [a for a, k in zip(arrays, keep.tolist()) if k]
    return arrays
