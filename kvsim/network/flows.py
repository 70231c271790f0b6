"""Flow-level network model: concurrent transfers share link bandwidth max-min fairly.

A transfer is one *flow* of bytes over a list of links. While several flows are active, each
link's capacity is divided among the flows crossing it by max-min fairness (progressive filling),
the standard flow-level model of network simulators. Rates are re-solved only when a flow starts
or finishes, so the cost is one SimPy event per flow change, never one per byte or block.

A flow may list a link more than once (a host-bounce copy crosses the host memory channels on the
way in and again on the way out); it then consumes that multiple of its rate on the link. A flow
may also consume *resources* that are not byte links, at a weight per byte (a storage medium's
IOPS ceiling: I/Os per byte; a CPU's staging threads: CPU-seconds per byte), and may carry a rate
cap of its own (a queue-depth bound); a cap acts as a private link only that flow crosses.

A kernel of the compiled backend (:mod:`kvsim.backend`): links are interned to small integers
when a network is built, a flow keeps its (link, crossings) pairs in two arrays, and the filling
(:mod:`kvsim.network.filling`) runs over per-link arrays -- C arrays compiled (``flows.pxd``),
lists in the pure-Python reference, the same float operations in the same order either way.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from heapq import heappush

import cython
import simpy
from simpy.events import NORMAL

from kvsim.network.filling import _Filling, _Flow, _Route

if not cython.compiled:  # compiled, these are C functions of filling.pxd (cimported by flows.pxd)
    from kvsim.network.filling import _doubles, _free

__all__ = ["max_min_fair_rates", "FlowNetwork"]

# A flow whose undelivered bytes fall below this fraction of its size is complete: floating-point
# rounding of rate x time must never leave a flow a few bytes short of finishing forever.
_DONE_FRACTION = 1e-9
_INF = math.inf


class _Wake:
    """A network's wake-up, as the SimPy event its heap entry carries: what a ``Timeout`` of the
    same delay with the wake-up as its callback was, scheduled the same way
    (``Environment.schedule``: the same time, priority and place in the event-id order), without
    the timeout's interpreted constructor or a ``functools.partial`` per wake-up. ``gen`` is the
    network's wake-up generation when it was armed (a later one supersedes it)."""

    __slots__ = ("callbacks", "_ok", "_value", "gen")  # C fields compiled (flows.pxd)

    def __init__(self, callbacks: list, gen: int):
        self.callbacks = callbacks  # what SimPy calls when it processes the event (then sets None)
        self._ok = True  # a triggered, successful event, as a timeout is from its creation
        self._value = None
        self.gen = gen


def _link_weights(links: Sequence[Hashable]) -> dict[Hashable, int]:
    """How many times each link occurs in a path, in order of first appearance."""
    weights: dict[Hashable, int] = {}
    for link in links:
        weights[link] = weights.get(link, 0) + 1
    return weights


def _intern(links: Sequence[Hashable], index: Mapping[Hashable, int]) -> dict[int, float]:
    """:func:`_link_weights` by array slot (``index``: link -> slot; KeyError naming an unknown link)."""
    weights: dict[int, float] = {}
    for link in links:
        i = index.get(link)
        if i is None:
            raise KeyError(f"unknown link {link!r}: it has no capacity_Bps")
        weights[i] = weights.get(i, 0) + 1
    return weights


@cython.locals(filling=_Filling)
def _solve(weights: Sequence[Mapping[Hashable, float]], capacity_Bps: Mapping[Hashable, float],
           caps: Sequence[float] | None = None) -> list[float]:
    """Progressive filling over flows given as link -> crossings (or weight per byte) maps, each
    optionally capped at its own rate (see max_min_fair_rates)."""
    index: dict[Hashable, int] = {}  # the links crossed, in order of first appearance
    for flow in weights:
        for link in flow:
            if link not in index:
                if link not in capacity_Bps:
                    raise KeyError(f"unknown link {link!r}: it has no capacity_Bps")
                index[link] = len(index)
    filling = _Filling([float(capacity_Bps[link]) for link in index])
    flows = [_Flow(_Route({index[link]: count for link, count in flow.items()}), 0.0, 0.0, None,
                   _INF if caps is None else caps[i]) for i, flow in enumerate(weights)]
    filling.solve(flows)
    return [flow.rate for flow in flows]


