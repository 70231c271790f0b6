"""KV capacity of a multimodal checkpoint the way vLLM 0.15.1 sizes it (kvsim/models/vision.py,
kvsim/models/memory.py): the vision tower's weights, the RoPE table, the encoder profiling pass.

Every figure is worked by hand from Llama 4 Scout's config.json (vision_config: hidden 1408,
intermediate 5632, 34 layers, image 336, patch 14, pixel-shuffle 0.5, projector 4096 -> 5120;
image processor max_patches 16; text max_position_embeddings 10,485,760, head_dim 128).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from conftest import SHARED
from kvsim.calibration.measurements import read_measurements
from kvsim.calibration.memory_check import kv_capacity_rows
from kvsim.calibration.runs import run_scenario, run_scenario_raw
from kvsim.models import model_catalog
from kvsim.models.memory import (
    activation_reserve_bytes,
    loaded_extra_bytes_per_card,
    mm_profile_bytes,
    rope_table_bytes,
)
from kvsim.models.parallel import weight_bytes_per_card
from kvsim.models.vision import VisionTowerSpec
from kvsim.scenario.load import build_scenario
from kvsim.sim import check_scenario
from kvsim.yaml_io import Located

VLLM_RUNS = SHARED / "calibration" / "vllm_h100_runs.csv"
SCOUT = "llama-4-scout-17b-16e"
GIB = 2**30


@pytest.fixture(scope="module")
def scout():
    return model_catalog()[SCOUT]


def test_vision_tower_parameters_by_hand(scout):
    h, i, layers = 1408, 5632, 34
    per_layer = 4 * h * h + 4 * h + 2 * h * i + i + h + 4 * h  # q,k,v,o (+biases), fc1 (+bias), fc2 (+bias), 2 norms
    tower = layers * per_layer + 3 * 14 * 14 * h + h + 577 * h + 4 * h  # patch linear, class, positions, pre/post norms
    adapter = 5632 * 4096 + 4096 * 4096  # pixel-shuffle MLP, no bias (multi_modal_projector_bias false)
    projector = 4096 * 5120
    assert scout.vision.params(scout.hidden_size) == tower + adapter + projector == 871_932_416
    # the published per-module rows of the checkpoint: q_proj 1,982,464, fc1 7,929,856, positions 812,416,
    # adapter fc1 23,068,672 and fc2 16,777,216, projector 20,971,520
    assert (h * h, h * i, 577 * h, 5632 * 4096, 4096 * 4096, projector) == (
        1_982_464, 7_929_856, 812_416, 23_068_672, 16_777_216, 20_971_520)


def test_vision_tower_bytes_per_card_split_over_tp(scout):
    h, layers = 1408, 34
    kept = h + 577 * h + 4 * h + layers * (2 * h + 4 * h)  # embeddings, norms, o/fc2 biases: on every card
    split = scout.vision.params(scout.hidden_size) - kept
    assert scout.vision.bytes_per_card(scout.hidden_size, 2) == pytest.approx((split / 2 + kept) * 2, rel=1e-12)
    assert scout.vision.bytes_per_card(scout.hidden_size, 1) == pytest.approx(871_932_416 * 2, rel=1e-12)


def test_rope_table_is_every_position_times_head_dim(scout):
    assert rope_table_bytes(scout) == 10_485_760 * 128 * 2 == 2_684_354_560
    dense = model_catalog()["qwen2.5-7b"]
    assert dense.max_position_embeddings is None and rope_table_bytes(dense) == 0.0


def test_encoder_profile_by_hand(scout):
    v = scout.vision
    assert v.tiles_per_image == 17 and v.tokens_per_image == 17 * 144 == 2448
    # budget max(tokens, 2448): one image at 2048 or 4096 tokens, three at 8192; at most seqs x per-prompt
    assert [v.images_per_batch(t, 128, 999) for t in (2048, 4096, 8192)] == [1, 1, 3]
    assert v.images_per_batch(8192, 2, 1) == 2 and v.images_per_batch(8192, 128, 0) == 0
    peak, outputs = mm_profile_bytes(scout, 2048, 128, tp=2)
    assert peak == 17 * (3 * 336 * 336 + 577 * (1408 + 2 * 5632 / 2)) * 2  # 149.6 MB
    assert outputs == 2448 * 5120 * 2  # 25.1 MB, gathered on every card
    assert mm_profile_bytes(scout, 2048, 128, tp=2, images_per_prompt=0) == (0.0, 0.0)


def test_reserve_takes_the_peak_of_the_profiling_pass(scout):
    text = 2048 * 2 * 5120 * 2 + 128 * 202048 * 4 * 4  # hidden states + sampler rows
    peak, outputs = mm_profile_bytes(scout, 2048, 128, tp=2)
    assert peak < outputs + text  # the text pass, with the image embeddings cached, is the peak here
    assert activation_reserve_bytes(scout, 2048, 128, GIB, tp=2) == outputs + text + GIB
    for off in ({"images_per_prompt": 0}, {"mm_profiling": False}):
        assert activation_reserve_bytes(scout, 2048, 128, GIB, tp=2, **off) == text + GIB
    # a single-sequence engine with a tiny budget: the encoder pass is the peak
    assert activation_reserve_bytes(scout, 16, 1, 0.0, tp=1) == mm_profile_bytes(scout, 16, 1, tp=1)[0]


def test_text_models_keep_their_memory_terms():
    for name in model_catalog().names():
        model = model_catalog()[name]
        if model.vision is not None or model.max_position_embeddings is not None:
            continue
        assert loaded_extra_bytes_per_card(model, 2) == 0.0
        text = 2048 * 2 * model.hidden_size * 2 + 128 * model.vocab_size * 4 * 4
        assert activation_reserve_bytes(model, 2048, 128, GIB, tp=2) == text + GIB


def _blocks(pool, extra: float, reserve: float) -> int:
    inst = pool.spec.instance
    usable = pool.accelerator.memory_bytes * inst.memory_utilization
    weights = weight_bytes_per_card(pool.model, pool.layout, pool.dtype, pool.weight_dtypes)
    return int((usable - weights - extra - reserve) // (pool.kv_bytes_per_token_per_card * inst.block_size_tokens))


@pytest.mark.skipif(not VLLM_RUNS.exists(), reason="needs ../shared/calibration")
def test_kv_capacity_rows_dense_unchanged_scout_closer():
    runs = {run.run_id: run for run in read_measurements(VLLM_RUNS).runs}
    rows = kv_capacity_rows(VLLM_RUNS)
    scout_rows = [r for r in rows if "Scout" in r["model"]]
    assert scout_rows and len(scout_rows) < len(rows)
    for row in rows:
        (sizing,) = check_scenario(run_scenario(runs[row["run"]])).values()
        pool = sizing.pools[0]
        inst = pool.spec.instance
        text_reserve = (inst.max_batched_tokens * 2 * pool.model.hidden_size * 2
                        + min(inst.max_num_seqs, inst.max_batched_tokens) * pool.model.vocab_size * 16
                        + inst.runtime_reserve)
        before = _blocks(pool, 0.0, text_reserve)  # the sizing of the text-only accounting
        if row in scout_rows:
            # the new terms, by hand: tower 0.873 GB + RoPE table 2.684 GB per card, 25 MB image embeddings
            extra = pool.model.vision.bytes_per_card(5120, 2) + 10_485_760 * 128 * 2
            assert row["kvsim_blocks"] == _blocks(pool, extra, text_reserve + 2448 * 5120 * 2)
            assert before - row["kvsim_blocks"] > 2200  # 3.58 GB / 1.57 MB blocks
            # vLLM reported 8,253; from +46 % the error falls under 20 % and stays positive: about
            # 2.4 GB per card vLLM keeps is not modelled (see SCOUT_KV_NOTE)
            assert row["vllm_blocks"] == 8253
            assert 0.0 < row["error"] < 0.20
        else:
            assert row["kvsim_blocks"] == before
            assert abs(row["error"]) < 0.0125


def _build(raw):
    return build_scenario(raw, Located(raw, "<scout>"), None, strict=False)


def _scout_run_raw(**instance):
    run = next(r for r in read_measurements(VLLM_RUNS).runs if "Scout" in r.model)
    raw = run_scenario_raw(run, time_scale=0.01)
    raw["systems"]["vllm"]["instance"].update(instance)
    return raw


@pytest.mark.skipif(not VLLM_RUNS.exists(), reason="needs ../shared/calibration")
def test_text_only_option_drops_the_tower_and_its_profile(scout):
    def size(**instance):
        (sizing,) = check_scenario(_build(_scout_run_raw(**instance))).values()
        return sizing.pools[0]

    default, text_only, no_profile = size(), size(images_per_prompt=0), size(mm_profiling=False)
    tower = scout.vision.bytes_per_card(scout.hidden_size, 2)
    assert default.weight_bytes_per_card - text_only.weight_bytes_per_card == pytest.approx(tower, rel=1e-9)
    assert no_profile.weight_bytes_per_card == default.weight_bytes_per_card
    assert text_only.kv_budget_bytes_per_card - default.kv_budget_bytes_per_card == pytest.approx(
        tower + 2448 * 5120 * 2, rel=1e-9)
    assert no_profile.kv_budget_bytes_per_card - default.kv_budget_bytes_per_card == pytest.approx(
        2448 * 5120 * 2, rel=1e-9)


def test_a_tower_that_does_not_tile_is_refused_at_its_field(scout):
    fields = scout.vision.model_dump()
    with pytest.raises(ValidationError, match="patch_size"):
        VisionTowerSpec(**{**fields, "patch_size": 15})
    with pytest.raises(ValidationError, match="dtype"):
        VisionTowerSpec(**{**fields, "dtype": "int3"})


@pytest.mark.skipif(not VLLM_RUNS.exists(), reason="needs ../shared/calibration")
def test_deploy_writes_the_vllm_flags_of_the_options():
    from kvsim.plan.deploy_map import engine_groups

    def flags(**instance):
        groups, gaps = engine_groups(_build(_scout_run_raw(**instance)), "vllm", 1)
        return {s.name: s.value for s in groups[0].vllm.flags}, {g.field for g in gaps if g.engine == "sglang"}

    default, _ = flags()
    assert "--limit-mm-per-prompt" not in default and "--skip-mm-profiling" not in default
    text_only, gaps = flags(images_per_prompt=0, mm_profiling=False)
    assert text_only["--limit-mm-per-prompt"] == '{"image": 0}'
    assert "--skip-mm-profiling" in text_only and text_only["--skip-mm-profiling"] is None
    assert {p.rsplit(".", 1)[1] for p in gaps} >= {"images_per_prompt", "mm_profiling"}
