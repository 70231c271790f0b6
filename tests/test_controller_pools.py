"""Role-aware controllers (issue 26, item 1): a pool with a fixed role never switches, a switchable
pool keeps its own bounds, a controller with nothing to move is refused, and the decode_queue signal
counts prompts waiting for decode room."""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from test_controller import SHIFT  # (the tests folder is on the path, as for conftest)

# the shifting workload of test_controller.py (prompt-heavy, then output-heavy), served by a fixed
# prefill pool beside a switchable one
HETERO = SHIFT.replace("seed: 5", "seed: {seed}").replace("name: shift", "name: hetero").replace(
    "      h20: {{node: h20-8x, roles: {{prefill: 4, decode: 4}}}}\n",
    "      pr: {{node: h20-8x, instances: 2, role: prefill}}\n"
    "      dt: {{node: h20-8x, roles: {{prefill: 2, decode: 4}}{bounds}}}\n")
assert "pr: {{node" in HETERO

CONTROLLERS = [
    "{kind: threshold, signal: prefill_queue, interval: 10 s, low: 500, high: 8000, switch_time: 5 s}",
    "{kind: threshold, signal: decode_queue, interval: 10 s, low: 0.1, high: 2, switch_time: 5 s}",
    "{kind: proportional, signal: decode_kv_occupancy, interval: 10 s, setpoint: 0.2, gain: 10, max_step: 3, "
    "switch_time: 5 s}",
    "{kind: threshold, signal: ttft_attainment, interval: 10 s, window: 20 s, low: 0.95, high: 0.99, "
    "switch_time: 5 s}",
]


def _roles_over_time(result, system):
    """Per switch, in the order they took effect: the pool and every pool's role counts after it."""
    pools = {inst.index: system.controller.pools[inst.index][0] for inst in system.instances}
    roles = {inst.index: role for inst, role in zip(system.instances, _initial_roles(system))}
    counts = []
    for _, s in result.switches_frame().sort_values("drained_s", kind="stable").iterrows():
        assert roles[s.instance] == s.from_role
        roles[s.instance] = s.to_role
        counts.append((s.pool, pools[s.instance], {
            (pool, role): sum(1 for i, r in roles.items() if pools[i] == pool and r == role)
            for pool in ("pr", "dt") for role in ("prefill", "decode")}))
    return counts


def _initial_roles(system):
    return [p.role for p in system.placements]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("controller", CONTROLLERS)
def test_a_fixed_role_pool_never_switches_and_a_pool_keeps_its_bounds(built_systems, controller, seed):
    scenario = kvsim.parse_scenario(HETERO.format(seed=seed, controller=controller,
                                                  bounds=", min_prefill: 1, min_decode: 2"), "hetero.yaml")
    result = kvsim.run(scenario)
    system = built_systems[-1]
    for pool, pool_of_instance, counts in _roles_over_time(result, system):
        assert pool == pool_of_instance == "dt"  # the 950PR-like prefill pool never moves
        assert counts[("pr", "prefill")] == 2 and counts[("pr", "decode")] == 0
        assert counts[("dt", "prefill")] >= 1 and counts[("dt", "decode")] >= 2
    frame = result.requests_frame()
    assert frame.finish_s.notna().all()


def test_the_controllers_do_move_the_switchable_pool(built_systems):
    # the test above is not vacuous: the same controllers switch dt's instances both ways
    moved = set()
    for controller in CONTROLLERS[:3]:
        result = kvsim.run(kvsim.parse_scenario(HETERO.format(seed=1, controller=controller, bounds=""), "h.yaml"))
        switches = result.switches_frame()
        assert len(switches) > 0 and set(switches.pool) == {"dt"}
        moved |= set(zip(switches.from_role, switches.to_role))
    assert moved == {("prefill", "decode"), ("decode", "prefill")}


def test_a_fixed_role_pool_may_be_declared_switchable(built_systems):
    text = HETERO.format(seed=1, controller=CONTROLLERS[0], bounds="").replace(
        "pr: {node: h20-8x, instances: 2, role: prefill}", "pr: {node: h20-8x, instances: 2, role: prefill, "
        "switchable: true}").replace("dt: {node: h20-8x, roles: {prefill: 2, decode: 4}}",
                                     "dt: {node: h20-8x, roles: {prefill: 2, decode: 4}, switchable: false}")
    result = kvsim.run(kvsim.parse_scenario(text, "h.yaml"))
    switches = result.switches_frame()
    assert len(switches) > 0 and set(switches.pool) == {"pr"}


