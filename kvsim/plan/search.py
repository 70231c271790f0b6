"""The most load a configuration sustains within its SLO: bracketing, then k-section on the rate.

A *probe* runs the configuration at one arrival rate and says whether it met the SLO (and why
not). Meeting the SLO is assumed to get no easier as the rate rises: with common random numbers
(the same seed at every rate, so a higher rate replays the same requests closer together) it is
exactly monotone for a FIFO server -- Lindley's recursion makes every wait grow with the rate --
and close to it for a batching engine.

The search first brackets the boundary, growing (or shrinking) the rate by a factor until one
probe meets the SLO and another fails, then narrows the bracket. Each narrowing round probes
``parallel`` rates evenly spaced inside it (bisection when ``parallel`` is 1), so a pool of
workers narrows it ``parallel + 1`` times per round instead of twice. It stops when the bracket
is within ``rel_tol`` of its lower end.

The answer is the highest rate that met the SLO (``max_rate_per_s``) and the lowest that failed
(``fail_rate_per_s``): the true boundary lies between them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["ProbeOutcome", "RateSearch", "find_max_rate"]


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe found.

    Attributes
    ----------
    rate_per_s : float
        Arrival rate probed, requests/s.
    meets : bool
        The configuration met the SLO at this rate (and the point was steady enough to tell).
    reason : str
        Why not, in words (empty when it met the SLO).
    detail : dict
        Anything the caller wants kept with the probe (e.g. the latencies it measured).
    """

    rate_per_s: float
    meets: bool
    reason: str = ""
    detail: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class RateSearch:
    """The result of :func:`find_max_rate`.

    Attributes
    ----------
    max_rate_per_s : float or None
        Highest rate probed that met the SLO, requests/s; None if none did (not even the floor).
    fail_rate_per_s : float or None
        Lowest rate probed that failed, requests/s; None if every probe met the SLO (the search
        reached its ceiling).
    probes : tuple of ProbeOutcome
        Every probe, in the order run.
    converged : bool
        The bracket ``[max_rate_per_s, fail_rate_per_s]`` is within ``rel_tol`` of its lower end.
    note : str
        How the search ended, in words.
    """

    max_rate_per_s: float | None
    fail_rate_per_s: float | None
    probes: tuple[ProbeOutcome, ...]
    converged: bool
    note: str


def find_max_rate(
    probe: Callable[[Sequence[float]], Sequence[ProbeOutcome]],
    start_per_s: float,
    *,
    rel_tol: float = 0.05,
    growth: float = 2.0,
    floor_per_s: float | None = None,
    ceiling_per_s: float | None = None,
    parallel: int | Callable[[], int] = 1,
    max_rounds: int = 40,
) -> RateSearch:
    """Find the highest arrival rate at which ``probe`` still meets the SLO.

    Parameters
    ----------
    probe : callable
        ``probe(rates)`` runs one probe per rate (requests/s; they may run in parallel) and
        returns their outcomes in the same order.
    start_per_s : float
        First rate to probe, requests/s (a guess of the answer: e.g. the configuration's
        roofline capacity).
    rel_tol : float
        Stop when ``fail - max <= rel_tol * max``.
    growth : float
        Factor by which the bracketing phase raises (or lowers) the rate, > 1.
    floor_per_s, ceiling_per_s : float, optional
        Rates below / above which the search does not go, requests/s (default: ``start / 1024``
        and ``start * 1024``).
    parallel : int or callable
        Rates probed per round, >= 1: the bracketing phase cuts one ``growth`` step into that
        many geometric steps (so no probe lands far past the boundary, where an overloaded run
        costs most), the narrowing phase probes that many evenly spaced rates inside the bracket.
        A callable is asked before each round (e.g. the workers free at that moment).
    max_rounds : int
        Rounds of probes after which the search stops, converged or not.

    Returns
    -------
    RateSearch

    Raises
    ------
    ValueError
        On a non-positive rate or tolerance, ``growth <= 1``, ``parallel < 1``, or a probe that
        returns a different number of outcomes than rates.
    """
    if not (start_per_s > 0 and math.isfinite(start_per_s)):
        raise ValueError(f"start_per_s must be positive and finite, got {start_per_s!r}")
    if not rel_tol > 0:
        raise ValueError(f"rel_tol must be > 0, got {rel_tol!r}")
    if not growth > 1:
        raise ValueError(f"growth must be > 1, got {growth!r}")
    width = parallel if callable(parallel) else (lambda: parallel)
    if width() < 1:
        raise ValueError(f"parallel must be >= 1, got {width()!r}")
    floor = start_per_s / 1024 if floor_per_s is None else floor_per_s
    ceiling = start_per_s * 1024 if ceiling_per_s is None else ceiling_per_s
    if not 0 < floor <= start_per_s <= ceiling:
        raise ValueError(f"need 0 < floor ({floor}) <= start ({start_per_s}) <= ceiling ({ceiling}) requests/s")
    probes: list[ProbeOutcome] = []
    rounds = 0

    def run(rates: list[float]) -> list[ProbeOutcome]:
        nonlocal rounds
        rounds += 1
        outcomes = list(probe(rates))
        if len(outcomes) != len(rates):
            raise ValueError(f"probe returned {len(outcomes)} outcomes for {len(rates)} rates")
        probes.extend(outcomes)
        return outcomes

    def result(lo: float | None, hi: float | None, note: str) -> RateSearch:
        converged = lo is not None and hi is not None and hi - lo <= rel_tol * lo
        return RateSearch(lo, hi, tuple(probes), converged, note)

    lo: float | None = None
    hi: float | None = None
    first = run([start_per_s])[0]
    if first.meets:
        lo = start_per_s
        while hi is None:  # grow until a probe fails
            if lo >= ceiling or rounds >= max_rounds:
                return result(lo, None, f"met the SLO up to the ceiling of {lo:g} requests/s")
            count = max(1, width())  # one growth step, cut geometrically: no far-overloaded probe
            rates = [min(ceiling, lo * growth ** (k / count)) for k in range(1, count + 1)]
            rates = sorted(set(rates))
            for outcome in run(rates):
                if outcome.meets and hi is None:
                    lo = outcome.rate_per_s
                elif not outcome.meets:
                    hi = outcome.rate_per_s
                    break
    else:
        hi = start_per_s
        while lo is None:  # shrink until a probe meets it
            if hi <= floor or rounds >= max_rounds:
                because = f" ({first.reason})" if first.reason else ""
                return result(None, hi, f"failed the SLO down to the floor of {hi:g} requests/s{because}")
            count = max(1, width())
            rates = sorted({max(floor, hi / growth ** (k / count)) for k in range(1, count + 1)}, reverse=True)
            for outcome in run(rates):
                if not outcome.meets and lo is None:
                    hi = outcome.rate_per_s
                elif outcome.meets:
                    lo = outcome.rate_per_s
                    break
    while hi - lo > rel_tol * lo:
        if rounds >= max_rounds:
            return result(lo, hi, f"stopped after {rounds} rounds of probes")
        count = max(1, width())
        step = (hi - lo) / (count + 1)
        outcomes = run([lo + step * k for k in range(1, count + 1)])
        # the highest rate that met it below the lowest that failed (a non-monotone probe, e.g.
        # from sampling noise, cannot widen the bracket)
        failed = [o.rate_per_s for o in outcomes if not o.meets]
        new_hi = min(failed) if failed else hi
        met = [o.rate_per_s for o in outcomes if o.meets and o.rate_per_s < new_hi]
        lo, hi = (max(met) if met else lo), new_hi
    return result(lo, hi, f"converged to within {rel_tol:.0%} in {rounds} rounds of probes")
