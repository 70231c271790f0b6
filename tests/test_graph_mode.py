"""Graph-mode and eager iterations (issue 26 item 3): the launch term by hand.

A replayed graph pays ``kernel_s`` a kernel; an eager iteration (``graph_mode: false``, or more
tokens than the captured maximum) also waits for the host to issue the kernels whenever issuing
them takes longer than the GPU's context-free work (:mod:`kvsim.models.engine`)."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.hardware import accelerator_catalog
from kvsim.models import model_catalog
from kvsim.models.engine import EngineSpec
from kvsim.models.kernels import launches_per_pass
from kvsim.models.step_time import BatchShape, RooflineStepTime
from kvsim.sim import check_scenario


def _model(engine: EngineSpec, card: str = "h100-sxm", model: str = "llama-3.1-8b", captured: int | None = None):
    return RooflineStepTime(model_catalog()[model], accelerator_catalog()[card], 1, "bf16", "bf16", engine,
                            graph_max_tokens=captured)


def _decode(seqs: int, context: int = 1024) -> BatchShape:
    return BatchShape(decode_seqs=seqs, decode_context_tokens=seqs * context, sampled_seqs=seqs)


def test_a_captured_decode_step_pays_the_graph_gaps_only():
    graph, eager = _model(EngineSpec()), _model(EngineSpec(graph_mode=False))
    launches = launches_per_pass(model_catalog()["llama-3.1-8b"])
    assert launches == 32 * 10 + 4
    step = graph.breakdown(_decode(1))
    assert step.kernels_s == pytest.approx(3.64e-6 * launches, rel=1e-12)
    # eager at batch 1 on an H100: issuing 324 kernels at 10 us (3.24 ms) is shorter than streaming
    # the 16 GB of weights (~5.7 ms), so the host hides behind the GPU: nothing exposed
    assert eager.breakdown(_decode(1)).kernels_s == step.kernels_s


def test_an_eager_step_waits_for_the_host_when_issuing_outlasts_the_gpu_by_hand():
    # a 40 us launch: issuing the pass takes 324 x 40 us = 12.96 ms, longer than the GPU's work
    engine = EngineSpec(graph_mode=False, eager_launch_s=40e-6)
    model = _model(engine)
    card, llm = accelerator_catalog()["h100-sxm"], model_catalog()["llama-3.1-8b"]
    launches = launches_per_pass(llm)
    step = model.breakdown(_decode(1))
    weights_s = llm.weight_bytes_read(1, "bf16", {}) / (card.memory_bandwidth * card.efficiency.memory)
    linear_s = llm.body_flops_per_token / (card.peak_flops("bf16") * card.efficiency.compute
                                           / (1 + card.efficiency.compute_half_tokens))
    gpu_s = max(weights_s, linear_s) + 3.64e-6 * launches
    assert weights_s > linear_s  # memory-bound at batch 1
    assert step.kernels_s == pytest.approx(3.64e-6 * launches + (40e-6 * launches - gpu_s), rel=1e-9)
    # the iteration then takes the host's issue time (plus the KV read the floor leaves out) and
    # the host's per-step work
    assert step.total_s == pytest.approx(40e-6 * launches + (step.memory_s - weights_s) + step.overhead_s, rel=1e-9)
    # replayed as a graph the same step is the roofline plus the gaps
    captured = _model(EngineSpec(eager_launch_s=40e-6)).breakdown(_decode(1))
    assert captured.total_s == pytest.approx(step.memory_s + 3.64e-6 * launches + step.overhead_s, rel=1e-12)
    assert step.total_s > captured.total_s


def test_a_slow_card_hides_the_launches_a_fast_one_shows():
    # the same eager pass (324 kernels at 25 us = 8.1 ms) against an H100 (3.35 TB/s) and an L20
    # (864 GB/s): the L20 streams the 16 GB of weights in ~22 ms and hides it; the H100 does not
    engine = EngineSpec(graph_mode=False, eager_launch_s=25e-6)
    exposed = {}
    for card in ("h100-sxm", "l20"):
        eager = _model(engine, card).breakdown(_decode(1))
        graph = _model(EngineSpec(eager_launch_s=25e-6), card).breakdown(_decode(1))
        exposed[card] = eager.kernels_s - graph.kernels_s
        assert eager.total_s >= graph.total_s
    assert exposed["h100-sxm"] > 1e-3 and exposed["l20"] == 0.0


def test_iterations_above_the_captured_maximum_run_eagerly():
    engine = EngineSpec(eager_launch_s=200e-6)  # a host slow enough to show at any size here
    model = _model(engine, captured=8)
    small, large = model.breakdown(_decode(8)), model.breakdown(_decode(9))
    assert small.kernels_s == pytest.approx(3.64e-6 * 324, rel=1e-12)
    assert large.kernels_s > small.kernels_s
    # the coalesced decode run's closed form charges the same launch time as the step-by-step one
    run = model.decode_steps(9, 9 * 1024 + 9, 5)
    assert run.kernels_s == model.breakdown(_decode(9, 1025)).kernels_s
    assert run.total_s[0] == model.breakdown(BatchShape(decode_seqs=9, decode_context_tokens=9 * 1024 + 9,
                                                        sampled_seqs=9)).total_s


def test_the_captured_maximum_follows_vllms_rule():
    engine = EngineSpec()
    assert engine.captured_tokens(256, 2048) == 512          # min(2 x 256, 512, 2048)
    assert engine.captured_tokens(16, 2048) == 32            # min(2 x 16, ...)
    assert engine.captured_tokens(256, 256) == 256           # never above the token budget
    assert EngineSpec(graph_max_tokens=64).captured_tokens(256, 2048) == 64
    assert EngineSpec(graph_mode=False).captured_tokens(256, 2048) == 0


SCENARIO = """
name: eager
seed: 2
duration: 20 s
warmup: 2 s
model: llama-3.1-8b
engine: {{graph_mode: {graph}, eager_launch_s: 40 us}}
workload:
  arrival: {{kind: poisson, rate: 2/s}}
  input_tokens: {{kind: fixed, value: 256}}
  output_tokens: {{kind: fixed, value: 64}}
systems:
  h100: {{node: h100-8x, instances: 1, instance: {{max_num_seqs: 8}}}}
"""


def test_enforce_eager_slows_decode_on_a_fast_card_in_a_whole_run():
    runs = {}
    for graph in ("true", "false"):
        scenario = kvsim.parse_scenario(SCENARIO.format(graph=graph), "eager.yaml")
        step = check_scenario(scenario)[(0, "h100")].pools[0].step_model()
        assert step._graph_max == (16 if graph == "true" else 0)  # min(2 x 8, 512, 2048)
        runs[graph] = kvsim.run(scenario).runs[0].summary
    assert runs["false"]["tpot_s"]["p50"] > 1.3 * runs["true"]["tpot_s"]["p50"]
    assert runs["false"]["gpu_time_share"]["kernels"] > 2 * runs["true"]["gpu_time_share"]["kernels"]
