"""Domains kept as extents give the records of domains kept per block (issue 23, item 1).

A ``shared_documents`` system that shares each addressing domain's HBM in place keeps its
domain stores, homes, blocks in flight, cluster index and the router's view as extents
(:mod:`kvsim.serving.cache.extent_pool`, :mod:`kvsim.serving.cache.extent_cache`). Every case
here runs twice, once so and once with ``KV_EXTENTS`` off (every structure per block: the
reference), and the request records (bit for bit), every run's summary and time series must be
the same: domains under pressure (evictions, moves between cards, preemptions), several domains
(loads copied from another domain), every router, a delayed router view, both load modes and
policies, closed loops, and random domain scenarios drawn from a seed.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import kvsim
from kvsim.sim import build

from test_domains import PRESSURE


def _summaries(result: kvsim.RunResult) -> str:
    """Every run's summary and time series as one JSON text (NaN written as such)."""
    def clean(value):
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if isinstance(value, np.generic):
            return clean(value.item())
        return value
    return json.dumps([clean({"summary": r.summary, "timeseries": r.timeseries}) for r in result.runs],
                      sort_keys=True, default=str)


def _both(scenario: kvsim.Scenario, monkeypatch, used: bool = True) -> tuple:
    """Run ``scenario`` with domains as extents and per block; returns both results."""
    built = []
    real_build = build.build_system

    def capture(*args, **kwargs):
        built.append(real_build(*args, **kwargs))
        return built[-1]

    import kvsim.sim.run as run_module

    monkeypatch.setattr(run_module, "build_system", capture)
    monkeypatch.setattr(build, "KV_EXTENTS", True)
    extents = kvsim.run(scenario)
    assert any(s.cache is not None and s.cache.extents for s in built) == used
    monkeypatch.setattr(build, "KV_EXTENTS", False)
    blocks = kvsim.run(scenario)
    return extents, blocks


def _same(scenario: kvsim.Scenario, monkeypatch) -> kvsim.RunResult:
    extents, blocks = _both(scenario, monkeypatch)
    assert extents.records_digest() == blocks.records_digest()
    assert _summaries(extents) == _summaries(blocks)
    return extents


def test_a_domain_under_pressure(monkeypatch):
    result = _same(kvsim.parse_scenario(PRESSURE, "p.yaml"), monkeypatch)
    run = result.runs[0]
    domains = run.summary["cache"]["domains"]
    # pressure reached: blocks moved between cards and left the domain, requests were preempted
    assert domains["moved_bytes"] > 0 and run.records.column("preemptions").sum() > 0
    assert domains["hit_tokens_by_source"]["peer_hbm"] > 0


SEVERAL = PRESSURE.replace(
    "s: {node: h20-8x, kv_cache: {peer_hbm: read_in_place}, instance: {memory_utilization: 0.2}}",
    "s: {node: h20-8x, nodes: 2, kv_cache: {peer_hbm: read_in_place%s}, instance: {memory_utilization: 0.2}%s}")


@pytest.mark.parametrize("cache, system", [
    ("", ", router: cache_aware"),
    (", load_mode: before", ", router: cache_aware, cache_aware: {staleness: 0.05 s}"),
    (", load_policy: faster", ", router: prefix_aware"),
    ("", ", router: round_robin, scale_up_domain_nodes: 2"),
    (", load_mode: before", ", router: least_outstanding"),
], ids=["cache_aware", "stale_view", "faster_prefix_aware", "one_domain_of_two_nodes", "before_least_outstanding"])
def test_two_domains(cache, system, monkeypatch):
    text = (SEVERAL % (cache, system)).replace("duration: 6 s", "duration: 4 s")
    result = _same(kvsim.parse_scenario(text, "two.yaml"), monkeypatch)
    if "scale_up_domain_nodes" not in system:
        assert result.runs[0].summary["cache"]["domains"]["hit_tokens_by_source"]["other_domain"] > 0


