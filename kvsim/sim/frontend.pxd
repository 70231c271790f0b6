# Field types of the front end and its SimPy callbacks in the compiled backend, and the methods
# the arrivals, the callbacks and the instances call in C (Cython reads this beside frontend.py;
# the pure-Python reference ignores it and keeps __slots__). The typed level, board, instances and
# sequences are the compiled ones.

from kvsim.metrics.levels cimport TimeWeightedLevel
from kvsim.serving.instance cimport Instance
from kvsim.serving.load_board cimport LoadBoard
from kvsim.serving.sequence cimport Sequence

cdef class FrontEnd:
    cdef public object env, sequence_type, holder, abort_handoff, timeout_s, request_in_s, records, router
    cdef public object batcher
    cdef public object entry_role, lora_sharing
    cdef public TimeWeightedLevel in_system
    cdef public LoadBoard board
    cdef public list prompt_hashes, held_hashes
    cdef public double output_s
    cdef public long aborted, submitted, completed, rejected, block_tokens, adapter_count
    cdef public bint with_hashes
    cpdef submit(self, input_tokens, output_tokens, arrival_s=*, hashes=*, sequence_hashes=*, on_finish=*,
                 long adapter=*, long shared_tokens=*, bint rejected=*)
    cpdef route(self, Sequence seq)
    cpdef finished(self, Sequence seq, double now)
    cpdef _give_up(self, Sequence seq)
    cpdef _abort_on(self, long index, Sequence seq)
    cpdef _leave(self, Sequence seq)

cdef class _Route:
    cdef public FrontEnd front
    cdef public Sequence seq

cdef class _Leave:
    cdef public FrontEnd front
    cdef public Sequence seq

cdef class _GiveUp:
    cdef public FrontEnd front
    cdef public Sequence seq
