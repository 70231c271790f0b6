# Field types of the levels and counters in the compiled backend, and their C methods over C
# arrays (Cython reads this beside levels.py; the pure-Python reference ignores it and keeps
# __slots__, where the same methods take lists).

from libc.stdlib cimport malloc, free

cdef double* _doubles(Py_ssize_t n)

cdef class TimeWeightedLevel:
    cdef public double window_start_s, window_end_s, value, _t, _area, _peak
    cpdef set(self, double t, double value)  # a C method for the kernels, a Python method too
    cdef void set_steps(self, double* times_s, double* first, double* then, Py_ssize_t n) noexcept

cdef class WindowCounter:
    cdef public double window_start_s, window_end_s
    cdef public object total, in_window  # Python ints: a count never overflows
    cpdef add(self, double t, amount)  # a C method for the kernels, a Python method too
    cdef void add_at_steps(self, double* times_s, Py_ssize_t n, long amount) except *
