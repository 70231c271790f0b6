"""Nodes failing and being repaired over a run: the failure process alone, without the engine.

Each node alternates between up and down, independently of the others (a repair crew per node,
no common cause): its up times are exponential with mean ``1 / rate`` (failures of independent
parts at constant rates, :meth:`~kvsim.scenario.failures_spec.FailureRates.unit_failure_rate_per_s`),
its repairs ``repair`` seconds, fixed or exponential with that mean. Node ``k``'s times are drawn
from its own named stream ``failures.<node>`` of the run's root seed, so one node's failures do
not depend on how many nodes the system has, nor on anything else the run draws. Every node
starts up.

The closed form this process is checked against (``tests/test_run_failures.py``): a node's
steady-state availability is ``A = (1 / rate) / (1 / rate + repair)`` whatever the two
distributions, and with independent nodes the number up at a random moment is binomial, so the
share of time at least ``k`` of ``n`` are up tends to ``P[B(n, A) >= k]``
(:func:`kvsim.plan.spares.prob_at_least`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import numpy as np
import simpy

from kvsim.rng import RandomStreams

__all__ = ["NodeFailureProcess", "up_fraction", "time_at_least_up"]


class NodeFailureProcess:
    """Up and down times of a system's nodes, as SimPy processes (see the module docstring).

    Parameters
    ----------
    env : simpy.Environment
    nodes : list of str
        The nodes' names (their streams are ``failures.<name>``).
    rates_per_s : list of float
        Each node's failure rate, per second (0: it never fails).
    repair_s : float
        Repair time (fixed) or its mean (exponential), seconds.
    distribution : {"fixed", "exponential"}
        How repair times are drawn.
    streams : RandomStreams
        The run's random streams.
    on_fail, on_repair : callable, optional
        ``on_fail(k)`` when node ``k`` fails, ``on_repair(k)`` when it is back (after its state
        and intervals are updated).

    Attributes
    ----------
    up : list of bool
        Each node up now.
    down_intervals : list of list of [float, float]
        Each node's down times so far, ``[failed_s, back_s]`` (``back_s`` is infinite while it
        is down).
    """

    def __init__(self, env: simpy.Environment, nodes: list[str], rates_per_s: list[float], repair_s: float,
                 distribution: str, streams: RandomStreams,
                 on_fail: Callable[[int], None] | None = None, on_repair: Callable[[int], None] | None = None):
        if distribution not in ("fixed", "exponential"):
            raise ValueError(f"repair distribution must be 'fixed' or 'exponential', got {distribution!r}")
        self.env = env
        self.nodes = list(nodes)
        self.rates_per_s = list(rates_per_s)
        self.repair_s = float(repair_s)
        self.distribution = distribution
        self.on_fail = on_fail
        self.on_repair = on_repair
        self.up = [True] * len(self.nodes)
        self.down_intervals: list[list[list[float]]] = [[] for _ in self.nodes]
        for k, name in enumerate(self.nodes):
            if self.rates_per_s[k] > 0.0:
                env.process(self._node(k, streams.generator(f"failures.{name}")))

    def _node(self, k: int, rng: np.random.Generator) -> Generator[simpy.Event, object, None]:
        env = self.env
        mean_up_s = 1.0 / self.rates_per_s[k]
        while True:
            yield env.timeout(rng.exponential(mean_up_s))
            self.up[k] = False
            self.down_intervals[k].append([env.now, np.inf])
            if self.on_fail is not None:
                self.on_fail(k)
            down_s = self.repair_s if self.distribution == "fixed" else rng.exponential(self.repair_s)
            yield env.timeout(down_s)
            self.up[k] = True
            self.down_intervals[k][-1][1] = env.now
            if self.on_repair is not None:
                self.on_repair(k)

    @property
    def failures(self) -> int:
        """Node failures so far."""
        return sum(len(d) for d in self.down_intervals)

    def availability(self, start_s: float, end_s: float) -> list[float]:
        """Each node's share of ``[start_s, end_s]`` up."""
        return [up_fraction(d, start_s, end_s) for d in self.down_intervals]

    def time_at_least_up(self, needed: int, start_s: float, end_s: float) -> float:
        """Share of ``[start_s, end_s]`` during which at least ``needed`` nodes were up."""
        return time_at_least_up(self.down_intervals, len(self.nodes), needed, start_s, end_s)


def up_fraction(down: list[list[float]], start_s: float, end_s: float) -> float:
    """Share of ``[start_s, end_s]`` outside the intervals ``down`` (``[from_s, to_s]`` each,
    disjoint)."""
    span = end_s - start_s
    if span <= 0.0:
        return 1.0
    lost = sum(max(0.0, min(b, end_s) - max(a, start_s)) for a, b in down)
    return 1.0 - lost / span


def time_at_least_up(down: list[list[list[float]]], nodes: int, needed: int, start_s: float, end_s: float) -> float:
    """Share of ``[start_s, end_s]`` during which at least ``needed`` of ``nodes`` nodes were up,
    given each node's down intervals (a sweep over the failure and repair times)."""
    span = end_s - start_s
    if span <= 0.0:
        return 1.0
    times, steps = [], []
    for intervals in down:
        for a, b in intervals:
            a, b = max(a, start_s), min(b, end_s)
            if b > a:
                times += [a, b]
                steps += [-1, 1]
    if not times:
        return 1.0 if nodes >= needed else 0.0
    order = np.argsort(np.asarray(times), kind="stable")
    t = np.asarray(times)[order]
    up = nodes + np.cumsum(np.asarray(steps)[order])  # nodes up just after each change
    edges = np.concatenate(([start_s], t, [end_s]))
    counts = np.concatenate(([nodes], up))
    held = np.diff(edges)
    return float(held[counts >= needed].sum() / span)
