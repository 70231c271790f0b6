"""Prefix caching and KV offload end to end, against hand-computed transfer and prefill times.

One client sends the same 8192-token document with a fresh 256-token suffix, one request at a
time, to two instances in turn (round robin): request 0 computes everything on instance 0,
request 1 is the first on instance 1 (a lower-tier hit, or a miss), request 2 is back on
instance 0 (an HBM hit).
"""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.hardware import accelerator_catalog
from kvsim.metrics.records import RequestRecords
from kvsim.models.step_time import BatchShape
from kvsim.network import topology as topo
from kvsim.sim import check_scenario

DOC, SUFFIX = 8192, 256
KV_PER_TOKEN = 147_456  # Qwen3-8B bf16: 2 * 36 layers * 8 heads * 128 * 2 bytes

SCENARIO = """
name: offload-check
seed: 2
duration: 12 s
warmup: 0 s
model: qwen3-8b
engine: {{host_overlap: false}}  # (host work added to every step, as the hand arithmetic here counts it)
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: 1 s}}
  prefix: {{kind: shared_documents, documents: 1, zipf_s: 1.0, document_tokens: {{kind: fixed, value: {doc}}},
           suffix_tokens: {{kind: fixed, value: {suffix}}}}}
  output_tokens: {{kind: fixed, value: 1}}
systems:
  s: {{node: h20-8x, instances: 2, router: round_robin, kv_cache: {cache}}}
catalog:
  pool_nodes:
    slow-pool: {{base: nvme-storage-16x, read_bandwidth: 100 MB/s}}
"""


def _run(cache: str):
    scenario = kvsim.parse_scenario(SCENARIO.format(doc=DOC, suffix=SUFFIX, cache=cache), "o.yaml")
    run = kvsim.run(scenario).runs[0]
    return run.records.to_frame(), check_scenario(scenario)[(0, "s")]


def _suffix_prefill_s(sizing) -> float:
    """TTFT of a request whose document is cached: the request path (API server, tokenising the
    whole prompt, streaming the token) plus one prefill iteration of the suffix on the document."""
    step = sizing.pools[0].step_model()
    engine = sizing.pools[0].engine
    path_s = engine.api_s + engine.tokenize_s_per_token * (DOC + SUFFIX) + engine.output_s
    return path_s + step.iteration_time_s(BatchShape(
        prefill_tokens=SUFFIX, prefill_seqs=1, prefill_pairs=BatchShape.prefill_chunk_pairs(SUFFIX, DOC),
        prefill_context_tokens=DOC, sampled_seqs=1))


def test_kv_cache_without_prefix_structure_reproduces_the_plain_run_exactly():
    text = """
name: same
seed: 5
duration: 30 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 6/s}
  input_tokens: {kind: lognormal, median: 900, sigma: 0.8, max: 8000}
  output_tokens: {kind: lognormal, median: 120, sigma: 0.6, max: 800}
systems:
  plain: {node: l20-8x, instances: 2}
  cached: {node: l20-8x, instances: 2, kv_cache: {dram: {capacity: 64 GiB}}}
"""
    result = kvsim.run(kvsim.parse_scenario(text, "same.yaml"))
    plain, cached = result.run("plain").records, result.run("cached").records
    for name in RequestRecords.fields:
        assert np.array_equal(plain.column(name), cached.column(name), equal_nan=True), name
    plain_summary, cached_summary = result.run("plain").summary, dict(result.run("cached").summary)
    cache = cached_summary.pop("cache")
    assert plain_summary == cached_summary  # every foundation metric, exactly
    assert cache["hit_rate"]["total"] == 0 and sum(cache["bytes_written"].values()) == 0


def test_hbm_hit_computes_only_the_suffix():
    frame, sizing = _run("{}")
    assert frame.hit_tokens_hbm.tolist()[:4] == [0, 0, DOC, DOC]
    assert frame.computed_tokens.tolist()[:4] == [DOC + SUFFIX, DOC + SUFFIX, SUFFIX, SUFFIX]
    # an HBM hit needs no transfer: TTFT is one prefill iteration of the suffix on the cached doc
    assert frame.ttft_s[2] == pytest.approx(_suffix_prefill_s(sizing), rel=1e-9)
    assert frame.loaded_bytes.sum() == 0 and frame.written_bytes.sum() == 0  # no lower tier


