"""BlockChain hashes runs of whole blocks of one source on a fast path (kvsim/workload/prefix.py,
``_whole_blocks``); its ids must be exactly those of the definition: each block's merged pieces,
``content_id`` and ``chain_hashes``, worked out here token by token."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.workload.prefix import BlockChain, chain_hashes, content_id, source_id


def reference_ids(appends, block_tokens, parent=None):
    tokens = [(source, offset + i) for source, count, offset in appends for i in range(count)]
    ids, last = [], parent
    for start in range(0, len(tokens), block_tokens):
        pieces = []
        for source, position in tokens[start:start + block_tokens]:
            if pieces and pieces[-1][0] == source and pieces[-1][1] + pieces[-1][2] == position:
                pieces[-1] = (source, pieces[-1][1], pieces[-1][2] + 1)
            else:
                pieces.append((source, position, 1))
        block = chain_hashes(last, [content_id(pieces)])[0]
        ids.append(block)
        if len(tokens) - start >= block_tokens:
            last = block  # (a partial final block is not a parent)
    return ids


SOURCES = [source_id("doc", k) for k in range(3)]


@settings(max_examples=300, deadline=None)
@given(block_tokens=st.integers(1, 9),
       appends=st.lists(st.tuples(st.sampled_from(SOURCES), st.integers(0, 40), st.integers(0, 30)), max_size=6),
       parent=st.one_of(st.none(), st.integers(0, 2**63 - 1)), fork_at=st.integers(0, 6))
def test_whole_block_runs_hash_as_the_definition(block_tokens, appends, parent, fork_at):
    chain = BlockChain(block_tokens, parent=parent)
    for k, (source, count, offset) in enumerate(appends):
        if k == fork_at:
            chain = chain.fork()
        chain.append(source, count, offset)
    assert chain.hash_ids().tolist() == reference_ids(appends, block_tokens, parent)


def test_out_of_range_inputs_still_raise_the_general_errors():
    import pytest
    with pytest.raises(ValueError):
        BlockChain(4).append(2**64, 8)
    with pytest.raises(ValueError):
        BlockChain(4, parent=2**63).append(1, 8)
