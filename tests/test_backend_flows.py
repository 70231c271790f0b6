"""The flow network of both backends equals the dict-based one it replaced, to the bit (issue 23).

:mod:`kvsim.network.flows` is a kernel of the compiled backend: links interned to array slots,
the progressive filling over arrays (C arrays compiled, lists in the pure-Python reference). The
oracle is the module as it was before (``flows_reference.py``, dict-based, unchanged): on random
flow sets the rates must be the same floats, and on random sequences of transfers and
cancellations the links' bytes and utilisations, the transfers' completion times and order, the
bytes a cancel reports and the number of SimPy events must be the same, in every implementation
(the events less one per transfer completed after a latency: the network schedules its event
that far ahead itself, where the oracle's timeout succeeded it).
Ties (equal capacities, levels within the filling's tolerance), repeated links, fractional
resource weights and per-flow caps are drawn on purpose: they are where an order matters.
"""

from __future__ import annotations

import math
import os
import random
import sys
from pathlib import Path

import pytest
import simpy
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvsim import backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
import flows_reference  # noqa: E402

PURE_INSTALL = bool(os.environ.get("KVSIM_NO_COMPILE"))
IMPLEMENTATIONS = [("python", backend.kernels("python").flows)]
if not PURE_INSTALL:
    IMPLEMENTATIONS.append(("compiled", backend.kernels("compiled").flows))


def _bits(values) -> list[str]:
    """Floats as their exact bits (``==`` would let -0.0 pass for 0.0)."""
    return [v if isinstance(v, str) else float(v).hex() for v in values]


def test_both_flow_modules_are_there_and_differ():
    """The compiled network is a C extension type, not the reference class under another name."""
    assert IMPLEMENTATIONS[0][1] is sys.modules["kvsim.network.flows"]
    if not PURE_INSTALL:
        compiled = IMPLEMENTATIONS[1][1]
        assert compiled.__file__.endswith(".so")
        assert compiled.FlowNetwork is not IMPLEMENTATIONS[0][1].FlowNetwork


# ---------------------------------------------------------------------------------------------
# the solver alone

# capacities that tie exactly, and ones a hair apart (inside and outside the 1e-12 tolerance)
CAPACITIES = [1.0, 2.0, 3.0, 1e9, 1e9 * (1 + 4e-13), 1e9 * (1 + 3e-12), 2.5e9, 7.25]
LINKS = [f"l{k}" for k in range(6)]
RESOURCES = {"iops": 1e6, "cpu": 4.0}

flow_sets = st.lists(st.lists(st.sampled_from(LINKS), max_size=5), max_size=9)
capacities = st.lists(st.one_of(st.sampled_from(CAPACITIES), st.floats(0.5, 1e10)), min_size=6, max_size=6)
resource_weights = st.one_of(st.none(), st.sampled_from([1 / 4096, 1 / 65536]), st.floats(1e-7, 3.0))


@settings(max_examples=300, deadline=None)
@given(paths=flow_sets, capacities=capacities, weights=st.lists(resource_weights, min_size=9, max_size=9),
       caps=st.one_of(st.none(), st.lists(st.sampled_from([math.inf, math.inf, 0.5, 1.0, 5e8, 1e9]), min_size=9,
                                          max_size=9)))
@example(paths=[["l0"], ["l1"]], capacities=[1e9, 1e9 * (1 + 4e-13)] + [1.0] * 4, weights=[None] * 9, caps=None)
@example(paths=[["l0"], ["l0"], []], capacities=[7.6] + [1.0] * 5, weights=[0.99, 1.86, 1.85] + [None] * 6,
         caps=None)
def test_the_filling_gives_the_oracles_rates_to_the_bit(paths, capacities, weights, caps):
    capacity = {**dict(zip(LINKS, capacities)), **RESOURCES}
    flows = []
    for path, weight in zip(paths, weights):
        flow = flows_reference._link_weights(path)
        if weight is not None:  # resources per byte (the IOPS of a medium, say), or more of a link
            for resource, share in (("iops", 1.0), ("cpu", 0.37), ("l0", 0.5)):
                flow[resource] = flow.get(resource, 0) + weight * share
        flows.append(flow)
    cap_list = None if caps is None else caps[:len(flows)]
    want = _bits(flows_reference._solve(flows, capacity, cap_list))
    for name, module in IMPLEMENTATIONS:
        assert _bits(module._solve(flows, capacity, cap_list)) == want, name


