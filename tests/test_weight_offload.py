"""Weight offload (issue 28 item 1): the streamed layers' pipeline bound by hand, the coalesced
decode run equal to the step-by-step one, the HBM it frees and the host DRAM it takes, and the
cases it refuses."""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.hardware import accelerator_catalog, node_catalog
from kvsim.models import model_catalog
from kvsim.models.step_time import BatchShape, RooflineStepTime, streamed_memory_s
from kvsim.models.weight_offload import WeightOffloadSpec, layer_bytes_per_card, offloaded_layers, weight_stream
from kvsim.sim import check_scenario
from kvsim.yaml_io import SpecError


def test_the_pipeline_bound_by_hand():
    # 10 layers, 4 of them streamed: tau the transfer of one, c = x / 10 one layer's compute
    # transfers slower than compute: the four transfers back to back, then the last layer
    assert streamed_memory_s(compute_s=1.0, memory_s=0.5, layers=10, offloaded=4, layer_s=0.4) == pytest.approx(
        4 * 0.4 + 0.1)
    # transfers a little faster than compute: the first transfer, then the four layers' compute
    assert streamed_memory_s(1.0, 0.3, 10, 4, 0.08) == pytest.approx(0.08 + 4 * 0.1)
    assert 0.08 + 4 * 0.1 > 4 * 0.08 + 0.1 > 0.3
    # transfers hidden behind the resident layers: the memory phase as it was
    assert streamed_memory_s(1.0, 0.5, 10, 4, 0.01) == 0.5
    # and never below the memory phase the roofline gave
    assert streamed_memory_s(0.1, 3.0, 10, 4, 0.05) == 3.0


def test_layers_and_bytes_on_the_host():
    llama = model_catalog()["llama-3.1-8b"]
    assert [offloaded_layers(llama, f) for f in (0.01, 0.5, 0.75, 0.99)] == [1, 16, 24, 32]
    per_layer = layer_bytes_per_card(llama, "bf16", None, 1)
    # attention (q 4096x4096, k and v 4096x1024, o 4096x4096) + SwiGLU (3 x 4096 x 14336) + 2 norms, bf16
    params = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336 + 2 * 4096
    assert per_layer == pytest.approx(params * 2, rel=1e-9)
    assert layer_bytes_per_card(llama, "bf16", None, 2) == pytest.approx(per_layer / 2)
    l20 = accelerator_catalog()["l20"]
    stream = weight_stream(WeightOffloadSpec(fraction=0.5), llama, l20, "bf16", None, 1)
    assert stream.offloaded == 16
    assert stream.layer_s == pytest.approx(per_layer / (l20.host_link_bandwidth * l20.efficiency.host_copy))


def _model(fraction: float | None, card: str = "l20"):
    llama, acc = model_catalog()["llama-3.1-8b"], accelerator_catalog()[card]
    stream = None if fraction is None else weight_stream(WeightOffloadSpec(fraction=fraction), llama, acc, "bf16",
                                                         None, 1)
    return RooflineStepTime(llama, acc, 1, "bf16", "bf16", stream=stream), stream


def test_a_decode_step_waits_for_its_streamed_layers_by_hand():
    plain, _ = _model(None)
    offloaded, stream = _model(0.5)
    batch = BatchShape(decode_seqs=8, decode_context_tokens=8 * 2048, sampled_seqs=8)
    a, b = plain.breakdown(batch), offloaded.breakdown(batch)
    x = max(a.compute_s, a.memory_s)
    expected = max(a.memory_s, stream.offloaded * stream.layer_s + x / 32, stream.layer_s + stream.offloaded * x / 32)
    assert b.memory_s == pytest.approx(expected, rel=1e-12) and b.compute_s == a.compute_s
    # over PCIe Gen4 the 16 layers' transfer (~280 ms) dwarfs the step (~25 ms): memory-bound by the stream
    assert b.memory_s == pytest.approx(stream.offloaded * stream.layer_s + x / 32, rel=1e-12)
    assert b.total_s > 8 * a.total_s
    assert (b.comm_s, b.kernels_s, b.overhead_s) == (a.comm_s, a.kernels_s, a.overhead_s)


