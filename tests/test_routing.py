"""Cache-aware routing (issue 8, part 2): the one-walk prefix reach against a scan per instance,
the stale index view, and the router's cost and guards worked by hand. The hit rate it reaches
against the infinite-cache bound is in ``test_routing_bound.py``."""

from __future__ import annotations

import hashlib
import random
from types import SimpleNamespace

import pytest

from kvsim.kv import BlockStore, KVIndex
from kvsim.serving.cache_router import CacheAwareRouter
from kvsim.serving.index_view import IndexView
from kvsim.serving.prefix_reach import CacheLayout, reach
from kvsim.serving.specs import CacheAwareSpec

RANK = {"hbm": 0, "dram": 1, "nvme": 2, "remote": 3}


def _store(name: str) -> BlockStore:
    return BlockStore(name, 1e6, 1.0)  # a million blocks: nothing is evicted in these cases


# ---------------------------------------------------------------------------------------------
# the one walk equals one scan per instance
# ---------------------------------------------------------------------------------------------


def _random_cluster(rng: random.Random):
    """Nodes with instances, optional DRAM/NVMe per node, an optional pool; random holdings of
    one prompt's blocks; a random subset of instances as the router's candidates. Some nodes'
    instances share one HBM store (an addressing domain read in place): each of them owns it."""
    index = KVIndex()
    tier_of: dict[int, str] = {}
    nodes = [f"n{i}" for i in range(rng.randint(1, 4))]
    instances = []  # (hbm store, node)
    node_stores: dict[str, list] = {}
    for node in nodes:
        shared = _store(f"{node}.hbm") if rng.random() < 0.3 else None
        for j in range(rng.randint(1, 3)):
            hbm = shared if shared is not None else _store(f"{node}.i{j}.hbm")
            tier_of[id(hbm)] = "hbm"
            instances.append((hbm, node))
        for tier in ("dram", "nvme"):
            if rng.random() < 0.6:
                store = _store(f"{node}.{tier}")
                tier_of[id(store)] = tier
                node_stores.setdefault(node, []).append(store)
    remote = [_store(f"pool{k}") for k in range(rng.choice([0, 0, 1, 2]))]
    for store in remote:
        tier_of[id(store)] = "remote"
    hashes = [rng.randrange(10**9) for _ in range(rng.randint(1, 14))]
    stores = [h for h, _ in instances] + [s for group in node_stores.values() for s in group] + remote
    density = rng.choice([0.2, 0.5, 0.8, 0.95])
    order = [(b, s) for b in hashes for s in stores if rng.random() < density]
    rng.shuffle(order)  # the order stores acquire blocks in must not matter
    for block, store in order:
        index.insert(store, block)
    candidates = [k for k in range(len(instances)) if rng.random() < 0.8] or [0]
    weights = {t: round(rng.uniform(0.0, 1.0), 3) for t in RANK}
    return index, tier_of, instances, node_stores, remote, hashes, candidates, weights


def _scan(index, tier_of, hbm, node_group, remote, hashes, n, weights):
    """What PrefixLoader does for one instance: longest usable prefix, best tier per block."""
    usable_ids = {id(hbm)} | {id(s) for s in node_group} | {id(s) for s in remote}

    def usable(store):
        return id(store) in usable_ids

    depth = index.longest_prefix(hashes[:n], usable)
    sources = index.tier_breakdown(hashes, depth, lambda s: RANK[tier_of[id(s)]], usable)
    return depth, sum(weights[tier_of[id(s)]] for s in sources)


@pytest.mark.parametrize("seed", range(300))
def test_one_walk_equals_a_scan_per_instance(seed):
    rng = random.Random(seed)
    index, tier_of, instances, node_stores, remote, hashes, candidates, weights = _random_cluster(rng)
    n = rng.randint(0, len(hashes))
    layout = CacheLayout(
        hbm=[instances[k][0] for k in candidates], nodes=[instances[k][1] for k in candidates],
        node_stores={node: [(s, RANK[tier_of[id(s)]], weights[tier_of[id(s)]]) for s in group]
                     for node, group in node_stores.items()},
        remote=remote, hbm_credit=weights["hbm"], remote_credit=weights["remote"])
    blocks, credit = reach(hashes, n, index.locations, layout)
    for pos, k in enumerate(candidates):
        hbm, node = instances[k]
        depth, expected = _scan(index, tier_of, hbm, node_stores.get(node, []), remote, hashes, n, weights)
        assert blocks[pos] == depth
        assert credit[pos] == pytest.approx(expected, abs=1e-9)


