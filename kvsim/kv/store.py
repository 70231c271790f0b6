"""One storage tier instance holding whole KV blocks: an instance's HBM, a node's DRAM or NVMe,
a remote pool.

Blocks are identified by their prefix-chained hash (equal ids mean equal prefixes); the store
only knows ids and counts bytes as ``blocks x block_bytes``. Which block leaves when room is
needed is up to an eviction policy (:mod:`kvsim.kv.eviction`), chosen by its ``kind`` name.

Two kinds of hold keep a block from being evicted or removed:

- **pins** -- the block is being read or written (a transfer in flight). Counted: every
  :meth:`BlockStore.pin` needs its :meth:`BlockStore.unpin`.
- **readers** -- references to the one physical copy by sequences that use it in place. This is
  the seam for byte sharing (DESIGN.md, "Reuse is not sharing"): ``physical_bytes`` counts each
  stored block once, ``logical_bytes`` counts it once per reader, so ``logical - physical``
  over the shared blocks is the memory that sharing saves inside one addressing domain. A copy
  into another domain is a separate block in another store, and is counted there again. A
  block with readers is in use (a refcount > 0, like vLLM's prefix-cache blocks), so it is not
  evictable; with no readers it is merely cached.

When the store is full and every block is held, :meth:`BlockStore.insert` refuses: it returns
``None``, changes nothing, and counts a rejection. That is a normal condition under load
(caching is best effort), hence a return value and not an exception; callers must test
``is None``, since ``[]`` (stored, nothing evicted) is also falsy.

Runs of blocks (a prompt's consecutive blocks) have one call each for filing, reading and
releasing them (:mod:`kvsim.kv.runs`), equal to the per-block calls in order.

Every operation is O(1) apart from the victim search: O(log n) under LRU (a heap of unheld blocks
by last use), the policy's own search otherwise (see :mod:`kvsim.kv.eviction`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable

import cython

from kvsim.kv.eviction import EVICTION_POLICIES, EvictionPolicy
from kvsim.kv.runs import RunOps

__all__ = ["BlockStore", "HEAP_AFTER", "whole_blocks"]

HEAP_AFTER = 64
"""Held blocks an LRU victim search may step over before the store switches to its heap (a cost
threshold only: either way finds the same victim)."""

Block = Hashable


def whole_blocks(capacity_bytes: float, block_bytes: float) -> int:
    """floor(capacity_bytes / block_bytes), forgiving floating-point error just below an integer.

    A capacity written as ``n * block_bytes`` can divide to ``n - 1e-15``; it still holds n.
    """
    ratio = capacity_bytes / block_bytes
    nearest = round(ratio)
    if abs(ratio - nearest) <= 1e-9 * max(1.0, ratio):
        return int(nearest)
    return math.floor(ratio)


class BlockStore(RunOps):
    """A fixed-capacity set of whole KV blocks in one tier, with an eviction policy.

    Parameters
    ----------
    name : str
        Label for reports and debugging (e.g. ``"node0.dram"``).
    capacity_bytes : float
        Bytes available for KV blocks; the store holds ``floor(capacity_bytes / block_bytes)``.
    block_bytes : float
        Bytes of one block (``block_tokens x`` KV bytes per token).
    policy : str, optional
        Eviction policy kind, a key of :data:`kvsim.kv.eviction.EVICTION_POLICIES`.

    Attributes
    ----------
    hits, misses : int
        Outcomes of :meth:`lookup`.
    insertions : int
        Blocks newly stored by :meth:`insert` (re-inserting a resident block is a touch).
    evictions : int
        Blocks evicted to make room.
    removals : int
        Blocks dropped by :meth:`remove`.
    rejections : int
        Inserts refused because the store was full of held blocks.
    """

    def __init__(self, name: str, capacity_bytes: float, block_bytes: float, policy: str = "lru",
                 whole_pins: bool = False):
        if not block_bytes > 0 or not math.isfinite(block_bytes):
            raise ValueError(f"block_bytes must be positive and finite, got {block_bytes}")
        if not capacity_bytes >= 0 or not math.isfinite(capacity_bytes):
            raise ValueError(f"capacity_bytes must be >= 0 and finite, got {capacity_bytes}")
        if policy not in EVICTION_POLICIES:
            known = sorted(EVICTION_POLICIES)
            raise ValueError(f"unknown eviction policy {policy!r}; known: {known}")
        self.name = name
        self.block_bytes = float(block_bytes)
        self.capacity_blocks = whole_blocks(capacity_bytes, block_bytes)
        self.policy_kind = policy
        self._policy: EvictionPolicy = EVICTION_POLICIES[policy](self.capacity_blocks)
        # the resident blocks as a dict where the policy keeps one (LRU, LFU): ``in`` and ``len``
        # on it directly, not through the policy's methods, on every insert, pin and read
        self._members = getattr(self._policy, "members", self._policy)
        # Only blocks with a count > 0 are keys, so "in" answers "is it held?" in O(1).
        self._pins: dict[Block, int] = {}
        self._readers: dict[Block, int] = {}
        self._reader_refs = 0
        self._held: dict[Block, int] = {}  # pins + readers per held block, to count evictables in O(1)
        # with ``whole_pins``: runs pinned while all their blocks were held, kept as one entry each
        # (tuple of blocks -> [times pinned, its blocks as a set]) instead of counts (RunOps.pin_each)
        self._whole_pins: dict[tuple, list] | None = {} if whole_pins else None
        # LRU: the victim is the least recently inserted or hit block that nothing holds. Scanning
        # the recency order for it steps over every held block older than the first free one
        # (quadratic when running sequences hold most of a full store). Once a scan steps over
        # more than HEAP_AFTER held blocks, the store keeps a heap of (stamp of last use, block)
        # for blocks that were unheld at that stamp instead (stale entries are skipped when they
        # reach the top): the same victim in O(log n), at a small cost on every insert and hit
        # that stores which never hold many blocks do not pay.
        self._heap_on = False  # the heap is kept (see above)
        self._lru_policy = policy == "lru"
        self._clock = 0
        self._stamps: dict[Block, int] = {}
        self._unheld: list[tuple[int, Block]] = []
        self.hits = 0
        self.misses = 0
        self.insertions = 0
        self.evictions = 0
        self.removals = 0
        self.rejections = 0

    def __repr__(self) -> str:
        return (
            f"BlockStore({self.name!r}, {self.used_blocks}/{self.capacity_blocks} blocks, "
            f"policy={self.policy_kind!r})"
        )

    # -- sizes ----------------------------------------------------------------------------------

    @property
    def used_blocks(self) -> int:
        """Blocks stored (physical copies)."""
        return len(self._members)

    @property
    def free_blocks(self) -> int:
        return self.capacity_blocks - len(self._members)

    @property
    def capacity_bytes(self) -> float:
        """Bytes usable for whole blocks (the constructor's capacity rounded down to blocks)."""
        return self.capacity_blocks * self.block_bytes

    @property
    def used_bytes(self) -> float:
        """Bytes occupied; the same as :attr:`physical_bytes`."""
        return len(self._members) * self.block_bytes

    @property
    def physical_bytes(self) -> float:
        """Bytes of stored copies: one per block however many readers share it."""
        return len(self._members) * self.block_bytes

    @property
    def logical_bytes(self) -> float:
        """Bytes the readers see: one block's bytes per reader reference."""
        return self._reader_refs * self.block_bytes

    @property
    def reader_refs(self) -> int:
        """Reader references held, over all blocks."""
        return self._reader_refs

    @property
    def read_blocks(self) -> int:
        """Distinct blocks with at least one reader (so ``reader_refs - read_blocks`` is how many
        more copies the readers would hold without sharing)."""
        return len(self._readers)

    @property
    def pinned_blocks(self) -> int:
        """Distinct blocks with at least one pin."""
        if not self._whole_pins:
            return len(self._pins)
        return len(set(self._pins).union(*(entry[1] for entry in self._whole_pins.values())))

    # -- membership and hits --------------------------------------------------------------------

    def contains(self, block: Block) -> bool:
        """Whether ``block`` is stored. No counters or recency change."""
        return block in self._members

    __contains__ = contains

    def __len__(self) -> int:
        return len(self._members)

    def lookup(self, block: Block) -> bool:
        """Whether ``block`` is stored, counting a hit (which the policy sees) or a miss."""
        if block in self._members:
            self.hits += 1
            self._policy.touch(block)
            if self._heap_on:
                self._use(block)
            return True
        self.misses += 1
        return False

    def is_evictable(self, block: Block) -> bool:
        """True unless ``block`` is pinned or has readers."""
        return block not in self._pins and block not in self._readers

    # -- insert and remove ----------------------------------------------------------------------

    def insert(self, block: Block) -> list[Block] | None:
        """Store ``block``, evicting an unheld block if the store is full.

        Returns
        -------
        list or None
            The blocks evicted to make room (at most one, since one block is added); ``[]`` if
            there was room or ``block`` was already stored (then it is only touched, as a hit
            would be, without counting one). ``None`` if the store is full and every stored
            block is pinned or read -- nothing is changed then (see the module docstring).
        """
        policy, members = self._policy, self._members
        if block in members:
            policy.touch(block)
            if self._heap_on:
                self._use(block)
            return []
        evicted: list[Block] = []
        # The store never exceeds its capacity, so one eviction always makes room.
        if len(members) >= self.capacity_blocks:
            victim = self._victim() if members else None
            if victim is None:
                self.rejections += 1
                return None
            self._evict(victim)
            evicted.append(victim)
        policy.insert(block)
        self.insertions += 1
        if self._heap_on:
            self._use(block)
        return evicted

    def evict_one(self) -> Block | None:
        """Evict the policy's victim among unheld blocks (to free room on demand); None if none."""
        victim = self._victim() if len(self._members) else None
        if victim is None:
            return None
        self._evict(victim)
        return victim

    @cython.locals(victims=list, held=dict, stepped=cython.Py_ssize_t, switch=cython.bint, heap=list, stamps=dict,
                   evicted_before=cython.Py_ssize_t)
    def evict_run(self, n: int) -> list[Block]:
        """:meth:`evict_one` up to ``n`` times, stopping at the first that finds no victim.

        Returns
        -------
        list
            The victims, in the order they were evicted (fewer than ``n`` if the store ran out
            of unheld blocks).
        """
        victims: list[Block] = []
        if n <= 0:
            return victims
        evicted_before = 0  # (victims the walk below counted already)
        if self._lru_policy and not self._heap_on:
            # One walk of the recency order finds what the repeated searches would. Each search
            # restarts at the front, where only held blocks are left (the unheld ones before were
            # the earlier victims): so the k-th victim is the k-th unheld block in order, and a
            # search switches the heap on where it would step past a held block with HEAP_AFTER
            # held ones before it -- from then on, the heap's searches take over.
            held = self._held
            stepped = 0
            switch = False
            for block in self._members:
                if block not in held:
                    victims.append(block)
                    if len(victims) == n:
                        break
                elif stepped >= HEAP_AFTER:
                    switch = True
                    break
                else:
                    stepped += 1
            order = self._members
            for victim in victims:
                del order[victim]  # (LRUPolicy.evict, without stamps: the heap is off)
            self.evictions += len(victims)
            if not switch:
                return victims
            evicted_before = len(victims)
            self._start_heap()
        if self._lru_policy:  # (the heap is on) _victim and _evict written out, as a store under
            # pressure calls them for every block it frees: the least recent unheld block is the
            # smallest valid heap entry; it leaves the order and its stamp, its entry left to go stale
            heap, stamps, held, order = self._unheld, self._stamps, self._held, self._members
            pop = heapq.heappop
            while len(victims) < n and len(order):
                while heap:
                    stamp, block = heap[0]
                    if stamps.get(block) == stamp and block not in held:
                        break
                    pop(heap)  # stale, or held now (it is pushed again when released)
                else:
                    break
                del order[block]
                del stamps[block]
                victims.append(block)
            self.evictions += len(victims) - evicted_before
            return victims
        victim_of, evict, members = self._victim, self._evict, self._members
        while len(victims) < n:
            victim = victim_of() if len(members) else None
            if victim is None:
                break
            evict(victim)
            victims.append(victim)
        return victims

    @cython.locals(held=dict, stamps=dict, heap=list, steps=cython.Py_ssize_t)
    def _victim(self) -> Block | None:
        if not self._heap_on:
            if not self._lru_policy:
                return self._policy.victim(self.is_evictable)
            held = self._held
            for steps, block in enumerate(self._policy.in_order()):
                if block not in held:
                    return block
                if steps >= HEAP_AFTER:
                    self._start_heap()
                    break
            else:
                return None
        heap, stamps, held = self._unheld, self._stamps, self._held
        while heap:
            stamp, block = heap[0]
            if stamps.get(block) == stamp and block not in held:
                return block
            heapq.heappop(heap)  # stale, or held now (it is pushed again when released)
        return None

    def _start_heap(self) -> None:
        """Switch to the heap: stamps in the present recency order, a heap of the unheld blocks."""
        self._stamps = {block: stamp for stamp, block in enumerate(self._policy.in_order(), 1)}
        self._clock = len(self._stamps)
        held = self._held
        self._unheld = [(stamp, block) for block, stamp in self._stamps.items() if block not in held]
        heapq.heapify(self._unheld)
        self._heap_on = True

    def _evict(self, victim: Block) -> None:
        if self._lru_policy:
            del self._members[victim]  # type: ignore[union-attr]  # (LRUPolicy.evict: it leaves the order)
        else:
            self._policy.evict(victim)
        self.evictions += 1
        if self._heap_on:
            del self._stamps[victim]

    def _use(self, block: Block) -> None:
        """``block`` was inserted or hit: its stamp is the newest."""
        self._clock += 1
        self._stamps[block] = self._clock
        if block not in self._held:
            self._push(self._clock, block)

    def _push(self, stamp: int, block: Block) -> None:
        heap = self._unheld
        heapq.heappush(heap, (stamp, block))
        if len(heap) > 4 * len(self._stamps) + 1024:  # mostly stale entries: rebuild from the live ones
            held = self._held
            self._unheld = [(s, b) for b, s in self._stamps.items() if b not in held]
            heapq.heapify(self._unheld)

    def remove(self, block: Block) -> None:
        """Drop stored ``block`` on purpose (moved elsewhere, invalidated).

        Raises
        ------
        KeyError
            If ``block`` is not stored.
        ValueError
            If ``block`` is pinned or has readers.
        """
        if block not in self._members:
            raise KeyError(block)
        if not self.is_evictable(block):
            raise ValueError(f"block {block!r} in {self.name} is pinned or read; cannot remove it")
        self._policy.remove(block)
        self.removals += 1
        if self._heap_on:
            del self._stamps[block]

    # -- holds ----------------------------------------------------------------------------------

    def pin(self, block: Block) -> None:
        """Hold stored ``block`` while it is being read or written (counted; KeyError if absent)."""
        if block not in self._members:
            raise KeyError(block)
        self._pins[block] = self._pins.get(block, 0) + 1
        self._hold(block)

    def _hold(self, block: Block) -> None:
        self._held[block] = self._held.get(block, 0) + 1

    def _release(self, block: Block) -> None:
        count = self._held[block]
        if count == 1:
            del self._held[block]
            if self._heap_on:
                self._push(self._stamps[block], block)  # evictable again, at its place in the order
        else:
            self._held[block] = count - 1

    @property
    def evictable_blocks(self) -> int:
        """Stored blocks with no pin and no reader (what :meth:`evict_one` could free)."""
        return len(self._members) - len(self._held)

    def unpin(self, block: Block) -> None:
        """Release one pin of ``block`` (ValueError if it has none)."""
        if self._whole_pins:
            self._pin_whole((block,))
        count = self._pins.get(block, 0)
        if count == 0:
            raise ValueError(f"block {block!r} in {self.name} is not pinned")
        if count == 1:
            del self._pins[block]
        else:
            self._pins[block] = count - 1
        self._release(block)

    def pins(self, block: Block) -> int:
        """Pins currently held on ``block``."""
        whole = sum(entry[0] * key.count(block) for key, entry in self._whole_pins.items()) if self._whole_pins else 0
        return self._pins.get(block, 0) + whole

    def add_reader(self, block: Block) -> None:
        """Take a reader reference to stored ``block`` (KeyError if absent)."""
        if block not in self._members:
            raise KeyError(block)
        self._readers[block] = self._readers.get(block, 0) + 1
        self._reader_refs += 1
        self._hold(block)

    def drop_reader(self, block: Block) -> None:
        """Give back one reader reference to ``block`` (ValueError if it has none)."""
        if self._whole_pins:
            self._pin_whole((block,))
        count = self._readers.get(block, 0)
        if count == 0:
            raise ValueError(f"block {block!r} in {self.name} has no readers")
        if count == 1:
            del self._readers[block]
        else:
            self._readers[block] = count - 1
        self._reader_refs -= 1
        self._release(block)

    def readers(self, block: Block) -> int:
        """Reader references currently held on ``block``."""
        return self._readers.get(block, 0)
