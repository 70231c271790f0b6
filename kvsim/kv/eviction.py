"""Eviction policies over hashable KV block ids.

A policy only orders blocks; it never owns bytes. The store that holds the blocks
(:class:`kvsim.kv.store.BlockStore`) tells the policy what happened to each block and asks it
which block to give up next:

- :meth:`~EvictionPolicy.insert` -- a block was stored (it must not be resident already);
- :meth:`~EvictionPolicy.touch` -- a resident block was hit;
- :meth:`~EvictionPolicy.remove` -- a resident block was dropped on purpose (moved, invalidated);
- :meth:`~EvictionPolicy.victim` -- choose, without removing, the next block to evict among
  those the caller may evict (pinned blocks are skipped); ``None`` if there is none;
- :meth:`~EvictionPolicy.evict` -- the chosen victim was evicted. For LRU and LFU this is
  :meth:`remove`; S3-FIFO needs the distinction because only evictions feed its ghost queue.

Every operation is O(1) except :meth:`victim`, which is O(1) amortized plus one step per
non-evictable block it has to pass over (pinned blocks are few: those in flight).

Determinism: queues are ``OrderedDict``\\s (insertion order), never sets, so the same sequence
of calls always picks the same victims.

``EVICTION_POLICIES`` maps the YAML ``kind:`` of a policy to its class; every class is built as
``cls(capacity_blocks)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator

__all__ = ["EVICTION_POLICIES", "EvictionPolicy", "LFUPolicy", "LRUPolicy", "S3FIFOPolicy"]

Block = Hashable


class EvictionPolicy(ABC):
    """Common interface of the eviction policies.

    Parameters
    ----------
    capacity_blocks : int
        Blocks the owning store can hold. LRU and LFU ignore it; S3-FIFO sizes its queues by it.

    Notes
    -----
    A policy that keeps its resident blocks as the keys of one dict exposes it as ``members``
    (LRU, LFU); the store then tests membership and counts on it directly, the hottest calls of
    a cache run. Only the policy changes it.
    """

    def __init__(self, capacity_blocks: int):
        if capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be >= 0, got {capacity_blocks}")
        self.capacity_blocks = int(capacity_blocks)

    @abstractmethod
    def insert(self, block: Block) -> None:
        """Record that ``block`` was stored (it must not be resident)."""

    @abstractmethod
    def touch(self, block: Block) -> None:
        """Record a hit on resident ``block``."""

    @abstractmethod
    def remove(self, block: Block) -> None:
        """Forget resident ``block`` (dropped on purpose, not evicted)."""

    @abstractmethod
    def victim(self, evictable: Callable[[Block], bool]) -> Block | None:
        """Choose, but do not remove, the next block to evict.

        Parameters
        ----------
        evictable : callable
            ``evictable(block)`` is False for blocks that must stay (pinned); they are skipped.

        Returns
        -------
        block or None
            The block to evict, or None if no resident block is evictable.
        """

    def evict(self, block: Block) -> None:
        """Forget ``block`` because it was evicted (normally the last :meth:`victim`)."""
        self.remove(block)

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, block: object) -> bool: ...


class LRUPolicy(EvictionPolicy):
    """Least recently used: evict the block whose last insert or hit is oldest."""

    def __init__(self, capacity_blocks: int):
        super().__init__(capacity_blocks)
        # Front = least recently used. An OrderedDict moves a key to the end in O(1).
        self._order: OrderedDict[Block, None] = OrderedDict()
        self.members = self._order  # (the store tests membership on it directly: a hot path)

    def insert(self, block: Block) -> None:
        if block in self._order:
            raise ValueError(f"block {block!r} is already resident")
        self._order[block] = None

    def touch(self, block: Block) -> None:
        self._order.move_to_end(block)

    def remove(self, block: Block) -> None:
        del self._order[block]

    def victim(self, evictable: Callable[[Block], bool]) -> Block | None:
        for block in self._order:
            if evictable(block):
                return block
        return None

    def in_order(self) -> Iterator[Block]:
        """Resident blocks, least recently used first (an iterator: do not change the policy while
        iterating)."""
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, block: object) -> bool:
        return block in self._order


class LFUPolicy(EvictionPolicy):
    """Least frequently used, ties broken by least recent use.

    A block's frequency is its insert plus its hits while resident (an evicted or removed block
    starts again at 1; there is no aging). Blocks are kept in one FIFO bucket per frequency,
    and the non-empty frequencies form a doubly linked list in ascending order (the O(1) LFU of
    Shah, Mitra and Matani, 2010). A block enters bucket ``f`` at its ``f``-th access, so the
    order inside a bucket is the order of last access: the front is the least recent.
    """

    # Sentinel frequency heading the circular list of non-empty buckets; real ones are >= 1.
    _HEAD = 0

    def __init__(self, capacity_blocks: int):
        super().__init__(capacity_blocks)
        self._freq: dict[Block, int] = {}
        self.members = self._freq  # (the store tests membership on it directly: a hot path)
        self._buckets: dict[int, OrderedDict[Block, None]] = {}
        self._next: dict[int, int] = {self._HEAD: self._HEAD}
        self._prev: dict[int, int] = {self._HEAD: self._HEAD}

    def _add_to_bucket(self, block: Block, freq: int, after: int) -> None:
        # Frequencies only grow by one, so a new bucket ``freq`` belongs right after ``after``
        # (the block's old bucket, or the head for freq 1): the list stays sorted in O(1).
        bucket = self._buckets.get(freq)
        if bucket is None:
            bucket = self._buckets[freq] = OrderedDict()
            nxt = self._next[after]
            self._next[after] = freq
            self._prev[freq] = after
            self._next[freq] = nxt
            self._prev[nxt] = freq
        bucket[block] = None

    def _drop_from_bucket(self, block: Block, freq: int) -> None:
        bucket = self._buckets[freq]
        del bucket[block]
        if not bucket:
            del self._buckets[freq]
            prv, nxt = self._prev.pop(freq), self._next.pop(freq)
            self._next[prv] = nxt
            self._prev[nxt] = prv

    def insert(self, block: Block) -> None:
        if block in self._freq:
            raise ValueError(f"block {block!r} is already resident")
        self._freq[block] = 1
        self._add_to_bucket(block, 1, self._HEAD)

    def touch(self, block: Block) -> None:
        freq = self._freq[block]
        # Link the new bucket before dropping the old one, whose list position anchors it.
        self._add_to_bucket(block, freq + 1, freq)
        self._drop_from_bucket(block, freq)
        self._freq[block] = freq + 1

    def remove(self, block: Block) -> None:
        self._drop_from_bucket(block, self._freq.pop(block))

    def frequency(self, block: Block) -> int:
        """Accesses of resident ``block`` since it was stored (insert included)."""
        return self._freq[block]

    def victim(self, evictable: Callable[[Block], bool]) -> Block | None:
        freq = self._next[self._HEAD]
        while freq != self._HEAD:
            for block in self._buckets[freq]:
                if evictable(block):
                    return block
            freq = self._next[freq]
        return None

    def __len__(self) -> int:
        return len(self._freq)

    def __contains__(self, block: object) -> bool:
        return block in self._freq


class S3FIFOPolicy(EvictionPolicy):
    """S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction", SOSP'23).

    Three FIFO queues: a small queue S (10% of the capacity), a main queue M (the other 90%)
    and a ghost queue G holding only the ids of blocks recently evicted from S (as many entries
    as M). Each resident block has a 2-bit access counter (0..3), incremented by hits; hits never
    move a block.

    - Insert: into M if the id is in G (and it leaves G), else into S; the counter starts at 0.
    - Evict: from M if M holds more than its 90% share or S is empty, else from S.
    - Evict from S: look at the oldest block. If its counter is at least
      ``move_to_main_threshold`` it moves to M with its counter cleared, and the scan goes on;
      otherwise it is the victim, and on eviction its id enters G (G drops its oldest id when
      full). Blocks seen once ("one-hit wonders") therefore leave quickly through S.
    - Evict from M: the oldest block, if its counter is above 0, is reinserted at the head with
      the counter decremented (a CLOCK with a 2-bit counter); otherwise it is the victim.
      Blocks evicted from M do not enter G.

    This follows the code released with the paper (libCacheSim ``S3FIFOv0.c``): queue sizes
    ``floor(0.1 C)`` / ``C - floor(0.1 C)`` for S / M and ``floor(0.9 C)`` ghost entries, a
    promotion threshold of 2 hits (Algorithm 1's ``t.freq > 1``), and one eviction per call: a
    promotion that pushes M over its share is paid by the *next* eviction, which then comes
    from M. Inserts go to S even before the cache first fills (the later libCacheSim
    ``S3FIFO.c`` sends them to M instead; that variant is not implemented).

    Adaptations for a KV store, where some blocks are pinned (being read or written):

    - a block's promotion or counter decrement happens whether or not it is pinned -- moving
      a block between queues does not free its bytes;
    - a pinned block that would be the victim is rotated to the head of its queue (it is in
      use, so it is treated as freshly queued) and the scan goes on;
    - if the preferred queue has no evictable block the other one is scanned, and if neither
      has one :meth:`victim` returns None.

    :meth:`victim` therefore changes queue order and counters (exactly as S3-FIFO's eviction
    does) but never the set of resident blocks. Explicit :meth:`remove` (not an eviction)
    leaves no ghost entry.

    Parameters
    ----------
    capacity_blocks : int
        Blocks the owning store can hold.
    move_to_main_threshold : int, optional
        Hits a block in S needs to be promoted to M instead of evicted (default 2, as released).
    """

    _MAX_FREQ = 3  # two bits

    def __init__(self, capacity_blocks: int, move_to_main_threshold: int = 2):
        super().__init__(capacity_blocks)
        if not 1 <= move_to_main_threshold <= self._MAX_FREQ:
            raise ValueError("move_to_main_threshold must be 1..3 (a 2-bit counter)")
        self.move_to_main_threshold = move_to_main_threshold
        # Integer arithmetic: 0.1 * C in floating point can land just below an integer.
        self.small_target = capacity_blocks // 10
        self.main_target = capacity_blocks - self.small_target
        self.ghost_capacity = capacity_blocks * 9 // 10
        # Each queue maps block -> 2-bit counter; front = tail (oldest), end = head (newest).
        self._small: OrderedDict[Block, int] = OrderedDict()
        self._main: OrderedDict[Block, int] = OrderedDict()
        self._ghost: OrderedDict[Block, None] = OrderedDict()

    def queues(self) -> tuple[tuple[Block, ...], tuple[Block, ...], tuple[Block, ...]]:
        """(S, M, G) ids, each oldest first. O(n): for tests and debugging only."""
        return tuple(self._small), tuple(self._main), tuple(self._ghost)

    def frequency(self, block: Block) -> int:
        """The 2-bit access counter of resident ``block``."""
        if block in self._small:
            return self._small[block]
        return self._main[block]

    def insert(self, block: Block) -> None:
        if block in self._small or block in self._main:
            raise ValueError(f"block {block!r} is already resident")
        if block in self._ghost:
            # Evicted from S recently and asked for again: it deserved to stay, so go to M.
            del self._ghost[block]
            self._main[block] = 0
        else:
            self._small[block] = 0

    def touch(self, block: Block) -> None:
        # Assigning to an existing OrderedDict key keeps its position: hits do not reorder.
        if block in self._small:
            self._small[block] = min(self._small[block] + 1, self._MAX_FREQ)
        else:
            self._main[block] = min(self._main[block] + 1, self._MAX_FREQ)

    def remove(self, block: Block) -> None:
        if block in self._small:
            del self._small[block]
        else:
            del self._main[block]

    def evict(self, block: Block) -> None:
        if block in self._small:
            del self._small[block]
            if self.ghost_capacity > 0:
                self._ghost[block] = None
                if len(self._ghost) > self.ghost_capacity:
                    self._ghost.popitem(last=False)
        else:
            del self._main[block]

    def victim(self, evictable: Callable[[Block], bool]) -> Block | None:
        if len(self._main) > self.main_target or not self._small:
            first, second = self._victim_main, self._victim_small
        else:
            first, second = self._victim_small, self._victim_main
        # Compare with None: a block id may be falsy (0).
        found = first(evictable)
        return found if found is not None else second(evictable)

    def _victim_small(self, evictable: Callable[[Block], bool]) -> Block | None:
        small = self._small
        # Every block present at the start is looked at once at most: promoted blocks leave S
        # and rotated ones go behind the rest.
        for _ in range(len(small)):
            block, freq = next(iter(small.items()))
            if freq >= self.move_to_main_threshold:
                del small[block]
                self._main[block] = 0  # the paper clears the access bits on the move
            elif evictable(block):
                return block
            else:
                small.move_to_end(block)
        return None

    def _victim_main(self, evictable: Callable[[Block], bool]) -> Block | None:
        main = self._main
        # Decrements are finite (at most 3 per block); a run of len(M) pinned zero-count blocks
        # without a decrement has gone full circle, so nothing in M is evictable.
        stalled = 0
        while main and stalled < len(main):
            block, freq = next(iter(main.items()))
            if freq > 0:
                main[block] = freq - 1
                main.move_to_end(block)
                stalled = 0
            elif evictable(block):
                return block
            else:
                main.move_to_end(block)
                stalled += 1
        return None

    def __len__(self) -> int:
        return len(self._small) + len(self._main)

    def __contains__(self, block: object) -> bool:
        return block in self._small or block in self._main


EVICTION_POLICIES: dict[str, type[EvictionPolicy]] = {
    "lru": LRUPolicy,
    "lfu": LFUPolicy,
    "s3fifo": S3FIFOPolicy,
}
