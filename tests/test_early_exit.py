"""Early exit (issue 28 item 2): the (N - d) / N saving by hand with and without weight offload,
a batch's step running to its deepest exit (the expected depth in closed form), the KV fill bytes,
the HBM budget, the spec's checks, and runs that are deterministic and unchanged without it."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

import kvsim
from kvsim.hardware import accelerator_catalog
from kvsim.models import model_catalog
from kvsim.models.early_exit import (
    EarlyExitSpec,
    deepest_exit,
    depth_probabilities,
    exit_cdf,
    expected_depth,
    head_bytes_per_card,
    kv_fill_bytes,
)
from kvsim.models.early_exit_step import EarlyExitStepTime
from kvsim.models.step_time import BatchShape, RooflineStepTime
from kvsim.models.weight_offload import WeightOffloadSpec, layer_bytes_per_card, weight_stream
from kvsim.sim import check_scenario
from kvsim.yaml_io import SpecError

LLAMA2 = "llama-2-7b"  # 32 layers, 32 KV heads of 128


def _exit_model(spec: EarlyExitSpec, fraction: float | None = None, card: str = "l20", seed: int | None = 0):
    model, acc = model_catalog()[LLAMA2], accelerator_catalog()[card]
    stream = None if fraction is None else weight_stream(WeightOffloadSpec(fraction=fraction), model, acc, "bf16",
                                                         None, 1)
    flat = RooflineStepTime(model, acc, 1, "bf16", "bf16")
    full = RooflineStepTime(model, acc, 1, "bf16", "bf16", stream=stream)
    rng = None if seed is None else np.random.default_rng(seed)
    return EarlyExitStepTime(spec, flat, stream, rng), flat, full, stream


def _decode(b: int, context: int = 1024) -> BatchShape:
    return BatchShape(decode_seqs=b, decode_context_tokens=b * context, sampled_seqs=b)


FREE = dict(head_cost=0.0)  # exit heads free: the saving alone


def test_exit_at_layer_d_saves_the_skipped_layers_compute_by_hand():
    spec = EarlyExitSpec(exit_layers=(8, 16, 32), distribution=(0.2, 0.3, 0.5), **FREE)
    step, flat, _, _ = _exit_model(spec)
    model = step.model
    batch = _decode(4)
    whole = flat.breakdown(batch)
    rate = flat._rates.gemm_flops_per_s(4)
    head_s = model.lm_head_flops * 4 / rate  # the LM head runs once whatever the depth
    for index, d in enumerate((8, 16, 32)):
        part = step.at_depth(batch, index)
        saved = (whole.compute_s - head_s) - (part.compute_s - head_s)
        assert saved == pytest.approx((32 - d) / 32 * (whole.compute_s - head_s), rel=1e-12)
        # all-reduces and launches are per layer; the host's work is not
        assert part.kernels_s == pytest.approx(d / 32 * whole.kernels_s, rel=1e-12)
        assert part.overhead_s == whole.overhead_s
    # running every layer reproduces the roofline (no head, no fill)
    full = step.at_depth(batch, 2)
    assert full.compute_s == pytest.approx(whole.compute_s, rel=1e-12)
    assert full.memory_s == pytest.approx(whole.memory_s, rel=1e-12)


def test_exit_under_offload_saves_the_skipped_layers_transfers_by_hand():
    # half of 32 layers on the host, over the L20's PCIe: transfers are the step's pace
    spec = EarlyExitSpec(exit_layers=(12, 24, 32), distribution=(0.2, 0.3, 0.5), **FREE)
    step, flat, full, stream = _exit_model(spec, fraction=0.5)
    assert stream.offloaded == 16
    batch = _decode(2)
    whole = full.breakdown(batch)
    tau = stream.layer_s
    assert whole.memory_s == pytest.approx(16 * tau + max(whole.compute_s, flat.breakdown(batch).memory_s) / 32,
                                           rel=1e-12)
    # exit at 24: 8 of the 16 streamed layers run, 8 transfers saved
    part = step.at_depth(batch, 1)
    x = max(part.compute_s, _unstreamed_memory(step, flat, batch, 24))
    assert part.memory_s == pytest.approx(8 * tau + x / 24, rel=1e-12)
    assert whole.memory_s - part.memory_s == pytest.approx(8 * tau + (whole.memory_s - 16 * tau) - x / 24, rel=1e-9)
    # exit at 12, before every streamed layer: no transfer waited for, the step as fast as in HBM
    early = step.at_depth(batch, 0)
    assert early.memory_s == pytest.approx(_unstreamed_memory(step, flat, batch, 12), rel=1e-12)
    assert early.total_s < whole.total_s / 10
    # the transfers saved are (N - d) of the streamed layers' tau each: the larger the share offloaded,
    # the more an exit saves (FlexEE's finding, arXiv:2609.17008)
    none, _, plain, _ = _exit_model(spec)
    gain_hbm = plain.breakdown(batch).total_s / none.at_depth(batch, 1).total_s
    gain_offloaded = whole.total_s / part.total_s
    assert gain_offloaded > gain_hbm > 1.0


def _unstreamed_memory(step, flat, batch, depth):
    """Memory phase of a step to ``depth`` with every layer in HBM, by hand: the layers' weights
    and KV read scaled by depth / L, the LM head's weights, and the copy fill of the skipped layers."""
    model = step.model
    rates = flat._rates
    layer_bytes = layer_bytes_per_card(model, "bf16", None, 1)
    rest_s = (model.weight_bytes_read(1, "bf16") - 32 * layer_bytes) / rates.weight_Bps
    layers_s = flat.breakdown(batch).memory_s - rest_s
    fill = kv_fill_bytes(batch.decode_seqs, 32 - depth, model.kv_bytes_per_token("bf16") / 32)
    return depth / 32 * layers_s + rest_s + fill / rates.kv_Bps


