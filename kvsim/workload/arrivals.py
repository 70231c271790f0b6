"""Request arrival processes: open-loop (Poisson, Gamma, a diurnal rate curve, constant-rate stages),
closed-loop (fixed concurrency), trace replay."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from kvsim.rng import RandomStreams
from kvsim.spec_types import FrozenSpec, PositiveFloat, PositiveInt, PositiveSeconds, Rate, Seconds
from kvsim.workload.lengths import LengthSpec
from kvsim.workload.requests import RequestArrays
from kvsim.workload.traces import TraceSpec

__all__ = [
    "PoissonArrivals", "GammaArrivals", "DiurnalArrivals", "ClosedLoop", "PhaseSpec", "PhasedArrivals",
    "RateStage", "StagedArrivals", "ArrivalSpec", "open_loop_arrival_times", "MAX_CV",
]


MAX_CV = 20.0
"""Largest inter-arrival CV accepted: beyond it a finite run is dominated by a handful of bursts."""


class PoissonArrivals(FrozenSpec):
    """Open loop: exponential inter-arrival times at ``rate`` requests/s."""

    kind: Literal["poisson"] = "poisson"
    rate: Rate

    def interarrivals(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(1.0 / self.rate, size=n)

    def first_arrival(self, rng: np.random.Generator) -> float:
        return float(rng.exponential(1.0 / self.rate))  # memoryless: equilibrium = ordinary


class GammaArrivals(FrozenSpec):
    """Open loop: Gamma inter-arrival times with mean ``1/rate`` and coefficient of variation ``cv``.

    ``cv = 1`` is Poisson; ``cv > 1`` is burstier (shape ``1/cv^2``).
    """

    kind: Literal["gamma"] = "gamma"
    rate: Rate
    cv: PositiveFloat

    @field_validator("cv")
    @classmethod
    def _bounded(cls, cv: float) -> float:
        if cv > MAX_CV:
            raise ValueError(f"cv above {MAX_CV:g} is not supported (got {cv:g})")
        return cv

    def interarrivals(self, rng: np.random.Generator, n: int) -> np.ndarray:
        shape = 1.0 / self.cv**2
        return rng.gamma(shape, scale=1.0 / (self.rate * shape), size=n)

    def first_arrival(self, rng: np.random.Generator) -> float:
        """Time to the first arrival of the process *in equilibrium* (a stationary start).

        Starting the renewal process fresh at t=0 would add ``(cv^2 - 1) / 2`` arrivals to any
        window. The equilibrium residual is a uniform point inside a length-biased interval, and
        the length-biased Gamma(k, theta) is Gamma(k + 1, theta).
        """
        shape = 1.0 / self.cv**2
        return float(rng.uniform() * rng.gamma(shape + 1.0, scale=1.0 / (self.rate * shape)))


class DiurnalArrivals(FrozenSpec):
    """Open loop: Poisson arrivals whose rate follows a daily-style cosine curve.

    ``rate(t) = rate * (1 + amplitude * cos(2 pi (t - peak_at) / period))``: mean ``rate``,
    swinging by ``amplitude`` (a fraction of it) around the mean, highest at ``peak_at`` (default
    half a period: a run starts in the trough). Drawn by thinning a Poisson process at the peak
    rate, so the count in any interval is Poisson with the curve's integral as its mean.
    """

    kind: Literal["diurnal"] = "diurnal"
    rate: Rate
    amplitude: float = Field(ge=0.0, lt=1.0)
    period: PositiveSeconds
    peak_at: Seconds | None = None  # 0 s: the run starts at the peak

    def rate_at(self, t_s: np.ndarray | float) -> np.ndarray | float:
        """The arrival rate at time ``t_s`` (seconds), requests/s."""
        peak = self.period / 2 if self.peak_at is None else self.peak_at
        return self.rate * (1.0 + self.amplitude * np.cos(2.0 * np.pi * (np.asarray(t_s) - peak) / self.period))


class ClosedLoop(FrozenSpec):
    """Closed loop: ``clients`` users, each sending its next request when the previous one completes.

    ``think_time`` is the pause between a completion and the next request: fixed, or exponential
    with that mean.
    """

    kind: Literal["closed_loop"] = "closed_loop"
    clients: PositiveInt
    think_time: Seconds = 0.0  # 0 s: the next request at once
    think_distribution: Literal["fixed", "exponential"] = "fixed"

    def think_times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.think_distribution == "exponential" and self.think_time > 0:
            return rng.exponential(self.think_time, size=n)
        return np.full(n, self.think_time)


class RateStage(FrozenSpec):
    """One constant-rate stage: ``rate`` requests/s for ``duration``."""

    rate: Rate
    duration: PositiveSeconds


class StagedArrivals(FrozenSpec):
    """Open loop in constant-rate stages run back to back, the way the inference-perf load
    generator's ``load.type: constant`` sends them.

    Stage ``k`` sends exactly ``floor(rate_k * duration_k)`` requests. Their gaps are drawn
    exponential with mean ``1/rate_k`` and then scaled so they add up to the stage's duration
    (inference-perf ``ConstantLoadTimer.start_timer``, kubernetes-sigs/inference-perf
    ``inference_perf/loadgen/load_timer.py``): a Poisson-like stream with an exact count, whose
    last request of a stage lands at the stage's end. No request arrives after the last stage.
    Unlike ``phases``, the stages share the workload's lengths and prefix structure.
    """

    kind: Literal["stages"] = "stages"
    stages: list[RateStage] = Field(min_length=1)

    @property
    def rate(self) -> float:
        """Time-average arrival rate over the stages, requests/s."""
        return sum(s.rate * s.duration for s in self.stages) / sum(s.duration for s in self.stages)

    def times(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        """Arrival times in ``[0, duration_s)``, seconds, ascending."""
        parts = []
        start = 0.0
        for stage in self.stages:
            n = int(stage.rate * stage.duration)
            if n > 0:
                gaps = rng.exponential(1.0 / stage.rate, size=n)
                times = start + np.cumsum(gaps * (stage.duration / gaps.sum()))
                # the last one lands at the stage's end: keep it inside [start, end) whatever the rounding,
                # so a last stage ending at the scenario's duration keeps its exact count
                parts.append(np.minimum(times, np.nextafter(start + stage.duration, -np.inf)))
            start += stage.duration
        out = np.concatenate(parts) if parts else np.zeros(0)
        return out[out < duration_s]


PhaseArrival = Annotated[PoissonArrivals | GammaArrivals | DiurnalArrivals | TraceSpec,
                         Field(discriminator="kind")]


class PhaseSpec(FrozenSpec):
    """One phase of a workload whose mix shifts: for ``duration``, requests arrive by ``arrival``
    with these length distributions (a trace gives its own lengths: omit them)."""

    duration: PositiveSeconds
    arrival: PhaseArrival
    input_tokens: LengthSpec | None = Field(default=None, validate_default=True)
    output_tokens: LengthSpec | None = Field(default=None, validate_default=True)

    @field_validator("input_tokens", "output_tokens")
    @classmethod
    def _lengths(cls, value: object, info: ValidationInfo) -> object:
        arrival = info.data.get("arrival")
        if arrival is None:
            return value
        if isinstance(arrival, TraceSpec) and value is not None:
            raise ValueError("must be omitted: a trace gives every request's lengths")
        if not isinstance(arrival, TraceSpec) and value is None:
            raise ValueError("required (a length distribution, e.g. {kind: fixed, value: 1024})")
        return value


class PhasedArrivals(FrozenSpec):
    """Open loop in phases, one after another (prompt-heavy retrieval, then output-heavy
    reasoning; one trace after another). Phase ``k`` draws from streams named
    ``workload.phase.<k>.*``; a trace phase replays its file from the phase's start, cut at
    the phase's end. After the last phase, the last one's process goes on if the run is longer.
    Prompts carry no prefix hashes.
    """

    kind: Literal["phases"] = "phases"
    phases: list[PhaseSpec] = Field(min_length=1)

    def requests(self, duration_s: float, streams: RandomStreams, base_dir: str | Path | None = None) -> RequestArrays:
        """Every request arriving in ``[0, duration_s)``."""
        parts = []
        start = 0.0
        for k, phase in enumerate(self.phases):
            length = phase.duration if k < len(self.phases) - 1 else max(phase.duration, duration_s - start)
            length = min(length, duration_s - start)
            if length <= 0:
                break
            if isinstance(phase.arrival, TraceSpec):
                trace = phase.arrival.load(base_dir)
                part = trace.select(trace.arrival_s < length)
                parts.append((part.arrival_s + start, part.input_tokens, part.output_tokens))
            else:
                name = f"workload.phase.{k}"
                if phase.input_tokens is None or phase.output_tokens is None:  # (PhaseSpec refuses it)
                    raise ValueError(f"phase {k}: an arrival process without its length distributions")
                times = open_loop_arrival_times(phase.arrival, length, streams.generator(f"{name}.arrival"))
                inputs = phase.input_tokens.sample(streams.generator(f"{name}.input_tokens"), len(times))
                outputs = phase.output_tokens.sample(streams.generator(f"{name}.output_tokens"), len(times))
                parts.append((times + start, inputs, outputs))
            start += length
        arrival, inputs, outputs = (np.concatenate([p[i] for p in parts]) for i in range(3))
        return RequestArrays(arrival, inputs.astype(np.int64), outputs.astype(np.int64))

    def max_tokens(self, which: str) -> int | None:
        """Longest prompt (``input_tokens``) or output over the phases; None with a trace phase."""
        lengths: list[LengthSpec | None] = [getattr(p, which) for p in self.phases]
        known = [length for length in lengths if length is not None]
        if len(known) < len(lengths):
            return None
        return max(length.max_tokens for length in known)


ArrivalSpec = Annotated[PoissonArrivals | GammaArrivals | DiurnalArrivals | ClosedLoop | TraceSpec | PhasedArrivals
                        | StagedArrivals, Field(discriminator="kind")]
"""A workload's arrival source; ``trace`` (:class:`~kvsim.workload.traces.TraceSpec`) also supplies lengths."""


def open_loop_arrival_times(
    spec: PoissonArrivals | GammaArrivals | DiurnalArrivals | StagedArrivals, duration_s: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Arrival times in ``[0, duration_s)``, seconds, ascending."""
    if isinstance(spec, StagedArrivals):
        return spec.times(duration_s, rng)
    if isinstance(spec, DiurnalArrivals):
        peak_rate = spec.rate * (1.0 + spec.amplitude)
        candidates = open_loop_arrival_times(PoissonArrivals(rate=peak_rate), duration_s, rng)
        keep = rng.uniform(size=len(candidates)) * peak_rate < spec.rate_at(candidates)
        return candidates[keep]
    expected = spec.rate * duration_s
    chunk = max(16, int(expected + 6.0 * np.sqrt(expected + 1.0)) + 16)
    first = spec.first_arrival(rng)
    times: list[np.ndarray] = [np.array([first])]
    last = first
    while last < duration_s:
        t = last + np.cumsum(spec.interarrivals(rng, chunk))
        times.append(t)
        last = float(t[-1])
    out = np.concatenate(times)
    return out[out < duration_s]
