"""A flow alone on its links, and flows solved per connected component of links (issue 23).

Session 13 proposed closed-form finish times for copies alone on their links, and a solve per
connected component of links instead of over every active flow. These tests hold what that
rests on, by hand and at random:

* a flow alone on its links runs at ``min`` over them of capacity / crossings (its own cap
  included) and finishes at ``start + bytes / rate + latency``, the same floats;
* a flow that gets company mid-way keeps the bytes it moved alone, and its rate is then re-solved;
* the progressive filling solved per connected component gives the global solve's rates to the
  bit, except where two components' fill levels are within the filling's tie tolerance
  (``_TIE_REL``) without being equal: the global solve freezes both at the lower one.

Both backends are run (the compiled one where built).
"""

from __future__ import annotations

import math
import os

import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvsim import backend

FLOWS = [backend.kernels("python").flows]
if not os.environ.get("KVSIM_NO_COMPILE"):
    FLOWS.append(backend.kernels("compiled").flows)
TIE_REL = 1e-12  # kvsim.network.filling._TIE_REL


def _start_at(env, net, start_s, links, nbytes, latency_s=0.0, resources=None, cap=math.inf, out=None, key=None):
    def go():
        yield env.timeout(start_s)
        out[key] = yield net.transfer(links, nbytes, latency_s, resources, cap)

    env.process(go())


@pytest.mark.parametrize("flows", FLOWS, ids=lambda m: "compiled" if m.__file__.endswith(".so") else "python")
@pytest.mark.parametrize("cap", [math.inf, 0.9e9])
def test_a_lone_flow_finishes_at_bytes_over_its_bottleneck_plus_latency(flows, cap):
    capacity = {"A": 10e9, "B": 4e9, "iops": 2e6}
    env = simpy.Environment()
    net = flows.FlowNetwork(env, capacity)
    done = {}
    # B is crossed twice (a host bounce) and every byte costs 1/4096 I/Os of a 2M IOPS ceiling
    links, weight, nbytes, start, latency = ["A", "B", "B"], 1 / 4096, 3.7e9, 0.25, 2e-5
    _start_at(env, net, start, links, nbytes, latency, {"iops": weight}, cap, done, "f")
    env.run()
    rate = min(10e9 / 1, 4e9 / 2, 2e6 / weight, cap)  # the bottleneck: B's 2 GB/s (or the cap)
    assert done["f"] == start + nbytes / rate + latency  # the same floats, not approximately
    assert net.bytes_moved("B") == pytest.approx(2 * nbytes, rel=1e-15)
    assert net.bytes_moved("iops") == pytest.approx(weight * nbytes, rel=1e-15)


@pytest.mark.parametrize("flows", FLOWS, ids=lambda m: "compiled" if m.__file__.endswith(".so") else "python")
def test_a_lone_flow_that_gets_company_keeps_its_bytes_and_is_re_solved(flows):
    # f runs alone on L (10 GB/s) from 0; g joins L at 0.1 s, also crossing M (3 GB/s): the
    # filling gives g M's 3 and f the 7 left of L. After f lands, g has L and M alone again.
    env = simpy.Environment()
    net = flows.FlowNetwork(env, {"L": 10e9, "M": 3e9})
    done, seen = {}, {}
    f_bytes, g_bytes, joins = 2e9, 1.5e9, 0.1
    _start_at(env, net, 0.0, ["L"], f_bytes, out=done, key="f")
    _start_at(env, net, joins, ["L", "M"], g_bytes, out=done, key="g")

    def look():
        yield env.timeout(joins)
        seen["L at join"] = net.bytes_moved("L")

    env.process(look())
    env.run()
    moved_alone = 10e9 * joins  # f's bytes up to g's start, at its lone rate
    assert seen["L at join"] == moved_alone
    f_end = joins + (f_bytes - moved_alone) / 7e9  # then at 10 - 3
    assert done["f"] == f_end
    g_end = f_end + (g_bytes - 3e9 * (f_end - joins)) / 3e9  # alone, still held to M's 3 GB/s
    assert done["g"] == pytest.approx(g_end, rel=1e-15)
    assert net.bytes_moved("L") == pytest.approx(f_bytes + g_bytes, rel=1e-15)


