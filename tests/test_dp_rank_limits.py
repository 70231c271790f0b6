"""Batch limits per data-parallel attention rank, as vLLM applies them.

With ``--data-parallel-size D`` every DP rank is its own engine core with its own scheduler, built
from the same ``max_num_seqs`` and ``max_num_batched_tokens`` (vLLM
``docs/serving/data_parallel_deployment.md``, ``vllm/v1/core/sched/scheduler.py``). kvsim runs one
scheduler per instance: an instance of ``dp_attention: D`` holds ``D x max_num_seqs`` running
sequences and ``D x max_batched_tokens`` tokens an iteration, and one sequence's prefill chunk is
at most one rank's ``max_batched_tokens`` (a sequence lives on one rank). ``dp_attention: 1`` is
unchanged (the records digest holds every scenario without data-parallel attention identical).
"""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.kv.block_pool import BlockPool
from kvsim.serving.scheduler import BatchScheduler, SchedulerEvents, Sequence


def _drain(scheduler: BatchScheduler) -> list:
    batches = []
    for step in range(100_000):
        batch = scheduler.schedule(float(step))
        if batch is None:
            return batches
        batches.append(batch)
        scheduler.complete(batch, step + 0.5)
    raise AssertionError("did not drain")


def _rank_scheduler(ranks: int, seqs_per_rank: int, tokens_per_rank: int) -> BatchScheduler:
    """A scheduler built as kvsim.sim.build builds an instance of ``ranks`` attention ranks."""
    return BatchScheduler(BlockPool(100_000, 16), max_batched_tokens=ranks * tokens_per_rank,
                          max_num_seqs=ranks * seqs_per_rank, events=SchedulerEvents(),
                          max_chunk_tokens=tokens_per_rank)


def test_four_ranks_of_two_sequences_run_eight_at_most_and_reach_eight():
    scheduler = _rank_scheduler(ranks=4, seqs_per_rank=2, tokens_per_rank=512)
    for rid in range(20):
        scheduler.add(Sequence(rid, prompt_tokens=100, output_tokens=30))
    sizes = [len(b.prefills) + len(b.decodes) for b in _drain(scheduler)]
    assert max(sizes) == 8


def test_one_long_prompt_is_chunked_at_one_ranks_budget():
    # 1,000 tokens at 64 a chunk: 15 chunks of 64 and one of 40, though the instance's budget
    # (4 ranks x 64 = 256) would take it in 4
    scheduler = _rank_scheduler(ranks=4, seqs_per_rank=8, tokens_per_rank=64)
    scheduler.add(Sequence(0, prompt_tokens=1000, output_tokens=2))
    chunks = [chunk for b in _drain(scheduler) for _, chunk in b.prefills]
    assert chunks == [64] * 15 + [40]
    assert scheduler.next_step_tokens(Sequence(1, prompt_tokens=1000, output_tokens=2)) == 64


def test_two_long_prompts_are_chunked_side_by_side_as_two_ranks_would():
    # the instance's budget is the ranks' added up: the second prompt gets a chunk in the same
    # iteration instead of waiting behind the first
    scheduler = _rank_scheduler(ranks=4, seqs_per_rank=8, tokens_per_rank=64)
    scheduler.add(Sequence(0, prompt_tokens=640, output_tokens=1))
    scheduler.add(Sequence(1, prompt_tokens=640, output_tokens=1))
    first = scheduler.schedule(0.0)
    assert [(s.rid, chunk) for s, chunk in first.prefills] == [(0, 64), (1, 64)]


def test_one_rank_is_the_plain_scheduler():
    # dp_attention 1: the chunk cap is the budget itself (what every scenario without data-parallel
    # attention ran before, so their records are unchanged)
    plain = BatchScheduler(BlockPool(10_000, 16), max_batched_tokens=4096, max_num_seqs=8, events=SchedulerEvents())
    assert plain.max_chunk_tokens == 4096
    ranked = _rank_scheduler(ranks=1, seqs_per_rank=8, tokens_per_rank=4096)
    for scheduler in (plain, ranked):
        scheduler.add(Sequence(0, prompt_tokens=10_000, output_tokens=3))
    assert ([c for b in _drain(plain) for _, c in b.prefills] == [c for b in _drain(ranked) for _, c in b.prefills]
            == [4096, 4096, 1808])


SYSTEM = """
name: dp-rank-limits
seed: 5
duration: 40 s
warmup: 5 s
model: qwen3-235b-a22b
dtype: fp8
workload:
  arrival: {{kind: poisson, rate: 40/s}}
  input_tokens: {{kind: fixed, value: 300}}
  output_tokens: {{kind: fixed, value: 200}}
systems:
  s: {{node: h20-8x, instance: {{tp: 8, ep: 8, dp_attention: {ranks}, max_num_seqs: 2, max_batched_tokens: 512}},
      engine: {{output_s: 0 s}}}}
"""


