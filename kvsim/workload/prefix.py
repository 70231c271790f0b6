"""Prefix-chained block ids: how a prompt's KV blocks are named, so that equal ids mean equal prefixes.

A prompt of ``L`` tokens is cut into ``ceil(L / block_tokens)`` blocks: ``L // block_tokens`` full
blocks and, when ``L`` is not a multiple of ``block_tokens``, one *partial* final block holding the
remaining ``L % block_tokens`` tokens. Block ``i`` is named by

    id[0] = H(root,     content[0])
    id[i] = H(id[i-1],  content[i])

so an id identifies a block's content *and everything before it*: two prompts share block ``i``'s id
exactly when they share blocks ``0..i`` (up to a 2^-63 hash collision), and once two prompts diverge
every later id differs. ``H`` is BLAKE2b (8-byte digest, personalised), shifted to 63 bits so every id
is a non-negative ``int64``; it is deterministic across runs, processes and platforms (no Python
``hash()``, no salt). The block digests are computed by :mod:`kvsim.workload.block_hash`: hashlib in
the pure-Python reference, BLAKE2b written out in C in the compiled backend, equal bit for bit.

Content ids. Synthetic prompts have no real tokens, so a block's content is described by the *pieces*
it is made of: ``(source, offset, length)`` triples, where ``source`` names a token sequence (a shared
document, a system prompt, one request's unique suffix, a session's k-th message; see
:func:`source_id`) and ``offset``/``length`` the range of its tokens that lands in the block. A block
may straddle two sources (a document's tail and the suffix's head). Contiguous ranges of one source
are merged into one piece, so the same tokens give the same pieces however they were appended. The
content id is a hash of the piece list, so:

- a full block (pieces covering ``block_tokens`` tokens) and a partial final block (covering fewer)
  never share a content id, hence never an id, unless a hash collides;
- two partial final blocks share an id only when they hold the same tokens after the same prefix,
  i.e. when the prompts are equal.

Trace files (Mooncake, Bailian) bring their own ids, remapped by their publishers; they obey the same
rule (equal id = equal block and prefix) but are not produced by this module, and the block size is
the trace's own (512 tokens for Mooncake, 16 for Bailian). A workload records its ``block_tokens``;
ids of different block sizes must never be mixed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from functools import cache
from typing import NamedTuple, Protocol, cast

import numpy as np

__all__ = [
    "chain_hashes", "content_id", "source_id", "block_count", "floor_blocks", "Segment", "prompt_hashes",
    "BlockChain", "HASH_BITS",
]

HASH_BITS = 63
"""Every id is an int in ``[0, 2**63)``, so it fits a signed ``int64``."""

_ROOT_FLAG, _CHILD_FLAG = 0, 1
_SOURCE = hashlib.blake2b(digest_size=8, person=b"kvsim.source")


def _digest(base: hashlib.blake2b, data: bytes) -> int:
    h = base.copy()
    h.update(data)
    return int.from_bytes(h.digest(), "little") >> (64 - HASH_BITS)


class BlockHasher(Protocol):
    """The functions of the block hashing kernel (:mod:`kvsim.workload.block_hash`) prompts use."""

    def link_id(self, flag: int, link: int, content: int) -> int: ...

    def content_id(self, pieces: Iterable[tuple[int, int, int]]) -> int: ...

    def whole_blocks(self, flag: int, link: int, source: int, offset: int, size: int, count: int,
                     out: list[int]) -> int: ...


@cache
def _hasher() -> BlockHasher:
    """The block hashing kernel (:mod:`kvsim.workload.block_hash`) of the backend ``auto`` resolves
    to when this process first hashes (``KVSIM_BACKEND``; compiled where built, else the hashlib
    reference). The ids are the same either way (tests/test_block_hash.py), so the choice is made
    once; a workload is drawn apart from the engine, so a scenario's ``engine.backend`` does not
    choose it."""
    from kvsim.backend import kernels, resolve

    # the registry loads the module by name (ModuleType to mypy); either backend's is a copy of
    # kvsim.workload.block_hash, whose functions BlockHasher names (tests/test_block_hash.py)
    return cast(BlockHasher, kernels(resolve("auto")).block_hash)


def chain_hashes(parent: int | None, content_ids: Sequence[int]) -> list[int]:
    """Chain block ids: ``id[i] = H(id[i-1], content_ids[i])``, starting from ``parent``.

    Parameters
    ----------
    parent : int or None
        The id of the block just before the first one, or ``None`` for the first block of a prompt
        (the root; a chain from ``None`` never equals a chain from any int parent).
    content_ids : sequence of int
        One content id per block, each in ``[0, 2**64)``.

    Returns
    -------
    list of int
        One id per block, each in ``[0, 2**63)``. Deterministic across runs and platforms.

    Examples
    --------
    >>> a = chain_hashes(None, [1, 2, 3])
    >>> chain_hashes(a[0], [2, 3]) == a[1:]
    True
    """
    out: list[int] = []
    if parent is not None and not 0 <= parent < 2**HASH_BITS:
        raise ValueError(f"parent must be None or an int in [0, 2**{HASH_BITS}) (got {parent!r})")
    flag, link = (_ROOT_FLAG, 0) if parent is None else (_CHILD_FLAG, parent)
    link_id = _hasher().link_id
    for content in content_ids:
        link = link_id(flag, link, content)
        if link < 0:  # a value struct's <BQQ would refuse
            raise ValueError(f"parent must be None or an int in [0, 2**{HASH_BITS}) and content ids ints in "
                             f"[0, 2**64) (got parent={parent!r})")
        flag = _CHILD_FLAG
        out.append(link)
    return out


def content_id(pieces: Iterable[tuple[int, int, int]]) -> int:
    """Content id of a block made of ``(source, offset, length)`` pieces, in order."""
    content = _hasher().content_id(pieces)
    if content < 0:
        raise ValueError("pieces must be (source, offset, length) of non-negative ints below 2**64")
    return content


def source_id(*parts: str | int) -> int:
    """A stable int naming a token sequence, from a tuple of strings and ints.

    ``source_id("shared_documents.document", 3)`` names document 3; equal parts give equal ids in
    every run and on every platform.
    """
    for part in parts:
        if not isinstance(part, (str, int)) or isinstance(part, bool):
            raise TypeError(f"source parts must be str or int, got {type(part).__name__}")
    return _digest(_SOURCE, repr(parts).encode("utf-8"))


def block_count(tokens: int, block_tokens: int) -> int:
    """Number of blocks of a ``tokens``-long prompt: ``ceil(tokens / block_tokens)``."""
    return -(-int(tokens) // int(block_tokens))


class Segment(NamedTuple):
    """``tokens`` consecutive tokens of sequence ``source``, starting at its token ``offset``."""

    source: int
    tokens: int
    offset: int = 0


def prompt_hashes(segments: Iterable[Segment | tuple[int, int] | tuple[int, int, int]], block_tokens: int, parent: int | None = None) -> np.ndarray:
    """Block ids (``int64``, ``ceil(total / block_tokens)`` of them) of the concatenated segments.

    Examples
    --------
    >>> doc, suffix = source_id("doc", 0), source_id("suffix", 7)
    >>> ids = prompt_hashes([Segment(doc, 40), Segment(suffix, 10)], block_tokens=16)
    >>> len(ids)  # 50 tokens
    4
    """
    chain = BlockChain(block_tokens, parent=parent)
    for segment in segments:
        chain.append(*segment)
    return chain.hash_ids()


class BlockChain:
    """A prompt built segment by segment, its full blocks hashed as they fill.

    ``append`` adds tokens; ``hash_ids()`` returns the ids of every block so far, the partial final
    block included (hashed from its pieces, but not committed: appending more tokens completes it
    into a different block). ``fork()`` copies the state, so a shared document or system prompt is
    hashed once and extended by many prompts.

    Examples
    --------
    >>> turn1 = BlockChain(16).append(source_id("msg", 1), 20)
    >>> prompt1 = turn1.hash_ids()                  # 2 blocks: one full, one partial (4 tokens)
    >>> turn2 = turn1.fork().append(source_id("out", 1), 30)
    >>> bool(turn2.hash_ids()[0] == prompt1[0] and turn2.hash_ids()[1] != prompt1[1])
    True
    """

    __slots__ = ("block_tokens", "tokens", "_base", "_new", "_last", "_pending", "_pending_tokens")

    def __init__(self, block_tokens: int, parent: int | None = None):
        if int(block_tokens) < 1:
            raise ValueError(f"block_tokens must be >= 1 (got {block_tokens})")
        self.block_tokens = int(block_tokens)
        self.tokens = 0
        self._base = np.empty(0, dtype=np.int64)  # ids shared with the chain this one was forked from
        self._new: list[int] = []
        self._last = parent
        self._pending: list[tuple[int, int, int]] = []
        self._pending_tokens = 0

    @classmethod
    def from_ids(cls, block_tokens: int, ids: np.ndarray) -> BlockChain:
        """A chain that starts with the given ids as *full* blocks, to be continued by ``append``."""
        chain = cls(block_tokens)
        base = np.array(ids, dtype=np.int64)
        base.flags.writeable = False
        chain._base = base
        chain._last = int(base[-1]) if len(base) else None
        chain.tokens = len(base) * chain.block_tokens
        return chain

    def append(self, source: int, tokens: int, offset: int = 0) -> BlockChain:
        """Add tokens ``offset .. offset + tokens - 1`` of sequence ``source``; returns ``self``."""
        tokens, offset = int(tokens), int(offset)
        if tokens < 0 or offset < 0:
            raise ValueError(f"tokens and offset must be non-negative (got {tokens}, {offset})")
        size = self.block_tokens
        while tokens > 0:
            if tokens >= size and not self._pending:
                whole = self._whole_blocks(source, tokens // size, offset)
                offset += whole * size
                tokens -= whole * size
                if tokens < size:
                    continue
            take = min(tokens, size - self._pending_tokens)
            last = self._pending[-1] if self._pending else None
            if last is not None and last[0] == source and last[1] + last[2] == offset:
                self._pending[-1] = (source, last[1], last[2] + take)  # canonical: contiguous runs merged
            else:
                self._pending.append((source, offset, take))
            self._pending_tokens += take
            self.tokens += take
            offset += take
            tokens -= take
            if self._pending_tokens == size:
                self._last = chain_hashes(self._last, [content_id(self._pending)])[0]
                self._new.append(self._last)
                self._pending = []
                self._pending_tokens = 0
        return self

    def _whole_blocks(self, source: int, count: int, offset: int) -> int:
        """Append ``count`` whole blocks of ``source`` from token ``offset`` (no tokens pending):
        each block is the one piece ``(source, offset, block_tokens)``, hashed as
        ``chain_hashes(last, [content_id([piece])])`` hashes it but without the per-block calls
        (the bulk of a long document's hashing), by the backend's kernel
        (:mod:`kvsim.workload.block_hash`). Returns the blocks appended: 0 when the chain's last
        id (or its type) or the piece is out of range, so that the general path raises its errors."""
        size, last = self.block_tokens, self._last
        if count < 1:
            return 0
        if last is None:
            flag, link = _ROOT_FLAG, 0
        elif isinstance(last, int) and 0 <= last < 2**HASH_BITS:
            flag, link = _CHILD_FLAG, last
        else:
            return 0
        if not (isinstance(source, int) and 0 <= source < 2**64 and offset + count * size < 2**64):
            return 0
        self._last = _hasher().whole_blocks(flag, link, source, offset, size, count, self._new)
        self.tokens += count * size
        return count

    def full_ids(self) -> np.ndarray:
        """Ids of the full blocks only (``tokens // block_tokens`` of them)."""
        if self._new:
            base = np.concatenate([self._base, np.asarray(self._new, dtype=np.int64)])
            base.flags.writeable = False  # shared with forks: never changed in place
            self._base = base
            self._new = []
        return self._base

    def hash_ids(self) -> np.ndarray:
        """Ids of all blocks, the partial final one included (``ceil(tokens / block_tokens)``)."""
        full = self.full_ids()
        if not self._pending:
            return full.copy()  # writable, owned by the caller
        tail = chain_hashes(self._last, [content_id(self._pending)])[0]
        return np.append(full, np.int64(tail))

    def fork(self) -> BlockChain:
        """An independent copy; the shared full-block ids are not re-hashed."""
        other = BlockChain(self.block_tokens)
        other._base = self.full_ids()  # never mutated in place: extended by concatenation
        other._last = self._last
        other._pending = list(self._pending)
        other._pending_tokens = self._pending_tokens
        other.tokens = self.tokens
        return other

    def __len__(self) -> int:
        """Number of blocks, the partial final one included."""
        return block_count(self.tokens, self.block_tokens)


def floor_blocks(fraction: float, tokens: int, block_tokens: int) -> int:
    """Whole blocks in ``fraction`` of ``tokens`` tokens, rounded down (tolerant of float error)."""
    return int(math.floor(fraction * tokens + 1e-9)) // block_tokens
