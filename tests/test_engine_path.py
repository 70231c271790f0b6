"""The request path around the model (API server, tokenisation, streaming) and client timeouts."""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.models.step_time import BatchShape
from kvsim.sim import check_scenario
from kvsim.yaml_io import SpecError

ONE = """
name: path
seed: 3
duration: 20 s
warmup: 0 s
model: qwen3-1.7b
engine: {{api_s: {api}, tokenize_s_per_token: {tok}, output_s: {out}, host_overlap: false}}
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: 1 s}}
  input_tokens: {{kind: fixed, value: 1000}}
  output_tokens: {{kind: fixed, value: 50}}
systems:
  one: {{node: h20-8x, instances: 1}}
"""


def _frame(api="3 ms", tok="1 us", out="4 ms"):
    scenario = kvsim.parse_scenario(ONE.format(api=api, tok=tok, out=out), "path.yaml")
    return kvsim.run(scenario).runs[0].records.to_frame(), check_scenario(scenario)[(0, "one")].pools[0]


def test_first_token_pays_api_tokenisation_prefill_and_streaming():
    frame, pool = _frame()
    prefill_s = pool.step_model().iteration_time_s(
        BatchShape(prefill_tokens=1000, prefill_seqs=1, prefill_pairs=1000 * 1001 / 2, sampled_seqs=1))
    # one client, one request at a time: nothing queues, so TTFT is the path plus one prefill step
    ttft = (frame.first_token_s - frame.arrival_s).to_numpy()
    assert ttft == pytest.approx(np.full(len(frame), 3e-3 + 1000 * 1e-6 + prefill_s + 4e-3), rel=1e-9)
    # the engine sees the request after the API server and the tokeniser
    assert (frame.admit_s - frame.arrival_s).to_numpy() == pytest.approx(np.full(len(frame), 4e-3), rel=1e-9)


def test_streaming_cost_shifts_first_and_last_token_alike_and_leaves_tpot():
    slow, _ = _frame(out="9 ms")
    fast, _ = _frame(out="0 s")
    n = min(len(slow), len(fast))
    assert n >= 5
    # the client's next request waits for the answer, so arrivals drift apart: compare per request
    ttft_gap = (slow.first_token_s - slow.arrival_s)[:n].to_numpy() - (fast.first_token_s - fast.arrival_s)[:n].to_numpy()
    e2e_gap = (slow.finish_s - slow.arrival_s)[:n].to_numpy() - (fast.finish_s - fast.arrival_s)[:n].to_numpy()
    assert ttft_gap == pytest.approx(np.full(n, 9e-3), abs=1e-9)
    assert e2e_gap == pytest.approx(np.full(n, 9e-3), abs=1e-9)


OVERLOAD = """
name: overload
seed: 4
duration: 60 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: {rate}/s}}
  input_tokens: {{kind: fixed, value: 2000}}
  output_tokens: {{kind: fixed, value: 400}}
  timeout: {timeout}
systems:
  one: {{node: l20-8x, instances: 1, instance: {{max_num_seqs: 32}}}}
"""


@pytest.fixture(scope="module")
def overloaded():
    scenario = kvsim.parse_scenario(OVERLOAD.format(rate=2, timeout="30 s"), "o.yaml")
    result = kvsim.run(scenario)
    return result.runs[0]


def test_timed_out_requests_are_aborted_at_their_deadline(overloaded):
    frame = overloaded.records.to_frame()
    aborted = frame.dropna(subset=["aborted_s"])
    # two 2000-token prompts a second keep one L20 card's prefill nearly always busy: decodes crawl
    assert 0.2 * len(frame) < len(aborted) < 0.9 * len(frame)
    assert (aborted.aborted_s - aborted.arrival_s).to_numpy() == pytest.approx(np.full(len(aborted), 30.0))
    assert aborted.finish_s.isna().all()
    finished = frame.dropna(subset=["finish_s"])
    assert finished.aborted_s.isna().all()
    assert ((finished.finish_s - finished.arrival_s) <= 30.0 + 1e-9).all()
    # nothing is lost: every request either finished or was aborted (the run drained)
    assert len(finished) + len(aborted) == len(frame)
    summary = overloaded.summary
    assert summary["requests_aborted"] == len(aborted)
    assert summary["requests_undrained"] == 0


