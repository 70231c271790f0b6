"""Client timeouts in disaggregated (prefill/decode) systems: a request is aborted wherever its
deadline finds it -- queued or computing on the prefill instance, its KV in flight, decoding, or
its last token on the way -- every page comes back once, the flow solver and the links count
only what moved, and a deadline that never comes changes nothing."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import kvsim
from kvsim.models.step_time import BatchShape
from kvsim.report.pd import _in_system
from kvsim.sim import check_scenario

KV_PER_TOKEN = 147_456  # Qwen3-8B bf16 at tp 1: 2 * 36 layers * 8 KV heads * 128 * 2 bytes
NIC_Bps = 50e9 * 0.975  # delivered (NicSpec efficiency): the h20-8x's 400 Gbit/s NIC: the handoff's bottleneck between two servers
CHUNK = 2048  # the default max_batched_tokens: a long prompt is computed in chunks of this

TRACED = """
name: pd-timeout
seed: 2
duration: 30 s
warmup: 0 s
model: qwen3-8b
engine: {{api_s: 0 s, tokenize_s_per_token: 0 s, output_s: {out}, host_overlap: false}}
workload:
  arrival: {{kind: trace, format: azure_2023, file: {trace}}}
  timeout: {timeout}
systems:
  pd:
    pools:
      prefill: {{node: h20-8x, instances: 1, role: prefill}}
      decode: {{node: h20-8x, instances: 1, role: decode, instance: {{max_num_seqs: {seqs}}}}}
    kv_handoff: {{mode: {mode}}}
