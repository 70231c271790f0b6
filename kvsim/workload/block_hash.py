"""BLAKE2b for prompt block ids: the hashing of :mod:`kvsim.workload.prefix`, as a kernel.

The pure-Python reference hashes with :mod:`hashlib` (``blake2b(digest_size=8, person=...)``).
Compiled (:mod:`kvsim.backend`), the same functions run BLAKE2b written out below as typed C-level
code, with the ids equal to hashlib's bit for bit (the tests' oracle is hashlib): a block's two
digests -- its content, then its link to the block before -- cost two compressions of one
128-byte block each instead of two hashlib objects and their Python calls.

No installable library offers BLAKE2b with a personalisation to Cython as a C API: libb2 is a
system library (a build dependency the pip install does not have), libsodium (as PyNaCl bundles
it) is reached through cffi from Python only and has no digest shorter than 16 bytes, and
hashlib's ``_blake2`` exports no C API.

The algorithm is written from its specification: RFC 7693 ("The BLAKE2 Cryptographic Hash and
Message Authentication Code (MAC)", M-J. Saarinen and J-P. Aumasson, 2015): the initial vector
(section 2.6), the message schedule SIGMA (2.7), the mixing function G (3.1), the compression F
(3.2) and the padding and final flag of the last block (3.3). The parameter block that carries the
digest length and the 16-byte personalisation (words 6 and 7 of the initial state) is section 2.8
of "BLAKE2: simpler, smaller, fast as MD5" (J-P. Aumasson, S. Neves, Z. Wilcox-O'Hearn,
C. Winnerlein, 2013), the parameters hashlib's ``person=`` sets. Here: no key, no salt, an 8-byte
digest (the first state word, little-endian), a personalisation zero-padded to 16 bytes.

Run uncompiled, :func:`blake2b64` (the written-out algorithm) works on Python ints masked to 64
bits, so the tests check the same source against hashlib on both backends.
"""

from __future__ import annotations

import hashlib
import operator
import struct

import cython

__all__ = ["CHAIN_PERSON", "CONTENT_PERSON", "blake2b64", "content_id", "link_id", "whole_blocks"]

CHAIN_PERSON = b"kvsim.chain"
"""Personalisation of a block's link digest ``H(flag, parent id, content id)``."""
CONTENT_PERSON = b"kvsim.content"
"""Personalisation of a block's content digest ``H(pieces)``."""

_SHIFT = 1
"""An id is the 64-bit digest shifted to 63 bits (``prefix.HASH_BITS``): a non-negative int64."""
_MAX_WORDS = 64
"""Message words the written-out hash takes at once (512 bytes: 21 pieces; more go to hashlib)."""

# RFC 7693, 2.6: the initial vector (SHA-512's)
_IV = [0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
       0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179]
# RFC 7693, 2.7: the message word permutation of each round (rounds 10 and 11 reuse rows 0 and 1)
_SIGMA = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
          14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3,
          11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4,
          7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8,
          9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13,
          2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9,
          12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11,
          13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10,
          6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5,
          10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0,
          0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
          14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3]


def _person_words(person: bytes) -> tuple[int, int]:
    """The personalisation as the two little-endian words XORed into state words 6 and 7."""
    padded = person.ljust(16, b"\0")
    return int.from_bytes(padded[:8], "little"), int.from_bytes(padded[8:], "little")


_CHAIN_P0, _CHAIN_P1 = _person_words(CHAIN_PERSON)
_CONTENT_P0, _CONTENT_P1 = _person_words(CONTENT_PERSON)

# the reference's hashers (hashlib), copied per digest
_CHAIN = hashlib.blake2b(digest_size=8, person=CHAIN_PERSON)
_CONTENT = hashlib.blake2b(digest_size=8, person=CONTENT_PERSON)
_PACK_LINK = struct.Struct("<BQQ").pack
_PACK_PIECE = struct.Struct("<QQQ").pack


@cython.cfunc
@cython.inline
@cython.nogil
@cython.exceptval(check=False)
@cython.locals(a=cython.ulonglong, b=cython.ulonglong)
@cython.returns(cython.ulonglong)
def _add(a, b):
    """``a + b`` modulo 2**64 (C's unsigned addition; Python ints need the mask)."""
    if cython.compiled:
        return a + b
    return (a + b) & 0xFFFFFFFFFFFFFFFF


@cython.cfunc
@cython.inline
@cython.nogil
@cython.exceptval(check=False)
@cython.locals(x=cython.ulonglong, n=cython.int)
@cython.returns(cython.ulonglong)
def _rotr(x, n):
    """``x`` rotated right by ``n`` bits (0 < n < 64) in 64 bits."""
    if cython.compiled:
        return (x >> n) | (x << (64 - n))
    return (x >> n) | ((x << (64 - n)) & 0xFFFFFFFFFFFFFFFF)


