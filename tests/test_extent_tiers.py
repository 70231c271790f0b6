"""Systems with tiers below HBM kept as extents give the records of the per-block cache (issue 23,
item 1; docs/extents.md, "Phase 6").

Each instance's own HBM (``peer_hbm: none``) over host DRAM, local NVMe and a remote pool of one
node, LRU everywhere, written through, on a ``shared_documents`` workload, with or without a
prewarm: every store, the index and the tiers' bookkeeping are kept per stretch of blocks
(:mod:`kvsim.serving.cache.extent_tiers`). Every case runs twice, once so and once with
``KV_EXTENTS`` off (every structure per block: the reference), and the request records (bit for
bit), every run's summary and time series must be the same: stores under pressure in every tier
(evictions in HBM, DRAM, NVMe and the pool), loads from each lower tier, promotions with and
without GPU-Direct, write queues that skip copies, both backends, coalesced and step by step,
every router but the cache-aware one (which stays per block with lower tiers), and random
scenarios drawn from a seed.
"""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.serving.cache.extent_tiers import without
from test_extent_domains import first_valid
from test_extent_plain import _both, _same

TIERS = """
name: tiers
seed: 3
duration: {duration} s
warmup: 0 s
model: qwen3-8b
engine: {{backend: {backend}, coalesce: {coalesce}}}
workload:
  arrival: {{kind: poisson, rate: 14/s}}
  prefix: {{kind: shared_documents, documents: 120, zipf_s: 1.0, document_tokens: {{kind: lognormal, median: 5000,
           sigma: 0.5, max: 8000}}, suffix_tokens: {{kind: uniform, low: 100, high: 600}}}}
  output_tokens: {{kind: lognormal, median: 150, sigma: 0.5, max: 800}}
systems:
  s: {{node: h20-8x, kv_cache: {{{cache}}}, instance: {{memory_utilization: 0.2{instance}}}{system}}}
catalog:
  pool_nodes:
    small-pool: {{base: nvme-storage-16x, capacity_bytes: 3 GiB}}
"""

EVERY_TIER = ("dram: {capacity: 1 GiB}, nvme: {capacity: 2 GiB}, remote: {pool_node: small-pool}, prewarm: true")


def _tiers(cache: str = EVERY_TIER, instance: str = "", system: str = "", backend: str = "python",
           coalesce: bool = True, duration: float = 5.0) -> kvsim.Scenario:
    text = TIERS.format(cache=cache, instance=instance, system=system, backend=backend,
                        coalesce=str(coalesce).lower(), duration=duration)
    return kvsim.parse_scenario(text, "tiers.yaml")


def _lower(system) -> list:
    cache = system.cache
    return [*cache.dram.values(), *cache.nvme.values(), *cache.remote]


def _hit_tokens(result, tier: str) -> int:
    return int(result.runs[0].records.column(f"hit_tokens_{tier}").sum())


@pytest.mark.parametrize("backend", ["python", "compiled"])
@pytest.mark.parametrize("coalesce", [True, False])
def test_every_tier_under_pressure(backend, coalesce, monkeypatch):
    if backend == "compiled":
        from kvsim.backend import compiled_problem

        if compiled_problem() is not None:
            pytest.skip("the compiled kernels are not built here")
    result, built = _same(_tiers(backend=backend, coalesce=coalesce), monkeypatch)
    (extents,), (blocks,) = built[True], built[False]
    # every tier evicts (the prewarm fills the lower ones), and prompts hit in every tier
    for ext_store, ref_store in zip(extents.cache.hbm + _lower(extents), blocks.cache.hbm + _lower(blocks)):
        assert ext_store.evictions == ref_store.evictions > 0, ext_store.name
        assert ext_store.used_blocks == ref_store.used_blocks
    for tier in ("hbm", "dram", "nvme", "remote"):
        assert _hit_tokens(result, tier) > 0, tier
    assert result.runs[0].records.column("preemptions").sum() > 0


@pytest.mark.parametrize("cache", [
    "dram: {capacity: 1 GiB}, prewarm: true",
    "dram: {capacity: 1 GiB}",
    "remote: {pool_node: small-pool}, prewarm: true",
    "nvme: {capacity: 2 GiB}, remote: {pool_node: small-pool}, gpu_direct: false",
    "dram: {capacity: 1 GiB}, remote: {pool_node: small-pool}, gpu_direct: true, promote_on_hit: true",
    "dram: {capacity: 1 GiB}, nvme: {capacity: 2 GiB}, promote_on_hit: false, load_policy: always",
    "dram: {capacity: 1 GiB, max_write_flows: 1}, remote: {pool_node: small-pool, max_write_flows: 1}",
    "dram: {capacity: 8 GiB}, load_mode: before, load_policy: always, preemption: swap",
], ids=["dram_prewarm", "dram", "pool_prewarm", "nvme_pool_bounce", "promote_gpu_direct", "no_promote_always",
        "write_queues_full", "before_swap"])
