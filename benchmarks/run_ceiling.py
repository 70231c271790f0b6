"""The most that closed-form decode runs could save: a coalesced run with its per-step work removed.

A decode run (``kvsim/serving/decode_run.py``) computes each planned step's time, sums the steps'
ends and, when it is let go, accounts every applied step (engine time, tokens, the KV level), all
to the bit of the step-by-step engine. Closed-form run sums (records equal to floating-point
tolerance instead) would make that per-step work O(1) per run. :func:`apply` stands in for them
at no cost at all: every later step takes the first step's time, split and all (lists built in
C), and a run accounts nothing. The simulation still runs the same requests through the same
kinds of events, so ``instructions.py --ceiling`` counts what is left when that work is free.
Two per-step pieces stay: the step ends, summed in C (``itertools.accumulate``), and the count
of pages each step allocates (``_new_pages``, a Python loop over the steps; about 4 % of
``rr_conv_80``'s time in a py-spy profile, which a closed form would also save).

The results of such a run are wrong (step times do not grow with the context, and the summary's
engine time and KV level miss the runs): only its instruction count means anything.
"""

from __future__ import annotations

import numpy as np

from kvsim.models.step_time import DecodeSteps, RooflineStepTime
from kvsim.serving.decode_run import DecodeRun

_real_decode_steps = RooflineStepTime.decode_steps  # the real closed form, for each run's first step


def _same_steps(step_model: RooflineStepTime, seqs: int, context_tokens: int, steps: int) -> DecodeSteps:
    """``steps`` copies of the first step's breakdown (lists)."""
    first = _real_decode_steps(step_model, seqs, context_tokens, 1)
    return DecodeSteps(first.total_s * steps, first.compute_s * steps, first.memory_s * steps,
                       first.comm_s, first.kernels_s, first.overhead_s)


def _same_steps_array(step_model: RooflineStepTime, seqs: int, context_tokens: int, steps: int) -> DecodeSteps:
    """:func:`_same_steps` as numpy arrays."""
    first = _real_decode_steps(step_model, seqs, context_tokens, 1)
    return DecodeSteps(np.full(steps, first.total_s[0]), np.full(steps, first.compute_s[0]),
                       np.full(steps, first.memory_s[0]), first.comm_s, first.kernels_s, first.overhead_s)


def _account_nothing(run: DecodeRun) -> None:
    """A run's accounts, free (and missing from the summary)."""


def apply(set_attribute=setattr) -> None:
    """Replace the runs' per-step work in this process (a child of ``instructions.py``), through
    ``set_attribute`` (a test passes pytest's ``monkeypatch.setattr``, which undoes it after)."""
    set_attribute(RooflineStepTime, "decode_steps", _same_steps)
    set_attribute(RooflineStepTime, "decode_steps_array", _same_steps_array)
    set_attribute(DecodeRun, "account", _account_nothing)