def test_aborted_requests_give_back_their_pages(built_systems):
    scenario = kvsim.parse_scenario(OVERLOAD.format(rate=2, timeout="30 s"), "o.yaml")
    run = kvsim.run(scenario).runs[0]
    assert run.summary["requests_aborted"] > 0
    # the run drained: every page is free again, none leaked by a request aborted mid-flight
    (system,) = built_systems
    for instance in system.instances:
        assert instance.pool.free_blocks == instance.pool.num_blocks
        assert not instance.busy


def test_without_timeout_the_backlog_grows_instead():
    base = kvsim.parse_scenario(OVERLOAD.format(rate=4, timeout="null"), "o.yaml")
    shed = kvsim.parse_scenario(OVERLOAD.format(rate=2, timeout="30 s"), "o.yaml")
    e2e_base = kvsim.run(base).runs[0].summary["e2e_s"]["p99"]
    e2e_shed = kvsim.run(shed).runs[0].summary["e2e_s"]["p99"]
    assert e2e_shed <= 30.0 < e2e_base


@pytest.mark.parametrize("bad, message", [
    ("0 s", "must be positive"),
    ("-3 s", "must be positive"),
])
def test_timeout_must_be_positive(bad, message):
    with pytest.raises(SpecError) as info:
        kvsim.parse_scenario(OVERLOAD.format(rate=1, timeout=bad), "o.yaml")
    assert "workload.timeout" in str(info.value) and message in str(info.value)


def test_timeout_accepted_for_disaggregated_systems():
    # once refused; tests/test_pd_timeouts.py shows where such a request is aborted
    text = OVERLOAD.format(rate=1, timeout="30 s").replace(
        "one: {node: l20-8x, instances: 1, instance: {max_num_seqs: 32}}",
        "pd: {pools: {p: {node: h20-8x, instances: 1, role: prefill}, d: {node: h20-8x, instances: 1, role: decode}}}")
    scenario = kvsim.parse_scenario(text, "o.yaml")
    assert scenario.spec.workload.timeout == 30.0
    assert check_scenario(scenario)[(0, "pd")].disaggregated


CADENCE = """
name: cadence
seed: 1
duration: 3 s
warmup: 0 s
model: qwen3-1.7b
engine: {{api_s: 0 s, tokenize_s_per_token: 0 s, output_s: 0 s, async_scheduling: {mode}, host_overlap: false}}
workload:
  arrival: {{kind: trace, format: azure_2023, file: {trace}}}
systems:
  one: {{node: h20-8x, instances: 1}}
"""


def _requests(tmp_path, mode: str):
    trace = tmp_path / "two.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:00:00.0000000,100,2000\n"
                     "2023-11-16 18:00:01.0003000,100,10\n")
    text = CADENCE.format(mode=mode, trace=trace)
    return kvsim.run(kvsim.parse_scenario(text, "c.yaml")).runs[0].records.to_frame()


def test_async_scheduling_joins_the_batch_after_next(tmp_path):
    sync = _requests(tmp_path, "false")
    overlapped = _requests(tmp_path, "true")
    # the first request decodes alone, one step every ~2 ms; the second arrives in the middle of one
    first = sync.iloc[0]
    decode_step_s = (first.finish_s - first.first_token_s) / (first.output_tokens - 1)
    late_sync, late_async = sync.iloc[1], overlapped.iloc[1]
    assert 0 < late_sync.admit_s - late_sync.arrival_s < decode_step_s
    # with async scheduling the batch after the arrival was already formed: it waits one step more
    delay = late_async.admit_s - late_sync.admit_s
    assert delay == pytest.approx(decode_step_s, rel=0.1)
    assert late_async.first_token_s - late_sync.first_token_s == pytest.approx(delay, rel=1e-3)
