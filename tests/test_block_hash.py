"""Prompt block ids hashed by the kernel (kvsim/workload/block_hash.py) equal hashlib's, bit for bit.

The oracle is :mod:`hashlib` itself (``blake2b(digest_size=8, person=...)`` over the packed bytes),
worked out here independently of the kernel: the written-out BLAKE2b (:func:`blake2b64`) on any
message up to 512 bytes and any personalisation, and the three functions prefix.py calls --
``whole_blocks`` (the bulk), ``link_id`` and ``content_id`` -- on both backends, with the edge
values (0, 2**63 - 1, 2**64 - 1, root and child flags, counts 0, 1 and many) and the refusals that
make prefix.py raise its ValueErrors. Uncompiled, ``blake2b64`` runs the same source on Python
ints, so the algorithm is checked on a pure-Python install too.
"""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim import backend
from kvsim.workload import block_hash, prefix
from kvsim.workload.prefix import HASH_BITS, BlockChain, chain_hashes, content_id

PURE_INSTALL = bool(os.environ.get("KVSIM_NO_COMPILE"))
IMPLEMENTATIONS = [("python", backend.kernels("python").block_hash)]
if not PURE_INSTALL:
    IMPLEMENTATIONS.append(("compiled", backend.kernels("compiled").block_hash))
KERNEL = pytest.mark.parametrize("kernel", [k for _, k in IMPLEMENTATIONS], ids=[n for n, _ in IMPLEMENTATIONS])

U64 = st.one_of(st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1]), st.integers(0, 2**64 - 1))
U63 = st.one_of(st.sampled_from([0, 1, 2**63 - 1]), st.integers(0, 2**63 - 1))


def digest64(person: bytes, data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8, person=person).digest(), "little")


def link_oracle(flag: int, link: int, content: int) -> int:
    return digest64(b"kvsim.chain", struct.pack("<BQQ", flag, link, content)) >> (64 - HASH_BITS)


def content_oracle(pieces) -> int:
    data = b"".join(struct.pack("<QQQ", *piece) for piece in pieces)
    return digest64(b"kvsim.content", data) >> (64 - HASH_BITS)


def whole_blocks_oracle(flag, link, source, offset, size, count):
    out = []
    for k in range(count):
        link = link_oracle(flag, link, content_oracle([(source, offset + k * size, size)]))
        flag = 1
        out.append(link)
    return out


def test_both_backends_are_tested_where_built():
    assert [name for name, _ in IMPLEMENTATIONS] == (["python"] if PURE_INSTALL else ["python", "compiled"])
    if not PURE_INSTALL:
        assert IMPLEMENTATIONS[1][1].__name__ == "kvsim._compiled.workload_block_hash"
        assert IMPLEMENTATIONS[1][1].whole_blocks.__class__.__name__ != "function"  # C, not Python


# ---------------------------------------------------------------------------------------------
# the written-out BLAKE2b

@KERNEL
@pytest.mark.parametrize("size", [0, 1, 7, 8, 17, 24, 25, 48, 127, 128, 129, 255, 256, 257, 384, 511, 512])
@pytest.mark.parametrize("person", [b"", b"kvsim.chain", b"kvsim.content", b"sixteen-bytes-ok", b"\xff" * 16])
def test_blake2b64_equals_hashlib_at_block_edges(kernel, size, person):
    """Empty messages, the last word partial, exactly one block (not compressed until the end),
    one byte into a second block, the 512-byte maximum."""
    data = bytes((37 * i + size) % 256 for i in range(size))
    assert kernel.blake2b64(person, data) == digest64(person, data)


@KERNEL
@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=512), person=st.binary(max_size=16))
def test_blake2b64_equals_hashlib(kernel, data, person):
    assert kernel.blake2b64(person, data) == digest64(person, data)


@KERNEL
def test_blake2b64_refuses_what_it_does_not_take(kernel):
    with pytest.raises(ValueError, match="at most"):
        kernel.blake2b64(b"x" * 17, b"")
    with pytest.raises(ValueError, match="at most"):
        kernel.blake2b64(b"", bytes(513))


# ---------------------------------------------------------------------------------------------
# what prefix.py calls

@KERNEL
@settings(max_examples=200, deadline=None)
@given(flag=st.sampled_from([0, 1]), link=U63, content=U64)
def test_link_id_equals_hashlib(kernel, flag, link, content):
    assert kernel.link_id(flag, link, content) == link_oracle(flag, link, content)


@KERNEL
@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.tuples(U64, U64, U64), max_size=25))
def test_content_id_equals_hashlib(kernel, pieces):
    """Up to 21 pieces fill the written-out hash's 512 bytes; more go to hashlib (both checked)."""
    assert kernel.content_id(pieces) == content_oracle(pieces)


@KERNEL
@settings(max_examples=150, deadline=None)
@given(root=st.booleans(), link=U63, source=U64, size=st.sampled_from([1, 16, 512, 2**20]),
       count=st.sampled_from([0, 1, 2, 64]), offset=st.integers(0, 2**64 - 1))
def test_whole_blocks_equal_hashlib(kernel, root, link, source, size, count, offset):
    offset = min(offset, 2**64 - 1 - count * size)  # the caller keeps offset + count * size below 2**64
    flag, link = (0, 0) if root else (1, link)
    out = [123]  # appended to, never replaced
    last = kernel.whole_blocks(flag, link, source, offset, size, count, out)
    expected = whole_blocks_oracle(flag, link, source, offset, size, count)
    assert out == [123] + expected
    assert last == (expected[-1] if expected else link)
    assert all(type(x) is int and 0 <= x < 2**HASH_BITS for x in out)


