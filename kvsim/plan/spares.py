"""Spare units that hold a plan's SLO through hardware failures (``plan.failures``).

Model (the closed form of k-out-of-n availability):

- Each unit of a candidate alternates between up and down. It fails at rate ``lambda``, the sum
  of its parts' rates (:meth:`~kvsim.scenario.failures_spec.FailureSpec.unit_failure_rate_per_s`:
  any card or node failure takes the whole unit out, since its instances span its cards), and is
  back after a repair of mean ``r``. Its steady-state availability is the alternating-renewal
  result ``A = (1 / lambda) / (1 / lambda + r)``, which depends on the means only, not on how up
  times and repair times are distributed (so a fixed repair time gives the same ``A`` as an
  exponential one; ``tests/test_spares.py`` checks both by simulation).
- Units fail and are repaired independently (a repair crew per unit: no queue for repairs, no
  common cause such as a shared power feed or switch), so the number of units up at a random
  moment among ``n`` is binomial ``B(n, A)``.
- A candidate that needs ``N`` units to hold the SLO at a target gets the fewest spares ``k`` with
  ``P[B(N + k, A) >= N] >= confidence``. Up to the SLO itself: with fewer than ``N`` units up the
  candidate is taken to miss its SLO, with ``N`` or more to meet it (load spread over the units up;
  a failed unit's in-flight requests and KV are lost and retried, which this steady-state count
  does not price).

Remote KV pool nodes and the network are outside the count (a pool shared by the units is sized on
its own axis; its own redundancy is the storage system's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import binom

from kvsim.scenario.failures_spec import FailureSpec

__all__ = ["UnitParts", "unit_availability", "prob_at_least", "spares_needed", "unit_parts", "add_spares",
           "simulate_time_enough_up"]

MAX_SPARES_FACTOR = 4
"""Spares are searched up to this many times the units needed (and at least 64): beyond it a
unit is down so often that no count of them is a plan (``spares_needed`` says so with None)."""


@dataclass(frozen=True)
class UnitParts:
    """What one unit of a candidate is built of: ``cards`` accelerators on ``nodes`` compute nodes."""

    cards: int
    nodes: int


def unit_availability(parts: UnitParts, failures: FailureSpec) -> float:
    """Steady-state share of time one unit is up (see the module docstring), between 0 and 1."""
    rate = failures.unit_failure_rate_per_s(parts.cards, parts.nodes)
    if rate <= 0.0:
        return 1.0
    mean_up_s = 1.0 / rate
    return mean_up_s / (mean_up_s + failures.repair)


def prob_at_least(units: int, needed: int, availability: float) -> float:
    """``P[B(units, availability) >= needed]``: the share of time at least ``needed`` of ``units``
    independent units are up."""
    if needed <= 0:
        return 1.0
    if needed > units:
        return 0.0
    return float(binom.sf(needed - 1, units, availability))


def spares_needed(needed: int, availability: float, confidence: float) -> int | None:
    """The fewest spare units ``k`` with ``P[B(needed + k, A) >= needed] >= confidence``, or None
    if no ``k`` up to :data:`MAX_SPARES_FACTOR` times ``needed`` (at least 64) reaches it."""
    limit = max(64, MAX_SPARES_FACTOR * needed)
    for spares in range(limit + 1):
        if prob_at_least(needed + spares, needed, availability) >= confidence:
            return spares
    return None


def unit_parts(sizing: Any) -> UnitParts:
    """Cards and compute nodes of one unit of a sized system (:class:`kvsim.sim.sizing.SystemSizing`)."""
    cards = nodes = 0
    for pool in sizing.pools:
        nodes += pool.spec.nodes
        cards += pool.spec.nodes * pool.node.accelerators_per_node  # every card in the boxes can fail
    return UnitParts(cards=cards, nodes=nodes)


def add_spares(candidates: list[dict[str, Any]], parts: dict[str, UnitParts], failures: FailureSpec) -> None:
    """Put the spares each candidate needs at each target into its rows of the plan's answer
    (:func:`kvsim.plan.answer.plan_answer`): ``spares`` (units, availability, the chance that
    enough are up with and without them) and the cost of the units with their spares."""
    for candidate in candidates:
        unit = parts[candidate["system"]]
        availability = unit_availability(unit, failures)
        cost = candidate.get("unit_cost") or {}
        candidate["failures"] = {"cards_per_unit": unit.cards, "nodes_per_unit": unit.nodes,
                                 "unit_failures_per_year": failures.unit_failure_rate_per_s(unit.cards, unit.nodes)
                                 * 8760.0 * 3600.0,
                                 "unit_availability": availability}
        for row in candidate["targets"]:
            needed = row["units"]
            if needed is None:
                row["spares"] = None
                continue
            spares = spares_needed(needed, availability, failures.confidence)
            total = None if spares is None else needed + spares
            row["spares"] = {
                "units": spares, "units_with_spares": total,
                "prob_enough_up_without": prob_at_least(needed, needed, availability),
                "prob_enough_up": None if total is None else prob_at_least(total, needed, availability),
                "capex_usd": None if total is None or cost.get("capex_usd") is None
                else float(cost["capex_usd"]) * total,
                "cost_per_hour_usd": None if total is None or cost.get("cost_per_hour_usd") is None
                else float(cost["cost_per_hour_usd"]) * total + (row.get("pool_cost_per_hour_usd") or 0.0),
            }


def simulate_time_enough_up(units: int, needed: int, failure_rate_per_s: float, repair_s: float, horizon_s: float,
                            rng: np.random.Generator, repair: str = "fixed") -> float:
    """Share of ``[0, horizon_s]`` during which at least ``needed`` of ``units`` units are up, by
    simulating each unit's failures and repairs: up times exponential with rate
    ``failure_rate_per_s``, repairs of ``repair_s`` (``"fixed"``) or exponential with that mean
    (``"exponential"``); every unit starts up. The Monte Carlo counterpart of
    :func:`prob_at_least` (which it approaches as ``horizon_s`` grows, whatever the repair
    distribution), with ``rng`` a named stream (e.g. ``RandomStreams(seed).generator("failures")``).
    """
    if repair not in ("fixed", "exponential"):
        raise ValueError(f"repair must be 'fixed' or 'exponential', got {repair!r}")
    edges: list[np.ndarray] = []
    changes: list[np.ndarray] = []
    cycle_s = 1.0 / failure_rate_per_s + repair_s
    draws = int(horizon_s / cycle_s * 1.5) + 16  # cycles drawn per unit, more than the horizon needs
    for _ in range(units):
        up = rng.exponential(1.0 / failure_rate_per_s, draws)
        down = np.full(draws, repair_s) if repair == "fixed" else rng.exponential(repair_s, draws)
        fail_at = np.cumsum(up + down) - down  # the end of each up time
        back_at = fail_at + down
        while back_at[-1] < horizon_s:  # (rare) not enough cycles drawn: draw more
            more_up = rng.exponential(1.0 / failure_rate_per_s, draws)
            more_down = np.full(draws, repair_s) if repair == "fixed" else rng.exponential(repair_s, draws)
            start = back_at[-1]
            more_fail = start + np.cumsum(more_up + more_down) - more_down
            fail_at = np.concatenate((fail_at, more_fail))
            back_at = np.concatenate((back_at, more_fail + more_down))
        edges += [fail_at, back_at]
        changes += [np.full(len(fail_at), -1), np.full(len(back_at), 1)]
    times = np.concatenate(edges)
    steps = np.concatenate(changes)
    order = np.argsort(times, kind="stable")
    times, steps = times[order], steps[order]
    inside = times < horizon_s
    times, steps = times[inside], steps[inside]
    up_count = units + np.cumsum(steps)  # units up from each change to the next
    starts = np.concatenate(([0.0], times))
    ends = np.concatenate((times, [horizon_s]))
    counts = np.concatenate(([units], up_count))
    return float(np.sum((ends - starts)[counts >= needed]) / horizon_s)
