"""Sizing before the run: KV capacity by hand, refusals, scenario-defined hardware, routers, traces."""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from conftest import SHARED
from kvsim.serving.router import LeastOutstandingRouter, RoundRobinRouter
from kvsim.sim import check_scenario

BASE = """
name: sizing
duration: 30 s
model: {model}
dtype: {dtype}
workload:
  arrival: {{kind: poisson, rate: 2/s}}
  input_tokens: {{kind: fixed, value: 1000}}
  output_tokens: {{kind: fixed, value: 100}}
systems:
  s: {{node: {node}, instance: {{tp: {tp}}}}}
"""


def _sizing(model="qwen3-8b", dtype="bf16", node="h20-8x", tp=1):
    scenario = kvsim.parse_scenario(BASE.format(model=model, dtype=dtype, node=node, tp=tp), "s.yaml")
    return check_scenario(scenario)[(0, "s")].pools[0]


def test_kv_capacity_by_hand_for_qwen3_8b_on_h20():
    s = _sizing()
    weights = 8_190_735_360 * 2  # params x 2 bytes (bf16)
    # vLLM-style reserve: the profiling pass's hidden states (2048 tokens x 2 x 4096 x 2 B), the
    # sampler's fp32 logits (256 seqs x 151,936 x 4 B x 4 copies) and 1 GiB of runtime
    reserve = 2048 * 2 * 4096 * 2 + 256 * 151_936 * 4 * 4 + 2**30
    budget = 97_871 * 2**20 * 0.9 - weights - reserve  # usable HBM - weights - activation reserve
    assert s.kv_budget_bytes_per_card == pytest.approx(budget)
    assert s.kv_blocks_per_instance == int(budget // (147_456 * 16))
    assert s.instances == 8 and s.cards == 8


def test_tp_splits_weights_but_kv_heads_are_replicated_beyond_their_count():
    # Qwen3-235B-A22B in fp8 at tp=8: weights split 8 ways; its 4 KV heads are replicated, so
    # each card holds a whole head per layer (2 * 94 * 1 * 128 * 1 byte per token).
    s = _sizing(model="qwen3-235b-a22b", dtype="fp8", tp=8)
    assert s.weight_bytes_per_card == pytest.approx(s.model.total_params / 8)
    assert s.kv_bytes_per_token_per_card == 2 * 94 * 1 * 128 * 1
    assert s.instances == 1


@pytest.mark.parametrize("model, node, tp, fragment", [
    ("qwen3-235b-a22b", "l20-8x", 1, "do not fit"),
    ("qwen3-8b", "h20-8x", 3, "must divide"),
    ("llama-3.1-70b", "h20-8x", 1, "do not fit"),  # 141 GB of weights vs 86.4 GB usable
])
def test_configurations_that_cannot_run_are_refused_with_the_reason(model, node, tp, fragment):
    with pytest.raises(kvsim.SpecError) as info:
        _sizing(model=model, node=node, tp=tp)
    assert fragment in str(info.value) and "s.yaml:" in str(info.value)


def test_weights_that_fit_but_leave_no_kv_room_are_refused():
    # 16.4 GB of weights fit the 43.2 GB an L20 offers, but not with a 30 GiB reserve beside them
    text = BASE.format(model="qwen3-8b", dtype="bf16", node="l20-8x", tp=1).replace(
        "instance: {tp: 1}", "instance: {tp: 1, activation_reserve: 30 GiB}")
    with pytest.raises(kvsim.SpecError, match="leave no room for the KV cache"):
        check_scenario(kvsim.parse_scenario(text, "s.yaml"))


def test_tp_that_does_not_split_the_heads_is_refused():
    text = BASE.format(model="qwen3-8b", dtype="bf16", node="gpu12", tp=12) + """
catalog:
  nodes:
    gpu12: {base: h20-8x, accelerators_per_node: 12}
"""
    with pytest.raises(kvsim.SpecError, match="does not split"):
        check_scenario(kvsim.parse_scenario(text, "s.yaml"))


def test_a_scenario_can_define_and_override_hardware_and_the_override_changes_the_physics():
    text = BASE.format(model="qwen3-8b", dtype="bf16", node="h20-8x", tp=1) + """
  slow: {node: h20-half-bw-8x, instances: 1}
catalog:
  accelerators:
    h20-half-bw: {base: h20, memory_bandwidth: 2 TB/s}
  nodes:
    h20-half-bw-8x: {base: h20-8x, accelerator: h20-half-bw}
"""
    text = text.replace("s: {node: h20-8x, instance: {tp: 1}}", "s: {node: h20-8x, instances: 1}")
    result = kvsim.run(kvsim.parse_scenario(text, "s.yaml"))
    fast, slow = result.run("s").summary, result.run("slow").summary
    # decode at this light load is memory-bound: half the bandwidth, nearly twice the TPOT
    ratio = slow["tpot_s"]["p50"] / fast["tpot_s"]["p50"]
    assert 1.5 < ratio < 2.05
    assert result.run("slow").sizing.pools[0].accelerator.memory_bandwidth == 2e12


class _Load:
    def __init__(self, outstanding):
        self.outstanding = outstanding


def test_routers():
    instances = [_Load(3), _Load(1), _Load(1), _Load(5)]
    assert LeastOutstandingRouter().choose(instances) == 1  # fewest, lowest index on ties
    rr = RoundRobinRouter()
    assert [rr.choose(instances) for _ in range(6)] == [0, 1, 2, 3, 0, 1]


def test_empirical_lengths_from_the_azure_trace_file(tmp_path):
    trace = SHARED / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"
    if not trace.exists():
        pytest.skip("shared traces not present")
    text = f"""
name: azure-lengths
duration: 20 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 5/s}}
  input_tokens: {{kind: empirical, file: {trace}, column: ContextTokens}}
  output_tokens: {{kind: empirical, file: {trace}, column: GeneratedTokens}}
systems:
  h20: {{node: h20-8x, instances: 1}}
"""
    scenario = kvsim.parse_scenario(text, "azure.yaml")
    observed = np.loadtxt(trace, delimiter=",", skiprows=1, usecols=1)
    dist = scenario.spec.workload.input_tokens
    assert len(dist.values) == np.count_nonzero(observed >= 1)
    assert dist.mean == pytest.approx(observed[observed >= 1].mean())
    records = kvsim.run(scenario).run("h20").records
    assert set(records.column("input_tokens").tolist()) <= set(dist.values)


def test_a_dram_tier_without_capacity_built_in_python_is_refused_by_name():
    # A scenario file's DRAM tier without capacity is refused on loading; a spec built (or copied)
    # in Python skips that check, and sizing compared None with the node's DRAM (a TypeError)
    # until mypy found it. Sizing now names the field.
    from kvsim.sim.sizing import size_system
    from kvsim.sim.sizing_checks import SizingError

    scenario = kvsim.load_scenario("scenarios/offload_gap.yaml")
    spec = scenario.spec
    name = next(n for n, s in spec.systems.items() if s.kv_cache is not None and s.kv_cache.dram is not None)
    system = spec.systems[name]
    cache = system.kv_cache
    dram = cache.dram.model_copy(update={"capacity": None})
    broken = spec.model_copy(update={"systems": {**spec.systems, name: system.model_copy(
        update={"kv_cache": cache.model_copy(update={"dram": dram})})}})
    size_system(spec, name, scenario.catalogs)  # the file's own tier sizes
    with pytest.raises(SizingError, match="host DRAM set aside") as caught:
        size_system(broken, name, scenario.catalogs)
    assert caught.value.path == ("systems", name, "kv_cache", "dram")
