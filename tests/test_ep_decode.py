"""The large-EP decode arithmetic of docs/explanation/ep-decode.md (issue 26 item 7), checked by
hand: the weights a card streams per step, and what the page concludes from the table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvsim.dtypes import DTYPE_BYTES
from kvsim.models import model_catalog

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "gen"))
import gen_ep_decode  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    return {(r["ep"], r["per_rank"]): r for r in gen_ep_decode.rows()}


def _touched(tokens: int, experts: int = 384, k: int = 8) -> float:
    # each token picks k of the experts: an expert is missed by all tokens with (1 - k/E)^tokens
    return experts * (1 - (1 - k / experts) ** tokens)


@pytest.mark.parametrize("ep", gen_ep_decode.EP_DEGREES)
def test_more_sequences_stream_the_experts_they_newly_touch(rows, ep):
    k2 = model_catalog()["kimi-k2"]
    per_expert_card = k2.expert_params * DTYPE_BYTES["mxfp4"] / ep  # one expert of one layer, on one card
    low, high = rows[(ep, 1)], rows[(ep, 16)]
    extra = k2.num_moe_layers * (_touched(16 * ep) - _touched(ep)) * per_expert_card
    assert high["weights_bytes"] - low["weights_bytes"] == pytest.approx(extra, rel=1e-9)


def test_the_page_conclusions_hold(rows):
    at16 = [rows[(ep, 16)]["tpot_s"] for ep in gen_ep_decode.EP_DEGREES]
    assert at16 == sorted(at16, reverse=True)  # TPOT falls with EP at a fixed batch per rank
    best = rows[(128, 16)]
    assert 5e-3 < best["tpot_s"] < 10e-3  # inside the launch's 5-10 ms at EP 128
    assert best["kernels_s"] / best["tpot_s"] > 0.4  # kernel gaps: the largest single part there
    assert best["kernels_s"] > max(best["memory_s"], best["comm_s"], best["overhead_s"])
    # host time is one rank's share: the same at every EP degree for a given batch per rank
    assert len({rows[(ep, 64)]["overhead_s"] for ep in gen_ep_decode.EP_DEGREES}) == 1
