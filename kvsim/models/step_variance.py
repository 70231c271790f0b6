"""Step-time variance: each engine iteration's duration times a random, mean-one factor.

Real engine steps of one shape do not take one time: the kernel a library picks for a shape,
the host's scheduling, Python's garbage collector and the network all move a step by a little,
and now and then by a lot. Without variance every step of a shape takes exactly the roofline's
time, so the latency percentiles come only from queueing and batch composition and their tails
come out too short. ``engine.step_variance`` (off by default: every committed result is
computed without it) draws, per instance and per iteration, one factor from its own random
stream (``engine.step_variance.<instance>``, :mod:`kvsim.rng`)::

    L ~ lognormal, E[L] = 1, CV[L] = cv        (sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2)
    B ~ Bernoulli(stall_probability)           (a stall: a garbage-collector pass, a hiccup)
    step_s = (model_s * L + stall_s * B) * model_s / (model_s + stall_probability * stall_s)

so ``E[step_s] = model_s`` exactly, for every step: throughput is unchanged in expectation and
only the spread (the tails) moves. The last factor hands back, on every step, the mean time the
stalls add (a stall is an absolute pause; the step model's time is read as the mean of a step
that includes them). Without stalls ``step_s = model_s * L``.

Draws are made in blocks of :data:`BLOCK` per instance (normal deviates, then uniforms), in
order, and iteration ``n`` of an instance (its ``n``-th batch, counted from 0) takes the
``n``-th of each: a coalesced run (:mod:`kvsim.serving.decode_run`) that plans steps ahead
reads the same factors the step-by-step loop would, and a run cut short leaves its unused
factors to the steps that follow. The parameters do not change which numbers are drawn, so two
settings of one seed differ only in the arithmetic.

The published setting (``{kind: lognormal}`` with its defaults, :data:`PUBLISHED`):

- ``cv`` 0.05: a fixed-shape decode step replayed as one CUDA graph measured p50 0.1482 ms and
  p95 0.1589 ms (batch 1, 2,048-token context; "CUDA Kernel Lab: Decode Step Graph Replay",
  resume-site-4js.pages.dev, 2026-05, L). For a lognormal, p95/p50 = exp(1.645 sigma): 1.072
  gives sigma = 0.042, a CV of 0.042, rounded up to 0.05 for the host's share (the same page's
  piecewise graph, eager attention between graphs, gives 0.12: the range to try).
- stalls off (``stall_probability`` 0): vLLM freezes its engine-core heap after start-up
  (vllm-project/vllm #24008, 2025-09, H), after which a report saw the engine core's gen-2
  collection run once, at start-up, over 60 batches (vllm-project/vllm #48229, vLLM 0.24.0, M).
  An engine that does not freeze stalls far more often: SGLang before ``freeze_gc`` paused
  100-300 ms about every 1.5 s (sgl-project/sglang #9241, M), i.e. ``stall_s: 0.2`` and
  ``stall_probability`` one step's time / 1.5 s; vLLM's frozen engine-core gen-2 pass measured
  37.8 ms (#48229), a ``stall_s`` for an engine that collects rarely.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import model_validator

from kvsim.rng import RandomStreams
from kvsim.spec_types import FrozenSpec, NonNegativeFloat, Seconds, Share, field_errors

__all__ = ["StepVarianceSpec", "StepJitter", "PUBLISHED", "BLOCK"]

BLOCK = 1024
"""Factors drawn at a time per instance (a block of normal deviates, then one of uniforms)."""

PUBLISHED = {"cv": 0.05, "stall_probability": 0.0, "stall_s": 0.0}
"""The published setting's parameters (see the module docstring); ``{kind: lognormal}`` takes them."""