@KERNEL
@pytest.mark.parametrize("root", [True, False])
@pytest.mark.parametrize("source", [0, 2**63 - 1, 2**64 - 1])
def test_whole_blocks_at_the_edges(kernel, root, source):
    for offset, size, count in [(0, 16, 1), (2**64 - 1 - 64 * 16, 16, 64), (2**63 - 1, 1, 3), (0, 2**62, 3)]:
        flag, link = (0, 0) if root else (1, 2**63 - 1)
        out: list[int] = []
        kernel.whole_blocks(flag, link, source, offset, size, count, out)
        assert out == whole_blocks_oracle(flag, link, source, offset, size, count)


@KERNEL
@pytest.mark.parametrize("bad", [2**64, -1, 3.0, np.float64(2.0), "3", None])
def test_values_struct_refuses_are_refused(kernel, bad):
    """-1 where ``struct``'s ``<BQQ``/``<QQQ`` refuse a value (out of range or not an int), so that
    prefix.py raises its ValueError on both backends."""
    assert kernel.link_id(1, 5, bad) == -1
    assert kernel.link_id(1, bad, 5) == -1
    assert kernel.content_id([(1, 2, 3), (1, bad, 3)]) == -1
    assert kernel.content_id([(1, 2, 3)] * 30 + [(bad, 2, 3)]) == -1


@KERNEL
def test_index_ints_are_taken_as_struct_takes_them(kernel):
    assert kernel.link_id(1, np.int64(5), np.uint64(2**64 - 1)) == link_oracle(1, 5, 2**64 - 1)
    assert kernel.link_id(True, 5, True) == link_oracle(1, 5, 1)
    assert kernel.content_id([(np.int64(1), np.uint64(2), True)]) == content_oracle([(1, 2, 1)])


@KERNEL
def test_a_piece_of_the_wrong_shape_fails_as_unpacking_does(kernel):
    with pytest.raises(ValueError, match="unpack"):
        kernel.content_id([(1, 2)])
    with pytest.raises(TypeError):
        kernel.content_id(None)


def test_the_kernel_shifts_as_prefix_does():
    assert block_hash._SHIFT == 64 - HASH_BITS


# ---------------------------------------------------------------------------------------------
# prefix.py on each backend's kernel

@pytest.fixture(params=[name for name, _ in IMPLEMENTATIONS])
def hashing(request, monkeypatch):
    """prefix.py hashing with one backend's kernel."""
    kernel = dict(IMPLEMENTATIONS)[request.param]
    monkeypatch.setattr(prefix, "_hasher", lambda: kernel)
    return kernel


def test_prefix_ids_equal_hashlib_on_each_backend(hashing):
    doc, suffix = 2**64 - 1, 7
    chain = BlockChain(16).append(doc, 7168)
    fork = chain.fork().append(suffix, 1024 + 5)  # 64 whole blocks and a partial one
    ids = fork.hash_ids().tolist()
    expected = whole_blocks_oracle(0, 0, doc, 0, 16, 448)
    expected += whole_blocks_oracle(1, expected[-1], suffix, 0, 16, 64)
    expected.append(link_oracle(1, expected[-1], content_oracle([(suffix, 1024, 5)])))
    assert ids == expected
    assert chain_hashes(None, [0, 2**64 - 1]) == [link_oracle(0, 0, 0), link_oracle(1, link_oracle(0, 0, 0), 2**64 - 1)]
    assert chain_hashes(2**63 - 1, []) == []
    assert content_id([]) == content_oracle([])


def test_prefix_errors_on_each_backend(hashing):
    with pytest.raises(ValueError, match="content ids ints"):
        chain_hashes(None, [2**64])
    with pytest.raises(ValueError, match="content ids ints"):
        chain_hashes(3.0, [1])
    with pytest.raises(ValueError, match="parent must be None"):
        chain_hashes(2**63, [1])
    with pytest.raises(ValueError, match="pieces must be"):
        content_id([(1, -1, 3)])
    with pytest.raises(ValueError):
        BlockChain(4).append(2**64, 8)
    with pytest.raises(ValueError):
        BlockChain(4, parent=2**63).append(1, 8)
    with pytest.raises(ValueError, match="content ids ints"):
        BlockChain(4, parent=3.0).append(1, 8)  # not an int: the general path's error, not a fast path's


def test_a_parent_numpy_int_gives_the_ids_of_the_int(hashing):
    assert (BlockChain(4, parent=np.int64(99)).append(5, 40).hash_ids().tolist()
            == BlockChain(4, parent=99).append(5, 40).hash_ids().tolist())


def test_a_stale_hashing_kernel_is_refused(monkeypatch):
    """The hashing kernel is one of the compiled backend's: built from other sources than the
    installed ones (its .py or .pxd edited since), the backend is refused as for any kernel."""
    if PURE_INSTALL:
        pytest.skip("a pure-Python install has no build to go stale")
    assert "kvsim.workload.block_hash" in backend.KERNELS
    real = backend._source_digest
    backend.compiled_problem.cache_clear()
    monkeypatch.setattr(backend, "_source_digest",
                        lambda module: "0" * 64 if module == "kvsim.workload.block_hash" else real(module))
    try:
        problem = backend.compiled_problem()
        assert problem is not None and "workload_block_hash was built from another version" in problem
    finally:
        monkeypatch.undo()
        backend.compiled_problem.cache_clear()
    assert backend.compiled_problem() is None