"""


def _trace(path, rows) -> None:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t, n_in, n_out in rows:
        whole = int(t)
        lines.append(f"2023-11-16 18:00:{whole:02d}.{round((t - whole) * 1e7):07d},{n_in},{n_out}")
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def traced(tmp_path, built_systems):
    """``traced(rows, timeout_s, mode, output_s)`` runs the PD system on the requests ``rows``
    (arrival s, prompt, output tokens); returns (records frame, run, live system)."""

    def run(rows, timeout_s=None, mode="whole", output_s=0.0, decode_seqs=256):
        trace = tmp_path / "requests.csv"
        _trace(trace, rows)
        timeout = "null" if timeout_s is None else f"{float(timeout_s)!r} s"
        text = TRACED.format(out=f"{float(output_s)!r} s", trace=trace, timeout=timeout, mode=mode,
                             seqs=decode_seqs)
        result = kvsim.run(kvsim.parse_scenario(text, "pd.yaml"))
        return result.runs[0].records.to_frame(), result.runs[0], built_systems[-1]

    return run


def _assert_all_given_back(system) -> None:
    """Every page is free, no instance holds work, no flow is in flight, nothing is in the system."""
    for inst in system.instances:
        assert inst.pool.free_blocks == inst.pool.num_blocks, inst.index
        assert not inst.busy and not inst.scheduler.waiting, inst.index
        assert inst.scheduler.stalled == 0
    assert system.network.active_flows == 0
    assert system.in_system.value == 0
    front = system.front
    assert front.submitted == front.completed + front.aborted


def _sizing(tmp_path):
    trace = tmp_path / "sizing.csv"  # loading a scenario reads its trace: one request will do
    _trace(trace, [(0.0, 10, 1)])
    text = TRACED.format(out="0 s", trace=trace, timeout="null", mode="whole", seqs=256)
    return check_scenario(kvsim.parse_scenario(text, "pd.yaml"))[(0, "pd")]


def _handoff_path(system):
    prefill, decode = system.instances
    return system.topology.peer_path(prefill.gpus[0], decode.gpus[0])


# ------------------------------------------------------------------ (a) queued / computing on prefill


def test_a_timeout_while_queued_for_prefill_aborts_it_there_and_the_computing_one_after_its_chunks(traced, tmp_path):
    # A's 16,000-token prompt takes eight 2,048-token chunks; B arrives 1 us later and waits (the
    # chunks fill every iteration's token budget) until A's last chunk leaves room for it
    rows = [(0.0, 16000, 50), (1e-6, 1000, 50)]
    ref, _, _ = traced(rows)
    step = _sizing(tmp_path).pools[0].step_model()
    ends = np.cumsum([step.iteration_time_s(BatchShape(
        prefill_tokens=CHUNK, prefill_pairs=BatchShape.prefill_chunk_pairs(CHUNK, k * CHUNK),
        prefill_context_tokens=k * CHUNK, prefill_seqs=1)) for k in range(7)])
    # hand check of the reference: B is admitted when A's seven full chunks are done
    assert ref.admit_s[1] == pytest.approx(ends[-1], rel=1e-9)
    timeout = 0.5 * ends[-1]  # in the middle of A's prefill, long before B is admitted
    frame, run, system = traced(rows, timeout)
    assert (frame.aborted_s - frame.arrival_s).to_numpy() == pytest.approx([timeout, timeout], rel=1e-12)
    assert frame.finish_s.isna().all() and frame.first_token_s.isna().all()
    a, b = frame.iloc[0], frame.iloc[1]
    # B never left the prefill queue: not admitted, never on a decode instance
    assert math.isnan(b.admit_s) and b.computed_tokens == 0 and b.prefill_instance == 0 and b.instance == -1
    # A was computing: the chunks done by its deadline count, the one running then is dropped
    assert a.admit_s == 0.0 and math.isnan(a.prefill_end_s) and math.isnan(a.handoff_start_s)
    assert a.computed_tokens == CHUNK * int(np.count_nonzero(ends <= timeout)) > 0
    assert a.instance == -1
    assert run.summary["requests_aborted"] == 2
    assert run.summary["pd"]["requests_aborted_by_stage"] == {"prefill": 2, "handoff": 0, "decode": 0}
    assert run.summary["pd"]["handoffs_abandoned"] == 0
    assert system.transfers.bytes_by_purpose.get("handoff", 0.0) == 0.0
    _assert_all_given_back(system)


# ------------------------------------------------------------------ (b) during the handoff


def test_a_timeout_during_the_handoff_flow_cancels_it_and_the_links_carry_only_what_it_delivered(traced):
    rows = [(0.0, 16000, 50)]
    ref, _, _ = traced(rows)
    start = ref.handoff_start_s[0]
    flow_s = 16000 * KV_PER_TOKEN / NIC_Bps  # alone on idle links: the NIC's rate
    assert ref.handoff_landed_s[0] - start == pytest.approx(flow_s + 7e-6, rel=1e-9)
    timeout = start + 0.4 * flow_s
    frame, run, system = traced(rows, timeout)
    row = frame.iloc[0]
    assert row.aborted_s == pytest.approx(timeout, rel=1e-12) and math.isnan(row.finish_s)
    assert row.prefill_end_s == pytest.approx(ref.prefill_end_s[0], rel=1e-12)
    assert row.handoff_start_s == pytest.approx(start, rel=1e-12)
    assert math.isnan(row.handoff_landed_s) and math.isnan(row.handoff_end_s) and math.isnan(row.first_token_s)
    # the bytes it moved before its client gave up: 40 % of the prompt's KV, at the NIC's rate
    delivered = NIC_Bps * (timeout - start)
    assert row.handoff_bytes == pytest.approx(delivered, rel=1e-9)
    assert row.handoff_bytes == pytest.approx(0.4 * 16000 * KV_PER_TOKEN, rel=1e-6)
    for link in _handoff_path(system):  # and no more crossed any link of its path
        assert system.network.bytes_moved(link) == pytest.approx(delivered, rel=1e-9)
    assert system.transfers.bytes_by_purpose["handoff"] == pytest.approx(delivered, rel=1e-9)
    pd_part = run.summary["pd"]
    assert pd_part["requests_aborted_by_stage"] == {"prefill": 0, "handoff": 1, "decode": 0}
    assert pd_part["handoffs_abandoned"] == 1
    assert pd_part["handoff_bytes_per_request_mean"] == 0.0  # an abandoned handoff is no handoff's size
    assert pd_part["handoff_Bps"] == pytest.approx(delivered / 30.0, rel=1e-9)
    assert pd_part["handoff_transfer_s"]["mean"] is None
    _assert_all_given_back(system)


def test_a_timeout_while_held_for_decode_room_frees_the_prompt_and_leaves_the_decode_queue(traced):
    # the decode instance runs one sequence at a time: A decodes 2,000 tokens while B, prefilled
    # right after it, holds its prompt's pages on the prefill instance waiting for the slot
    rows = [(0.0, 500, 2000), (1e-6, 500, 10)]
    ref, _, _ = traced(rows, decode_seqs=1)
    assert ref.handoff_start_s[1] == pytest.approx(ref.finish_s[0], abs=0.02)  # B waited for A to end
    timeout = 0.5 * ref.finish_s[0]
    frame, run, system = traced(rows, timeout, decode_seqs=1)
    a, b = frame.iloc[0], frame.iloc[1]
    # A was decoding and is aborted there; B, 1 us later, is still held: its prompt is computed, no
    # KV has moved (A's slot frees when the decode step running at A's deadline ends, > 1 us later)
    assert a.first_token_s > 0 and math.isnan(a.finish_s)
    assert b.prefill_end_s == pytest.approx(ref.prefill_end_s[1], rel=1e-12)
    assert math.isnan(b.handoff_start_s) and b.handoff_bytes == 0 and b.instance == 1
    assert b.aborted_s == pytest.approx(timeout + 1e-6, rel=1e-12)
    assert run.summary["pd"]["requests_aborted_by_stage"] == {"prefill": 0, "handoff": 1, "decode": 1}
    assert run.summary["pd"]["handoffs_abandoned"] == 0
    assert system.transfers.bytes_by_purpose["handoff"] == 500 * KV_PER_TOKEN  # A's alone
    _assert_all_given_back(system)


def test_layer_by_layer_a_timeout_during_the_last_chunk_stops_both_the_flow_and_the_prefill(traced):
    rows = [(0.0, 16000, 50)]
    ref, _, _ = traced(rows, mode="layerwise")
    start, prefill_end = ref.handoff_start_s[0], ref.prefill_end_s[0]
    flow_s = 16000 * KV_PER_TOKEN / NIC_Bps
    assert start + flow_s < prefill_end  # the flow lands while the last chunk is still computing
    timeout = start + 0.25 * flow_s
    frame, run, system = traced(rows, timeout, mode="layerwise")
    row = frame.iloc[0]
    assert row.handoff_bytes == pytest.approx(NIC_Bps * (timeout - start), rel=1e-9)
    # the last chunk was running when the client gave up: it is not counted, the prompt never ends
    assert math.isnan(row.prefill_end_s) and row.computed_tokens == 7 * CHUNK
    assert math.isnan(row.handoff_landed_s)
    assert run.summary["pd"]["requests_aborted_by_stage"]["handoff"] == 1
    _assert_all_given_back(system)


def test_layer_by_layer_a_timeout_after_the_kv_landed_but_before_the_last_layer_exists(traced):
    rows = [(0.0, 16000, 50)]
    ref, _, _ = traced(rows, mode="layerwise")
    landed, prefill_end = ref.handoff_landed_s[0], ref.prefill_end_s[0]
    timeout = 0.5 * (landed + prefill_end)
    frame, run, system = traced(rows, timeout, mode="layerwise")
    row = frame.iloc[0]
    # the flow landed whole: it is a handoff like any other, only never usable
    assert row.handoff_landed_s == pytest.approx(landed, rel=1e-12)
    assert row.handoff_bytes == 16000 * KV_PER_TOKEN and math.isnan(row.handoff_end_s)
    pd_part = run.summary["pd"]
    assert pd_part["handoffs_abandoned"] == 0
    assert pd_part["handoff_bytes_per_request_mean"] == 16000 * KV_PER_TOKEN
    assert pd_part["requests_aborted_by_stage"] == {"prefill": 0, "handoff": 1, "decode": 0}
    _assert_all_given_back(system)


# ------------------------------------------------------------------ (c) during decode, last token


def test_a_timeout_during_decode_stops_the_decode_after_the_steps_done(traced):
    rows = [(0.0, 1000, 2000)]
    ref, _, _ = traced(rows)
    first, finish = ref.first_token_s[0], ref.finish_s[0]
    timeout = first + 0.5 * (finish - first)
    frame, run, system = traced(rows, timeout)
    row = frame.iloc[0]
    assert row.first_token_s == pytest.approx(first, rel=1e-12) and math.isnan(row.finish_s)
    assert row.aborted_s == pytest.approx(timeout, rel=1e-12)
    assert row.handoff_end_s == pytest.approx(ref.handoff_end_s[0], rel=1e-12)
    # the decode steps run back to back from the handoff's end, step k reading 1001 + k tokens of
    # context; by hand from the step model: the reference's last one ends at its finish ...
    step = system.sizing.pools[1].step_model()
    ends = row.decode_start_s + np.cumsum([step.iteration_time_s(BatchShape(
        decode_seqs=1, decode_context_tokens=1001 + k, sampled_seqs=1)) for k in range(2000)])
    assert ends[-1] == pytest.approx(finish, rel=1e-9)
    # ... and the aborted run emitted one token per step that ended by the deadline
    assert system.counters.output_tokens.total == int(np.count_nonzero(ends <= timeout)) > 1
    assert run.summary["pd"]["requests_aborted_by_stage"] == {"prefill": 0, "handoff": 0, "decode": 1}
    assert run.summary["pd"]["handoff_bytes_per_request_mean"] == 1000 * KV_PER_TOKEN
    _assert_all_given_back(system)


def test_a_timeout_while_the_last_token_streams_aborts_without_touching_the_engine(traced):
    rows = [(0.0, 1000, 50)]
    ref, _, ref_system = traced(rows, output_s=0.05)
    timeout = ref.finish_s[0] - 0.025  # the engine is done; the client has not got the last token
    frame, run, system = traced(rows, timeout, output_s=0.05)
    row = frame.iloc[0]
    assert math.isnan(row.finish_s) and row.aborted_s == pytest.approx(timeout, rel=1e-12)
    assert row.first_token_s == pytest.approx(ref.first_token_s[0], rel=1e-12)
    assert system.counters.output_tokens.total == 50  # every token was generated
    assert system.counters.iterations == ref_system.counters.iterations
    assert system.front.completed == 0 and system.front.aborted == 1
    assert run.summary["pd"]["requests_aborted_by_stage"] == {"prefill": 0, "handoff": 0, "decode": 1}
    _assert_all_given_back(system)


# ------------------------------------------------------------------ (d) never


@pytest.mark.parametrize("mode", ["whole", "layerwise"])
def test_a_timeout_that_never_comes_changes_nothing(traced, mode):
    rows = [(0.0, 16000, 50), (1e-6, 1000, 50), (0.5, 3000, 400), (4.0, 500, 20)]
    base, base_run, _ = traced(rows, mode=mode)
    frame, run, system = traced(rows, 1000.0, mode=mode)
    assert base.finish_s.notna().all() and frame.aborted_s.isna().all()
    pd.testing.assert_frame_equal(frame, base)
    assert run.summary == base_run.summary
    _assert_all_given_back(system)


# ------------------------------------------------------------------ an overloaded run sheds load

OVERLOAD = """
name: pd-overload
seed: 6
duration: 20 s
warmup: 4 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 8/s}}
  input_tokens: {{kind: uniform, low: 200, high: 3000}}
  output_tokens: {{kind: uniform, low: 20, high: 100}}
  timeout: {timeout}
