"""Whole runs are the same with the cache layer's run calls and with the per-block code they
replaced (issue 23, item 1, part 2): the records of cached runs -- write-through and write-back,
swaps, lower tiers, the remote pool, read-in-place domains -- are bit for bit those of a run in
which the per-block versions (kept here as the reference) are patched back in."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim
from kvsim.kv.index import KVIndex
from kvsim.kv.store import BlockStore
from kvsim.serving.cache.domain_pool import DomainPool, DomainStore
from kvsim.serving.cache.instance_cache import InstanceCache
from kvsim.serving.cache.prefix_loader import PrefixLoader
from kvsim.serving.cache.tiers import SystemCache
from kvsim.serving.cache.writer import CacheWriter
from kvsim.sim import build

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
import speed_cases  # noqa: E402
from test_offload import STRESS  # noqa: E402

# -- the per-block reference ------------------------------------------------------------------

def evict_run(store, n):
    victims = []
    for _ in range(n):
        victim = store.evict_one()
        if victim is None:
            break
        victims.append(victim)
    return victims


def discard_run(index, blocks, store):
    for block in blocks:
        index.discard(block, store)


def longest_prefix(index, hashes, usable=None):
    for i, block in enumerate(hashes):
        where = index._where.get(block)
        if not where or (usable is not None and not any(usable(store) for store in where)):
            return i
    return len(hashes)


def tier_breakdown(index, hashes, n, rank, usable=None):
    if n > len(hashes):
        raise ValueError(n)
    best = []
    for block in hashes[:n]:
        candidates = [s for s in index._where.get(block, ()) if usable is None or usable(s)]
        if not candidates:
            raise KeyError(block)
        best.append(min(candidates, key=rank))
    return best


def write_down(self, seq, blocks, only=None):
    if not blocks:
        return
    cache, system = self.cache, self.system
    g = cache.geometry
    targets = {}
    if only is not None:
        same = [only]
    elif system.remote:
        same = None
    else:
        same = system.lower_stores(cache.node, blocks[0])
    for block in blocks:
        for store in (same if same is not None else system.lower_stores(cache.node, block)):
            if block not in store:
                targets.setdefault(id(store), (store, []))[1].append(block)
    for store, group in targets.values():
        per_card = len(group) * g.block_bytes / g.tp
        io = system.io(store, True, cache.node, g.block_bytes / g.tp)
        done = system.write(store, self._paths(store), per_card, per_card * g.tp, io)
        if done is None:
            continue
        if seq is not None:
            cache.record_written(seq, per_card * g.tp)
        for block in group:
            cache.hbm.pin(block)

        def stored(_event, store=store, group=group):
            for block in group:
                cache.hbm.unpin(block)
            system.file(store, group)
            cache.wake()

        done.callbacks.append(stored)


def file(self, store, blocks):
    evicted = []
    for block in blocks:
        out = self.index.insert(store, block)
        if out:
            evicted.extend(out)
    if evicted and self.spec.write_policy == "write_back":
        self.cascade(store, evicted)


def cache_decoded(self, seq):
    cache = self.cache
    g = cache.geometry
    hbm, index = cache.hbm, self.system.index
    first = seq.shared_tokens // g.block_tokens
    full = min(seq.kv_tokens // g.block_tokens, len(seq.sequence_hashes))
    new_blocks = []
    for block in seq.sequence_hashes[first:full]:
        if block in hbm:
            continue
        if not cache.pool.take(g.pages_per_block):
            break
        if index.insert(hbm, block) is None:
            cache.pool.give(g.pages_per_block)
            break
        if cache.domain_pool is not None:
            cache.domain_pool.homed(block, cache)
        new_blocks.append(block)
    if new_blocks and self.system.spec.write_policy == "write_through":
        self.write_down(seq, new_blocks)


def reclaim(self, shortfall_pages):
    cache = self.cache
    if cache.domain_pool is not None:
        cache.domain_pool.reclaim(cache, shortfall_pages)
        return
    g = cache.geometry
    if cache.hbm.evictable_blocks * g.pages_per_block < shortfall_pages:
        return
    victims = []
    while len(victims) * g.pages_per_block < shortfall_pages:
        victim = cache.hbm.evict_one()
        if victim is None:
            break
        self.system.index.discard(victim, cache.hbm)
        victims.append(victim)
    cache.pool.give(len(victims) * g.pages_per_block)
    if victims and self.system.spec.write_policy == "write_back":
        self.write_back(victims)


def write_back(self, blocks):
    cache, system = self.cache, self.system
    g = cache.geometry
    targets = {}
    for block in blocks:
        lower = system.lower_stores(cache.node, block)
        if lower and block not in lower[0]:
            targets.setdefault(id(lower[0]), (lower[0], []))[1].append(block)
    for target, group in targets.values():
        io = system.io(target, True, cache.node, g.block_bytes / g.tp)
        done = system.write(target, self._paths(target), len(group) * g.block_bytes / g.tp,
                            len(group) * g.block_bytes, io)
        if done is not None:
            done.callbacks.append(lambda _event, target=target, group=group: system.file(target, group))


def read_remote_run(self, seq, blocks):
    return sum(self.read_remote(seq, block) for block in blocks)


def touched_run(self, blocks, stored):
    for block in blocks:
        if block in stored:
            self.touched(block)


def unheld(store, blocks, count):
    found = []
    for block in blocks:
        if store.is_evictable(block):
            found.append(block)
            if len(found) == count:
                break
    return found


def read_run(store, blocks):
    hits = 0
    for block in blocks:
        if store.lookup(block):
            store.add_reader(block)
            hits += 1
    return hits


def lookup_pin_run(store, blocks):
    for block in blocks:
        store.lookup(block)
        store.pin(block)


def drop_reader_each(store, blocks):
    for block in blocks:
        store.drop_reader(block)


def groups(self, to_load):
    found = {}
    for _, store, source_id in to_load:
        kind, holder = self.access.source(self.cache, store, source_id)
        found.setdefault((id(store), id(holder)), (store, holder, kind, []))[3].append(source_id)
    return found


def touch_below(self, node, blocks, loads):
    skip = {}
    for _block, store, source_id in loads:
        if self.rank[id(store)]:
            skip.setdefault(id(store), set()).add(source_id)
    for store in self._node_stores(node):
        self._touch(store, blocks, skip)
    shards = {}
    for block in blocks if self.remote else ():
        store = self.remote_store(block)
        shards.setdefault(id(store), (store, []))[1].append(block)
    for store, group in shards.values():
        self._touch(store, group, skip)


def missing_below(self, node, blocks, first_only=False):
    local = self._node_stores(node)
    if first_only and local:
        local, remote = local[:1], False
    else:
        remote = bool(self.remote)
    found = []
    for pos, block in enumerate(blocks):
        stores = local + ([self.remote_store(block)] if remote else [])
        for place, store in enumerate(stores):
            if block not in store:
                key = next((e for e in found if e[2] is store), None)
                if key is None:
                    found.append((pos, place, store, [block]))
                else:
                    key[3].append(block)
    found.sort(key=lambda entry: (entry[0], entry[1]))
    return [(store, group) for _, _, store, group in found]


def prewarm(self, prompts, max_blocks_per_store=2.0, batch=1000, settle=0.005, max_prompts=200_000,
            confidence=0.95):
    from kvsim.serving.cache.warm_rule import UnofferedShare

    locals_ = list(self.dram.values()) + list(self.nvme.values())
    stores = locals_ + self.remote
    if not stores:
        return 0
    budget = {id(s): max_blocks_per_store * s.capacity_blocks for s in stores}
    unoffered = UnofferedShare(confidence)
    used = 0
    for hashes in prompts:
        used += 1
        unoffered.offer(hashes)
        for block in hashes:
            for store in locals_:
                if block not in store:
                    budget[id(store)] -= 1
                self.index.insert(store, block)
            if self.remote:
                store = self.remote_store(block)
                if block not in store:
                    budget[id(store)] -= 1
                self.index.insert(store, block)
        if all(b <= 0 for b in budget.values()) or used >= max_prompts:
            break
        if used % batch == 0 and unoffered.upper_bound() < settle:
            break
    return used


REFERENCE = [
    (BlockStore, "read_run", read_run), (DomainStore, "read_run", read_run),
    (BlockStore, "lookup_pin_run", lookup_pin_run), (DomainStore, "lookup_pin_run", lookup_pin_run),
    (BlockStore, "drop_reader_each", drop_reader_each), (PrefixLoader, "_groups", groups),
    (BlockStore, "evict_run", evict_run), (BlockStore, "unheld", unheld),
    (KVIndex, "discard_run", discard_run), (KVIndex, "longest_prefix", longest_prefix),
    (KVIndex, "tier_breakdown", tier_breakdown),
    (CacheWriter, "write_down", write_down), (CacheWriter, "cache_decoded", cache_decoded),
    (CacheWriter, "reclaim", reclaim), (CacheWriter, "write_back", write_back),
    (SystemCache, "file", file), (InstanceCache, "read_remote_run", read_remote_run), (DomainPool, "touched_run", touched_run),
    (SystemCache, "touch_below", touch_below), (SystemCache, "missing_below", missing_below),
    (SystemCache, "prewarm", prewarm),
]


def _scenarios():
    yield "stress-write_through", kvsim.parse_scenario(
        STRESS.format(dram="2 GiB", write="write_through", preemption="recompute"), "stress.yaml")
    yield "stress-write_back", kvsim.parse_scenario(
        STRESS.format(dram="2 GiB", write="write_back", preemption="swap"), "stress.yaml")
    # a pool of three nodes (blocks spread by id) and a prewarm
    yield "stress-pool3-prewarm", kvsim.parse_scenario(
        STRESS.format(dram="2 GiB", write="write_through", preemption="recompute").replace(
            "remote: {pool_node: nvme-storage-16x}", "remote: {pool_node: nvme-storage-16x, nodes: 3}, prewarm: true"),
        "stress.yaml")
    for case, scale in (("offload-dram_nvme", 0.03), ("mooncake", 0.03), ("domains", 0.01)):
        yield case, speed_cases.scenario_for(case, {"scale": scale, "capacity_per_s": 3.55})


@pytest.mark.parametrize("name, scenario", list(_scenarios()), ids=lambda v: v if isinstance(v, str) else "")
def test_runs_equal_the_per_block_reference(name, scenario, monkeypatch):
    monkeypatch.setenv("KVSIM_BACKEND", "python")  # the reference's classes are the ones patched below
    # the per-block path's run calls against the per-block code they replaced: every cache per
    # block (the extents are held to this path by tests/test_extent_*.py)
    monkeypatch.setattr(build, "KV_EXTENTS", False)
    by_run = kvsim.run(scenario).records_digest()
    # CacheWriter.reclaim is the pool's reclaim hook, bound when an instance is built: patched
    # on the class before the run, it is the reference's that gets bound
    for owner, attribute, reference in REFERENCE:
        monkeypatch.setattr(owner, attribute, reference)
    assert kvsim.run(scenario).records_digest() == by_run


# -- a load's sources, grouped once per stretch of blocks with one source ---------------------

class _Member:
    def __init__(self, domain):
        self.domain = domain


class _Fake:
    """Just what PrefixLoader._groups and CacheAccess.source read: the reader's HBM, the stores'
    tiers, which are domain stores (with their homes) and which instances' own HBM."""

    def __init__(self, homes):
        from types import SimpleNamespace

        from kvsim.serving.cache.access import CacheAccess
        self.stores = {name: BlockStore(name, 1.0, 1.0) for name in ("own", "dram", "nvme", "peer", "d1", "d2")}
        members = [_Member("su0"), _Member("su1"), _Member("su1")]
        pools = {"d1": SimpleNamespace(home={}, members=members), "d2": SimpleNamespace(home={}, members=members)}
        for (pool, block), member in homes.items():
            pools[pool].home[block] = members[member]
        tier_of = {id(s): ("dram" if n == "dram" else "nvme" if n == "nvme" else "hbm") for n, s in self.stores.items()}
        self.system = SimpleNamespace(tier_of=tier_of)
        self.cache = SimpleNamespace(hbm=self.stores["own"], domain="su0")
        self.access = CacheAccess.__new__(CacheAccess)
        self.access.system = self.system
        self.access.pools = {id(self.stores[n]): p for n, p in pools.items()}
        self.access.holder = {id(self.stores["peer"]): members[1]}


@settings(max_examples=300, deadline=None)
@given(homes=st.dictionaries(st.tuples(st.sampled_from(["d1", "d2"]), st.integers(0, 5)), st.integers(0, 2)),
       picks=st.lists(st.tuples(st.sampled_from(["own", "dram", "nvme", "peer", "d1", "d2"]), st.integers(0, 5)),
                      max_size=30))
def test_load_groups_equal_the_per_block_sources(homes, picks):
    fake = _Fake(homes)
    to_load = [(block, fake.stores[name], block) for name, block in picks
               if name not in ("d1", "d2") or (name, block) in homes]
    found, expected = PrefixLoader._groups(fake, to_load), groups(fake, to_load)
    assert list(found) == list(expected)
    assert [(s.name, h, k, ids) for s, h, k, ids in found.values()] == \
        [(s.name, h, k, ids) for s, h, k, ids in expected.values()]
