"""The API server's micro-batching tokeniser (kvsim.sim.tokenizer_batch), by hand."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

import kvsim
from kvsim.calibration.runs import MICROBATCH_TOKENIZER_VERSIONS, engine_settings, run_scenario_raw
from kvsim.sim.tokenizer_batch import TokenizerBatcher


def _route_times(arrivals, *, wait_s=2e-3, max_batch=32, api_s=1e-3, tok_s=1e-7):
    """Submit (time, prompt tokens) pairs; return each request's time of reaching the engine."""
    env = simpy.Environment()
    seen: dict[int, float] = {}
    batcher = TokenizerBatcher(env, wait_s, max_batch, api_s, tok_s, lambda rid: seen.setdefault(rid, env.now))

    def arrive():
        for rid, (t, tokens) in enumerate(arrivals):
            yield env.timeout(t - env.now)
            batcher.add(rid, tokens)

    env.process(arrive())
    env.run()
    return [seen[rid] for rid in range(len(arrivals))], batcher.batches


def test_a_prompt_waits_for_its_batch_to_close_then_for_the_batch_to_be_tokenised():
    times, batches = _route_times([(0.0, 1000), (0.0005, 500), (0.003, 100)])
    # 1st queued at 1 ms opens a batch closing at 3 ms; the 2nd (queued 1.5 ms) joins it; both are
    # tokenised in one call: 1,500 tokens x 0.1 us after 3 ms
    assert times[0] == times[1] == pytest.approx(3e-3 + 1500e-7, rel=1e-12)
    # the 3rd is queued at 4 ms, after that close: a batch of its own, 4 ms + 2 ms + 100 x 0.1 us
    assert times[2] == pytest.approx(6e-3 + 100e-7, rel=1e-12)
    assert batches == 2


def test_a_lone_prompt_pays_the_whole_wait():
    times, _ = _route_times([(0.0, 1000), (1.0, 1000)])
    assert times == pytest.approx([1e-3 + 2e-3 + 1e-4, 1.0 + 1e-3 + 2e-3 + 1e-4], rel=1e-12)


def test_a_full_batch_closes_at_once():
    times, batches = _route_times([(0.0, 10), (0.0001, 10), (0.0002, 10)], max_batch=2, tok_s=0.0)
    # the 2nd fills the batch as it is queued (1.1 ms); the 3rd (queued 1.2 ms) opens the next
    assert times[:2] == pytest.approx([1.1e-3, 1.1e-3], rel=1e-12)
    assert times[2] == pytest.approx(1.2e-3 + 2e-3, rel=1e-12)
    assert batches == 2


def test_the_next_batch_opens_only_when_the_tokeniser_is_free():
    # one long prompt: 20,000 tokens x 0.1 us = 2 ms of tokenising after its batch closes at 3 ms
    times, _ = _route_times([(0.0, 20_000), (0.0035, 10)])
    assert times[0] == pytest.approx(5e-3, rel=1e-12)
    # the 2nd is queued at 4.5 ms, while the tokeniser is busy: its batch opens at 5 ms
    assert times[1] == pytest.approx(5e-3 + 2e-3 + 1e-6, rel=1e-12)


def test_a_batcher_needs_a_positive_wait():
    with pytest.raises(ValueError, match="positive wait"):
        TokenizerBatcher(simpy.Environment(), 0.0, 32, 0.0, 0.0, print)


TRACE = """\
name: tok
seed: 1
duration: 2 s
warmup: 0 s
model: qwen3-1.7b
engine: {{api_s: 1 ms, tokenize_s_per_token: 0.1 us, output_s: 0 s{extra}}}
workload:
  arrival: {{kind: trace, format: azure_2023, file: {trace}}}
systems:
  one: {{node: h20-8x, instances: 1}}
"""


def _admitted(tmp_path, extra: str):
    trace = tmp_path / "three.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:00:00.0000000,1000,5\n"
                     "2023-11-16 18:00:00.0005000,500,5\n"
                     "2023-11-16 18:00:00.5000000,100,5\n")
    scenario = kvsim.parse_scenario(TRACE.format(extra=extra, trace=trace), "tok.yaml")
    frame = kvsim.run(scenario).runs[0].records.to_frame()
    return (frame.admit_s - frame.arrival_s).to_numpy()


def test_a_run_reaches_the_engine_when_its_tokeniser_batch_is_done(tmp_path):
    batched = _admitted(tmp_path, ", tokenizer_batch_wait_s: 2 ms")
    # by hand: the first two share the batch closing at 3 ms (done 3.15 ms); the third is alone
    assert batched == pytest.approx([3.15e-3, 3.15e-3 - 0.5e-3, 3e-3 + 100e-7], rel=1e-9)
    # without it every request pays only its own path (and that is the default); the second
    # then reaches a busy engine (the first one's prefill), so only the others are by hand
    plain = _admitted(tmp_path, "")
    assert plain[[0, 2]] == pytest.approx([1e-3 + 1e-4, 1e-3 + 1e-5], rel=1e-9)
    assert np.array_equal(plain, _admitted(tmp_path, ", tokenizer_batch_wait_s: 0 s"))


def test_a_negative_wait_is_refused_naming_the_field():
    bad = TRACE.format(extra=", tokenizer_batch_wait_s: -1 ms", trace="none.csv")
    with pytest.raises(kvsim.SpecError, match="tokenizer_batch_wait_s"):
        kvsim.parse_scenario(bad, "bad.yaml")


@pytest.mark.parametrize("engine, version, on", [
    ("vLLM", "0.9.2", False), ("vLLM", "0.10.0", True), ("vLLM", "0.15.1", True), ("vllm", "v0.23.1", True),
    ("vLLM", "0.24.0", False), ("vLLM", "", False), ("SGLang", "0.15.1", False)])
def test_the_measured_engine_version_sets_the_micro_batching(engine, version, on):
    settings = engine_settings(engine, version)
    assert bool(settings) is on
    if on:
        assert settings == {"tokenizer_batch_wait_s": 0.002, "tokenizer_batch_max": 32}
    low, high = MICROBATCH_TOKENIZER_VERSIONS
    assert low < high


@pytest.mark.parametrize("text, parsed", [
    ("0.15.1", (0, 15, 1)), ("v0.23.1", (0, 23, 1)), ("0.15", (0, 15, 0)), (" 0.10.0rc1", (0, 10, 0)),
    ("0.11.0+cu128", (0, 11, 0)), ("15", None), ("", None), ("latest", None)])
def test_one_reader_parses_an_engine_version_for_the_rule_and_the_sidecar_check(text, parsed):
    from kvsim.calibration.checks import engine_version

    assert engine_version(text) == parsed


def test_the_shipped_vllm_runs_reproduce_their_tokeniser():
    from pathlib import Path

    from kvsim.calibration.measurements import read_measurements

    csv = Path(__file__).resolve().parents[2] / "shared" / "calibration" / "vllm_h100_runs.csv"
    if not csv.exists():
        pytest.skip(f"{csv} is not here")
    for run in read_measurements(csv).runs:
        raw = run_scenario_raw(run)
        assert raw["engine"] == engine_settings(run.engine, run.engine_version)
        assert raw["engine"]["tokenizer_batch_wait_s"] == 0.002  # every one of them is vLLM 0.15.1
