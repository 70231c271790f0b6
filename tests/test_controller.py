"""The P:D ratio controller: its cadence, its switches and their cost, conservation across role
changes, and shifting workloads (phases, a diurnal curve)."""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.rng import RandomStreams
from kvsim.workload.arrivals import DiurnalArrivals, open_loop_arrival_times

SHIFT = """
name: shift
seed: 5
duration: 240 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival:
    kind: phases
    phases:
      - {{duration: 120 s, arrival: {{kind: poisson, rate: 6/s}}, input_tokens: {{kind: fixed, value: 3000}},
         output_tokens: {{kind: fixed, value: 20}}}}
      - {{duration: 120 s, arrival: {{kind: poisson, rate: 8/s}}, input_tokens: {{kind: fixed, value: 200}},
         output_tokens: {{kind: fixed, value: 600}}}}
slo: {{ttft_p99: 3 s, tpot_p99: 60 ms}}
systems:
  pd:
    pools:
      h20: {{node: h20-8x, roles: {{prefill: 4, decode: 4}}}}
    controller: {controller}
"""

QUEUE = "{kind: threshold, signal: prefill_queue, interval: 15 s, low: 500, high: 8000, switch_time: 12 s}"


def _run(systems, controller=QUEUE):
    result = kvsim.run(kvsim.parse_scenario(SHIFT.format(controller=controller), "shift.yaml"))
    return result, systems[-1]


def test_the_controller_acts_only_on_its_ticks_and_each_switch_pays_its_cost(built_systems):
    result, system = _run(built_systems)
    decisions, switches = result.decisions_frame(), result.switches_frame()
    # one decision per interval, never faster
    assert np.allclose(np.diff(decisions.time_s), 15.0)
    assert decisions.time_s.iloc[0] == pytest.approx(15.0)
    assert (decisions.moved.abs() <= 1).all()  # step 1
    # a move takes an instance from one role to the other: the targets add up to those serving
    assert (decisions.prefill_target + decisions.decode_target == decisions.prefill + decisions.decode).all()
    # the prompt-heavy phase pulls instances to prefill, the output-heavy one pushes them back
    first, second = decisions[decisions.time_s <= 120], decisions[decisions.time_s > 150]
    assert first.moved.max() == 1 and second.moved.min() == -1
    assert len(switches) >= 2
    # each switch: drained after it was decided, then out of service for exactly switch_time
    assert (switches.drained_s >= switches.decided_s).all()
    assert np.allclose(switches.ready_s - switches.drained_s, 12.0)
    # and nothing was admitted on the instance while it was out of service
    frame = result.requests_frame()
    for _, s in switches.iterrows():
        mine = frame[(frame.prefill_instance == s.instance) | (frame.instance == s.instance)]
        started = mine.admit_s.where(mine.prefill_instance == s.instance, mine.decode_start_s)
        assert not ((started > s.drained_s) & (started < s.ready_s)).any()
    summary = result.runs[0].summary["pd"]
    assert summary["switches"] == len(switches)
    assert summary["switch_out_of_service_s"] == pytest.approx(float((switches.ready_s - switches.decided_s).sum()))


def test_every_request_finishes_once_across_role_switches_and_no_page_is_lost(built_systems):
    result, system = _run(built_systems)
    frame = result.requests_frame()
    assert frame.finish_s.notna().all()
    assert system.front.completed == system.front.submitted == len(frame)
    for inst in system.instances:
        assert not inst.busy and inst.pool.free_blocks == inst.pool.num_blocks
    order = ["arrival_s", "prefill_end_s", "handoff_end_s", "first_token_s", "finish_s"]
    for a, b in zip(order, order[1:]):
        assert (frame[a] <= frame[b]).all(), (a, b)


def test_the_static_controller_keeps_the_ratio_and_still_samples_the_timeline(built_systems):
    result, system = _run(built_systems, "{kind: static, interval: 20 s}")
    decisions = result.decisions_frame()
    assert len(result.switches_frame()) == 0
    assert (decisions.prefill == 4).all() and (decisions.decode == 4).all()
    assert decisions.signal_prefill_queue.max() > 0 and decisions.signal_decode_kv_occupancy.max() > 0


def test_an_attainment_signal_reads_the_trailing_window_of_the_records(built_systems):
    result, _ = _run(built_systems, "{kind: threshold, signal: ttft_attainment, interval: 20 s, low: 0.5, high: 0.9, "
                                  "window: 40 s}")
    decisions = result.decisions_frame()
    frame = result.requests_frame()
    row = decisions.iloc[3]
    recent = frame[(frame.first_token_s > row.time_s - 40) & (frame.first_token_s <= row.time_s)]
    assert row.value == pytest.approx(float((recent.ttft_s <= 3.0).mean()))


def test_phases_change_the_mix_at_their_boundary_and_draw_their_own_streams():
    spec = kvsim.parse_scenario(SHIFT.format(controller=QUEUE), "s.yaml").spec.workload
    requests = spec.arrival.requests(240.0, RandomStreams(5))
    early, late = requests.arrival_s < 120, requests.arrival_s >= 120
    assert (requests.input_tokens[early] == 3000).all() and (requests.input_tokens[late] == 200).all()
    # Poisson counts: 6/s and 8/s over 120 s each, within 4 standard deviations
    assert abs(early.sum() - 720) < 4 * np.sqrt(720) and abs(late.sum() - 960) < 4 * np.sqrt(960)
    assert spec.max_input_tokens == 3000 and spec.max_output_tokens == 600