def test_the_walk_reads_each_block_once():
    rng = random.Random(7)
    index, tier_of, instances, node_stores, remote, hashes, candidates, weights = _random_cluster(rng)
    layout = CacheLayout(hbm=[h for h, _ in instances], nodes=[n for _, n in instances],
                         node_stores={n: [(s, 1, 0.5) for s in g] for n, g in node_stores.items()},
                         remote=remote, hbm_credit=1.0, remote_credit=0.5)
    reads = []

    def locations(block):
        reads.append(block)
        return index.locations(block)

    blocks, _ = reach(hashes, len(hashes), locations, layout)
    # one lookup per block walked, however many candidates: up to the deepest reach (and the
    # block that cut the last candidates, if the walk stopped early)
    assert reads == hashes[:len(reads)]
    assert len(reads) <= min(len(hashes), max(blocks) + 1)


# ---------------------------------------------------------------------------------------------
# the stale view
# ---------------------------------------------------------------------------------------------


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_stale_view_shows_the_index_as_of_the_last_refresh():
    index, clock = KVIndex(), _Clock()
    view = IndexView(index, clock, refresh_s=0.010)
    a, b = _store("a"), _store("b")
    clock.now = 0.003
    index.insert(a, 1)
    view.refresh()
    assert view.locations(1) == ()          # refreshed at 0 s, before the insert
    clock.now = 0.0099
    view.refresh()
    assert view.locations(1) == ()
    clock.now = 0.010
    index.insert(b, 1)                       # made at the refresh instant: shown from it
    view.refresh()
    assert view.locations(1) == (a, b) == index.locations(1)
    clock.now = 0.025
    index.remove(a, 1)
    view.refresh()
    assert view.locations(1) == (a, b)       # removed after the refresh at 20 ms
    clock.now = 0.030
    view.refresh()
    assert view.locations(1) == (b,) == index.locations(1)


@pytest.mark.parametrize("seed", range(20))
def test_at_each_refresh_the_view_equals_the_live_index(seed):
    rng = random.Random(seed)
    index, clock = KVIndex(), _Clock()
    refresh = rng.choice([0.001, 0.01, 0.1])
    view = IndexView(index, clock, refresh)
    stores = [BlockStore(f"s{k}", rng.randint(2, 6), 1.0) for k in range(4)]  # small: evictions too
    for step in range(400):
        clock.now = step * refresh / 7
        store, block = rng.choice(stores), rng.randrange(12)
        if rng.random() < 0.7 or block not in store:
            index.insert(store, block)
        else:
            index.remove(store, block)
        if step % 7 == 6:  # the next change lands on a refresh instant: compare just before it
            clock.now = (step + 1) * refresh / 7
            view.refresh()
            for block in range(12):
                assert view.locations(block) == index.locations(block)


def test_a_view_must_start_with_the_index():
    index = KVIndex()
    index.insert(_store("a"), 1)
    with pytest.raises(ValueError, match="before anything is cached"):
        IndexView(index, _Clock(), 0.01)


# ---------------------------------------------------------------------------------------------
# the router's cost, worked by hand
# ---------------------------------------------------------------------------------------------


def _cluster(block_tokens=16):
    """Node x: instances A (index 0) and C (index 2), a DRAM tier; node y: instance B (index 1)."""
    index = KVIndex()
    hbm = {name: _store(f"{name}.hbm") for name in "ABC"}
    dram = {"x": _store("x.dram")}
    cache = SimpleNamespace(geometry=SimpleNamespace(block_tokens=block_tokens), index=index, extents=False, dram=dram,
                            nvme={}, remote=[], rank={id(dram["x"]): 1}, pending_reclaims=[])
    return cache, hbm, dram


def _instance(index, hbm, node, outstanding=0, pending=0, held=0):
    return SimpleNamespace(index=index, hook=SimpleNamespace(hbm=hbm, node=node), outstanding=outstanding,
                           pending_prompt_tokens=pending, held_kv_tokens=held)


def _seq(hashes, prompt_tokens):
    return SimpleNamespace(hashes=hashes, prompt_tokens=prompt_tokens, prefill_target=prompt_tokens)


