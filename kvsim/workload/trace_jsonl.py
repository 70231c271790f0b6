"""Vectorised reading of the JSONL traces with prefix hashes (Mooncake, Bailian) with pyarrow.

The fast path reads the whole file with pyarrow's JSON reader against an explicit schema and checks
every column with numpy. It answers only for a file that is entirely well-formed; on anything
else (a type pyarrow cannot convert, a missing field, a value out of range) it returns None and
the caller's row-by-row reader
(:mod:`kvsim.workload.traces`), the reference, reads the file and names the first bad line and
field. Both give the same requests for a well-formed file (tested on the Mooncake traces).

Counts (token lengths, ``chat_id``, ``turn``, ...) must be JSON integers: ``true`` is not 1, and
``40.0`` or ``4e1`` is refused, not read as 40 -- a count written as a float is the sign of a file
that went through a float column, as a CSV trace's ``12.0`` is
(:data:`~kvsim.workload.trace_csv.TOKEN_TEXT`). Timestamps are any finite JSON number.

:func:`json_rows` is that row reader's way through a JSONL file: one JSON object per non-blank
line, a line that is not valid JSON or not an object refused with its line number.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

from kvsim.input_files import InputFileError, quote
from kvsim.workload.trace_csv import MAX_TOKENS, split_rows

__all__ = ["read_hashed_jsonl", "read_jsonl_tokens", "json_rows", "RowError", "row_value", "row_int", "row_tokens",
           "row_timestamp", "row_hash_ids", "show"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1



def _fields(session: bool) -> list[tuple[str, pa.DataType]]:
    """The schema's fields: the base ones, and Bailian's session fields with ``session``."""
    import pyarrow as pa

    base: list[tuple[str, pa.DataType]] = [
        ("timestamp", pa.float64()), ("input_length", pa.int64()), ("output_length", pa.int64()),
        ("hash_ids", pa.list_(pa.int64()))]
    chat: list[tuple[str, pa.DataType]] = [
        ("chat_id", pa.int64()), ("parent_chat_id", pa.int64()), ("type", pa.string()), ("turn", pa.int64())]
    return base + (chat if session else [])


class RowError(ValueError):
    """A problem with one field of a row; the reader adds the file and line
    (:class:`~kvsim.input_files.InputFileError`)."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field, self.problem = field, problem


