"""Prefill chunk runs across cached-page reclaims (:mod:`kvsim.serving.chunk_run`): a chunk whose
pages the pool gives by evicting cached blocks from the instance's HBM no longer stops the run;
the reclaim is made when the run is settled, and whatever reads or changes the stores or the
index settles it first. The step-by-step engine (``engine.coalesce: false``) is the reference:
records, summaries and time series equal bit for bit, and what the cache looks like to a reader
at any time equal too.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import kvsim
from kvsim.serving.cache.segments import prompt_address, segment_range
from kvsim.serving.cache.tiers import SystemCache
from kvsim.serving.cache.writer import CacheWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_coalesce import _assert_equal, _both, _start_with_each_system  # noqa: E402


@pytest.fixture(autouse=True)
def _python_backend(monkeypatch):
    """The pure-Python engine (tests/test_backends.py holds the compiled one equal to it)."""
    monkeypatch.setenv("KVSIM_BACKEND", "python")


# Eight small instances (Qwen3-8B on one H20 each, room for about 20k tokens of KV) whose HBM
# caches fill with 40 documents' blocks, long prompts in 256-token chunks: most chunk runs need
# cached pages reclaimed part-way. One system routes on the live index (cache_aware) and writes
# through to DRAM (copies landing and loads from DRAM during runs), one routes on each
# instance's HBM (prefix_aware).
RECLAIM = """
name: reclaim-runs
seed: 11
duration: {duration}
warmup: 1 s
model: qwen3-8b
engine: {{async_scheduling: {async_scheduling}}}
workload:
  arrival: {{kind: poisson, rate: {rate}/s}}
  prefix: {{kind: shared_documents, documents: 40, zipf_s: 0.8, document_tokens: {{kind: fixed, value: 2048}},
           suffix_tokens: {{kind: uniform, low: 16, high: 3000}}}}
  output_tokens: {{kind: lognormal, median: 40, sigma: 1.0, max: 400}}
  timeout: 12 s
systems:
  routed: {{node: h20-8x, instance: {{tp: 1, memory_utilization: 0.207, max_batched_tokens: 256}},
           router: cache_aware, kv_cache: {{dram: {{capacity: 8 GiB}}{write_policy}}}}}
  prefix: {{node: h20-8x, instance: {{tp: 1, memory_utilization: 0.207, max_batched_tokens: 256}},
           router: prefix_aware, kv_cache: {{{hbm_policy}}}}}
"""


def reclaim_scenario(tmp_path: Path, rate: float = 6, duration: str = "40 s", async_scheduling: bool = False,
                     write_policy: str = "", hbm_policy: str = ""):
    path = tmp_path / "reclaim.yaml"
    path.write_text(RECLAIM.format(rate=rate, duration=duration, async_scheduling=str(async_scheduling).lower(),
                                   write_policy=write_policy, hbm_policy=hbm_policy))
    return kvsim.load_scenario(path)


def _caches(monkeypatch) -> dict[str, list[SystemCache]]:
    """Every system's cache built from now on, by system name (in build order)."""
    import kvsim.sim.run as run_module
    build = run_module.build_system
    built: dict[str, list[SystemCache]] = {}

    def keep(*args, **kwargs):
        system = build(*args, **kwargs)
        built.setdefault(system.name, []).append(system.cache)
        return system

    monkeypatch.setattr(run_module, "build_system", keep)
    return built


def _observer(log: list):
    """A reader of the cache at odd times: first as the routers read it (each instance's cached
    prefix of some earlier prompts, the cache-aware router's credits for them), then each HBM
    store's blocks, evictable blocks and evictions, the index's size and where it holds the
    prompts' first blocks -- after settling pending reclaims, as every reader does."""
    def observe(system):
        env, cache = system.env, system.cache
        router, instances = system.front.router, system.instances
        block_tokens = cache.geometry.block_tokens
        step = 0
        while True:
            yield env.timeout(0.0937)
            step += 1
            seen = system.front.prompt_hashes
            prompts = [SimpleNamespace(hashes=h, prompt_tokens=len(h) * block_tokens,
                                       prefill_target=len(h) * block_tokens, segments=None)
                       for h in (seen[(step * k) % len(seen)] for k in (1, 7, 31) if seen) if h is not None]
            routed = [[inst.cached_prefix_tokens(seq) for inst in instances] for seq in prompts]
            if hasattr(router, "cached_credit_tokens"):
                routed += [router.cached_credit_tokens(instances, seq) for seq in prompts]
            if cache.pending_reclaims:
                cache.settle_reclaims()
            hbm = [(len(s), s.evictable_blocks, s.evictions) for s in cache.hbm]
            if cache.extents:  # (an instance's own HBM kept as extents: blocks addressed in chains)
                where = [cache.index.locations(chain, pos) for seq in prompts
                         for chain, start, end in segment_range(prompt_address(seq, block_tokens), 0, 4)
                         for pos in range(start, end)]
                size = cache.index.blocks()
            else:
                where = [cache.index.locations(block) for seq in prompts for block in seq.hashes[:4].tolist()]
                size = len(cache.index)
            probes = [tuple(cache.hbm.index(s) for s in stores if s in cache.hbm) for stores in where]
            log.append((system.name, env.now, routed, size, hbm, probes))
    return observe


