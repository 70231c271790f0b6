"""A domain's homes kept as extents (issue 23, item 1, phase 4; docs/extents.md, "Homes and the
domain pool").

:class:`~kvsim.serving.cache.domain_pool.DomainPool` keeps, per block of its shared store, the
member whose HBM holds it (``home``) and, per member, its blocks least recent first
(``resident``: homed blocks go to the end, a hit moves a block to the end of its home's order).
:class:`ExtentHomes` keeps both as *home extents*: a stretch of consecutive positions of one chain,
homed in one member, consecutive in that member's order. Unlike the store's extents, a home extent
may run *backwards* (recency falling with position): :meth:`DomainPool.reclaim` moves a batch of
blocks most recent first, one ``homed(block, target)`` each, so a stretch arrives in the target's
order reversed. An extent is therefore ``(chain, first, count, step)``: its blocks least recent
first are ``first, first + step, ..., first + (count - 1) * step`` with ``step`` +1 or -1.

Each call is defined as the per-block bookkeeping of :class:`DomainPool` on the blocks in order,
and ``tests/test_extent_homes.py`` holds every member's order and every block's home equal to it.
Homes are keyed by any hashable member (the pool's instance caches).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable

from kvsim.kv.linked import link_after, unlink

__all__ = ["ExtentHomes", "HomeExtent"]


class HomeExtent:
    """``count`` blocks of ``chain`` homed in ``home``, least recent first ``first``,
    ``first + step``, ...; ``prev`` / ``next`` link the home's order."""

    __slots__ = ("chain", "first", "count", "step", "home", "prev", "next")

    def __init__(self, chain, first: int, count: int, step: int, home):
        self.chain, self.first, self.count, self.step, self.home = chain, first, count, step, home
        self.prev = self.next = None

    @property
    def low(self) -> int:
        return self.first if self.step > 0 else self.first - self.count + 1

    @property
    def last(self) -> int:
        return self.first + (self.count - 1) * self.step

    def positions(self) -> range:
        return range(self.first, self.last + self.step, self.step)

    def __repr__(self) -> str:
        return f"HomeExtent({self.chain!r}, {list(self.positions())}, home={self.home!r})"