@cython.cfunc
@cython.inline
@cython.nogil
@cython.exceptval(check=False)
@cython.locals(v=cython.p_ulonglong, a=cython.int, b=cython.int, c=cython.int, d=cython.int, x=cython.ulonglong,
               y=cython.ulonglong)
@cython.returns(cython.void)
def _mix(v, a, b, c, d, x, y) -> None:
    """RFC 7693, 3.1: the mixing function G on state words ``a, b, c, d`` with message words ``x, y``."""
    v[a] = _add(_add(v[a], v[b]), x)
    v[d] = _rotr(v[d] ^ v[a], 32)
    v[c] = _add(v[c], v[d])
    v[b] = _rotr(v[b] ^ v[c], 24)
    v[a] = _add(_add(v[a], v[b]), y)
    v[d] = _rotr(v[d] ^ v[a], 16)
    v[c] = _add(v[c], v[d])
    v[b] = _rotr(v[b] ^ v[c], 63)


@cython.locals(i=cython.int, s=cython.int)
def _compress(h, m, t, last) -> None:
    """RFC 7693, 3.2: the compression F of message block ``m`` (16 words) into state ``h`` (8 words),
    ``t`` bytes hashed so far (fewer than 2**64 here: the counter's high word stays 0), ``last`` for
    the final block."""
    v = cython.declare(cython.ulonglong[16])
    for i in range(8):
        v[i] = h[i]
        v[i + 8] = _IV[i]
    v[12] ^= t
    if last:
        if cython.compiled:
            v[14] = ~v[14]
        else:
            v[14] ^= 0xFFFFFFFFFFFFFFFF
    for i in range(12):
        s = 16 * i
        _mix(v, 0, 4, 8, 12, m[_SIGMA[s]], m[_SIGMA[s + 1]])
        _mix(v, 1, 5, 9, 13, m[_SIGMA[s + 2]], m[_SIGMA[s + 3]])
        _mix(v, 2, 6, 10, 14, m[_SIGMA[s + 4]], m[_SIGMA[s + 5]])
        _mix(v, 3, 7, 11, 15, m[_SIGMA[s + 6]], m[_SIGMA[s + 7]])
        _mix(v, 0, 5, 10, 15, m[_SIGMA[s + 8]], m[_SIGMA[s + 9]])
        _mix(v, 1, 6, 11, 12, m[_SIGMA[s + 10]], m[_SIGMA[s + 11]])
        _mix(v, 2, 7, 8, 13, m[_SIGMA[s + 12]], m[_SIGMA[s + 13]])
        _mix(v, 3, 4, 9, 14, m[_SIGMA[s + 14]], m[_SIGMA[s + 15]])
    for i in range(8):
        h[i] ^= v[i] ^ v[i + 8]


