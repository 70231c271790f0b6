"""An instance's own HBM prefix cache kept as extents gives the records of the per-block cache
(issue 23, item 1; docs/extents.md, "Phase 5").

The plain prefix cache -- ``kv_cache: {}``: each instance's HBM its own (``peer_hbm: none``),
LRU, nothing below HBM -- on a ``shared_documents`` workload keeps its stores, the cluster index
and the router's view as extents (:class:`~kvsim.serving.cache.extent_pool.ExtentHbmStore`,
:mod:`kvsim.serving.cache.extent_cache`). Every case here runs twice, once so and once with
``KV_EXTENTS`` off (every structure per block: the reference), and the request records (bit for
bit), every run's summary and time series must be the same: instances under pressure (evictions,
preemptions by recompute and by swap), every router (the cache-aware router on the live index and
on a delayed view), the step-by-step engine and coalesced runs (prefill chunk runs that defer
their reclaims), small token budgets (chunked prefill), both backends, and random scenarios drawn
from a seed.
"""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.sim import build
from test_extent_domains import _summaries, first_valid


def _both(scenario: kvsim.Scenario, monkeypatch, used: bool = True) -> tuple:
    """Run ``scenario`` with the caches as extents and per block; returns both results and the
    systems each built."""
    import kvsim.sim.run as run_module

    built: dict[bool, list] = {True: [], False: []}
    real_build = build.build_system
    results = {}
    for extents in (True, False):
        def capture(*args, _into=built[extents], **kwargs):
            _into.append(real_build(*args, **kwargs))
            return _into[-1]

        monkeypatch.setattr(run_module, "build_system", capture)
        monkeypatch.setattr(build, "KV_EXTENTS", extents)
        results[extents] = kvsim.run(scenario)
    assert any(s.cache is not None and s.cache.extents for s in built[True]) == used
    assert not any(s.cache is not None and s.cache.extents for s in built[False])
    return results[True], results[False], built


def _same(scenario: kvsim.Scenario, monkeypatch) -> tuple:
    """Both ways: the same records (bit for bit), summaries and time series; returns the
    extents' result and the systems each way built."""
    extents, blocks, built = _both(scenario, monkeypatch)
    assert extents.records_digest() == blocks.records_digest()
    assert _summaries(extents) == _summaries(blocks)
    return extents, built

PLAIN = """
name: plain
seed: 5
duration: {duration} s
warmup: 0 s
model: qwen3-8b
engine: {{backend: {backend}, coalesce: {coalesce}}}
workload:
  arrival: {{kind: poisson, rate: 12/s}}
  prefix: {{kind: shared_documents, documents: 100, zipf_s: 1.0, document_tokens: {{kind: lognormal, median: 6000,
           sigma: 0.5, max: 8000}}, suffix_tokens: {{kind: fixed, value: 300}}}}
  output_tokens: {{kind: lognormal, median: 200, sigma: 0.5, max: 1000}}
systems:
  s: {{node: h20-8x, kv_cache: {{{cache}}}, instance: {{memory_utilization: 0.2{instance}}}{system}}}
"""


def _plain(cache: str = "", instance: str = "", system: str = "", backend: str = "python",
           coalesce: bool = True, duration: float = 6.0) -> kvsim.Scenario:
    text = PLAIN.format(cache=cache, instance=instance, system=system, backend=backend,
                        coalesce=str(coalesce).lower(), duration=duration)
    return kvsim.parse_scenario(text, "plain.yaml")


def _evictions(systems: list) -> int:
    return sum(store.evictions for system in systems for store in system.cache.hbm)


@pytest.mark.parametrize("backend", ["python", "compiled"])
@pytest.mark.parametrize("coalesce", [True, False])
def test_instances_under_pressure(backend, coalesce, monkeypatch):
    if backend == "compiled":
        from kvsim.backend import compiled_problem

        if compiled_problem() is not None:
            pytest.skip("the compiled kernels are not built here")
    result, built = _same(_plain(backend=backend, coalesce=coalesce), monkeypatch)
    run = result.runs[0]
    # pressure reached: cached blocks evicted and requests preempted, prompts hit the cache
    assert _evictions(built[True]) == _evictions(built[False]) > 1000
    assert run.records.column("preemptions").sum() > 0
    assert run.records.column("hit_tokens_hbm").sum() > 0


def test_deferred_reclaims_are_made_as_extents(monkeypatch):
    """Coalesced prefill chunk runs defer the reclaims they cross, on extents as per block (small
    token budgets: long prompts in many chunks)."""
    _, built = _same(_plain(instance=", max_batched_tokens: 256", duration=8.0), monkeypatch)
    (extents,), (blocks,) = built[True], built[False]
    assert extents.cache.reclaims_deferred > 20
    assert extents.cache.reclaims_deferred == blocks.cache.reclaims_deferred


