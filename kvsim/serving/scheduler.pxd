# Field types of BatchScheduler in the compiled backend (Cython reads this beside scheduler.py;
# the pure-Python reference ignores it). The typed Sequence and BlockPool are the compiled ones.

from kvsim.kv.block_pool cimport BlockPool
from kvsim.serving.sequence cimport Sequence

cdef class Batch:
    cdef public list prefills, decodes
    cdef public object shape

cdef class BatchScheduler:
    cdef public BlockPool pool
    cdef public object adapters, events, hook, span, waiting, loading, detached, observer
    cdef public long max_batched_tokens, max_num_seqs, stalled, waiting_prompt_tokens, batches_formed
    cdef public bint prefill_only
    cdef public list running
    # C methods for the compiled engine loop (kvsim/serving/engine_loop.py), Python methods too
    cpdef schedule(self, now)
    cpdef complete(self, Batch batch, now)
