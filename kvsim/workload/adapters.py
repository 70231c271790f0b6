"""Which LoRA adapter each request names, and the adapters' description.

A workload with ``adapters:`` serves ``count`` LoRA adapters of the scenario's base model; each
request names one, drawn by ``popularity`` from its own named stream (``workload.adapter`` for
open loop, ``workload.adapter.client.<i>`` for closed-loop client ``i``), so adding adapters
never shifts another draw. A request also carries how many leading prompt tokens are *shared
context* -- a shared document or the shared prefix, the part whose KV a system may reuse across
adapters (see :mod:`kvsim.models.lora` and a system's ``lora.kv_sharing``).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from kvsim.dtypes import DTYPE_BYTES
from kvsim.spec_types import FrozenSpec, PositiveInt

__all__ = ["AdapterSpec", "LoraTarget", "adapter_probabilities"]

LoraTarget = Literal["q", "k", "v", "o", "gate", "up", "down"]


class AdapterSpec(FrozenSpec):
    """The LoRA adapters requests name (all of one base model, the scenario's ``model``).

    Attributes
    ----------
    count : int
        Adapters; requests name them ``0 .. count - 1``.
    rank : int
        LoRA rank ``r`` of every adapter.
    targets : list of str
        Adapted linear layers of every transformer layer (default ``[q, k, v, o]``, the
        attention projections the LoRA paper adapts).
    dtype : str
        Storage format of the adapter weights.
    popularity : str
        How requests pick an adapter: ``uniform``, or ``zipf`` with exponent ``zipf_s``
        (adapter 0 the most popular).
    """

    count: PositiveInt
    rank: PositiveInt = 16
    targets: tuple[LoraTarget, ...] = ("q", "k", "v", "o")
    dtype: str = "bf16"
    popularity: Literal["uniform", "zipf"] = "uniform"
    zipf_s: float = Field(default=1.0, gt=0)  # (an exponent of 0 is popularity: uniform)

    @field_validator("targets")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("give at least one target layer, e.g. [q, k, v, o]")
        if len(set(value)) != len(value):
            raise ValueError(f"a target is listed twice: {list(value)}")
        return value

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        if value not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {value!r}; known: {', '.join(DTYPE_BYTES)}")
        return value

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` adapter indices (int64) by popularity."""
        return rng.choice(self.count, size=n, p=adapter_probabilities(self)).astype(np.int64)


def adapter_probabilities(spec: AdapterSpec) -> np.ndarray:
    """Probability of each adapter being named: uniform, or Zipf ``k^-s`` normalised."""
    if spec.popularity == "uniform":
        return np.full(spec.count, 1.0 / spec.count)
    weights = np.arange(1, spec.count + 1, dtype=float) ** -spec.zipf_s
    probabilities: np.ndarray = weights / weights.sum()
    return probabilities
