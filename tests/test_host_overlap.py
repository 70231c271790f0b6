"""``engine.host_overlap``: the host prepares each iteration while the GPU runs the one before.

A busy engine's iteration takes ``max(gpu, host)``; a step that starts an idle engine pays
``gpu + host`` (:mod:`kvsim.models.engine`). Checked in closed form on the step model, bit for bit
between the step model, its decode fills and engine time's bulk accounts, and end to end on one
client whose every request starts an idle engine.
"""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.hardware import accelerator_catalog
from kvsim.models import model_catalog
from kvsim.models.engine import EngineSpec
from kvsim.models.step_time import BatchShape, RooflineStepTime, exposed_host_s
from kvsim.serving import decode_run
from kvsim.sim import check_scenario

ACC = accelerator_catalog()
MODELS = model_catalog()


def _decode(seqs: int, context: int) -> BatchShape:
    return BatchShape(decode_seqs=seqs, decode_context_tokens=context, sampled_seqs=seqs)


def _pair(host_s: float, **engine):
    """(host added, host overlapped) step models of Qwen3-8B on one H20, the host's fixed
    per-step time ``host_s`` (no per-sequence or per-token terms)."""
    base = {"step_fixed_s": host_s, "step_per_seq_s": 0.0, "step_per_token_s": 0.0, **engine}
    return tuple(RooflineStepTime(MODELS["qwen3-8b"], ACC["h20"], 1, "bf16", "bf16",
                                  engine=EngineSpec(**base, host_overlap=overlap)) for overlap in (False, True))


@pytest.mark.parametrize("host_s", [0.2e-3, 50e-3])
def test_a_busy_step_takes_the_longer_of_gpu_and_host(host_s):
    added, overlapped = _pair(host_s)
    for shape in (_decode(1, 100), _decode(64, 64 * 2000),
                  BatchShape(prefill_tokens=2048, prefill_pairs=2048 * 2049 / 2, prefill_seqs=1, sampled_seqs=1)):
        a, o = added.breakdown(shape), overlapped.breakdown(shape)
        gpu = max(a.compute_s, a.memory_s) + a.comm_s + a.kernels_s
        assert a.overhead_s == host_s and a.host_s is None and a.hidden_s == 0.0
        assert a.total_s == pytest.approx(gpu + host_s, rel=1e-12)
        assert (o.compute_s, o.memory_s, o.comm_s, o.kernels_s) == (a.compute_s, a.memory_s, a.comm_s, a.kernels_s)
        assert o.host_s == host_s
        assert o.overhead_s == pytest.approx(max(0.0, host_s - gpu), abs=1e-15)
        assert o.total_s == pytest.approx(max(gpu, host_s), rel=1e-12)
        # an idle engine's first step: nothing to hide behind, so it pays both
        assert o.total_s + o.hidden_s == pytest.approx(a.total_s, rel=1e-12)
        assert o.hidden_s == pytest.approx(min(gpu, host_s), rel=1e-12)
    # 0.2 ms hides behind every one of these steps (the smallest reads 16 GB of weights: ~5 ms);
    # 50 ms outlasts the decode steps and hides only behind the long prefill
    small = overlapped.breakdown(_decode(1, 100))
    assert (small.overhead_s == 0.0) == (host_s < 1e-3)


def test_exposed_host_is_what_the_gpu_does_not_hide():
    assert exposed_host_s(5.0, 1.0, 2.0, 0.5, 0.25) == 2.25   # gpu 2 + 0.5 + 0.25 = 2.75
    assert exposed_host_s(5.0, 3.0, 2.0, 0.5, 0.25) == 1.25   # compute-bound: 3.75
    assert exposed_host_s(1.0, 3.0, 2.0, 0.5, 0.25) == 0.0    # hidden whole


def _crossing(overlapped_host: float) -> tuple[RooflineStepTime, int, int]:
    """An overlapped step model whose host time lies between its GPU time at the first and the
    last of 40 decode steps of 32 sequences, so a run has steps with the host exposed and hidden."""
    seqs, context = 32, 32 * 500
    _, probe = _pair(0.0)
    first = probe.breakdown(_decode(seqs, context)).total_s
    last = probe.breakdown(_decode(seqs, context + 39 * seqs)).total_s
    assert last > first
    return _pair(first + overlapped_host * (last - first))[1], seqs, context


