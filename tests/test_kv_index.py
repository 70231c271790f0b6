"""KVIndex: locations in acquisition order, prefix stops at the first miss, best tier per block,
and (property test) the index always agrees with the stores."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.kv.index import KVIndex
from kvsim.kv.store import BlockStore

RANK = {"hbm": 0, "dram": 1, "nvme": 2, "remote": 3}


def tier(store):
    return RANK[store.name.split(".")[-1]]


def make(name, blocks, policy="lru"):
    return BlockStore(name, blocks * 4.0, 4.0, policy)


def test_locations_follow_acquisition_order():
    idx = KVIndex()
    dram, hbm = make("n0.dram", 4), make("n0.hbm", 4)
    assert idx.locations(5) == ()
    assert idx.insert(dram, 5) == []
    assert idx.insert(hbm, 5) == []
    assert idx.locations(5) == (dram, hbm)
    assert idx.insert(dram, 5) == []  # already there: no duplicate entry
    assert idx.locations(5) == (dram, hbm)
    idx.remove(dram, 5)
    assert idx.locations(5) == (hbm,) and not dram.contains(5)
    idx.remove(hbm, 5)
    assert idx.locations(5) == () and 5 not in idx and len(idx) == 0
    idx.discard(5, hbm)  # harmless when unrecorded


def test_insert_mirrors_evictions_and_refusals():
    idx = KVIndex()
    hbm = make("n0.hbm", 2)
    idx.insert(hbm, 1)
    idx.insert(hbm, 2)
    assert idx.insert(hbm, 3) == [1]
    assert idx.locations(1) == () and idx.locations(3) == (hbm,)
    hbm.pin(2)
    hbm.pin(3)
    assert idx.insert(hbm, 4) is None
    assert idx.locations(4) == () and len(idx) == 2


def test_longest_prefix_stops_at_first_miss():
    idx = KVIndex()
    hbm, remote = make("n0.hbm", 8), make("pool.remote", 8)
    for b in (10, 11):
        idx.insert(hbm, b)
    idx.insert(remote, 12)
    idx.insert(hbm, 14)  # present, but after the gap at 13: unusable
    chain = [10, 11, 12, 13, 14]
    assert idx.longest_prefix(chain) == 3
    assert idx.longest_prefix([]) == 0
    assert idx.longest_prefix([13, 10]) == 0
    assert idx.longest_prefix([10, 11, 12]) == 3
    # A reader that cannot reach the remote pool stops at block 12.
    assert idx.longest_prefix(chain, usable=lambda s: s is hbm) == 2
    assert idx.longest_prefix(chain, usable=lambda s: s is remote) == 0


def test_tier_breakdown_picks_lowest_rank_ties_to_first():
    idx = KVIndex()
    hbm, dram = make("n0.hbm", 8), make("n0.dram", 8)
    nvme, nvme2 = make("n0.nvme", 8), make("n1.nvme", 8)
    idx.insert(nvme, 0)
    idx.insert(dram, 0)
    idx.insert(hbm, 0)  # block 0: in all three -> HBM
    idx.insert(nvme2, 1)
    idx.insert(nvme, 1)  # block 1: two NVMe stores -> the first to get it
    idx.insert(nvme, 2)
    idx.insert(dram, 2)  # block 2: DRAM beats NVMe whatever the order
    chain = [0, 1, 2, 3]
    n = idx.longest_prefix(chain)
    assert n == 3
    assert idx.tier_breakdown(chain, n, tier) == [hbm, nvme2, dram]
    assert idx.tier_breakdown(chain, 2, tier) == [hbm, nvme2]

    def node0(store):
        return store.name.startswith("n0")

    assert idx.tier_breakdown(chain, n, tier, usable=node0) == [hbm, nvme, dram]
    with pytest.raises(KeyError):
        idx.tier_breakdown(chain, 4, tier)
    with pytest.raises(KeyError):
        idx.tier_breakdown(chain, 1, tier, usable=lambda s: s is nvme2)
    with pytest.raises(ValueError):
        idx.tier_breakdown(chain, 5, tier)


UNIVERSE = list(range(10))


@settings(max_examples=120, deadline=None)
@given(
    caps=st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["insert", "insert", "insert", "remove", "pin", "unpin"]),
            st.integers(0, 2),
            st.sampled_from(UNIVERSE),
        ),
        max_size=120,
    ),
)
def test_index_always_matches_stores(caps, ops):
    stores = [
        BlockStore(f"s{i}.{t}", cap * 2.0, 2.0, policy)
        for i, (cap, t, policy) in enumerate(
            zip(caps, ("hbm", "dram", "nvme"), ("lru", "lfu", "s3fifo"))
        )
    ]
    idx = KVIndex()
    for op, i, b in ops:
        s = stores[i]
        if op == "insert":
            idx.insert(s, b)
        elif op == "remove" and s.contains(b) and s.is_evictable(b):
            idx.remove(s, b)
        elif op == "pin" and s.contains(b):
            s.pin(b)
        elif op == "unpin" and s.pins(b):
            s.unpin(b)
        for x in UNIVERSE:
            where = idx.locations(x)
            assert len(where) == len(set(where))
            assert set(where) == {st_ for st_ in stores if st_.contains(x)}
        assert len(idx) == sum(1 for x in UNIVERSE if any(st_.contains(x) for st_ in stores))
        # Prefix of the chain 0..9 by brute force, over all stores and over the first only.
        for usable, pool in ((None, stores), (lambda s_: s_ is stores[0], stores[:1])):
            n = 0
            while n < len(UNIVERSE) and any(p.contains(UNIVERSE[n]) for p in pool):
                n += 1
            assert idx.longest_prefix(UNIVERSE, usable) == n
        n = idx.longest_prefix(UNIVERSE)
        best = idx.tier_breakdown(UNIVERSE, n, tier)
        for x, where in zip(UNIVERSE, best):
            assert where.contains(x)
            assert tier(where) == min(tier(p) for p in stores if p.contains(x))