def max_min_fair_rates(
    flow_links: Sequence[Sequence[Hashable]], capacity_Bps: Mapping[Hashable, float]
) -> list[float]:
    """Max-min fair rates of flows sharing links, by progressive filling (water-filling).

    Parameters
    ----------
    flow_links : sequence of sequences of hashable
        The links each flow crosses. A link listed k times in one flow carries k times the flow's
        rate (e.g. a copy that passes through host memory on the way in and on the way out).
    capacity_Bps : mapping
        Capacity of every link, bytes/s (may be ``inf``; must not be negative).

    Returns
    -------
    list of float
        Rate of each flow, bytes/s, in the order given. A flow with no links, or only links of
        infinite capacity, gets ``inf``.

    Raises
    ------
    KeyError
        A flow names a link absent from ``capacity_Bps`` (the message names the link).
    ValueError
        A capacity is negative or NaN.

    Notes
    -----
    The result is the unique allocation in which no flow can be given more without taking from a
    flow whose rate is no larger: every flow has a saturated bottleneck link on which its rate is
    the largest among the flows crossing it.
    """
    weights = [_link_weights(links) for links in flow_links]
    for flow in weights:
        for link in flow:
            cap = capacity_Bps.get(link)  # an unknown link is reported by _solve
            if cap is not None and not cap >= 0.0:  # also catches NaN
                raise ValueError(f"capacity of link {link!r} must be >= 0 bytes/s, got {cap!r}")
    return _solve(weights, capacity_Bps)


