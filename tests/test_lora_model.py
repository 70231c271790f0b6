"""LoRA adapter sizes and extra work against hand arithmetic (Hu et al. 2022: r (d_in + d_out) per layer)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kvsim.models import model_catalog
from kvsim.models.lora import adapter_bytes, adapter_flops_per_token, adapter_params, adapter_problems
from kvsim.workload.adapters import AdapterSpec, adapter_probabilities


def test_attention_adapter_of_llama_3_1_8b_by_hand():
    model = model_catalog()["llama-3.1-8b"]  # hidden 4096, 32 heads x 128, 8 KV heads, 32 layers
    spec = AdapterSpec(count=8, rank=16)  # q, k, v, o
    per_layer = 16 * ((4096 + 4096) + (4096 + 1024) + (4096 + 1024) + (4096 + 4096))
    assert adapter_params(model, spec.rank, spec.targets) == 32 * per_layer == 13_631_488
    assert adapter_bytes(model, spec.rank, spec.targets, spec.dtype) == pytest.approx(2 * 13_631_488)  # ~27 MB
    assert adapter_flops_per_token(model, spec.rank, spec.targets) == pytest.approx(2 * 13_631_488)


def test_mlp_targets_and_rank_scale_linearly():
    model = model_catalog()["llama-3.1-8b"]
    mlp = ("gate", "up", "down")
    assert adapter_params(model, 8, mlp) == 32 * 8 * 3 * (4096 + 14336)
    assert adapter_params(model, 16, mlp) == 2 * adapter_params(model, 8, mlp)


def test_refusals():
    catalog = model_catalog()
    moe = next(catalog[n] for n in catalog.names() if catalog[n].moe is not None and catalog[n].mla is None)
    assert adapter_problems(moe, ("q", "up"))
    assert not adapter_problems(moe, ("q", "k", "v", "o"))
    mla = next(catalog[n] for n in catalog.names() if catalog[n].mla is not None)
    assert "MLA" in adapter_problems(mla, ("q",))[0]
    with pytest.raises(ValidationError, match="listed twice"):
        AdapterSpec(count=1, targets=("q", "q"))
    with pytest.raises(ValidationError):
        AdapterSpec(count=0)
    with pytest.raises(ValidationError, match="unknown dtype"):
        AdapterSpec(count=1, dtype="int3")


def test_adapter_popularity_draws():
    import numpy as np

    zipf = AdapterSpec(count=4, popularity="zipf", zipf_s=1.0)
    p = adapter_probabilities(zipf)
    assert p == pytest.approx(np.array([1, 1 / 2, 1 / 3, 1 / 4]) / (1 + 1 / 2 + 1 / 3 + 1 / 4))
    draws = AdapterSpec(count=4).draw(np.random.default_rng(0), 40_000)
    assert set(draws.tolist()) == {0, 1, 2, 3}
    assert np.bincount(draws) / 40_000 == pytest.approx([0.25] * 4, abs=0.01)
