# Field types of Sequence in the compiled backend (Cython reads this beside sequence.py; the
# pure-Python reference ignores it). Token and page counts are C longs, flags C ints.

cdef class Sequence:
    cdef public long rid, prompt_tokens, output_tokens, generated, kv_tokens, prefill_target
    cdef public long kv_blocks, shared_tokens, preemptions, queued_tokens, not_before, adapter
    cdef public long remote_tokens, prompt_counted
    cdef public bint admitted, gated, stalled, swapped, aborted
    cdef public object on_finish, hashes, cache, sequence_hashes, decode_copy, value_keys, segments
