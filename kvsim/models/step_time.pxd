# The C function of the compiled backend that fills a decode run's step times into C arrays
# (Cython reads this beside step_time.py; the pure-Python reference ignores it, where the same
# function fills lists).

from libc.stdlib cimport free
from kvsim.metrics.levels cimport _doubles

cdef void fill_decode_steps(tuple terms, double context_tokens, double seqs, Py_ssize_t steps,
                            double* total_s, double* compute_s, double* memory_s) except *