def test_kv_fill_bytes_by_hand():
    model = model_catalog()[LLAMA2]
    per_layer = 2 * 32 * 128 * 2  # K and V, 32 heads of 128, bf16
    assert model.kv_bytes_per_token("bf16") / 32 == per_layer
    assert kv_fill_bytes(8, 32 - 20, per_layer) == 8 * 12 * per_layer
    spec = EarlyExitSpec(exit_layers=(20, 32), distribution=(0.5, 0.5), **FREE)
    step, flat, _, _ = _exit_model(spec)
    batch = _decode(8)
    part = step.at_depth(batch, 0)
    assert part.memory_s == pytest.approx(_unstreamed_memory(step, flat, batch, 20), rel=1e-12)
    # through the K and V projections instead: FLOPs b * skipped * 2 * hidden * 2 * kv_dim, and their weights
    project = EarlyExitStepTime(spec.model_copy(update={"kv_fill": "project"}), flat)
    other = project.at_depth(batch, 0)
    rate = flat._rates.gemm_flops_per_s(8)
    assert other.compute_s - part.compute_s == pytest.approx(8 * 12 * 2 * 4096 * 2 * 4096 / rate, rel=1e-9)
    kv_proj_s = 12 * 2 * 4096 * 4096 * 2 / flat._rates.weight_Bps
    assert other.memory_s - part.memory_s == pytest.approx(kv_proj_s - 8 * 12 * per_layer / flat._rates.kv_Bps,
                                                           rel=1e-9)


def test_exit_heads_and_the_check_are_charged():
    spec = EarlyExitSpec(exit_layers=(8, 16, 32), distribution=(0.2, 0.3, 0.5), head_cost=0.05)
    step, flat, _, _ = _exit_model(spec)
    free = EarlyExitStepTime(spec.model_copy(update={"head_cost": 0.0}), flat)
    batch = _decode(4)
    layer_s = layer_bytes_per_card(step.model, "bf16", None, 1) / flat._rates.weight_Bps
    # a step to 16 evaluates the heads at 8 and 16; one to 32 those and none at the last layer
    for index, heads in ((0, 1), (1, 2), (2, 2)):
        extra = step.at_depth(batch, index).memory_s - free.at_depth(batch, index).memory_s
        assert extra == pytest.approx(heads * 0.05 * layer_s, rel=1e-9)
    checked = EarlyExitStepTime(spec.model_copy(update={"head_cost": 0.0, "check_every": 4}), flat)
    a, b = free.at_depth(batch, 0), checked.at_depth(batch, 0)
    # every 4 steps the 24 skipped layers run over the drafted tokens: their compute every step,
    # a quarter of their weight reads
    assert b.memory_s - a.memory_s == pytest.approx(24 * layer_s / 4, rel=1e-9)
    assert b.compute_s > a.compute_s
    assert checked.at_depth(batch, 2) == free.at_depth(batch, 2)  # nothing skipped, nothing checked


