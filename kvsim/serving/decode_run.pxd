# Field types of DecodeRun in the compiled backend, and the compiled types its C methods use:
# the typed Sequence, the levels, counters and engine time whose C methods read a run's C arrays,
# and the step-time fill (Cython reads this beside decode_run.py; the pure-Python reference
# ignores it and keeps __slots__ and lists).

from libc.stdlib cimport malloc, free
from kvsim.serving.sequence cimport Sequence
from kvsim.metrics.levels cimport TimeWeightedLevel, WindowCounter, _doubles
from kvsim.metrics.engine_time cimport EngineTime
from kvsim.models.step_time cimport fill_decode_steps, exposed_host_s

cdef class DecodeRun:
    cdef public object instance, batch, ends_s, parts, new_blocks
    cdef public list seqs, kv0, generated0, blocks0, own0, first_tokens
    cdef public long free0, last, applied, accounted, batches0, block_tokens, planned
    # compiled runs only: c_ends[i] when step i ends (c_ends[0]: when step 1 started); step i's
    # total, compute and memory time at [i - 1]; c_new[i] pages allocated by steps 2..i; c_start:
    # each sequence's KV tokens, tokens generated, pages and own tokens as step 1 runs (4 x seqs)
    cdef double* c_ends
    cdef double* c_total
    cdef double* c_compute
    cdef double* c_memory
    cdef long* c_new
    cdef long* c_start
    cdef double comm_s, kernels_s, overhead_s
    cdef bint host_overlap
