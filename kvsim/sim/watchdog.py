"""Stop a run that spins instead of advancing, with the state it was in.

A healthy run either advances simulated time or serves requests. A bug (a component that
reschedules itself at the same instant for ever) or pathological input can make SimPy process
events without end. The watchdog stops such a run with :class:`WatchdogError` when

- **no progress**: for :data:`DEFAULT_STALL_S` wall seconds (``kvsim run --watchdog-s S``,
  ``KVSIM_WATCHDOG_S``) neither simulated time moved nor a request arrived or finished (a burst
  of arrivals at one instant is progress); or
- **too many events**: more than ``BASE_EVENTS + EVENTS_PER_REQUEST x requests arrived +
  EVENTS_PER_INSTANCE_S x instances x simulated seconds`` events were processed so far. The bound
  grows with the work the run has actually been given. Healthy runs use far less: the shipped
  scenarios and benchmarks take 5-115 events per request (the most with KV offload over RDMA),
  at most ~2 % of the bound without its base, so only a run that creeps forward by ever smaller
  time steps meets it.

It costs nothing per event: :func:`run_until` steps SimPy's own loop in chunks of
:data:`CHECK_EVERY_EVENTS` events and checks between chunks. A run stopped inside one event (a
Python loop that never returns) is not caught; interrupt it with Ctrl-C.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import simpy
from simpy.core import StopSimulation
from simpy.events import URGENT, Event, Process

__all__ = ["WatchdogError", "Watchdog", "run_until", "stall_seconds", "DEFAULT_STALL_S", "ENV_VAR",
           "CHECK_EVERY_EVENTS", "BASE_EVENTS", "EVENTS_PER_REQUEST", "EVENTS_PER_INSTANCE_S"]

DEFAULT_STALL_S = 60.0
"""Wall seconds without progress before a run is stopped (0 turns the watchdog off)."""
ENV_VAR = "KVSIM_WATCHDOG_S"
"""Environment variable overriding :data:`DEFAULT_STALL_S` (how ``--watchdog-s`` reaches worker processes)."""
CHECK_EVERY_EVENTS = 8192
"""Events between two checks (a few milliseconds of a run)."""
BASE_EVENTS = 10_000_000
"""Events any run may use whatever its size (building, sampling, controllers)."""
EVENTS_PER_REQUEST = 5_000
"""Events allowed per request that arrived (routing, admission, transfers, preemptions)."""
EVENTS_PER_INSTANCE_S = 20_000
"""Events allowed per instance per simulated second (engine iterations of 0.1 ms at a few events each)."""


class WatchdogError(RuntimeError):
    """A run stopped by the watchdog: ``headline`` says why, ``details`` the state it was in."""

    def __init__(self, headline: str, details: list[str]):
        super().__init__(headline + ("; " + "; ".join(details) if details else ""))
        self.headline = headline
        self.details = list(details)

    def __reduce__(self) -> tuple[type[WatchdogError], tuple[str, list[str]]]:  # crosses process boundaries intact
        return (type(self), (self.headline, self.details))


def stall_seconds(value: float | None = None) -> float:
    """The stall limit, s: ``value`` if given, else ``KVSIM_WATCHDOG_S``, else :data:`DEFAULT_STALL_S`
    (an unreadable variable is ignored rather than failing a run)."""
    if value is not None:
        return float(value)
    text = os.environ.get(ENV_VAR, "").strip()
    try:
        return float(text) if text else DEFAULT_STALL_S
    except ValueError:
        return DEFAULT_STALL_S


@dataclass
class Watchdog:
    """The checks of one run. ``front`` is the run's front end (``submitted``/``completed``
    counters), ``instances`` how many instances the system has, ``label`` names the run."""

    stall_s: float
    instances: int
    front: Any
    label: str
    events: int = 0
    _mark: tuple[float, int, int] | tuple[()] = field(default=(), repr=False)  # (now, submitted, completed)
    _mark_wall: float = field(default=0.0, repr=False)

    def check(self, env: simpy.Environment, events: int) -> None:
        """Account ``events`` more processed; raise :class:`WatchdogError` if the run is stuck."""
        self.events += events
        now_wall = time.monotonic()
        mark = (env.now, self.front.submitted, self.front.completed)
        if mark != self._mark:
            self._mark, self._mark_wall = mark, now_wall
        elif now_wall - self._mark_wall > self.stall_s:
            raise self._error(env, f"no progress for {self.stall_s:g} s of wall time: simulated time stayed at "
                                   f"{env.now:.9g} s and no request arrived or finished")
        bound = self.bound(env.now)
        if self.events > bound:
            raise self._error(env, f"{self.events:,} events processed, more than the {bound:,} a run of this size "
                                   f"may use ({BASE_EVENTS:,} + {EVENTS_PER_REQUEST:,} per request arrived + "
                                   f"{EVENTS_PER_INSTANCE_S:,} per instance per simulated second)")

    def bound(self, now_s: float) -> int:
        """Most events a healthy run has processed by simulated time ``now_s``."""
        return int(BASE_EVENTS + EVENTS_PER_REQUEST * self.front.submitted
                   + EVENTS_PER_INSTANCE_S * self.instances * now_s)

    def _error(self, env: simpy.Environment, why: str) -> WatchdogError:
        front = self.front
        details = [
            f"state: simulated time {env.now:.9g} s, {self.events:,} events processed, "
            f"{front.submitted:,} requests arrived, {front.completed:,} finished, {len(env._queue):,} events pending",
            "the events due next: " + describe_pending(env),
            f"if this run is legitimately this long, give --watchdog-s 0 (or {ENV_VAR}=0) to turn the watchdog off",
        ]
        return WatchdogError(f"the run of {self.label} was stopped by the watchdog: {why}", details)


PENDING_SCANNED = 100_000
"""Most pending events :func:`describe_pending` looks at."""


def describe_pending(env: simpy.Environment, most: int = 4) -> str:
    """Who owns the events due next (at the earliest pending time): ``"8,190 x instance 3
    (mixed) Instance._run, 2 x FlowNetwork._finish"``."""
    queue = env._queue  # (time, priority, id, event); a heap, its first entry the earliest
    if not queue:
        return "none"
    first = queue[0][0]
    owners: Counter[str] = Counter()
    for entry in queue[:PENDING_SCANNED]:
        if entry[0] == first:
            owners[_owner(entry[3])] += 1
    shown = ", ".join(f"{n:,} x {who}" for who, n in owners.most_common(most))
    more = len(owners) - most
    return f"at {first:.9g} s: {shown}" + (f" and {more} other owner(s)" if more > 0 else "")


