"""KV migration on a role switch (``controller.on_switch: migrate``, :mod:`kvsim.serving.migration`):
bytes and requests conserved, a lone flow's time by hand, faster than a drain, the drain default
unchanged, determinism, and the two backends agreeing."""

from __future__ import annotations

import math
import os

import pytest

import kvsim
import kvsim.sim.run as run_module
from kvsim.network.transfers import Transfers
from kvsim.serving.migration import KVMigration

KV_PER_TOKEN = 147_456  # Qwen3-8B bf16 at tp 1: 2 * 36 layers * 8 KV heads * 128 * 2 bytes
BLOCK = 16  # tokens per page (InstanceSpec.block_size_tokens default)
NVLINK_Bps = 450e9  # H20 NVLink, per direction (as tests/test_pd.py)
NVLINK_S = 3e-6

# every decode instance holds long answers when the controller (KV occupancy far below its band:
# decode has room to spare) moves decode instances to prefill at its first tick
LONG = """
name: mig
seed: {seed}
duration: {duration} s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {arrival}
  input_tokens: {{kind: fixed, value: 1000}}
  output_tokens: {{kind: fixed, value: {output}}}
systems:
  pd:
    pools:
      h20: {{node: h20-8x, roles: {{prefill: {prefill}, decode: {decode}}}}}
    controller: {{kind: threshold, signal: decode_kv_occupancy, interval: {interval} s, low: 0.5, high: 0.9,
                  switch_time: 1 s, min_decode: {min_decode}, step: {step}{on_switch}}}
"""


def _text(on_switch="migrate", seed=3, duration=40, arrival="{kind: poisson, rate: 4/s}", output=1500,
          prefill=2, decode=6, interval=20, min_decode=2, step=2):
    extra = "" if on_switch is None else f", on_switch: {on_switch}"
    return LONG.format(seed=seed, duration=duration, arrival=arrival, output=output, prefill=prefill,
                       decode=decode, interval=interval, min_decode=min_decode, step=step, on_switch=extra)


@pytest.fixture
def watched(monkeypatch):
    """Runs whose systems, migration flows and finished sequences are kept: ``watched.run(text)``
    returns ``(result, system, flows, finished)``; each flow ``[start_s, bytes_each, cards, end_s]``,
    each finish ``(rid, generated, output_tokens)``; each move of a sequence ``(rid, kv_tokens,
    kv_blocks, generated)`` as it left (``moves``, the fifth item)."""
    real_build, real_move = run_module.build_system, Transfers.move
    real_migrate = KVMigration._move
    state = {"flows": [], "finished": [], "systems": [], "moves": []}

    def migrate(self, source, seq, target, out):
        state["moves"].append((seq.rid, seq.kv_tokens, seq.kv_blocks, seq.generated))
        real_migrate(self, source, seq, target, out)

    def build(*args, **kwargs):
        system = real_build(*args, **kwargs)
        for inst in system.instances:
            def spy(seq, now, _inner=inst.on_finish):
                state["finished"].append((seq.rid, seq.generated, seq.output_tokens))
                _inner(seq, now)
            inst.on_finish = spy
        state["systems"].append(system)
        return system

    def move(self, paths, nbytes_each, purpose, io=None, cancellable=False):
        done = real_move(self, paths, nbytes_each, purpose, io=io, cancellable=cancellable)
        if purpose == "migration":
            entry = [self.env.now, nbytes_each, len(paths), math.nan]
            state["flows"].append(entry)
            done.callbacks.append(lambda _event, env=self.env: entry.__setitem__(3, env.now))
        return done

    monkeypatch.setattr(run_module, "build_system", build)
    monkeypatch.setattr(Transfers, "move", move)
    monkeypatch.setattr(KVMigration, "_move", migrate)

    class Watch:
        @staticmethod
        def run(text):
            for key in state:
                state[key].clear()
            result = kvsim.run(kvsim.parse_scenario(text, "mig.yaml"))
            return (result, state["systems"][-1], list(state["flows"]), list(state["finished"]),
                    list(state["moves"]))

    return Watch


