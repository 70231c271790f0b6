"""Weight offload of an MoE model's cold experts and of weights homed in the remote pool (issue 28
item 1): the expected distinct offloaded experts a batch touches, by hand, by enumeration and by a
seeded Monte Carlo; the stream growing with the tokens and saturating; the HBM freed and the bytes
on the host or in the pool; the pool's rate by hand; the refusals; a short run end to end."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import kvsim
from kvsim import backend
from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.models import model_catalog
from kvsim.models.parallel import Layout
from kvsim.models.step_time import BatchShape
from kvsim.models.weight_offload import (
    PoolHome,
    WeightOffloadSpec,
    expert_bytes_per_card,
    expert_routing_shares,
    offload_sizing,
    offloaded_experts,
    pool_stream_Bps,
    touched_experts,
    weight_stream,
)
from kvsim.sim import check_scenario
from kvsim.yaml_io import SpecError

QWEN = model_catalog()["qwen3-235b-a22b"]
H20 = accelerator_catalog()["h20"]


def test_distinct_offloaded_experts_by_hand_and_by_enumeration():
    # E = 4 experts, top-1 routing, popularity (0.4, 0.3, 0.2, 0.1); the two coldest offloaded
    p = (0.4, 0.3, 0.2, 0.1)
    cold = p[2:]
    # two tokens: each cold expert is touched unless both tokens miss it
    by_hand = (1 - 0.8 ** 2) + (1 - 0.9 ** 2)  # 0.36 + 0.19
    assert touched_experts(cold, 2) == pytest.approx(0.55, abs=1e-15) == pytest.approx(by_hand)
    # every pair of choices, weighted by its probability: the same expectation
    enumerated = sum(p[a] * p[b] * len({a, b} & {2, 3}) for a, b in itertools.product(range(4), repeat=2))
    assert touched_experts(cold, 2) == pytest.approx(enumerated, rel=1e-12)
    # Zipf exponent 1 over 4 experts, top-1: shares 1, 1/2, 1/3, 1/4 over 25/12
    assert expert_routing_shares(4, 1, 1.0) == pytest.approx((12 / 25, 6 / 25, 4 / 25, 3 / 25), rel=1e-12)


def _systematic_topk(q: np.ndarray, rng: np.random.Generator, tokens: int) -> np.ndarray:
    """``tokens`` draws of k distinct experts each with inclusion probabilities exactly ``q``
    (Madow's systematic sampling: one uniform start, k points one apart over the cumulative sum)."""
    edges = np.concatenate(([0.0], np.cumsum(q)))
    k = round(edges[-1])
    points = rng.random((tokens, 1)) + np.arange(k)
    return np.searchsorted(edges, points, side="right") - 1


def test_distinct_offloaded_experts_against_a_seeded_monte_carlo():
    # 8 experts, top-2, Zipf 1.0; the 4 coldest offloaded; 5 tokens an iteration
    q = np.array(expert_routing_shares(8, 2, 1.0))
    assert q.sum() == pytest.approx(2.0) and q.max() <= 1.0
    rng = np.random.default_rng(2028)
    trials, tokens = 20000, 5
    counts = np.empty(trials)
    for t in range(trials):
        chosen = _systematic_topk(q, rng, tokens)
        assert all(len(set(row)) == 2 for row in chosen[:3])  # k distinct experts a token
        counts[t] = len(set(chosen.ravel()) & {4, 5, 6, 7})
    expected = touched_experts(tuple(q[4:]), tokens)
    assert abs(counts.mean() - expected) < 4 * counts.std() / math.sqrt(trials)


def test_capped_shares_keep_their_sum():
    # top-2 of 4 with Zipf 3: the hottest would take 2 x 0.84 > 1 of a token: capped at 1, the rest scaled
    w = [1.0, 1 / 8, 1 / 27, 1 / 64]
    scale = 1.0 / sum(w[1:])
    assert expert_routing_shares(4, 2, 3.0) == pytest.approx((1.0, w[1] * scale, w[2] * scale, w[3] * scale))
    assert sum(expert_routing_shares(4, 2, 3.0)) == pytest.approx(2.0)
    assert expert_routing_shares(4, 4, 2.0) == (1.0, 1.0, 1.0, 1.0)


def test_uniform_routing_is_the_closed_form():
    e, k = QWEN.moe.num_experts, QWEN.moe.experts_per_token
    shares = expert_routing_shares(e, k, 0.0)
    for tokens in (1, 7, 64, 4096):
        assert touched_experts(shares, tokens) == pytest.approx(QWEN._touched_experts(tokens), rel=1e-12)
        assert touched_experts(shares[-32:], tokens) == pytest.approx(32 * (1 - (1 - k / e) ** tokens), rel=1e-12)


def test_the_stream_grows_with_tokens_and_saturates():
    spec = WeightOffloadSpec(fraction=0.25)
    stream = weight_stream(spec, QWEN, H20, "fp8", None, 8, expert_skew=0.8)
    m = offloaded_experts(QWEN, 0.25)
    assert m == 32 and len(stream.cold_shares) == 32 and stream.offloaded == QWEN.num_moe_layers == 94
    one_expert = QWEN.expert_params * 1 / 8  # fp8: a byte a parameter, over 8 cards
    assert stream.expert_s == pytest.approx(one_expert / (H20.host_link_bandwidth * H20.efficiency.host_copy))
    assert stream.layer_s == pytest.approx(m * stream.expert_s)
    times = [stream.layer_s_at(t) for t in (1, 4, 16, 64, 256, 4096, 10 ** 6)]
    assert all(a < b for a, b in zip(times, times[1:-1]))
    assert times[-1] == pytest.approx(stream.layer_s, rel=1e-9)  # every offloaded expert
    # skew: the cold experts are colder than average, so fewer are touched than uniformly
    uniform = weight_stream(spec, QWEN, H20, "fp8", None, 8)
    assert stream.layer_s_at(16) < uniform.layer_s_at(16)


def _steps(kernels, stream):
    return kernels.step_time.RooflineStepTime(QWEN, H20, 8, "fp8", "fp8", stream=stream)


BACKENDS = ["python"] + (["compiled"] if backend.compiled_problem() is None else [])


@pytest.mark.parametrize("name", BACKENDS)
def test_a_step_waits_for_the_touched_experts_by_hand(name):
    kernels = backend.kernels(name)
    stream = weight_stream(WeightOffloadSpec(fraction=0.5), QWEN, H20, "fp8", None, 8, expert_skew=0.5)
    plain, offloaded = _steps(kernels, None), _steps(kernels, stream)
    for seqs in (1, 16, 256):
        batch = BatchShape(decode_seqs=seqs, decode_context_tokens=seqs * 2048, sampled_seqs=seqs)
        a, b = plain.breakdown(batch), offloaded.breakdown(batch)
        x, k = max(a.compute_s, a.memory_s), stream.offloaded
        tau = stream.expert_s * touched_experts(stream.cold_shares, seqs)
        expected = max(a.memory_s, k * tau + x / QWEN.num_layers, tau + k * x / QWEN.num_layers)
        assert b.memory_s == pytest.approx(expected, rel=1e-12) and b.compute_s == a.compute_s
    # the coalesced decode run equals its steps to the bit, in lists and in arrays
    run, array = offloaded.decode_steps(16, 16 * 4096, 30), offloaded.decode_steps_array(16, 16 * 4096, 30)
    for i in range(30):
        step = offloaded.breakdown(BatchShape(decode_seqs=16, decode_context_tokens=16 * 4096 + 16 * i,
                                              sampled_seqs=16))
        assert run.total_s[i] == step.total_s and run.memory_s[i] == step.memory_s
    assert np.array_equal(np.asarray(run.total_s), array.total_s)


def test_the_compiled_step_equals_the_reference():
    if backend.compiled_problem() is not None:
        pytest.skip("no compiled backend")
    stream = weight_stream(WeightOffloadSpec(fraction=0.5), QWEN, H20, "fp8", None, 8, expert_skew=1.0)
    py, cy = _steps(backend.kernels("python"), stream), _steps(backend.kernels("compiled"), stream)
    for seqs in (1, 3, 40):
        batch = BatchShape(prefill_tokens=512, prefill_seqs=1, prefill_pairs=512 * 513 / 2, decode_seqs=seqs,
                           decode_context_tokens=seqs * 1000, sampled_seqs=seqs + 1)
        assert py.breakdown(batch) == cy.breakdown(batch)
        assert py.decode_steps(seqs, seqs * 700, 12) == cy.decode_steps(seqs, seqs * 700, 12)


def test_hbm_freed_and_host_bytes_by_hand():
    node = node_catalog()["h20-8x"]
    spec = WeightOffloadSpec(fraction=0.25, buffer_layers=2)
    sized = offload_sizing(spec, QWEN, node, H20, Layout(tp=8), "fp8", None)
    expert = expert_bytes_per_card(QWEN, "fp8", None, 8)
    assert expert == pytest.approx(3 * 4096 * 1536 / 8)  # gate, up, down of 4096 x 1536, fp8
    assert sized.offloaded_bytes_per_card == pytest.approx(32 * 94 * expert)
    assert sized.freed_bytes_per_card == pytest.approx((94 - 2) * 32 * expert)  # two layers' experts buffered
    assert sized.pool_bytes == 0.0
    # a host too small for 8 cards' offloaded experts
    small = node.model_copy(update={"host_dram_bytes": 32 * 94 * expert * 8 * 0.99})
    with pytest.raises(ValueError, match="host DRAM"):
        offload_sizing(spec, QWEN, small, H20, Layout(tp=8), "fp8", None)


def test_the_pool_rate_and_bytes_by_hand():
    node, pool_node = node_catalog()["h20-8x"], pool_node_catalog()["dram-pool-8x"]
    # 4 x 50 GB/s x 0.975 over 8 cards = 24.375 GB/s a card; the pool: 2 nodes x min(2 x 48.75, 460.8) over 16 cards
    home = PoolHome(pool_node, nodes=2, streaming_cards=16)
    rate = 2 * 2 * 50e9 * 0.975 / 16  # 12.19 GB/s: the pool's share binds, below the node's NICs' 24.4 GB/s
    assert pool_stream_Bps(node, H20, home) == pytest.approx(rate) and rate < 4 * 50e9 * 0.975 / 8
    alone = PoolHome(pool_node, nodes=2, streaming_cards=8)  # one node's cards: its own NICs bind
    assert pool_stream_Bps(node, H20, alone) == pytest.approx(4 * 50e9 * 0.975 / 8)
    crowded = PoolHome(pool_node, nodes=1, streaming_cards=64)  # the pool's NICs shared by 64 cards bind
    assert pool_stream_Bps(node, H20, crowded) == pytest.approx(2 * 50e9 * 0.975 / 64)
    spec = WeightOffloadSpec(fraction=0.25, home="pool")
    sized = offload_sizing(spec, QWEN, node, H20, Layout(tp=8), "fp8", None, pool=home)
    assert sized.stream.expert_s == pytest.approx(expert_bytes_per_card(QWEN, "fp8", None, 8) / rate)
    assert sized.pool_bytes == pytest.approx(sized.offloaded_bytes_per_card * 8)  # one copy, every card's slice
    with pytest.raises(ValueError, match="kv_cache.remote"):
        offload_sizing(spec, QWEN, node, H20, Layout(tp=8), "fp8", None)


SCENARIO = """
name: moe-offload
seed: 3
duration: 20 s
warmup: 2 s
model: moe-small
catalog:
  models:
    moe-small:
      base: qwen3-235b-a22b
      num_layers: 8
      moe: {{num_experts: 32, experts_per_token: 4, expert_intermediate_size: 768, first_dense_layers: 1,
            shared_experts: 1}}
workload:
  arrival: {{kind: poisson, rate: 2/s}}
  input_tokens: {{kind: fixed, value: 512}}
  output_tokens: {{kind: fixed, value: 32}}
systems:
  all-hbm: {{node: h20-8x, instances: 1}}
  cold-host: {{node: h20-8x, instances: 1, instance: {{tp: 1, expert_skew: 1.0, weight_offload: {{fraction: 0.5}}}}}}
  cold-pool:
    node: h20-8x
    instances: 1
    instance: {{tp: 1, weight_offload: {{fraction: 0.5, home: pool}}}}
    {cache}
"""


def test_a_small_moe_runs_with_its_cold_experts_offloaded():
    text = SCENARIO.format(cache="kv_cache: {remote: {pool_node: dram-pool-8x}}")
    scenario = kvsim.parse_scenario(text, "moe.yaml")
    sized = check_scenario(scenario)
    full, host, pool = (sized[(0, s)].pools[0] for s in ("all-hbm", "cold-host", "cold-pool"))
    expert = 3 * 4096 * 768 * 2  # bf16, one card
    freed = (7 - 2) * 16 * expert  # 7 MoE layers, 16 of 32 experts each, two layers' buffers
    assert full.weight_bytes_per_card - host.weight_bytes_per_card == pytest.approx(freed, rel=1e-12)
    assert full.weight_bytes_per_card - pool.weight_bytes_per_card == pytest.approx(freed, rel=1e-12)
    assert sized[(0, "cold-pool")].weights_in_pool_bytes == pytest.approx(7 * 16 * expert, rel=1e-12)
    capacity = pool_node_catalog()["dram-pool-8x"].capacity_bytes
    assert sized[(0, "cold-pool")].pool_kv_bytes_per_node == pytest.approx(capacity - 7 * 16 * expert)
    assert "16 cold experts of each of 7 MoE layers streamed from host DRAM" in host.describe()
    result = kvsim.run(scenario)
    tpot = {run.system: run.summary["tpot_s"]["p50"] for run in result.runs}
    assert tpot["cold-host"] > tpot["all-hbm"] and tpot["cold-pool"] > tpot["all-hbm"]
    # without a pool, home: pool is refused, the field named
    with pytest.raises(SpecError) as caught:
        check_scenario(kvsim.parse_scenario(SCENARIO.format(cache=""), "moe.yaml"))
    assert "cold-pool.instance.weight_offload" in str(caught.value) and "kv_cache.remote" in str(caught.value)


@pytest.mark.parametrize("name", BACKENDS)
def test_the_expert_stream_with_host_overlap_coalesces_to_the_bit(name):
    from kvsim.models.engine import EngineSpec

    stream = weight_stream(WeightOffloadSpec(fraction=0.5), QWEN, H20, "fp8", None, 8, expert_skew=1.0)
    model = backend.kernels(name).step_time.RooflineStepTime(QWEN, H20, 8, "fp8", "fp8", EngineSpec(host_overlap=True),
                                                             stream=stream)
    for seqs in (1, 16, 200):
        run, array = model.decode_steps(seqs, seqs * 3000, 25), model.decode_steps_array(seqs, seqs * 3000, 25)
        for i in range(25):
            step = model.breakdown(BatchShape(decode_seqs=seqs, decode_context_tokens=seqs * 3000 + seqs * i,
                                              sampled_seqs=seqs))
            assert run.total_s[i] == step.total_s and run.memory_s[i] == step.memory_s
        assert np.array_equal(np.asarray(run.total_s), array.total_s)
