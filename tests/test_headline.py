"""The headline scenario shows the physics the issue asks for, derived from the catalog figures.

Decode is memory-bound: TPOT should scale roughly with the inverse of achieved memory bandwidth.
Prefill is compute-bound: TTFT at light load should scale roughly with the inverse of peak
FLOP/s. The L20 server, slower at both, should saturate at a lower load.
"""

from __future__ import annotations

import pytest

import kvsim
from kvsim.hardware import accelerator_catalog


@pytest.fixture(scope="module")
def headline(request):
    repo = request.config.rootpath
    scenario = kvsim.load_scenario(repo / "scenarios" / "h20_vs_l20.yaml")
    # a shorter window than the shipped run keeps the test quick; the physics does not change
    # and without the engine's host-side costs, whose per-sequence part grows with the larger
    # batch the slower card holds, the ratios below are the hardware's alone
    quick = scenario.with_changes({"duration": "120 s", "warmup": "20 s",
                                   "sweep": {"workload.arrival.rate": ["5/s", "20/s"]},
                                   "engine": {"step_fixed_s": 0, "step_per_seq_s": 0, "step_per_token_s": 0,
                                              "api_s": 0, "tokenize_s_per_token": 0, "output_s": 0}})
    return kvsim.run(quick).summary_frame().set_index(["workload.arrival.rate", "system"])


def test_decode_tpot_ratio_tracks_memory_bandwidth(headline):
    catalog = accelerator_catalog()
    h20, l20 = catalog["h20"], catalog["l20"]
    nominal = h20.memory_bandwidth / l20.memory_bandwidth  # 4.63x
    achieved = (h20.memory_bandwidth * h20.efficiency.memory) / (l20.memory_bandwidth * l20.efficiency.memory)
    ratio = headline.loc[("5/s", "l20"), "tpot_s_p50"] / headline.loc[("5/s", "h20"), "tpot_s_p50"]
    # prefill iterations (compute ratio 1.24) pull the ratio below the bandwidth ratio; the slower
    # card holding more sequences at once (Little's law), so reading more KV per step, pushes it above
    assert 0.75 * achieved < ratio <= achieved * 1.25
    assert ratio > 0.6 * nominal


def test_prefill_ttft_ratio_tracks_compute_at_light_load(headline):
    catalog = accelerator_catalog()
    compute = (catalog["h20"].flops["bf16"] * catalog["h20"].efficiency.compute) / (
        catalog["l20"].flops["bf16"] * catalog["l20"].efficiency.compute)  # 1.24x
    ratio = headline.loc[("5/s", "l20"), "ttft_s_p50"] / headline.loc[("5/s", "h20"), "ttft_s_p50"]
    # TTFT also contains a share of decode work batched with the prefill, which is slower on
    # L20, so the ratio sits somewhat above the compute ratio -- but far below the TPOT ratio
    assert compute * 0.95 < ratio < compute * 1.35


def test_l20_saturates_at_a_lower_load_than_h20(headline):
    offered = 20.0
    h20 = headline.loc[("20/s", "h20")]
    l20 = headline.loc[("20/s", "l20")]
    assert h20.goodput_requests_per_s > 0.9 * offered
    assert l20.goodput_requests_per_s < 0.5 * offered
    assert l20.requests_unfinished > 5 * h20.requests_unfinished
    # ...while at light load both keep up
    for system in ("h20", "l20"):
        assert headline.loc[("5/s", system), "goodput_requests_per_s"] > 0.9 * 5


def test_every_shipped_scenario_validates(repo_root):
    from kvsim.sim import check_scenario

    files = sorted((repo_root / "scenarios").glob("*.yaml"))
    assert files
    for path in files:
        check_scenario(kvsim.load_scenario(path))