def test_a_diurnal_curve_has_the_mean_rate_and_peaks_where_asked():
    spec = DiurnalArrivals(rate=10.0, amplitude=0.8, period=1000.0)
    times = open_loop_arrival_times(spec, 100_000.0, np.random.default_rng(1))
    assert len(times) == pytest.approx(1_000_000, rel=0.01)  # the cosine integrates to zero over whole periods
    phase = (times % 1000.0) // 100  # ten bins per period; the peak (default: mid-period) is in bins 4 and 5
    counts = np.bincount(phase.astype(int), minlength=10)
    assert counts.argmax() in (4, 5) and counts.argmin() in (0, 9)
    # expected share of the busiest bins from the curve's integral
    expected = 10 * 100 * (1 + 0.8 * np.sinc(0.1) * np.cos(np.pi * 0.1)) * 100
    assert counts[4] == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("system, fragment, field", [
    ("pools: {h: {node: h20-8x, roles: {prefill: 4, decode: 4}}}\n    controller: {kind: threshold, "
     "signal: queue_length, low: 1, high: 2}", "prefill_queue", "systems.s.controller.signal"),
    ("node: h20-8x\n    controller: {kind: static}", "this system colocates", "systems.s.controller"),
    ("pools: {h: {node: h20-8x, roles: {prefill: 0, decode: 8}}}", "leaves the prefill role with no instance",
     "systems.s.pools.h.roles"),
    ("pools: {h: {node: h20-8x, roles: {prefill: 4, decode: 4}}}\n    controller: {kind: threshold, "
     "signal: prefill_queue, low: 5, high: 2}", "must exceed low", "systems.s.controller.high"),
    ("pools: {h: {node: h20-8x, roles: {prefill: 4, decode: 4}}}\n    controller: {kind: threshold, "
     "signal: tpot_attainment, low: 0.5, high: 0.9}", "needs slo.tpot_p99", "systems.s.controller.signal"),
])
def test_bad_controllers_and_splits_are_refused_with_the_line(refused, system, fragment, field):
    err = refused(system)
    assert fragment in err and field in err and "bad.yaml:1" in err


def test_real_traces_in_sequence_make_a_shifting_workload(repo_root):
    from conftest import SHARED

    traces = SHARED / "traces"
    text = f"""
name: azure-shift
duration: 240 s
model: qwen3-8b
workload:
  arrival:
    kind: phases
    phases:
      - {{duration: 120 s, arrival: {{kind: trace, format: azure_2023, file: {traces}/AzureLLMInferenceTrace_code_2023.csv}}}}
      - {{duration: 120 s, arrival: {{kind: trace, format: azure_2023, file: {traces}/AzureLLMInferenceTrace_conv_2023.csv}}}}
systems:
  s: {{node: h20-8x}}
"""
    spec = kvsim.parse_scenario(text, "azure.yaml").spec.workload
    requests = spec.arrival.requests(240.0, RandomStreams(0))
    code, conv = requests.arrival_s < 120, requests.arrival_s >= 120
    assert code.sum() > 50 and conv.sum() > 50 and requests.arrival_s.max() < 240
    # Azure's code trace is prompt-heavy with short answers; its conversation trace the reverse
    assert np.median(requests.input_tokens[code]) > 1.3 * np.median(requests.input_tokens[conv])
    assert np.median(requests.output_tokens[conv]) > 2 * np.median(requests.output_tokens[code])
    assert spec.max_input_tokens is None  # known only once the traces are read


CACHED = """
name: cached-switch
seed: 0
duration: 30 s
warmup: 1 s
model: qwen3-8b
workload:
  arrival: {kind: closed_loop, clients: 20, think_time: 0.1 s}
  prefix: {kind: fixed_hit, hit_ratio: 0.7}
  input_tokens: {kind: uniform, low: 200, high: 3000}
  output_tokens: {kind: fixed, value: 1}
systems:
  pd:
    pools:
      h: {node: h20-8x, roles: {prefill: 2, decode: 2}, instance: {activation_reserve: 68.5 GiB, max_num_seqs: 32}}
    controller: {kind: threshold, signal: decode_kv_occupancy, interval: 0.5 s, low: 0.2, high: 0.5, switch_time: 0.2 s}
    kv_cache: {dram: {capacity: 8 GiB}}
"""


def test_an_instance_leaving_prefill_gives_back_every_cached_page(built_systems, monkeypatch):
    from kvsim.serving.instance import Instance

    left_behind = []
    real_set_role = Instance.set_role

    def set_role(self, role, hook, on_final_chunk):
        old = self.scheduler.hook
        if role == "decode" and hasattr(old, "hbm"):
            left_behind.append(old.hbm.used_blocks)
        return real_set_role(self, role, hook, on_final_chunk)

    monkeypatch.setattr(Instance, "set_role", set_role)
    monkeypatch.setenv("KVSIM_BACKEND", "python")  # the reference's Instance (compiled: a cdef class)
    result = kvsim.run(kvsim.parse_scenario(CACHED, "c.yaml"))
    assert len(result.switches_frame()) > 2 and left_behind
    # write-through copies had landed and the cache was flushed before the instance turned decode
    assert left_behind == [0] * len(left_behind)
