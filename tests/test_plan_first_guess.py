"""kvsim.plan.first_guess: the closed-form first guess of a unit's capacity and the plan's expected cost."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.models.step_time import BatchShape
from kvsim.plan.first_guess import HEADROOM, capacity_guess, plan_cost
from kvsim.plan.planner import plan
from kvsim.sim import check_scenario
from test_queueing import MD1, _service_time_s

PLAN = "slo: {{ttft_p99: 1 s{tpot}}}\nplan: {{targets: [4/s], units: {{max: 4}}, rel_tol: 0.2}}\n"


def _scenario(extra="", max_num_seqs=1, output=1, tpot=""):
    text = MD1.format(seed=1, duration=30, rate=1).replace("max_num_seqs: 1", f"max_num_seqs: {max_num_seqs}")
    text = text.replace("output_tokens: {kind: fixed, value: 1}", f"output_tokens: {{kind: fixed, value: {output}}}")
    return kvsim.parse_scenario(text + PLAN.format(tpot=tpot) + extra, "guess.yaml")


def test_one_request_at_a_time_is_the_deterministic_server_rate():
    # max_num_seqs 1, one-token answers: a request is one prefill iteration of D seconds
    assert capacity_guess(_scenario(), "one") == pytest.approx(HEADROOM / _service_time_s(), rel=1e-12)


def test_decode_steps_are_shared_by_the_batch_and_capped_by_the_tpot_limit():
    scenario = _scenario(max_num_seqs=64, output=129)
    step = check_scenario(scenario)[(0, "one")].pools[0].step_model()
    context = int(64 * (512 + 129 / 2))
    decode = step.iteration_time_s(BatchShape(decode_seqs=64, decode_context_tokens=context, sampled_seqs=64))
    expected = HEADROOM / (_service_time_s() + 128 * decode / 64)
    assert capacity_guess(scenario, "one") == pytest.approx(expected, rel=1e-12)
    # a TPOT limit below the 64-wide step shrinks the batch, and with it the guess
    tight = _scenario(max_num_seqs=64, output=129, tpot=f", tpot_p99: {decode * 0.9 * 1e3} ms")
    assert capacity_guess(tight, "one") < expected


def test_a_cached_shared_document_is_read_as_context_and_only_the_suffix_computed():
    # one 448-token document every prompt shares, a 64-token suffix: with a prefix cache the
    # document is always found (it fits many times over), so a request is one prefill iteration
    # of the 64 suffix tokens reading 448 tokens of context; without a cache the whole 512
    prefix = ("  prefix: {kind: shared_documents, documents: 1, zipf_s: 0.8, document_tokens: {kind: fixed, value: 448},"
              " suffix_tokens: {kind: fixed, value: 64}}\n")

    def scenario(cache):
        text = MD1.format(seed=1, duration=30, rate=1).replace("  input_tokens: {kind: fixed, value: 512}\n", prefix)
        if cache:
            text = text.replace("instance: {max_num_seqs: 1}}", "instance: {max_num_seqs: 1}, kv_cache: {}}")
        return kvsim.parse_scenario(text + PLAN.format(tpot=""), "guess.yaml")

    cached, uncached = scenario(True), scenario(False)
    step = check_scenario(cached)[(0, "one")].pools[0].step_model()
    suffix_s = step.iteration_time_s(BatchShape(prefill_tokens=64, prefill_pairs=64 * 448 + 64 * 65 / 2,
                                                prefill_context_tokens=448, prefill_seqs=1, sampled_seqs=1))
    assert capacity_guess(cached, "one") == pytest.approx(HEADROOM / suffix_s, rel=1e-12)
    assert capacity_guess(uncached, "one") == pytest.approx(HEADROOM / _service_time_s(), rel=1e-12)
    assert capacity_guess(cached, "one") > 2 * capacity_guess(uncached, "one")


def test_the_search_starts_at_the_guess_and_validate_prices_the_plan(capsys, tmp_path):
    scenario = _scenario()
    result = plan(scenario)
    first = result.probes[0][0]
    assert first.units == 1 and first.load == float(f"{capacity_guess(scenario, 'one'):.3g}")
    cost = plan_cost(scenario)
    low, high = cost.probes
    assert low <= len(result.probes) <= high  # the range holds what the plan ran
    assert cost.per_candidate["one"]["first_guess"] == capacity_guess(scenario, "one")
    path = tmp_path / "guess.yaml"
    path.write_text(MD1.format(seed=1, duration=30, rate=1) + PLAN.format(tpot=""))
    from kvsim.cli import main

    assert main(["validate", str(path)]) == 0
    assert "plan: about" in capsys.readouterr().out


def test_no_guess_for_a_closed_loop_or_a_disaggregated_system():
    closed = kvsim.parse_scenario(
        MD1.format(seed=1, duration=30, rate=1).replace("{kind: poisson, rate: 1/s}",
                                                        "{kind: closed_loop, clients: 1}")
        + "slo: {ttft_p99: 1 s}\nplan: {target_clients: [4]}\n", "c.yaml")
    assert capacity_guess(closed, "one") is None