def test_tier_options(cache, monkeypatch):
    result, built = _same(_tiers(cache=cache, duration=4.0), monkeypatch)
    lower = [tier for tier in ("dram", "nvme", "remote") if tier in cache]
    assert sum(_hit_tokens(result, tier) for tier in lower) > 0
    if "max_write_flows" in cache:
        assert sum(built[True][0].cache.writes_skipped.values()) > 0


@pytest.mark.parametrize("system", [", nodes: 2, router: prefix_aware", ", nodes: 2, router: round_robin",
                                    ", nodes: 2, router: least_outstanding"])
def test_routers(system, monkeypatch):
    result, _ = _same(_tiers(system=system, duration=3.0), monkeypatch)
    assert sum(_hit_tokens(result, tier) for tier in ("dram", "nvme", "remote")) > 0


def test_deferred_reclaims_with_lower_tiers(monkeypatch):
    """Coalesced prefill chunk runs defer their reclaims over a write-through DRAM tier too."""
    _, built = _same(_tiers(cache="dram: {capacity: 1 GiB}", instance=", max_batched_tokens: 256",
                            duration=6.0), monkeypatch)
    (extents,), (blocks,) = built[True], built[False]
    assert extents.cache.reclaims_deferred > 20
    assert extents.cache.reclaims_deferred == blocks.cache.reclaims_deferred


def test_systems_with_tiers_outside_the_extents_stay_per_block(monkeypatch):
    """Write-back, a pool of two nodes, a DRAM tier under LFU, the cache-aware router over lower
    tiers, and peers' HBM with a DRAM tier stay per block, and run as before."""
    for cache, system in (("dram: {capacity: 1 GiB}, write_policy: write_back", ""),
                          ("remote: {pool_node: small-pool, nodes: 2}", ""),
                          ("dram: {capacity: 1 GiB, eviction: lfu}", ""),
                          ("dram: {capacity: 1 GiB}", ", nodes: 2, router: cache_aware"),
                          ("dram: {capacity: 1 GiB}, peer_hbm: copy_in", "")):
        extents, blocks, _ = _both(_tiers(cache=cache, system=system, duration=2.0), monkeypatch, used=False)
        assert extents.records_digest() == blocks.records_digest()


def test_without():
    """The stretches of a found prefix less the ones loaded from a store, against sets of blocks."""
    rng = np.random.default_rng(7)
    for _ in range(2000):
        found = []
        for chain in rng.choice(["a", "b", "c"], size=int(rng.integers(0, 4)), replace=False):
            a = int(rng.integers(0, 6))
            found.append((str(chain), a, a + int(rng.integers(0, 8))))
        taken = []
        for _ in range(int(rng.integers(0, 4))):
            a = int(rng.integers(0, 12))
            taken.append((str(rng.choice(["a", "b", "c"])), a, a + int(rng.integers(0, 6))))
        blocks = [(c, p) for c, s, e in found for p in range(s, e)]
        gone = {(c, p) for c, s, e in taken for p in range(s, e)}
        got = without(found, taken)
        assert [(c, p) for c, s, e in got for p in range(s, e)] == [b for b in blocks if b not in gone]
        assert all(s < e for _, s, e in got)


def _random_tiers_scenario(seed: int) -> kvsim.Scenario:
    """A small random scenario of shared documents over instances with lower tiers, the HBM as
    small as the validator allows (a draw it refuses gets more memory)."""
    return first_valid(_tiers_text, seed, "tiers")