def test_dram_hit_loaded_before_compute_costs_the_copy_time():
    frame, sizing = _run("{dram: {capacity: 64 GiB}, load_mode: before, load_policy: always}")
    assert frame.hit_tokens_dram[1] == DOC and frame.computed_tokens[1] == SUFFIX
    h20 = accelerator_catalog()["h20"]
    nbytes = DOC * KV_PER_TOKEN
    # host DRAM -> GPU: a pinned copy at the copy-engine rate of PCIe Gen5, two PCIe hops and one
    # cudaMemcpy overhead
    load_s = nbytes / (h20.host_link_bandwidth * h20.efficiency.host_copy) + 2 * topo.PCIE_HOP_LATENCY_S \
        + topo.COPY_OVERHEAD_S
    assert frame.ttft_s[1] == pytest.approx(load_s + _suffix_prefill_s(sizing), rel=1e-9)
    assert frame.loaded_bytes[1] == pytest.approx(nbytes)
    # write-through: request 0 wrote its whole prompt's full blocks down to DRAM
    assert frame.written_bytes[0] == pytest.approx((DOC + SUFFIX) * KV_PER_TOKEN)


def test_layer_by_layer_overlap_hides_a_load_shorter_than_the_compute():
    before, _ = _run("{dram: {capacity: 64 GiB}, load_mode: before, load_policy: always}")
    overlap, sizing = _run("{dram: {capacity: 64 GiB}, load_mode: overlap, load_policy: always}")
    assert overlap.ttft_s[1] < before.ttft_s[1]
    # the 22 ms load is shorter than the 56 ms suffix prefill, so only the compute shows
    assert overlap.ttft_s[1] == pytest.approx(_suffix_prefill_s(sizing), rel=1e-9)


def test_remote_pool_over_gpu_direct_is_nic_bound_and_never_slower_than_bounce():
    direct, sizing = _run("{remote: {pool_node: nvme-storage-16x}, load_mode: before, load_policy: always}")
    bounce, _ = _run("{remote: {pool_node: nvme-storage-16x}, load_mode: before, load_policy: always, "
                     "gpu_direct: false}")
    assert direct.hit_tokens_remote[1] == DOC == bounce.hit_tokens_remote[1]
    # one flow crosses one 200 Gbit/s NIC of the storage node: 25 GB/s at the 0.975 an RDMA NIC
    # delivers (NicSpec efficiency) is the bottleneck
    nbytes = DOC * KV_PER_TOKEN
    latency = topo.PCIE_HOP_LATENCY_S * 4 + topo.RDMA_LATENCY_S + 80e-6  # + the pool's NVMe access
    expected = nbytes / (25e9 * 0.975) + _suffix_prefill_s(sizing)
    assert direct.ttft_s[1] == pytest.approx(expected, abs=latency + 1e-6)
    assert direct.ttft_s[1] <= bounce.ttft_s[1]


def test_faster_policy_recomputes_when_the_load_would_be_slower():
    always, _ = _run("{remote: {pool_node: slow-pool}, load_mode: before, load_policy: always}")
    faster, _ = _run("{remote: {pool_node: slow-pool}, load_mode: before, load_policy: faster}")
    # 1.2 GB at 100 MB/s is 12 s; recomputing 8192 tokens is ~1.5 s
    assert always.hit_tokens_remote[1] == DOC and always.ttft_s[1] > 10
    assert faster.hit_tokens_remote[1] == 0 and faster.computed_tokens[1] == DOC + SUFFIX
    assert faster.ttft_s[1] < 2.0


def test_prewarm_fills_lower_tiers_from_independent_draws():
    cold, _ = _run("{dram: {capacity: 64 GiB}, load_mode: before, load_policy: always}")
    warm, _ = _run("{dram: {capacity: 64 GiB}, load_mode: before, load_policy: always, prewarm: true}")
    # cold: the very first request computes everything; warm: the one shared document is
    # already in DRAM (drawn by the prewarm streams, not copied from the run's requests)
    assert cold.hit_tokens_dram[0] == 0 and cold.computed_tokens[0] == DOC + SUFFIX
    assert warm.hit_tokens_dram[0] == DOC and warm.computed_tokens[0] == SUFFIX
    # the suffixes are unique per request: prewarm did not hand the run its own future blocks
    assert warm.computed_tokens[1] == SUFFIX


def test_prewarm_is_refused_without_prefix_structure():
    text = SCENARIO.format(doc=DOC, suffix=SUFFIX, cache="{dram: {capacity: 64 GiB}, prewarm: true}")
    text = text.replace("  prefix: {kind: shared_documents, documents: 1, zipf_s: 1.0, document_tokens: {kind: fixed, "
                        "value: 8192},\n           suffix_tokens: {kind: fixed, value: 256}}\n",
                        "  input_tokens: {kind: fixed, value: 1000}\n")
    with pytest.raises(kvsim.SpecError, match="prewarm needs a generated workload"):
        kvsim.parse_scenario(text, "o.yaml")