systems:
  pd:
    pools:
      prefill: {{node: h20-8x, instances: 1, role: prefill, instance: {{activation_reserve: 70 GiB}}}}
      decode: {{node: l20-8x, instances: 1, role: decode, instance: {{activation_reserve: 22 GiB, max_num_seqs: 64}}}}
    kv_handoff: {{mode: {mode}}}
"""


def _overloaded(systems, timeout, mode="layerwise"):
    result = kvsim.run(kvsim.parse_scenario(OVERLOAD.format(timeout=timeout, mode=mode), "o.yaml"))
    return result.runs[0], systems[-1]


@pytest.fixture(scope="module")
def overloaded_pair():
    import kvsim.sim.run as run_module

    systems = []
    real = run_module.build_system

    def capture(*args, **kwargs):
        systems.append(real(*args, **kwargs))
        return systems[-1]

    run_module.build_system = capture
    try:
        shed = _overloaded(systems, "3 s")
        again = _overloaded(systems, "3 s")
        base = _overloaded(systems, "null")
    finally:
        run_module.build_system = real
    return shed, again, base


def _waiting_at(frame: pd.DataFrame, t_s: float) -> int:
    left = (frame.finish_s <= t_s) | (frame.aborted_s <= t_s)
    return int(((frame.arrival_s <= t_s) & ~left).sum())


def test_an_overloaded_pd_system_with_a_timeout_sheds_load(overloaded_pair):
    (shed, _), _, (base, _) = overloaded_pair
    shed_frame, base_frame = shed.records.to_frame(), base.records.to_frame()
    assert len(shed_frame) == len(base_frame)  # the same arrivals
    waiting_shed, waiting_base = _waiting_at(shed_frame, 20.0), _waiting_at(base_frame, 20.0)
    # without the timeout the backlog grows through the window (the one prefill instance gets
    # through ~4-5 of the ~8 prompts that arrive a second); with it no request stays past its
    # deadline, so at most the last 3 s of arrivals (~24) are still in the system
    assert _waiting_at(base_frame, 12.0) < waiting_base
    assert waiting_shed < 0.5 * waiting_base
    assert waiting_shed <= int(((shed_frame.arrival_s > 17.0) & (shed_frame.arrival_s <= 20.0)).sum())
    finished = shed_frame.dropna(subset=["finish_s"])
    assert ((finished.finish_s - finished.arrival_s) <= 3.0 + 1e-9).all()
    assert shed.summary["requests_undrained"] == 0 and base.summary["requests_aborted"] == 0
    # the P:D report's growth flag counts a request given up on as gone, not as in the system
    assert _in_system(shed, 20.0) == waiting_shed and _in_system(base, 20.0) == waiting_base


def test_overloaded_timeouts_abort_in_every_stage_and_conserve_requests_pages_and_bytes(overloaded_pair):
    (run, system), _, _ = overloaded_pair
    frame = run.records.to_frame()
    aborted = frame.aborted_s.notna()
    finished = frame.finish_s.notna()
    assert not (aborted & finished).any()
    assert (frame.aborted_s[aborted] - frame.arrival_s[aborted]).to_numpy() == pytest.approx(
        np.full(int(aborted.sum()), 3.0), rel=1e-9)
    # conservation: arrived = finished + aborted + still in the system (none: the run drained)
    assert len(frame) == int(finished.sum()) + int(aborted.sum()) + system.in_system.value
    assert system.front.submitted == system.front.completed + system.front.aborted == len(frame)
    _assert_all_given_back(system)
    stages = run.summary["pd"]["requests_aborted_by_stage"]
    assert sum(stages.values()) == run.summary["requests_aborted"] > 0
    assert min(stages.values()) > 0  # the deadline found requests in every stage
    # bytes: what the records say each handoff moved is what the links carried
    prefill, decode = system.instances
    path = system.topology.peer_path(prefill.gpus[0], decode.gpus[0])
    moved = frame.handoff_bytes.sum()
    assert 0 < run.summary["pd"]["handoffs_abandoned"]
    cut = aborted & frame.handoff_landed_s.isna() & frame.handoff_start_s.notna()
    assert (frame.handoff_bytes[cut] < frame.input_tokens[cut] * KV_PER_TOKEN).all()
    assert (frame.handoff_bytes[frame.handoff_landed_s.notna()]
            == frame.input_tokens[frame.handoff_landed_s.notna()] * KV_PER_TOKEN).all()
    for link in path:
        assert system.network.bytes_moved(link) == pytest.approx(moved, rel=1e-9)
    in_window = frame.handoff_start_s.between(4.0, 20.0)
    assert system.transfers.bytes_by_purpose["handoff"] == pytest.approx(
        frame.handoff_bytes[in_window].sum(), rel=1e-9)


def test_little_s_law_holds_exactly_with_aborted_requests(overloaded_pair):
    # the time-weighted number in the system over the window equals the time the requests spent
    # in it inside the window: a request leaves when it finishes or when its client gives up
    (run, _), _, _ = overloaded_pair
    frame = run.records.to_frame()
    leave = frame.finish_s.fillna(frame.aborted_s).to_numpy()
    inside = np.clip(np.minimum(leave, 20.0) - np.maximum(frame.arrival_s.to_numpy(), 4.0), 0.0, None)
    assert run.in_system_mean * 16.0 == pytest.approx(inside.sum(), rel=1e-9)
    # and the mean is the arrival rate times the mean time in the system (to within the edges)
    sojourn = (leave - frame.arrival_s.to_numpy())[frame.arrival_s.between(4.0, 20.0).to_numpy()]
    rate = len(sojourn) / 16.0
    assert run.in_system_mean == pytest.approx(rate * sojourn.mean(), rel=0.15)


def test_pd_timeouts_are_deterministic(overloaded_pair):
    (first, _), (second, _), _ = overloaded_pair
    pd.testing.assert_frame_equal(first.records.to_frame(), second.records.to_frame())
    assert first.summary == second.summary


# ------------------------------------------------------------------ with a controller switching roles

SWITCHING = """
name: pd-switching
seed: 5
duration: 60 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival:
    kind: phases
    phases:
      - {duration: 30 s, arrival: {kind: poisson, rate: 6/s}, input_tokens: {kind: fixed, value: 3000},
         output_tokens: {kind: fixed, value: 20}}
      - {duration: 30 s, arrival: {kind: poisson, rate: 8/s}, input_tokens: {kind: fixed, value: 200},
         output_tokens: {kind: fixed, value: 600}}
  timeout: 3 s
