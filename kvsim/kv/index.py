"""Cluster-wide index: which stores hold each KV block.

A request's prompt is a chain of blocks whose ids hash the block *and* everything before it, so a
prefix cache can use block k only if it also has blocks 0..k-1: :meth:`KVIndex.longest_prefix`
stops at the first block no usable store holds. :meth:`KVIndex.tier_breakdown` then says where
each of those blocks is cheapest to load from, by a caller-supplied rank (HBM < DRAM < NVMe <
remote, or a cost that depends on who is reading).

The index must agree with the stores. Stores evict on insert, so stores that an index tracks are
changed only through :meth:`KVIndex.insert` and :meth:`KVIndex.remove`, which apply the change to
the store and mirror it, evictions included. Pins, readers and lookups do not change membership
and go to the store directly.

Determinism: a block's locations are kept in the order the stores acquired it (a tuple, not a
set), and ties in rank go to the earliest.

Runs: every block held by the same stores in the same order shares one interned location tuple,
so the run calls (:meth:`KVIndex.insert_run`, :meth:`KVIndex.discard_run`) and the prefix queries
work out what follows from a tuple -- the tuple with a store added or removed, whether a usable
store holds the block, its best store -- once for a stretch of blocks at one tuple.

Watchers (:meth:`KVIndex.watch`) hear of every change of membership, one call per block and
store, as it happens: a router that sees the index with a delay keeps its own copy from them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import cython

from kvsim.kv.store import BlockStore

__all__ = ["KVIndex"]

Block = Hashable


class KVIndex:
    """Map block id -> the stores holding it, in the order they acquired it."""

    def __init__(self) -> None:
        # block -> the tuple of stores holding it, in the order they acquired it. The tuples are
        # shared: every block held by the same stores in the same order maps to one interned
        # tuple (``_sets``), so filing a block is one dict entry and no new object -- a prompt's
        # run of blocks filed in one store shares one ``(store,)`` (stores hash by identity).
        self._where: dict[Block, tuple[BlockStore, ...]] = {}
        self._sets: dict[tuple[BlockStore, ...], tuple[BlockStore, ...]] = {}
        # a tuple with a store added or removed, by (tuple, store): a function of the two (the
        # interned tuples are never dropped, so the answer is always the same object), worked
        # out once for each -- a cluster's blocks sit at a few thousand distinct tuples
        self._plus_of: dict[tuple, tuple[BlockStore, ...] | None] = {}
        self._less_of: dict[tuple, tuple[BlockStore, ...]] = {}
        self._watchers: list[Callable[[Block, BlockStore, bool], None]] = []

    def __len__(self) -> int:
        """Distinct blocks held somewhere."""
        return len(self._where)

    def __contains__(self, block: object) -> bool:
        return block in self._where

    # -- raw bookkeeping ------------------------------------------------------------------------

    def watch(self, watcher: Callable[[Block, BlockStore, bool], None]) -> None:
        """Call ``watcher(block, store, added)`` on every change of membership from now on."""
        self._watchers.append(watcher)

    def _interned(self, stores: tuple[BlockStore, ...]) -> tuple[BlockStore, ...]:
        return self._sets.setdefault(stores, stores)

    def _plus(self, where: tuple[BlockStore, ...] | None, store: BlockStore) -> tuple[BlockStore, ...] | None:
        """The location tuple of a block at ``where`` once ``store`` holds it too; None if it did."""
        key = (where, store)
        try:
            return self._plus_of[key]
        except KeyError:
            pass
        if where is None:
            more = self._interned((store,))
        else:
            more = None if store in where else self._interned(where + (store,))
        self._plus_of[key] = more
        return more

    def add(self, block: Block, store: BlockStore) -> None:
        """Record that ``store`` holds ``block`` (idempotent)."""
        where = self._plus(self._where.get(block), store)
        if where is None:
            return
        self._where[block] = where
        for watcher in self._watchers:
            watcher(block, store, True)

    def _less(self, where: tuple[BlockStore, ...], store: BlockStore) -> tuple[BlockStore, ...] | None:
        """The location tuple ``where`` (which holds ``store``) without ``store``; None if it held
        only ``store`` (the block is then held nowhere)."""
        if len(where) <= 1:
            return None
        key = (where, store)
        less = self._less_of.get(key)
        if less is None:
            less = self._less_of[key] = self._interned(tuple([s for s in where if s is not store]))
        return less

    @cython.locals(where_of=dict)
    def _drop(self, block: Block, store: BlockStore) -> bool:
        """Forget that ``store`` holds ``block``; False if it was not recorded."""
        where_of = self._where
        where = where_of.get(block)
        if where is None or store not in where:
            return False
        if len(where) == 1:
            del where_of[block]
        else:
            where_of[block] = self._less(where, store)
        return True

    def discard(self, block: Block, store: BlockStore) -> None:
        """Record that ``store`` no longer holds ``block`` (no error if it was not recorded)."""
        if not self._drop(block, store):
            return
        for watcher in self._watchers:
            watcher(block, store, False)

    @cython.locals(where_of=dict, watchers=list)
    def discard_run(self, blocks: Sequence[Block], store: BlockStore) -> None:
        """:meth:`discard` each of ``blocks`` in order (a store's victims), with the same watcher
        calls in the same order. Blocks at one location tuple (most of a run's) share its
        smaller tuple, worked out once for them."""
        where_of, watchers = self._where, self._watchers
        get = where_of.get
        last = last_less = None  # the previous block's location tuple, and it less ``store``
        for block in blocks:
            where = get(block)
            if where is None:
                continue
            if where is not last:
                if store not in where:
                    continue
                last = where
                last_less = self._less(where, store)
            if last_less is None:
                del where_of[block]
            else:
                where_of[block] = last_less
            for watcher in watchers:
                watcher(block, store, False)

    def locations(self, block: Block) -> tuple[BlockStore, ...]:
        """Stores holding ``block``, in the order they acquired it; ``()`` if none."""
        return self._where.get(block, ())

    # -- store changes mirrored in the index ----------------------------------------------------

    def insert(self, store: BlockStore, block: Block) -> list[Block] | None:
        """Insert ``block`` into ``store`` and record it and any evictions.

        Returns
        -------
        list or None
            What :meth:`BlockStore.insert` returns: the evicted blocks, or ``None`` if the store
            refused (full of pinned or read blocks; the index is then unchanged).
        """
        evicted = store.insert(block)
        if evicted is None:
            return None
        for gone in evicted:
            self.discard(gone, store)
        self.add(block, store)
        return evicted

    @cython.locals(where_of=dict, new_at=list, evicted=list, j=cython.Py_ssize_t, n_evicted=cython.Py_ssize_t, pos=cython.Py_ssize_t)
    def insert_run(self, store: BlockStore, blocks: Sequence[Block], read: bool = False,
                   touch: bool = True):
        """:meth:`BlockStore.insert_run` (see there) mirrored in the index: the same changes, and
        the same watcher calls in the same order, as :meth:`insert` block by block (each block's
        eviction, then the block).

        Returns
        -------
        kvsim.kv.runs.RunInsert
            What the store returned; ``done < len(blocks)`` if it refused ``blocks[done]``.
        """
        result = store.insert_run(blocks, read, touch)
        done, new_at, evicted = result
        if not new_at and not evicted:
            return result
        if self._watchers:
            # replay in order: an eviction at position p comes before the insertion at p
            j, n_evicted = 0, len(evicted)
            for pos in new_at:
                while j < n_evicted and evicted[j][0] <= pos:
                    self.discard(evicted[j][1], store)
                    j += 1
                self.add(blocks[pos], store)
            return result
        # add() and discard() written out, in the same order (a hot path: every block of every
        # run a store files): a block held nowhere else -- most of them -- takes the run's one
        # shared ``(store,)``; blocks held elsewhere at one location tuple (a run filed a tier
        # down from where it already is) share its longer tuple, and victims at one tuple its
        # shorter one, each worked out once for them
        where_of, only = self._where, self._interned((store,))
        get, plus = where_of.get, self._plus
        last = last_more = None  # the previous added block's location tuple, and it plus ``store``
        if not evicted:  # (the common case, a store with room: the loop below without victims)
            # one dict call for a block held nowhere else: it takes ``only`` (a block new to the
            # store is not at ``only`` already, so getting ``only`` back means it was absent)
            setdefault = where_of.setdefault
            for block in (blocks if len(new_at) == len(blocks) else [blocks[pos] for pos in new_at]):
                where = setdefault(block, only)
                if where is only:
                    pass
                elif where is last:
                    if last_more is not None:
                        where_of[block] = last_more
                else:
                    last, last_more = where, plus(where, store)
                    if last_more is not None:
                        where_of[block] = last_more
            return result
        gone_last = gone_less = None  # the same for the previous victim, less ``store``
        j, n_evicted = 0, len(evicted)
        for pos in (range(len(blocks)) if len(new_at) == len(blocks) else new_at):
            while j < n_evicted and evicted[j][0] <= pos:
                gone = evicted[j][1]
                j += 1
                where = get(gone)
                if where is only:
                    del where_of[gone]
                    continue
                if where is None:
                    continue
                if where is not gone_last:
                    if store not in where:
                        continue
                    gone_last = where
                    gone_less = self._less(where, store)
                if gone_less is None:
                    del where_of[gone]
                else:
                    where_of[gone] = gone_less
            block = blocks[pos]
            where = get(block)
            if where is None:
                where_of[block] = only
            elif where is last:
                if last_more is not None:
                    where_of[block] = last_more
            else:
                last, last_more = where, plus(where, store)
                if last_more is not None:
                    where_of[block] = last_more
        return result

    def remove(self, store: BlockStore, block: Block) -> None:
        """Remove ``block`` from ``store`` (errors as :meth:`BlockStore.remove`) and the index."""
        store.remove(block)
        self.discard(block, store)

    # -- prefix queries -------------------------------------------------------------------------

    @cython.locals(where_of=dict, seen=set, i=cython.Py_ssize_t)
    def longest_prefix(
        self,
        hashes: Sequence[Block],
        usable: Callable[[BlockStore], bool] | None = None,
    ) -> int:
        """Number of leading blocks of ``hashes`` held by at least one usable store.

        Parameters
        ----------
        hashes : sequence
            The request's prefix-chained block ids, first block first.
        usable : callable, optional
            ``usable(store)`` says whether the reader may load from ``store`` (e.g. only its own
            node's tiers and the remote pool). All stores are usable by default. It must
            depend on the store alone (it is asked once per run of blocks at one location tuple).

        Returns
        -------
        int
            The count of leading blocks present; scanning stops at the first absent one, since a
            prefix cache cannot use block k without blocks 0..k-1.
        """
        where_of = self._where
        if usable is None:
            for i, block in enumerate(hashes):
                if not where_of.get(block):
                    return i
            return len(hashes)
        last = None  # the last location tuple found usable: a run's blocks often share it
        seen = set()  # the others found usable (tuples are interned: equal ones are one object)
        for i, block in enumerate(hashes):
            where = where_of.get(block)
            if not where:
                return i
            if where is last or where in seen:
                continue
            for store in where:  # any(usable(...)), without a generator per block
                if usable(store):
                    break
            else:
                return i
            last = where
            seen.add(where)
        return len(hashes)

    @cython.locals(where_of=dict, best=list, best_at=dict)
    def tier_breakdown(
        self,
        hashes: Sequence[Block],
        n: int,
        rank: Callable[[BlockStore], float],
        usable: Callable[[BlockStore], bool] | None = None,
    ) -> list[BlockStore]:
        """Best location of each of the first ``n`` blocks of ``hashes``.

        Parameters
        ----------
        hashes : sequence
            The request's block ids.
        n : int
            How many leading blocks to place, normally :meth:`longest_prefix`'s answer.
        rank : callable
            ``rank(store)``: lower is better (e.g. 0 HBM, 1 DRAM, 2 NVMe, 3 remote). Ties go
            to the store that acquired the block first. Like ``usable``, it must depend on the
            store alone: blocks at one location tuple share one answer.
        usable : callable, optional
            As in :meth:`longest_prefix`.

        Returns
        -------
        list of BlockStore
            ``n`` stores, one per block.

        Raises
        ------
        KeyError
            If one of the first ``n`` blocks is held by no usable store.
        """
        if n > len(hashes):
            raise ValueError(f"n={n} exceeds the {len(hashes)} blocks given")
        best: list[BlockStore] = []
        where_of = self._where
        last = last_best = None  # the previous block's location tuple and its best store
        best_at: dict = {}  # the best store at each tuple met so far (tuples are interned)
        for block in hashes[:n]:
            where = where_of.get(block, ())
            if where is not last:  # (a run's blocks often share one tuple)
                last = where
                last_best = best_at.get(where)
                if last_best is None:
                    candidates = [s for s in where if usable is None or usable(s)]
                    if not candidates:
                        raise KeyError(block)
                    # (min keeps the first of equal ranks)
                    last_best = best_at[where] = candidates[0] if len(candidates) == 1 else min(candidates, key=rank)
            best.append(last_best)
        return best
