# Field types of the load board, its role views and the least-outstanding router in the compiled
# backend, and the methods the instances and the front end call in C (Cython reads this beside
# load_board.py; the pure-Python reference ignores it and keeps __slots__).

cdef class _RoleHeap:
    cdef public object role, members
    cdef public dict position
    cdef public list heap, keys, dirty
    cdef public bytearray flagged

cdef class LoadBoard:
    cdef public list instances
    cdef public dict _roles
    cpdef changed(self, instance)
    cpdef moved(self, instance)
    cpdef members(self, role)
    cpdef least_outstanding(self, instances)
    cpdef _refresh(self, _RoleHeap view)

cdef class LeastOutstandingRouter:
    cdef public LoadBoard board
    cpdef choose(self, instances, seq=*)
