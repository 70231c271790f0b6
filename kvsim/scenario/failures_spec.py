"""How often the hardware fails and how long a repair takes: ``plan.failures`` (a plan buys the
spares that hold its SLO through failures) and ``systems.NAME.failures`` (a run takes nodes out
and brings them back, :mod:`kvsim.sim.failures`). Both speak the same rates (:class:`FailureRates`).

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

and a run lets a system's nodes fail and come back with the same rates::

    systems:
      a:
        node: l20-8x
        nodes: 4
        failures:
          mtbf: 300 h
          mtbf_cards: 1000
          repair: 8 h                   # a node's time down, per failure
          repair_distribution: exponential
          rebuild: 2 min                # weights loaded, engine warmed, after the node is back
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from kvsim.spec_types import FrozenSpec, PositiveSeconds, Seconds

__all__ = ["FailureRates", "FailureSpec", "RunFailureSpec"]


class FailureRates(FrozenSpec):
    """Failure and repair rates (all times in seconds), shared by a plan's spares and a run's
    failures.

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
    """

    mtbf: PositiveSeconds
    mtbf_cards: int = Field(default=1, ge=1)
    node_mtbf: PositiveSeconds | None = None
    repair: PositiveSeconds

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


class FailureSpec(FailureRates):
    """Failure and repair rates for sizing spares (``plan.failures``; all times in seconds).

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

    confidence: float = Field(default=0.999, gt=0.0, lt=1.0)


class RunFailureSpec(FailureRates):
    """Node failures in a run (``systems.NAME.failures``; all times in seconds).

    Each compute node of the system fails at the rate of its parts,
    :meth:`~FailureRates.unit_failure_rate_per_s` of its cards and itself (up times exponential:
    failures of independent parts at constant rates), and any failure takes the whole node down
    for a repair. Every instance with a card on the node goes down with it: the requests it holds
    are retried, its KV is lost; once all its nodes are back it is rebuilt (``rebuild``) and
    serves again, empty (:mod:`kvsim.sim.failures`).

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
        A node's time down per failure (detection, swap or reboot), seconds: fixed, or the mean
        of an exponential time (``repair_distribution``).
    repair_distribution : {"fixed", "exponential"}
        How repair times are drawn (default fixed: every repair takes ``repair``).
    rebuild : float
        From the node being back to its instances serving (weights loaded, engine warmed up),
        seconds (default 0: ``repair`` includes it, as ``plan.failures`` means it).
    """

    repair_distribution: Literal["fixed", "exponential"] = "fixed"
    rebuild: Seconds = 0.0
