# Field types of BatchScheduler in the compiled backend (Cython reads this beside scheduler.py;
# the pure-Python reference ignores it). The typed Sequence and BlockPool are the compiled ones.

from kvsim.kv.block_pool cimport BlockPool
from kvsim.serving.sequence cimport Sequence

cdef class SchedulerEvents:
    # C methods the scheduler calls (a subclass overrides them: the instance's recording events
    # in C, a test's log in Python); Python methods too
    cpdef admitted(self, Sequence seq, double now)
    cpdef first_token(self, Sequence seq, double now)
    cpdef prompt_done(self, Sequence seq, double now)
    cpdef tokens_emitted(self, long count, double now)
    cpdef preempted(self, Sequence seq)
    cpdef prefill_computed(self, Sequence seq, long tokens, double now)
    cpdef finished(self, Sequence seq, double now)
    cpdef prefilled(self, Sequence seq, double now)
    cpdef decode_started(self, Sequence seq, double now)

cdef class Batch:
    cdef public list prefills, decodes
    cdef public object shape

cdef class BatchScheduler:
    cdef public BlockPool pool
    cdef public SchedulerEvents events
    cdef public object adapters, hook, span, waiting, loading, detached, observer
    cdef public long max_batched_tokens, max_num_seqs, max_chunk_tokens, stalled, waiting_prompt_tokens
    cdef public long batches_formed
    cdef public bint prefill_only
    cdef public list running
    # C methods for the compiled engine loop (kvsim/serving/engine_loop.py), Python methods too
    cpdef schedule(self, now)
    cpdef complete(self, Batch batch, now)