def test_a_batch_runs_to_its_deepest_exit():
    spec = EarlyExitSpec(exit_layers=(16, 32), distribution=(0.7, 0.3), **FREE)
    depths, cdf = exit_cdf(spec, 32)
    # two points: E[depth] = 16 + 16 (1 - 0.7^b), by hand
    for b in (1, 2, 8, 64):
        assert expected_depth(spec, 32, b) == pytest.approx(16 + 16 * (1 - 0.7 ** b), rel=1e-12)
    assert depth_probabilities(cdf, 3) == pytest.approx([0.343, 1 - 0.343])
    # inverse CDF of the maximum: u below F^b exits at 16
    assert deepest_exit(depths, cdf, 1, 0.69) == 16 and deepest_exit(depths, cdf, 1, 0.71) == 32
    assert deepest_exit(depths, cdf, 2, 0.48) == 16 and deepest_exit(depths, cdf, 2, 0.5) == 32
    # sampled: the mean depth of many steps is the closed form's, within its standard error
    step, _, _, _ = _exit_model(spec, seed=3)
    for b in (1, 4, 32):
        drawn = np.array([step.depths[step.draw(b)] for _ in range(4000)])
        p = 0.7 ** b
        se = 16 * np.sqrt(p * (1 - p) / 4000)
        assert abs(drawn.mean() - expected_depth(spec, 32, b)) < 4 * se + 1e-9
    # so the planner's expected step saves less the larger the batch
    _, flat, _, _ = _exit_model(spec)
    saving = {b: 1 - step.iteration_time_s(_decode(b)) / flat.iteration_time_s(_decode(b)) for b in (1, 8, 64)}
    assert saving[1] > saving[8] > saving[64] > 0
    assert saving[64] < 1e-6  # 0.7^64: virtually every step runs all 32 layers


def test_prefill_runs_every_layer():
    spec = EarlyExitSpec(exit_layers=(8, 32), distribution=(0.9, 0.1))
    for fraction in (None, 0.25):
        step, _, full, _ = _exit_model(spec, fraction)
        prompt = BatchShape(prefill_tokens=512, prefill_pairs=512 * 513 / 2, prefill_seqs=1, sampled_seqs=1)
        mixed = prompt._replace(decode_seqs=4, decode_context_tokens=4096, sampled_seqs=5)
        for batch in (prompt, mixed):
            assert step.breakdown(batch) == full.breakdown(batch)
            assert step.iteration_time_s(batch) == full.iteration_time_s(batch)


def test_the_spec_refuses_what_it_cannot_mean():
    with pytest.raises(ValidationError, match="sum to 0.9"):
        EarlyExitSpec(exit_layers=(8, 32), distribution=(0.5, 0.4))
    with pytest.raises(ValidationError, match="must increase"):
        EarlyExitSpec(exit_layers=(16, 8), distribution=(0.5, 0.5))
    with pytest.raises(ValidationError, match="one per exit layer"):
        EarlyExitSpec(exit_layers=(8, 16, 32), distribution=(0.5, 0.5))
    with pytest.raises(SpecError) as caught:  # from a file: the field named
        kvsim.parse_scenario(_text(exits="{exit_layers: [8, 32], distribution: [0.5, 0.6]}"), "exit.yaml")
    assert "engine.early_exit.distribution" in str(caught.value)
    with pytest.raises(SpecError) as caught:  # beyond the model's layers
        check_scenario(kvsim.parse_scenario(_text(exits="{exit_layers: [8, 40], distribution: [0.5, 0.5]}"),
                                            "exit.yaml"))
    assert "engine.early_exit.exit_layers" in str(caught.value) and "32 layers" in str(caught.value)


