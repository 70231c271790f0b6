"""Progressive filling (max-min fair rates) over links interned to array slots: the solver of
:mod:`kvsim.network.flows`.

A flow (:class:`_Flow`) keeps its (link slot, crossings) pairs in two arrays; :class:`_Filling`
keeps the per-link work arrays between solves. C arrays compiled (``filling.pxd``), lists in the
pure-Python reference: one source, the same float operations in the same order either way, which
is the order of the dict-based solver this replaced (first appearance of links, freezing order,
``min`` as the first of equals, the same tolerance products).

A kernel of the compiled backend (:mod:`kvsim.backend`).
"""

from __future__ import annotations

import math

import cython

# Links whose fill levels agree to this relative tolerance saturate together in one filling round;
# it only merges rounds that rounding split apart, it never moves a rate by more than that much.
# One tolerance over all links: solved per connected component of links, the filling would not
# merge two components' rounds within the tolerance as this does, so the rates could differ in
# their last bits (tests/test_flow_components.py); it is done over every active flow at once.
_TIE_REL = 1e-12
_INF = math.inf


def _doubles(n):
    """Room for ``n`` doubles: a C array compiled (the caller frees it with :func:`_free`), a list
    of zeros in the pure-Python reference."""
    if cython.compiled:
        buf = cython.cast(cython.p_double, malloc((n if n > 0 else 1) * cython.sizeof(cython.double)))  # noqa: F821
        if buf == cython.NULL:
            raise MemoryError()
        return buf
    else:
        return [0.0] * n


def _indices(n):
    """Room for ``n`` indices: a C array of ``Py_ssize_t`` compiled, a list of zeros otherwise."""
    if cython.compiled:
        buf = cython.cast(cython.p_Py_ssize_t, malloc((n if n > 0 else 1) * cython.sizeof(cython.Py_ssize_t)))  # noqa: F821
        if buf == cython.NULL:
            raise MemoryError()
        return buf
    else:
        return [0] * n


def _free(buf) -> None:
    """Give back what :func:`_doubles` or :func:`_indices` returned (nothing to do for a list)."""
    if cython.compiled:
        free(buf)  # noqa: F821 (a C function of the .pxd, compiled only)


class _Route:
    """The links (as indices) a flow crosses and its crossings of each, in order of first
    appearance: worked out once per path and shared by every flow along it (never changed)."""

    __slots__ = ("links", "counts", "k")  # C fields compiled (filling.pxd)

    @cython.locals(j=cython.Py_ssize_t)
    def __init__(self, weights: dict[int, float]):
        self.k = len(weights)
        self.links = _indices(self.k)
        self.counts = _doubles(self.k)
        j = 0
        for link, count in weights.items():  # first-appearance order: the order of every scan
            self.links[j] = link
            self.counts[j] = count
            j += 1

    def __dealloc__(self):
        if cython.compiled:  # a compiled route's arrays (a Python object's are lists)
            _free(self.links)
            _free(self.counts)


class _Flow:
    """One active transfer: its route's links (as indices) and crossings, bytes left, current rate
    and completion event."""

    __slots__ = ("route", "links", "counts", "k", "nbytes", "remaining", "rate", "finish_s", "latency_s", "event",
                 "cap")  # C fields compiled (filling.pxd)

    @cython.locals(route=_Route)
    def __init__(self, route: _Route, nbytes: float, latency_s: float, event, cap: float = _INF):
        self.route = route  # keeps the arrays below alive
        self.k = route.k
        self.links = route.links
        self.counts = route.counts
        self.cap = cap
        self.nbytes = nbytes
        self.remaining = nbytes
        self.rate = 0.0  # set by the next solve, which happens before any time passes
        self.finish_s = _INF
        self.latency_s = latency_s
        self.event = event


