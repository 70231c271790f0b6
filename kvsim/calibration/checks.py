"""Physical sense of measured numbers: how each cell of a measurement file is written, the range
it must lie in and why (``kvsim calibrate``, :mod:`kvsim.calibration.measurements`).

A fit takes log ratios of predicted to measured values, so one impossible number -- a TPOT of 0,
an E2E of 1e300 s, ``max_num_seqs`` of 1e12 -- does not just add noise: it steers every fitted
parameter to a bound, or the run it describes cannot be reproduced at all. Such a value is
refused with the file, the line and the column, before anything is simulated.

How numbers are written (as in trace files, :mod:`kvsim.workload.trace_csv`):

- a **count** is a whole number in ASCII decimal digits, with spaces around it ignored; a
  fraction of zeros is read too (``128.0``: the shipped table was written from a pandas float
  column), nothing else (no ``1e3``, ``0x10``, ``1_000``, ``+5``, ``inf``);
- a **real number** is a decimal number with an optional fraction and exponent
  (:data:`~kvsim.workload.trace_csv.TIME_TEXT`: ``0.021``, ``2.1e-2``), finite.

The bounds are in :data:`LATENCY_S` and the constants below, each with its reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path

from kvsim.input_files import cell_text
from kvsim.workload.trace_csv import MAX_TOKENS, TIME_TEXT

__all__ = ["engine_version", "LATENCY_S", "ITERATION_S", "STAGE_S", "MAX_RATE_PER_S", "MAX_REQUESTS", "MAX_CARDS", "MAX_SEQS",
           "MAX_BATCHED_TOKENS", "MAX_PROMPTS", "MAX_TOKENS_PER_S", "MAX_TOKENS", "MAX_PROBLEMS", "COUNT_TEXT",
           "RowCells", "capped"]

LATENCY_S = (1e-6, 86_400.0)
"""A measured request latency (TTFT, TPOT, E2E and their percentiles), seconds. Below 1 us is below
one GPU kernel launch (a few us), so not a measured latency but a placeholder (0) or a unit slip;
a day or more is no serving measurement (clients time out in minutes), but a unit slip (ms or us
read as s) or a placeholder (1e300)."""

ITERATION_S = (1e-6, 3_600.0)
"""One measured iteration of a step table (``prompt_time``, ``token_time``, and a request's
``e2e_time``), seconds. The floor is a kernel launch, as for :data:`LATENCY_S`; an hour is far
beyond one forward pass of any catalogued model (a 1 M-token prefill of a 400 B model on one card
takes minutes), so a unit slip."""

STAGE_S = (1e-3, 86_400.0)
"""One constant-rate stage of a measured run, seconds: a benchmark stage runs minutes, and kvsim
simulates every stage at its full length for the errors it reports."""

MAX_RATE_PER_S = 10_000.0
"""Requests per second of one measured run (its stages, ``arrival_rate_rps``, ``throughput_req_s``):
one engine's API server accepts hundreds a second; ten thousand is a unit slip."""

MAX_REQUESTS = 10_000_000
"""Requests one measured run sends (its stages' rate x seconds, ``num_requests``): each is
simulated, at full length and several times over in a fit; benchmark runs send thousands."""

MAX_CARDS = 1_024
"""Cards of one measured run (``tp``, ``dp``, ``num_gpus``, ``tensor_parallel``): a calibration run
is reproduced on one node (the node's own card count is checked once the GPU is known); no single
serving deployment of a measurement table spans more."""

MAX_SEQS = 65_536
"""``max_num_seqs`` and a step table's ``batch_size``: sequences in one engine's batch. vLLM's
defaults are 256 to 1,024 and its scheduler visits every running sequence each step; 65,536 is
no real configuration."""

MAX_BATCHED_TOKENS = 1_048_576
"""``max_num_batched_tokens`` and a step table's ``prompt_size x batch_size``: tokens in one
iteration. vLLM's defaults are 2,048 to 16,384; a million is no real token budget."""

MAX_PROMPTS = 1_000_000
"""Distinct prompts of a ``shared_prefix`` workload (system prompts x users): kvsim builds each as
a document of its own; inference-perf's sets hold tens."""

MAX_TOKENS_PER_S = 1e9
"""Token throughput of one measured run: one 8-card node reaches about a million tokens a second
at best; a billion is a unit slip."""

MAX_PROBLEMS = 20
"""Problems listed in one message; the rest are counted."""

COUNT_TEXT = r"^[ \t]*-?[0-9]+(?:\.0*)?[ \t]*$"
"""How a count is written: decimal digits, optionally ``.0`` (a minus sign is read only so that a
negative count is refused as out of range)."""


_COUNT_DIGITS = 18
"""Digits of the largest count converted (beyond every bound here; a longer one is out of range)."""


def engine_version(text: str) -> tuple[int, ...] | None:
    """An engine's release as numbers (``"v0.15.1"`` -> ``(0, 15, 1)``, ``"0.15"`` -> ``(0, 15, 0)``;
    anything after the third part, such as ``rc1`` or ``+cu128``, is ignored); None if ``text`` does
    not start with major.minor. The one reader of a measured run's ``engine_version``."""
    parts = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(p or 0) for p in parts.groups()) if parts else None


