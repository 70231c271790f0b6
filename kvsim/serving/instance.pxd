# Field types of Instance and its recording events in the compiled backend, and the methods other
# kernels call in C (Cython reads this beside instance.py; the pure-Python reference ignores it
# and keeps __slots__). The typed pool, scheduler, level and engine time are the compiled ones.

from kvsim.kv.block_pool cimport BlockPool
from kvsim.metrics.engine_time cimport EngineTime
from kvsim.metrics.levels cimport TimeWeightedLevel, WindowCounter
from kvsim.serving.scheduler cimport Batch, BatchScheduler, SchedulerEvents
from kvsim.serving.sequence cimport Sequence

cdef class Instance

cdef class _RecordingEvents(SchedulerEvents):
    cdef public object records, counters
    cdef public WindowCounter input_tokens, output_tokens
    cdef public Instance instance

cdef class Instance:
    cdef public object env, role, step_model, records, counters, on_finish, on_prefilled, on_final_chunk
    cdef public object gpus, kernels, _plan_run, _decode_run, _sleeping, adapters, board, _idle, _wake, process
    cdef public object jitter
    cdef public long index, decode_horizon
    cdef public double output_s
    cdef public bint async_scheduling, _in_flight, coalesce, _final, _accepting
    cdef public BlockPool pool
    cdef public TimeWeightedLevel kv_utilization
    cdef public EngineTime engine_time
    cdef public BatchScheduler scheduler
    # C methods for the other kernels (the engine loop, the front end, the recording events);
    # Python methods too
    cpdef submit(self, Sequence seq)
    cpdef wake(self)
    cpdef interrupt(self)
    cpdef _load_changed(self)
    cpdef _check_idle(self)
    cpdef _final_chunks(self, Batch batch, double now)
    cpdef _recompute_starts(self, Batch batch, double now)
    cpdef _aim(self)
