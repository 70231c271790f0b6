"""KV capacity as kvsim sizes it, against the KV blocks vLLM reported for the same runs."""

from __future__ import annotations

import pytest

from kvsim.calibration.memory_check import kv_capacity_rows

from conftest import SHARED

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