systems:
  pd:
    pools:
      h20: {node: h20-8x, roles: {prefill: 1, decode: 3}}
    controller: {kind: threshold, signal: prefill_queue, interval: 5 s, low: 500, high: 8000, switch_time: 2 s}
"""


def test_timeouts_with_a_controller_switching_roles_lose_nothing(built_systems):
    run = kvsim.run(kvsim.parse_scenario(SWITCHING, "s.yaml")).runs[0]
    system = built_systems[-1]
    frame = run.records.to_frame()
    assert len(run.switches) >= 1
    assert run.summary["requests_aborted"] > 0
    assert not (frame.finish_s.notna() & frame.aborted_s.notna()).any()
    assert (frame.finish_s.notna() | frame.aborted_s.notna()).all()
    _assert_all_given_back(system)


CACHED = """
name: pd-cached-timeouts
seed: 3
duration: 30 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 8/s}}
  prefix: {{kind: shared_documents, documents: 400, zipf_s: 0.6, document_tokens: {{kind: fixed, value: 4096}},
           suffix_tokens: {{kind: fixed, value: 128}}}}
  output_tokens: {{kind: uniform, low: 16, high: 400}}
  timeout: 2 s
systems:
  pd:
    pools: {{h: {{node: h20-8x, instances: 6, roles: {{prefill: 3, decode: 3}}}}}}
    prefill_router: prefix_aware
    kv_cache: {{dram: {{capacity: 64 GiB}}}}
    controller: {{kind: threshold, signal: prefill_queue, interval: 2 s, low: 500, high: 8000, switch_time: 1 s}}
    kv_handoff: {{mode: {mode}}}
"""


@pytest.mark.parametrize("mode", ["whole", "layerwise"])
def test_timeouts_with_prefix_caching_and_switching_roles_leave_only_cached_pages(built_systems, mode):
    run = kvsim.run(kvsim.parse_scenario(CACHED.format(mode=mode), "c.yaml")).runs[0]
    system = built_systems[-1]
    frame = run.records.to_frame()
    assert len(run.switches) >= 1 and run.summary["cache"]["hit_rate"]["hbm"] > 0
    assert run.summary["requests_aborted"] > 0 and frame.finish_s.notna().any()
    assert not (frame.finish_s.notna() & frame.aborted_s.notna()).any()
    assert system.front.submitted == system.front.completed + system.front.aborted == len(frame)
    for inst in system.instances:
        # every sequence's pages came back; what is held is the prefix cache's blocks
        hook = inst.scheduler.hook
        cached = hook.hbm.used_blocks * hook.geometry.pages_per_block if hasattr(hook, "hbm") else 0
        assert inst.pool.free_blocks + cached == inst.pool.num_blocks
        assert not inst.busy
    assert system.network.active_flows == 0 and system.in_system.value == 0