def test_decode_queue_counts_handed_off_prompts_waiting_for_a_decode_instance(built_systems):
    def queue(decode_instance: str):
        text = HETERO.format(seed=1, controller="{kind: static, interval: 5 s}", bounds="").replace(
            "dt: {node: h20-8x, roles: {prefill: 2, decode: 4}}",
            "dt: {node: h20-8x, roles: {prefill: 1, decode: 1}, instance: " + decode_instance + "}")
        result = kvsim.run(kvsim.parse_scenario(text, "h.yaml"))
        assert built_systems[-1].controller.measure()["decode_queue"] == 0  # drained: nothing waits at the end
        return result.decisions_frame()

    # one decode instance of 16 sequences behind three prefill instances: in the output-heavy phase
    # computed prompts wait for its batch slots; with 512 slots none waits
    short = queue("{max_num_seqs: 16}")
    roomy = queue("{max_num_seqs: 512}")
    # (a prompt handed over between two of the instance's iterations waits for the next one: at most
    # one or two are caught in passing where nothing queues)
    assert short[short.time_s <= 100].signal_decode_queue.max() <= 2  # short answers: decode keeps up
    phase2 = short[(short.time_s > 130) & (short.time_s <= 240)].signal_decode_queue
    assert phase2.min() >= 1.0 and phase2.median() > 20
    assert roomy.signal_decode_queue.max() <= 2


@pytest.mark.parametrize("system, fragment, field", [
    ("pools: {p: {node: h20-8x, instances: 2, role: prefill}, d: {node: h20-8x, instances: 2, role: decode}}\n"
     "    controller: {kind: threshold, signal: prefill_queue, low: 1, high: 2}",
     "every pool here has a fixed role: p (prefill), d (decode)", "systems.s.controller"),
    ("pools: {p: {node: h20-8x, instances: 2, role: prefill, min_decode: 1}, d: {node: h20-8x, instances: 2, "
     "role: decode}}", "this pool keeps role prefill: give it switchable: true", "systems.s.pools.p.min_decode"),
    ("pools: {h: {node: h20-8x, roles: {prefill: 2, decode: 2}, min_prefill: 2, min_decode: 3}}",
     "exceed the pool's 4 instances", "systems.s.pools.h.min_prefill"),
    ("pools: {h: {node: h20-8x, switchable: true}}", "a colocated (mixed) pool has no role to switch",
     "systems.s.pools.h.switchable"),
])
def test_bad_switching_fields_are_refused_with_the_line(refused, system, fragment, field):
    err = refused(system)
    assert fragment in err and field in err and "bad.yaml:1" in err


def test_a_signal_measured_over_named_pools_counts_only_their_instances(built_systems):
    # a band no reading leaves (the controller never moves), so the three runs are the same run, read
    # over every pool, over pr and over dt at every tick. Both pools keep two prefill instances, and
    # the queue is tokens per prefill instance: the whole system's reading is the mean of the two
    frames = {}
    for pools in (None, "[pr]", "[dt]"):
        where = "" if pools is None else f", signal_pools: {pools}"
        controller = "{kind: threshold, signal: prefill_queue, interval: 5 s, low: 0, high: 1e15" + where + "}"
        result = kvsim.run(kvsim.parse_scenario(HETERO.format(seed=1, controller=controller, bounds=""), "h.yaml"))
        assert len(result.switches_frame()) == 0
        frames[pools] = result.decisions_frame()
    every, pr, dt = (frames[k].signal_prefill_queue.to_numpy() for k in (None, "[pr]", "[dt]"))
    assert len(every) == len(pr) == len(dt) > 20
    assert (pr != dt).any() and (pr > 0).any() and (dt > 0).any()  # not vacuous: the pools differ
    assert every == pytest.approx((pr + dt) / 2, rel=1e-12, abs=1e-9)
    # decode instances are all in dt: over pr there is no decode queue to read
    assert np.isnan(frames["[pr]"].signal_decode_queue).all()
    assert not np.isnan(frames["[dt]"].signal_decode_queue).any()


def test_signal_pools_must_name_pools_of_the_system():
    text = HETERO.format(seed=1, controller="{kind: threshold, signal: decode_queue, low: 0.1, high: 2, "
                                            "signal_pools: [dt, decode850e]}", bounds="")
    with pytest.raises(kvsim.SpecError) as caught:
        kvsim.parse_scenario(text, "h.yaml")
    assert "signal_pools" in str(caught.value) and "'decode850e' is not a pool of this system" in str(caught.value)
