"""Eviction policies: hand-worked sequences for LRU, LFU and S3-FIFO, and pinned-block skipping."""

from __future__ import annotations

import pytest

from kvsim.kv.eviction import EVICTION_POLICIES, LFUPolicy, LRUPolicy, S3FIFOPolicy


def admit(policy, capacity, block, pinned=()):
    """What a store does: if full, evict the policy's victim, then insert. Returns the victim."""
    gone = None
    if len(policy) >= capacity:
        gone = policy.victim(lambda b: b not in pinned)
        assert gone is not None
        policy.evict(gone)
    policy.insert(block)
    return gone


def everything(_block):
    return True


def test_kinds_map_to_classes():
    assert EVICTION_POLICIES == {"lru": LRUPolicy, "lfu": LFUPolicy, "s3fifo": S3FIFOPolicy}


@pytest.mark.parametrize("kind", sorted(EVICTION_POLICIES))
def test_common_contract(kind):
    policy = EVICTION_POLICIES[kind](4)
    assert policy.victim(everything) is None  # empty
    for b in (10, 11, 12):
        policy.insert(b)
    assert len(policy) == 3 and 11 in policy and 13 not in policy
    with pytest.raises(ValueError):
        policy.insert(11)
    # Nothing evictable -> None, and the resident set is unchanged by the search.
    assert policy.victim(lambda b: False) is None
    assert len(policy) == 3 and all(b in policy for b in (10, 11, 12))
    # The victim is always one the caller allows.
    assert policy.victim(lambda b: b == 12) == 12
    policy.remove(11)
    assert 11 not in policy and len(policy) == 2
    with pytest.raises(ValueError):
        EVICTION_POLICIES[kind](-1)


def test_lru_order():
    p = LRUPolicy(3)
    for b in (1, 2, 3):
        admit(p, 3, b)
    p.touch(1)  # recency now 2, 3, 1
    assert p.victim(everything) == 2
    assert admit(p, 3, 4) == 2  # 3, 1, 4
    p.touch(3)  # 1, 4, 3
    assert p.victim(everything) == 1
    assert p.victim(lambda b: b != 1) == 4  # pinned 1 is passed over, the next-oldest goes
    assert admit(p, 3, 5, pinned=(1,)) == 4  # 1, 3, 5
    assert admit(p, 3, 6) == 1


def test_lfu_frequency_then_recency():
    p = LFUPolicy(3)
    for b in "abc":
        admit(p, 3, b)
    p.touch("a")
    p.touch("a")  # a: 3
    p.touch("c")  # c: 2, b: 1
    assert [p.frequency(b) for b in "abc"] == [3, 1, 2]
    assert p.victim(everything) == "b"
    assert p.victim(lambda b: b != "b") == "c"
    assert admit(p, 3, "d") == "b"  # d enters at 1 and is now the least frequent
    assert p.victim(everything) == "d"
    p.touch("c")  # c reaches 3 after a did: equal counts, a is the less recent
    assert p.victim(lambda b: b != "d") == "a"
    p.touch("a")  # a: 4, c: 3, d: 1
    p.remove("d")
    assert p.victim(everything) == "c"


def test_lfu_keeps_old_frequent_block_that_lru_would_drop():
    lfu, lru = LFUPolicy(2), LRUPolicy(2)
    for p in (lfu, lru):
        admit(p, 2, "hot")
        p.touch("hot")
        admit(p, 2, "new")
    assert lfu.victim(everything) == "new"
    assert lru.victim(everything) == "hot"


def test_lfu_bucket_list_survives_gaps():
    # a climbs to 3 alone, leaving buckets 1 and 2 empty; a newcomer at 1 must rank first.
    p = LFUPolicy(4)
    p.insert("a")
    p.touch("a")
    p.touch("a")
    p.insert("b")
    assert p.victim(everything) == "b"
    p.touch("b")
    p.touch("b")
    p.touch("b")  # b: 4 > a: 3
    assert p.victim(everything) == "a"
    p.remove("a")
    assert p.victim(everything) == "b" and len(p) == 1


def test_s3fifo_queue_sizes():
    p = S3FIFOPolicy(10)
    assert (p.small_target, p.main_target, p.ghost_capacity) == (1, 9, 9)
    q = S3FIFOPolicy(35)
    assert (q.small_target, q.main_target, q.ghost_capacity) == (3, 32, 31)


