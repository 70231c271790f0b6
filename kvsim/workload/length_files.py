"""Token lengths read from a file, for ``{kind: empirical, file: ..., column: ...}``.

Three layouts, by the file's suffix:

- ``.csv``: a header line, then rows; ``column`` names the column (read by pyarrow, as CSV traces
  are: :func:`~kvsim.workload.trace_csv.read_token_column`);
- ``.jsonl``: one JSON object per line; ``column`` names the field
  (:func:`~kvsim.workload.trace_jsonl.read_jsonl_tokens`);
- anything else: numbers separated by white space (spaces, tabs, new lines).

Every value must be a whole number of tokens from 1 to :data:`~kvsim.workload.trace_csv.MAX_TOKENS`;
the file is checked first like a trace file (exists, regular, at most 4 GiB, UTF-8:
:func:`kvsim.input_files.open_checked`). The first problem is one
:class:`~kvsim.input_files.InputFileError` naming the file's line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvsim.input_files import InputFileError, open_checked
from kvsim.workload.trace_csv import read_token_column, token_values
from kvsim.workload.trace_jsonl import read_jsonl_tokens

__all__ = ["read_length_file"]


def read_length_file(path: str | Path, column: str | None = None) -> np.ndarray:
    """Token counts (int64, file order) from a length file.

    Parameters
    ----------
    path : str or Path
    column : str, optional
        Column (CSV) or field (JSONL) holding the lengths; required for those two layouts.

    Raises
    ------
    InputFileError
        The file cannot be used: ``"<file>[:<line>][: <field>]: <problem>"``.
    """
    path = Path(path)
    layout = path.suffix.lower()
    if layout in (".csv", ".jsonl") and not column:
        field = "column" if layout == ".csv" else "field"
        raise InputFileError(path, f"a {layout[1:].upper()} file needs column: the {field} holding the lengths")
    path = open_checked(path, "length file")
    if layout == ".csv" and column:  # (a CSV or JSONL file without column: refused above)
        return read_token_column(path, column)
    if layout == ".jsonl" and column:
        return read_jsonl_tokens(path, column)
    return _read_numbers(path)


def _read_numbers(path: Path) -> np.ndarray:
    """Whitespace-separated numbers; a bad one is named with its line."""
    text = path.read_text(encoding="utf-8-sig")
    words = text.split()
    if not words:
        raise InputFileError(path, "holds no token lengths (the file is empty or blank)")
    import pyarrow as pa  # here, not at import: only a length file needs it

    return token_values(pa.chunked_array([pa.array(words, pa.string())]), "value", _WordLines(path, text))


class _WordLines:
    """The line of the i-th whitespace-separated word (only computed once a problem is found)."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text

    def problem(self, row: int, column: str, message: str) -> InputFileError:
        seen = 0
        for line_no, line in enumerate(self.text.split("\n"), start=1):
            seen += len(line.split())
            if seen > row:
                return InputFileError(self.path, f"number {row + 1}: {message}", line_no, column)
        return InputFileError(self.path, f"number {row + 1}: {message}", None, column)
