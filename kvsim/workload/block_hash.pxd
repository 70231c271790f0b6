# C types of the BLAKE2b written out in block_hash.py, for the compiled backend (Cython reads this
# beside block_hash.py; the pure-Python reference ignores it and runs the same functions on Python
# ints masked to 64 bits, or hashlib). _add, _rotr and _mix are typed and made inline by decorators
# in block_hash.py (a .pxd declares no inline function without its body).

cdef unsigned long long _IV[8]
cdef unsigned char _SIGMA[192]  # 12 rounds x 16 message word indices
cdef unsigned long long _CHAIN_P0, _CHAIN_P1, _CONTENT_P0, _CONTENT_P1
cdef int _SHIFT
cdef Py_ssize_t _MAX_WORDS

cdef void _compress(unsigned long long* h, const unsigned long long* m, unsigned long long t, bint last) noexcept nogil
cdef unsigned long long _digest(unsigned long long p0, unsigned long long p1, const unsigned long long* words,
                                Py_ssize_t nbytes) noexcept nogil
cdef unsigned long long _piece_digest(unsigned long long source, unsigned long long offset,
                                      unsigned long long size) noexcept nogil
cdef unsigned long long _link_digest(int flag, unsigned long long link, unsigned long long content) noexcept nogil
