"""An LRU block store kept as *extents*: runs of consecutive blocks of one chain, one entry each
(issue 23, item 1, phase 4; docs/extents.md, "Phase 4: extents").

A block is addressed as ``(chain, position)``: ``chain`` names a shared array of prefix-chained
block ids (a document's chain, a request's own suffix), ``position`` a block in it. The store
keeps the same state a :class:`~kvsim.kv.store.BlockStore` under LRU keeps per block -- the
recency order, readers, pins -- as a list of extents ``[start, end)`` of one chain, least recent
first. Inside an extent recency grows with position (a run is filed, read and pinned in order),
and every block of an extent has the same readers and pins. A call on part of an extent first
cuts it where the call's range starts and ends (the pieces keep their place in the order), and
pieces next to each other in the order, contiguous in their chain and with equal counts, are
joined again: so the entries are as few as the access pattern allows, and the blocks they spell
out are exactly the per-block store's.

Every call is *defined* as the per-block calls of :class:`~kvsim.kv.store.BlockStore` (and its
run calls, :mod:`kvsim.kv.runs`) on the blocks ``(chain, p)`` for ``p`` in ``range(start, end)``
in order, and ``tests/test_kv_extents.py`` holds it equal to them on random access sequences:
the same order, readers, pins, counters, victims (with the block whose insertion caused each),
refusals and errors at the same block. The per-block store's LRU heap and stamps are a cost
device only (they find the least recent unheld block, which is what this store walks to).

Only LRU is kept this way (the domain stores of ``peer_hbm: read_in_place`` and every HBM store
by default); LFU and S3-FIFO order blocks by counters that differ block by block.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable

from kvsim.kv.extent import UNLINKED, Extent
from kvsim.kv.linked import link_after, unlink

__all__ = ["Extent", "ExtentStore"]


class _Chain:
    """One chain's resident extents, by start position (sorted; extents never overlap)."""

    __slots__ = ("starts", "extents")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.extents: list[Extent] = []