@pytest.mark.parametrize("where", [0.3, 0.8])
def test_decode_runs_equal_each_steps_breakdown_to_the_bit_with_the_host_overlapped(where):
    from kvsim import backend

    step, seqs, context = _crossing(where)
    listed = step.decode_steps(seqs, context, 40)
    arrays = step.decode_steps_array(seqs, context, 40)
    fallback = decode_run.decode_steps(type("NoClosedForm", (), {"breakdown": staticmethod(step.breakdown)})(),
                                       seqs, context, 40)
    assert listed.host_overlap and arrays.host_overlap and fallback.host_overlap
    assert listed.overhead_s == arrays.overhead_s == fallback.overhead_s == step.engine.step_fixed_s
    exposed = []
    for i in range(40):
        parts = step.breakdown(_decode(seqs, context + i * seqs))
        assert listed.total_s[i] == arrays.total_s[i] == fallback.total_s[i] == parts.total_s
        assert listed.memory_s[i] == arrays.memory_s[i] == parts.memory_s
        assert exposed_host_s(listed.overhead_s, parts.compute_s, parts.memory_s, parts.comm_s,
                              parts.kernels_s) == parts.overhead_s
        exposed.append(parts.overhead_s)
    assert exposed[0] > 0.0 and exposed[-1] == 0.0  # host-bound first, GPU-bound later
    if backend.compiled_problem() is None:
        compiled = backend.kernels("compiled").step_time.RooflineStepTime(
            MODELS["qwen3-8b"], ACC["h20"], 1, "bf16", "bf16", engine=step.engine)
        assert compiled.decode_steps(seqs, context, 40) == listed
        assert compiled.breakdown(_decode(seqs, context)) == step.breakdown(_decode(seqs, context))


def _backends() -> list[str]:
    from kvsim import backend
    return ["python"] + (["compiled"] if backend.compiled_problem() is None else [])


