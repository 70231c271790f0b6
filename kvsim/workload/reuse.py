"""Prefix structures: how prompts share blocks, as ``kind:`` specs under ``workload.prefix``.

- ``shared_documents``: ``documents`` documents (or system prompts) with Zipf popularity; a prompt is
  one document followed by a suffix unique to the request.
- ``multi_turn``: sessions; turn k's prompt is the whole conversation so far (system prompt, every
  earlier message and output) plus a new message. Sessions need the runtime (turn k+1 is sent when
  turn k completes, plus a think time): see :mod:`kvsim.workload.session`.
- ``fixed_hit``: every prompt starts with one shared prefix covering ``hit_ratio`` of its tokens,
  rounded down to whole blocks, followed by unique blocks. Meant for closed-loop "prefill-only"
  benchmarks (``output_tokens: {kind: fixed, value: 1}``) at a known hit ratio.

Block ids follow :mod:`kvsim.workload.prefix`. The source names below (``source_id(...)`` parts) are
part of the contract only in that they make ids stable across runs; nothing outside this package
should rebuild them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from kvsim.spec_types import Count, FrozenSpec, PositiveInt, Seconds, Share, field_errors
from kvsim.workload.lengths import LengthSpec
from kvsim.workload.prefix import BlockChain, floor_blocks, source_id

__all__ = [
    "SharedDocuments", "MultiTurn", "FixedHit", "PrefixSpec", "DocumentLibrary", "SharedPrefix",
    "zipf_probabilities", "prompt_segments", "forget_document_chains",
]


def zipf_probabilities(n: int, s: float) -> np.ndarray:
    """``p[r-1] ∝ 1 / r**s`` for ranks ``r = 1..n`` (``s = 0`` is uniform)."""
    weights = np.arange(1, n + 1, dtype=float) ** -float(s)
    probabilities: np.ndarray = weights / weights.sum()
    return probabilities


class SharedDocuments(FrozenSpec):
    """``documents`` shared documents; each request reads one, then adds a suffix of its own.

    Document ``d`` (0-based) has popularity rank ``d + 1``: ``P(d) ∝ 1 / (d + 1)**zipf_s``. Each
    document's length is drawn once (``document_tokens``); each request draws its own
    ``suffix_tokens``. The prompt is ``document + suffix`` tokens, so the workload's
    ``input_tokens`` must be omitted. Requests reading the same document share exactly the
    document's full blocks (the block holding the document's tail and the suffix's head, if the
    document length is not a multiple of ``block_tokens``, is the request's own).

    ``order: cyclic`` reads the documents in turn instead of drawing them: request ``i`` of an
    open loop reads document ``i mod documents`` (with ``zipf_s: 0``), as inference-perf's
    ``shared_prefix`` data generator sends its prompts (``get_request(n)`` returns
    ``prompts[n % len(prompts)]``, kubernetes-sigs/inference-perf
    ``inference_perf/datagen/shared_prefix_datagen.py``). A document then returns after exactly
    ``documents`` requests, which a least-recently-used cache either holds or loses every time.
    The planner's estimates (``kvsim validate``'s run cost, ``kvsim plan``'s first guesses) treat
    the cyclic order as uniform draws, and a cache prewarm reads the documents in the same turn
    from document 0.
    """

    kind: Literal["shared_documents"] = "shared_documents"
    documents: PositiveInt
    zipf_s: float = Field(ge=0.0)  # 0: uniform popularity
    document_tokens: LengthSpec
    suffix_tokens: LengthSpec
    order: Literal["popularity", "cyclic"] = "popularity"

    @model_validator(mode="after")
    def _cyclic_is_uniform(self) -> SharedDocuments:
        if self.order == "cyclic" and self.zipf_s != 0.0:
            raise field_errors(SharedDocuments, [(("zipf_s",), f"{self.zipf_s} with order: cyclic, which reads every "
                                                  "document equally often: give zipf_s: 0", self.zipf_s)])
        return self

    def probabilities(self) -> np.ndarray:
        return zipf_probabilities(self.documents, self.zipf_s)

    @property
    def max_prompt_tokens(self) -> int:
        return self.document_tokens.max_tokens + self.suffix_tokens.max_tokens


class MultiTurn(FrozenSpec):
    """Multi-turn sessions started by the workload's open-loop arrival process.

    A session has ``turns`` turns (drawn once per session). Turn k's prompt is the system prompt
    (``system_prompt_tokens``, the same tokens in every session; 0 = none), then for each earlier
    turn its message and its output (``output_tokens`` of the workload), then turn k's new message
    (``message_tokens``). Turn k+1 is sent ``think_time`` after turn k completes (fixed, or
    exponential with that mean). The workload's ``input_tokens`` must be omitted.
    """

    kind: Literal["multi_turn"] = "multi_turn"
    turns: LengthSpec
    message_tokens: LengthSpec
    system_prompt_tokens: Count = 0
    think_time: Seconds = 0.0
    think_distribution: Literal["fixed", "exponential"] = "fixed"

    def think_times(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.think_distribution == "exponential" and self.think_time > 0:
            return rng.exponential(self.think_time, size=n)
        return np.full(n, float(self.think_time))

    def max_prompt_tokens(self, max_output_tokens: int) -> int:
        """Longest possible prompt: the last turn of the longest session, every length at its max."""
        turns = self.turns.max_tokens
        return self.system_prompt_tokens + turns * self.message_tokens.max_tokens + (turns - 1) * max_output_tokens


class FixedHit(FrozenSpec):
    """Every prompt = a shared prefix of ``floor(hit_ratio * L / block_tokens)`` whole blocks + unique rest.

    All requests draw their prefix from one shared token sequence, so a request whose prefix has k
    blocks shares exactly k blocks with any request whose prefix has at least k blocks. With a warm
    cache the hit ratio is ``hit_ratio`` up to block rounding (never above it). Prompt lengths come
    from the workload's ``input_tokens``; ``hit_ratio: 0`` means no sharing at all.
    """

    kind: Literal["fixed_hit"] = "fixed_hit"
    hit_ratio: Share

    def shared_blocks(self, tokens: int, block_tokens: int) -> int:
        """Whole shared blocks in a prompt of ``tokens`` tokens."""
        return floor_blocks(self.hit_ratio, tokens, block_tokens)


PrefixSpec = Annotated[SharedDocuments | MultiTurn | FixedHit, Field(discriminator="kind")]


_CHAINS: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
"""``(block_tokens, first block id)`` of every document chain hashed in this process -> the
arguments of
:func:`_document_chain` that made it (one per length: a document drawn with different lengths in
two scenarios of one process shares its first blocks). Looked up by :func:`prompt_segments`, never
iterated; a few dozen bytes per distinct document."""


@lru_cache(maxsize=4096)
def _document_chain(block_tokens: int, document: int, tokens: int) -> BlockChain:
    """The hashed chain of one document; a pure function of its arguments (memoised, never mutated:
    callers fork it). 4,096 chains: ``domains_128`` draws 1,795 distinct documents over its three
    loads, and a smaller memo re-hashed 3,070 of them (8.4 CPU-s against 4.5); a chain keeps 8
    bytes per block (16 KiB for a 32K-token document at 16-token blocks, 64 MiB for 4,096)."""
    chain = BlockChain(block_tokens).append(source_id("shared_documents.document", document), tokens)
    ids = chain.full_ids()
    if len(ids):
        known = _CHAINS.setdefault((block_tokens, int(ids[0])), [])
        if (block_tokens, document, tokens) not in known:
            known.append((block_tokens, document, tokens))
    return chain


def forget_document_chains() -> None:
    """Drop every document chain hashed in this process (the memo and its table), as a new
    process starts: for benchmarks that time a run's hashing (it happens once per document and
    process)."""
    _document_chain.cache_clear()
    _CHAINS.clear()


def prompt_segments(hashes: np.ndarray | Sequence[int],
                    block_tokens: int) -> list[tuple[int, np.ndarray, int, int]] | None:
    """A ``shared_documents`` prompt's block ids as segments of chains: ``(key, ids, start, end)``
    names blocks ``ids[start:end]``, and the segments' blocks in order are ``hashes``.

    The document's full blocks are one segment of the document's chain (``key`` its first block's
    id, so every prompt of the document names them alike, whichever array holds them); the rest --
    the block holding the document's tail and the suffix's head, if any, and the suffix -- is the
    prompt's own chain, keyed by its first id (a block no other prompt has). So each block has one
    address ``(key, position)`` (docs/extents.md, "Phase 4: extents"). Found with one lookup and one
    comparison of the prompt's leading ids with the document's (the longest document chain of this
    process that starts the prompt, at ``block_tokens``: ids of different block sizes are never
    mixed, and a partial block can have a smaller size's full block's id).

    Returns
    -------
    list or None
        The segments, or None if ``hashes`` does not start with a document chain hashed in this
        process (a trace's ids, another workload, or a document shorter than one block): the
        caller then has ids only.
    """
    if not len(hashes):
        return None
    known = _CHAINS.get((int(block_tokens), int(hashes[0])))
    if known is None:
        return None
    first = int(hashes[0])
    best = None
    for args in known:
        doc = _document_chain(*args).full_ids()
        if len(doc) <= len(hashes) and (best is None or len(doc) > len(best)) and \
                np.array_equal(hashes[:len(doc)], doc):
            best = doc
    if best is None:
        return None
    segments = [(first, best, 0, len(best))]
    if len(hashes) > len(best):
        own = np.asarray(hashes[len(best):])
        segments.append((int(own[0]), own, 0, len(own)))
    return segments


class DocumentLibrary:
    """The documents of a ``shared_documents`` workload: lengths (drawn once) and prompt building.

    Document lengths come from stream ``workload.prefix.document_tokens``, so every user of the
    library (open loop, each closed-loop client) sees the same documents for a given seed.
    """

    def __init__(self, spec: SharedDocuments, block_tokens: int, rng: np.random.Generator):
        self.spec = spec
        self.block_tokens = int(block_tokens)
        self.document_tokens = spec.document_tokens.sample(rng, spec.documents)
        self.probabilities = spec.probabilities()

    def choose(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` document indices drawn by popularity (in turn, from document 0, with ``order: cyclic``)."""
        if self.spec.order == "cyclic":
            return np.arange(n, dtype=np.int64) % self.spec.documents
        return rng.choice(self.spec.documents, size=n, p=self.probabilities)

    def prompt(self, document: int, suffix_tokens: int, key: tuple[str | int, ...]) -> tuple[int, np.ndarray]:
        """``(prompt tokens, block ids)`` of document ``document`` followed by unique suffix ``key``."""
        chain = _document_chain(self.block_tokens, int(document), int(self.document_tokens[document])).fork()
        chain.append(source_id("shared_documents.suffix", *key), int(suffix_tokens))
        return chain.tokens, chain.hash_ids()


class SharedPrefix:
    """The one shared token sequence of ``fixed_hit``; its block ids are hashed once, as needed."""

    def __init__(self, spec: FixedHit, block_tokens: int):
        self.spec = spec
        self.block_tokens = int(block_tokens)
        self._chain = BlockChain(self.block_tokens)
        self._source = source_id("fixed_hit.shared")

    def prompt(self, tokens: int, key: tuple[str | int, ...]) -> np.ndarray:
        """Block ids of a ``tokens``-long prompt: shared blocks, then blocks unique to ``key``."""
        shared = self.spec.shared_blocks(int(tokens), self.block_tokens)
        have = self._chain.tokens // self.block_tokens
        if shared > have:
            self._chain.append(self._source, (shared - have) * self.block_tokens, offset=self._chain.tokens)
        chain = BlockChain.from_ids(self.block_tokens, self._chain.full_ids()[:shared])
        chain.append(source_id("fixed_hit.unique", *key), int(tokens) - shared * self.block_tokens)
        return chain.hash_ids()
