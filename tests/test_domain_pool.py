"""One addressing domain's HBM as one KV pool (``peer_hbm: read_in_place``): readers, moves,
domain-wide eviction (an exact LRU replay of the Mooncake trace), and the remote-read rate.

The pool is driven directly on a built (not running) system: one H20 server, eight single-card
instances in one NVLink domain.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from types import SimpleNamespace

import pytest
import simpy

import kvsim
from conftest import SHARED
from kvsim.kv import BlockStore
from kvsim.metrics.domain_summary import DomainLevels
from kvsim.metrics.records import RequestRecords
from kvsim.network import topology as topo
from kvsim.rng import RandomStreams
from kvsim.serving.cache.remote_reads import RemoteReads
from kvsim.sim import check_scenario
from kvsim.sim.build import build_system

TRACE = SHARED / "traces" / "mooncake_conversation_trace.jsonl"
BLOCK_TOKENS = 512
KV_PER_TOKEN = 147_456  # Qwen3-8B bf16

TEXT = """
name: pool
duration: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  block_tokens: 512
  input_tokens: {kind: fixed, value: 1000}
  output_tokens: {kind: fixed, value: 10}
systems:
  s: {node: h20-8x, kv_cache: {peer_hbm: read_in_place}}
"""


def _domain(cache_blocks: int):
    """The built system's one domain pool, each member left with ``cache_blocks`` blocks of free
    pages (the rest taken as if sequences held them)."""
    scenario = kvsim.parse_scenario(TEXT, "p.yaml")
    env = simpy.Environment()
    system = build_system(env, scenario.points[0].spec, check_scenario(scenario)[(0, "s")], RequestRecords(),
                          RandomStreams(0), BLOCK_TOKENS)
    (pool,) = system.cache.domain_pools.values()
    for member in pool.members:
        assert member.pool.take(member.pool.free_blocks - cache_blocks * member.geometry.pages_per_block)
    return env, system, pool


def _file(system, pool, member, block) -> None:
    """``member`` computed ``block``: its pages (taken, reclaiming if short) become the cached copy."""
    assert member.pool.take(member.geometry.pages_per_block)
    assert system.cache.index.insert(pool.store, block) == []
    pool.homed(block, member)


def test_one_domain_is_one_lru_over_the_union_of_its_cards():
    """With one domain over all cards, what the pool keeps is exactly a single LRU cache of the
    union's capacity, block for block, on the Mooncake conversation trace."""
    if not TRACE.exists():
        pytest.skip(f"{TRACE} not present")
    with TRACE.open() as f:
        requests = [json.loads(line)["hash_ids"] for line in f][:1500]
    env, system, pool = _domain(cache_blocks=250)
    members, store = pool.members, pool.store
    capacity = 250 * len(members)
    hits = 0
    for i, hash_ids in enumerate(requests):
        member = members[i % len(members)]  # requests spread over the instances
        for block in hash_ids:
            if store.lookup(block):
                hits += 1
            else:
                _file(system, pool, member, block)
        env.run()  # let the moves between cards land
    reference, ref_hits = OrderedDict(), 0
    for hash_ids in requests:
        for block in hash_ids:
            if block in reference:
                ref_hits += 1
                reference.move_to_end(block)
            else:
                reference[block] = None
                if len(reference) > capacity:
                    reference.popitem(last=False)
    assert hits == ref_hits and store.evictions > 0 and pool.moves > 0
    assert store.used_blocks == capacity == len(system.cache.index) and all(b in store for b in reference)
    # every page is accounted for: each member's pages hold exactly the blocks homed there
    for member in members:
        ppb = member.geometry.pages_per_block
        assert member.pool.free_blocks == 250 * ppb - ppb * len(pool.resident[id(member)])
    # eight separate LRU caches of a card each (no domain) keep less of the trace
    separate = [BlockStore(f"c{k}", 250.0, 1.0) for k in range(len(members))]
    own_hits = 0
    for i, hash_ids in enumerate(requests):
        cache = separate[i % len(separate)]
        for block in hash_ids:
            own_hits += cache.lookup(block)
            cache.insert(block)
    assert own_hits < hits


def test_a_short_instance_moves_its_cached_blocks_to_peers_with_room_over_nvlink():
    env, system, pool = _domain(cache_blocks=2)
    first, second, third = pool.members[:3]
    ppb = first.geometry.pages_per_block
    _file(system, pool, first, "a")
    _file(system, pool, first, "b")
    assert first.pool.free_blocks == 0
    # a sequence needs a block's pages: the domain has room elsewhere, so nothing is evicted;
    # the instance moves out its unheld blocks (up to 1 % of its pages at once), each to the
    # peer with the most room (the lowest index on ties)
    assert first.pool.take(ppb)
    assert pool.home["b"] is second and pool.home["a"] is third and pool.store.evictions == 0
    assert "a" in pool.store and "b" in pool.store and pool.moves == 2
    assert first.pool.free_blocks == ppb and second.pool.free_blocks == third.pool.free_blocks == ppb
    # in flight until the copy lands: two blocks of 512 tokens x 147,456 B leave over first's
    # one NVLink port (450 GB/s, shared by the two flows) plus 3 us
    landing = pool.inflight["a"]
    env.run(landing)
    assert env.now == pytest.approx(2 * BLOCK_TOKENS * KV_PER_TOKEN / 450e9 + topo.SCALE_UP_LATENCY_S, rel=1e-9)
    assert "a" not in pool.inflight and pool.store.pins("a") == 0
    # the moves crossed the scale-up links only: first's link out, the peers' links in
    env.run()
    moved = system.network.bytes_moved(("node0/gpu0", "su0"))
    assert moved == pytest.approx(2 * BLOCK_TOKENS * KV_PER_TOKEN)


