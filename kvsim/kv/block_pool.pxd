# Field types of BlockPool in the compiled backend (Cython reads this beside block_pool.py; the
# pure-Python reference ignores it).

cdef class BlockPool:
    cdef public long num_blocks, block_size_tokens, _free
    cdef public object reclaim, resident, observer