def capped(problems: list[str], limit: int = MAX_PROBLEMS) -> list[str]:
    """At most ``limit`` problems, then one line counting the rest."""
    if len(problems) <= limit:
        return problems
    return problems[:limit] + [f"... and {len(problems) - limit} more problem(s)"]


class RowCells:
    """The cells of one row of a measurement file, read with their checks; every problem found is
    appended to ``problems`` as ``"<file>:<line>: <column>: <message>"``."""

    def __init__(self, row: Mapping[str, str | None], path: Path, line: int, problems: list[str]):
        self.row, self.path, self.line, self.problems = row, path, line, problems
        self.failed = False

    def bad(self, column: str, message: str) -> None:
        self.problems.append(f"{self.path}:{self.line}: {column}: {message}")
        self.failed = True

    def cell(self, column: str) -> str:
        return (self.row.get(column) or "").strip(" \t")

    def text(self, column: str, required: bool = True) -> str:
        value = self.cell(column)
        if required and not value:
            self.bad(column, "required, got an empty cell")
        return value

    def choice(self, column: str, options: tuple[str, ...], required: bool = True) -> str | None:
        value = self.cell(column).lower()
        if not value and not required:
            return None
        if value not in options:
            self.bad(column, f"expected {' or '.join(options)}, got {self.cell(column)[:40]!r}")
            return None
        return value

    def count(self, column: str, *, required: bool = True, low: int = 1, high: int | None = None,
              why: str = "") -> int | None:
        """A whole number (:data:`COUNT_TEXT`) from ``low`` to ``high`` (``why``: the reason for ``high``)."""
        text = self.cell(column)
        if not text:
            if required:
                self.bad(column, "required, got an empty cell")
            return None
        if re.fullmatch(COUNT_TEXT, text) is None:
            self.bad(column, f"expected a number: a whole number in decimal digits such as 128 (or 128.0), "
                             f"got {cell_text(text)}")
            return None
        whole = text.strip(" \t").split(".")[0]
        digits = whole.lstrip("-").lstrip("0") or "0"  # Python's digit limit counts leading zeros
        # more digits than any bound is beyond it: not converted (Python refuses over 4,300)
        value = int(digits) if len(digits) <= _COUNT_DIGITS else 10**_COUNT_DIGITS
        if whole[0] == "-":
            value = -value
        if value < low:
            self.bad(column, f"must be >= {low}, got {cell_text(text)}")
            return None
        if high is not None and value > high:
            self.bad(column, f"must be at most {high:,}" + (f" ({why})" if why else "") + f", got {cell_text(text)}")
            return None
        return value

    def real(self, column: str, *, required: bool = True, low: float = 0.0, low_open: bool = True,
             high: float = math.inf, unit: str = "", why: str = "", per_s: float = 1.0,
             expected: str = "a number") -> float | None:
        """A finite decimal number (:data:`~kvsim.workload.trace_csv.TIME_TEXT`) divided by
        ``per_s`` (1e3: ms to s), above ``low`` (or at it, unless ``low_open``) and at most ``high`` (in the
        scaled unit; ``why``: the reason for the range; ``expected``: what the column holds, for
        a cell that is no number)."""
        text = self.cell(column)
        if not text:
            if required:
                self.bad(column, "required, got an empty cell")
            return None
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            self.bad(column, f"expected a finite number, got {cell_text(text)}")
            return None
        if re.fullmatch(TIME_TEXT, text) is None:
            self.bad(column, f"expected {expected}: a decimal number such as 0.021 or 2.1e-2, got {cell_text(text)}")
            return None
        raw = float(text)
        value = raw / per_s
        if not math.isfinite(value):
            self.bad(column, f"expected a finite number, got {cell_text(text)}")
            return None
        shown = f"{value:g} {unit}".strip() if per_s != 1.0 else cell_text(text)
        reason = f" ({why})" if why else ""
        if value < low or (low_open and value == low):
            bound = f"> {low:g}" if low_open else f">= {low:g}"
            what = "must not be negative" if low == 0 and value < 0 else f"must be {bound} {unit}".rstrip()
            self.bad(column, f"{what}{reason if low > 0 else ''}, got {shown}")
            return None
        if value > high:
            self.bad(column, f"must be at most {high:g} {unit}".rstrip() + f"{reason}, got {shown}")
            return None
        return value

    def latency(self, column: str, required: bool = False) -> float | None:
        """A measured latency in seconds, within :data:`LATENCY_S`."""
        return self.real(column, required=required, low=LATENCY_S[0], low_open=False, high=LATENCY_S[1], unit="s",
                         why="a measured latency lies between one kernel launch, 1 us, and a day")

    def iteration(self, column: str) -> float | None:
        """A measured iteration time in ms, as seconds, within :data:`ITERATION_S`."""
        return self.real(column, low=ITERATION_S[0], low_open=False, high=ITERATION_S[1], unit="s", per_s=1e3,
                         expected="a time in ms",
                         why="a measured iteration lies between one kernel launch, 1 us, and an hour")