def test_cost_is_uncached_prompt_plus_backlog_with_tier_credits():
    cache, hbm, dram = _cluster()
    hashes = list(range(100, 110))           # 10 blocks of 16 tokens: a 160-token prompt
    for block in hashes[:4]:
        cache.index.insert(hbm["A"], block)
    for block in hashes[:8]:
        cache.index.insert(dram["x"], block)
    router = CacheAwareRouter(cache, CacheAwareSpec(), lambda: 0.0)
    idle = [_instance(0, hbm["A"], "x"), _instance(1, hbm["B"], "y"), _instance(2, hbm["C"], "x")]
    # A reaches 8 blocks: 4 in its HBM (credit 1) and 4 in its node's DRAM (0.75): 7 x 16 = 112
    # tokens; C on the same node reaches the 8 in DRAM: 6 x 16 = 96; B nothing
    assert router.cached_credit_tokens(idle, _seq(hashes, 160)) == [112.0, 0.0, 96.0]
    # costs 160 - 112 = 48, 160, 160 - 96 = 64
    assert router.choose(idle, _seq(hashes, 160)) == 0
    # 100 prompt tokens queued on A: 148 against C's 64
    busy_a = [_instance(0, hbm["A"], "x", pending=100), idle[1], idle[2]]
    assert router.choose(busy_a, _seq(hashes, 160)) == 2
    # and KV held on C (decode load, weight 1): A's 148 against C's 64 + 90
    busy_c = [busy_a[0], idle[1], _instance(2, hbm["C"], "x", held=90)]
    assert router.choose(busy_c, _seq(hashes, 160)) == 0
    # a prompt that is one cached block long has nothing cacheable (its last block is computed)
    assert router.cached_credit_tokens(idle, _seq(hashes[:1], 16)) == [0.0, 0.0, 0.0]


def test_a_short_match_is_no_reason_to_go_there():
    cache, hbm, _ = _cluster()
    hashes = list(range(100, 110))
    cache.index.insert(hbm["B"], hashes[0])  # a shared first block: 16 of 160 tokens, 10 %
    instances = [_instance(0, hbm["A"], "x"), _instance(1, hbm["B"], "y"), _instance(2, hbm["C"], "x")]
    dynamo_like = CacheAwareRouter(cache, CacheAwareSpec(cache_threshold=0.0), lambda: 0.0)
    assert [dynamo_like.choose(instances, _seq(hashes, 160)) for _ in range(3)] == [1, 1, 1]
    # at SGLang's 0.3, 10 % counts for nothing: idle instances take turns, lowest index first
    sglang_like = CacheAwareRouter(cache, CacheAwareSpec(), lambda: 0.0)
    assert [sglang_like.choose(instances, _seq(hashes, 160)) for _ in range(4)] == [0, 1, 2, 0]


def test_ties_go_to_the_instance_sent_fewest_then_the_lowest_index():
    cache, hbm, _ = _cluster()
    instances = [_instance(k, hbm[name], node) for k, (name, node) in enumerate(zip("ABC", "xyx"))]
    runs = []
    for _ in range(2):
        router = CacheAwareRouter(cache, CacheAwareSpec(), lambda: 0.0)
        runs.append([router.choose(instances, _seq([1, 2, 3], 48)) for _ in range(7)])
    assert runs[0] == runs[1] == [0, 1, 2, 0, 1, 2, 0]
    # positions change when an instance leaves the role; the counts follow the instances: B and
    # C were sent 2 each, so B (position 0 now) takes it
    assert router.choose(instances[1:], _seq([1, 2, 3], 48)) == 0
    assert router.assigned == {0: 3, 1: 3, 2: 2}


def test_the_load_guard_ignores_the_cache_when_load_is_lopsided():
    cache, hbm, _ = _cluster()
    hashes = list(range(100, 110))
    for block in hashes:
        cache.index.insert(hbm["A"], block)
    spec = CacheAwareSpec(balance_abs_threshold=64, balance_rel_threshold=1.5)
    router = CacheAwareRouter(cache, spec, lambda: 0.0)
    seq = _seq(hashes, 160)

    def loads(a, b, c):
        return [_instance(0, hbm["A"], "x", outstanding=a), _instance(1, hbm["B"], "y", outstanding=b),
                _instance(2, hbm["C"], "x", outstanding=c)]

    # 66 - 1 > 64 and 66 > 1.5 x 1: lopsided, so the least loaded takes it whatever it caches
    assert router.choose(loads(66, 1, 2), seq) == 1 and router.guarded == 1
    # 64 apart is not enough (SGLang: more than the absolute threshold): A's cache wins
    assert router.choose(loads(65, 1, 2), seq) == 0 and router.guarded == 1
    # nor is a large gap between large loads (300 vs 210: 90 apart, but 300 < 1.5 x 210 = 315)
    assert router.choose(loads(300, 210, 250), seq) == 0 and router.guarded == 1


