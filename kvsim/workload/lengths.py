"""Token-length distributions (prompt and output lengths), as plain specs that can sample.

All samples are integers >= 1 (tokens). Each ``sample`` takes an explicit
``numpy.random.Generator`` so callers control the stream.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from kvsim.spec_types import FrozenSpec, PositiveFloat, PositiveInt

__all__ = ["FixedLength", "UniformLength", "LognormalLength", "EmpiricalLength", "LengthSpec"]


class FixedLength(FrozenSpec):
    """Every request has ``value`` tokens."""

    kind: Literal["fixed"] = "fixed"
    value: PositiveInt

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)

    @property
    def mean(self) -> float:
        return float(self.value)

    @property
    def max_tokens(self) -> int:
        return self.value


class UniformLength(FrozenSpec):
    """Integers uniform on ``[low, high]`` (both inclusive)."""

    kind: Literal["uniform"] = "uniform"
    low: PositiveInt
    high: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2.0

    @property
    def max_tokens(self) -> int:
        return self.high


class LognormalLength(FrozenSpec):
    """Lognormal with the given median and log-space ``sigma``, rounded, clipped to ``[min, max]``."""

    kind: Literal["lognormal"] = "lognormal"
    median: PositiveFloat
    sigma: PositiveFloat
    min: PositiveInt = 1
    max: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLength:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        draws = rng.lognormal(mean=np.log(self.median), sigma=self.sigma, size=n)
        return np.clip(np.rint(draws), self.min, self.max).astype(np.int64)

    @property
    def mean(self) -> float:
        """Mean before clipping and rounding (``median * exp(sigma^2 / 2)``)."""
        return float(self.median * np.exp(self.sigma**2 / 2.0))

    @property
    def max_tokens(self) -> int:
        return self.max


class EmpiricalLength(FrozenSpec):
    """Resample from observed lengths (with optional weights).

    In a scenario file, ``file:`` (plus ``column:`` for a CSV) is read when the scenario is
    loaded and its values land in ``values``.
    """

    kind: Literal["empirical"] = "empirical"
    values: list[PositiveInt] = Field(min_length=1)
    weights: list[PositiveFloat] | None = None
    file: str | None = None
    column: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> EmpiricalLength:
        if self.weights is not None and len(self.weights) != len(self.values):
            raise ValueError(f"weights has {len(self.weights)} entries but values has {len(self.values)}")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        values = np.asarray(self.values, dtype=np.int64)
        p = None
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=float)
            p = w / w.sum()
        return rng.choice(values, size=n, replace=True, p=p)

    @property
    def mean(self) -> float:
        if self.weights is None:
            return float(np.mean(self.values))
        return float(np.average(self.values, weights=self.weights))

    @property
    def max_tokens(self) -> int:
        return int(max(self.values))


LengthSpec = Annotated[
    FixedLength | UniformLength | LognormalLength | EmpiricalLength, Field(discriminator="kind")
]
