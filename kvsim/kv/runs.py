"""Operations on a *run* of blocks: several consecutive blocks of one prompt handled by one call.

A prompt of a long shared document is thousands of blocks, and the cache layer used to file,
read and release them one call at a time (issue 23, item 1): the per-block calls, not the work
in them, were most of a cached run's time. :class:`RunOps` gives :class:`~kvsim.kv.store.BlockStore`
one call per run for each such loop. Each is defined as the per-block operations applied to the
blocks *in order* -- the same counters, the same eviction victims, the same refusal at the same
block, the same LRU stamps and valid heap entries -- and tests (``tests/test_kv_runs.py``) hold every
one of them equal to that per-block sequence on random access sequences. They only do it with
fewer calls: the state and the per-block API stay as they were.

The module is the store's second half (a mixin reading its attributes), kept apart so that each
file stays short; it imports nothing of the store.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence

import cython

__all__ = ["RunOps", "RunInsert"]

Block = Hashable


class RunInsert(tuple):
    """What :meth:`RunOps.insert_run` did: ``(done, new_at, evicted)``.

    ``done`` is how many leading blocks of the run were handled (``len(blocks)`` unless the store
    refused ``blocks[done]``); ``new_at`` the positions in the run of the blocks newly stored, in
    order; ``evicted`` the ``(position, victim)`` pairs of the evictions, in order, where
    ``position`` is the block whose insertion evicted ``victim``.
    """

    __slots__ = ()

    def __new__(cls, done: int, new_at: list, evicted: list):
        return tuple.__new__(cls, (done, new_at, evicted))

    @property
    def done(self) -> int:
        return self[0]

    @property
    def new_at(self) -> list:
        return self[1]

    @property
    def evicted(self) -> list:
        return self[2]


class RunOps:
    """Run operations of :class:`~kvsim.kv.store.BlockStore` (see the module docstring)."""

    @cython.locals(readers=dict, held=dict, new_at=list, evicted=list, done=cython.Py_ssize_t, capacity=cython.Py_ssize_t)
    def insert_run(self, blocks: Sequence[Block], read: bool = False, touch: bool = True) -> RunInsert:
        """For each of ``blocks`` in order: :meth:`insert` it (or, if it is resident and ``touch``
        is False, leave it as it is), then, if ``read``, :meth:`add_reader` it.

        Stops at the first block the store refuses (full of held blocks), which is counted as
        :meth:`insert` counts it and changes nothing; the blocks before it stay done. With
        ``read`` a block is held from its own insertion on, so a later block of the run never
        evicts it (as a caller filing and reading block by block gets).

        Returns
        -------
        RunInsert
            ``(done, new_at, evicted)``: see :class:`RunInsert`.
        """
        if self._lru_policy:
            if read and not touch:
                return self._file_run_lru(blocks)
            if touch and not read and not self._heap_on:
                return self._insert_run_lru(blocks)
        members, policy = self._members, self._policy
        capacity = self.capacity_blocks
        readers, held = self._readers, self._held
        policy_insert, policy_touch = policy.insert, policy.touch
        new_at: list[int] = []
        evicted: list[tuple[int, Block]] = []
        done = 0
        for block in blocks:
            if block in members:
                if not touch:
                    pass
                elif read and self._heap_on:
                    policy_touch(block)
                    self._stamp(block)
                else:
                    policy_touch(block)
                    if self._heap_on:
                        self._use(block)
            else:
                if len(members) >= capacity:
                    victim = self._victim() if members else None  # (may switch the heap on)
                    if victim is None:
                        self.rejections += 1
                        break
                    self._evict(victim)
                    evicted.append((done, victim))
                policy_insert(block)
                if not self._heap_on:
                    pass
                elif read:
                    self._stamp(block)
                else:
                    self._use(block)
                new_at.append(done)
            if read:
                readers[block] = readers.get(block, 0) + 1
                held[block] = held.get(block, 0) + 1
            done += 1
        self.insertions += len(new_at)
        if read:
            self._reader_refs += done
        return RunInsert(done, new_at, evicted)

    @cython.locals(readers=dict, held=dict, stamps=dict, new_at=list, evicted=list, done=cython.Py_ssize_t, free=cython.Py_ssize_t, clock=cython.longlong, heap_on=cython.bint)
    def _file_run_lru(self, blocks: Sequence[Block]) -> RunInsert:
        """:meth:`insert_run` with ``read`` and not ``touch`` under LRU (a prompt filed where it
        was computed, the hottest call of a cached run), the steps written out: a new block goes
        to the end of the policy's order (what ``LRUPolicy.insert`` does for a block known not to
        be resident) with the newest stamp and no heap entry (see :meth:`_stamp`), and has one
        reader and nothing else holding it."""
        members = self._members  # the LRU policy's order, least recent first
        readers, held = self._readers, self._held
        free = self.capacity_blocks - len(members)  # (an eviction then an insertion keeps it)
        # the stamps and clock as locals while the heap is on (only an eviction can switch it on)
        heap_on, stamps, clock = self._heap_on, self._stamps, self._clock
        new_at: list[int] = []
        evicted: list[tuple[int, Block]] = []
        if free >= len(blocks) and not heap_on:
            # room for every block (no victim to find, so the heap stays off): the loop below
            # without its eviction and stamp steps
            for done, block in enumerate(blocks):
                if block in members:
                    readers[block] = readers.get(block, 0) + 1
                    held[block] = held.get(block, 0) + 1
                    continue
                members[block] = None
                readers[block] = 1
                held[block] = 1
                new_at.append(done)
            self.insertions += len(new_at)
            self._reader_refs += len(blocks)
            return RunInsert(len(blocks), new_at, evicted)
        done = 0
        try:
            for done, block in enumerate(blocks):
                if block in members:
                    readers[block] = readers.get(block, 0) + 1
                    held[block] = held.get(block, 0) + 1
                    continue
                if free > 0:
                    free -= 1
                else:
                    if heap_on:
                        self._clock = clock
                    victim = self._victim() if members else None  # (may switch the heap on)
                    if victim is None:
                        self.rejections += 1
                        break
                    self._evict(victim)
                    evicted.append((done, victim))
                    if not heap_on and self._heap_on:
                        heap_on, stamps, clock = True, self._stamps, self._clock
                members[block] = None
                if heap_on:
                    clock += 1
                    stamps[block] = clock
                readers[block] = 1  # (a block not stored has no readers or pins)
                held[block] = 1
                new_at.append(done)
            else:
                done = len(blocks)
        finally:
            if heap_on:
                self._clock = clock
        self.insertions += len(new_at)
        self._reader_refs += done
        return RunInsert(done, new_at, evicted)

    @cython.locals(held=dict, new_at=list, evicted=list, done=cython.Py_ssize_t, free=cython.Py_ssize_t,
                   heap_on=cython.bint)
    def _insert_run_lru(self, blocks: Sequence[Block]) -> RunInsert:
        """:meth:`insert_run` under LRU, neither read nor held, while the heap is off (copies
        filed in a lower tier), the steps written out: a resident block moves to the end of the
        order; a new one goes there, after the least recent unheld block made room -- with
        nothing held, the first in the order (the victim search's first step)."""
        order, held = self._members, self._held  # the LRU policy's order, least recent first
        free = self.capacity_blocks - len(order)  # (an eviction then an insertion keeps it)
        move = order.move_to_end
        heap_on = self._heap_on  # (only a victim search can switch it on: read again after one)
        new_at: list[int] = []
        evicted: list[tuple[int, Block]] = []
        done = 0
        for done, block in enumerate(blocks):
            if block in order:
                move(block)
                if heap_on:
                    self._use(block)
                continue
            if free > 0:
                free -= 1
            else:
                if not order:
                    victim = None
                elif held or heap_on:
                    victim = self._victim()  # (may switch the heap on)
                    heap_on = self._heap_on
                else:
                    victim = next(iter(order))
                if victim is None:
                    self.rejections += 1
                    break
                if heap_on:
                    self._evict(victim)
                else:  # (_evict under LRU with the heap off: the victim leaves the order)
                    del order[victim]
                    self.evictions += 1
                evicted.append((done, victim))
            order[block] = None
            if heap_on:
                self._use(block)
            new_at.append(done)
        else:
            done = len(blocks)
        self.insertions += len(new_at)
        return RunInsert(done, new_at, evicted)

    def _stamp(self, block: Block) -> None:
        """:meth:`_use` for a block about to be read: the newest stamp, but no heap entry, since
        the block is held from now until :meth:`_release` pushes its entry (the heap then holds
        the same entries that are valid -- current stamp, block unheld -- and so gives the same
        victims; only stale entries, which the victim search skips, are fewer)."""
        self._clock += 1
        self._stamps[block] = self._clock

    @cython.locals(readers=dict, held=dict, stamps=dict, hits=cython.Py_ssize_t, clock=cython.longlong, heap_on=cython.bint)
    def read_run(self, blocks: Sequence[Block]) -> int:
        """For each of ``blocks`` in order: :meth:`lookup` it, and if it is stored take a reader
        reference (:meth:`add_reader`). Returns the hits."""
        members, policy = self._members, self._policy
        readers, held = self._readers, self._held
        # (under LRU the policy's touch is its order's move_to_end: called directly)
        touch = members.move_to_end if self._lru_policy else policy.touch
        heap_on, stamps, clock = self._heap_on, self._stamps, self._clock
        hits = 0
        for block in blocks:
            if block not in members:
                self.misses += 1
                continue
            hits += 1
            touch(block)
            if heap_on:  # (_stamp, with the clock as a local: a read never switches the heap on)
                clock += 1
                stamps[block] = clock
            readers[block] = readers.get(block, 0) + 1
            held[block] = held.get(block, 0) + 1
        self._clock = clock
        self.hits += hits
        self._reader_refs += hits
        return hits

    @cython.locals(pins=dict, held=dict, stamps=dict, hits=cython.Py_ssize_t, clock=cython.longlong, heap_on=cython.bint)
    def lookup_pin_run(self, blocks: Sequence[Block]) -> None:
        """For each of ``blocks`` in order: :meth:`lookup` it, then :meth:`pin` it (the source of
        a load); KeyError, after counting the miss, at the first one not stored."""
        members, pins, held = self._members, self._pins, self._held
        touch = members.move_to_end if self._lru_policy else self._policy.touch  # (see read_run)
        heap_on, stamps, clock = self._heap_on, self._stamps, self._clock
        hits = 0
        try:
            for block in blocks:
                if block not in members:
                    self.misses += 1
                    raise KeyError(block)
                hits += 1
                touch(block)
                if heap_on:  # (_stamp: pinned at once)
                    clock += 1
                    stamps[block] = clock
                pins[block] = pins.get(block, 0) + 1
                held[block] = held.get(block, 0) + 1
        finally:
            self._clock = clock
            self.hits += hits

    @cython.locals(touched=cython.Py_ssize_t, heap_on=cython.bint)
    def touch_run(self, blocks: Sequence[Block]) -> int:
        """For each of ``blocks`` in order that is stored: the use :meth:`insert` of a resident
        block records (the policy's touch, and under LRU the newest stamp); the blocks not
        stored are skipped. No counter changes: a lookup that found the block, not a hit or a
        load (see :meth:`kvsim.serving.cache.tiers.SystemCache.touch_below`). Returns how many
        blocks were touched."""
        members = self._members
        touch = members.move_to_end if self._lru_policy else self._policy.touch  # (see read_run)
        heap_on = self._heap_on
        touched = 0
        for block in blocks:
            if block in members:
                touch(block)
                if heap_on:
                    self._use(block)
                touched += 1
        return touched

    @cython.locals(readers=dict, held=dict, taken=cython.Py_ssize_t)
    def add_reader_each(self, blocks: Sequence[Block]) -> None:
        """:meth:`add_reader` each of ``blocks`` in order (KeyError at the first one not stored;
        the blocks before it keep their references)."""
        members, readers, held = self._members, self._readers, self._held
        taken = 0
        try:
            for block in blocks:
                if block not in members:
                    raise KeyError(block)
                readers[block] = readers.get(block, 0) + 1
                held[block] = held.get(block, 0) + 1
                taken += 1
        finally:
            self._reader_refs += taken

    def missing(self, blocks: Sequence[Block]) -> list:
        """The blocks of ``blocks`` not stored, in order (as many ``block not in store`` tests:
        no counters or recency change)."""
        members = self._members
        return [block for block in blocks if block not in members]

    @cython.locals(held=dict, found=list)
    def unheld(self, blocks, count: int) -> list:
        """Up to ``count`` of ``blocks`` (any iterable of stored blocks), in order, that are
        evictable: neither pinned nor read (:meth:`is_evictable` for each until ``count`` are
        found; all of them if ``count`` < 1)."""
        held = self._held  # (exactly the blocks pinned or read)
        found: list = []
        for block in blocks:
            if block not in held:
                found.append(block)
                if len(found) == count:
                    break
        return found

    @cython.locals(held=dict)
    def pin_each(self, blocks) -> None:
        """:meth:`pin` each of ``blocks`` in order (one call for a transfer's blocks).

        A store made with ``whole_pins`` keeps the pins of a run whose blocks are all held
        already (a sequence writing down the blocks it reads) as one entry for the run, not a
        count per block, until one of its blocks is let go of otherwise (:meth:`_pin_whole`).
        While kept whole its blocks are held anyway, so no decision can tell the difference.
        """
        whole = self._whole_pins
        if whole is not None and len(blocks):
            held = self._held
            for block in blocks:
                if block not in held:
                    break
            else:
                key = tuple(blocks)
                entry = whole.get(key)
                if entry is None:
                    whole[key] = [1, frozenset(key)]
                else:
                    entry[0] += 1
                return
        self._pin_blocks(blocks)

    @cython.locals(pins=dict, held=dict)
    def _pin_blocks(self, blocks) -> None:
        """:meth:`pin_each`, a count per block."""
        members, pins, held = self._members, self._pins, self._held
        for block in blocks:
            if block not in members:
                raise KeyError(block)
            pins[block] = pins.get(block, 0) + 1
            held[block] = held.get(block, 0) + 1

    def unpin_each(self, blocks) -> None:
        """:meth:`unpin` each of ``blocks`` in order (a run kept whole is let go of as one)."""
        whole = self._whole_pins
        if whole:
            key = tuple(blocks)
            entry = whole.get(key)
            if entry is not None:
                if entry[0] == 1:
                    del whole[key]
                else:
                    entry[0] -= 1
                return
        self._release_each(self._pins, blocks, "is not pinned")

    def _pin_whole(self, blocks) -> None:
        """Before a hold on any of ``blocks`` is let go of: the runs whose pins are kept whole and
        share a block with them are pinned block by block (as many times as they were pinned),
        so every count is then what pinning block by block had made it."""
        whole = self._whole_pins
        touching = [key for key, entry in whole.items() if not entry[1].isdisjoint(blocks)]
        for key in touching:
            for _ in range(whole.pop(key)[0]):
                self._pin_blocks(key)

    @cython.locals(counts=dict, held=dict, stamps=dict, heap=list, heap_on=cython.bint, readers=cython.bint, dropped=cython.Py_ssize_t)
    def _release_each(self, counts: dict, blocks, missing: str) -> None:
        """Take one pin (``counts`` is the pins) or reader reference (the readers) off each of
        ``blocks`` in order; ValueError, saying the block ``missing``, at one that has none."""
        if self._whole_pins:
            self._pin_whole(blocks)
        held, readers = self._held, counts is self._readers
        # (releasing never switches the heap on; its rebuild, if due, waits for the end: no
        # victim is chosen in between, and a rebuild keeps exactly the valid entries)
        heap_on, heap, stamps = self._heap_on, self._unheld, self._stamps
        push = heapq.heappush
        if len(blocks) > 1 and held.get(blocks[0]) == 1 and self._held_once(blocks):
            # each block held once (a sequence alone reading its prompt): every one is let go of,
            # in order, one delete per block. Where the per-block calls raise -- a block held by
            # the other kind (not in ``counts``), or named a second time (its count gone) -- the
            # delete from ``counts`` fails first, the blocks before it released, as there
            dropped = len(blocks)
            try:
                for block in blocks:
                    del counts[block]
                    del held[block]
            except KeyError:
                order = list(blocks)
                first = order.index(block)
                # still held: it failed at its first time; let go of: at its second
                dropped = first if block in held else order.index(block, first + 1)
                raise ValueError(f"block {block!r} in {self.name} {missing}") from None
            finally:
                if heap_on:
                    for block in blocks[:dropped]:
                        push(heap, (stamps[block], block))
                    if len(heap) > 4 * len(stamps) + 1024:
                        self._unheld = [(s, b) for b, s in stamps.items() if b not in held]
                        heapq.heapify(self._unheld)
                if readers:
                    self._reader_refs -= dropped
            return
        dropped = 0
        try:
            for block in blocks:
                count = counts.get(block, 0)
                if count == 0:
                    raise ValueError(f"block {block!r} in {self.name} {missing}")
                if count == 1:
                    del counts[block]
                else:
                    counts[block] = count - 1
                dropped += 1
                count = held[block]
                if count == 1:
                    del held[block]
                    if heap_on:
                        push(heap, (stamps[block], block))  # evictable again, at its place in the order
                else:
                    held[block] = count - 1
        finally:
            if readers:
                self._reader_refs -= dropped
            if heap_on and len(heap) > 4 * len(stamps) + 1024:
                self._unheld = [(s, b) for b, s in stamps.items() if b not in held]
                heapq.heapify(self._unheld)

    def _held_once(self, blocks) -> bool:
        """Whether each of ``blocks`` is held exactly once (by a pin or a reader): held counts are
        at least one, so they sum to ``len(blocks)`` only then; False if one is not held."""
        try:
            return sum(map(self._held.__getitem__, blocks)) == len(blocks)
        except KeyError:
            return False

    def drop_reader_each(self, blocks) -> None:
        """:meth:`drop_reader` for each of ``blocks`` in order (a sequence letting go of its prefix)."""
        self._release_each(self._readers, blocks, "has no readers")

    def pin_run(self, blocks: Sequence[Block]) -> None:
        """:meth:`pin` each of ``blocks`` in order (the same as :meth:`pin_each`)."""
        self.pin_each(blocks)

    def unpin_run(self, blocks: Sequence[Block]) -> None:
        """:meth:`unpin` each of ``blocks`` in order (the same as :meth:`unpin_each`)."""
        self.unpin_each(blocks)

    def drop_reader_run(self, blocks: Sequence[Block]) -> None:
        """:meth:`drop_reader` each of ``blocks`` in order (the same as :meth:`drop_reader_each`)."""
        self.drop_reader_each(blocks)