@settings(max_examples=100, deadline=None)
@given(weights=st.lists(st.floats(0.1, 3.0), min_size=3, max_size=3), shared=st.floats(10.0, 100.0),
       capacity=st.floats(1.0, 9.0), order=st.permutations([0, 1, 2]))
@example(weights=[1.9064, 2.2512, 2.4061], shared=94.82, capacity=7.62, order=[0, 1, 2])
def test_links_saturating_together_freeze_their_flows_in_the_oracles_order(weights, shared, capacity, order):
    """Two links fill at one level: the order their flows freeze in decides what the third flow
    gets on the link all three share (spare -= weight x level, in that order)."""
    flows = [[{"a": 1, "x": weights[0]}, {"b": 1, "x": weights[1]}, {"x": weights[2]}][k] for k in order]
    capacities = {"a": capacity, "b": capacity, "x": shared}
    want = _bits(flows_reference._solve(flows, capacities))
    for name, module in IMPLEMENTATIONS:
        assert _bits(module._solve(flows, capacities)) == want, name


@settings(max_examples=200, deadline=None)
@given(paths=st.lists(st.lists(st.sampled_from(LINKS + ["free", "none", "unknown"]), max_size=5), max_size=8),
       capacities=st.lists(st.sampled_from(CAPACITIES + [math.inf, 0.0, -0.0]), min_size=6, max_size=6),
       bad=st.sampled_from([None, -1.0, math.nan]))
def test_max_min_fair_rates_gives_the_oracles_rates_and_errors(paths, capacities, bad):
    capacity = {**dict(zip(LINKS, capacities)), "free": math.inf, "none": 0.0}
    if bad is not None:
        capacity["l5"] = bad
    outcomes = []
    for module in [flows_reference] + [m for _, m in IMPLEMENTATIONS]:
        try:
            outcomes.append(_bits(module.max_min_fair_rates(paths, capacity)))
        except (KeyError, ValueError) as error:
            outcomes.append((type(error), str(error)))
    assert all(outcome == outcomes[0] for outcome in outcomes), outcomes


# ---------------------------------------------------------------------------------------------
# the network over time


def _script(seed: int) -> dict:
    """A random sequence of transfers, cancellations and probes over a few links and resources."""
    rng = random.Random(seed)
    links = {f"e{k}": rng.choice([1e9, 1e9 * (1 + 4e-13), 2e9, 3.3e9, 12.5e9]) for k in range(rng.randint(1, 6))}
    capacity = {**links, "iops": 1e6, "cpu": 2.0}
    start = rng.choice([0.0, 0.0, 0.003, 0.01])
    window = (start, start + rng.choice([0.004, 0.02, math.inf]))
    times = [0.0, 0.001, 0.002, 0.0025, 0.004]  # transfers often start together: one solve
    ops = []
    for _ in range(rng.randint(1, 14)):
        path = [rng.choice(list(links)) for _ in range(rng.randint(0, 4))]
        resources = rng.choice([None, None, {"iops": 1 / 4096}, {"iops": 1 / 65536, "cpu": 5e-10}])
        ops.append(("transfer", rng.choice(times) + rng.choice([0.0, 0.0, rng.random() * 0.003]), path,
                    rng.choice([0.0, 1e3, 4e6, 4e6, 3.3e7]) * rng.choice([1.0, 1.0, rng.random()]),
                    rng.choice([0.0, 0.0, 2e-5]), resources, rng.choice([math.inf, math.inf, 5e8, 1e9])))
    for _ in range(rng.randint(0, 4)):
        ops.append(("cancel", rng.random() * 0.01, rng.randrange(len(ops))))
    for _ in range(rng.randint(1, 5)):
        ops.append(("probe", rng.choice(times + [rng.random() * 0.02])))
    return {"capacity": capacity, "window": window, "ops": ops}


def _play(module, script: dict) -> list:
    """What an implementation's network shows when the script is played on it."""
    env = simpy.Environment()
    net = module.FlowNetwork(env, script["capacity"], *script["window"])
    seen: list = []
    started: dict[int, simpy.Event] = {}

    def op(index: int, entry: tuple):
        yield env.timeout(entry[1])
        if entry[0] == "transfer":
            _, _, path, nbytes, latency, resources, cap = entry
            event = net.transfer(path, nbytes, latency, resources, cap)
            started[index] = event
            event.callbacks.append(lambda e: seen.append(("done", index, env.now, e.value)))
        elif entry[0] == "cancel":
            event = started.get(entry[2])
            seen.append(("cancel", entry[2], env.now, None if event is None else net.cancel(event)))
        else:
            seen.append(("probe", env.now, net.active_flows,
                         _bits(net.bytes_moved(link) for link in script["capacity"]),
                         _bits(net.utilization_mean(link) for link in script["capacity"])))

    for index, entry in enumerate(script["ops"]):
        env.process(op(index, entry))
    env.run()
    report = net.link_report()
    seen.append(("end", env.now, net.active_flows, next(env._eid),  # the events scheduled, all told
                 [(link, _bits(row.values())) for link, row in report.items()]))
    return seen


