"""What the command line says when kvsim itself fails: a bug, or a run the watchdog stopped.

Bad input is the user's to fix and gets one clear message (exit 2). Anything else that escapes a
command is kvsim's fault, and the user needs four things to report it, not a page of traceback:
what went wrong in one line, the scenario and seed, the exact command that reproduces it, and
where the full traceback was written (a file in the temporary folder; ``--debug`` or
``KVSIM_DEBUG=1`` also prints it). Both exit with :data:`EXIT_INTERNAL`.

A reader of kvsim's output that goes away (``kvsim run ... | head``) is neither:
:func:`readers_may_leave` drops what is written to that stream from then on and the command goes
on (a run still writes its results), so a ``BrokenPipeError`` that reaches the command line came
from somewhere else (a worker's pipe) and is reported like any other failure.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import platform
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

__all__ = ["EXIT_INTERNAL", "Reproduction", "report_internal_error", "report_uncaught", "debug_requested",
           "note_where", "readers_may_leave"]

EXIT_INTERNAL = 3
"""Exit status of an internal error (a bug in kvsim) and of a run stopped by the watchdog."""
EXIT_ENVIRONMENT = 2
"""Exit status of an error of the machine (a full disk), as of bad input: the user's to fix."""

ENVIRONMENT_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                                errno.EMFILE, errno.ENFILE})
"""Errors of the machine rather than of kvsim (a full disk, a read-only folder): one line, exit 2."""

DEBUG_ENV = "KVSIM_DEBUG"


@dataclass
class Reproduction:
    """How to run the failing command again: its arguments, the folder it ran in, the scenario
    (or other input file) and the root seed, when known."""

    command: str
    argv: Sequence[str]
    cwd: str
    source: str | None = None
    seed: int | None = None
    source_label: str = "scenario"

    def command_line(self) -> str:
        return f"cd {shlex.quote(self.cwd)} && " + shlex.join(["kvsim", *self.argv])


def debug_requested(flag: bool = False) -> bool:
    """``--debug`` given, or ``KVSIM_DEBUG`` set to anything but empty or ``0``."""
    return flag or os.environ.get(DEBUG_ENV, "") not in ("", "0")


class _LeavableStream:
    """A text stream whose reader may go away: writing on then is dropped, not raised.

    The first ``BrokenPipeError`` from the stream points its file descriptor at ``os.devnull``
    (so the interpreter's own flush at exit finds a stream to write to) and swallows the text;
    everything else is the stream's own.
    """

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO)
            return
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def readers_may_leave() -> Iterator[None]:
    """Within: standard output and error whose reader went away (a closed pipe) swallow what is
    written to them instead of raising ``BrokenPipeError``; both are flushed on the way out."""
    saved = sys.stdout, sys.stderr
    guarded = [None if s is None else _LeavableStream(s) for s in saved]
    sys.stdout, sys.stderr = guarded
    try:
        yield
    finally:
        for stream in guarded:
            if stream is not None:
                stream.flush()
        if sys.stdout is guarded[0]:
            sys.stdout = saved[0]
        if sys.stderr is guarded[1]:
            sys.stderr = saved[1]


def note_where(exc: BaseException, where: str) -> BaseException:
    """Remember (once, innermost first) which task was running when ``exc`` was raised, e.g.
    ``point 3 [rate=20/s] replica 1 (run seed 123)``; the internal-error message names it."""
    if getattr(exc, "kvsim_where", None) is None:
        try:
            exc.kvsim_where = where  # type: ignore[attr-defined]
        except AttributeError:  # an exception type with __slots__: say nothing rather than fail
            pass
    return exc


