"""Max-min fair sharing: hand-computed rates and completion times, conservation, optimality."""

from __future__ import annotations

import math
import random

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.network import FlowNetwork, max_min_fair_rates

GB = 1e9


def run_transfers(capacity, plan, **net_kwargs):
    """Start each (start_s, links, nbytes, latency_s) at its time; return completion times and the net."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacity, **net_kwargs)
    done = [None] * len(plan)

    def one(i, start_s, links, nbytes, latency_s):
        yield env.timeout(start_s)
        done[i] = yield net.transfer(links, nbytes, latency_s)

    for i, (start_s, links, nbytes, latency_s) in enumerate(plan):
        env.process(one(i, start_s, links, nbytes, latency_s))
    run_bounded(env, max_steps=EVENTS_PER_FLOW * len(plan))
    return done, net


# Per transfer here: a process (start, timeout, end), the transfer's event and its latency timeout
# make 5 events; the network schedules at most 3 wake-ups per flow (a zero-delay solve after the
# start, and one per solve, of which there are at most two per flow: after its start and after a
# finish). So 8 per flow bounds a run; a network that re-solved on stale wake-ups would exceed it.
EVENTS_PER_FLOW = 8


def run_bounded(env, max_steps):
    """Run to completion, failing (instead of hanging) past ``max_steps`` events; returns the count."""
    steps = 0
    while env.peek() < math.inf:
        env.step()
        steps += 1
        assert steps <= max_steps, f"more than {max_steps} events: a flow never finishes or wake-ups pile up"
    return steps


# ---------------------------------------------------------------- the pure allocation


def test_two_equal_flows_on_one_link_get_half_each():
    assert max_min_fair_rates([["L"], ["L"]], {"L": 10.0}) == [5.0, 5.0]


def test_flow_bottlenecked_elsewhere_frees_bandwidth():
    # f2 is held to 2 by B, so f1 takes the rest of A: 10 - 2.
    assert max_min_fair_rates([["A"], ["A", "B"]], {"A": 10.0, "B": 2.0}) == [8.0, 2.0]


def test_three_flows_two_levels():
    # f3 is capped at 3 by B; f1 and f2 split A's remaining 7.
    rates = max_min_fair_rates([["A"], ["A"], ["A", "B"]], {"A": 10.0, "B": 3.0})
    assert rates == [3.5, 3.5, 3.0]


def test_repeated_link_weights_the_flow():
    assert max_min_fair_rates([["L", "L"]], {"L": 10.0}) == [5.0]
    # Sharing with a single-crossing flow: 2t + t = 12 at the common level t = 4.
    assert max_min_fair_rates([["L", "X", "L"], ["L"]], {"L": 12.0, "X": 100.0}) == [4.0, 4.0]


def test_empty_path_and_unbounded_links_give_inf():
    rates = max_min_fair_rates([[], ["U"], ["U", "A"]], {"U": math.inf, "A": 4.0})
    assert rates == [math.inf, math.inf, 4.0]


def test_unknown_link_is_named():
    with pytest.raises(KeyError, match="'nowhere'"):
        max_min_fair_rates([["A", "nowhere"]], {"A": 1.0})


def test_negative_capacity_rejected():
    with pytest.raises(ValueError, match="'A'"):
        max_min_fair_rates([["A"]], {"A": -1.0})


flows_strategy = st.integers(min_value=1, max_value=6).flatmap(
    lambda n_links: st.tuples(
        st.lists(st.floats(min_value=1e-3, max_value=1e12), min_size=n_links, max_size=n_links),
        st.lists(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=5), min_size=1, max_size=10),
    )
)


@settings(max_examples=300, deadline=None)
@given(flows_strategy)
def test_max_min_optimality(case):
    caps, paths = case
    capacity = {f"l{k}": c for k, c in enumerate(caps)}
    flow_links = [[f"l{k}" for k in path] for path in paths]
    rates = max_min_fair_rates(flow_links, capacity)
    load = dict.fromkeys(capacity, 0.0)
    for links, rate in zip(flow_links, rates):
        assert 0.0 < rate < math.inf
        for link in links:
            load[link] += rate
    for link, cap in capacity.items():
        assert load[link] <= cap * (1 + 1e-9)
    for links, rate in zip(flow_links, rates):
        # A bottleneck: saturated, and no flow on it runs faster than this one.
        def is_bottleneck(link):
            fastest = max(r for other, r in zip(flow_links, rates) if link in other)
            # B023: called within this iteration, never after it
            return load[link] >= capacity[link] * (1 - 1e-9) and rate >= fastest * (1 - 1e-9)  # noqa: B023

        assert any(is_bottleneck(link) for link in links)


# ---------------------------------------------------------------- timing through SimPy


def test_two_flows_started_together_finish_together():
    done, _ = run_transfers({"L": 10 * GB}, [(0.0, ["L"], 10 * GB, 0.0), (0.0, ["L"], 10 * GB, 0.0)])
    # Each gets 5 GB/s: 10 GB / 5 GB/s = 2 s.
    assert done == [2.0, 2.0]


def test_staggered_start_reshares():
    # f1 alone for 0.5 s moves 5 GB; then both at 5 GB/s: f1's last 5 GB take 1 s -> 1.5 s.
    # f2 moved 5 GB by 1.5 s, then runs alone at 10 GB/s for its last 5 GB -> 2.0 s.
    done, _ = run_transfers({"L": 10 * GB}, [(0.0, ["L"], 10 * GB, 0.0), (0.5, ["L"], 10 * GB, 0.0)])
    assert done == [1.5, 2.0]


def test_bottleneck_elsewhere_through_simpy():
    # f2 (2 GB over A and B) is held to 2 GB/s by B and ends at 1 s; meanwhile f1 (16 GB on A)
    # gets 8 GB/s, has 8 GB left at 1 s and then runs alone at 10 GB/s: 1 + 0.8 s.
    capacity = {"A": 10 * GB, "B": 2 * GB}
    done, _ = run_transfers(capacity, [(0.0, ["A"], 16 * GB, 0.0), (0.0, ["A", "B"], 2 * GB, 0.0)])
    assert done[1] == pytest.approx(1.0, rel=1e-12)
    assert done[0] == pytest.approx(1.8, rel=1e-12)


def test_latency_paid_once_per_flow_and_does_not_hold_bandwidth():
    capacity = {"A": 10 * GB, "B": 10 * GB, "C": 10 * GB}
    # Three links, one latency for the flow: 10 GB at 10 GB/s = 1 s, then 0.5 s latency.
    # The second flow starts at 1.25 s, while the first is only "in latency": it has the link alone.
    done, _ = run_transfers(capacity, [(0.0, ["A", "B", "C"], 10 * GB, 0.5), (1.25, ["B"], 5 * GB, 0.25)])
    assert done[0] == pytest.approx(1.5, rel=1e-12)
    assert done[1] == pytest.approx(1.25 + 0.5 + 0.25, rel=1e-12)


def test_repeated_link_halves_the_rate_in_time():
    done, _ = run_transfers({"L": 8 * GB}, [(0.0, ["L", "L"], 8 * GB, 0.0)])
    assert done == [2.0]


def test_zero_bytes_take_only_the_latency():
    done, net = run_transfers({"L": GB}, [(1.0, ["L"], 0.0, 0.25), (2.0, ["L"], 0, 0.0), (3.0, [], 5 * GB, 0.5)])
    assert done == [1.25, 2.0, 3.5]
    assert net.bytes_moved("L") == 0.0


def test_bad_inputs():
    env = simpy.Environment()
    net = FlowNetwork(env, {"L": GB})
    with pytest.raises(KeyError, match="'M'"):
        net.transfer(["L", "M"], 1.0)
    with pytest.raises(ValueError):
        net.transfer(["L"], -1.0)
    with pytest.raises(ValueError):
        net.transfer(["L"], 1.0, latency_s=math.nan)
    with pytest.raises(KeyError, match="'M'"):
        net.bytes_moved("M")
    with pytest.raises(ValueError, match="'Z'"):
        FlowNetwork(env, {"Z": 0.0})


def test_active_flows_and_utilization_window():
    env = simpy.Environment()
    # Window [0.5, 1.5]; a 10 GB flow on a 10 GB/s link runs from 0 to 1 s: full for half the window.
    net = FlowNetwork(env, {"L": 10 * GB, "idle": GB}, window_start_s=0.5, window_end_s=1.5)
    seen = []

    def proc():
        event = net.transfer(["L"], 10 * GB)
        seen.append(net.active_flows)
        yield env.timeout(0.75)
        seen.append((net.active_flows, net.bytes_moved("L")))
        yield event
        seen.append(net.active_flows)
        yield env.timeout(2.0)

    env.process(proc())
    env.run()
    assert seen[0] == 1
    assert seen[1][0] == 1 and seen[1][1] == pytest.approx(7.5 * GB, rel=1e-12)
    assert seen[2] == 0
    assert net.utilization_mean("L") == pytest.approx(0.5, rel=1e-12)
    report = net.link_report()
    assert list(report) == ["L", "idle"]
    assert report["L"] == {"capacity_Bps": 10 * GB, "bytes": pytest.approx(10 * GB, rel=1e-12),
                           "utilization_mean": pytest.approx(0.5, rel=1e-12)}
    assert report["idle"]["bytes"] == 0.0 and report["idle"]["utilization_mean"] == 0.0


def random_plan(seed, n_flows=60):
    rng = random.Random(seed)
    links = [f"l{k}" for k in range(5)]
    capacity = {link: rng.uniform(1, 20) * GB for link in links}
    plan = []
    for _ in range(n_flows):
        path = [rng.choice(links) for _ in range(rng.randint(1, 4))]
        plan.append((rng.uniform(0, 5), path, rng.uniform(0, 10) * GB, rng.choice([0.0, 1e-5])))
    return capacity, plan


def test_conservation_bytes_per_link():
    capacity, plan = random_plan(7)
    done, net = run_transfers(capacity, plan)
    assert all(t is not None for t in done)
    assert net.active_flows == 0
    for link in capacity:
        expected = sum(nbytes * links.count(link) for _, links, nbytes, _ in plan)
        assert net.bytes_moved(link) == pytest.approx(expected, rel=1e-9)


def test_no_flow_beats_its_standalone_time():
    capacity, plan = random_plan(11)
    done, _ = run_transfers(capacity, plan)
    for finish, (start, links, nbytes, latency) in zip(done, plan):
        alone = min(capacity[link] / links.count(link) for link in links)
        assert finish >= (start + nbytes / alone + latency) * (1 - 1e-12)


def test_same_inputs_same_completion_times():
    capacity, plan = random_plan(3, n_flows=200)
    first, _ = run_transfers(capacity, plan)
    second, _ = run_transfers(capacity, plan)
    assert first == second


def test_many_simultaneous_starts_share_equally():
    # 100 flows of 1 GB on one 10 GB/s link, all started at once: each at 0.1 GB/s, done at 10 s.
    done, _ = run_transfers({"L": 10 * GB}, [(0.0, ["L"], GB, 0.0)] * 100)
    assert all(t == pytest.approx(10.0, rel=1e-12) for t in done)


def test_late_start_far_into_the_run_terminates():
    # At t = 1e6 s a 1 ms transfer: rounding of time at that magnitude must not stall the flow.
    done, _ = run_transfers({"L": GB}, [(1e6, ["L"], 1e6, 0.0), (1e6, ["L"], 3e6, 0.0)])
    # Both at 0.5 GB/s until the first 1 MB is done (2 ms), then 2 MB alone at 1 GB/s (2 ms).
    assert done[0] == pytest.approx(1e6 + 2e-3, rel=1e-15)
    assert done[1] == pytest.approx(1e6 + 4e-3, rel=1e-15)


# ---------------------------------------------------------------- cancelling a flow


def test_a_cancelled_flow_keeps_what_it_delivered_and_frees_its_share_at_once():
    env = simpy.Environment()
    net = FlowNetwork(env, {"L": 10 * GB})
    first = net.transfer(["L"], 10 * GB)
    second = net.transfer(["L"], 10 * GB)
    seen = {}

    def stop():
        yield env.timeout(1.0)
        seen["delivered"] = net.cancel(first)  # 1 s at 5 GB/s each
        seen["again"] = net.cancel(first)
        seen["active"] = net.active_flows

    env.process(stop())
    run_bounded(env, max_steps=2 * EVENTS_PER_FLOW)
    assert seen == {"delivered": pytest.approx(5 * GB, rel=1e-12), "again": None, "active": 1}
    # the second flow has 5 GB left at 1 s and then runs alone at 10 GB/s: done at 1.5 s
    assert second.value == pytest.approx(1.5, rel=1e-12)
    assert not first.triggered
    # the link carried what was delivered and nothing of the cancelled flow's remaining 5 GB
    assert net.bytes_moved("L") == pytest.approx(15 * GB, rel=1e-12)
    assert net.active_flows == 0


def test_cancelling_at_the_start_moves_nothing_and_a_delivered_flow_is_not_cancelled():
    env = simpy.Environment()
    net = FlowNetwork(env, {"L": 10 * GB})
    gone = net.transfer(["L"], 10 * GB)
    assert net.cancel(gone) == 0.0  # same instant: not a byte moved, no solve with it in
    kept = net.transfer(["L"], 10 * GB, latency_s=0.5)
    late = {}

    def in_latency():
        yield env.timeout(1.25)  # its bytes landed at 1 s; it pays latency until 1.5 s
        late["cancel"] = net.cancel(kept)

    env.process(in_latency())
    env.run()
    assert late == {"cancel": None}
    assert kept.value == pytest.approx(1.5, rel=1e-12)  # alone on the link from the start
    assert not gone.triggered
    assert net.bytes_moved("L") == pytest.approx(10 * GB, rel=1e-12)


def test_conservation_with_cancelled_flows():
    # random flows, a third cancelled at random times: each link carries exactly the delivered
    # bytes of every flow times its crossings, and the survivors all finish
    capacity, plan = random_plan(5, n_flows=45)
    rng = random.Random(9)
    env = simpy.Environment()
    net = FlowNetwork(env, capacity)
    delivered = [None] * len(plan)
    done = [None] * len(plan)

    def one(i, start_s, links, nbytes, latency_s, cancel_after_s):
        yield env.timeout(start_s)
        event = net.transfer(links, nbytes, latency_s)
        if cancel_after_s is None:
            done[i] = yield event
            delivered[i] = nbytes
            return
        yield env.timeout(cancel_after_s)
        moved = net.cancel(event)
        delivered[i] = nbytes if moved is None else moved
        if moved is None and nbytes > 0:
            done[i] = yield event  # it had landed: it still completes

    for i, (start_s, links, nbytes, latency_s) in enumerate(plan):
        cancel_after = rng.uniform(0.0, 3.0) if i % 3 == 0 else None
        env.process(one(i, start_s, links, nbytes, latency_s, cancel_after))
    run_bounded(env, max_steps=EVENTS_PER_FLOW * len(plan) + 2 * len(plan))
    assert net.active_flows == 0
    assert any(d is not None and 0 < d < plan[i][2] for i, d in enumerate(delivered))  # some cut part-way
    for i in range(len(plan)):
        assert delivered[i] is not None
        if i % 3:
            assert done[i] is not None
    for link in capacity:
        expected = sum(delivered[i] * links.count(link) for i, (_, links, _, _) in enumerate(plan))
        assert net.bytes_moved(link) == pytest.approx(expected, rel=1e-9)
