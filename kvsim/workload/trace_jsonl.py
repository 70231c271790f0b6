"""Vectorised reading of the JSONL traces with prefix hashes (Mooncake, Bailian) with pyarrow.

The fast path reads the whole file with pyarrow's JSON reader against an explicit schema and checks
every column with numpy. It answers only for a file that is entirely well-formed; on anything
else (a type pyarrow cannot convert, a missing field, a value out of range, an integral float
such as ``600.0`` that the row reader accepts) it returns None and the caller's row-by-row reader
(:mod:`kvsim.workload.traces`), the reference, reads the file and names the first bad line and
field. Both give the same requests for a well-formed file (tested on the Mooncake traces).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

__all__ = ["read_hashed_jsonl"]

_BASE = [("timestamp", pa.float64()), ("input_length", pa.int64()), ("output_length", pa.int64()),
         ("hash_ids", pa.list_(pa.int64()))]
_SESSION = [("chat_id", pa.int64()), ("parent_chat_id", pa.int64()), ("type", pa.string()), ("turn", pa.int64())]


def read_hashed_jsonl(path: Path, block: int, units_per_second: float, session: bool
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]] | None:
    """``(times_s, input_tokens, output_tokens, hash_ids)`` in file order, or None when the file
    is not entirely well-formed (then read it row by row to name the problem).

    ``times_s`` are the raw timestamps divided by ``units_per_second`` (not yet made relative);
    ``session`` also requires Bailian's ``chat_id``, ``parent_chat_id`` (>= -1), ``type`` and
    ``turn`` (>= 1) on every row.
    """
    fields = _BASE + (_SESSION if session else [])
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
    if not (np.isfinite(stamps).all() and (inputs >= 1).all() and (outputs >= 1).all()):
        return None
    if session and ((table.column("parent_chat_id").to_numpy() < -1).any()
                    or (table.column("turn").to_numpy() < 1).any()):
        return None
    ids = table.column("hash_ids").combine_chunks()
    if ids.flatten().null_count:
        return None
    counts = pc.list_value_length(ids).to_numpy(zero_copy_only=False)
    if (counts != -(-inputs // block)).any():
        return None
    flat = ids.flatten().to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    hashes = np.split(flat, np.cumsum(counts)[:-1])
    return stamps / units_per_second, inputs.astype(np.int64), outputs.astype(np.int64), hashes