def test_a_large_prefill_hides_a_small_offload():
    # 16K tokens of prompt take seconds of compute; one layer's transfer is hidden behind them
    plain, _ = _model(None, "h20")
    offloaded, stream = _model(0.03, "h20")
    assert stream.offloaded == 1
    n = 16384
    batch = BatchShape(prefill_tokens=n, prefill_seqs=1, prefill_pairs=n * (n + 1) / 2, sampled_seqs=1)
    assert offloaded.breakdown(batch).total_s == plain.breakdown(batch).total_s


def test_the_coalesced_decode_run_equals_its_steps():
    model, _ = _model(0.25)
    run = model.decode_steps(16, 16 * 4096, 40)
    array = model.decode_steps_array(16, 16 * 4096, 40)
    for k in range(40):
        step = model.breakdown(BatchShape(decode_seqs=16, decode_context_tokens=16 * 4096 + 16 * k, sampled_seqs=16))
        assert run.total_s[k] == step.total_s and run.memory_s[k] == step.memory_s
    assert np.array_equal(np.asarray(run.total_s), array.total_s)
    assert np.array_equal(np.asarray(run.memory_s), array.memory_s)


SCENARIO = """
name: offload
seed: 1
duration: 40 s
warmup: 5 s
model: {model}
workload:
  arrival: {{kind: poisson, rate: 0.5/s}}
  input_tokens: {{kind: fixed, value: 1024}}
  output_tokens: {{kind: fixed, value: 64}}
systems:
  all-hbm: {{node: {node}, instances: 1}}
  half-host: {{node: {node}, instances: 1, instance: {{tp: {tp}, weight_offload: {{fraction: 0.5}}}}}}
"""


def _text(model="llama-3.1-8b", node="l20-8x", tp=1):
    return SCENARIO.format(model=model, node=node, tp=tp)


def test_offload_frees_hbm_for_kv_and_slows_every_step():
    scenario = kvsim.parse_scenario(_text(), "offload.yaml")
    sized = check_scenario(scenario)
    full, half = sized[(0, "all-hbm")].pools[0], sized[(0, "half-host")].pools[0]
    llama = model_catalog()["llama-3.1-8b"]
    per_layer = layer_bytes_per_card(llama, "bf16", None, 1)
    freed = (16 - 2) * per_layer  # two layers' buffers stay in HBM
    assert full.weight_bytes_per_card - half.weight_bytes_per_card == pytest.approx(freed, rel=1e-12)
    assert half.kv_budget_bytes_per_card - full.kv_budget_bytes_per_card == pytest.approx(freed, rel=1e-12)
    assert half.kv_blocks_per_instance > full.kv_blocks_per_instance
    result = kvsim.run(scenario)
    tpot = {run.system: run.summary["tpot_s"]["p50"] for run in result.runs}
    assert tpot["half-host"] > 5 * tpot["all-hbm"]


def test_what_offload_refuses_names_the_field():
    staged = _text(tp=2).replace("tp: 2,", "tp: 2, pp: 2,")
    with pytest.raises(SpecError) as caught:  # pipeline stages (an MoE model's experts: tests/test_weight_offload_moe.py)
        check_scenario(kvsim.parse_scenario(staged, "offload.yaml"))
    assert "instance.weight_offload" in str(caught.value) and "inside one node" in str(caught.value)
    with pytest.raises(SpecError) as caught:  # not a share
        kvsim.parse_scenario(_text().replace("fraction: 0.5", "fraction: 1.5"), "offload.yaml")
    assert "weight_offload.fraction" in str(caught.value)
    # host DRAM too small for the node's offloaded layers
    small = node_catalog()["l20-8x"].host_dram_bytes
    layers_bytes = 16 * layer_bytes_per_card(model_catalog()["llama-3.1-8b"], "bf16", None, 1) * 8
    assert layers_bytes < small  # the catalog node holds them ...
    text = _text().replace("systems:", "catalog:\n  nodes:\n    tiny-host:\n      base: l20-8x\n"
                           "      host_dram_bytes: 16 GiB\nsystems:").replace("node: l20-8x", "node: tiny-host")
    with pytest.raises(SpecError) as caught:  # ... a 16 GiB host does not
        check_scenario(kvsim.parse_scenario(text, "offload.yaml"))
    assert "host DRAM" in str(caught.value) and "lower the fraction" in str(caught.value)
