"""The number format matrix multiplies run in, apart from the weights' (issue 26 item 4): W4A4, W4A8,
W4A16 on one card differ by the card's peaks alone; the weights' bytes do not move."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.models.step_time import BatchShape

SCENARIO = """name: w4
duration: 10 s
model: qwen3-235b-a22b
dtype: mxfp4
COMPUTE
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
systems:
  a: {node: dt-8x, instance: {tp: 8}}
catalog:  # a 950DT with a bf16 peak (made up here: none is published) so that W4A16 can be priced
  accelerators:
    dt-bf16: {base: ascend-950dt, flops: {fp8: 1 PFLOPS, mxfp4: 2 PFLOPS, bf16: 0.5 PFLOPS}}
  nodes:
    dt-8x: {base: atlas-850e, accelerator: dt-bf16}
"""


def _step(compute: str):
    from kvsim.sim.sizing import size_system

    scenario = kvsim.parse_scenario(SCENARIO.replace("COMPUTE", compute), "w4.yaml")
    point = scenario.points[0]
    pool = size_system(point.spec, "a", scenario.catalogs_for(point)).pools[0]
    return pool, pool.step_model()


@pytest.mark.parametrize("compute", ["fp8", "bf16"])
def test_the_compute_format_sets_the_peak_and_leaves_the_weights(compute):
    w4a4_pool, w4a4 = _step("")
    pool, other = _step(f"compute_dtype: {compute}")
    peaks = pool.accelerator.flops
    assert pool.weight_bytes_per_card == w4a4_pool.weight_bytes_per_card  # still mxfp4 in HBM
    prefill = BatchShape(prefill_tokens=8192, prefill_pairs=8192 * 8193 / 2, prefill_seqs=1)
    a, b = w4a4.breakdown(prefill), other.breakdown(prefill)
    # a compute-bound prefill: its roofline compute time scales by the ratio of the two peaks
    assert b.compute_s / a.compute_s == pytest.approx(peaks["mxfp4"] / peaks[compute], rel=1e-12)
    assert b.memory_s == a.memory_s  # the weights and KV read are the same bytes


def test_a_compute_format_the_card_lacks_is_refused(refused):
    err = refused("node: l20-8x\n    compute_dtype: mxfp4")
    assert "systems.s.compute_dtype" in err and "has no mxfp4 peak in the catalog to compute in" in err


H100 = """name: h100-formats
duration: 10 s
model: llama-3.1-8b
dtype: DTYPE
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
systems:
  a: {node: h100-8x, instance: {tp: 1}}
"""


def test_each_format_prefills_at_its_own_mfu_on_the_h100():
    """FP8 doubles the H100's peak, not its prefill rate: BF16 runs at the carried 0.70 of 989 TFLOPS,
    FP8 at its measured 0.35 of 1979 (efficiency.compute_formats), so a compute-bound prefill takes
    FLOPs / (peak x MFU) in each, by hand, and the FP8 one is barely faster."""
    from kvsim.sim.sizing import size_system

    prefill = BatchShape(prefill_tokens=8192, prefill_pairs=8192 * 8193 / 2, prefill_seqs=1)
    times = {}
    for dtype, peak, mfu in (("bf16", 989e12, 0.70), ("fp8", 1979e12, 0.35)):
        scenario = kvsim.parse_scenario(H100.replace("DTYPE", dtype), "h100.yaml")
        point = scenario.points[0]
        pool = size_system(point.spec, "a", scenario.catalogs_for(point)).pools[0]
        assert pool.accelerator.efficiency.compute_for(dtype) == mfu
        step = pool.step_model()
        parts = step.breakdown(prefill)
        flops = step._body_flops * 8192 + step._attn_prefill * 8192 * 8193 / 2  # no token sampled in this shape
        assert parts.compute_s == pytest.approx(flops / (peak * mfu), rel=1e-9)
        times[dtype] = parts.compute_s
    assert times["fp8"] / times["bf16"] == pytest.approx((989e12 * 0.70) / (1979e12 * 0.35), rel=1e-9)
