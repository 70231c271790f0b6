# Field types of DecodeRun in the compiled backend, and the compiled Sequence for the typed locals
# of DecodeRun.plan and DecodeRun.settle (Cython reads this beside decode_run.py; the pure-Python
# reference ignores it and keeps __slots__).

from kvsim.serving.sequence cimport Sequence

cdef class DecodeRun:
    cdef public object instance, batch, ends_s, parts, new_blocks
    cdef public list seqs, kv0, generated0, blocks0, own0, first_tokens
    cdef public long free0, last, applied, accounted, batches0, block_tokens, planned