def json_rows(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    """``(line number, object)`` for every non-blank line of a JSONL file (already checked to be
    UTF-8: :func:`kvsim.input_files.open_checked`).

    Raises
    ------
    InputFileError
        For a line that is not JSON, is nested too deeply to read, or is not a JSON object.
    """
    with open(path, encoding="utf-8-sig", newline="\n") as handle:  # lines as the UTF-8 check counts them
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputFileError(path, f"not valid JSON: {exc.msg} (column {exc.colno})", line_no,
                                     "row") from None
            except (ValueError, RecursionError) as exc:  # a 5,000-digit number; [[[[...]]]] 10,000 deep
                reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
                raise InputFileError(path, f"cannot read this JSON ({reason})", line_no, "row") from None
            if not isinstance(row, dict):
                raise InputFileError(path, f"expected a JSON object {{...}}, got {_json_type(row)}", line_no, "row")
            yield line_no, row


def _json_type(value: object) -> str:
    return {list: "an array", str: "a string", bool: "true or false", type(None): "null"}.get(
        type(value), "a number")


def read_hashed_jsonl(path: Path, block: int, units_per_second: float, session: bool
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]] | None:
    """``(times_s, input_tokens, output_tokens, hash_ids)`` in file order, or None when the file
    is not entirely well-formed (then read it row by row to name the problem).

    ``times_s`` are the raw timestamps divided by ``units_per_second`` (not yet made relative);
    ``session`` also requires Bailian's ``chat_id``, ``parent_chat_id`` (>= -1), ``type`` and
    ``turn`` (>= 1) on every row; token counts must be ``1 .. MAX_TOKENS`` and timestamps finite
    and not negative.
    """
    # pyarrow here, not at import: a scenario without a JSONL trace never loads it
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pajson

    fields = _fields(session)
    options = pajson.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore")
    try:
        table = pajson.read_json(path, parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, UnicodeDecodeError):
        return None
    if table.num_rows == 0 or any(table.column(name).null_count for name, _ in fields):
        return None
    stamps = table.column("timestamp").to_numpy()
    inputs = table.column("input_length").to_numpy()
    outputs = table.column("output_length").to_numpy()
    if not (np.isfinite(stamps).all() and (stamps >= 0).all() and (inputs >= 1).all() and (outputs >= 1).all()
            and (inputs <= MAX_TOKENS).all() and (outputs <= MAX_TOKENS).all()):
        return None
    if session and ((table.column("parent_chat_id").to_numpy() < -1).any()
                    or (table.column("turn").to_numpy() < 1).any()):
        return None
    ids = table.column("hash_ids").combine_chunks()
    if not isinstance(ids, pa.ListArray):  # (the schema's hash_ids: a list<int64> column)
        return None
    if ids.flatten().null_count:
        return None
    counts = pc.list_value_length(ids).to_numpy(zero_copy_only=False)
    if (counts != -(-inputs // block)).any():
        return None
    flat = ids.flatten().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    hashes = split_rows(flat, counts)
    return stamps / units_per_second, inputs.astype(np.int64), outputs.astype(np.int64), hashes


def read_jsonl_tokens(path: Path, field: str) -> np.ndarray:
    """Token counts in field ``field`` of every row of a JSONL file (int64, file order; the file
    already passed :func:`kvsim.input_files.open_checked`), whole numbers from 1 to
    :data:`~kvsim.workload.trace_csv.MAX_TOKENS`.

    Read vectorised when every row is well-formed; otherwise row by row to name the first bad line.

    Raises
    ------
    InputFileError
        ``"<file>:<line>: <field>: <problem>"``, or a file with no rows.
    """
    import pyarrow as pa
    import pyarrow.json as pajson

    # int64: pyarrow refuses 40.0, true and "40" there, and the row reader names them
    options = pajson.ParseOptions(explicit_schema=pa.schema([(field, pa.int64())]),
                                  unexpected_field_behavior="ignore")
    try:
        column = pajson.read_json(path, parse_options=options).column(field)
        values = column.to_numpy() if column.null_count == 0 else None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
        values = None
    if values is not None and len(values) and (values >= 1).all() and (values <= MAX_TOKENS).all():
        return values.astype(np.int64)
    tokens = []
    for line_no, row in json_rows(path):
        try:
            tokens.append(row_tokens(row, field))
        except RowError as exc:
            raise InputFileError(path, exc.problem, line_no, exc.field) from None
    if not tokens:
        raise InputFileError(path, "holds no token lengths (no rows)")
    return np.array(tokens, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# row checks (the reference reader)
# ---------------------------------------------------------------------------------------------


def row_value(row: dict[str, object], field: str) -> Any:
    if field not in row:
        raise RowError(field, "missing")
    return row[field]


def show(value: Any) -> str:
    """A JSON value for a message, as JSON writes it (``true``, ``null``; an integer too long to
    print is described)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"
    return quote(value)


def row_int(row: dict[str, object], field: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``row[field]`` as a count: a JSON integer (not ``true``, not ``40.0``) within the bounds."""
    value = row_value(row, field)
    if not isinstance(value, int) or isinstance(value, bool):
        hint = " (a JSON integer such as 512, without a fraction or exponent)" if isinstance(value, float) else ""
        raise RowError(field, f"expected a whole number, got {show(value)}{hint}")
    if minimum is not None and value < minimum:
        raise RowError(field, f"must be >= {minimum}, got {show(value)}")
    if maximum is not None and value > maximum:
        raise RowError(field, f"must be <= {maximum:,}, got {show(value)}")
    return value


def row_tokens(row: dict[str, object], field: str) -> int:
    return row_int(row, field, minimum=1, maximum=MAX_TOKENS)


def row_timestamp(row: dict[str, object], units: str) -> float:
    value = row_value(row, "timestamp")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RowError("timestamp", f"expected a number ({units}), got {show(value)}")
    if isinstance(value, int):
        try:
            value = float(value)  # as the vectorised reader sees it
        except OverflowError:
            raise RowError("timestamp", f"expected a finite number ({units}), got {show(value)}") from None
    if not math.isfinite(value):
        raise RowError("timestamp", f"expected a finite number ({units}), got {value!r} "
                                    "(a time that is not a number cannot be sorted)")
    if value < 0:
        raise RowError("timestamp", f"must not be negative, got {value!r}")
    return float(value)


def row_hash_ids(row: dict[str, object], input_tokens: int, block_tokens: int) -> np.ndarray:
    value = row_value(row, "hash_ids")
    if not isinstance(value, list):
        raise RowError("hash_ids", f"expected a list of integers, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, int) or isinstance(item, bool) or not _INT64_MIN <= item <= _INT64_MAX:
            raise RowError("hash_ids", f"expected 64-bit integers, got {show(item)}")
    expected = -(-input_tokens // block_tokens)
    if len(value) != expected:
        raise RowError("hash_ids", f"has {len(value)} ids, but input_length {input_tokens} needs "
                                   f"ceil({input_tokens}/{block_tokens}) = {expected}")
    return np.array(value, dtype=np.int64)