class FlowNetwork:
    """Transfers over capacitated links, sharing bandwidth max-min fairly, as SimPy events.

    Parameters
    ----------
    env : simpy.Environment
    capacity_Bps : mapping
        Capacity of every link, bytes/s (finite and positive). Link ids are any hashables, e.g.
        ``(u, v)`` edges of :class:`kvsim.network.topology.Topology`.
    window_start_s, window_end_s : float
        Measurement window for :meth:`utilization_mean`, seconds.

    Notes
    -----
    Rates are re-solved once per simulated instant at which flows start or finish: a transfer
    started now is solved by a zero-delay wake-up, so many transfers started at the same instant
    cost one solve. SimPy timeouts cannot be cancelled, so each wake-up carries a generation
    number and a superseded one is ignored when it fires.
    """

    __slots__ = ("env", "window_start_s", "window_end_s", "_capacity", "_index", "_filling", "_bytes", "_area",
                 "_load", "_flows", "_t", "_gen", "_wake_at", "_woken")  # C fields compiled (flows.pxd)

    @cython.locals(i=cython.Py_ssize_t)
    def __init__(
        self,
        env: simpy.Environment,
        capacity_Bps: Mapping[Hashable, float],
        window_start_s: float = 0.0,
        window_end_s: float = float("inf"),
    ):
        for link, cap in capacity_Bps.items():
            if not (0.0 < cap < math.inf):
                raise ValueError(f"capacity of link {link!r} must be finite and > 0 bytes/s, got {cap!r}")
        if not window_start_s <= window_end_s:
            raise ValueError(f"window_start_s {window_start_s} must not exceed window_end_s {window_end_s}")
        self.env = env
        self.window_start_s = window_start_s
        self.window_end_s = window_end_s
        self._capacity = {link: float(cap) for link, cap in capacity_Bps.items()}
        self._index = {link: i for i, link in enumerate(self._capacity)}  # link -> its array slot
        self._filling = _Filling(list(self._capacity.values()))
        n = len(self._capacity)
        # per link: bytes carried, carried bytes inside the window, carried rate (0 when unused)
        self._bytes, self._area, self._load = _doubles(n), _doubles(n), _doubles(n)
        for i in range(n):
            self._bytes[i] = self._area[i] = self._load[i] = 0.0
        self._flows: list[_Flow] = []  # start order, so solves and ties are deterministic
        self._t = env.now  # time up to which bytes and areas are accounted
        self._gen = 0
        self._wake_at = math.nan  # when the armed wake-up fires (NaN: none)
        self._woken = self._on_wake  # the wake-ups' callback, bound once

    def __dealloc__(self):
        if cython.compiled:
            _free(self._bytes)
            _free(self._area)
            _free(self._load)

    # ------------------------------------------------------------------ public API

    @property
    def active_flows(self) -> int:
        """Number of transfers whose bytes are still in flight."""
        return len(self._flows)

    def transfer(self, links: Sequence[Hashable], nbytes: float, latency_s: float = 0.0,
                 resources: Mapping[Hashable, float] | None = None,
                 rate_cap_Bps: float = math.inf) -> simpy.Event:
        """Start moving ``nbytes`` over ``links``; returns an event to wait on.

        Parameters
        ----------
        links : sequence of hashable
            The path; a link listed k times carries k times the flow's rate.
        nbytes : float
            Bytes to move (>= 0).
        latency_s : float
            Path latency, seconds, paid once per flow after its last byte is delivered.
        resources : mapping, optional
            Further capacities the flow consumes, each at a weight per byte moved (added to any
            crossings of the same id in ``links``); e.g. an IOPS ceiling at I/Os per byte.
        rate_cap_Bps : float
            The flow's own rate limit, bytes/s (``inf``: none).

        Returns
        -------
        simpy.Event
            Succeeds, with the completion time in seconds as its value, once the bytes have been
            delivered under fair sharing and ``latency_s`` has passed. A zero-byte or empty-path
            transfer completes after just the latency.

        Raises
        ------
        KeyError
            A link is unknown (the message names it).
        ValueError
            ``nbytes`` or ``latency_s`` is negative or not finite.
        """
        self._check_numbers(nbytes, latency_s, rate_cap_Bps)
        return self._start(self.route(links, resources), nbytes, latency_s, rate_cap_Bps)

    def route(self, links: Sequence[Hashable], resources: Mapping[Hashable, float] | None = None) -> _Route:
        """``links`` and ``resources`` as :meth:`transfer` takes them, worked out once: pass the
        result to :meth:`transfer_on` for every flow along the same path with the same resources.

        Raises
        ------
        KeyError
            A link or resource is unknown (the message names it).
        ValueError
            A resource's weight is not finite and > 0.
        """
        inf = _INF
        if resources:
            for resource, weight in resources.items():  # (checked before any link is looked up)
                if not (0.0 < weight < inf):
                    raise ValueError(f"weight of resource {resource!r} must be finite and > 0, got {weight!r}")
        weights = _intern(links, self._index)
        if resources:
            for resource, weight in resources.items():
                i = self._index.get(resource)
                if i is None:
                    raise KeyError(f"unknown link {resource!r}: it has no capacity_Bps")
                weights[i] = weights.get(i, 0) + weight
        return _Route(weights)

    def transfer_on(self, route: _Route, nbytes: float, latency_s: float = 0.0,
                    rate_cap_Bps: float = math.inf) -> simpy.Event:
        """:meth:`transfer` along a :meth:`route` of this network (the same event, the same
        errors for the numbers)."""
        self._check_numbers(nbytes, latency_s, rate_cap_Bps)
        return self._start(route, nbytes, latency_s, rate_cap_Bps)

    @cython.locals(inf=cython.double)
    def _check_numbers(self, nbytes: float, latency_s: float, rate_cap_Bps: float) -> None:
        """ValueError naming the first of the numbers out of range."""
        inf = _INF
        if not (0.0 <= nbytes < inf):
            raise ValueError(f"nbytes must be finite and >= 0, got {nbytes!r}")
        if not (0.0 <= latency_s < inf):
            raise ValueError(f"latency_s must be finite and >= 0, got {latency_s!r}")
        if not rate_cap_Bps > 0.0:
            raise ValueError(f"rate_cap_Bps must be > 0, got {rate_cap_Bps!r}")

    @cython.locals(now=cython.double)
    def _start(self, route: _Route, nbytes: float, latency_s: float, rate_cap_Bps: float) -> simpy.Event:
        """Start a flow of ``nbytes`` along ``route`` (the numbers already checked)."""
        event = self.env.event()
        if nbytes == 0.0 or route.k == 0:
            self._complete(event, latency_s)
            return event
        now = self.env.now
        self._advance(now)
        self._flows.append(_Flow(route, float(nbytes), latency_s, event, float(rate_cap_Bps)))
        if self._wake_at != now:  # a wake-up already due now will include this flow in its solve
            self._schedule(0.0)
        return event

    @cython.locals(flow=_Flow)
    def cancel(self, event: simpy.Event) -> float | None:
        """Stop the transfer :meth:`transfer` returned ``event`` for, where its bytes are now.

        The bytes it has delivered stay counted on its links; the rest never move; the flows
        left re-share the links at once (one solve at this instant, as a finish would cost);
        ``event`` never fires.

        Parameters
        ----------
        event : simpy.Event
            The event :meth:`transfer` returned.

        Returns
        -------
        float or None
            Bytes the flow delivered before it was stopped, or None if it is no longer moving
            bytes (all delivered: it may still be paying its latency, and then its event still
            fires; or it was cancelled already).
        """
        flow = None
        for f in self._flows:
            if f.event is event:
                flow = f
                break
        if flow is None:
            return None
        now = self.env.now
        self._advance(now)  # bytes up to now at the current rates; a flow done by now retires
        if flow not in self._flows:  # (identity first: flows compare by identity)
            return None
        self._flows = [f for f in self._flows if f is not flow]
        # its rate stays in the links' load until the re-solve below, at this same instant: no
        # byte is credited to it after now
        if self._wake_at != now:
            self._schedule(0.0)
        return min(flow.nbytes, max(0.0, flow.nbytes - flow.remaining))

    def solve_now(self) -> None:
        """Re-solve the rates at once, at this instant: what the zero-delay wake-up a transfer
        started now arms would do, done now (it is superseded), for a caller that needs the rate
        a flow gets at the instant it starts (:meth:`rate_of`). The flows started later at the
        same instant are solved by a wake-up of their own, as usual."""
        self._gen += 1
        self._on_wake(_Wake([], self._gen))

    @cython.locals(flow=_Flow)
    def rate_of(self, event: simpy.Event) -> float:
        """The rate of the transfer :meth:`transfer` returned ``event`` for, bytes/s, as of the
        last solve (0 if it is no longer moving bytes)."""
        for flow in self._flows:
            if flow.event is event:
                return flow.rate
        return 0.0

    def bytes_moved(self, link: Hashable) -> float:
        """Bytes that have crossed ``link`` so far (each crossing of a repeated link counts).

        For a resource that is not a byte link, the amount of it used so far, in its own units
        (weight per byte x bytes: I/Os for an IOPS ceiling, CPU-seconds for staging threads).
        """
        i = self._check(link)
        return self._bytes[i] + self._load[i] * (self.env.now - self._t)

    def utilization_mean(self, link: Hashable) -> float:
        """Time-weighted carried rate / capacity of ``link`` over the window (NaN if empty).

        The window is ``[window_start_s, min(now, window_end_s)]``.
        """
        i = self._check(link)
        now = self.env.now
        end = min(now, self.window_end_s)
        span = end - self.window_start_s
        if span <= 0.0:
            return math.nan
        area = self._area[i] + self._load[i] * self._overlap(self._t, now)
        return area / (self._capacity[link] * span)

    def link_report(self) -> dict[Hashable, dict[str, float]]:
        """Per link: ``capacity_Bps``, ``bytes`` moved and ``utilization_mean`` (capacity order).

        Resources that are not byte links are listed too, with their capacity and use in their
        own units under the same keys; callers that report them name their units (see
        :meth:`kvsim.network.storage_io.StorageIO.report`).
        """
        return {
            link: {
                "capacity_Bps": cap,
                "bytes": self.bytes_moved(link),
                "utilization_mean": self.utilization_mean(link),
            }
            for link, cap in self._capacity.items()
        }

    # ------------------------------------------------------------------ internals

    def _check(self, link: Hashable) -> int:
        """The array slot of ``link`` (KeyError naming it if unknown)."""
        i = self._index.get(link)
        if i is None:
            raise KeyError(f"unknown link {link!r}: it has no capacity_Bps")
        return i

    @cython.locals(t0=cython.double, t1=cython.double, a=cython.double, b=cython.double)
    def _overlap(self, t0: float, t1: float) -> float:
        """Length of [t0, t1] inside the measurement window, seconds."""
        a = self.window_end_s if self.window_end_s < t1 else t1  # min(t1, window_end_s)
        b = self.window_start_s if self.window_start_s > t0 else t0  # max(t0, window_start_s)
        return a - b if a - b > 0.0 else 0.0  # max(0.0, a - b)

    def _complete(self, event: simpy.Event, latency_s: float) -> None:
        """Succeed ``event`` with the completion time after ``latency_s`` more seconds.

        With a latency the event is triggered now and scheduled ``latency_s`` ahead, with the
        time SimPy will process it at (``now + latency_s``, the sum it gives a timeout of that
        delay) as its value: one SimPy event per flow where a timeout whose callback succeeded
        the event made two. The event takes the timeout's place among the events of its
        instant, ahead of any scheduled for exactly the same float time while the latency ran
        -- events no flow's completion is tied to (flows finishing together, each with its own
        latency, keep their order, and what their callbacks schedule follows them as before).
        """
        env = self.env
        if latency_s > 0.0:
            event._ok = True
            event._value = env.now + latency_s  # the time SimPy will process it at
            heappush(env._queue, (event._value, NORMAL, next(env._eid), event))  # as env.schedule
        else:
            event.succeed(env.now)

    @cython.locals(now=cython.double, dt=cython.double, in_window=cython.double, load=cython.double,
                   p=cython.Py_ssize_t, j=cython.Py_ssize_t, link=cython.Py_ssize_t, flow=_Flow,
                   filling=_Filling, done_fraction=cython.double)
    def _advance(self, now: float) -> None:
        """Account bytes moved since the last update at the current rates; retire finished flows."""
        dt = now - self._t
        if dt > 0.0:
            in_window = self._overlap(self._t, now)
            filling = self._filling
            for p in range(filling.n_order):  # the links carrying a load since the last solve
                link = filling.order[p]
                load = self._load[link]
                self._bytes[link] += load * dt
                self._area[link] += load * in_window
        self._t = now
        done_fraction = _DONE_FRACTION
        still: list[_Flow] = []
        done: list[_Flow] = []
        for flow in self._flows:
            flow.remaining -= flow.rate * dt
            # finish_s <= now: this is the wake-up computed for the flow, whatever rounding left.
            if flow.finish_s <= now or flow.remaining <= done_fraction * flow.nbytes:
                # Credit the rounding residue (either sign) so each link's total is exact.
                for j in range(flow.k):
                    self._bytes[flow.links[j]] += flow.counts[j] * flow.remaining
                done.append(flow)
            else:
                still.append(flow)
        if not done:
            return
        self._flows = still
        for flow in done:
            self._complete(flow.event, flow.latency_s)

    def _schedule(self, delay_s: float) -> None:
        """Arm a wake-up ``delay_s`` from now; any earlier one becomes stale."""
        self._gen += 1
        self._wake_at = self.env.now + delay_s  # the same sum SimPy uses for the event's time
        # what Environment.schedule does (the heap entry SimPy orders events by), without its
        # interpreted call: the same time, priority and next event id
        env = self.env
        heappush(env._queue, (self._wake_at, NORMAL, next(env._eid), _Wake([self._woken], self._gen)))

    @cython.locals(now=cython.double, dt=cython.double, least=cython.double, p=cython.Py_ssize_t,
                   j=cython.Py_ssize_t, link=cython.Py_ssize_t, flow=_Flow, filling=_Filling, wake=_Wake)
    def _on_wake(self, wake: _Wake) -> None:
        """A wake-up armed by :meth:`_schedule` is due: account, retire, re-solve, re-arm."""
        if wake.gen != self._gen:
            return  # superseded by a later flow change
        self._wake_at = math.nan
        now = self.env.now
        self._advance(now)
        filling = self._filling
        for p in range(filling.n_order):  # the last solve's loads end here
            self._load[filling.order[p]] = 0.0
        filling.solve(self._flows)
        for flow in self._flows:
            for j in range(flow.k):
                link = flow.links[j]
                self._load[link] = self._load[link] + flow.counts[j] * flow.rate
        if not self._flows:
            return
        least = 0.0
        p = 0
        for flow in self._flows:
            dt = flow.remaining / flow.rate
            flow.finish_s = now + dt
            if p == 0 or dt < least:  # min(): the first of equals
                least = dt
            p += 1
        self._schedule(least)
