"""Which instances serve in each role now, and the least loaded of them without a scan.

A :class:`LoadBoard` holds a system's instances. For each role (``mixed``, ``prefill``,
``decode``) it keeps the list of instances serving in it (in that role and accepting work, in
index order: the list a router chooses among), rebuilt only when an instance's role or
``accepting`` changes, and a binary heap of ``(outstanding, index)`` entries from which
:meth:`LoadBoard.least_outstanding` answers in O(log n) amortised: the instance with the fewest
unfinished requests, the lowest index on ties -- exactly what a scan of the list returns.

How the board learns of changes. An instance calls :meth:`LoadBoard.changed` whenever its
``outstanding`` count may have moved and :meth:`LoadBoard.moved` when it joins or leaves a
role; the board only marks it dirty, and reads the count itself when a router next asks
about that role (so several changes between two arrivals cost one heap push). Only that role's
dirty instances are read then: a prefill instance reports a prompt it detaches before the
prompt has left its running list, and the handoff routes that prompt to a decode instance at
once -- the decode router must not read the prefill instance's count at that moment. The contract the
instance keeps (see :class:`~kvsim.serving.instance.Instance`): a change is notified after it
is made, or before it with no routing decision in that role in between. Heap entries are never
updated in place: a stale one (its count or its instance's role moved on) is dropped when it
reaches the top, and the heap is rebuilt when stale entries outnumber live ones.

The least-outstanding router (:class:`LeastOutstandingRouter`, re-exported by
:mod:`kvsim.serving.router`) lives here, beside the board it reads.

A kernel of the compiled backend (:mod:`kvsim.backend`): ``load_board.pxd`` types the board, its
role views and the router (``cdef`` classes), so the front end asks the router, and the instances
tell the board, in C; the pure-Python reference ignores it (and also serves any object that has
what the board reads: ``index``, ``role``, ``accepting``, ``outstanding``). A system makes its board
from its backend's module (``kernels.load_board.LoadBoard``) and the router from the board
(:meth:`LoadBoard.router`).
"""

from __future__ import annotations

import heapq
from typing import Any, Sequence as Seq

import cython

__all__ = ["LoadBoard", "LeastOutstandingRouter", "least_outstanding_scan"]

_ROLES = ("mixed", "prefill", "decode")
_UNSEEN = -1  # a count no instance has: the next refresh pushes a fresh entry


class _RoleHeap:
    """The board's view of one role: its members and their counts."""

    __slots__ = ("role", "members", "position", "heap", "keys", "dirty", "flagged")

    def __init__(self, role: str):
        self.role = role
        self.members: list[Any] | None = None  # None: rebuild on the next request
        self.position: dict[int, int] = {}     # instance index -> place in ``members``
        self.heap: list[tuple[int, int]] = []  # (outstanding, index), stale entries included
        self.keys: list[int] = []              # per instance index: the count last read
        self.dirty: list[int] = []             # instance indices to read again
        self.flagged = bytearray()             # per instance index: already in ``dirty``


