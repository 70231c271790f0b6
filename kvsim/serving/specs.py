"""Specs of the serving layer: how an instance is configured, pools of instances and their roles,
routing, and the prefill -> decode KV handoff."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kvsim.spec_types import Bytes, Fraction, FrozenSpec

__all__ = ["InstanceSpec", "RouterKind", "Role", "PoolSpec", "HandoffSpec", "ROLES"]

RouterKind = Literal["round_robin", "least_outstanding", "least_prompt_tokens", "most_free_kv"]
"""How a router picks an instance among those of one role (see :mod:`kvsim.serving.router`)."""

Role = Literal["mixed", "prefill", "decode"]
"""What an instance does: ``mixed`` serves whole requests (colocated prefill and decode);
``prefill`` computes prompts and hands their KV to a ``decode`` instance, which generates."""

ROLES: tuple[str, ...] = ("mixed", "prefill", "decode")


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


class PoolSpec(FrozenSpec):
    """A pool of identical instances: ``nodes`` servers of catalog type ``node``, cut into
    instances of ``instance.tp`` cards, each starting in ``role``.

    ``instances`` defaults to every card in use.
    """

    node: str
    nodes: int = Field(default=1, ge=1)
    instance: InstanceSpec = Field(default_factory=InstanceSpec)
    instances: int | None = Field(default=None, ge=1)
    role: Role = "mixed"


class HandoffSpec(FrozenSpec):
    """How a prefill instance hands a prompt's KV to a decode instance.

    Attributes
    ----------
    mode : str
        ``layerwise`` (default): each layer's KV streams to the decode instance as it is
        computed, so the transfer overlaps the prompt's last prefill iteration and only the
        last layer's share is left when it ends. ``whole``: the KV is sent after the last
        layer.
    gpu_direct : bool
        NIC DMA straight between device memories (GPU-Direct RDMA, default), as KV transfer
        engines (Mooncake, NIXL) do; otherwise each side bounces through its host DRAM.
        Inside one scale-up domain the handoff is a peer copy over the scale-up links.
    """

    mode: Literal["layerwise", "whole"] = "layerwise"
    gpu_direct: bool = True
