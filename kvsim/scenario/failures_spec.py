"""``plan.failures``: how often the hardware fails and how long a repair takes, so that a plan
can buy the spares that hold its SLO through failures.

A planner at a thousand cards cannot assume every unit is up: the Atlas SuperPoD is quoted at a
mean time between failures of about 300 hours for 1,000 cards (issue 26, from Huawei's launch
material). The plan then sizes each candidate as it does without failures (the units that hold
the SLO at the target with everything up) and adds the fewest spare units that keep at least that
many up with the stated probability (:mod:`kvsim.plan.spares`)::

    plan:
      targets: [40/s]
      failures:
        mtbf: 300 h           # the mean time between failures quoted ...
        mtbf_cards: 1000      # ... for this many cards together (1: a card's own MTBF)
        node_mtbf: 50000 h    # optional: failures of a node's host parts (CPU, DRAM, NIC, PSU)
        repair: 8 h           # mean time from a failure to the unit serving again
        confidence: 0.999     # the share of time at least the needed units are up
"""

from __future__ import annotations

from pydantic import Field

from kvsim.spec_types import FrozenSpec, PositiveSeconds

__all__ = ["FailureSpec"]


class FailureSpec(FrozenSpec):
    """Failure and repair rates for sizing spares (all times in seconds).

    Attributes
    ----------
    mtbf : float
        Mean time between failures of ``mtbf_cards`` cards together, seconds (``300 h``).
    mtbf_cards : int
        How many cards ``mtbf`` is quoted for: a card fails at rate ``1 / (mtbf * mtbf_cards)``
        (failures of many independent cards add their rates). Default 1: ``mtbf`` is one card's.
    node_mtbf : float, optional
        Mean time between failures of one node's own parts besides its cards, seconds (None:
        only the cards fail).
    repair : float
        Mean time from a failure until the unit serves again (detection, swap or reboot, the
        instance rebuilt and its weights loaded), seconds.
    confidence : float
        The share of time (the steady-state probability) that at least the units the SLO needs
        are up; between 0 and 1 exclusive (default 0.999).
    """

    mtbf: PositiveSeconds
    mtbf_cards: int = Field(default=1, ge=1)
    node_mtbf: PositiveSeconds | None = None
    repair: PositiveSeconds
    confidence: float = Field(default=0.999, gt=0.0, lt=1.0)

    def card_failure_rate_per_s(self) -> float:
        """One card's failure rate, per second."""
        return 1.0 / (self.mtbf * self.mtbf_cards)

    def unit_failure_rate_per_s(self, cards: int, nodes: int) -> float:
        """Failure rate of a unit of ``cards`` cards on ``nodes`` nodes, per second: a failure of
        any of its parts takes the unit out of service (its instances span its cards)."""
        rate = cards * self.card_failure_rate_per_s()
        if self.node_mtbf is not None:
            rate += nodes / self.node_mtbf
        return rate
