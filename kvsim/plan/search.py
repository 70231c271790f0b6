"""The most load a configuration sustains within its SLO: bracketing, then k-section on the load.

The load is an open loop's arrival rate (requests/s) or a closed loop's number of clients (an
integer). A *probe* runs the configuration at one load and says whether it met the SLO (and why
not). Meeting the SLO is assumed to get no easier as the load rises: with common random numbers
(the same seed at every rate, so a higher rate replays the same requests closer together) it is
exactly monotone for a FIFO server -- Lindley's recursion makes every wait grow with the rate --
and close to it for a batching engine; more clients add requests to the same loop.

The search first brackets the boundary, growing (or shrinking) the load by a factor until one
probe meets the SLO and another fails, then narrows the bracket. Each narrowing round probes
``parallel`` loads evenly spaced inside it (bisection when ``parallel`` is 1), so a pool of
workers narrows it ``parallel + 1`` times per round instead of twice. It stops when the bracket
is within ``rel_tol`` of its lower end (or, for an integer load, one apart).

The answer is the highest load that met the SLO (``max_load``) and the lowest that failed
(``fail_load``): the true boundary lies between them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["ProbeOutcome", "LoadSearch", "find_max_load"]


@dataclass(frozen=True)
class ProbeOutcome:
    """What one probe found.

    Attributes
    ----------
    load : float
        Load probed: requests/s, or clients (a whole number) for a closed loop.
    meets : bool
        The configuration met the SLO at this load (and the point was steady enough to tell).
    reason : str
        Why not, in words (empty when it met the SLO).
    detail : dict
        Anything the caller wants kept with the probe (e.g. the latencies it measured).
    """

    load: float
    meets: bool
    reason: str = ""
    detail: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class LoadSearch:
    """The result of :func:`find_max_load`.

    Attributes
    ----------
    max_load : float or None
        Highest load probed that met the SLO (requests/s, or clients); None if none did (not even
        the floor).
    fail_load : float or None
        Lowest load probed that failed; None if every probe met the SLO (the search reached its
        ceiling).
    probes : tuple of ProbeOutcome
        Every probe, in the order run.
    converged : bool
        The bracket ``[max_load, fail_load]`` is within ``rel_tol`` of its lower end (or one
        apart, for an integer load).
    note : str
        How the search ended, in words.
    """

    max_load: float | None
    fail_load: float | None
    probes: tuple[ProbeOutcome, ...]
    converged: bool
    note: str


def find_max_load(
    probe: Callable[[Sequence[float]], Sequence[ProbeOutcome]],
    start: float,
    *,
    rel_tol: float = 0.05,
    growth: float = 2.0,
    floor: float | None = None,
    ceiling: float | None = None,
    parallel: int | Callable[[], int] = 1,
    max_rounds: int = 40,
    integer: bool = False,
    unit: str = "requests/s",
) -> LoadSearch:
    """Find the highest load at which ``probe`` still meets the SLO.

    Parameters
    ----------
    probe : callable
        ``probe(loads)`` runs one probe per load (they may run in parallel) and returns their
        outcomes in the same order.
    start : float
        First load to probe (a guess of the answer: e.g. the configuration's roofline capacity).
    rel_tol : float
        Stop when ``fail - max <= rel_tol * max``.
    growth : float
        Factor by which the bracketing phase raises (or lowers) the load, > 1.
    floor, ceiling : float, optional
        Loads below / above which the search does not go (default: ``start / 1024`` and
        ``start * 1024``; at least 1 for an integer load).
    parallel : int or callable
        Loads probed per round, >= 1: the bracketing phase cuts one ``growth`` step into that
        many geometric steps (so no probe lands far past the boundary, where an overloaded run
        costs most), the narrowing phase probes that many evenly spaced loads inside the bracket.
        A callable is asked before each round (e.g. the workers free at that moment).
    max_rounds : int
        Rounds of probes after which the search stops, converged or not.
    integer : bool
        The load is a whole number (clients): every probed load is an integer, and the search
        also stops when the bracket is one apart.
    unit : str
        The load's unit, for the notes (``requests/s``, ``clients``).

    Returns
    -------
    LoadSearch

    Raises
    ------
    ValueError
        On a non-positive load or tolerance, ``growth <= 1``, ``parallel < 1``, a non-integer
        start of an integer search, or a probe that returns a different number of outcomes than
        loads.
    """
    if not (start > 0 and math.isfinite(start)):
        raise ValueError(f"start must be positive and finite, got {start!r}")
    if integer and start != int(start):
        raise ValueError(f"an integer search starts at a whole number, got {start!r}")
    if not rel_tol > 0:
        raise ValueError(f"rel_tol must be > 0, got {rel_tol!r}")
    if not growth > 1:
        raise ValueError(f"growth must be > 1, got {growth!r}")
    width = parallel if callable(parallel) else (lambda: parallel)
    if width() < 1:
        raise ValueError(f"parallel must be >= 1, got {width()!r}")
    floor = start / 1024 if floor is None else floor
    ceiling = start * 1024 if ceiling is None else ceiling
    if integer:
        floor, ceiling = max(1, math.ceil(floor)), math.floor(ceiling)
    if not 0 < floor <= start <= ceiling:
        raise ValueError(f"need 0 < floor ({floor}) <= start ({start}) <= ceiling ({ceiling}) {unit}")
    probes: list[ProbeOutcome] = []
    rounds = 0

    def run(loads: list[float]) -> list[ProbeOutcome]:
        nonlocal rounds
        rounds += 1
        outcomes = list(probe(loads))
        if len(outcomes) != len(loads):
            raise ValueError(f"probe returned {len(outcomes)} outcomes for {len(loads)} loads")
        probes.extend(outcomes)
        return outcomes

    def narrow_enough(lo: float, hi: float) -> bool:
        return hi - lo <= rel_tol * lo or (integer and hi - lo <= 1)

    def result(lo: float | None, hi: float | None, note: str) -> LoadSearch:
        converged = lo is not None and hi is not None and narrow_enough(lo, hi)
        return LoadSearch(lo, hi, tuple(probes), converged, note)

    def up(lo: float, count: int) -> list[float]:
        loads = [min(ceiling, lo * growth ** (k / count)) for k in range(1, count + 1)]
        if integer:
            loads = [min(ceiling, max(lo + 1, math.ceil(x))) for x in loads]
        return sorted(set(loads))

    def down(hi: float, count: int) -> list[float]:
        loads = [max(floor, hi / growth ** (k / count)) for k in range(1, count + 1)]
        if integer:
            loads = [max(floor, min(hi - 1, math.floor(x))) for x in loads]
        return sorted(set(loads), reverse=True)

    def inside(lo: float, hi: float, count: int) -> list[float]:
        step = (hi - lo) / (count + 1)
        loads = [lo + step * k for k in range(1, count + 1)]
        if integer:
            loads = sorted({x for x in (round(y) for y in loads) if lo < x < hi})
        return loads

    lo: float | None = None
    hi: float | None = None
    first = run([start])[0]
    if first.meets:
        lo = start
        while hi is None:  # grow until a probe fails
            if lo >= ceiling or rounds >= max_rounds:
                return result(lo, None, f"met the SLO up to the ceiling of {lo:g} {unit}")
            for outcome in run(up(lo, max(1, width()))):  # one growth step, cut: no far-overloaded probe
                if outcome.meets and hi is None:
                    lo = outcome.load
                elif not outcome.meets:
                    hi = outcome.load
                    break
    else:
        hi = start
        while lo is None:  # shrink until a probe meets it
            if hi <= floor or rounds >= max_rounds:
                because = f" ({first.reason})" if first.reason else ""
                return result(None, hi, f"failed the SLO down to the floor of {hi:g} {unit}{because}")
            for outcome in run(down(hi, max(1, width()))):
                if not outcome.meets and lo is None:
                    hi = outcome.load
                elif outcome.meets:
                    lo = outcome.load
                    break
    while not narrow_enough(lo, hi):
        if rounds >= max_rounds:
            return result(lo, hi, f"stopped after {rounds} rounds of probes")
        outcomes = run(inside(lo, hi, max(1, width())))
        # the highest load that met it below the lowest that failed (a non-monotone probe, e.g.
        # from sampling noise, cannot widen the bracket)
        failed = [o.load for o in outcomes if not o.meets]
        new_hi = min(failed) if failed else hi
        met = [o.load for o in outcomes if o.meets and o.load < new_hi]
        lo, hi = (max(met) if met else lo), new_hi
    tolerance = "to one client" if integer and hi - lo <= 1 else f"to within {rel_tol:.0%}"
    return result(lo, hi, f"converged {tolerance} in {rounds} rounds of probes")
