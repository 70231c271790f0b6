"""Opening the files a scenario references (traces, length files, calibration files): one checked
way in, and one error type naming the file, the line inside it and the field.

Every such file passes :func:`open_checked` before a reader parses it:

- the path holds no NUL byte (the operating system cannot name such a file);
- it exists and is a regular file (not a folder, a pipe or a device that never ends);
- it is at most ``max_bytes`` long (:data:`MAX_INPUT_FILE_BYTES` by default), so a wrong path
  fails in a second instead of filling memory;
- for text formats, every byte decodes as UTF-8; the first one that does not is named with its
  byte offset, line and column.

Problems are :class:`InputFileError` (a ``ValueError``), whose text is
``<file>:<line>: <field>: <problem>`` (line and field when known); the scenario layer puts the
scenario file's own ``file:line: field:`` in front (:mod:`kvsim.scenario.files`).
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["InputFileError", "MAX_INPUT_FILE_BYTES", "open_checked", "check_utf8", "quote"]

MAX_INPUT_FILE_BYTES = 4 * 2**30
"""Largest trace or length file read, bytes (4 GiB): about 100 million CSV rows, more than any
public LLM serving trace; a larger file is far more likely a wrong path than a trace."""

_CHUNK_BYTES = 1 << 24
"""Bytes decoded at a time by the UTF-8 check (memory stays bounded on multi-GB files)."""


class InputFileError(ValueError):
    """A referenced file that cannot be used, as ``<file>:<line>: <field>: <problem>``.

    Parameters
    ----------
    file : str or Path
        The file as the reader was given it (relative paths stay relative).
    problem : str
        What is wrong, in plain words.
    line : int, optional
        1-based line inside the file (a CSV header is line 1).
    field : str, optional
        Column or JSON field the problem is in (``row`` for the whole row).
    """

    def __init__(self, file: str | os.PathLike[str], problem: str, line: int | None = None,
                 field: str | None = None):
        self.file, self.problem, self.line, self.field = str(file), problem, line, field
        where = self.file if line is None else f"{self.file}:{line}"
        super().__init__(f"{where}: {problem}" if field is None else f"{where}: {field}: {problem}")


def quote(value: Any, limit: int = 60) -> str:
    """``repr`` of a value read from a file, cut to about ``limit`` characters (a bad cell may be a
    megabyte of text, and control characters must not reach the terminal raw)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'" if isinstance(value, str) else text[:limit] + "..."


def open_checked(path: str | os.PathLike[str], what: str = "trace file", text: bool = True,
                 max_bytes: int | None = None) -> Path:
    """``path`` as a :class:`~pathlib.Path` once it is a readable regular file of at most
    ``max_bytes`` bytes (and, with ``text``, valid UTF-8: :func:`check_utf8`).

    Parameters
    ----------
    path : str or Path
    what : str
        The file's role in messages ("trace file", "length file").
    text : bool
        Also check that the whole file decodes as UTF-8.
    max_bytes : int, optional
        Size limit, bytes (default :data:`MAX_INPUT_FILE_BYTES`).

    Raises
    ------
    InputFileError
        Naming the file and, for a decoding error, its line.
    """
    name = os.fspath(path)
    if "\0" in name:
        raise InputFileError(quote(name, 200), f"a {what} path cannot hold a NUL byte (\\0)")
    try:
        info = os.stat(name)
    except FileNotFoundError:
        raise InputFileError(name, f"cannot read {what}: no such file") from None
    except OSError as exc:
        raise InputFileError(name, f"cannot read {what}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputFileError(name, f"is a folder, not a {what}")
    if not stat.S_ISREG(info.st_mode):
        raise InputFileError(name, f"is not a regular file (a pipe, socket or device), so not a {what}")
    max_bytes = MAX_INPUT_FILE_BYTES if max_bytes is None else max_bytes
    if info.st_size > max_bytes:
        raise InputFileError(name, f"{info.st_size:,} bytes is more than a {what} may hold ({max_bytes:,} bytes, "
                                   f"{max_bytes / 2**30:g} GiB); is this the right file?")
    if text:
        check_utf8(name)
    return Path(name)


def check_utf8(path: str | os.PathLike[str]) -> None:
    """Raise :class:`InputFileError` naming the line, column and byte offset of the first byte of
    ``path`` that is not UTF-8 (a leading byte-order mark is fine). Decodes in 16 MiB chunks."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0  # bytes before the current chunk
    lines = 0  # newlines before the current chunk
    last_newline = -1  # offset of the last newline seen
    try:
        with open(path, "rb") as handle:
            while True:
                chunk = handle.read(_CHUNK_BYTES)
                try:
                    decoder.decode(chunk, final=not chunk)
                except UnicodeDecodeError as exc:
                    # exc.start counts from the bytes the decoder held back from the previous chunk
                    held = len(exc.object) - len(chunk)
                    bad = offset - held + exc.start
                    before = exc.object[: exc.start]
                    line = lines - exc.object[:held].count(b"\n") + before.count(b"\n") + 1
                    cut = before.rfind(b"\n")
                    start = offset - held + cut + 1 if cut >= 0 else last_newline + 1
                    raise InputFileError(path, (
                        f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at byte offset {bad:,} (column "
                        f"{bad - start + 1}) cannot be decoded; save the file as UTF-8"), line=line) from None
                if not chunk:
                    return
                lines += chunk.count(b"\n")
                cut = chunk.rfind(b"\n")
                if cut >= 0:
                    last_newline = offset + cut
                offset += len(chunk)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror or exc}") from None
