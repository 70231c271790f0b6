"""The cache prewarm's stopping rule (kvsim.serving.cache.tiers.SystemCache.prewarm; issue 24).

It used to stop when the share of blocks already present changed by less than 0.005 between
successive batches of 1,000 prompts, a test that many nearly equally popular documents pass by
chance while the tiers are still filling. It now stops when, at 95 % confidence, fewer than 0.005
of future prompts would read a document no prompt of the prewarm has offered
(kvsim.serving.cache.warm_rule.UnofferedShare), when every lower store has turned over twice, or
at a cap on prompts.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import simpy

import kvsim
from kvsim.metrics.records import RequestRecords
from kvsim.rng import RandomStreams
from kvsim.serving.cache.warm_rule import UnofferedShare
from kvsim.sim import check_scenario
from kvsim.sim.build import build_system
from kvsim.workload.reuse import DocumentLibrary

SCENARIO = """
name: prewarm-rule
seed: 24
duration: 60 s
model: qwen3-8b
workload:
  arrival: {{kind: closed_loop, clients: 16}}
  prefix: {{kind: shared_documents, documents: {documents}, zipf_s: {zipf}, document_tokens: {{kind: fixed, value: 2048}},
           suffix_tokens: {{kind: fixed, value: 512}}}}
  output_tokens: {{kind: fixed, value: 1}}
  block_tokens: 256
systems:
  s: {{node: h20-8x, instances: 1, kv_cache: {{{tier}, prewarm: true}}}}
"""
POOL = "remote: {pool_node: nvme-storage-16x, nodes: 1}"  # petabytes: never fills in a prewarm


def _prewarmed(documents: int, zipf: float, tier: str = POOL, monkeypatch=None):
    """The built system's cache, the prompts its prewarm used, and the workload's documents as
    ``(popularity, lead block id)`` arrays."""
    text = SCENARIO.format(documents=documents, zipf=zipf, tier=tier)
    scenario = kvsim.parse_scenario(text, "prewarm.yaml")
    spec = scenario.spec
    sizing = check_scenario(scenario)[(0, "s")]
    used = []
    if monkeypatch is not None:
        from kvsim.serving.cache.extent_tiers import ExtentSystemCache
        from kvsim.serving.cache.tiers import SystemCache
        for kind in (SystemCache, ExtentSystemCache):  # (kept per block or as extents: the same rule)
            monkeypatch.setattr(kind, "prewarm", lambda self, prompts, *a, _original=kind.prewarm, **k:
                                used.append(_original(self, prompts, *a, **k)) or used[-1])
    system = build_system(simpy.Environment(), spec, sizing, RequestRecords(16), RandomStreams(24), 256)
    library = DocumentLibrary(spec.workload.prefix, 256, RandomStreams(24).generator("workload.prefix.document_tokens"))
    leads = np.array([int(library.prompt(d, 0, ("lead",))[1][0]) for d in range(documents)])
    return system.cache, (used[0] if used else None), library.probabilities, leads


def _unoffered_mass(cache, popularity, leads) -> float:
    """The exact share of prompts whose document's first block the pool lacks (kept as extents,
    that block is position 0 of the document's chain, keyed by its id)."""
    missing = [p for p, lead in zip(popularity, leads.tolist())
               if ((lead, 0) if cache.extents else lead) not in cache.remote_store(lead)]
    return float(sum(missing))


def test_many_nearly_uniform_documents_are_offered_before_the_prewarm_stops(monkeypatch):
    """6,000 documents at Zipf 0.1 in a pool that never fills: the old rule stopped after 13,000
    prompts with 88 % of a probe's document blocks in the pool (benchmarks/prewarm_coverage.py);
    6,000 ln(200) = 32,000 prompts are needed before uniform draws leave less than 0.005 unseen."""
    cache, used, popularity, leads = _prewarmed(6000, 0.1, monkeypatch=monkeypatch)
    mass = _unoffered_mass(cache, popularity, leads)
    assert mass < 0.005 * 1.5  # the rule's bound holds (the estimate is of the mass one prompt earlier)
    assert used > 6000 * math.log(100)  # no shortcut: a missing mass below 1 % takes this long
    assert used % 1000 == 0  # stopped at a check, not at the cap


def test_a_skewed_workload_still_stops_early_once_its_documents_are_offered(monkeypatch):
    """40 documents at Zipf 1.2: every document is drawn within the first 1,000 or 2,000
    prompts, and the prewarm stops there, not at the turnover budget or the cap."""
    cache, used, popularity, leads = _prewarmed(40, 1.2, monkeypatch=monkeypatch)
    assert used in (1000, 2000)
    assert _unoffered_mass(cache, popularity, leads) < 0.005


def test_the_turnover_budget_still_stops_a_small_tier(monkeypatch):
    """A DRAM tier of 500 blocks fed 10 new blocks a prompt at first (8 document, 2 suffix) has
    newly stored twice its capacity long before its documents' mass settles."""
    block = 256 * 147_456  # Qwen3-8B bf16, bytes per 256-token block
    cache, used, _, _ = _prewarmed(6000, 0.1, f"dram: {{capacity: {500 * block} B}}", monkeypatch)
    (dram,) = cache.dram.values()
    assert used == pytest.approx(100, abs=2)  # 1,000 new blocks at 10 a prompt (few repeats yet)
    assert len(dram) == dram.capacity_blocks


def test_the_cap_holds_when_nothing_ever_repeats():
    """Prompts that share nothing (every lead its own) never settle; a pool never fills: the
    prewarm stops at ``max_prompts``, whatever the prompts' supply."""
    cache, _, _, _ = _prewarmed(40, 1.2)
    fresh = (np.array([10**12 + 3 * k, 10**12 + 3 * k + 1]) for k in itertools.count())
    assert cache.prewarm(fresh, max_prompts=2500) == 2500


def test_good_turing_estimate_and_bound():
    share = UnofferedShare()
    assert share.upper_bound() == 1.0 and share.estimate() == 1.0
    for hashes in ([1, 5], [1, 6], [2, 7], [3, 8], []):
        share.offer(np.array(hashes))
    # leads 1 (twice), 2, 3: two seen once in five prompts (the empty prompt has nothing to share)
    assert share.once == 2 and share.estimate() == pytest.approx(2 / 5)
    # Garwood's 95 % limit of a Poisson mean from 2 events is 6.296 (chi-square(0.95, 6) / 2)
    assert share.upper_bound() == pytest.approx(6.2958 / 5, rel=1e-4)
    none = UnofferedShare()
    for _ in range(1000):
        none.offer([9])
    assert none.upper_bound() == pytest.approx(-math.log(0.05) / 1000)  # "rule of three"
    with pytest.raises(ValueError, match="confidence"):
        UnofferedShare(1.0)
