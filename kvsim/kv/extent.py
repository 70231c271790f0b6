"""One extent -- a run of consecutive blocks of one chain with one recency, reader and pin
count -- and the sentinel a new extent points at until a store links it
(:mod:`kvsim.kv.extents` keeps them)."""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["Extent", "UNLINKED"]


class Extent:
    """Blocks ``start .. end - 1`` of ``chain``, least recent first, each with ``readers`` reader
    references and ``pins`` pins; ``prev`` / ``next`` link the store's recency list."""

    __slots__ = ("chain", "start", "end", "readers", "pins", "prev", "next")

    prev: Extent
    next: Extent

    def __init__(self, chain: Hashable, start: int, end: int, readers: int = 0, pins: int = 0):
        self.chain, self.start, self.end = chain, start, end
        self.readers, self.pins = readers, pins
        self.prev = self.next = UNLINKED  # until a store links it into its recency list

    def __repr__(self) -> str:
        return f"Extent({self.chain!r}, {self.start}, {self.end}, readers={self.readers}, pins={self.pins})"


UNLINKED: Extent = Extent.__new__(Extent)
"""Where a new extent's ``prev`` and ``next`` point until a store links it (``is UNLINKED``: it was
never in the recency list). A sentinel in no list, linked to itself."""
UNLINKED.chain, UNLINKED.start, UNLINKED.end, UNLINKED.readers, UNLINKED.pins = None, 0, 0, 0, 0
UNLINKED.prev = UNLINKED.next = UNLINKED
