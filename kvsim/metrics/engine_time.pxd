# Field types of EngineTime in the compiled backend, and its C method over C arrays (Cython reads
# this beside engine_time.py; the pure-Python reference ignores it and keeps __slots__, where the
# same method takes lists).

from libc.stdlib cimport free
from kvsim.metrics.levels cimport _doubles
from kvsim.models.step_time cimport exposed_host_s

cdef class EngineTime:
    cdef public double busy_s, busy_in_window_s, window_start_s, window_end_s
    cdef public dict by_cause_s
    cdef void add_steps(self, double* ends_s, double* durations_s, double* compute_s, double* memory_s,
                        Py_ssize_t n, double comm_s, double kernels_s, double overhead_s,
                        bint host_overlap=*) except *