def test_a_hit_from_the_remote_pool_is_promoted_into_host_dram():
    # 16 single-card instances on 2 nodes, requests in round robin: request 0 computes on node 0
    # and writes through to node 0's DRAM and the pool; request 8 is the first on node 1, whose
    # DRAM lacks the document, so it loads from the pool; request 9 (also node 1) then finds it
    # in node 1's DRAM only if the load promoted it there.
    cache = ("{dram: {capacity: 64 GiB}, remote: {pool_node: nvme-storage-16x}, load_mode: before, "
             "load_policy: always, promote_on_hit: %s}")
    frames = {}
    for promote in ("true", "false"):
        text = SCENARIO.format(doc=DOC, suffix=SUFFIX, cache=cache % promote).replace(
            "instances: 2, router: round_robin", "nodes: 2, router: round_robin").replace(
            "duration: 12 s", "duration: 40 s")
        frames[promote] = kvsim.run(kvsim.parse_scenario(text, "o.yaml")).runs[0].records.to_frame()
    promoted, not_promoted = frames["true"], frames["false"]
    assert promoted.instance[8] == 8 and promoted.hit_tokens_remote[8] == DOC
    assert promoted.hit_tokens_dram[9] == DOC and promoted.hit_tokens_remote[9] == 0
    assert not_promoted.hit_tokens_remote[9] == DOC and not_promoted.hit_tokens_dram[9] == 0
    assert promoted.ttft_s[9] < not_promoted.ttft_s[9]  # DRAM over PCIe beats the pool over one NIC


def test_swapping_preempted_sequences_avoids_recompute():
    # a KV pool far too small for the load forces preemptions; with swap the preempted KV goes to
    # host DRAM and back, so no prompt token is computed twice and every request still finishes
    text = """
name: swap
seed: 4
duration: 30 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 4/s}}
  input_tokens: {{kind: uniform, low: 1000, high: 3000}}
  output_tokens: {{kind: uniform, low: 200, high: 600}}
systems:
  s: {{node: l20-8x, instances: 1, instance: {{activation_reserve: 22 GiB}}, kv_cache: {{preemption: {mode}}}}}
"""
    frames = {}
    for mode in ("recompute", "swap"):
        run = kvsim.run(kvsim.parse_scenario(text.format(mode=mode), "s.yaml")).runs[0]
        frames[mode] = run.records.to_frame()
    for mode, frame in frames.items():
        assert frame.finish_s.notna().all(), mode
        assert frame.preemptions.sum() > 0, mode
    recompute, swap = frames["recompute"], frames["swap"]
    preempted = recompute.preemptions > 0
    assert (recompute.computed_tokens[preempted] > recompute.input_tokens[preempted]).all()
    assert (swap.computed_tokens == swap.input_tokens).all()
    swapped = swap.preemptions > 0
    assert (swap.written_bytes[swapped] > 0).all() and (swap.loaded_bytes[swapped] > 0).all()


STRESS = """
name: stress
seed: 8
duration: 40 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 8/s}}
  prefix: {{kind: shared_documents, documents: 60, zipf_s: 0.8, document_tokens: {{kind: uniform, low: 512, high: 4096}},
           suffix_tokens: {{kind: uniform, low: 16, high: 600}}}}
  output_tokens: {{kind: uniform, low: 20, high: 400}}
systems:
  s: {{node: l20-8x, instances: 2, instance: {{activation_reserve: 22 GiB}},
       kv_cache: {{dram: {{capacity: {dram}}}, remote: {{pool_node: nvme-storage-16x}}, write_policy: {write},
                  preemption: {preemption}}}}}
"""


@pytest.mark.parametrize("write, preemption", [("write_through", "recompute"), ("write_back", "swap")])
def test_pages_are_conserved_and_hits_never_exceed_needs_under_memory_pressure(built_systems, write, preemption):
    systems = built_systems
    text = STRESS.format(dram="2 GiB", write=write, preemption=preemption)
    run = kvsim.run(kvsim.parse_scenario(text, "stress.yaml")).runs[0]
    frame = run.records.to_frame()
    assert frame.finish_s.notna().all() and frame.preemptions.sum() > 0
    # every page is free or held by a cached block once all requests have finished
    for instance in systems[0].instances:
        hook = instance.scheduler.hook
        pages = hook.hbm.used_blocks * hook.geometry.pages_per_block
        assert instance.pool.free_blocks + pages == instance.pool.num_blocks
        assert hook.hbm.evictable_blocks == hook.hbm.used_blocks  # no reader or pin leaked
        assert not hook.inflight
    # a request's hits never exceed what its admissions needed
    hits = frame[[f"hit_tokens_{t}" for t in ("hbm", "dram", "nvme", "remote")]].sum(axis=1)
    assert (hits <= frame.computed_tokens + hits).all()
    assert (hits <= frame.input_tokens * (1 + frame.preemptions)).all()
    rates = run.summary["cache"]["hit_rate"]
    assert all(0 <= rates[t] <= 1 for t in rates) and rates["total"] <= 1
    if write == "write_back":
        # a 2 GiB DRAM tier overflows; under write-back its evictions move on to the pool
        assert run.summary["cache"]["bytes_written"]["remote"] > 0
    if preemption == "swap":
        assert run.summary["cache"]["bytes_written"]["dram"] > 0