def _tiers_text(seed: int, extra_memory: float) -> str:
    rng = np.random.default_rng(seed + 2000)
    block = int(rng.choice([16, 32, 64]))
    doc_median = int(rng.choice([1500, 3000, 5000]))
    nodes = int(rng.choice([1, 1, 2]))
    tp = int(rng.choice([1, 1, 2]))
    model = str(rng.choice(["qwen3-1.7b", "qwen3-8b"]))
    least = {("qwen3-1.7b", 1): 0.06, ("qwen3-1.7b", 2): 0.045, ("qwen3-8b", 1): 0.19, ("qwen3-8b", 2): 0.11}
    memory = round(least[(model, tp)] + float(rng.choice([0.01, 0.03, 0.08])) + extra_memory, 3)
    router = str(rng.choice(["prefix_aware", "round_robin", "least_outstanding"]))
    budget = int(rng.choice([256, 512, 2048, 8192]))
    tiers = []
    while not tiers:
        if rng.random() < 0.7:
            tiers.append(f"dram: {{capacity: {float(rng.choice([0.25, 1.0, 4.0]))} GiB"
                         f"{', max_write_flows: 2' if rng.random() < 0.2 else ''}}}")
        if rng.random() < 0.3:
            tiers.append(f"nvme: {{capacity: {float(rng.choice([0.5, 2.0, 8.0]))} GiB}}")
        if rng.random() < 0.4:
            tiers.append("remote: {pool_node: small-pool}")
    options = [f"preemption: {rng.choice(['recompute', 'recompute', 'swap'])}",
               f"gpu_direct: {str(rng.random() < 0.6).lower()}",
               f"promote_on_hit: {str(rng.random() < 0.6).lower()}",
               f"load_mode: {rng.choice(['overlap', 'overlap', 'before'])}",
               f"load_policy: {rng.choice(['faster', 'always'])}",
               f"prewarm: {str(rng.random() < 0.5).lower()}"]
    backend = str(rng.choice(["python", "compiled"]))
    coalesce = str(rng.random() < 0.7).lower()
    asynchronous = str(rng.random() < 0.5).lower()
    closed = rng.random() < 0.3
    arrival = (f"{{kind: closed_loop, clients: {int(rng.integers(8, 48))}, think_time: 0.2 s}}" if closed else
               f"{{kind: poisson, rate: {int(rng.integers(10, 60))}/s}}")
    timeout = f"\n  timeout: {float(rng.choice([1.0, 2.5]))} s" if rng.random() < 0.3 else ""
    return f"""
name: random-tiers-{seed}
seed: {seed}
duration: {float(rng.choice([3.0, 4.0, 6.0]))} s
warmup: 0.5 s
model: {model}
engine: {{backend: {backend}, coalesce: {coalesce}, async_scheduling: {asynchronous}}}
workload:
  arrival: {arrival}
  block_tokens: {block}
  prefix: {{kind: shared_documents, documents: {int(rng.integers(3, 300))},
           zipf_s: {float(rng.choice([0.0, 0.6, 1.2]))},
           document_tokens: {{kind: lognormal, median: {doc_median}, sigma: 0.6, max: {2 * doc_median}}},
           suffix_tokens: {{kind: uniform, low: 1, high: {int(rng.integers(1, 600))}}}}}
  output_tokens: {{kind: lognormal, median: {int(rng.integers(20, 300))}, sigma: 0.5, max: 800}}{timeout}
systems:
  s: {{node: h20-8x, nodes: {nodes}, router: {router},
      instance: {{tp: {tp}, memory_utilization: {memory}, max_batched_tokens: {budget}}},
      kv_cache: {{{', '.join(tiers + options)}}}}}
catalog:
  pool_nodes:
    small-pool: {{base: nvme-storage-16x, capacity_bytes: {float(rng.choice([0.5, 2.0, 16.0]))} GiB}}
"""


RANDOM_CASES = 40


@pytest.mark.parametrize("seed", range(RANDOM_CASES))
def test_random_tiers_scenarios(seed, monkeypatch):
    from kvsim.backend import compiled_problem

    scenario = _random_tiers_scenario(seed)
    if compiled_problem() is not None:  # (the compiled kernels not built: the reference only)
        scenario = scenario.with_changes({"engine.backend": "python"})
    _same(scenario, monkeypatch)


def test_the_random_tiers_scenarios_reach_pressure(built_systems):
    """The random cases above are not all easy: of the first 20, some evict below HBM, load from
    a lower tier, preempt and time out (counted on the extents' runs)."""
    seen = {"evicted_below": 0, "loaded": 0, "preempted": 0, "timed_out": 0}
    for seed in range(20):
        scenario = _random_tiers_scenario(seed).with_changes({"engine.backend": "python"})
        run = kvsim.run(scenario).runs[0]
        system = built_systems[-1]
        assert system.cache.extents
        seen["evicted_below"] += sum(store.evictions for store in _lower(system)) > 0
        seen["loaded"] += sum(run.records.column(f"hit_tokens_{t}").sum() for t in ("dram", "nvme", "remote")) > 0
        seen["preempted"] += run.records.column("preemptions").sum() > 0
        seen["timed_out"] += bool(np.isfinite(run.records.column("aborted_s")).any())
    assert min(seen.values()) >= 3, seen


QUESTION = """
name: question
seed: 1
duration: 20 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 40/s}
  prefix: {kind: shared_documents, documents: 1, zipf_s: 0.8, document_tokens: {kind: fixed, value: 7168},
           suffix_tokens: {kind: fixed, value: 1024}}
  output_tokens: {kind: fixed, value: 200}
systems:
  dram: {node: l20-8x, nodes: 2, kv_cache: {dram: {capacity: 512 GiB}, prewarm: true}}
  pool: {node: l20-8x, nodes: 2, kv_cache: {remote: {pool_node: nvme-storage-16x, nodes: 1}, gpu_direct: true,
         prewarm: true}}
"""


def test_the_planning_questions_tier_candidates(monkeypatch):
    """The four-candidate planning question's DRAM and pool candidates (a shorter window, one
    pool node): the same records; the prewarm filled the lower tiers."""
    result, built = _same(kvsim.parse_scenario(QUESTION, "question.yaml"), monkeypatch)
    for system in built[True]:
        assert sum(store.used_blocks for store in _lower(system)) > 10_000
    assert (result.runs[0].records.column("hit_tokens_hbm") == 7168).mean() > 0.9