def _owner(event: Event) -> str:
    """The component an event wakes: the process it resumes (its generator and the object it
    runs for) or the callback it calls."""
    targets: list[object] = [event] if isinstance(event, Process) else []
    targets += [getattr(cb, "__self__", cb) for cb in (event.callbacks or [])]
    for target in targets:
        if isinstance(target, Process):
            generator = getattr(target, "_generator", None)
            code = getattr(generator, "gi_code", None)
            frame = getattr(generator, "gi_frame", None)
            owner = frame.f_locals.get("self") if frame is not None else None
            qualname = getattr(code, "co_qualname", None)
            name = qualname if isinstance(qualname, str) and qualname else str(getattr(code, "co_name", "a process"))
            return f"{_component(owner)}{name}" if owner is not None else name
    for cb in event.callbacks or []:
        cb_name = getattr(cb, "__qualname__", None)
        if isinstance(cb_name, str) and cb_name:
            owner = getattr(cb, "__self__", None)
            return f"{_component(owner)}{cb_name}" if owner is not None else cb_name
    return type(event).__name__


def _component(owner: Any) -> str:
    """``instance 3 (mixed) `` for an object with an index (and a role), else ``""``."""
    index = getattr(owner, "index", None)
    if not isinstance(index, int):
        return ""
    role = getattr(owner, "role", None)
    return f"{type(owner).__name__.lower()} {index}" + (f" ({role})" if isinstance(role, str) else "") + " "


def run_until(env: simpy.Environment, at: float, watchdog: Watchdog | None) -> None:
    """``env.run(until=at)``, checked by ``watchdog`` every :data:`CHECK_EVERY_EVENTS` events.

    The stop event is scheduled exactly as :meth:`simpy.Environment.run` schedules it (urgent,
    at ``at``), so the order of events, and the results, are those of ``env.run``.
    """
    if watchdog is None:
        env.run(until=at)
        return
    if not at > env.now:
        raise ValueError(f"until ({at}) must be greater than the current simulation time")
    until = Event(env)
    until._ok = True
    until._value = None
    env.schedule(until, URGENT, at - env.now)
    until.callbacks.append(StopSimulation.callback)
    step = env.step
    chunk = range(CHECK_EVERY_EVENTS)
    done = -1
    try:
        while True:
            for done in chunk:  # noqa: B007 -- read by the except clause: the events of a part-run chunk
                step()
            watchdog.check(env, CHECK_EVERY_EVENTS)
            done = -1
    except StopSimulation:
        watchdog.events += done + 1