def _one_event_per_latency(script: dict, want: list) -> list:
    """The oracle's observations with its event count less one per transfer that completed after
    a latency: the network now schedules such a transfer's event itself, ``latency_s`` ahead,
    where the oracle made a timeout whose callback succeeded it (``FlowNetwork._complete``)."""
    ops = script["ops"]
    folded = sum(1 for entry in want if entry[0] == "done" and ops[entry[1]][4] > 0.0)
    end = want[-1]
    return want[:-1] + [end[:3] + (end[3] - folded,) + end[4:]]


@settings(max_examples=250, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_transfers_and_cancels_give_the_oracles_bytes_and_times(seed):
    script = _script(seed)
    want = _one_event_per_latency(script, _play(flows_reference, script))
    for name, module in IMPLEMENTATIONS:
        assert _play(module, script) == want, name


def _error(call) -> tuple:
    """The type and message of the error ``call()`` raises."""
    with pytest.raises((KeyError, ValueError)) as raised:
        call()
    return raised.type, str(raised.value)


@pytest.mark.parametrize("name, module", IMPLEMENTATIONS)
def test_the_network_refuses_what_the_oracle_refuses(name, module):
    env = simpy.Environment()
    for args in (({"a": 0.0},), ({"a": 1.0}, 2.0, 1.0), ({"a": math.inf},)):
        # B023: called within this iteration, never after it
        assert _error(lambda: module.FlowNetwork(env, *args)) == _error(lambda: flows_reference.FlowNetwork(env, *args))  # noqa: B023
    calls = [(["a", "zz"], 1.0, 0.0, None), (["a"], -1.0, 0.0, None), (["a"], 1.0, math.nan, None),
             (["zz"], 1.0, 0.0, {"a": -1.0}), (["a"], 1.0, 0.0, {"zz": 1.0}), (["a"], 1.0, 0.0, None, 0.0)]
    for args in calls:
        # B023: called within this iteration, never after it
        errors = [_error(lambda: m.FlowNetwork(env, {"a": 1.0}).transfer(*args)) for m in (module, flows_reference)]  # noqa: B023
        assert errors[0] == errors[1], args
    for m in (module, flows_reference):
        net = m.FlowNetwork(env, {"a": 1.0})
        # B023: called within this iteration, never after it
        assert _error(lambda: net.bytes_moved("zz")) == (KeyError, "\"unknown link 'zz': it has no capacity_Bps\"")  # noqa: B023
        assert _error(lambda: net.utilization_mean("zz"))[0] is KeyError  # noqa: B023


# ---------------------------------------------------------------------------------------------
# where networks are built

STORAGE_BENCH = """
name: t
duration: 0.05 s
warmup: 0.01 s
clients: {node: h20-8x, nodes: 1}
pool: {pool_node: nvme-storage-16x, nodes: 1}
block_size: 1 MiB
io_size: 16 KiB
concurrency: 3
"""


@pytest.mark.skipif(PURE_INSTALL, reason="KVSIM_NO_COMPILE: a pure-Python install")
def test_the_storage_bench_runs_the_auto_backends_network_with_the_same_rows(monkeypatch):
    """The storage bench has no engine setting: it uses the flow network ``auto`` resolves to
    (KVSIM_BACKEND included), and both give the same rows."""
    import kvsim.sim.storage_bench as bench_module
    from kvsim.scenario.storage_bench import parse_storage_bench

    rows, built = {}, []
    for name in ("python", "compiled"):
        monkeypatch.setenv("KVSIM_BACKEND", name)
        real = bench_module.Transfers

        def transfers(env, topology, network, storage, real=real):
            built.append(type(network))
            return real(env, topology, network, storage)

        monkeypatch.setattr(bench_module, "Transfers", transfers)
        rows[name] = bench_module.run_storage_bench(parse_storage_bench(STORAGE_BENCH))
        monkeypatch.setattr(bench_module, "Transfers", real)
        assert built[-1] is backend.kernels(name).flows.FlowNetwork
    assert rows["python"] == rows["compiled"] and rows["python"][0]["total_GiBps"] > 0
