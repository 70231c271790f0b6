"""A shared_documents prompt as segments of chains (kvsim.workload.reuse.prompt_segments): the
segments spell the prompt's ids exactly; every prompt of a document names the document's blocks
by the same key and positions; each prompt's own blocks have a key no other prompt has; ids that
do not start with a known document chain give None (the caller keeps ids)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.workload.lengths import FixedLength
from kvsim.workload.prefix import BlockChain, source_id
from kvsim.workload.reuse import DocumentLibrary, SharedDocuments, _document_chain, prompt_segments


def _library(tokens: int, block_tokens: int = 16, documents: int = 5) -> DocumentLibrary:
    spec = SharedDocuments(documents=documents, zipf_s=0.0, document_tokens=FixedLength(value=tokens),
                           suffix_tokens=FixedLength(value=40))
    return DocumentLibrary(spec, block_tokens, np.random.default_rng(0))


def _spelled(segments) -> np.ndarray:
    return np.concatenate([np.asarray(ids[start:end], dtype=np.int64) for _, ids, start, end in segments])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.lists(st.integers(0, 300), min_size=1, max_size=8), st.sampled_from([4, 16]))
def test_segments_spell_the_prompt_and_give_each_block_one_address(doc_tokens, suffixes, block_tokens):
    library = _library(doc_tokens, block_tokens)
    address_of, id_at = {}, {}  # block id -> (key, position), and back: both must be functions
    for request, suffix_tokens in enumerate(suffixes):
        document = request % 3
        _, ids = library.prompt(document, suffix_tokens, ("seg", doc_tokens, block_tokens, request))
        segments = prompt_segments(ids, block_tokens)
        full = doc_tokens // block_tokens
        if full == 0:
            assert segments is None  # no document block: nothing shared, ids only
            continue
        assert np.array_equal(_spelled(segments), ids)
        key, doc, start, end = segments[0]
        expect = _document_chain(block_tokens, document, doc_tokens).full_ids()
        assert (key, start, end) == (int(expect[0]), 0, full) and np.array_equal(doc, expect)
        assert len(segments) == (2 if len(ids) > full else 1)
        for key, chain, start, end in segments:
            for position in range(start, end):
                block = int(chain[position])
                assert address_of.setdefault(block, (key, position)) == (key, position)
                assert id_at.setdefault((key, position), block) == block


def test_a_document_drawn_with_two_lengths_is_one_chain():
    """The longest document chain that starts the prompt is taken; positions agree across lengths."""
    short, long = _library(64), _library(160)
    _, a = short.prompt(1, 40, ("two", 0))
    _, b = long.prompt(1, 40, ("two", 1))
    sa, sb = prompt_segments(a, 16), prompt_segments(b, 16)
    assert sa[0][0] == sb[0][0] and (sa[0][3], sb[0][3]) == (4, 10)
    assert np.array_equal(_spelled(sa), a) and np.array_equal(_spelled(sb), b)


def test_ids_without_a_document_chain_give_none():
    other = BlockChain(16).append(source_id("not a document", 7), 100).hash_ids()
    assert prompt_segments(other, 16) is None
    assert prompt_segments(np.empty(0, dtype=np.int64), 16) is None
    # a document no other test hashes (the table is the process's: another length of a shared
    # document number could start the changed ids, and rightly be found)
    chain = _document_chain(16, 987_654_321, 64).fork()
    ids = chain.append(source_id("shared_documents.suffix", "changed"), 40).hash_ids()
    assert prompt_segments(ids, 16) is not None and prompt_segments(ids, 4) is None  # (another block size)
    ids[2] ^= 1  # the prompt's leading ids are not the document's any more
    assert prompt_segments(ids, 16) is None