class ExtentStore:
    """A fixed-capacity LRU store of blocks ``(chain, position)`` kept as extents.

    Parameters
    ----------
    name : str
        Label for reports and debugging.
    capacity_blocks : int
        Blocks the store can hold.

    Attributes
    ----------
    hits, misses, insertions, evictions, removals, rejections : int
        As :class:`~kvsim.kv.store.BlockStore` counts them.
    """

    def __init__(self, name: str, capacity_blocks: int):
        if capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be >= 0, got {capacity_blocks}")
        self.name = name
        self.capacity_blocks = int(capacity_blocks)
        self._head = Extent(None, 0, 0)  # sentinel: head.next is the least recent extent
        self._head.prev = self._head.next = self._head
        self._chains: dict[Hashable, _Chain] = {}
        self._used = 0          # blocks stored
        self._held = 0          # blocks with a reader or a pin
        self._read = 0          # blocks with a reader
        self._pinned = 0        # blocks with a pin
        self._reader_refs = 0
        self._extents = 0
        self.hits = self.misses = self.insertions = 0
        self.evictions = self.removals = self.rejections = 0

    # -- sizes ----------------------------------------------------------------------------------

    used_blocks = property(lambda self: self._used, doc="Blocks stored.")
    free_blocks = property(lambda self: self.capacity_blocks - self._used, doc="Blocks of room left.")
    evictable_blocks = property(lambda self: self._used - self._held, doc="Blocks with no reader or pin.")
    reader_refs = property(lambda self: self._reader_refs, doc="Reader references, over all blocks.")
    read_blocks = property(lambda self: self._read, doc="Blocks with at least one reader.")
    pinned_blocks = property(lambda self: self._pinned, doc="Blocks with at least one pin.")
    extent_count = property(lambda self: self._extents, doc="Entries kept (extents), against used_blocks.")

    def __len__(self) -> int:
        return self._used

    def extents(self) -> list[Extent]:
        """The extents, least recent first (a list: for tests and reports)."""
        out, node, head = [], self._head.next, self._head
        while node is not head:
            out.append(node)
            node = node.next
        return out

    def blocks(self) -> list[tuple[Hashable, int]]:
        """Every stored block ``(chain, position)``, least recent first (O(blocks): tests only)."""
        return [(e.chain, p) for e in self.extents() for p in range(e.start, e.end)]

    # -- the recency list and the chains' maps --------------------------------------------------

    def _find(self, chain: Hashable, pos: int) -> tuple[_Chain | None, int]:
        """The chain's map and the index of the last extent starting at or before ``pos``."""
        cmap = self._chains.get(chain)
        if cmap is None:
            return None, -1
        return cmap, bisect_right(cmap.starts, pos) - 1

    def _add(self, ext: Extent) -> None:
        """Enter a new extent in its chain's map (not the recency list)."""
        cmap = self._chains.get(ext.chain)
        if cmap is None:
            cmap = self._chains[ext.chain] = _Chain()
        i = bisect_left(cmap.starts, ext.start)
        cmap.starts.insert(i, ext.start)
        cmap.extents.insert(i, ext)
        self._extents += 1

    def _drop(self, ext: Extent) -> None:
        """Take an extent out of its chain's map and the recency list."""
        cmap = self._chains[ext.chain]
        i = bisect_left(cmap.starts, ext.start)
        del cmap.starts[i], cmap.extents[i]
        if not cmap.starts:
            del self._chains[ext.chain]
        unlink(ext)
        self._extents -= 1

    def _cut(self, chain: Hashable, pos: int) -> None:
        """Make ``pos`` the start of an extent if it falls strictly inside one: the piece from
        ``pos`` follows the rest in the recency order, with the same counts."""
        cmap, i = self._find(chain, pos)
        if cmap is None or i < 0:
            return
        ext = cmap.extents[i]
        if ext.start < pos < ext.end:
            tail = Extent(chain, pos, ext.end, ext.readers, ext.pins)
            ext.end = pos
            cmap.starts.insert(i + 1, pos)
            cmap.extents.insert(i + 1, tail)
            self._extents += 1
            link_after(ext, tail)

    def _joinable(self, a: Extent, b: Extent) -> bool:
        return (a is not self._head and b is not self._head and a.chain == b.chain and a.end == b.start
                and a.readers == b.readers and a.pins == b.pins)

    def _join_next(self, ext: Extent) -> Extent:
        """Join ``ext`` with the extent after it in the order if they spell one extent; returns the
        extent that holds ``ext``'s blocks."""
        nxt = ext.next
        if self._joinable(ext, nxt):
            ext.end = nxt.end
            self._drop(nxt)
        return ext

    def _settle(self, ext: Extent) -> None:
        """Join ``ext`` with its neighbours in the order where they spell one extent."""
        prev = ext.prev
        if self._joinable(prev, ext):
            prev.end = ext.end
            self._drop(ext)
            ext = prev
        self._join_next(ext)

    def _append(self, ext: Extent) -> None:
        """Put a linked-out (or new) extent at the most recent end, joined with the extent there
        if they spell one."""
        last = self._head.prev
        if self._joinable(last, ext):
            last.end = ext.end
            if ext.prev is not UNLINKED:  # (a resident extent: out of its chain's map too)
                cmap = self._chains[ext.chain]
                i = bisect_left(cmap.starts, ext.start)
                del cmap.starts[i], cmap.extents[i]
                self._extents -= 1
            return
        if ext.prev is UNLINKED:
            self._add(ext)
        link_after(last, ext)

    def _count(self, ext: Extent, readers: int, pins: int) -> None:
        """Add ``readers`` reader references and ``pins`` pins to every block of ``ext``."""
        n = ext.end - ext.start
        was_held = ext.readers or ext.pins
        if readers:
            if not ext.readers:
                self._read += n
            ext.readers += readers
            if not ext.readers:
                self._read -= n
            self._reader_refs += readers * n
        if pins:
            if not ext.pins:
                self._pinned += n
            ext.pins += pins
            if not ext.pins:
                self._pinned -= n
        is_held = ext.readers or ext.pins
        if is_held and not was_held:
            self._held += n
        elif was_held and not is_held:
            self._held -= n

    def _pieces(self, chain: Hashable, start: int, end: int) -> tuple[Extent | None, int]:
        """The stretch at ``start`` of ``[start, end)``: ``(extent, stop)`` with the extent cut to
        begin at ``start`` and end at or before ``end`` (a stored stretch), or ``(None, stop)``
        for blocks ``start .. stop - 1`` not stored."""
        self._cut(chain, start)
        cmap, i = self._find(chain, start)
        if cmap is not None and i >= 0:
            ext = cmap.extents[i]
            if ext.start == start and ext.end > start:
                if ext.end > end:
                    self._cut(chain, end)
                return ext, ext.end
        nxt = cmap.starts[i + 1] if cmap is not None and i + 1 < len(cmap.starts) else end
        return None, min(nxt, end)

    # -- single blocks --------------------------------------------------------------------------

    def __contains__(self, block: tuple[Hashable, int]) -> bool:
        chain, pos = block
        cmap, i = self._find(chain, pos)
        return cmap is not None and i >= 0 and cmap.extents[i].end > pos

    def lookup(self, block: tuple[Hashable, int]) -> bool:
        """:meth:`BlockStore.lookup` of one block."""
        return self.read_run(block[0], block[1], block[1] + 1, read=False) == 1

    def remove(self, block: tuple[Hashable, int]) -> None:
        """:meth:`BlockStore.remove`: KeyError if not stored, ValueError if held."""
        if block not in self:
            raise KeyError(block)
        chain, pos = block
        ext, _ = self._pieces(chain, pos, pos + 1)
        if ext is None:  # (stored: checked above)
            raise KeyError(block)
        if ext.readers or ext.pins:
            self._settle(ext)
            raise ValueError(f"block {block!r} in {self.name} is pinned or read; cannot remove it")
        self._leave(ext, drop=True)
        self._used -= 1
        self.removals += 1

    # -- runs -----------------------------------------------------------------------------------

    def read_run(self, chain: Hashable, start: int, end: int, read: bool = True, pin: bool = False) -> int:
        """For each block of ``[start, end)`` in order: :meth:`BlockStore.lookup` it and, if it
        hit, take a reader reference (``read``) or a pin (``pin``). Returns the hits; with
        ``pin``, KeyError (after counting the miss) at the first block not stored, as
        :meth:`BlockStore.lookup_pin_run`."""
        hits, pos = 0, start
        readers, pins = int(read), int(pin)
        try:
            while pos < end:
                ext, stop = self._pieces(chain, pos, end)
                if ext is None:
                    self.misses += stop - pos if not pin else 1
                    if pin:
                        raise KeyError((chain, pos))
                    pos = stop
                    continue
                hits += stop - pos
                self._renew(ext, readers, pins)
                pos = stop
        finally:
            self.hits += hits
        return hits

    def touch_run(self, chain: Hashable, start: int, end: int) -> int:
        """:meth:`BlockStore.touch_run` of ``[start, end)``: each stored block moves to the most
        recent end in order (the use a lookup that found it records), the others are skipped;
        no counter changes. Returns how many blocks were touched."""
        touched, pos = 0, start
        while pos < end:
            ext, stop = self._pieces(chain, pos, end)
            if ext is not None:
                touched += stop - pos
                self._renew(ext, 0, 0)
            pos = stop
        return touched

    def _renew(self, ext: Extent, readers: int, pins: int) -> None:
        """Move ``ext`` (one piece cut by :meth:`_pieces`) to the most recent end, the extents it
        leaves side by side joined where they can be, with ``readers`` and ``pins`` added."""
        self._leave(ext)
        if readers or pins:
            self._count(ext, readers, pins)
        self._append(ext)

    def _leave(self, ext: Extent, drop: bool = False) -> Extent:
        """Take ``ext`` out of the recency list (and, with ``drop``, out of the store), joining the
        extents it leaves side by side where they spell one; returns the one that preceded it."""
        prev = ext.prev
        if drop:
            self._drop(ext)
        else:
            unlink(ext)
        if prev is not self._head:
            self._join_next(prev)
        return prev

    def lookup_pin_run(self, chain: Hashable, start: int, end: int) -> None:
        """:meth:`BlockStore.lookup_pin_run` of ``[start, end)``."""
        self.read_run(chain, start, end, read=False, pin=True)

    def _hold_each(self, chain: Hashable, start: int, end: int, readers: int, pins: int) -> None:
        """Add counts to each stored block of ``[start, end)`` in place; KeyError at the first
        not stored (the blocks before it keep theirs), as the per-block calls."""
        pos = start
        while pos < end:
            ext, stop = self._pieces(chain, pos, end)
            if ext is None:
                raise KeyError((chain, pos))
            self._count(ext, readers, pins)
            self._settle(ext)
            pos = stop

    def add_reader_each(self, chain: Hashable, start: int, end: int) -> None:
        """:meth:`BlockStore.add_reader` for each block of ``[start, end)``."""
        self._hold_each(chain, start, end, 1, 0)

    def pin_each(self, chain: Hashable, start: int, end: int) -> None:
        """:meth:`BlockStore.pin` for each block of ``[start, end)``."""
        self._hold_each(chain, start, end, 0, 1)

    def _release(self, chain: Hashable, start: int, end: int, readers: bool, missing: str) -> None:
        pos = start
        while pos < end:
            ext, stop = self._pieces(chain, pos, end)
            if ext is None or not (ext.readers if readers else ext.pins):
                if ext is not None:
                    self._settle(ext)
                raise ValueError(f"block {(chain, pos)!r} in {self.name} {missing}")
            self._count(ext, -1 if readers else 0, 0 if readers else -1)
            self._settle(ext)
            pos = stop

    def drop_reader_each(self, chain: Hashable, start: int, end: int) -> None:
        """:meth:`BlockStore.drop_reader` for each block of ``[start, end)`` (ValueError at the
        first without a reader; the blocks before it are released)."""
        self._release(chain, start, end, True, "has no readers")

    def unpin_each(self, chain: Hashable, start: int, end: int) -> None:
        """:meth:`BlockStore.unpin` for each block of ``[start, end)``."""
        self._release(chain, start, end, False, "is not pinned")

    def missing(self, chain: Hashable, start: int, end: int) -> list[tuple[int, int]]:
        """The blocks of ``[start, end)`` not stored, as ``(start, stop)`` stretches in order."""
        out, pos = [], start
        cmap, i = self._find(chain, pos)
        if cmap is None:
            return [(start, end)] if start < end else []
        starts, exts = cmap.starts, cmap.extents
        if i < 0:
            i = 0
        elif exts[i].end <= pos:
            i += 1
        while pos < end:
            if i < len(starts) and starts[i] <= pos:
                pos = exts[i].end
                i += 1
                continue
            stop = min(starts[i], end) if i < len(starts) else end
            out.append((pos, stop))
            pos = stop
        return out

    def holds(self, chain: Hashable, start: int, end: int) -> list[tuple[int, int, int, int]]:
        """The stored blocks of ``[start, end)`` as ``(s, e, readers, pins)`` stretches, in order
        (a query: nothing is cut or moved)."""
        out: list[tuple[int, int, int, int]] = []
        cmap, i = self._find(chain, start)
        if cmap is None:
            return out
        starts, exts = cmap.starts, cmap.extents
        i = max(i, 0)
        while i < len(starts) and starts[i] < end:
            ext = exts[i]
            if ext.end > start:
                out.append((max(ext.start, start), min(ext.end, end), ext.readers, ext.pins))
            i += 1
        return out

    def evict_run(self, n: int) -> list[tuple[Hashable, int, int]]:
        """:meth:`BlockStore.evict_run`: up to ``n`` victims, each the least recent unheld block;
        returned as ``(chain, start, stop)`` stretches in the order they were evicted."""
        victims: list[tuple[Hashable, int, int]] = []
        node, head = self._head.next, self._head
        while n > 0 and node is not head:
            if node.readers or node.pins:
                node = node.next
                continue
            take = min(n, node.end - node.start)
            victims.append((node.chain, node.start, node.start + take))
            self._used -= take
            self.evictions += take
            n -= take
            if take == node.end - node.start:
                node = self._leave(node, drop=True).next
            else:
                cmap = self._chains[node.chain]
                i = bisect_left(cmap.starts, node.start)
                node.start += take
                cmap.starts[i] = node.start
        return victims

    def evict_one(self) -> tuple[Hashable, int] | None:
        """:meth:`BlockStore.evict_one`: the victim ``(chain, position)``, or None."""
        victims = self.evict_run(1)
        return (victims[0][0], victims[0][1]) if victims else None

    def insert_run(self, chain: Hashable, start: int, end: int, read: bool = False, touch: bool = True
                   ) -> tuple[int, list[tuple[int, int]], list[tuple[int, Hashable, int, int]]]:
        """:meth:`BlockStore.insert_run` of ``[start, end)`` (see there).

        Returns
        -------
        tuple
            ``(done, new, evicted)``: blocks handled (fewer than the run if the store refused
            ``start + done``); the positions newly stored as ``(start, stop)`` stretches, in
            order; the evictions as ``(cause, chain, vstart, vstop)`` in order, where victim
            ``vstart + k`` was evicted to store position ``cause + k`` of the same stretch of
            new blocks. A stretch's victims were all evicted just before it was stored (after
            the stretches before it), so replaying each stretch's victims and then the stretch
            keeps every block's own order.
        """
        new: list[tuple[int, int]] = []
        evicted: list[tuple[int, Hashable, int, int]] = []
        readers = int(read)
        pos = start
        while pos < end:
            ext, stop = self._pieces(chain, pos, end)
            if ext is not None:
                if touch:
                    self._renew(ext, readers, 0)
                else:
                    if readers:
                        self._count(ext, readers, 0)
                    self._settle(ext)  # (joins the pieces cut for it again)
                pos = stop
                continue
            # blocks pos .. stop - 1 are new: room first, then one victim per block
            k = stop - pos
            room = min(k, self.capacity_blocks - self._used)
            need = k - room
            unheld = self._used - self._held  # every one older than the new blocks
            if need > unheld:
                # the victims would run out of blocks older than this stretch: store what room
                # and the older unheld blocks cover, then look again (the blocks just stored are
                # older than the rest). With neither, the store is full of held blocks: refused.
                stop = pos + room + unheld
                if stop == pos:
                    self.rejections += 1
                    self.insertions += sum(b - a for a, b in new)
                    return pos - start, new, evicted
                need = unheld
            if need:
                cause = pos + room
                for vchain, vstart, vstop in self.evict_run(need):
                    evicted.append((cause, vchain, vstart, vstop))
                    cause += vstop - vstart
            self._new_blocks(chain, pos, stop, readers, new)
            pos = stop
        self.insertions += sum(b - a for a, b in new)
        return end - start, new, evicted

    def _new_blocks(self, chain: Hashable, start: int, stop: int, readers: int, new: list[tuple[int, int]]) -> None:
        """Store blocks ``start .. stop - 1`` (not stored) as the most recent, each with
        ``readers`` reader references."""
        if stop <= start:
            return
        ext = Extent(chain, start, stop)
        self._used += stop - start
        if readers:
            self._count(ext, readers, 0)
        self._append(ext)
        # (one stretch per call, never joined with the one before: the victims taken between
        # two calls came after the first stretch, which the index's replay keeps)
        new.append((start, stop))