def test_the_domains_speed_case(monkeypatch):
    import sys
    from pathlib import Path

    bench = str(Path(__file__).resolve().parent.parent / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import speed_cases

    _same(speed_cases.scenario_for("domains", {"scale": 0.02}), monkeypatch)


def test_systems_outside_the_extents_stay_per_block(monkeypatch):
    """A trace workload, a DRAM tier and a copy-in peer are kept per block (and run the same)."""
    text = PRESSURE.replace("kv_cache: {peer_hbm: read_in_place}", "kv_cache: {peer_hbm: read_in_place, dram: {capacity: 64 GiB}}")
    extents, blocks = _both(kvsim.parse_scenario(text.replace("duration: 6 s", "duration: 2 s"), "d.yaml"),
                            monkeypatch, used=False)
    assert extents.records_digest() == blocks.records_digest()


def _random_domain_scenario(seed: int) -> kvsim.Scenario:
    """A small random read-in-place scenario of shared documents (the systems extents keep), its
    HBM as small as the validator allows (a draw it refuses gets more memory)."""
    for extra in range(8):
        try:
            scenario = kvsim.parse_scenario(_domain_text(seed, 0.02 * extra), f"random-domain-{seed}.yaml")
            kvsim.check(scenario)
            return scenario
        except kvsim.SpecError:
            continue
    raise AssertionError(f"no valid random domain scenario for seed {seed}")


def _domain_text(seed: int, extra_memory: float) -> str:
    rng = np.random.default_rng(seed)
    block = int(rng.choice([16, 32, 64]))
    doc_median = int(rng.choice([1500, 3000, 5000]))
    nodes = int(rng.choice([1, 2, 4]))
    per_domain = int(rng.choice([n for n in (1, 2, 4) if n <= nodes and nodes % n == 0]))
    tp = int(rng.choice([1, 1, 2]))
    model = str(rng.choice(["qwen3-1.7b", "qwen3-8b"]))
    # the least memory that holds the weights, plus a little KV: domains under pressure
    least = {("qwen3-1.7b", 1): 0.06, ("qwen3-1.7b", 2): 0.045, ("qwen3-8b", 1): 0.19, ("qwen3-8b", 2): 0.11}
    memory = round(least[(model, tp)] + float(rng.choice([0.01, 0.03, 0.08])) + extra_memory, 3)
    router = str(rng.choice(["cache_aware", "cache_aware", "prefix_aware", "round_robin", "least_outstanding"]))
    stale = f", cache_aware: {{staleness: {float(rng.choice([0.02, 0.2]))} s}}" if router == "cache_aware" and \
        rng.random() < 0.4 else ""
    mode = str(rng.choice(["overlap", "before"]))
    policy = str(rng.choice(["always", "faster"]))
    closed = rng.random() < 0.3
    arrival = (f"{{kind: closed_loop, clients: {int(rng.integers(8, 48))}, think_time: 0.2 s}}" if closed else
               f"{{kind: poisson, rate: {int(rng.integers(10, 60))}/s}}")
    return f"""
name: random-domain-{seed}
seed: {seed}
duration: {float(rng.choice([3.0, 4.0, 6.0]))} s
warmup: 0.5 s
model: {model}
workload:
  arrival: {arrival}
  block_tokens: {block}
  prefix: {{kind: shared_documents, documents: {int(rng.integers(3, 300))}, zipf_s: {float(rng.choice([0.0, 0.6, 1.2]))},
           document_tokens: {{kind: lognormal, median: {doc_median}, sigma: 0.6, max: {2 * doc_median}}},
           suffix_tokens: {{kind: uniform, low: 1, high: {int(rng.integers(1, 600))}}}}}
  output_tokens: {{kind: lognormal, median: {int(rng.integers(20, 300))}, sigma: 0.5, max: 800}}
systems:
  s: {{node: h20-8x, nodes: {nodes}, scale_up_domain_nodes: {per_domain}, router: {router}{stale},
      instance: {{tp: {tp}, memory_utilization: {memory}}},
      kv_cache: {{peer_hbm: read_in_place, load_mode: {mode}, load_policy: {policy}}}}}
"""


RANDOM_CASES = 60


@pytest.mark.parametrize("seed", range(RANDOM_CASES))
def test_random_domain_scenarios(seed, monkeypatch):
    _same(_random_domain_scenario(seed), monkeypatch)


def test_the_random_domain_scenarios_reach_pressure(built_systems):
    """The random cases above are not all easy: some move blocks between cards, evict, preempt
    and copy from another domain (counted on the extents' runs of the first 40)."""
    seen = {"moved": 0, "evicted": 0, "preempted": 0, "other_domain": 0}
    for seed in range(40):
        run = kvsim.run(_random_domain_scenario(seed)).runs[0]
        domains = run.summary["cache"]["domains"]
        assert built_systems[-1].cache.extents
        seen["moved"] += domains["moved_bytes"] > 0
        seen["evicted"] += sum(p.store.evictions for p in built_systems[-1].cache.domain_pools.values()) > 0
        seen["preempted"] += run.records.column("preemptions").sum() > 0
        seen["other_domain"] += domains["hit_tokens_by_source"]["other_domain"] > 0
    assert min(seen.values()) >= 5, seen