def test_a_block_read_by_k_instances_is_one_copy_freed_only_after_the_last_reader():
    env, system, pool = _domain(cache_blocks=1)
    store, members = pool.store, pool.members
    ppb = members[0].geometry.pages_per_block
    block_bytes = BLOCK_TOKENS * KV_PER_TOKEN
    levels = DomainLevels(0.0, 10.0, system._domains())
    physical0, logical0 = levels.measure("su0")
    _file(system, pool, members[0], "doc")
    k = 3
    for _ in range(k):  # sequences on k instances read it in place
        store.add_reader("doc")
    physical, logical = levels.measure("su0")
    assert physical - physical0 == pytest.approx(block_bytes)      # one copy
    assert logical - logical0 == pytest.approx(k * block_bytes)    # seen k times
    for member in members[1:]:  # the rest of the domain fills with unread blocks
        _file(system, pool, member, f"x{member.index}")
    # the domain is full; the instance holding "doc" cannot free its pages while it is read
    assert not members[0].pool.take(ppb) and "doc" in store
    # another instance short of pages evicts the domain's least recent *unread* block
    assert members[1].pool.take(ppb)
    assert "doc" in store and "x1" not in store and store.evictions == 1
    for _ in range(k - 1):
        store.drop_reader("doc")
    pool.flush(members[0])
    assert "doc" in store  # one reader left
    store.drop_reader("doc")
    assert "doc" in store  # no reader, still cached until eviction picks it
    pool.flush(members[0])
    assert "doc" not in store and "doc" not in system.cache.index
    assert members[0].pool.free_blocks == ppb
    # left: the other members' blocks but x1, and the pages members[1] took for a sequence
    assert levels.measure("su0")[0] == pytest.approx(physical0 + (len(members) - 1) * block_bytes)


def test_remote_reads_share_a_holders_link_among_the_steps_reading_it():
    now = SimpleNamespace(now=1.0)
    system = SimpleNamespace(env=now, window=(0.0, 10.0), topology=None)
    reads = RemoteReads(system)
    geometry = SimpleNamespace(block_bytes_per_card=16 * 100.0, block_tokens=16)
    rate = 450e9 * 0.8
    holder, other = object(), object()
    a, b, c = (SimpleNamespace(remote_read_Bps=rate, geometry=geometry, gpus=[]) for _ in range(3))
    assert reads.begin(a, {holder: 1000}) == rate                 # alone on the holder's link
    assert reads.begin(b, {holder: 1000}) == rate / 2             # two steps share it
    # 1000 tokens from the busy holder (now 3 readers) and 3000 from an idle one: the reader's
    # own link carries 4000, the busy holder's a third of its rate for 1000: max(4000, 3000)
    assert reads.begin(c, {holder: 1000, other: 3000}) == pytest.approx(rate * 4000 / 4000)
    reads.end({holder: 1000})
    reads.end({holder: 1000})
    assert reads.begin(b, {holder: 1000}) == rate / 2             # c is still reading
    assert reads.pair_bytes[(id(holder), id(a))] == pytest.approx(1000 * 100.0)


def _one_at_a_time(free: list[int], pages_per_block: int, blocks: int) -> list[int]:
    """Blocks per peer when each goes alone to the peer with the most free pages (at least one
    block's; the lowest index on ties): the rule ``fill_plan`` works out in closed form."""
    free, counts = list(free), [0] * len(free)
    for _ in range(blocks):
        best = None
        for k, f in enumerate(free):
            if f >= pages_per_block and (best is None or f > free[best]):
                best = k
        if best is None:
            break
        free[best] -= pages_per_block
        counts[best] += 1
    return counts


@pytest.mark.parametrize("seed", range(4))
def test_fill_plan_gives_each_peer_what_one_block_at_a_time_to_the_roomiest_would(seed):
    import random

    from kvsim.serving.cache.domain_pool import fill_plan

    rng = random.Random(seed)
    for _ in range(2000):
        p = rng.choice([1, 1, 2, 3, 32])
        free = [rng.randint(0, 12 * p) for _ in range(rng.randint(1, 7))]
        blocks = rng.randint(0, 40)
        plan = fill_plan(free, p, blocks)
        counts = [0] * len(free)
        for k, n in plan:
            counts[k] = n
        assert counts == _one_at_a_time(free, p, blocks), (free, p, blocks)
        # one chunk per peer that takes some, roomiest first (lowest index on ties)
        assert [k for k, _ in plan] == sorted((k for k, n in enumerate(counts) if n), key=lambda k: (-free[k], k))