def test_a_stale_router_routes_by_what_it_saw():
    cache, hbm, _ = _cluster()
    clock = _Clock()
    router = CacheAwareRouter(cache, CacheAwareSpec(staleness=1.0), clock)
    hashes = list(range(100, 110))
    clock.now = 0.5
    for block in hashes:
        cache.index.insert(hbm["C"], block)
    instances = [_instance(0, hbm["A"], "x"), _instance(1, hbm["B"], "y"), _instance(2, hbm["C"], "x")]
    clock.now = 0.9
    assert router.cached_credit_tokens(instances, _seq(hashes, 160)) == [0.0, 0.0, 0.0]
    clock.now = 1.0
    assert router.cached_credit_tokens(instances, _seq(hashes, 160)) == [0.0, 0.0, 144.0]
    live = CacheAwareRouter(cache, CacheAwareSpec(), clock)
    assert live.view is None and live.locations == cache.index.locations


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("system, fragment", [
    ("node: h20-8x\n    router: cache_aware",
     "bad.yaml:11: systems.s.router: cache_aware reads the cluster KV index: give the system a kv_cache"),
    ("node: h20-8x\n    kv_cache: {}\n    cache_aware: {staleness: 5 ms}",
     "bad.yaml:12: systems.s.cache_aware: settings of the cache_aware router, but this system's router is "
     "least_outstanding"),
    ("node: h20-8x\n    kv_cache: {}\n    router: cache_aware\n    cache_aware: {staleness: -5 ms}",
     "systems.s.cache_aware.staleness: must not be negative"),
    ("node: h20-8x\n    kv_cache: {}\n    router: cache_aware\n    cache_aware: {staleness: 5}",
     "systems.s.cache_aware.staleness"),
    ("node: h20-8x\n    kv_cache: {}\n    router: cache_aware\n    cache_aware: {dram_credit: 1.5}",
     "systems.s.cache_aware.dram_credit: Input should be less than or equal to 1"),
    ("node: h20-8x\n    kv_cache: {}\n    router: cache_aware\n    cache_aware: {balance_rel_threshold: 0.5}",
     "systems.s.cache_aware.balance_rel_threshold: Input should be greater than or equal to 1"),
    ("pools: {p: {node: h20-8x, instances: 2, role: prefill}, d: {node: h20-8x, instances: 2, role: decode}}\n"
     "    kv_cache: {}\n    decode_router: cache_aware",
     "systems.s.decode_router: cache_aware routes to the instances that compute prompts"),
])
def test_bad_routing_input_is_refused_with_file_line_and_field(refused, system, fragment):
    assert fragment in refused(system)


# ---------------------------------------------------------------------------------------------
# in a run
# ---------------------------------------------------------------------------------------------

DOCUMENTS = """
name: documents
seed: 3
duration: 20 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 12/s}
  prefix: {kind: shared_documents, documents: 200, zipf_s: 0.6, document_tokens: {kind: fixed, value: 4096},
           suffix_tokens: {kind: fixed, value: 128}}
  output_tokens: {kind: fixed, value: 16}
systems:
  live: {node: h20-8x, instances: 4, router: cache_aware, kv_cache: {dram: {capacity: 64 GiB}}}
  zero: {node: h20-8x, instances: 4, router: cache_aware, cache_aware: {staleness: 0 s},
         kv_cache: {dram: {capacity: 64 GiB}}}
  stale: {node: h20-8x, instances: 4, router: cache_aware, cache_aware: {staleness: 2 s},
          kv_cache: {dram: {capacity: 64 GiB}}}
"""


def _digest(records) -> str:
    digest = hashlib.sha256()
    for name in records.fields:
        digest.update(records.column(name).tobytes())
    return digest.hexdigest()


def test_a_zero_staleness_is_the_live_index_and_runs_repeat_bit_for_bit():
    import kvsim

    result = kvsim.run(kvsim.parse_scenario(DOCUMENTS, "d.yaml"))
    digest = {name: _digest(result.run(name).records) for name in ("live", "zero", "stale")}
    # two systems built apart from the same settings (staleness 0 given or left out) route alike
    assert digest["zero"] == digest["live"]
    assert digest["stale"] != digest["live"]
    routing = {name: result.run(name).summary["routing"] for name in digest}
    # one request stream, one bound
    assert len({r["token_hit_rate_infinite_cache"] for r in routing.values()}) == 1
    assert routing["live"]["staleness_s"] == 0.0 and routing["stale"]["staleness_s"] == 2.0
    for r in routing.values():
        assert r["token_hit_rate"] <= r["token_hit_rate_infinite_cache"] + 1e-12