def test_chunk_runs_cross_reclaims_and_equal_the_step_by_step_engine(tmp_path, monkeypatch):
    """Runs cross steps that reclaim cached pages (deferred reclaims made), while other
    instances admit (their lookups read the index), routers read the index and the HBM stores,
    copies land and the tier sampler reads the stores: the records, summaries and time series
    equal the step-by-step engine's, and so does what a reader of the cache sees at odd times."""
    caches = _caches(monkeypatch)
    logs: dict[bool, list] = {False: [], True: []}
    mode = [False]
    _start_with_each_system(monkeypatch, lambda system: _observer(logs[mode[0]])(system))
    # who settled pending reclaims (a reader or changer while a run's reclaim was pending)
    callers: dict[str, int] = {}
    settle = SystemCache.settle_reclaims

    def counted(self):
        name = sys._getframe(1).f_code.co_name
        callers[name] = callers.get(name, 0) + 1
        settle(self)

    monkeypatch.setattr(SystemCache, "settle_reclaims", counted)
    scenario = reclaim_scenario(tmp_path)
    results = {}
    for mode[0] in (False, True):
        results[mode[0]] = kvsim.run(scenario.with_changes({"engine.coalesce": mode[0]}))
    _assert_equal(results[False], results[True])
    assert logs[True] == logs[False] and len(logs[True]) > 500
    routed, prefix = caches["routed"][1], caches["prefix"][1]
    assert caches["routed"][0].reclaims_deferred == caches["prefix"][0].reclaims_deferred == 0  # (step by step)
    assert routed.reclaims_deferred > 300 and prefix.reclaims_deferred > 300, (routed.reclaims_deferred,
                                                                              prefix.reclaims_deferred)
    assert not routed.pending_reclaims and not prefix.pending_reclaims
    # another instance's admission, the cache-aware and the prefix-aware router's reads, copies
    # landing and the sampler each met a pending reclaim
    assert {"admit", "cached_credit_tokens", "cached_prefix_blocks", "stored", "_sample_tiers"} <= callers.keys(), \
        callers


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_deferred_reclaims_with_client_timeouts_and_heavy_load(tmp_path, async_scheduling):
    """More load (aborts on client timeouts cut runs whose reclaims are pending), with and
    without async scheduling."""
    _assert_equal(*_both(reclaim_scenario(tmp_path, rate=14, duration="20 s", async_scheduling=async_scheduling)))


@pytest.mark.parametrize("hbm_policy", ["hbm_eviction: lfu", "hbm_eviction: s3fifo"])
def test_deferred_reclaims_under_other_eviction_policies(tmp_path, hbm_policy):
    _assert_equal(*_both(reclaim_scenario(tmp_path, rate=8, duration="20 s", hbm_policy=hbm_policy)))


def test_write_back_still_stops_a_run_before_a_reclaim(tmp_path, monkeypatch):
    """Under write-back an eviction starts its copies at that instant: the reclaim is not
    deferred, and the run stops before the chunk that needs it, as before."""
    caches = _caches(monkeypatch)
    asked: list[int] = []
    deferrable = CacheWriter.deferrable_blocks

    def counted(self):
        asked.append(deferrable(self))
        return asked[-1]

    monkeypatch.setattr(CacheWriter, "deferrable_blocks", counted)
    scenario = reclaim_scenario(tmp_path, rate=8, duration="20 s", write_policy=", write_policy: write_back")
    _assert_equal(*_both(scenario))
    routed = caches["routed"][1]
    assert routed.reclaims_deferred == 0 and not routed.pending_reclaims
    assert -1 in asked  # (a run did need a reclaim, and was refused it)
    assert caches["prefix"][1].reclaims_deferred > 0  # (the other system, written through, defers)