@cython.locals(i=cython.Py_ssize_t, k=cython.Py_ssize_t, done=cython.Py_ssize_t, t=cython.ulonglong)
def _digest(p0, p1, words, nbytes):
    """The 8-byte BLAKE2b digest, as a little-endian int, of the ``nbytes``-byte message whose
    little-endian words (the last zero-padded) are ``words``; ``p0, p1``: the personalisation's
    words. Every block but the last is compressed as it fills; the last (up to 128 bytes, zero-padded,
    at least one even for an empty message) carries the final flag (RFC 7693, 3.3)."""
    h = cython.declare(cython.ulonglong[8])
    m = cython.declare(cython.ulonglong[16])
    for i in range(8):
        h[i] = _IV[i]
    h[0] ^= 0x01010008  # parameter block word 0: digest length 8, no key, fanout 1, depth 1
    h[6] ^= p0
    h[7] ^= p1
    done = 0
    while nbytes - done > 128:
        for k in range(16):
            m[k] = words[done // 8 + k]
        done += 128
        t = done
        _compress(h, m, t, False)
    for k in range(16):
        m[k] = words[done // 8 + k] if 8 * k < nbytes - done else 0
    t = nbytes
    _compress(h, m, t, True)
    return h[0]


@cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t)
def blake2b64(person: bytes, data: bytes) -> int:
    """BLAKE2b of ``data`` with an 8-byte digest and personalisation ``person`` (at most 16 bytes),
    as the little-endian int of the digest, computed by the written-out algorithm (in C when
    compiled): ``int.from_bytes(hashlib.blake2b(data, digest_size=8, person=person).digest(),
    "little")``. ``data`` is at most 512 bytes."""
    if len(person) > 16 or len(data) > 8 * _MAX_WORDS:
        raise ValueError(f"person is at most 16 bytes and data at most {8 * _MAX_WORDS} (got {len(person)}, "
                         f"{len(data)})")
    p0, p1 = _person_words(person)
    words = cython.declare(cython.ulonglong[64])  # _MAX_WORDS
    n = len(data)
    padded = data.ljust(8 * _MAX_WORDS, b"\0")
    for i in range(_MAX_WORDS):
        words[i] = int.from_bytes(padded[8 * i:8 * i + 8], "little")
    return _digest(p0, p1, words, n)


@cython.locals(flag=cython.int, link=cython.ulonglong, source=cython.ulonglong, offset=cython.ulonglong,
               size=cython.ulonglong, count=cython.Py_ssize_t, k=cython.Py_ssize_t, content=cython.ulonglong,
               out=list)
def whole_blocks(flag: int, link: int, source: int, offset: int, size: int, count: int, out: list) -> int:
    """Ids of ``count`` blocks, each the one piece ``(source, offset + k * size, size)``, chained
    from ``link`` (``flag``: 0 for the root, when ``link`` is 0; 1 after a block), appended to
    ``out``; returns the last id. The caller has checked every value's range (``link`` below
    2**63, ``offset + count * size`` below 2**64)."""
    if cython.compiled:
        for k in range(count):
            content = _piece_digest(source, offset, size) >> _SHIFT
            link = _link_digest(flag, link, content) >> _SHIFT
            flag = 1
            out.append(link)
            offset += size
        return link
    content_copy, chain_copy = _CONTENT.copy, _CHAIN.copy
    pack_piece, pack_link, from_bytes = _PACK_PIECE, _PACK_LINK, int.from_bytes
    for _ in range(count):
        h = content_copy()
        h.update(pack_piece(source, offset, size))
        h2 = chain_copy()
        h2.update(pack_link(flag, link, from_bytes(h.digest(), "little") >> _SHIFT))
        link = from_bytes(h2.digest(), "little") >> _SHIFT
        flag = 1
        out.append(link)
        offset += size
    return link


@cython.locals(words=cython.ulonglong[16])
def _piece_digest(source, offset, size):
    """The content digest of one ``<QQQ`` piece (24 bytes: one block)."""
    words = [source, offset, size, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    return _digest(_CONTENT_P0, _CONTENT_P1, words, 24)


@cython.locals(words=cython.ulonglong[16])
def _link_digest(flag, link, content):
    """The link digest of ``<BQQ`` (flag, parent id, content id): 17 bytes, one block; the bytes
    shifted into little-endian words by hand."""
    if cython.compiled:
        words = [flag | (link << 8), (link >> 56) | (content << 8), content >> 56, 0, 0, 0, 0, 0, 0, 0, 0,
                 0, 0, 0, 0, 0]
    else:
        words = [(flag | (link << 8)) & 0xFFFFFFFFFFFFFFFF, ((link >> 56) | (content << 8)) & 0xFFFFFFFFFFFFFFFF,
                 content >> 56, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    return _digest(_CHAIN_P0, _CHAIN_P1, words, 17)


def _u64(value) -> int:
    """``value`` as an int in ``[0, 2**64)`` if ``struct``'s ``Q`` takes it (``__index__``), else -1."""
    try:
        value = operator.index(value)
    except TypeError:
        return -1
    return value if 0 <= value < 2**64 else -1


@cython.locals(f=cython.int, parent=cython.ulonglong, c=cython.ulonglong)
def link_id(flag: int, link: int, content: int) -> int:
    """Id of a block with content id ``content`` after the block ``link`` (``flag`` 1), or first
    (``flag`` 0, ``link`` 0); -1 if a value is not an int ``struct`` packs as ``<BQQ``."""
    if cython.compiled:
        if _u64(link) < 0 or _u64(content) < 0 or not 0 <= _u64(flag) < 256:
            return -1
        f, parent, c = flag, link, content
        return _link_digest(f, parent, c) >> _SHIFT
    try:
        data = _PACK_LINK(flag, link, content)
    except struct.error:
        return -1
    h = _CHAIN.copy()
    h.update(data)
    return int.from_bytes(h.digest(), "little") >> _SHIFT


@cython.locals(n=cython.Py_ssize_t, i=cython.Py_ssize_t)
def content_id(pieces) -> int:
    """Content id of the ``(source, offset, length)`` pieces in order; -1 if a value is not an int
    in ``[0, 2**64)`` (as ``struct``'s ``<QQQ`` would refuse it). Unpacking errors propagate."""
    if cython.compiled:
        words = cython.declare(cython.ulonglong[64])  # _MAX_WORDS
        values = [value for source, offset, length in pieces for value in (source, offset, length)]
        n = len(values)
        if n <= _MAX_WORDS:
            for i in range(n):
                if _u64(values[i]) < 0:
                    return -1
                words[i] = values[i]
            return _digest(_CONTENT_P0, _CONTENT_P1, words, 8 * n) >> _SHIFT
        pieces = [values[i:i + 3] for i in range(0, n, 3)]  # many pieces: hashlib, as the reference
    try:
        data = b"".join(_PACK_PIECE(source, offset, length) for source, offset, length in pieces)
    except struct.error:
        return -1
    h = _CONTENT.copy()
    h.update(data)
    return int.from_bytes(h.digest(), "little") >> _SHIFT
