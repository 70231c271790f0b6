"""Request arrival processes: open-loop (Poisson, Gamma), closed-loop (fixed concurrency), trace replay."""

from __future__ import annotations

from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, field_validator

from kvsim.spec_types import FrozenSpec, PositiveFloat, Rate, Seconds
from kvsim.workload.traces import TraceSpec

__all__ = [
    "PoissonArrivals", "GammaArrivals", "ClosedLoop", "ArrivalSpec", "open_loop_arrival_times", "MAX_CV",
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


class ClosedLoop(FrozenSpec):
    """Closed loop: ``clients`` users, each sending its next request when the previous one completes.

    ``think_time`` is the pause between a completion and the next request: fixed, or exponential
    with that mean.
    """

    kind: Literal["closed_loop"] = "closed_loop"
    clients: int = Field(gt=0)
    think_time: Seconds = 0.0
    think_distribution: Literal["fixed", "exponential"] = "fixed"

    def think_times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.think_distribution == "exponential" and self.think_time > 0:
            return rng.exponential(self.think_time, size=n)
        return np.full(n, self.think_time)


ArrivalSpec = Annotated[Union[PoissonArrivals, GammaArrivals, ClosedLoop, TraceSpec], Field(discriminator="kind")]
"""A workload's arrival source; ``trace`` (:class:`~kvsim.workload.traces.TraceSpec`) also supplies lengths."""


def open_loop_arrival_times(
    spec: PoissonArrivals | GammaArrivals, duration_s: float, rng: np.random.Generator
) -> np.ndarray:
    """Arrival times in ``[0, duration_s)``, seconds, ascending."""
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
