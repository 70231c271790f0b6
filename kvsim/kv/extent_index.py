"""The cluster index over extents: per chain, which stores hold each stretch of blocks (issue 23,
item 1, phase 4; docs/extents.md, "Phase 4: extents").

:class:`~kvsim.kv.index.KVIndex` maps every block to the interned tuple of the stores holding
it, in the order they acquired it. :class:`ExtentIndex` keeps the same tuples per *stretch*:
for each chain an :class:`IntervalMap` of ``[start, end) -> tuple``, neighbours with the same
tuple joined, so a document held by the same stores is one entry however long it is. Stores are
:class:`~kvsim.kv.extents.ExtentStore`\\ s, changed only through :meth:`ExtentIndex.insert_run`
and :meth:`ExtentIndex.remove` (as the per-block index requires of its stores), and their
victims are forgotten with :meth:`ExtentIndex.discard_run`.

Each call is defined as :class:`~kvsim.kv.index.KVIndex`'s on the blocks ``(chain, p)`` in
order, and ``tests/test_kv_extent_index.py`` holds the locations (in order), the prefix queries'
answers and the watchers' news equal to it. Watchers hear one call per stretch,
``watcher(chain, start, end, store, added)``: the blocks of a stretch in order. Inside one
:meth:`insert_run` the victims of a stretch of new blocks are told before the stretch itself
(block by block, each victim came just before the block it made room for); every block's own
news come in the same order, and all of one call's at the same simulated time, so a watcher that
keeps per-block state (:class:`~kvsim.serving.index_view.IndexView`) holds the same after every
call.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Sequence

from kvsim.kv.extents import ExtentStore

__all__ = ["ExtentIndex", "IntervalMap"]


class IntervalMap:
    """Disjoint stretches ``[start, end)`` of one chain, each with a value; no two touching
    stretches have the same value (they are joined). Values are compared by identity."""

    __slots__ = ("starts", "ends", "values")

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.values: list = []

    def __len__(self) -> int:
        return len(self.starts)

    def get(self, pos: int):
        """The value at ``pos``, or None."""
        i = bisect_right(self.starts, pos) - 1
        return self.values[i] if i >= 0 and self.ends[i] > pos else None

    def pieces(self, start: int, end: int) -> list[tuple[int, int, object]]:
        """``[start, end)`` cut where the value changes: ``(s, e, value or None)`` in order."""
        out = []
        starts, ends, values = self.starts, self.ends, self.values
        i = max(bisect_right(starts, start) - 1, 0)
        pos = start
        while pos < end:
            if i < len(starts) and ends[i] <= pos:
                i += 1
                continue
            if i < len(starts) and starts[i] <= pos:
                stop = min(ends[i], end)
                out.append((pos, stop, values[i]))
            else:
                stop = min(starts[i], end) if i < len(starts) else end
                out.append((pos, stop, None))
            pos = stop
        return out

    def assign(self, start: int, end: int, change: Callable) -> list[tuple[int, int, object, object]]:
        """Give each piece of ``[start, end)`` the value ``change(old)`` (``old`` None where
        nothing is; a None result clears it). Returns ``(s, e, old, new)`` for each piece that
        changed, in order."""
        if start >= end:
            return []
        starts, ends, values = self.starts, self.ends, self.values
        i = bisect_right(starts, start) - 1
        if i >= 0 and end <= ends[i]:
            return self._assign_inside(i, start, end, change)
        # the stretches overlapping or touching [start, end) are rebuilt (touching ones may join)
        lo, hi = bisect_left(ends, start), bisect_right(starts, end)
        old = list(zip(starts[lo:hi], ends[lo:hi], values[lo:hi]))
        inside = self.pieces(start, end)
        built: list[list] = []
        changed = []

        def put(s, e, v):
            if v is None or s >= e:
                return
            if built and built[-1][1] == s and built[-1][2] is v:
                built[-1][1] = e
            else:
                built.append([s, e, v])

        for s, e, v in old:  # the parts before ``start``
            if s < start:
                put(s, min(e, start), v)
        for s, e, v in inside:
            new = change(v)
            if new is not v:
                changed.append((s, e, v, new))
            put(s, e, new)
        for s, e, v in old:  # the parts after ``end``
            if e > end:
                put(max(s, end), e, v)
        starts[lo:hi] = [b[0] for b in built]
        ends[lo:hi] = [b[1] for b in built]
        values[lo:hi] = [b[2] for b in built]
        return changed

    def _assign_inside(self, i: int, start: int, end: int, change: Callable) -> list[tuple[int, int, object, object]]:
        """:meth:`assign` where ``[start, end)`` lies inside stretch ``i`` (the common case: a
        run filed, read or evicted where one tuple of stores holds it), without the general
        rebuild: the stretch is cut in up to three and the middle joined with a touching
        neighbour of the same new value."""
        starts, ends, values = self.starts, self.ends, self.values
        old = values[i]
        new = change(old)
        if new is old:
            return []
        s0, e0 = starts[i], ends[i]
        lo, hi = i, i + 1
        built: list[list] = []
        if s0 < start:
            built.append([s0, start, old])
        elif new is not None and i > 0 and ends[i - 1] == start and values[i - 1] is new:
            lo = i - 1
            built.append([starts[i - 1], end, new])
        if new is not None and not (built and built[-1][2] is new):
            built.append([start, end, new])
        if end < e0:
            built.append([end, e0, old])
        elif new is not None and hi < len(starts) and starts[hi] == end and values[hi] is new:
            built[-1][1] = ends[hi]
            hi += 1
        starts[lo:hi] = [b[0] for b in built]
        ends[lo:hi] = [b[1] for b in built]
        values[lo:hi] = [b[2] for b in built]
        return [(start, end, old, new)]


class ExtentIndex:
    """Per chain, the stores holding each stretch of blocks, in the order they acquired it."""

    def __init__(self) -> None:
        self._maps: dict[Hashable, IntervalMap] = {}
        self._sets: dict[tuple, tuple] = {}
        self._watchers: list[Callable] = []

    def watch(self, watcher: Callable) -> None:
        """Call ``watcher(chain, start, end, store, added)`` on every change from now on."""
        self._watchers.append(watcher)

    def _interned(self, stores: tuple) -> tuple:
        return self._sets.setdefault(stores, stores)

    def blocks(self) -> int:
        """Distinct blocks held somewhere (O(entries))."""
        return sum(e - s for m in self._maps.values() for s, e in zip(m.starts, m.ends))

    def locations(self, chain, pos: int) -> tuple:
        """Stores holding block ``(chain, pos)``, in the order they acquired it; ``()`` if none."""
        m = self._maps.get(chain)
        return (m.get(pos) or ()) if m is not None else ()

    def pieces(self, chain, start: int, end: int) -> list[tuple[int, int, tuple]]:
        """``[start, end)`` cut where the location tuple changes: ``(s, e, stores)``."""
        m = self._maps.get(chain)
        if m is None:
            return [(start, end, ())] if start < end else []
        return [(s, e, v or ()) for s, e, v in m.pieces(start, end)]

    def _change(self, chain, start: int, end: int, store, added: bool) -> None:
        m = self._maps.get(chain)
        if m is None:
            if not added or start >= end:
                return
            # a chain new to the index (a prompt's own blocks filed): one stretch in one store
            m = self._maps[chain] = IntervalMap()
            m.starts.append(start)
            m.ends.append(end)
            m.values.append(self._interned((store,)))
            for watcher in self._watchers:
                watcher(chain, start, end, store, True)
            return
        interned = self._interned
        cache: dict[int, tuple | None] = {}  # (one new tuple per old tuple met: tuples are interned)

        def change(where):
            key = id(where)
            if key not in cache:
                if added:
                    cache[key] = interned((store,)) if where is None else (
                        where if store in where else interned(where + (store,)))
                elif where is None or store not in where:
                    cache[key] = where
                else:
                    cache[key] = interned(tuple(s for s in where if s is not store)) if len(where) > 1 else None
            return cache[key]

        changed = m.assign(start, end, change)
        if not m:
            del self._maps[chain]
        for s, e, _, _ in changed:
            for watcher in self._watchers:
                watcher(chain, s, e, store, added)

    def add_run(self, chain, start: int, end: int, store) -> None:
        """:meth:`KVIndex.add` for each block of ``[start, end)``."""
        self._change(chain, start, end, store, True)

    def discard_run(self, chain, start: int, end: int, store) -> None:
        """:meth:`KVIndex.discard` for each block of ``[start, end)``."""
        self._change(chain, start, end, store, False)

    def insert_run(self, store: ExtentStore, chain, start: int, end: int, read: bool = False,
                   touch: bool = True):
        """:meth:`ExtentStore.insert_run` mirrored here: each stretch's victims forgotten, then the
        stretch recorded (see the module docstring for the watchers' order)."""
        result = store.insert_run(chain, start, end, read, touch)
        _, new, evicted = result
        j = 0
        for a, b in new:
            while j < len(evicted) and evicted[j][0] < b:
                _, vchain, vs, ve = evicted[j]
                self.discard_run(vchain, vs, ve, store)
                j += 1
            self.add_run(chain, a, b, store)
        return result

    def remove(self, store: ExtentStore, block: tuple) -> None:
        """Remove ``block`` from ``store`` (errors as :meth:`ExtentStore.remove`) and the index."""
        store.remove(block)
        self.discard_run(block[0], block[1], block[1] + 1, store)

    # -- prefix queries over segments -----------------------------------------------------------

    def longest_prefix(self, segments: Sequence[tuple], usable: Callable | None = None) -> int:
        """:meth:`KVIndex.longest_prefix` of the blocks of ``segments`` (``(chain, start, end)``
        each, in order): the leading blocks held by a usable store."""
        done = 0
        ok: dict[int, bool] = {}
        for chain, start, end in segments:
            for s, e, where in self.pieces(chain, start, end):
                good = ok.get(id(where))
                if good is None:
                    good = ok[id(where)] = bool(where) and (usable is None or any(usable(x) for x in where))
                if not good:
                    return done
                done += e - s
        return done

    def tier_breakdown(self, segments: Sequence[tuple], n: int, rank: Callable,
                       usable: Callable | None = None) -> list[tuple]:
        """:meth:`KVIndex.tier_breakdown` of the first ``n`` blocks of ``segments``, as
        ``(store, count)`` stretches (the best store of ``count`` blocks in a row); KeyError
        ``(chain, pos)`` at a block no usable store holds."""
        out: list[list] = []
        best_at: dict[int, object] = {}
        left = n
        for chain, start, end in segments:
            if left <= 0:
                break
            for s, e, where in self.pieces(chain, start, min(end, start + left)):
                best = best_at.get(id(where))
                if best is None:
                    candidates = [x for x in where if usable is None or usable(x)]
                    if not candidates:
                        raise KeyError((chain, s))
                    best = best_at[id(where)] = candidates[0] if len(candidates) == 1 else min(candidates, key=rank)
                if out and out[-1][0] is best:
                    out[-1][1] += e - s
                else:
                    out.append([best, e - s])
                left -= e - s
        if left > 0:
            raise ValueError(f"n={n} exceeds the blocks given")
        return [tuple(x) for x in out]
