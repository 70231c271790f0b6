# Field types of the flow network in the compiled backend, and its C methods over C arrays
# (Cython reads this beside flows.py; the pure-Python reference ignores it, keeps __slots__ and
# holds lists where these are C arrays). Links are interned to array slots 0 .. n - 1.

from kvsim.network.filling cimport _Flow, _Filling, _Route, _doubles, _free

cdef dict _intern(object links, dict index)

cdef class _Wake:
    cdef public object callbacks, _value
    cdef public bint _ok
    cdef public long gen

cdef class FlowNetwork:
    cdef public object env
    cdef public double window_start_s, window_end_s
    cdef dict _capacity, _index
    cdef _Filling _filling
    cdef double* _bytes
    cdef double* _area
    cdef double* _load
    cdef list _flows
    cdef double _t, _wake_at
    cdef long _gen
    cdef object _woken
    cdef Py_ssize_t _check(self, object link) except -1
    cdef double _overlap(self, double t0, double t1) noexcept
    cdef void _advance(self, double now) except *
    cdef void _schedule(self, double delay_s) except *
    cdef void _complete(self, object event, double latency_s) except *
    cdef void _check_numbers(self, object nbytes, object latency_s, object rate_cap_Bps) except *
    cdef object _start(self, _Route route, double nbytes, double latency_s, double rate_cap_Bps)
