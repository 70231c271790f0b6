# Field types of the filling's flows and work arrays in the compiled backend, and its C methods
# (Cython reads this beside filling.py; the pure-Python reference ignores it, keeps __slots__ and
# holds lists where these are C arrays). Links are interned to array slots 0 .. n - 1.

from libc.stdlib cimport malloc, free

cdef double* _doubles(Py_ssize_t n) except NULL
cdef Py_ssize_t* _indices(Py_ssize_t n) except NULL
cdef void _free(void* buf) noexcept

cdef class _Route:
    cdef public Py_ssize_t k  # distinct links (and resources) crossed
    cdef Py_ssize_t* links  # their slots, in order of first appearance
    cdef double* counts  # crossings (a resource's weight per byte) of each

cdef class _Flow:
    cdef public _Route route  # owns the arrays links and counts point into
    cdef public object event
    cdef public double nbytes, remaining, rate, finish_s, latency_s, cap
    cdef public Py_ssize_t k  # distinct links (and resources) crossed
    cdef Py_ssize_t* links  # their slots, in order of first appearance
    cdef double* counts  # crossings (a resource's weight per byte) of each

cdef class _Filling:
    cdef public Py_ssize_t n_links, n_order, tick, room_flows, room_cross
    # per link (slot)
    cdef double* capacity
    cdef double* spare
    cdef double* unfrozen
    cdef Py_ssize_t* left
    cdef Py_ssize_t* stamp  # the solve that last met the link (tick)
    cdef Py_ssize_t* first  # its flows are members[first:end]
    cdef Py_ssize_t* end
    cdef Py_ssize_t* order  # [:n_order]: the links of the last solve, in order of first appearance
    cdef double* fill  # per live link, by position
    # per flow (room_flows) and per crossing (room_cross) of one solve
    cdef Py_ssize_t* off  # flow i's crossings are lk[off[i]:off[i + 1]], ct[...]
    cdef double* rates
    cdef double* caps
    cdef Py_ssize_t* frozen
    cdef Py_ssize_t* capped
    cdef Py_ssize_t* lk
    cdef double* ct
    cdef Py_ssize_t* live
    cdef Py_ssize_t* members
    cdef void _release(self) noexcept
    cdef void _reserve(self, Py_ssize_t flows, Py_ssize_t crossings) except *
    cdef void solve(self, list flows) except *
    cdef Py_ssize_t _keep_loaded(self, Py_ssize_t n_live) noexcept