@pytest.mark.parametrize("name", _backends())
@pytest.mark.parametrize("seed", range(6))
def test_engine_time_counts_only_the_exposed_host_in_bulk_as_step_by_step(name, seed):
    from kvsim import backend
    EngineTime = backend.kernels(name).engine_time.EngineTime
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    times = list(np.cumsum(rng.uniform(1e-3, 0.05, size=n)))
    compute, memory = list(rng.uniform(1e-3, 0.02, size=n)), list(rng.uniform(1e-3, 0.02, size=n))
    durations = list(rng.uniform(1e-3, 0.05, size=n))
    host, comm, kernels = 0.012, 1e-3, 5e-4
    window = (0.0, 1e9) if seed % 2 else (times[n // 3], times[-1] + 1.0)
    one, each, arrays = EngineTime(*window), EngineTime(*window), EngineTime(*window)
    for k in range(n):
        one.add(times[k], durations[k], compute[k], memory[k], comm, kernels,
                exposed_host_s(host, compute[k], memory[k], comm, kernels))
    each.add_each(times, durations, compute, memory, comm, kernels, host, True)
    arrays.add_each_array(np.array(times), np.array(durations), np.array(compute), np.array(memory), comm, kernels,
                          host, True)
    for account in (each, arrays):
        assert (account.busy_s, account.busy_in_window_s, account.by_cause_s) == (
            one.busy_s, one.busy_in_window_s, one.by_cause_s)
    inside = [k for k in range(n) if window[0] <= times[k] <= window[1]]
    expected = sum(max(0.0, host - (max(compute[k], memory[k]) + comm + kernels)) for k in inside)
    assert one.by_cause_s["overhead"] == pytest.approx(expected, rel=1e-12, abs=1e-15)


ONE = """
name: overlap
seed: 5
duration: 30 s
warmup: 0 s
model: qwen3-8b
engine: {{step_fixed_s: {host}, step_per_seq_s: 0 s, step_per_token_s: 0 s, host_overlap: {overlap},
          coalesce: {coalesce}}}
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: 0.5 s}}
  input_tokens: {{kind: fixed, value: 800}}
  output_tokens: {{kind: fixed, value: 60}}
systems:
  one: {{node: h20-8x, instances: 1}}
"""


def _one(host="2 ms", overlap=False, coalesce=True):
    scenario = kvsim.parse_scenario(ONE.format(host=host, overlap=str(overlap).lower(),
                                               coalesce=str(coalesce).lower()), "overlap.yaml")
    run = kvsim.run(scenario).runs[0]
    return run, run.records.to_frame(), check_scenario(scenario)[(0, "one")].pools[0]


def test_one_client_pays_the_host_on_its_first_step_and_hides_it_after():
    """Every request starts an idle engine (one client, thinking between requests): its prefill
    step pays GPU and host alike with or without overlap; its 59 decode steps hide 2 ms each."""
    added, a, pool = _one()
    overlapped, o, _ = _one(overlap=True)
    n = min(len(a), len(o))
    assert n >= 10
    ttft_a = (a.first_token_s - a.arrival_s)[:n].to_numpy()
    ttft_o = (o.first_token_s - o.arrival_s)[:n].to_numpy()
    assert ttft_o == pytest.approx(ttft_a, rel=1e-12)
    decode_a = (a.finish_s - a.first_token_s)[:n].to_numpy()
    decode_o = (o.finish_s - o.first_token_s)[:n].to_numpy()
    # the step model's decode step, by hand: one sequence after the prompt and the tokens before it
    step = pool.step_model()
    gpu = [step.breakdown(_decode(1, 800 + k)).total_s - 2e-3 for k in range(1, 60)]
    assert min(gpu) > 2e-3  # (every decode step outlasts the host's 2 ms, so each hides it whole)
    assert decode_a - decode_o == pytest.approx(np.full(n, 59 * 2e-3), rel=1e-9)
    assert decode_o[0] == pytest.approx(sum(gpu), rel=1e-9)
    # engine time: the host counted where it is on the path (each request's first step, one in
    # 60), not where hidden (the window is the whole run: steps ending after it aside, 1 %)
    overhead_a = added.summary["gpu_time_share"]["overhead"] * added.busy_s
    overhead_o = overlapped.summary["gpu_time_share"]["overhead"] * overlapped.busy_s
    assert overhead_a == pytest.approx(2e-3 * added.iterations, rel=0.01)
    assert overhead_o == pytest.approx(2e-3 * overlapped.iterations / 60, rel=0.02)


@pytest.mark.parametrize("host", ["2 ms", "40 ms"])
def test_coalesced_runs_equal_the_step_by_step_engine_with_the_host_overlapped(host):
    """40 ms outlasts every decode step (host-bound runs: every step shows part of it)."""
    reference, r, _ = _one(host=host, overlap=True, coalesce=False)
    coalesced, c, _ = _one(host=host, overlap=True, coalesce=True)
    assert r.equals(c)
    assert (coalesced.iterations, coalesced.busy_s) == (reference.iterations, reference.busy_s)


def test_overlap_needs_async_scheduling():
    with pytest.raises(ValueError, match="true needs async_scheduling: true"):
        EngineSpec(host_overlap=True, async_scheduling=False)


def test_overlap_follows_async_scheduling_by_default():
    # vLLM V1's async scheduling is what overlaps the host with the GPU: unset, one follows the other
    assert EngineSpec().overlaps_host and EngineSpec().async_scheduling
    assert not EngineSpec(async_scheduling=False).overlaps_host
    assert not EngineSpec(host_overlap=False).overlaps_host  # the what-if of host work between steps
    step = RooflineStepTime(model_catalog()["qwen3-8b"], accelerator_catalog()["h20"], 1, "bf16", "bf16",
                            engine=EngineSpec(async_scheduling=False))
    shape = BatchShape(decode_seqs=8, decode_context_tokens=8000, sampled_seqs=8)
    parts = step.breakdown(shape)
    assert parts.overhead_s == pytest.approx(EngineSpec().step_overhead_s(8, 8), rel=1e-12)  # all of it added


LAYOUT = """
name: overlap-layout
seed: 8
duration: 20 s
warmup: 2 s
model: gpt-oss-120b
engine: {{step_per_seq_s: 150 us, host_overlap: true, coalesce: {coalesce}}}
workload:
  arrival: {{kind: poisson, rate: 6/s}}
  input_tokens: {{kind: lognormal, median: 600, sigma: 0.7, max: 4000}}
  output_tokens: {{kind: lognormal, median: 120, sigma: 0.8, max: 1000}}
systems:
  piped: {{node: h20-8x, instance: {{tp: 2, pp: 2, max_num_seqs: 64}}}}
  dp: {{node: h20-8x, instance: {{tp: 4, dp_attention: 2, max_num_seqs: 64}}}}
"""


def test_layouts_coalesce_to_the_step_by_step_engine_with_the_host_overlapped():
    """Pipeline and data-parallel attention layouts (the layout step model: no closed form, the
    decode run's per-step fallback) with runs showing part of the host time and hiding it."""
    runs = [kvsim.run(kvsim.parse_scenario(LAYOUT.format(coalesce=c), "layout.yaml")) for c in ("false", "true")]
    assert runs[1].records_digest() == runs[0].records_digest()
    for ref, run in zip(runs[0].runs, runs[1].runs):
        assert (run.iterations, run.busy_s, run.summary["gpu_time_share"]) == (
            ref.iterations, ref.busy_s, ref.summary["gpu_time_share"])
        assert run.summary["gpu_time_share"]["overhead"] > 0.0