def _most_running(records) -> int:
    """Most requests admitted and not yet finished at once, from the records (a request leaves
    at the end of the step that emitted its last token, before any admission at that instant)."""
    cols = records.columns()
    admit, finish = cols["admit_s"], cols["finish_s"]
    done = ~np.isnan(admit) & ~np.isnan(finish)
    events = sorted([(t, 1) for t in admit[done]] + [(t, -1) for t in finish[done]]
                    + [(t, 1) for t in admit[~done & ~np.isnan(admit)]])
    level = most = 0
    for _, step in events:  # at a tie the finish (-1) sorts first
        level += step
        most = max(most, level)
    return most


@pytest.mark.parametrize("ranks", [1, 4])
def test_an_instance_runs_max_num_seqs_per_rank(ranks, built_systems):
    run = kvsim.run(kvsim.parse_scenario(SYSTEM.format(ranks=ranks), "s.yaml")).runs[0]
    scheduler = built_systems[0].instances[0].scheduler
    assert (scheduler.max_num_seqs, scheduler.max_batched_tokens, scheduler.max_chunk_tokens) == \
        (2 * ranks, 512 * ranks, 512)
    # 40 requests/s of 200 output tokens keep far more than 8 sequences wanting to run: the
    # limit binds, and at exactly the ranks' sum
    assert _most_running(run.records) == 2 * ranks


K2 = """
name: k2-dp-attention
seed: 23
duration: 120 s
warmup: 30 s
model: kimi-k2
dtype: mxfp4
kv_dtype: fp8
workload:
  arrival: {kind: poisson, rate: 24/s}
  input_tokens: {kind: lognormal, median: 12000, sigma: 0.5, max: 32000}
  output_tokens: {kind: lognormal, median: 100, sigma: 0.5, max: 1000}
systems:
  one-dpa64: {node: atlas-850e, nodes: 8, scale_up_domain_nodes: 8, instance: {tp: 64, ep: 64, dp_attention: 64}}
  eight-dpa8: {node: atlas-850e, nodes: 8, scale_up_domain_nodes: 8, instance: {tp: 8, ep: 8, dp_attention: 8}}
  one-dpa64-nics: {node: atlas-850e, nodes: 8, instance: {tp: 64, ep: 64, dp_attention: 64}}
"""


def test_one_wide_attention_dp_instance_prefills_like_eight_narrow_ones():
    """Issue 26's "prefill collapse": one tp 64 / dp_attention 64 instance of Kimi K2 on eight
    Atlas 850E servers against eight tp 8 / dp_attention 8 instances on the same cards, 12K-token
    prompts at 24/s. With the limits per instance, the wide one ran 256 sequences and 2,048
    tokens an iteration for 64 ranks (an eighth of what the eight ran) and its queue grew
    without bound (TTFT p50 over a minute); per rank, both keep up, and first tokens come
    within the same order of time."""
    text = "\n".join(line for line in K2.splitlines() if "one-dpa64-nics" not in line)
    result = kvsim.run(kvsim.parse_scenario(text, "k2.yaml"))
    ttft = {}
    for run in result.runs:
        cols = run.records.columns()
        window = (cols["arrival_s"] >= 30.0) & (cols["arrival_s"] < 120.0)
        served = ~np.isnan(cols["first_token_s"][window])
        assert served.mean() > 0.97, run.system  # (those arriving near the end may still be in flight)
        ttft[run.system] = np.nanpercentile(cols["ttft_s"][window], 99)
    assert ttft["one-dpa64"] < 3 * ttft["eight-dpa8"] and ttft["eight-dpa8"] < 3 * ttft["one-dpa64"]


def test_the_wide_instance_joined_by_nics_cannot_prefill_the_load():
    """Where the eight servers are joined by their NICs instead of one scale-up domain, the wide
    instance does fall behind, and that is the hardware: its expert all-to-all crosses the NICs
    every MoE layer, and a full iteration (64 ranks x 2,048 tokens) then computes fewer prompt
    tokens a second than 24 requests/s bring (about 24 x 13,600), where the same instance in one
    scale-up domain computes more."""
    from kvsim.models.step_time import BatchShape
    from kvsim.sim.sizing import size_system

    scenario = kvsim.parse_scenario(K2, "k2.yaml")
    median, sigma = 12000, 0.5
    offered = 24 * median * np.exp(sigma ** 2 / 2)  # prompt tokens/s (the lognormal's mean; the cap is 5 sigma off)

    def prefill_rate(name: str) -> tuple[float, float]:
        pool = size_system(scenario.spec, name, scenario.catalogs).pools[0]
        tokens, chunk = pool.spec.instance.instance_max_batched_tokens, pool.spec.instance.max_batched_tokens
        chunks = tokens // chunk  # a chunk per rank, each half-way through a 12K prompt
        shape = BatchShape(prefill_tokens=tokens, prefill_pairs=chunks * BatchShape.prefill_chunk_pairs(chunk, 6000),
                           prefill_context_tokens=chunks * 6000, prefill_seqs=chunks)
        parts = pool.step_model().breakdown(shape)
        return tokens / parts.total_s, parts.comm_s / parts.total_s

    over_nics, comm_share = prefill_rate("one-dpa64-nics")
    in_domain, _ = prefill_rate("one-dpa64")
    assert over_nics < offered < in_domain
    assert comm_share > 0.5  # the all-to-all over the NICs is most of the step
