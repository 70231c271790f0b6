"""What the command line prints and where it writes: problem and warning lines made safe for a
terminal, the note on which engine backend runs, the results folder and its safe name."""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["EXIT_BAD_INPUT", "MAX_PROBLEM_CHARS", "cut", "say", "print_warnings", "backend_refused",
           "prepare_out", "safe_name"]

EXIT_BAD_INPUT = 2
"""Exit status of a command refused for its input (a file, a field, an argument, the environment)."""

MAX_PROBLEM_CHARS = 600
"""Longest problem line shown (a field path or value from input may be thousands of characters;
the start of it says what and where)."""


def cut(problem: str) -> str:
    return problem if len(problem) <= MAX_PROBLEM_CHARS else (
        f"{problem[:MAX_PROBLEM_CHARS - 40]} ... ({len(problem):,} characters in all)")


def say(text: str, file=None) -> None:
    """Print text that holds text from input, its control characters but line ends (an ANSI
    escape in a name could rewrite the terminal) shown escaped."""
    from kvsim.escape import terminal_text

    print("\n".join(terminal_text(line) for line in text.split("\n")), file=file)


def print_warnings(command: str, scenario) -> None:
    for warning in scenario.warnings:
        say(f"kvsim {command}: warning: {warning}", file=sys.stderr)
    from kvsim.backend import ENV, compiled_problem

    if not os.environ.get(ENV) and any(scenario.spec.system_engine(name).backend == "auto"
                                       for name in scenario.spec.systems):
        problem = compiled_problem()
        if problem is not None:
            say(f"kvsim {command}: note: the compiled backend cannot run here ({problem}): the pure-Python "
                 f"engine runs instead (the same results, slower; docs/speed.md)", file=sys.stderr)


def backend_refused(command: str) -> int | None:
    """Exit status for a ``KVSIM_BACKEND`` that cannot be honoured (None if it can, or is unset)."""
    from kvsim.backend import ENV, BackendError, resolve

    if not os.environ.get(ENV, "").strip():
        return None
    try:
        resolve("auto")
    except (ValueError, BackendError) as exc:
        say(f"kvsim {command}: {ENV}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return None


def prepare_out(command: str, out: Path, scenario: str, outputs: Sequence[str], overwrite: bool) -> int | None:
    """Create the results folder ``out`` and check it may take the results of ``scenario``
    (:func:`kvsim.report.manifest.folder_refusal`); with ``overwrite``, first remove what another
    kvsim run wrote there. None when the run may go on, else its exit status (the message printed)."""
    from kvsim.report.manifest import clear_results, folder_refusal

    if out.exists() and not out.is_dir():
        print(f"kvsim {command}: cannot write results to {out}: it exists and is not a folder", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        out.mkdir(parents=True, exist_ok=True)
        refusal = folder_refusal(out, scenario, outputs, overwrite)
        if refusal is not None:
            print(f"kvsim {command}: {refusal}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if overwrite:
            clear_results(out)
    except OSError as exc:
        print(f"kvsim {command}: cannot write results to {out}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return None


NAME_BYTES = 100  # well under the 255-byte file names of common file systems, with room for a suffix


def safe_name(name: str) -> str:
    """``name`` as one safe folder name under ``results/``: letters, digits, ``-``, ``_`` and ``.``
    kept (``h20_vs_l20``, ``offload-gap.v2`` stay as they are), every other character (``/``,
    ``\\``, NUL, spaces, control characters) an underscore; a leading or trailing dot too, so
    the name is never ``.``, ``..`` or hidden; never empty; a name longer than 100 bytes (UTF-8)
    cut and ended with a hash of the whole name, so long names that differ stay apart."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    safe = re.sub(r"^\.+|\.+$", lambda dots: "_" * len(dots.group()), safe)
    if len(safe.encode("utf-8")) > NAME_BYTES:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        cut = safe.encode("utf-8")[:NAME_BYTES - len(digest) - 1].decode("utf-8", "ignore")
        safe = f"{cut}-{digest}"
    return safe or "scenario"
