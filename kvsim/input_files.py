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
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

__all__ = ["InputFileError", "MAX_INPUT_FILE_BYTES", "MAX_JSON_BYTES", "open_checked", "check_utf8", "quote",
           "read_json", "read_bytes_checked", "cell_text"]

MAX_INPUT_FILE_BYTES = 4 * 2**30
"""Largest trace or length file read, bytes (4 GiB): about 100 million CSV rows, more than any
public LLM serving trace; a larger file is far more likely a wrong path than a trace."""

MAX_JSON_BYTES = 256 * 2**20
"""Largest JSON file kvsim reads back from a results folder, bytes (its own are a few MB at most:
a sweep's ``summary.json``, a stored point's ``runs.json`` with a million controller decisions)."""

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


_NUMBER_AS_WRITTEN = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?:nan|inf|infinity)",
                                re.IGNORECASE)


def cell_text(raw: object) -> str:
    """A cell of a file for a message: ``an empty cell``, a number as written (up to 40
    characters), anything else quoted (:func:`quote`)."""
    if raw is None or str(raw).strip(" \t") == "":
        return "an empty cell"
    text = str(raw).strip(" \t")
    return text if len(text) <= 40 and _NUMBER_AS_WRITTEN.fullmatch(text) else quote(raw)


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


def read_bytes_checked(path: str | os.PathLike[str], what: str = "file", max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes`` bytes.

    Whatever ``path`` is (a folder, a pipe, a device such as ``/dev/zero``, a link to one), this
    returns or raises at once: the file is opened without blocking, checked on its open handle
    (no race with a swap between a check and the read), and read no further than the limit.

    Raises
    ------
    InputFileError
        Naming the file and why it cannot be read.
    """
    name = os.fspath(path)
    if "\0" in name:
        raise InputFileError(quote(name, 200), f"a {what} path cannot hold a NUL byte (\\0)")
    try:
        handle = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputFileError(name, "missing") from None
    except IsADirectoryError:
        raise InputFileError(name, f"is a folder, not a {what}") from None
    except OSError as exc:
        raise InputFileError(name, f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(handle)
        if stat.S_ISDIR(info.st_mode):
            raise InputFileError(name, f"is a folder, not a {what}")
        if not stat.S_ISREG(info.st_mode):
            raise InputFileError(name, f"is not a regular file (a pipe, socket or device), so not a {what}")
        if info.st_size > max_bytes:
            raise InputFileError(name, f"{info.st_size:,} bytes is more than a {what} may hold ({max_bytes:,} bytes)")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(handle, min(_CHUNK_BYTES, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:  # it grew while being read
            raise InputFileError(name, f"more than a {what} may hold ({max_bytes:,} bytes)")
        return b"".join(chunks)
    except OSError as exc:
        raise InputFileError(name, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(handle)


def read_json(path: str | os.PathLike[str], what: str = "JSON file", max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The data of the JSON file ``path``, read as :func:`read_bytes_checked` reads (a regular file
    within ``max_bytes``), as UTF-8, with no key repeated in an object and nesting that Python
    can hold (a file nested 100,000 deep is refused, not a crash).

    Raises
    ------
    InputFileError
        Naming the file and the problem (with its line for a syntax error).
    """
    data = read_bytes_checked(path, what, max_bytes)
    name = os.fspath(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(name, f"not UTF-8 text (byte offset {exc.start:,})") from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise InputFileError(name, f"not JSON: {exc.msg}", line=exc.lineno) from None
    except ValueError as exc:  # a repeated key, a number too long for Python
        raise InputFileError(name, f"not JSON kvsim writes: {exc}") from None
    except RecursionError:
        raise InputFileError(name, "not JSON kvsim writes: nested too deeply") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"the key {quote(key)} repeats in one object")
        seen.add(key)
    return dict(pairs)
