"""Size limits: a schema-valid but absurd size (10^9 nodes, clients, documents or pool nodes, a
closed loop for 10^12 s, a 400 x 400 sweep) is refused at validation, naming the field and its
line, with what it would cost, instead of running out of memory or for ever.

Every limit is far above anything realistic: the largest shipped case is the speed ladder's
1,024 cards and about a million requests (``benchmarks/speed_cases.py``), and the shipped
scenarios stay below 1 % of each limit. The per-unit costs are measured on this code (tracemalloc
and wall time, one core; a rough guide, not a prediction): they make the message say what the
size means, e.g. "~160 TB before the first request".
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the schema imports this module
    from kvsim.scenario.schema import ScenarioSpec

__all__ = [
    "MAX_REQUESTS", "MAX_CARDS", "MAX_POOL_NODES", "MAX_CLIENTS", "MAX_CLIENT_SECONDS", "MAX_DOCUMENTS",
    "MAX_DURATION_S", "MAX_SWEEP_POINTS", "MAX_RUNS", "MAX_DECISIONS", "REQUESTS_PER_CPU_S", "expected_requests",
    "size_problems", "sweep_size_problems",
]

MAX_REQUESTS = 2e7
"""Most open-loop requests one system may simulate (a guard against a typo in rate or duration)."""
MAX_CARDS = 131_072
"""Most cards (accelerators) in one system, over all its pools (the speed ladder's top rung is 1,024)."""
MAX_POOL_NODES = 10_000
"""Most nodes of a remote KV pool (``kv_cache.remote.nodes``; the shipped scenarios use 4)."""
MAX_CLIENTS = 1_000_000
"""Most closed-loop clients (each is a simulated process with its own request stream)."""
MAX_CLIENT_SECONDS = 1e10
"""Most closed-loop clients x duration, s (10,000 clients for 11 days; a busy client sends about a
request a second)."""
MAX_DOCUMENTS = 10_000_000
"""Most documents of a ``shared_documents`` workload (their lengths and popularity are drawn up front)."""
MAX_DURATION_S = 1e7
"""Longest simulated duration, s (116 days; ``drain_limit`` may be ten times it)."""
MAX_SWEEP_POINTS = 10_000
"""Most points of a sweep grid (counted before it is expanded, so a huge grid is refused at once)."""
MAX_RUNS = 100_000
"""Most system runs of a scenario: points x replications x systems."""
MAX_DECISIONS = 1_000_000
"""Most P:D controller decisions in one run (duration / ``controller.interval``; the shipped
studies take a few hundred: 10 s intervals over tens of minutes)."""
S_PER_DECISION = 3e-4
"""One controller decision: read the signals of every instance, log a row (measured ~0.3 ms with
8 instances)."""

REQUESTS_PER_CPU_S = 6000.0
"""Rough simulated requests per CPU-second of one process (docs/speed.md: 5,102-7,240 for
colocated serving without a KV cache, about 1,300-1,700 with KV offload)."""
BYTES_PER_REQUEST = 300.0
"""A request's arrays and records (measured: 24 B drawn + 208 B of records, rounded up)."""
BYTES_PER_INSTANCE = 20e3
S_PER_INSTANCE = 1e-3
"""Building one instance (tp 1; measured 14-20 KB and 1.2-2.7 ms with tracemalloc on)."""
BYTES_PER_CLIENT = 10e3
S_PER_CLIENT = 1e-3
"""One closed-loop client: its process and request stream (measured 8-13 KB, 1-3 ms)."""
BYTES_PER_DOCUMENT = 24.0
"""One document's drawn length and popularity (measured peak 24 B)."""
BYTES_PER_POOL_NODE = 11e3
S_PER_POOL_NODE = 1e-3
"""One remote pool node's drives, NICs and links in the topology (measured 11 KB, ~1 ms)."""


def size_problems(spec: ScenarioSpec, catalogs: Any) -> list[tuple[tuple[Any, ...], str]]:
    """Sizes of one (sweep point's) spec beyond the limits, as ``(field path, message)``.

    ``catalogs`` (:class:`kvsim.scenario.load.Catalogs`) gives the cards of each node type;
    node types it does not know are reported elsewhere.
    """
    problems: list[tuple[tuple[Any, ...], str]] = []
    if spec.duration > MAX_DURATION_S:
        problems.append((("duration",), f"{spec.duration:.3g} s is {_span(spec.duration)} of simulated time"
                                        f"{_duration_work(spec)}; kvsim simulates at most {MAX_DURATION_S:.0e} s "
                                        f"({_span(MAX_DURATION_S)})"))
    if spec.drain_limit is not None and spec.drain_limit > 10 * MAX_DURATION_S:
        problems.append((("drain_limit",), f"{spec.drain_limit:.3g} s is {_span(spec.drain_limit)}; kvsim drains "
                                           f"for at most {10 * MAX_DURATION_S:.0e} s"))
    problems += _workload_problems(spec)
    for name, system in spec.systems.items():
        problems += _system_problems(spec, name, system, catalogs)
    return problems


def _duration_work(spec: ScenarioSpec) -> str:
    """``" (~4e+12 requests from 4 closed-loop clients: ...)"`` -- what a long duration would cost."""
    arrival = spec.workload.arrival
    if arrival.kind == "closed_loop":
        requests = arrival.clients * spec.duration / (arrival.think_time + 1.0)
        return (f" (up to ~{requests:.2g} requests from {arrival.clients:,} closed-loop client(s) at one per think "
                f"time + ~1 s: {_cost(requests)})")
    count, _ = expected_requests(spec)
    return f" (~{count:.2g} requests: {_cost(count)})" if count else ""


def expected_requests(spec: ScenarioSpec) -> tuple[float | None, tuple[str, ...]]:
    """Requests one system of ``spec`` is sent (open loop, before the run draws them) and the
    field that sets their number; None for a closed loop and a trace (read from its file)."""
    workload = spec.workload
    arrival = workload.arrival
    path: tuple[str, ...] = ("workload", "arrival", "rate")
    if arrival.kind == "stages":  # every stage is drawn in full, then cut at duration
        count = sum(stage.rate * stage.duration for stage in arrival.stages)
        path = ("workload", "arrival", "stages")
    elif arrival.kind == "phases":
        count, start = 0.0, 0.0
        for k, phase in enumerate(arrival.phases):
            length = phase.duration if k < len(arrival.phases) - 1 else max(phase.duration, spec.duration - start)
            length = max(0.0, min(length, spec.duration - start))
            count += (getattr(phase.arrival, "rate", None) or 0.0) * length
            start += phase.duration
        path = ("workload", "arrival", "phases")
    elif getattr(arrival, "rate", None) is not None:
        count = arrival.rate * spec.duration
    else:
        return None, path
    turns = getattr(workload.prefix, "turns", None)
    if workload.multi_turn and turns is not None:
        count *= turns.mean  # each arrival starts a session of this many turns
    return count, path


def _workload_problems(spec: ScenarioSpec) -> list[tuple[tuple[Any, ...], str]]:
    problems: list[tuple[tuple[Any, ...], str]] = []
    workload, arrival = spec.workload, spec.workload.arrival
    count, path = expected_requests(spec)
    if count is not None and count > MAX_REQUESTS:
        what = "requests (sessions x turns)" if workload.multi_turn else "requests"
        fix = {"stages": "shorten the stages or lower their rates", "phases": "shorten the phases or lower their rates"}
        problems.append((path, f"~{count:.3g} {what} per system in {spec.duration:g} s ({_cost(count)}); kvsim runs "
                               f"at most {MAX_REQUESTS:.0e} requests per system "
                               f"({fix.get(arrival.kind, 'shorten duration or lower the rate')})"))
    if arrival.kind == "closed_loop":
        clients = arrival.clients
        if clients > MAX_CLIENTS:
            problems.append((("workload", "arrival", "clients"), (
                f"{clients:,} clients, each a simulated process with its own request stream: "
                f"~{_bytes(clients * BYTES_PER_CLIENT)} and ~{_span(clients * S_PER_CLIENT)} to start them; "
                f"kvsim runs at most {MAX_CLIENTS:,}")))
        elif clients * spec.duration > MAX_CLIENT_SECONDS and spec.duration <= MAX_DURATION_S:
            cycle_s = arrival.think_time + 1.0
            requests = clients * spec.duration / cycle_s
            problems.append((("duration",), (
                f"{clients:,} closed-loop clients for {spec.duration:.3g} s send up to ~{requests:.2g} requests "
                f"(one per client every think time + ~1 s: {_cost(requests)}); kvsim runs at most "
                f"{MAX_CLIENT_SECONDS:.0e} client-seconds (clients x duration)")))
    documents = getattr(workload.prefix, "documents", None)
    if isinstance(documents, int) and documents > MAX_DOCUMENTS:
        problems.append((("workload", "prefix", "documents"), (
            f"{documents:,} documents, each drawn up front: ~{_bytes(documents * BYTES_PER_DOCUMENT)} before the "
            f"first request; kvsim holds at most {MAX_DOCUMENTS:,}")))
    return problems


def _system_problems(spec: ScenarioSpec, name: str, system: Any, catalogs: Any) -> list[tuple[tuple[Any, ...], str]]:
    problems: list[tuple[tuple[Any, ...], str]] = []
    path = ("systems", name)
    pools = system.pool_specs()
    cards = {pool_name: pool.nodes * catalogs.nodes[pool.node].accelerators_per_node
             for pool_name, pool in pools.items() if pool.node in catalogs.nodes}
    total = sum(cards.values())
    if total > MAX_CARDS:
        biggest = max(cards, key=cards.get)
        pool = pools[biggest]
        of = "" if len(cards) == 1 else f" (the system's pools: {total:,} cards)"
        problems.append((path + system.pool_path(biggest) + ("nodes",), (
            f"{pool.nodes:,} x {pool.node} is {cards[biggest]:,} cards{of}: up to {total:,} instances at "
            f"~{_bytes(BYTES_PER_INSTANCE)} and ~{S_PER_INSTANCE * 1e3:g} ms each, ~{_bytes(total * BYTES_PER_INSTANCE)} "
            f"and ~{_span(total * S_PER_INSTANCE)} before the first request; kvsim simulates at most {MAX_CARDS:,} "
            f"cards per system")))
    control = system.controller
    if control is not None and spec.duration / control.interval > MAX_DECISIONS:
        decisions = spec.duration / control.interval
        problems.append((path + ("controller", "interval"), (
            f"a decision every {control.interval:.3g} s for {spec.duration:g} s is {decisions:.3g} decisions "
            f"(~{_span(decisions * S_PER_DECISION)} of CPU); a run may take at most {MAX_DECISIONS:.0e}: a "
            f"controller that acts more often than its instances can drain and switch reads only noise")))
    remote = system.kv_cache.remote if system.kv_cache is not None else None
    if remote is not None and remote.nodes > MAX_POOL_NODES:
        problems.append((path + ("kv_cache", "remote", "nodes"), (
            f"{remote.nodes:,} pool nodes, each with its drives, NICs and links in the topology: "
            f"~{_bytes(remote.nodes * BYTES_PER_POOL_NODE)} and ~{_span(remote.nodes * S_PER_POOL_NODE)} to build; "
            f"kvsim simulates at most {MAX_POOL_NODES:,}")))
    return problems


def sweep_size_problems(spec: ScenarioSpec) -> list[tuple[tuple[Any, ...], str]]:
    """A sweep grid too big to expand, or too many runs, as ``(field path, message)`` -- counted
    from the value lists alone, before any point is built."""
    lengths = {key: len(values) for key, values in spec.sweep.items()}
    points = math.prod(lengths.values()) if lengths else 1
    runs = points * spec.replications * len(spec.systems)
    count, _ = expected_requests(spec)
    cost = f": ~{count * runs:.3g} requests, {_cost(count * runs)}" if count is not None else ""
    if points > MAX_SWEEP_POINTS:
        shape = " x ".join(f"{n:,}" for n in lengths.values())
        biggest = max(lengths, key=lengths.get)
        return [(("sweep", biggest), f"the grid is {shape} = {points:,} points ({runs:,} system runs{cost}); a sweep "
                                     f"may have at most {MAX_SWEEP_POINTS:,} points")]
    if runs > MAX_RUNS:
        where = ("replications",) if spec.replications > 1 else ("sweep",)
        return [(where, f"{points:,} point(s) x {spec.replications:,} replication(s) x {len(spec.systems)} system(s) "
                        f"= {runs:,} system runs{cost}; a scenario may have at most {MAX_RUNS:,} runs")]
    return []


def _cost(requests: float) -> str:
    """``~1.2 GB of records, ~3.4 CPU-hours`` for ``requests`` simulated."""
    return (f"~{_bytes(requests * BYTES_PER_REQUEST)} of records, ~{_span(requests / REQUESTS_PER_CPU_S)} of CPU "
            f"at ~{REQUESTS_PER_CPU_S:,.0f} requests per CPU-second")


def _bytes(value: float) -> str:
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def _span(seconds: float) -> str:
    """A duration in the largest unit that keeps it above 1 (``3.2 years``, ``45 min``)."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:,.3g} {unit}"
    return f"{seconds:.3g} s"
