"""LoRA adapters in one instance: which may run together, which are resident, what a switch costs.

vLLM serves adapters from ``max_loras`` device slots. Its scheduler admits a waiting request
only if the requests already scheduled in the step use fewer than ``max_loras`` distinct
adapters or already include the request's own; others are skipped for this step, not dropped
(vllm/v1/core/sched/scheduler.py). Before a step the model runner makes the step's adapters
active, copying any adapter not already in a slot from host memory into the slot it evicts,
least recently used first (vllm/lora/worker_manager.py, LRUCacheWorkerLoRAManager); the step
waits for that copy. kvsim charges it as ``adapter bytes per card / (host link bandwidth x
efficiency.host_copy)`` on the step that needs it: one event per iteration, none per adapter.

The adapters' weights are all in host memory (vLLM's CPU LoRA cache); loading one from disk
the first time is not modelled.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import overload

import numpy as np

from kvsim.serving.sequence import Sequence

__all__ = ["AdapterSlots", "adapter_block_ids", "value_keys"]

_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit constants: salting is a bijection per adapter
_SALT = np.uint64(0xD1B54A32D192ED03)


@overload
def adapter_block_ids(hashes: np.ndarray, adapter: int, shared_blocks: int) -> np.ndarray: ...
@overload
def adapter_block_ids(hashes: None, adapter: int, shared_blocks: int) -> None: ...
def adapter_block_ids(hashes: np.ndarray | None, adapter: int, shared_blocks: int) -> np.ndarray | None:
    """The block ids a request's KV has under its adapter: the first ``shared_blocks`` keep the
    base ids (KV every adapter shares), the rest are salted with the adapter, so equal ids still
    mean equal prefixes *and* equal adapters. A base-model request (``adapter < 0``) keeps all."""
    if hashes is None or adapter < 0 or shared_blocks >= len(hashes):
        return hashes
    out = np.array(hashes, dtype=np.int64, copy=True)
    tail = out[shared_blocks:].view(np.uint64)
    with np.errstate(over="ignore"):
        tail *= _MIX
        tail += np.uint64(adapter + 1) * _SALT
    return out


def value_keys(hashes: np.ndarray, adapter: int, shared_blocks: int, count: int) -> np.ndarray:
    """Where else the KV of a request's shared context may sit, for value reuse: row ``k`` lists
    block ``k``'s ids under the base model and under every other adapter (``shared_blocks`` rows,
    ``count`` columns). The same value, computed by another adapter, is copied, not shared."""
    base = np.asarray(hashes[:shared_blocks], dtype=np.int64)
    columns: list[np.ndarray] = [base] + [adapter_block_ids(base, b, 0) for b in range(count) if b != adapter]
    return np.stack(columns, axis=1) if len(base) else np.empty((0, len(columns)), dtype=np.int64)


class AdapterSlots:
    """The adapter slots of one instance.

    Parameters
    ----------
    max_loras : int
        Slots: the most distinct adapters one step may run.
    load_s : float
        Time to copy one adapter into a slot, seconds (bytes per card / achieved host-link rate).
    """

    def __init__(self, max_loras: int, load_s: float):
        if max_loras < 1:
            raise ValueError(f"max_loras must be >= 1 (got {max_loras})")
        self.max_loras = max_loras
        self.load_s = load_s
        self.resident: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self.loads = 0

    @staticmethod
    def active(*groups: Iterable[Sequence]) -> set[int]:
        """The adapters the sequences of ``groups`` run under (the base model needs no slot)."""
        return {s.adapter for group in groups for s in group if s.adapter >= 0}

    def fits(self, seq: Sequence, active: set[int]) -> bool:
        """May ``seq`` join sequences running under the adapters ``active`` without exceeding
        the slots?"""
        if seq.adapter < 0:
            return True
        return seq.adapter in active or len(active) < self.max_loras

    def activate(self, adapters: Iterable[int]) -> float:
        """Make a step's adapters resident; returns the time the step waits for copies, seconds."""
        wanted = [a for a in dict.fromkeys(adapters) if a >= 0]
        missing = 0
        for adapter in wanted:
            if adapter in self.resident:
                self.resident.move_to_end(adapter)
            else:
                missing += 1
        for adapter in wanted:
            if adapter not in self.resident:
                if len(self.resident) >= self.max_loras:
                    for old in self.resident:  # least recently used not needed by this step
                        if old not in wanted:
                            del self.resident[old]
                            break
                self.resident[adapter] = None
        self.loads += missing
        return missing * self.load_s