@pytest.mark.parametrize("cache, system", [
    ("", ", nodes: 2, router: cache_aware"),
    ("", ", nodes: 2, router: cache_aware, cache_aware: {staleness: 0.05 s}"),
    ("", ", nodes: 2, router: prefix_aware"),
    ("load_mode: before, load_policy: always", ", router: round_robin"),
    ("preemption: swap", ", router: least_outstanding"),
    ("write_policy: write_back", ", router: cache_aware"),
], ids=["cache_aware", "stale_view", "prefix_aware", "before_round_robin", "swap", "write_back"])
def test_routers_and_options(cache, system, monkeypatch):
    result, _ = _same(_plain(cache=cache, system=system, duration=4.0), monkeypatch)
    assert result.runs[0].records.column("hit_tokens_hbm").sum() > 0
    if "swap" in cache:
        assert result.runs[0].summary["cache"]["bytes_written"]["dram"] > 0


def test_systems_outside_the_extents_stay_per_block(monkeypatch):
    """An instance's own HBM under LFU, or with a DRAM tier written back, or copying from peers,
    stays per block (a DRAM tier written through is kept as extents: tests/test_extent_tiers.py)."""
    for cache in ("hbm_eviction: lfu", "dram: {capacity: 64 GiB}, write_policy: write_back", "peer_hbm: copy_in"):
        extents, blocks, _ = _both(_plain(cache=cache, duration=2.0), monkeypatch, used=False)
        assert extents.records_digest() == blocks.records_digest()


def _random_plain_scenario(seed: int) -> kvsim.Scenario:
    """A small random scenario of shared documents on instances with their own HBM cache, the
    memory as small as the validator allows (a draw it refuses gets more memory)."""
    return first_valid(_plain_text, seed, "plain")


def _plain_text(seed: int, extra_memory: float) -> str:
    rng = np.random.default_rng(seed + 1000)
    block = int(rng.choice([16, 32, 64]))
    doc_median = int(rng.choice([1500, 3000, 5000]))
    nodes = int(rng.choice([1, 1, 2]))
    tp = int(rng.choice([1, 1, 2]))
    model = str(rng.choice(["qwen3-1.7b", "qwen3-8b"]))
    least = {("qwen3-1.7b", 1): 0.06, ("qwen3-1.7b", 2): 0.045, ("qwen3-8b", 1): 0.19, ("qwen3-8b", 2): 0.11}
    memory = round(least[(model, tp)] + float(rng.choice([0.01, 0.03, 0.08])) + extra_memory, 3)
    router = str(rng.choice(["cache_aware", "cache_aware", "prefix_aware", "round_robin", "least_outstanding"]))
    stale = f", cache_aware: {{staleness: {float(rng.choice([0.02, 0.2]))} s}}" if router == "cache_aware" and \
        rng.random() < 0.4 else ""
    budget = int(rng.choice([256, 512, 2048, 8192]))
    preemption = str(rng.choice(["recompute", "recompute", "swap"]))
    write = str(rng.choice(["write_through", "write_through", "write_back"]))
    backend = str(rng.choice(["python", "compiled"]))
    coalesce = str(rng.random() < 0.7).lower()
    asynchronous = str(rng.random() < 0.5).lower()
    closed = rng.random() < 0.3
    arrival = (f"{{kind: closed_loop, clients: {int(rng.integers(8, 48))}, think_time: 0.2 s}}" if closed else
               f"{{kind: poisson, rate: {int(rng.integers(10, 60))}/s}}")
    timeout = f"\n  timeout: {float(rng.choice([1.0, 2.5]))} s" if rng.random() < 0.3 else ""
    return f"""
name: random-plain-{seed}
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
  s: {{node: h20-8x, nodes: {nodes}, router: {router}{stale},
      instance: {{tp: {tp}, memory_utilization: {memory}, max_batched_tokens: {budget}}},
      kv_cache: {{preemption: {preemption}, write_policy: {write}}}}}
"""


RANDOM_CASES = 40


@pytest.mark.parametrize("seed", range(RANDOM_CASES))
def test_random_plain_scenarios(seed, monkeypatch):
    from kvsim.backend import compiled_problem

    scenario = _random_plain_scenario(seed)
    if compiled_problem() is not None:  # (the compiled kernels not built: the reference only)
        scenario = scenario.with_changes({"engine.backend": "python"})
    _same(scenario, monkeypatch)


def test_the_random_plain_scenarios_reach_pressure(built_systems):
    """The random cases above are not all easy: some evict, preempt and time out (counted on the
    extents' runs of the first 20; deferred reclaims need a long prompt's chunks alone in their
    batches, which these loads seldom leave: test_deferred_reclaims_are_made_as_extents)."""
    seen = {"evicted": 0, "preempted": 0, "timed_out": 0}
    for seed in range(20):
        scenario = _random_plain_scenario(seed).with_changes({"engine.backend": "python"})
        run = kvsim.run(scenario).runs[0]
        system = built_systems[-1]
        assert system.cache.extents
        seen["evicted"] += _evictions([system]) > 0
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
  l20: {node: l20-8x, nodes: 2, kv_cache: {}}
"""


def test_the_planning_questions_plain_candidate(monkeypatch):
    """The four-candidate planning question's plain candidate (one shared 7K document, 8K
    prompts, a shorter window): the same records; nearly every prompt hits the document."""
    result, _ = _same(kvsim.parse_scenario(QUESTION, "question.yaml"), monkeypatch)
    hits = result.runs[0].records.column("hit_tokens_hbm")
    assert (hits == 7168).mean() > 0.9