class StepVarianceSpec(FrozenSpec):
    """``engine.step_variance``: a mean-one random factor on every engine iteration's duration.

    Attributes
    ----------
    kind : str
        ``none`` (default: every step of a shape takes the step model's time) or ``lognormal``
        (a lognormal factor of mean 1, plus optional stalls; :mod:`kvsim.models.step_variance`).
        ``{kind: lognormal}`` alone is the published setting (``cv`` 0.05, no stalls).
    cv : float
        Coefficient of variation of the lognormal factor (its standard deviation; the mean is
        1). Default 0.05, from a published fixed-shape decode-step distribution.
    stall_probability : float
        Probability that an iteration also pauses for ``stall_s`` (a garbage-collector pass);
        default 0.
    stall_s : float
        Length of a stall, seconds; default 0. Steps are scaled so that the mean step time
        stays the step model's.
    """

    kind: Literal["none", "lognormal"] = "none"
    cv: NonNegativeFloat = PUBLISHED["cv"]
    stall_probability: Share = PUBLISHED["stall_probability"]
    stall_s: Seconds = PUBLISHED["stall_s"]

    @model_validator(mode="after")
    def _stalls_complete(self) -> StepVarianceSpec:
        if (self.stall_probability > 0) != (self.stall_s > 0):
            given = "stall_probability" if self.stall_probability > 0 else "stall_s"
            missing = "stall_s" if given == "stall_probability" else "stall_probability"
            raise field_errors(type(self), [((missing,), f"{given} is set but {missing} is 0: a stall needs both",
                                             getattr(self, missing))])
        return self

    @property
    def active(self) -> bool:
        """Whether steps vary at all."""
        return self.kind != "none" and (self.cv > 0 or self.stall_probability > 0)

    def jitter(self, streams: RandomStreams, index: int) -> StepJitter | None:
        """Instance ``index``'s factors, from its stream ``engine.step_variance.<index>``; None if
        steps do not vary."""
        return StepJitter(self, streams.generator(f"engine.step_variance.{index}")) if self.active else None


class StepJitter:
    """One instance's step factors, iteration by iteration (see the module docstring).

    Parameters
    ----------
    spec : StepVarianceSpec
        An active spec.
    rng : numpy.random.Generator
        The instance's stream (``engine.step_variance.<instance>``).
    """

    __slots__ = ("rng", "sigma", "mu", "p", "stall_s", "mean_stall_s", "_first", "_scale", "_stall")

    def __init__(self, spec: StepVarianceSpec, rng: np.random.Generator):
        self.rng = rng
        self.sigma = math.sqrt(math.log1p(spec.cv * spec.cv))
        self.mu = -0.5 * self.sigma * self.sigma
        self.p = spec.stall_probability
        self.stall_s = spec.stall_s
        self.mean_stall_s = self.p * self.stall_s
        self._first = 0  # iteration of _scale[0]
        self._scale: list[float] = []  # L per iteration from _first on
        self._stall: list[float] = []  # stall_s * B per iteration from _first on

    def _reach(self, start: int, end: int) -> None:
        """Hold the factors of iterations ``start`` to ``end - 1`` (blocks before ``start``'s go:
        no iteration asks again for an earlier one)."""
        if start < self._first:
            raise ValueError(f"step factor of iteration {start} asked after iteration {self._first}'s")
        drop = (start - self._first) // BLOCK * BLOCK
        if drop:
            del self._scale[:drop], self._stall[:drop]
            self._first += drop
        while self._first + len(self._scale) < end:
            z = self.rng.standard_normal(BLOCK)
            u = self.rng.random(BLOCK)
            self._scale += np.exp(self.mu + self.sigma * z).tolist()
            self._stall += np.where(u < self.p, self.stall_s, 0.0).tolist()

    def duration(self, model_s: float, iteration: int) -> float:
        """Duration of ``iteration`` (counted from 0) whose step model gives ``model_s``, seconds."""
        self._reach(iteration, iteration + 1)
        k = iteration - self._first
        if self.mean_stall_s == 0.0:
            return model_s * self._scale[k]
        return (model_s * self._scale[k] + self._stall[k]) * (model_s / (model_s + self.mean_stall_s))

    def durations(self, model_s: list[float], first: int) -> list[float]:
        """:meth:`duration` of iterations ``first``, ``first + 1``, ... (same numbers, to the bit)."""
        self._reach(first, first + len(model_s))
        k = first - self._first
        scale, stall, mean = self._scale, self._stall, self.mean_stall_s
        if mean == 0.0:
            return [m * scale[k + i] for i, m in enumerate(model_s)]
        return [(m * scale[k + i] + stall[k + i]) * (m / (m + mean)) for i, m in enumerate(model_s)]