class ExtentHomes:
    """Every block's home and each home's order, as home extents (see the module docstring)."""

    def __init__(self):
        self._heads: dict[Hashable, HomeExtent] = {}   # home -> sentinel of its order
        self._chains: dict[Hashable, tuple[list[int], list[HomeExtent]]] = {}  # by lowest position

    # -- the map by position and the orders -----------------------------------------------------

    def _head(self, home) -> HomeExtent:
        head = self._heads.get(home)
        if head is None:
            head = self._heads[home] = HomeExtent(None, 0, 0, 1, home)
            head.prev = head.next = head
        return head

    def _find(self, chain, pos: int) -> HomeExtent | None:
        entry = self._chains.get(chain)
        if entry is None:
            return None
        lows, exts = entry
        i = bisect_right(lows, pos) - 1
        if i >= 0 and exts[i].low + exts[i].count > pos:
            return exts[i]
        return None

    def _enter(self, ext: HomeExtent) -> None:
        lows, exts = self._chains.setdefault(ext.chain, ([], []))
        i = bisect_left(lows, ext.low)
        lows.insert(i, ext.low)
        exts.insert(i, ext)

    def _leave(self, ext: HomeExtent) -> None:
        lows, exts = self._chains[ext.chain]
        i = bisect_left(lows, ext.low)
        del lows[i], exts[i]
        if not lows:
            del self._chains[ext.chain]

    def _split(self, ext: HomeExtent, k: int) -> HomeExtent:
        """Cut ``ext`` after its ``k`` least recent blocks (0 < k < count); returns the more
        recent piece, linked right after it."""
        rest = HomeExtent(ext.chain, ext.first + k * ext.step, ext.count - k, ext.step, ext.home)
        self._leave(ext)
        ext.count = k
        self._enter(ext)
        self._enter(rest)
        link_after(ext, rest)
        return rest

    def _carve(self, ext: HomeExtent, low: int, high: int) -> HomeExtent:
        """The blocks ``low .. high - 1`` of ``ext`` cut out as one extent, in place in the order."""
        if ext.step > 0:
            k0, k1 = low - ext.first, high - ext.first
        else:
            k0, k1 = ext.first - (high - 1), ext.first - low + 1
        if k0:
            ext = self._split(ext, k0)
            k1 -= k0
        if k1 < ext.count:
            self._split(ext, k1)
        return ext

    def _isolate(self, chain, pos: int) -> HomeExtent | None:
        """The home extent of block ``pos`` cut down to that block alone (None if not homed)."""
        ext = self._find(chain, pos)
        return None if ext is None else self._carve(ext, pos, pos + 1)

    def _join(self, a: HomeExtent, b: HomeExtent) -> bool:
        """Join ``b`` (right after ``a`` in one home's order) into ``a`` if they spell one extent."""
        if a.chain is None or b.chain is None or a.chain != b.chain:
            return False
        if a.count > 1 and b.count > 1 and a.step != b.step:
            return False
        step = a.step if a.count > 1 else (b.step if b.count > 1 else b.first - a.last)
        if step not in (1, -1) or b.first != a.last + step or (a.count > 1 and a.step != step) or \
                (b.count > 1 and b.step != step):
            return False
        self._leave(a)
        self._leave(b)
        unlink(b)
        if step < 0:
            a.first, a.count, a.step = a.first, a.count + b.count, -1
        else:
            a.count, a.step = a.count + b.count, 1
        self._enter(a)
        return True

    def _append(self, home, chain, pos: int) -> None:
        """Block ``pos`` (homed nowhere) goes to the end of ``home``'s order."""
        head = self._head(home)
        ext = HomeExtent(chain, pos, 1, 1, home)
        self._enter(ext)
        link_after(head.prev, ext)
        if ext.prev is not head:
            self._join(ext.prev, ext)

    def _remove(self, ext: HomeExtent) -> None:
        """Take a home extent out of its order and the map (its neighbours joined if they can)."""
        prev, nxt = ext.prev, ext.next
        self._leave(ext)
        unlink(ext)
        if prev.chain is not None and nxt.chain is not None:
            self._join(prev, nxt)

    # -- DomainPool's bookkeeping, per stretch --------------------------------------------------

    def home(self, chain, pos: int):
        """The member holding block ``(chain, pos)`` (KeyError if none), as ``DomainPool.home``."""
        ext = self._find(chain, pos)
        if ext is None:
            raise KeyError((chain, pos))
        return ext.home

    def homes(self, chain, start: int, end: int) -> list[tuple[int, int, object]]:
        """``[start, end)`` (every block homed) cut where the home changes: ``(s, e, home)``."""
        out: list[list] = []
        pos = start
        while pos < end:
            ext = self._find(chain, pos)
            if ext is None:
                raise KeyError((chain, pos))
            stop = min(ext.low + ext.count, end)
            if out and out[-1][2] is ext.home and out[-1][1] == pos:
                out[-1][1] = stop
            else:
                out.append([pos, stop, ext.home])
            pos = stop
        return [tuple(x) for x in out]

    def homed_run(self, chain, start: int, end: int, home) -> None:
        """``DomainPool.homed`` for each block of ``[start, end)`` (none homed yet), in order."""
        if start >= end:
            return
        entry = self._chains.get(chain)
        if entry is not None:  # (the extent starting last before ``end`` is the one that could overlap)
            i = bisect_left(entry[0], end) - 1
            if i >= 0 and entry[1][i].low + entry[1][i].count > start:
                raise ValueError(f"a block of {chain!r} [{start}, {end}) is homed already")
        head = self._head(home)
        ext = HomeExtent(chain, start, end - start, 1, home)
        self._enter(ext)
        link_after(head.prev, ext)
        if ext.prev is not head:
            self._join(ext.prev, ext)

    def touched_run(self, chain, start: int, end: int) -> None:
        """``DomainPool.touched`` for each homed block of ``[start, end)`` in order (each to the end
        of its home's order); blocks homed nowhere are skipped."""
        pos = start
        while pos < end:
            ext = self._find(chain, pos)
            if ext is None:
                pos += 1
                continue
            # the extent's blocks inside [pos, end) go to the end of its home, one after the other
            # in ascending order: one extent running forwards there
            stop = min(ext.low + ext.count, end)
            piece = self._carve(ext, pos, stop)
            self._remove(piece)
            piece.first, piece.step = pos, 1
            head = self._head(piece.home)
            self._enter(piece)
            link_after(head.prev, piece)
            if piece.prev is not head:
                self._join(piece.prev, piece)
            pos = stop

    def forget(self, chain, pos: int):
        """``DomainPool._forget``'s bookkeeping: the block's home, which loses it."""
        one = self._isolate(chain, pos)
        if one is None:
            raise KeyError((chain, pos))
        self._remove(one)
        return one.home

    def move(self, chain, pos: int, target) -> None:
        """A block of one member re-homed in ``target`` (``del resident[block]`` then ``homed``)."""
        one = self._isolate(chain, pos)
        if one is None:
            raise KeyError((chain, pos))
        self._remove(one)
        self._append(target, chain, pos)

    def _pieces_out(self, chain, low: int, high: int) -> list[tuple[int, int, object]]:
        """Take the blocks ``low .. high - 1`` (every one homed; KeyError at the first that is not,
        the blocks before it taken) out of their homes' orders: ``(s, e, home)`` per piece."""
        out = []
        pos = low
        while pos < high:
            ext = self._find(chain, pos)
            if ext is None:
                raise KeyError((chain, pos))
            stop = min(ext.low + ext.count, high)
            piece = self._carve(ext, pos, stop)
            self._remove(piece)
            out.append((pos, stop, piece.home))
            pos = stop
        return out

    def forget_run(self, chain, start: int, end: int) -> list[tuple[int, int, object]]:
        """:meth:`forget` each block of ``[start, end)``: ``(s, e, home)`` for each stretch of one
        home that lost its blocks, in position order."""
        return self._pieces_out(chain, start, end)

    def move_run(self, chain, first: int, count: int, step: int, target) -> None:
        """Re-home the blocks ``first, first + step, ...`` (``count`` of them, every one homed) in
        ``target``, appended to its order in that order: ``DomainPool``'s ``del resident[block]``
        then ``homed(block, target)`` for each in turn."""
        if count <= 0:
            return
        low = first if step > 0 else first - count + 1
        self._pieces_out(chain, low, low + count)
        head = self._head(target)
        ext = HomeExtent(chain, first, count, step if count > 1 else 1, target)
        self._enter(ext)
        link_after(head.prev, ext)
        if ext.prev is not head:
            self._join(ext.prev, ext)

    def homed_in(self, chain, start: int, end: int, home) -> list[tuple[int, int]]:
        """The blocks of ``[start, end)`` homed in ``home``, as ``(s, e)`` stretches in order (a
        query: nothing is cut or moved)."""
        out: list[list[int]] = []
        entry = self._chains.get(chain)
        if entry is None:
            return []
        lows, exts = entry
        i = max(bisect_right(lows, start) - 1, 0)
        while i < len(lows) and lows[i] < end:
            ext = exts[i]
            s, e = max(ext.low, start), min(ext.low + ext.count, end)
            if s < e and ext.home is home:
                if out and out[-1][1] == s:
                    out[-1][1] = e
                else:
                    out.append([s, e])
            i += 1
        return [(s, e) for s, e in out]

    def unheld(self, home, count: int, store) -> list[tuple]:
        """``DomainPool._unheld``: up to ``count`` blocks homed in ``home`` that nothing holds in
        ``store`` (an :class:`~kvsim.kv.extents.ExtentStore`), least recent first (all of them if
        ``count`` < 1), as ``(chain, first, count, step)`` stretches of its order."""
        out: list[tuple] = []
        head = self._heads.get(home)
        if head is None:
            return out
        left = count if count >= 1 else -1
        ext = head.next
        while ext is not head and left:
            # the store's stretches over this extent's positions, in the extent's own order
            pieces = [(s, e) for s, e, readers, pins in store.holds(ext.chain, ext.low, ext.low + ext.count)
                      if not (readers or pins)]
            if ext.step < 0:
                pieces = [(e - 1, e - s) for s, e in reversed(pieces)]
            else:
                pieces = [(s, e - s) for s, e in pieces]
            for first, n in pieces:
                if left > 0:
                    n = min(n, left)
                    left -= n
                out.append((ext.chain, first, n, ext.step if n > 1 else 1))
                if not left:
                    break
            ext = ext.next
        return out

    def order(self, home) -> list[tuple]:
        """``home``'s blocks ``(chain, position)``, least recent first (O(blocks))."""
        out = []
        head = self._heads.get(home)
        if head is None:
            return out
        ext = head.next
        while ext is not head:
            out.extend((ext.chain, p) for p in ext.positions())
            ext = ext.next
        return out

    def extents(self, home) -> list[HomeExtent]:
        out, head = [], self._heads.get(home)
        if head is None:
            return out
        ext = head.next
        while ext is not head:
            out.append(ext)
            ext = ext.next
        return out
