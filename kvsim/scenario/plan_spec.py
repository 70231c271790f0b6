"""The ``plan:`` section of a scenario: what ``kvsim plan`` searches for.

Each system of the scenario is a *candidate*, written as one *unit* (e.g. one server, or one
server plus its share of a storage pool). ``kvsim plan`` finds, for each candidate, the most load
one unit sustains within the scenario's ``slo:``, then for each target load the fewest units that
serve it within the SLO (a unit count multiplies every node count of the system: its compute
pools and its remote KV pool alike -- except a pool shared by the units and sized on its own axis,
``shared_pools``), and names the cheapest candidate per target.

The load is the arrival rate of an open-loop workload (``targets``, requests/s) or the number of
clients of a closed loop (``target_clients``): a closed loop's clients each send a request, wait
for its answer and a think time, and send the next, so more clients is more load.
"""

from __future__ import annotations

from pydantic import Field

from kvsim.scenario.failures_spec import FailureSpec
from kvsim.scenario.sensitivity_spec import SensitivitySpec
from kvsim.scenario.shared_pool_spec import SharedPoolSpec
from kvsim.spec_types import FrozenSpec, PositiveInt, Rate

__all__ = ["PlanSpec", "UnitRange"]


class UnitRange(FrozenSpec):
    """How many units of a candidate a plan may use (inclusive)."""

    min: PositiveInt = 1
    max: PositiveInt = 64


class PlanSpec(FrozenSpec):
    """What ``kvsim plan`` searches for.

    Attributes
    ----------
    targets : list of rates
        Loads to serve within the SLO (e.g. ``[10/s, 20/s, 40/s]``), requests/s, for an open-loop
        workload (poisson or gamma arrivals).
    target_clients : list of int
        For a closed-loop workload instead: numbers of clients to serve within the SLO.
    candidates : list of str, optional
        Systems to consider (default: every system of the scenario).
    baseline : str, optional
        The candidate every other is compared against (default: the first).
    units : UnitRange
        Unit counts a candidate may use.
    rel_tol : float
        Relative width at which the search for a unit's capacity stops (default 5 %).
    seed_checks : int
        Other seeds each deciding unit count is run with, for the cheapest candidate and the
        runner-up at each target: the count and one fewer, under the same extra seeds for every
        candidate (common random numbers). The answer says how many seeds agree, and when the two
        cannot be told apart. 0: none (default 2).
    sensitivity : SensitivitySpec
        The figures marked as assumptions that the answer is tested against, and their ranges
        (:mod:`kvsim.scenario.sensitivity_spec`); ``off`` for none.
    shared_pools : dict, optional
        Candidate -> its remote KV pool sized on its own axis and shared by all its units
        (:mod:`kvsim.scenario.shared_pool_spec`): ``{nodes: [1, 2, 4], usd_per_tb_month: X}``.
    failures : FailureSpec, optional
        Failure and repair rates: each candidate then gets the spare units that keep enough up
        with the stated confidence, and the cheapest is chosen with its spares
        (:mod:`kvsim.scenario.failures_spec`, :mod:`kvsim.plan.spares`).
    """

    targets: list[Rate] | None = Field(default=None, min_length=1)
    target_clients: list[PositiveInt] | None = Field(default=None, min_length=1)
    candidates: list[str] | None = None
    baseline: str | None = None
    units: UnitRange = Field(default_factory=UnitRange)
    rel_tol: float = Field(default=0.05, gt=0, lt=1)
    seed_checks: int = Field(default=2, ge=0, le=16)
    sensitivity: SensitivitySpec = Field(default_factory=SensitivitySpec)
    shared_pools: dict[str, SharedPoolSpec] | None = None
    failures: FailureSpec | None = None

    def problems(self, systems: list[str]) -> list[tuple[tuple[str, ...], str]]:
        """Checks against the scenario's systems, as ``(field path, message)``."""
        found = []
        if (self.targets is None) == (self.target_clients is None):
            found.append((("plan", "targets"), "give the loads to serve: targets (arrival rates, e.g. [10/s, 20/s]) "
                                               "for an open loop, or target_clients (e.g. [64, 128]) for a closed "
                                               "loop" if self.targets is None else
                                               "give targets or target_clients, not both"))
        for name in self.candidates or ():
            if name not in systems:
                found.append((("plan", "candidates"), f"{name!r} is not one of the systems: {', '.join(systems)}"))
        if self.candidates is not None and not self.candidates:
            found.append((("plan", "candidates"), "is empty: name at least one system, or leave it out for all"))
        chosen = self.candidates or systems
        if self.baseline is not None and self.baseline not in chosen:
            found.append((("plan", "baseline"), f"{self.baseline!r} is not one of the candidates: {', '.join(chosen)}"))
        if self.units.min > self.units.max:
            found.append((("plan", "units"), f"min ({self.units.min}) exceeds max ({self.units.max})"))
        return found

    @property
    def loads(self) -> list[float]:
        """The target loads, ascending: requests/s, or clients (``int``)."""
        if self.target_clients is not None:
            return sorted(self.target_clients)
        return sorted(float(x) for x in self.targets or ())

    @property
    def by_clients(self) -> bool:
        """The load is a closed loop's number of clients (``target_clients``)."""
        return self.target_clients is not None

    def chosen(self, systems: list[str]) -> list[str]:
        return list(self.candidates or systems)
