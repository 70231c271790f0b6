"""A prompt's blocks as *segments* of chains, for the caches kept as extents (issue 23, item 1;
docs/extents.md, "Phase 4: extents").

A block is addressed as ``(chain, position)``. A ``shared_documents`` prompt is two segments: its
document's full blocks, ``(document key, 0, L)``, which every prompt of that document names
alike, and the rest, ``(own key, 0, S)``, blocks no other prompt has
(:func:`kvsim.workload.reuse.prompt_segments`). A segment list names blocks ``0 ..
n - 1`` of the prompt in order; `segment_range` cuts the list to a range of those positions, so a
cache layer that used to slice a prompt's block ids slices its segments instead, and a stretch
of a thousand blocks is one tuple.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvsim.workload.reuse import prompt_segments

__all__ = ["Segment", "prompt_address", "ids_address", "segment_range", "segment_blocks"]

Segment = tuple[Any, int, int]
"""``(chain key, start, end)``: blocks ``start .. end - 1`` of one chain."""


def prompt_address(seq: Any, block_tokens: int) -> list[Segment]:
    """``seq``'s prompt blocks (every one, the partial last block included) as segments, worked out
    once per sequence from its ids and kept on it (``seq.segments``).

    The document's blocks are found among the document chains hashed in this process; a prompt
    that starts with none (its document is shorter than a block) is one chain of its own, keyed
    by its first id: no other prompt has that block, hence none of its blocks.
    """
    segments: list[Segment] | None = seq.segments
    if segments is None:
        segments = seq.segments = ids_address(seq.hashes, block_tokens)
    return segments


def ids_address(hashes: Sequence[int] | NDArray[np.integer], block_tokens: int) -> list[Segment]:
    """The blocks ``hashes`` names (a prompt's ids, from its first block) as segments: what
    :func:`prompt_address` keeps on a sequence, for ids with no sequence (a prewarm's prompts)."""
    found = prompt_segments(hashes, block_tokens)
    if found is not None:
        return [(key, start, end) for key, _, start, end in found]
    return [(int(hashes[0]), 0, len(hashes))] if len(hashes) else []


def segment_range(segments: list[Segment], start: int, end: int) -> list[Segment]:
    """The blocks at prompt positions ``start .. end - 1`` of ``segments``, as segments."""
    out = []
    pos = 0
    for key, s, e in segments:
        n = e - s
        lo, hi = max(start - pos, 0), min(end - pos, n)
        if lo < hi:
            out.append((key, s + lo, s + hi))
        pos += n
        if pos >= end:
            break
    return out


def segment_blocks(segments: list[Segment]) -> int:
    """Blocks the segments name."""
    return sum(e - s for _, s, e in segments)