def report_uncaught(exc: BaseException, args: argparse.Namespace, argv: Sequence[str],
                    stream: TextIO | None = None) -> int:
    """What the command line says about an exception its command did not handle, and the exit
    status: a full disk or a read-only folder in one line (2); a run the watchdog stopped (an
    exception with ``headline`` and ``details``, :class:`kvsim.sim.watchdog.WatchdogError`) or
    anything else, a bug, as :func:`report_internal_error` (3).

    ``args`` are the parsed arguments: ``command``, the input file (``scenario``, ``bench``,
    ``results`` or ``measurements``), ``root_seed`` once the command knows it, ``debug``.
    """
    stream = stream if stream is not None else sys.stderr
    if isinstance(exc, OSError) and exc.errno in ENVIRONMENT_ERRORS:
        name = f" {exc.filename}" if exc.filename else ""
        print(f"kvsim {args.command}: cannot use{name}: {exc.strerror or exc}", file=stream)
        return EXIT_ENVIRONMENT
    label, source = next(((name, getattr(args, name)) for name in ("scenario", "bench", "results", "measurements")
                          if getattr(args, name, None) is not None), ("scenario", None))
    if isinstance(source, list):
        source = " ".join(map(str, source))
    repro = Reproduction(args.command, list(argv), os.getcwd(), None if source is None else str(source),
                         getattr(args, "root_seed", None), label)
    debug = debug_requested(getattr(args, "debug", False))
    headline = getattr(exc, "headline", None)
    if isinstance(headline, str):  # the watchdog's own words, and the state the run was in
        return report_internal_error(exc, repro, debug, stream, headline=f"kvsim {args.command}: {headline}",
                                     details=list(getattr(exc, "details", [])))
    return report_internal_error(exc, repro, debug, stream)


def report_internal_error(exc: BaseException, repro: Reproduction, debug: bool = False,
                          stream: TextIO | None = None, headline: str | None = None,
                          details: Sequence[str] = ()) -> int:
    """Print the short report of ``exc`` on ``stream`` (standard error) and return :data:`EXIT_INTERNAL`.

    ``headline`` replaces the ``internal error (a bug)`` line (the watchdog's message) and
    ``details`` adds indented lines after it (the state the run was in).
    """
    stream = stream if stream is not None else sys.stderr
    text = "".join(traceback.format_exception(exc))
    lines = [headline or f"kvsim {repro.command}: internal error (a bug): {type(exc).__name__}: "
                          f"{_one_line(str(exc))}"]
    lines += [f"  {d}" for d in details]
    where = getattr(exc, "kvsim_where", None)
    if repro.source is not None:
        seed = ""
        if repro.source_label == "scenario":
            seed = f" (seed {repro.seed})" if repro.seed is not None else " (the seed in the file)"
        lines.append(f"  {repro.source_label}: {repro.source}{seed}" + (f"; while running {where}" if where else ""))
    elif where:
        lines.append(f"  while running {where}")
    lines.append(f"  reproduce: {repro.command_line()}")
    path = _write_traceback(text, repro)
    if path is not None:
        lines.append(f"  full traceback: {path} (please attach it to a bug report)")
    if debug:
        lines.append(text.rstrip("\n"))
    elif path is None:
        lines.append(f"  (the traceback could not be written to {tempfile.gettempdir()}; "
                     f"run again with --debug or {DEBUG_ENV}=1 to see it)")
    print("\n".join(lines), file=stream, flush=True)
    return EXIT_INTERNAL


MAX_MESSAGE_CHARS = 300
"""Longest exception message shown on the headline (the traceback file has all of it)."""


def _one_line(message: str) -> str:
    message = " ".join(message.split())
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS - 3] + "..."


def _write_traceback(text: str, repro: Reproduction) -> Path | None:
    """``kvsim-error-<time>-<pid>-*.txt`` in the temporary folder, with what a bug report needs."""
    # the version from its own module: the package root's lazy API import sits in the layer above
    from kvsim._version import __version__

    try:
        handle, name = tempfile.mkstemp(prefix=f"kvsim-error-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-",
                                        suffix=".txt")
        # an argument may hold bytes that are not UTF-8 (a lone surrogate from the shell): kept escaped
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace") as out:
            out.write(f"kvsim {__version__}, Python {platform.python_version()} on {platform.platform()}\n"
                      f"command: {repro.command_line()}\n"
                      f"scenario: {repro.source}  seed: {repro.seed}\n\n{text}")
        return Path(name)
    except OSError:
        return None
