"""The LRU store's victim heap picks exactly the block the recency scan would (the least
recently inserted or hit block nothing holds), over random sequences of inserts, hits, pins,
readers, removals and evictions -- without stepping over held blocks (issue 11's reclaim cliff)."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.kv import BlockStore


@pytest.mark.parametrize("heap_after", [0, 3, 10_000])
@pytest.mark.parametrize("seed", range(10))
def test_the_heap_victim_is_the_scan_victim(seed, heap_after, monkeypatch):
    # heap_after: the store switches to its heap at once, after a few held blocks, or never
    monkeypatch.setattr("kvsim.kv.store.HEAP_AFTER", heap_after)
    rng = np.random.default_rng(seed)
    store = BlockStore("s", 40.0, 1.0, "lru")
    pinned: list[int] = []
    read: list[int] = []
    for _ in range(3000):
        assert store._victim() == store._policy.victim(store.is_evictable)  # the scan, as before
        op = rng.integers(0, 8)
        block = int(rng.integers(0, 80))
        if op <= 2:
            store.insert(block)
        elif op == 3:
            store.lookup(block)
        elif op == 4 and block in store:
            store.pin(block)
            pinned.append(block)
        elif op == 5 and block in store:
            store.add_reader(block)
            read.append(block)
        elif op == 6 and (pinned or read):
            if pinned and (not read or rng.random() < 0.5):
                store.unpin(pinned.pop(int(rng.integers(0, len(pinned)))))
            else:
                store.drop_reader(read.pop(int(rng.integers(0, len(read)))))
        elif op == 7:
            if rng.random() < 0.5:
                store.evict_one()
            elif block in store and store.is_evictable(block):
                store.remove(block)
    assert store._heap_on == (heap_after < 10_000)
    if store._heap_on:
        assert len(store._stamps) == len(store)


def test_a_store_full_of_held_blocks_finds_its_one_free_block_without_a_scan():
    store = BlockStore("s", 10_000.0, 1.0, "lru")
    for block in range(10_000):
        store.insert(block)
        if block != 9_000:
            store.add_reader(block)
    # the only free block is far down the recency order: the scan gives up after a few held
    # blocks and the heap pops its way to it once
    assert store.evict_one() == 9_000 and store._heap_on
    assert store.evict_one() is None
    assert store.insert(10_001) == []  # the room it left
    store.drop_reader(3)  # free again, and older than 10_001
    assert store.insert(10_002) == [3]
