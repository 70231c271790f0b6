"""KV capacity as kvsim sizes it, against the KV blocks vLLM reported for the same runs."""

from __future__ import annotations

import pytest

from conftest import SHARED
from kvsim.calibration.memory_check import kv_capacity_rows

RUNS = SHARED / "calibration" / "vllm_h100_runs.csv"


@pytest.fixture(scope="module")
def rows():
    if not RUNS.exists():
        pytest.skip(f"{RUNS} is not here")
    return kv_capacity_rows(RUNS)


def test_dense_models_within_two_percent_of_vllm(rows):
    dense = [r for r in rows if "Scout" not in r["model"]]
    assert len(dense) == 9
    for r in dense:
        assert abs(r["error"]) < 0.02, r


def test_the_token_budget_moves_capacity_the_way_vllm_does(rows):
    # Llama-3.1-70B at TP 4: 8192 against 2048 tokens of budget (runs 60 and 61)
    by_run = {r["run"]: r for r in rows}
    vllm_delta = by_run["61"]["vllm_blocks"] - by_run["60"]["vllm_blocks"]
    kvsim_delta = by_run["61"]["kvsim_blocks"] - by_run["60"]["kvsim_blocks"]
    assert kvsim_delta == pytest.approx(vllm_delta, rel=0.15)


def test_scout_fp8_checkpoint_keeps_attention_embeddings_and_lm_head_in_bf16(rows):
    from kvsim.calibration.measurements import read_measurements
    from kvsim.calibration.runs import run_scenario_raw

    scout = [r for r in rows if "Scout" in r["model"]]
    assert scout and all(r["kvsim_blocks"] == scout[0]["kvsim_blocks"] for r in scout)
    run = next(r for r in read_measurements(RUNS).runs if "Scout" in r.model)
    assert run_scenario_raw(run)["weight_dtypes"] == {"attention": "bf16", "embedding": "bf16", "lm_head": "bf16"}
    # by hand: per layer q, o 5120 x 5120, k, v 5120 x 1024, two 5120 norms; 48 layers + final norm
    attention = 48 * (2 * 5120 * 5120 + 2 * 5120 * 1024 + 2 * 5120) + 5120
    embedding = lm_head = 202048 * 5120
    extra_per_card = (attention + embedding + lm_head) * (2 - 1) / 2       # one more byte each, TP 2
    block_per_card = 16 * 48 * 2 * (8 // 2) * 128 * 2                       # 16 tokens, K and V, bf16
    from kvsim.scenario.load import build_scenario
    from kvsim.sim import check_scenario
    from kvsim.yaml_io import Located

    raw = {**run_scenario_raw(run), "weight_dtypes": {}}  # every weight in FP8
    (sizing,) = check_scenario(build_scenario(raw, Located(raw, "<raw>"), None, strict=False)).values()
    all_fp8 = sizing.pools[0].kv_blocks_per_instance
    assert abs((all_fp8 - scout[0]["kvsim_blocks"]) - extra_per_card / block_per_card) < 1.0
