"""Checkpoints whose weight groups use different number formats (per-group weight dtypes)."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.models import model_catalog
from kvsim.models.llm import WEIGHT_GROUPS
from kvsim.sim import check_scenario

MODELS = model_catalog()


@pytest.mark.parametrize("name", MODELS.names())
def test_groups_add_up_to_the_whole_model(name):
    model = MODELS[name]
    groups = model.group_params()
    assert tuple(groups) == WEIGHT_GROUPS
    assert sum(groups.values()) == pytest.approx(model.total_params, rel=1e-12)
    assert all(v >= 0 for v in groups.values())
    # the same format everywhere is the single-dtype figure
    same = {group: "fp8" for group in WEIGHT_GROUPS}
    assert model.weight_bytes("bf16", same) == pytest.approx(model.weight_bytes("fp8"), rel=1e-12)
    for tokens in (1, 64):
        assert model.weight_bytes_read(tokens, "bf16", same) == pytest.approx(
            model.weight_bytes_read(tokens, "fp8"), rel=1e-9)


def test_gpt_oss_mxfp4_experts_bf16_rest_fits_one_80_gb_card():
    oss = MODELS["gpt-oss-120b"]
    expert = 3 * 2880 * 2880
    experts = 36 * 128 * expert  # 114.7 B parameters in MXFP4 (4.25 bits with its scales)
    rest = oss.total_params - experts  # 2.1 B in BF16
    nbytes = oss.weight_bytes("bf16", {"experts": "mxfp4"})
    assert nbytes == pytest.approx(experts * 4.25 / 8 + rest * 2, rel=1e-12)
    # about 65 GB: "runs within 80 GB of memory" (OpenAI gpt-oss model card)
    assert 60e9 < nbytes < 70e9
    # one decode token reads the non-expert weights (without the embedding lookup) and 4 of 128 experts per layer
    per_token = oss.weight_bytes_read(1, "bf16", {"experts": "mxfp4"})
    assert per_token == pytest.approx((rest - oss.embedding_params) * 2 + 36 * 4 * expert * 4.25 / 8, rel=1e-9)


def test_fp8_checkpoint_keeping_attention_in_bf16():
    q = MODELS["qwen3-8b"]
    groups = q.group_params()
    nbytes = q.weight_bytes("fp8", {"attention": "bf16"})
    assert nbytes == pytest.approx(groups["attention"] * 2 + (q.total_params - groups["attention"]) * 1, rel=1e-12)
    assert q.weight_bytes("fp8") < nbytes < q.weight_bytes("bf16")


SCENARIO = """
name: formats
duration: 30 s
model: gpt-oss-120b
dtype: bf16
weight_dtypes: {{experts: mxfp4}}
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 1000}}
  output_tokens: {{kind: fixed, value: 100}}
systems:
  one-h100: {{node: h100-8x, instances: 1, instance: {{tp: 1}}{extra}}}
"""


def test_scenario_weight_dtypes_size_the_pool_and_per_system_override():
    scenario = kvsim.parse_scenario(SCENARIO.format(extra=""), "f.yaml")
    pool = check_scenario(scenario)[(0, "one-h100")].pools[0]
    assert pool.weight_bytes_per_card == pytest.approx(MODELS["gpt-oss-120b"].weight_bytes("bf16", {"experts": "mxfp4"}))
    assert pool.kv_budget_bytes_per_card > 0
    assert pool.step_model().weight_dtypes == {"experts": "mxfp4"}
    # a system storing its experts in BF16 too no longer fits one card: refused, naming the formats
    bad = kvsim.parse_scenario(SCENARIO.format(extra=", weight_dtypes: {experts: bf16}"), "f.yaml")
    with pytest.raises(Exception) as info:
        check_scenario(bad)
    assert "do not fit" in str(info.value) and "experts bf16" in str(info.value)


def test_unknown_weight_group_is_refused_with_its_line():
    text = SCENARIO.format(extra="").replace("{experts: mxfp4}", "{expert: mxfp4}")
    with pytest.raises(kvsim.SpecError) as info:
        kvsim.parse_scenario(text, "f.yaml")
    assert "f.yaml:6: weight_dtypes.expert:" in str(info.value) and "experts" in str(info.value)