def test_a_run_stops_where_the_store_has_too_few_evictable_blocks(tmp_path, monkeypatch):
    """The plan counts the store's evictable blocks down: with none left to take it stops."""
    monkeypatch.setattr(CacheWriter, "deferrable_blocks", lambda self: 0)
    caches = _caches(monkeypatch)
    _assert_equal(*_both(reclaim_scenario(tmp_path, rate=8, duration="20 s")))
    assert all(c.reclaims_deferred == 0 for c in caches["routed"] + caches["prefix"])


def test_deferred_reclaims_take_fewer_events(tmp_path, monkeypatch):
    """What it buys: fewer events for the same iterations than runs that stop at every reclaim."""
    import simpy
    counts: dict[str, int] = {}
    schedule = simpy.Environment.schedule
    label = ["lazy"]

    def counting(self, event, priority=1, delay=0):
        counts[label[0]] = counts.get(label[0], 0) + 1
        return schedule(self, event, priority, delay)

    monkeypatch.setattr(simpy.Environment, "schedule", counting)
    scenario = reclaim_scenario(tmp_path).with_changes({"engine.coalesce": True})
    lazy = kvsim.run(scenario)
    label[0] = "stop"
    monkeypatch.setattr(CacheWriter, "deferrable_blocks", lambda self: -1)
    stop = kvsim.run(scenario)
    _assert_equal(stop, lazy)
    assert counts["lazy"] < 0.9 * counts["stop"], counts


def _random_reclaim_scenario(tmp_path: Path, case: int):
    """Small random systems whose HBM caches fill: rates, documents, budgets, memory, routers,
    tiers, timeouts and async scheduling drawn."""
    rng = np.random.default_rng(1000 + case)
    router = str(rng.choice(["cache_aware", "prefix_aware", "least_outstanding", "round_robin"]))
    dram = ", kv_cache: {dram: {capacity: 4 GiB}}" if rng.random() < 0.5 else ", kv_cache: {}"
    if rng.random() < 0.2:
        dram = ", kv_cache: {dram: {capacity: 4 GiB}, nvme: {}}"
    timeout = f"  timeout: {float(rng.uniform(3, 12)):.2f} s\n" if rng.random() < 0.4 else ""
    text = (
        f"name: reclaim-{case}\nseed: {case}\nduration: 12 s\nwarmup: 1 s\nmodel: qwen3-8b\n"
        f"engine: {{async_scheduling: {str(bool(rng.random() < 0.5)).lower()}}}\n"
        f"workload:\n  arrival: {{kind: poisson, rate: {float(rng.uniform(2, 14)):.2f}/s}}\n"
        f"  prefix: {{kind: shared_documents, documents: {int(rng.integers(10, 80))}, zipf_s: 0.8, "
        f"document_tokens: {{kind: fixed, value: {int(rng.choice([1024, 2048, 4096]))}}}, "
        f"suffix_tokens: {{kind: uniform, low: 16, high: {int(rng.choice([500, 3000]))}}}}}\n"
        f"  output_tokens: {{kind: lognormal, median: {int(rng.integers(4, 120))}, sigma: 1.0, max: 600}}\n"
        f"{timeout}"
        f"systems:\n  s: {{node: h20-8x, nodes: 1, instance: {{tp: 1, "
        f"memory_utilization: {float(rng.choice([0.2, 0.207, 0.22])):.3f}, "
        f"max_batched_tokens: {int(rng.choice([128, 256, 512]))}}}, router: {router}{dram}}}\n"
    )
    path = tmp_path / f"reclaim_{case}.yaml"
    path.write_text(text)
    return kvsim.load_scenario(path)


DEFERRING = {1, 2, 4, 7, 10, 11}


@pytest.mark.parametrize("case", range(12))
def test_random_scenarios_with_deferred_reclaims_give_the_same_results(tmp_path, monkeypatch, case):
    """As generated, 6 of the 12 make deferred reclaims (15 to 142 each; the others' caches never
    run their pools short while a chunk run is planned)."""
    caches = _caches(monkeypatch)
    _assert_equal(*_both(_random_reclaim_scenario(tmp_path, case)))
    if case in DEFERRING:
        assert caches["s"][1].reclaims_deferred > 0