def test_s3fifo_one_hit_wonders_leave_through_small_and_ghost_hit_goes_to_main():
    p = S3FIFOPolicy(10)
    for b in range(10):
        assert admit(p, 10, b) is None
    assert p.queues() == (tuple(range(10)), (), ())  # everything enters S first
    p.touch(0)
    p.touch(0)  # 0: 2 hits -> promotable
    p.touch(1)  # 1: 1 hit  -> below the released threshold of 2
    for _ in range(3):
        p.touch(5)  # 5: capped at 3
    assert (p.frequency(0), p.frequency(1), p.frequency(5)) == (2, 1, 3)

    # M (0 blocks) is within its share, so evict from S: 0 is promoted (counter cleared),
    # 1 is the victim and its id goes to the ghost queue.
    assert admit(p, 10, 10) == 1
    assert p.queues() == ((2, 3, 4, 5, 6, 7, 8, 9, 10), (0,), (1,))
    assert p.frequency(0) == 0

    assert admit(p, 10, 11) == 2  # a one-hit wonder, FIFO order
    assert p.queues() == ((3, 4, 5, 6, 7, 8, 9, 10, 11), (0,), (1, 2))

    # 1 is asked for again while its id is in G: 3 is evicted from S, then 1 goes to M.
    assert admit(p, 10, 1) == 3
    assert p.queues() == ((4, 5, 6, 7, 8, 9, 10, 11), (0, 1), (2, 3))
    assert p.frequency(1) == 0

    # 4 is cold, 5 was hit three times: S evicts 4, then on the next eviction promotes 5.
    assert admit(p, 10, 12) == 4
    assert admit(p, 10, 13) == 6
    assert p.queues() == ((7, 8, 9, 10, 11, 12, 13), (0, 1, 5), (2, 3, 4, 6))


def test_s3fifo_main_queue_is_a_two_bit_clock():
    p = S3FIFOPolicy(10)
    for b in range(10):
        admit(p, 10, b)
    for b in range(10):
        p.touch(b)
        p.touch(b)
    # All of S is promotable: the S scan moves 0..9 to M and finds no victim, so the victim
    # comes from M, whose oldest block (0, counter cleared by the move) goes. Not to G: only
    # S evictions are remembered. (Block id 0 also checks that a falsy id is a real answer.)
    assert admit(p, 10, 10) == 0
    assert p.queues() == ((10,), tuple(range(1, 10)), ())
    p.touch(1)
    p.touch(2)
    p.touch(2)
    assert admit(p, 10, 11) == 10  # M holds 9 = its share, so S gives up its cold block
    assert p.queues() == ((11,), tuple(range(1, 10)), (10,))
    assert admit(p, 10, 10) == 11  # ghost hit: 11 leaves S, 10 enters M (M now 10 > 9)
    assert p.queues() == ((), (1, 2, 3, 4, 5, 6, 7, 8, 9, 10), (11,))

    # M is over its share: 1 (count 1) goes round with count 0, 2 (count 2) with count 1,
    # 3 (count 0) is the victim.
    assert admit(p, 10, 12) == 3
    assert p.queues() == ((12,), (4, 5, 6, 7, 8, 9, 10, 1, 2), (11,))
    assert (p.frequency(1), p.frequency(2)) == (0, 1)


def test_s3fifo_pinned_blocks_are_rotated_not_evicted():
    p = S3FIFOPolicy(10)
    for b in range(10):
        admit(p, 10, b)
    assert p.victim(lambda b: b != 0) == 1
    # The victim search rotated pinned 0 to the head of S; nothing left the cache.
    assert p.queues() == ((1, 2, 3, 4, 5, 6, 7, 8, 9, 0), (), ())
    assert p.victim(lambda b: False) is None
    assert len(p) == 10
    # In M: a pinned block with count 0 is passed over as well.
    q = S3FIFOPolicy(10)
    for b in range(10):
        admit(q, 10, b)
        q.touch(b)
        q.touch(b)
    assert q.victim(lambda b: b not in (0, 1)) == 2
    assert q.queues() == ((), (2, 3, 4, 5, 6, 7, 8, 9, 0, 1), ())
    assert q.victim(lambda b: False) is None


def test_s3fifo_ghost_queue_is_bounded_fifo():
    p = S3FIFOPolicy(10)
    for b in range(100):
        admit(p, 10, b)
    # Blocks 0..89 were evicted from S in order; G keeps the latest 9 ids.
    assert p.queues() == (tuple(range(90, 100)), (), tuple(range(81, 90)))
    p.remove(95)  # an explicit removal is not an eviction: no ghost entry
    assert p.queues()[2] == tuple(range(81, 90))


def test_s3fifo_threshold_one_promotes_after_a_single_hit():
    p = S3FIFOPolicy(10, move_to_main_threshold=1)
    for b in range(10):
        admit(p, 10, b)
    p.touch(0)
    assert admit(p, 10, 10) == 1
    assert p.queues()[1] == (0,)
    with pytest.raises(ValueError):
        S3FIFOPolicy(10, move_to_main_threshold=4)