@pytest.mark.parametrize("flows", FLOWS, ids=lambda m: "compiled" if m.__file__.endswith(".so") else "python")
def test_a_change_elsewhere_moves_a_lone_flows_finish_by_ulps_at_most(flows):
    # Today's network re-bases every flow's bytes left at every solve, its links shared or not:
    # a flow on other links starting and ending mid-way moves a lone flow's finish time by
    # rounding only (this is why a per-component solve cannot keep records to the bit).
    env = simpy.Environment()
    net = flows.FlowNetwork(env, {"A": 3e9, "Z": 7e9})
    done = {}
    _start_at(env, net, 0.0, ["A"], 1e9, out=done, key="f")
    for k in range(5):
        _start_at(env, net, 0.013 * (k + 1), ["Z"], 1e7 * (k + 1), out=done, key=k)
    env.run()
    assert done["f"] == pytest.approx(1e9 / 3e9, rel=1e-14)


# ---------------------------------------------------------------------------------------------
# per component vs over every flow

LINKS = [f"l{k}" for k in range(8)]
TIED = [1.0, 3.0, 1e9, 1e9 * (1 + 4e-13), 2e9 * (1 + 7e-13), 2e9]  # exact ties and near-ties


def _components(paths: list[list[str]]) -> list[list[int]]:
    """Flows grouped by connected component of the links they cross (in flow order)."""
    parent = list(range(len(paths)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, path in enumerate(paths):
        for link in path:
            if link in owner:
                parent[root(i)] = root(owner[link])
            else:
                owner[link] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(paths)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


@settings(max_examples=300, deadline=None)
@given(paths=st.lists(st.lists(st.sampled_from(LINKS), min_size=1, max_size=4), max_size=10),
       capacities=st.lists(st.one_of(st.sampled_from(TIED), st.floats(0.5, 1e10)), min_size=8, max_size=8))
@example(paths=[["l0"], ["l1"]], capacities=[1e9, 1e9 * (1 + 4e-13)] + [1.0] * 6)
def test_solving_per_component_gives_the_global_rates_but_for_near_ties(paths, capacities):
    capacity = dict(zip(LINKS, capacities))
    for flows in FLOWS:
        every = flows.max_min_fair_rates(paths, capacity)
        apart = [math.nan] * len(paths)
        for group in _components(paths):
            for i, rate in zip(group, flows.max_min_fair_rates([paths[i] for i in group], capacity)):
                apart[i] = rate
        if every == apart:
            continue
        # only ties merged across components: a merged flow's rate moves by up to the tolerance,
        # and the flows frozen after it on its links share what it leaves (so by up to a few
        # tolerances of the component's largest capacity); and two components' rates apart are
        # within the tolerance without being equal
        groups = _components(paths)
        for group in groups:
            largest = max(capacity[link] for i in group for link in paths[i])
            for i in group:
                assert abs(every[i] - apart[i]) <= 64 * TIE_REL * largest, (every[i], apart[i])
        near = [(x, y) for g in groups for h in groups if g is not h for x in g for y in h
                if apart[x] != apart[y] and abs(apart[x] - apart[y]) <= TIE_REL * max(apart[x], apart[y])]
        assert near, (every, apart)


def test_a_near_tie_across_components_is_where_they_differ():
    capacity = {"l0": 1e9, "l1": 1e9 * (1 + 4e-13)}
    for flows in FLOWS:
        assert flows.max_min_fair_rates([["l0"], ["l1"]], capacity) == [1e9, 1e9]  # merged: one round
        assert flows.max_min_fair_rates([["l1"]], capacity) == [1e9 * (1 + 4e-13)]  # alone: its own