def test_migration_conserves_kv_bytes_and_requests(watched):
    result, system, flows, finished, moves = watched.run(_text())
    switches = result.switches_frame()
    out = switches[switches.from_role == "decode"]
    assert len(out) >= 2 and (out.migrated_requests > 0).all()
    frame = result.requests_frame()
    moved = frame[frame.migrations > 0]
    assert len(moved) == out.migrated_requests.sum() == len(flows)
    # bytes: each moved sequence's pages, whole, at the model's KV bytes per token (tp 1: one card)
    nbytes = sum(f[1] * f[2] for f in flows)
    assert nbytes == pytest.approx(out.migrated_bytes.sum(), rel=1e-12)
    by_hand = 0
    for (_rid, kv_tokens, blocks, generated), (_, each, cards, _) in zip(moves, flows):
        # a handed-off sequence's decode steps write one token each: its context is the prompt and
        # every token so far (one fewer after a recompute, whose prefill emits a token)
        assert kv_tokens - 1000 in (generated, generated - 1) and blocks == math.ceil(kv_tokens / BLOCK)
        assert cards == 1 and each == blocks * BLOCK * KV_PER_TOKEN
        by_hand += math.ceil(kv_tokens / BLOCK) * BLOCK * KV_PER_TOKEN
    assert nbytes == by_hand and sorted(moved.request_id) == sorted(rid for rid, *_ in moves)
    # requests: every one finishes exactly once, with every token it asked for, none lost
    rids = [rid for rid, _, _ in finished]
    assert len(rids) == len(set(rids)) == len(frame)
    assert all(generated == wanted for _, generated, wanted in finished)
    assert frame.finish_s.notna().all() and frame.migrations.sum() == out.migrated_requests.sum()
    assert system.front.completed == system.front.submitted == len(frame)
    for inst in system.instances:
        assert not inst.busy and inst.pool.free_blocks == inst.pool.num_blocks
    order = ["arrival_s", "prefill_end_s", "handoff_end_s", "first_token_s", "finish_s"]
    for a, b in zip(order, order[1:]):
        assert (frame[a] <= frame[b]).all(), (a, b)


def test_the_bytes_moved_are_the_pages_held_and_a_lone_flow_takes_bytes_over_nvlink(watched):
    # two clients, one answer on each of the two decode instances; at the tick the least busy
    # decode instance (a tie: the lower index) leaves and its one sequence moves to the other
    text = _text(arrival="{kind: closed_loop, clients: 2, think_time: 30 s}", output=4000, prefill=1, decode=2,
                 interval=5, min_decode=1, step=1, duration=30)
    result, system, flows, _, moves = watched.run(text)
    switch = result.switches_frame().iloc[0]
    assert switch.from_role == "decode" and switch.migrated_requests == 1 and len(flows) == len(moves) == 1
    start_s, each, cards, end_s = flows[0]
    rid, kv_tokens, blocks, generated = moves[0]
    # paused after a step: its context (the prompt and every token so far) in whole pages
    assert kv_tokens == 1000 + generated and blocks == math.ceil(kv_tokens / BLOCK)
    assert each == math.ceil((1000 + generated) / BLOCK) * BLOCK * KV_PER_TOKEN == switch.migrated_bytes
    assert result.requests_frame().migrations[rid] == 1 and 1 < generated < 4000
    # one server: both cards in its NVLink domain, the flow alone on the links
    assert end_s - start_s == pytest.approx(each / NVLINK_Bps + NVLINK_S, rel=1e-9)
    assert switch.migration_s == pytest.approx(end_s - switch.decided_s, rel=1e-12)
    assert start_s - switch.decided_s < 0.1  # paused within an iteration (and a poll) of the tick


