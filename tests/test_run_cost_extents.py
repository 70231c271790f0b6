"""The run-cost model counts what the run does for systems kept as extents with tiers below HBM
(docs/extents.md, phase 6; kvsim/plan/cost_model.py): per request and per stretch, not per block,
chosen by the builder's own rule (:func:`kvsim.sim.build.kv_extents`)."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.plan.cost_model import prewarm_prompts
from kvsim.plan.run_cost import run_cost, workload_shape
from kvsim.sim import build
from kvsim.sim.sizing import size_system

# one 1,024-token document shared by every request (64 blocks of 16 tokens) and 128-token
# suffixes (8 blocks): 72 blocks a prompt; two 8-card nodes, each with a DRAM and an NVMe tier
TIERS = """\
name: tiers
seed: 4
duration: 20 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 5/s}
  prefix: {kind: shared_documents, documents: DOCS, zipf_s: 0.0, document_tokens: {kind: fixed, value: 1024},
           suffix_tokens: {kind: fixed, value: 128}}
  output_tokens: {kind: fixed, value: 16}
  block_tokens: 16
systems:
  a: {node: h20-8x, nodes: 2, instance: {tp: 8}, KV}
"""
BLOCKS = 72
LOWER = "kv_cache: {dram: {capacity: 1 GiB}, nvme: {capacity: 2 GiB}, prewarm: true}"


def _cost(kv: str = LOWER, docs: int = 1):
    scenario = kvsim.parse_scenario(TIERS.replace("DOCS", str(docs)).replace("KV", kv), "tiers.yaml")
    point = scenario.points[0]
    sizing = size_system(point.spec, "a", scenario.catalogs_for(point))
    return scenario, sizing, run_cost(scenario)


def test_lower_tiers_kept_as_extents_count_requests_tiers_and_prewarm_filings(monkeypatch):
    scenario, sizing, cost = _cost()
    assert build.kv_extents(scenario.points[0].spec, sizing)  # the builder keeps this system as extents
    c = cost.counts
    n = cost.requests
    assert n > 50
    # no per-block path: the HBM cache, the two tiers and the prewarm work per stretch
    assert c.hbm_block == c.miss_block == c.domain_block == c.tier_block == c.prewarm_block == 0.0
    assert c.extent_request == n
    assert c.extent_tier == 2 * n  # DRAM and NVMe under each request's instance
    # the prewarm files each prompt into every lower store: 2 nodes x (DRAM + NVMe) = 4 stores
    assert c.prewarm_prompt > 0
    assert c.prewarm_filing == pytest.approx(4 * c.prewarm_prompt)
    # the same prompts as the prewarm's own rule: a 1 GiB DRAM and a 2 GiB NVMe store per node
    block_bytes = 16 * sizing.model.kv_bytes_per_token_total(sizing.kv_dtype)
    shape = workload_shape(scenario, scenario.points[0], n)
    stores = [(2**30 / block_bytes, 1.0)] * 2 + [(2 * 2**30 / block_bytes, 1.0)] * 2
    assert c.prewarm_prompt == pytest.approx(prewarm_prompts(shape, stores))
    # one document in HBM from the first request on: (almost) nothing is loaded from below, so
    # the transfers are each request's write-through to its two tiers
    assert c.load < 0.05 * n
    assert c.flow == pytest.approx(2 * n + 2 * c.load)

    # the same system kept per block (the reference engine's KV): every block on every path
    monkeypatch.setattr(build, "KV_EXTENTS", False)
    _, _, per_block = _cost()
    p = per_block.counts
    assert p.extent_request == p.extent_tier == 0.0
    assert p.hbm_block == BLOCKS * n
    assert p.tier_block == 2 * BLOCKS * n
    assert p.prewarm_block == pytest.approx(4 * BLOCKS * c.prewarm_prompt)
    assert (p.prewarm_prompt, p.prewarm_filing, p.flow, p.load) == pytest.approx(
        (c.prewarm_prompt, c.prewarm_filing, c.flow, c.load))


def test_the_model_follows_the_builders_rule_on_which_systems_stay_per_block():
    pool = "{pool_node: nvme-storage-16x, nodes: NODES}"
    cases = {
        # a one-node pool is kept as extents; a pool of several spreads blocks by id: per block
        f"kv_cache: {{remote: {pool.replace('NODES', '1')}, gpu_direct: true, prewarm: true}}": True,
        f"kv_cache: {{remote: {pool.replace('NODES', '2')}, gpu_direct: true, prewarm: true}}": False,
        "kv_cache: {dram: {capacity: 1 GiB}, write_policy: write_back}": False,
        "kv_cache: {dram: {capacity: 1 GiB, eviction: lfu}}": False,
        "router: cache_aware, kv_cache: {dram: {capacity: 1 GiB}}": False,
        "kv_cache: {dram: {capacity: 1 GiB}}": True,
    }
    for kv, extents in cases.items():
        scenario, sizing, cost = _cost(kv, docs=20)
        assert build.kv_extents(scenario.points[0].spec, sizing) is extents, kv
        c = cost.counts
        assert (c.extent_request > 0) is extents and (c.hbm_block > 0) is not extents, kv
        assert (c.extent_tier > 0) is extents and (c.tier_block > 0) is not extents, kv
        if "prewarm" in kv:
            # every block of a prompt goes to one pool node (by id): its 72 blocks over two nodes
            # touch both, 2 (1 - (1/2)^72) = 2 filings a prompt; one node, one filing
            nodes = 1 if extents else 2
            assert c.prewarm_filing == pytest.approx(c.prewarm_prompt * nodes * (1 - (1 - 1 / nodes) ** BLOCKS)), kv
            assert c.prewarm_block == (0.0 if extents else pytest.approx(BLOCKS * c.prewarm_prompt)), kv


def test_loads_from_below_count_the_requests_that_find_their_document_there():
    # 2,000 documents prewarmed into DRAM and NVMe, far more than the instance's HBM holds at
    # first sight: most requests find theirs below HBM and load it
    _, _, cost = _cost(docs=2000)
    c = cost.counts
    assert c.load > 0.5 * cost.requests
    assert c.flow == pytest.approx(2 * cost.requests + 2 * c.load)
