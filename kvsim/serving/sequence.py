"""The runtime state of one request inside an instance (its token and page counts).

A kernel of the compiled backend (:mod:`kvsim.backend`): ``sequence.pxd`` beside this file types
its fields (C longs for counts) when compiled; the pure-Python reference ignores it. A run makes
its sequences from its backend's module (``kernels.sequence.Sequence``), never from a direct
import, so the compiled scheduler only ever sees compiled sequences.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["Sequence"]


class Sequence:
    """Runtime state of one request inside an instance."""

    __slots__ = (
        "rid", "prompt_tokens", "output_tokens", "generated", "kv_tokens", "prefill_target",
        "kv_blocks", "shared_tokens", "preemptions", "admitted", "on_finish", "hashes", "cache",
        "gated", "stalled", "sequence_hashes", "swapped", "queued_tokens", "aborted", "not_before", "adapter",
        "decode_copy", "remote_tokens", "value_keys", "prompt_counted", "segments",
    )
    # a handed-off sequence (decode side) starts with its prompt's KV and ``admitted`` set

    def __init__(self, rid: int, prompt_tokens: int, output_tokens: int, on_finish: Callable | None = None,
                 hashes: Any = None, sequence_hashes: Any = None):
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.output_tokens = output_tokens
        self.generated = 0
        self.kv_tokens = 0
        self.prefill_target = prompt_tokens
        self.kv_blocks = 0        # pages this sequence owns
        self.shared_tokens = 0    # leading tokens held in shared cached blocks, not in own pages
        self.preemptions = 0
        self.admitted = False
        self.on_finish = on_finish
        self.hashes = hashes      # prefix block ids of the prompt, or None
        self.sequence_hashes = sequence_hashes  # ids of prompt + output (to cache decoded KV), or None
        self.cache: Any = None    # the admission hook's per-sequence state
        self.gated = False        # first token must wait for an in-flight load
        self.stalled = False      # prefill computed, waiting for that load
        self.swapped = False      # its own KV waits in host DRAM (preempted by swapping)
        self.queued_tokens = 0    # prompt tokens it brought to the waiting queue (for routers)
        self.aborted = False      # its client gave up: it holds no pages and emits nothing more
        self.not_before = 0       # the first batch (scheduler's count) it may join (async scheduling)
        self.adapter = -1         # the LoRA adapter it runs under (-1: the base model)
        self.decode_copy: Sequence | None = None  # disaggregated: the decode-side copy the handoff made
        self.remote_tokens = 0    # of its shared tokens, those read in place from a peer's HBM
        self.value_keys: Any = None  # LoRA value reuse: per shared block, other adapters' ids of its KV
        self.prompt_counted = 0   # prompt tokens counted as processed input (never twice after a recompute)
        self.segments: Any = None  # the prompt's blocks as segments of chains (caches kept as extents)

    @property
    def total_tokens(self) -> int:
        """Tokens this sequence will hold at its end (prompt + output)."""
        return self.prompt_tokens + self.output_tokens