SCENARIO = """
name: exit
seed: {seed}
duration: 30 s
warmup: 5 s
model: llama-2-7b
engine: {{early_exit: {exits}}}
workload:
  arrival: {{kind: poisson, rate: 2/s}}
  input_tokens: {{kind: fixed, value: 512}}
  output_tokens: {{kind: fixed, value: 64}}
systems:
  hbm: {{node: l20-8x, instances: 1}}
  half-host: {{node: l20-8x, instances: 1, instance: {{weight_offload: {{fraction: 0.5}}}}}}
"""
EXITS = "{exit_layers: [8, 16, 24], distribution: [0.3, 0.3, 0.4]}"


def _text(exits: str = EXITS, seed: int = 1) -> str:
    return SCENARIO.format(exits=exits, seed=seed)


def test_the_exit_heads_take_hbm_and_weights_plus_kv_still_fit():
    with_exit = check_scenario(kvsim.parse_scenario(_text(), "exit.yaml"))
    without = check_scenario(kvsim.parse_scenario(_text().replace(f"engine: {{early_exit: {EXITS}}}\n", ""),
                                                  "exit.yaml"))
    model = model_catalog()[LLAMA2]
    heads = head_bytes_per_card(EarlyExitSpec(exit_layers=(8, 16, 24), distribution=(0.3, 0.3, 0.4)), model,
                                "bf16", None, 1)
    assert heads == pytest.approx(3 * 0.01 * layer_bytes_per_card(model, "bf16", None, 1))
    for system in ("hbm", "half-host"):
        a, b = with_exit[(0, system)].pools[0], without[(0, system)].pools[0]
        assert a.weight_bytes_per_card - b.weight_bytes_per_card == pytest.approx(heads, rel=1e-12)
        assert b.kv_budget_bytes_per_card - a.kv_budget_bytes_per_card == pytest.approx(heads, rel=1e-12)
        inst = a.spec.instance
        kv_bytes = a.kv_blocks_per_instance * inst.block_size_tokens * a.kv_bytes_per_token_per_card
        assert a.weight_bytes_per_card + kv_bytes <= a.accelerator.memory_bytes * inst.memory_utilization


def test_runs_are_deterministic_and_exits_shorten_decode():
    first = kvsim.run(kvsim.parse_scenario(_text(), "exit.yaml"))
    again = kvsim.run(kvsim.parse_scenario(_text(), "exit.yaml"))
    other = kvsim.run(kvsim.parse_scenario(_text(seed=2), "exit.yaml"))
    plain = kvsim.run(kvsim.parse_scenario(_text().replace(f"engine: {{early_exit: {EXITS}}}\n", ""), "exit.yaml"))
    tpot = {}
    for name, result in (("first", first), ("again", again), ("other", other), ("plain", plain)):
        tpot[name] = {run.system: run.summary["tpot_s"]["p50"] for run in result.runs}
    assert tpot["first"] == tpot["again"]
    assert tpot["first"] != tpot["other"]
    for system in ("hbm", "half-host"):
        assert tpot["first"][system] < tpot["plain"][system]
    # the offloaded system gains more: its exits skip transfers, not only compute
    assert (tpot["plain"]["half-host"] / tpot["first"]["half-host"]
            > tpot["plain"]["hbm"] / tpot["first"]["hbm"])


def test_an_exit_profile_that_never_exits_changes_nothing():
    # every token to the last layer, heads free: the step-by-step run of the plain roofline
    never = _text(exits="{exit_layers: [32], distribution: [1.0], head_cost: 0}")
    plain = _text().replace(f"engine: {{early_exit: {EXITS}}}\n", "engine: {coalesce: false}\n")
    a, b = kvsim.run(kvsim.parse_scenario(never, "exit.yaml")), kvsim.run(kvsim.parse_scenario(plain, "exit.yaml"))
    for x, y in zip(a.runs, b.runs):
        assert x.summary["requests_completed"] == y.summary["requests_completed"]
        assert x.summary["tpot_s"]["p50"] == pytest.approx(y.summary["tpot_s"]["p50"], rel=1e-9)