def test_migration_frees_the_instance_sooner_than_a_drain_with_long_answers(watched):
    drained = watched.run(_text(on_switch="drain"))[0].switches_frame()
    migrated = watched.run(_text(on_switch="migrate"))[0].switches_frame()
    # the runs are the same until the first tick: compare its switches
    drained, migrated = (s[(s.from_role == "decode") & (s.decided_s == s.decided_s.min())].sort_values("instance")
                         for s in (drained, migrated))
    assert len(drained) == 2 and list(drained.instance) == list(migrated.instance)
    assert list(drained.decided_s) == list(migrated.decided_s)
    wait_drain = (drained.drained_s - drained.decided_s).to_numpy()
    wait_migrate = (migrated.drained_s - migrated.decided_s).to_numpy()
    # 1500-token answers at tens of ms a step take seconds to drain; the moves take milliseconds
    assert (wait_drain > 1.0).all() and (wait_migrate < 0.1 * wait_drain).all()
    assert "migrated_requests" not in drained.columns


def test_drain_is_the_default_and_gives_todays_records():
    plain = kvsim.run(kvsim.parse_scenario(_text(on_switch=None), "mig.yaml"))
    drain = kvsim.run(kvsim.parse_scenario(_text(on_switch="drain"), "mig.yaml"))
    assert plain.records_digest() == drain.records_digest()
    assert "migrations" not in plain.requests_frame().columns
    assert plain.switches_frame().equals(drain.switches_frame())


def test_a_migrating_run_is_deterministic():
    runs = [kvsim.run(kvsim.parse_scenario(_text(seed=11), "mig.yaml")) for _ in range(2)]
    assert runs[0].records_digest() == runs[1].records_digest()
    assert runs[0].switches_frame().equals(runs[1].switches_frame())
    assert runs[0].switches_frame().migrated_requests.sum() > 0


@pytest.mark.skipif(bool(os.environ.get("KVSIM_NO_COMPILE")), reason="KVSIM_NO_COMPILE: a pure-Python install")
def test_the_python_backend_agrees_with_the_compiled_one_on_a_migrating_run(monkeypatch):
    digests, switches = [], []
    for name in ("python", "compiled"):
        monkeypatch.setenv("KVSIM_BACKEND", name)
        result = kvsim.run(kvsim.parse_scenario(_text(seed=7), "mig.yaml"))
        digests.append(result.records_digest())
        switches.append(result.switches_frame())
    assert digests[0] == digests[1]
    assert switches[0].equals(switches[1]) and switches[0].migrated_requests.sum() > 0


def test_coalesced_runs_give_the_step_by_step_records_when_migrating():
    digests = []
    for coalesce in ("true", "false"):
        text = _text(seed=11).replace("warmup: 0 s", f"warmup: 0 s\nengine: {{coalesce: {coalesce}}}")
        result = kvsim.run(kvsim.parse_scenario(text, "mig.yaml"))
        assert result.switches_frame().migrated_requests.sum() > 0
        digests.append(result.records_digest())
    assert digests[0] == digests[1]


def test_the_resolved_scenario_of_a_migrating_run_keeps_the_option_and_reads_back(tmp_path):
    from kvsim.plan.store import _records

    result = kvsim.run(kvsim.parse_scenario(_text(duration=25), "mig.yaml"))
    frame = result.requests_frame()
    back = _records(frame)
    assert "migrations" in back.extra_fields and (back.column("migrations") == frame.migrations).all()
    assert result.scenario.spec.systems["pd"].controller.on_switch == "migrate"


@pytest.mark.parametrize("extra, fragment", [
    ("\n    failures: {mtbf: 100 s, mtbf_cards: 8, repair: 30 s}", "without node failures"),
])
def test_migration_with_failures_is_refused(refused, extra, fragment):
    text = refused(f"""pools:
      h20: {{node: h20-8x, roles: {{prefill: 2, decode: 2}}}}
    controller: {{kind: threshold, signal: prefill_queue, low: 1, high: 10, on_switch: migrate}}{extra}""")
    assert fragment in text and "on_switch" in text


def test_migration_with_client_timeouts_is_refused(tmp_path, capsys):
    from kvsim.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(_text().replace("output_tokens: {kind: fixed, value: 1500}",
                                    "output_tokens: {kind: fixed, value: 1500}\n  timeout: 60 s"))
    assert main(["validate", str(path)]) != 0
    err = capsys.readouterr()
    text = err.out + err.err
    assert "workload.timeout" in text and "on_switch" in text and "Traceback" not in text
