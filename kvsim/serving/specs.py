"""Specs of the serving layer: how an instance is configured."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kvsim.spec_types import Bytes, Fraction, FrozenSpec

__all__ = ["InstanceSpec", "RouterKind"]

RouterKind = Literal["round_robin", "least_outstanding"]


class InstanceSpec(FrozenSpec):
    """One inference engine instance: a TP group of cards and its batching limits.

    Attributes
    ----------
    tp : int
        Tensor-parallel degree: cards per instance (within one node).
    max_num_seqs : int
        Cap on concurrently running sequences (vLLM ``max_num_seqs``, default 256).
    max_batched_tokens : int
        Token budget per iteration (vLLM ``max_num_batched_tokens``). Default 2048, vLLM V1's
        default for an API server (it uses 8192 on large-memory GPUs). A larger budget prefills
        faster under load but stretches every decode step that shares the iteration.
    block_size_tokens : int
        KV page size in tokens (vLLM default 16).
    memory_utilization : float
        Fraction of device memory the engine may use (vLLM ``gpu_memory_utilization``, default 0.9).
    activation_reserve : float
        Bytes per card kept for activations and workspace (assumption: 2 GiB).
    """

    tp: int = Field(default=1, ge=1)
    max_num_seqs: int = Field(default=256, ge=1)
    max_batched_tokens: int = Field(default=2048, ge=1)
    block_size_tokens: int = Field(default=16, ge=1)
    memory_utilization: Fraction = 0.9
    activation_reserve: Bytes = 2.0 * 2**30