class LoadBoard:
    """The instances of one system by role, and the least loaded in each (see the module docstring)."""

    __slots__ = ("instances", "_roles")

    def __init__(self) -> None:
        self.instances: list[Any] = []
        self._roles = {role: _RoleHeap(role) for role in _ROLES}

    def add(self, instance: Any) -> None:
        """Track ``instance`` (its ``index`` must be its position in the system, in order)."""
        if instance.index != len(self.instances):
            raise ValueError(f"instance {instance.index} added as number {len(self.instances)}")
        self.instances.append(instance)
        for view in self._roles.values():
            view.keys.append(_UNSEEN)
            view.flagged.append(0)
        instance.board = self
        self.moved(instance)

    def router(self) -> LeastOutstandingRouter:
        """A least-outstanding router reading this board (of the board's own backend)."""
        return LeastOutstandingRouter(self)

    # -- notifications ----------------------------------------------------------------------
    @cython.locals(view=_RoleHeap, i=cython.Py_ssize_t)
    def changed(self, instance: Any) -> None:
        """``instance``'s outstanding count may have changed."""
        view = self._roles.get(instance.role)
        if view is not None:
            i = instance.index
            if not view.flagged[i]:
                view.flagged[i] = 1
                view.dirty.append(i)

    @cython.locals(view=_RoleHeap, i=cython.Py_ssize_t)
    def moved(self, instance: Any) -> None:
        """``instance`` may have joined or left a role (its ``role`` or ``accepting`` changed)."""
        i = instance.index
        for view in self._roles.values():
            view.members = None
            view.keys[i] = _UNSEEN
            if not view.flagged[i]:
                view.flagged[i] = 1
                view.dirty.append(i)

    # -- questions --------------------------------------------------------------------------
    @cython.locals(view=_RoleHeap)
    def members(self, role: str) -> list[Any]:
        """The instances serving in ``role`` now, in index order. The same list object is returned
        until membership changes: callers must not modify it."""
        view = self._roles[role]
        if view.members is None:
            view.members = [inst for inst in self.instances if inst.role == role and inst.accepting]
            view.position = {inst.index: k for k, inst in enumerate(view.members)}
        return view.members

    @cython.locals(view=_RoleHeap, i=cython.Py_ssize_t, count=cython.long)
    def least_outstanding(self, instances: Seq[Any]) -> int | None:
        """Position in ``instances`` of the one with the fewest outstanding requests (lowest
        position on ties), if ``instances`` is the current :meth:`members` list of a role;
        None otherwise (the caller scans) or if the role has no member."""
        for view in self._roles.values():
            if view.members is instances:
                break
        else:
            return None
        self._refresh(view)
        heap, keys, role = view.heap, view.keys, view.role
        every = self.instances
        while heap:
            count, i = heap[0]
            inst = every[i]
            if keys[i] == count and inst.role == role and inst.accepting:
                return view.position[i]
            heapq.heappop(heap)
        return None

    @cython.locals(i=cython.Py_ssize_t, count=cython.long)
    def _refresh(self, view: _RoleHeap) -> None:
        """Read again the counts of the role's dirty instances; compact the heap if it is mostly stale."""
        if view.dirty:
            every, keys, heap, flagged, role = self.instances, view.keys, view.heap, view.flagged, view.role
            for i in view.dirty:
                flagged[i] = 0
                inst = every[i]
                if inst.role != role or not inst.accepting:
                    keys[i] = _UNSEEN  # not a member: pushed afresh when it joins
                    continue
                count = inst.outstanding
                if count != keys[i]:
                    keys[i] = count
                    heapq.heappush(heap, (count, i))
            view.dirty.clear()
        members = view.members if view.members is not None else self.members(view.role)
        if len(view.heap) > 2 * len(members) + 64:
            keys = view.keys
            view.heap = [(keys[inst.index], inst.index) for inst in members]
            heapq.heapify(view.heap)


def least_outstanding_scan(instances: Seq[Any]) -> int:
    """Position of the instance with the fewest unfinished requests, lowest on ties, by a scan."""
    best, best_load = 0, instances[0].outstanding
    for index in range(1, len(instances)):
        load = instances[index].outstanding
        if load < best_load:
            best, best_load = index, load
    return best


class LeastOutstandingRouter:
    """The instance with the fewest unfinished requests (lowest index on ties).

    With a :class:`LoadBoard` and the board's member list of a role as ``instances`` (what the
    front end and the handoff pass), the answer comes from the board's heap in O(log n); given
    any other list, or without a board, it scans. Both give the same choice
    (``tests/test_load_board.py``).
    """

    __slots__ = ("board",)

    def __init__(self, board: LoadBoard | None = None) -> None:
        self.board = board

    def choose(self, instances: Seq[Any], seq: Any = None) -> int:
        if self.board is not None:
            best = self.board.least_outstanding(instances)
            if best is not None:
                return best
        return least_outstanding_scan(instances)