class _Filling:
    """Progressive filling over interned links ``0 .. n - 1`` of the given capacities (which may
    be ``inf``), with its per-link work arrays kept between solves (see :meth:`solve`)."""

    __slots__ = ("n_links", "capacity", "spare", "unfrozen", "fill", "left", "stamp", "first", "end",
                 "order", "n_order", "tick", "room_flows", "room_cross", "off", "lk", "ct", "rates", "caps",
                 "frozen", "capped", "live", "members")  # C fields compiled (flows.pxd)

    @cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t)
    def __init__(self, capacity_Bps: list):
        n = len(capacity_Bps)
        self.n_links = n
        self.capacity, self.spare, self.unfrozen, self.fill = _doubles(n), _doubles(n), _doubles(n), _doubles(n)
        self.left, self.stamp, self.first, self.end, self.order = (_indices(n), _indices(n), _indices(n),
                                                                   _indices(n), _indices(n))
        for i in range(n):
            self.capacity[i] = capacity_Bps[i]
            self.stamp[i] = 0
        self.n_order = 0
        self.tick = 0
        self.room_flows = self.room_cross = 0
        self._reserve(16, 64)

    def __dealloc__(self):
        if cython.compiled:
            _free(self.capacity)
            _free(self.spare)
            _free(self.unfrozen)
            _free(self.fill)
            _free(self.left)
            _free(self.stamp)
            _free(self.first)
            _free(self.end)
            _free(self.order)
            self._release()

    def _release(self) -> None:
        if self.room_flows:
            _free(self.off)
            _free(self.rates)
            _free(self.caps)
            _free(self.frozen)
            _free(self.capped)
            _free(self.lk)
            _free(self.ct)
            _free(self.live)
            _free(self.members)

    def _reserve(self, flows: int, crossings: int) -> None:
        """Make the per-flow and per-crossing arrays hold at least this many."""
        if flows <= self.room_flows and crossings <= self.room_cross:
            return
        self._release()
        flows, crossings = max(flows, 2 * self.room_flows), max(crossings, 2 * self.room_cross)
        self.off, self.rates, self.caps = _indices(flows + 1), _doubles(flows), _doubles(flows)
        self.frozen, self.capped = _indices(flows), _indices(flows)
        self.lk, self.ct, self.live, self.members = (_indices(crossings), _doubles(crossings), _indices(crossings),
                                                     _indices(crossings))
        self.room_flows, self.room_cross = flows, crossings

    @cython.locals(n=cython.Py_ssize_t, total=cython.Py_ssize_t, i=cython.Py_ssize_t, j=cython.Py_ssize_t,
                   p=cython.Py_ssize_t, q=cython.Py_ssize_t, r=cython.Py_ssize_t, link=cython.Py_ssize_t,
                   other=cython.Py_ssize_t, n_live=cython.Py_ssize_t, n_capped=cython.Py_ssize_t,
                   tick=cython.Py_ssize_t, flow=_Flow, count=cython.double, off=cython.p_Py_ssize_t,
                   lk=cython.p_Py_ssize_t, ct=cython.p_double, rates=cython.p_double, caps=cython.p_double,
                   frozen=cython.p_Py_ssize_t, capped=cython.p_Py_ssize_t, spare=cython.p_double,
                   unfrozen=cython.p_double, left=cython.p_Py_ssize_t, live=cython.p_Py_ssize_t, level=cython.double,
                   cap_level=cython.double, bound=cython.double, s=cython.double, rate=cython.double,
                   inf=cython.double, tie=cython.double)
    def solve(self, flows: list) -> None:
        """Set every flow's ``rate`` to its max-min fair share (see :func:`max_min_fair_rates`; a
        flow's own cap acts as a private link), and :attr:`order` to the links the flows cross,
        in order of first appearance.

        Every scan follows the order of the flows and, within a flow, of its links, as the
        dict-based progressive filling this replaces did (the tests keep that one as the oracle).
        """
        inf, tie = _INF, 1.0 + _TIE_REL  # (C doubles compiled; the same values as the expressions)
        n = len(flows)
        total = 0
        for i in range(n):
            flow = flows[i]
            total += flow.k
        self._reserve(n, total)
        off, lk, ct, rates, caps, frozen, capped = self.off, self.lk, self.ct, self.rates, self.caps, self.frozen, self.capped
        spare, unfrozen, left, live = self.spare, self.unfrozen, self.left, self.live
        self.tick += 1
        tick = self.tick
        # Per link: capacity not yet claimed by frozen flows, crossings by unfrozen flows (the
        # weights may be fractional), unfrozen flows on it, its flows in order (first..end).
        n_live = n_capped = p = 0
        for i in range(n):
            flow = flows[i]
            off[i] = p
            rates[i] = inf
            caps[i] = flow.cap
            if flow.cap < inf:
                capped[n_capped] = i
                n_capped += 1
            frozen[i] = 1 if flow.k == 0 else 0  # an empty path constrains nothing: rate inf
            for j in range(flow.k):
                link = flow.links[j]
                count = flow.counts[j]
                lk[p] = link
                ct[p] = count
                p += 1
                if self.stamp[link] != tick:
                    self.stamp[link] = tick
                    spare[link] = self.capacity[link]
                    unfrozen[link] = 0.0
                    left[link] = 0
                    live[n_live] = link
                    self.order[n_live] = link
                    n_live += 1
                unfrozen[link] += count
                left[link] += 1
        off[n] = p
        self.n_order = n_live
        q = 0
        for p in range(n_live):
            link = live[p]
            self.first[link] = self.end[link] = q
            q += left[link]
        for i in range(n):
            for p in range(off[i], off[i + 1]):
                link = lk[p]
                self.members[self.end[link]] = i
                self.end[link] += 1
        while n_live > 0:
            # Every unfrozen flow runs at the common level; link l saturates when the level reaches
            # spare / unfrozen crossings. The lowest such level freezes the flows on those links.
            for p in range(n_live):
                link = live[p]
                s = spare[link]
                if 0.0 > s:  # max(spare, 0.0)
                    s = 0.0
                self.fill[p] = s / unfrozen[link]
            level = self.fill[0]
            for p in range(1, n_live):  # min(): the first of equals
                if self.fill[p] < level:
                    level = self.fill[p]
            if n_capped > 0:
                # a flow's own cap is a private link: if it binds before any shared one, freeze it there
                q = 0
                for p in range(n_capped):
                    if not frozen[capped[p]]:
                        capped[q] = capped[p]
                        q += 1
                n_capped = q
                cap_level = inf
                if n_capped > 0:
                    cap_level = caps[capped[0]]
                    for p in range(1, n_capped):
                        if caps[capped[p]] < cap_level:
                            cap_level = caps[capped[p]]
                if cap_level < level:
                    for p in range(n_capped):
                        i = capped[p]
                        if caps[i] <= cap_level * tie:
                            frozen[i] = 1
                            rate = caps[i]
                            rates[i] = rate
                            for r in range(off[i], off[i + 1]):
                                other = lk[r]
                                spare[other] -= ct[r] * rate
                                unfrozen[other] -= ct[r]
                                left[other] -= 1
                    n_live = self._keep_loaded(n_live)
                    continue
            if level == inf:
                break  # what is left crosses only unbounded links and keeps rate inf
            bound = level * tie
            for p in range(n_live):
                if self.fill[p] > bound:
                    continue
                link = live[p]
                for q in range(self.first[link], self.end[link]):
                    i = self.members[q]
                    if frozen[i]:
                        continue
                    frozen[i] = 1
                    rates[i] = level
                    for r in range(off[i], off[i + 1]):
                        other = lk[r]
                        spare[other] -= ct[r] * level
                        unfrozen[other] -= ct[r]
                        left[other] -= 1
            n_live = self._keep_loaded(n_live)
        for p in range(n_capped):  # flows that crossed only unbounded links still keep their own cap
            i = capped[p]
            if caps[i] < rates[i]:  # min(rate, cap)
                rates[i] = caps[i]
        for i in range(n):
            flow = flows[i]
            flow.rate = rates[i]

    @cython.locals(p=cython.Py_ssize_t, q=cython.Py_ssize_t)
    def _keep_loaded(self, n_live: int) -> int:
        """Drop from the live links those no unfrozen flow crosses any more (order kept)."""
        q = 0
        for p in range(n_live):
            if self.left[self.live[p]] > 0:
                self.live[q] = self.live[p]
                q += 1
        return q
