"""Tests for prefix-chained block ids and the prefix structures of kvsim.workload.

Expected values are derived independently of the code under test: hashes are recomputed here with
hashlib, length draws are re-drawn from the named streams, rounding is done in exact fractions.
Statistical checks use fixed seeds and thresholds at ~5 standard errors (or a chi-square quantile
at 1e-6), so a correct implementation passes for almost any seed and a wrong distribution fails.
"""

import hashlib
import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from kvsim.rng import RandomStreams
from kvsim.workload import (
    BlockChain,
    ClientStream,
    PoissonArrivals,
    RequestArrays,
    Segment,
    WorkloadSpec,
    block_count,
    chain_hashes,
    open_loop_requests,
    prompt_hashes,
    sessions,
    source_id,
)
from kvsim.workload.arrivals import open_loop_arrival_times
from kvsim.workload.lengths import UniformLength
from kvsim.workload.reuse import DocumentLibrary, zipf_probabilities

B = 16


def _reference_link(parent, content):
    """Independent re-implementation of one chain step (the documented algorithm)."""
    flag, link = (0, 0) if parent is None else (1, parent)
    digest = hashlib.blake2b(struct.pack("<BQQ", flag, link, content), digest_size=8, person=b"kvsim.chain").digest()
    return int.from_bytes(digest, "little") >> 1


def _common_prefix(a, b):
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if len(diff) else n


# ---------------------------------------------------------------------------------------------
# hash chaining
# ---------------------------------------------------------------------------------------------


def test_chain_hashes_match_the_documented_algorithm_and_are_stable():
    ids = chain_hashes(None, [1, 2, 3])
    expected, parent = [], None
    for content in [1, 2, 3]:
        parent = _reference_link(parent, content)
        expected.append(parent)
    assert ids == expected
    assert chain_hashes(None, [1, 2, 3]) == ids  # same call, same values
    assert all(0 <= h < 2**63 for h in ids)
    # pinned value: ids written by earlier runs (results, caches) must keep their meaning
    assert ids[0] == _reference_link(None, 1) == 387023069180113138


def test_equal_prefixes_give_equal_ids_and_divergence_changes_every_later_id():
    a = chain_hashes(None, [10, 11, 12, 13, 14, 15])
    b = chain_hashes(None, [10, 11, 12, 99, 14, 15])  # same content after the divergence
    assert a[:3] == b[:3]
    assert all(x != y for x, y in zip(a[3:], b[3:]))
    assert not set(a[3:]) & set(b)  # no later id of a appears anywhere in b


def test_chain_continues_from_a_parent():
    a = chain_hashes(None, [5, 6, 7, 8])
    assert chain_hashes(a[1], [7, 8]) == a[2:]
    assert chain_hashes(0, [5]) != a[:1]  # an int parent is not the root, even 0


@pytest.mark.parametrize("parent, contents", [(-1, [1]), (2**63, [1]), (None, [-3]), (None, [2**64])])
def test_chain_hashes_refuse_out_of_range(parent, contents):
    with pytest.raises(ValueError):
        chain_hashes(parent, contents)


@pytest.mark.parametrize("tokens", [1, 15, 16, 17, 31, 32, 33, 1000])
def test_a_prompt_has_ceil_l_over_b_blocks(tokens):
    ids = prompt_hashes([Segment(source_id("x"), tokens)], B)
    assert len(ids) == block_count(tokens, B) == math.ceil(tokens / B)
    assert ids.dtype == np.int64


def test_partial_final_block_differs_from_a_full_block_but_equal_contents_are_equal():
    x = source_id("document", 1)
    short = prompt_hashes([Segment(x, 20)], B)  # one full block + 4 tokens
    long = prompt_hashes([Segment(x, 32)], B)  # the same first 32 tokens: two full blocks
    same = prompt_hashes([Segment(x, 20)], B)
    assert short[0] == long[0]
    assert short[1] != long[1]  # partial block vs full block over the same start
    assert np.array_equal(short, same)
    assert prompt_hashes([Segment(x, 21)], B)[1] != short[1]  # 5 tokens vs 4


def test_content_does_not_depend_on_how_tokens_were_appended():
    x, y = source_id("a"), source_id("b")
    one = BlockChain(B).append(x, 40).append(y, 7).hash_ids()
    split = BlockChain(B).append(x, 10).append(x, 30, offset=10).append(y, 3).append(y, 4, offset=3).hash_ids()
    assert np.array_equal(one, split)
    other = BlockChain(B).append(x, 20).append(x, 20, offset=21).append(y, 7).hash_ids()  # a gap in block 1
    assert one[0] == other[0] and one[1] != other[1]


def test_fork_is_independent_and_shares_hashed_blocks():
    base = BlockChain(B).append(source_id("sys"), 40)
    a = base.fork().append(source_id("a"), 30).hash_ids()
    b = base.fork().append(source_id("b"), 30).hash_ids()
    assert base.tokens == 40 and len(base.hash_ids()) == 3
    assert np.array_equal(a[:2], b[:2]) and a[2] != b[2]
    assert np.array_equal(a, BlockChain(B).append(source_id("sys"), 40).append(source_id("a"), 30).hash_ids())


def test_source_ids_are_stable_and_distinct():
    assert source_id("doc", 3) == source_id("doc", 3)
    assert len({source_id("doc", 3), source_id("doc", 4), source_id("doc", "3"), source_id("doc")}) == 4
    with pytest.raises(TypeError):
        source_id("doc", 1.5)


# ---------------------------------------------------------------------------------------------
# specs
# ---------------------------------------------------------------------------------------------

OUT = {"kind": "uniform", "low": 1, "high": 50}
DOCS = {"kind": "shared_documents", "documents": 20, "zipf_s": 1.1,
        "document_tokens": {"kind": "uniform", "low": 16, "high": 400},
        "suffix_tokens": {"kind": "uniform", "low": 1, "high": 100}}


def _spec(**fields):
    return WorkloadSpec.model_validate({"arrival": {"kind": "poisson", "rate": 100.0}, **fields})


def test_plain_workloads_are_unchanged():
    spec = _spec(input_tokens={"kind": "fixed", "value": 100}, output_tokens=OUT)
    assert spec.prefix is None and spec.block_tokens == 16 and not spec.has_hashes
    requests = open_loop_requests(spec, 10.0, RandomStreams(0))
    assert requests.hash_ids is None and requests.block_tokens is None
    old_style = RequestArrays(np.zeros(2), np.ones(2, dtype=np.int64), np.ones(2, dtype=np.int64))
    assert old_style.hash_ids is None and len(old_style) == 2


@pytest.mark.parametrize("fields, where", [
    ({"output_tokens": OUT}, "input_tokens"),  # no prefix: input_tokens required
    ({"input_tokens": OUT}, "output_tokens"),
    ({"prefix": DOCS, "input_tokens": OUT, "output_tokens": OUT}, "input_tokens"),
    ({"prefix": {"kind": "multi_turn", "turns": OUT, "message_tokens": OUT}, "input_tokens": OUT,
      "output_tokens": OUT}, "input_tokens"),
    ({"prefix": {"kind": "fixed_hit", "hit_ratio": 0.5}, "output_tokens": OUT}, "input_tokens"),
    ({"prefix": {"kind": "fixed_hit", "hit_ratio": 1.5}, "input_tokens": OUT, "output_tokens": OUT}, "hit_ratio"),
    ({"prefix": {"kind": "fixed_hit", "hit_ratio": -0.1}, "input_tokens": OUT, "output_tokens": OUT}, "hit_ratio"),
    ({"prefix": {**DOCS, "documents": 0}, "output_tokens": OUT}, "documents"),
    ({"prefix": {**DOCS, "zipf_s": -1}, "output_tokens": OUT}, "zipf_s"),
    ({"prefix": {**DOCS, "extra": 1}, "output_tokens": OUT}, "extra"),
    ({"prefix": DOCS, "output_tokens": OUT, "block_tokens": 0}, "block_tokens"),
])
def test_invalid_prefix_specs_name_the_field(fields, where):
    with pytest.raises(ValidationError) as info:
        _spec(**fields)
    assert where in str(info.value)


def test_cyclic_documents_are_uniform_and_open_loop():
    with pytest.raises(ValidationError, match="zipf_s: 0"):
        _spec(prefix={**DOCS, "order": "cyclic"}, output_tokens=OUT)
    with pytest.raises(ValidationError, match="open loop"):
        WorkloadSpec.model_validate({"arrival": {"kind": "closed_loop", "clients": 2}, "output_tokens": OUT,
                                     "prefix": {**DOCS, "zipf_s": 0.0, "order": "cyclic"}})
    with pytest.raises(ValidationError, match="order"):
        _spec(prefix={**DOCS, "order": "shuffled"}, output_tokens=OUT)


def test_cyclic_documents_are_read_in_turn():
    """Request i reads document i mod N (inference-perf's shared_prefix order): its prompt shares
    exactly that document's blocks with request i + N and no other request's in between."""
    spec = _spec(prefix={**DOCS, "zipf_s": 0.0, "order": "cyclic"}, output_tokens=OUT)
    requests = open_loop_requests(spec, 2.0, RandomStreams(5))
    n = len(requests)
    assert n > 3 * 20
    library = DocumentLibrary(spec.prefix, B, RandomStreams(5).generator("workload.prefix.document_tokens"))
    for i in range(n):
        d = i % 20
        full = int(library.document_tokens[d]) // B
        later = i + 20
        if later < n:
            assert _common_prefix(requests.hash_ids[i], requests.hash_ids[later]) >= full
        for j in range(i + 1, min(i + 20, n)):  # the documents in between are others
            assert _common_prefix(requests.hash_ids[i], requests.hash_ids[j]) == 0 or \
                int(library.document_tokens[j % 20]) // B == 0 or full == 0


def test_multi_turn_refuses_closed_loop():
    with pytest.raises(ValidationError, match="open-loop"):
        WorkloadSpec.model_validate({"arrival": {"kind": "closed_loop", "clients": 2}, "output_tokens": OUT,
                                     "prefix": {"kind": "multi_turn", "turns": OUT, "message_tokens": OUT}})


def test_prefix_specs_round_trip_and_are_frozen():
    spec = _spec(prefix=DOCS, output_tokens=OUT)
    again = WorkloadSpec.model_validate(spec.model_dump())
    assert again == spec
    with pytest.raises(ValidationError):
        spec.prefix.documents = 3


# ---------------------------------------------------------------------------------------------
# shared documents
# ---------------------------------------------------------------------------------------------


def test_zipf_probabilities():
    p = zipf_probabilities(4, 1.0)
    h = 1 + 1 / 2 + 1 / 3 + 1 / 4
    assert np.allclose(p, [1 / h, 1 / (2 * h), 1 / (3 * h), 1 / (4 * h)])
    assert np.allclose(zipf_probabilities(3, 0.0), 1 / 3)


def test_document_popularity_follows_zipf():
    """Chi-square goodness of fit of 40,000 choices against p(rank r) = r^-s / H (1e-6 level)."""
    spec = _spec(prefix=DOCS, output_tokens=OUT).prefix
    streams = RandomStreams(11)
    library = DocumentLibrary(spec, B, streams.generator("workload.prefix.document_tokens"))
    n = 40_000
    counts = np.bincount(library.choose(streams.generator("workload.prefix.document"), n), minlength=20)
    ranks = np.arange(1, 21)
    expected = n * ranks**-1.1 / np.sum(ranks**-1.1)
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    assert chi2 < stats.chi2.ppf(1 - 1e-6, df=19), chi2
    # and a uniform choice would fail the same test by far
    assert float(np.sum((counts - n / 20) ** 2 / (n / 20))) > 10 * stats.chi2.ppf(1 - 1e-6, df=19)


def test_shared_document_prompts_are_document_plus_suffix_and_share_exactly_the_document_blocks():
    spec = _spec(prefix=DOCS, output_tokens=OUT)
    streams = RandomStreams(3)
    requests = open_loop_requests(spec, 20.0, streams)
    n = len(requests)
    assert n > 1000 and requests.block_tokens == 16
    # re-draw the named streams independently
    doc_len = UniformLength(low=16, high=400).sample(RandomStreams(3).generator("workload.prefix.document_tokens"), 20)
    p = np.arange(1, 21, dtype=float) ** -1.1
    docs = RandomStreams(3).generator("workload.prefix.document").choice(20, size=n, p=p / p.sum())
    suffix = UniformLength(low=1, high=100).sample(RandomStreams(3).generator("workload.prefix.suffix_tokens"), n)
    assert np.array_equal(requests.input_tokens, doc_len[docs] + suffix)
    for ids, tokens in zip(requests.hash_ids, requests.input_tokens):
        assert len(ids) == math.ceil(tokens / B)
    # same document => exactly the document's full blocks shared; other blocks belong to one request
    owners: dict[int, set[int]] = {}
    for i, ids in enumerate(requests.hash_ids):
        for h in ids.tolist():
            owners.setdefault(h, set()).add(i)
    first_of = {}
    for i in range(n):
        first_of.setdefault(int(docs[i]), i)
    for i in range(n):
        d = int(docs[i])
        full = int(doc_len[d]) // B
        j = first_of[d] if first_of[d] != i else next((k for k in range(i + 1, n) if docs[k] == d), None)
        if j is not None:
            assert _common_prefix(requests.hash_ids[i], requests.hash_ids[j]) == full
        for h in requests.hash_ids[i][full:].tolist():
            assert owners[h] == {i}
        for h in requests.hash_ids[i][:full].tolist():
            assert all(docs[k] == d for k in owners[h])


def test_shared_documents_leave_arrivals_and_outputs_alone():
    plain = open_loop_requests(_spec(input_tokens=OUT, output_tokens=OUT), 20.0, RandomStreams(5))
    docs = open_loop_requests(_spec(prefix=DOCS, output_tokens=OUT), 20.0, RandomStreams(5))
    assert np.array_equal(plain.arrival_s, docs.arrival_s)
    assert np.array_equal(plain.output_tokens, docs.output_tokens)


def test_prefix_generation_is_deterministic_per_seed():
    spec = _spec(prefix=DOCS, output_tokens=OUT)
    a = open_loop_requests(spec, 5.0, RandomStreams(9))
    b = open_loop_requests(spec, 5.0, RandomStreams(9))
    c = open_loop_requests(spec, 5.0, RandomStreams(10))
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a.hash_ids, b.hash_ids))
    assert not np.array_equal(a.input_tokens[:50], c.input_tokens[:50])


# ---------------------------------------------------------------------------------------------
# fixed hit ratio
# ---------------------------------------------------------------------------------------------

HITS = [0.0, 0.29, 0.5, 0.8, 1.0]


def _shared_blocks_exact(hit, tokens, block=B):
    return math.floor(Fraction(str(hit)) * tokens) // block


@pytest.mark.parametrize("hit", HITS)
def test_fixed_hit_shares_hit_ratio_of_tokens_to_block_rounding(hit):
    spec = _spec(prefix={"kind": "fixed_hit", "hit_ratio": hit}, input_tokens={"kind": "uniform", "low": 1,
                 "high": 3000}, output_tokens={"kind": "fixed", "value": 1})
    requests = open_loop_requests(spec, 5.0, RandomStreams(1))
    n = len(requests)
    assert n > 300
    k = np.array([_shared_blocks_exact(hit, t) for t in requests.input_tokens.tolist()])
    for ids, tokens, kk in zip(requests.hash_ids, requests.input_tokens.tolist(), k.tolist()):
        assert len(ids) == math.ceil(tokens / B)
        assert kk * B <= hit * tokens + 1e-9 < (kk + 1) * B  # the stated rounding
    # shared blocks = common prefix with the request that has the longest shared prefix
    r = int(np.argmax(k))
    observed = np.array([_common_prefix(ids, requests.hash_ids[r]) for ids in requests.hash_ids])
    observed[r] = k[r]  # the reference shares everything with itself
    assert np.array_equal(observed, k)
    # and every non-shared block is unique to its request
    rest = [h for ids, kk in zip(requests.hash_ids, k.tolist()) for h in ids[kk:].tolist()]
    assert len(rest) == len(set(rest))
    shared_ids = {h for ids, kk in zip(requests.hash_ids, k.tolist()) for h in ids[:kk].tolist()}
    assert not shared_ids & set(rest)
    # token-weighted shared fraction is within one block per request of hit_ratio
    frac = (k * B).sum() / requests.input_tokens.sum()
    assert hit - n * B / requests.input_tokens.sum() <= frac <= hit + 1e-12


def test_fixed_hit_leaves_lengths_and_arrivals_alone():
    lengths = {"input_tokens": {"kind": "uniform", "low": 1, "high": 3000}, "output_tokens": OUT}
    plain = open_loop_requests(_spec(**lengths), 5.0, RandomStreams(2))
    hit = open_loop_requests(_spec(prefix={"kind": "fixed_hit", "hit_ratio": 0.7}, **lengths), 5.0, RandomStreams(2))
    for name in ("arrival_s", "input_tokens", "output_tokens"):
        assert np.array_equal(getattr(plain, name), getattr(hit, name))


def test_closed_loop_fixed_hit_client_stream_provides_hashes():
    spec = WorkloadSpec.model_validate({
        "arrival": {"kind": "closed_loop", "clients": 3, "think_time": 0.5},
        "input_tokens": {"kind": "uniform", "low": 100, "high": 4000}, "output_tokens": {"kind": "fixed", "value": 1},
        "prefix": {"kind": "fixed_hit", "hit_ratio": 0.8}, "block_tokens": 32})
    plain = WorkloadSpec.model_validate({**spec.model_dump(), "prefix": None})
    streams = RandomStreams(4)
    with_hashes = [ClientStream(spec, c, streams) for c in range(3)]
    lengths_only = [ClientStream(spec, c, streams) for c in range(3)]
    no_prefix = [ClientStream(plain, c, streams) for c in range(3)]
    seen = []
    for _ in range(100):  # more than one refill chunk
        for c in range(3):
            r = with_hashes[c].next_request_with_hashes()
            assert (r.think_time_s, r.input_tokens, r.output_tokens) == lengths_only[c].next_request()
            assert no_prefix[c].next_request() == tuple(r[:3])
            shared = _shared_blocks_exact(0.8, r.input_tokens, 32)
            assert len(r.hash_ids) == math.ceil(r.input_tokens / 32)
            seen.append((shared, r.hash_ids))
    k_max, ref = max(seen, key=lambda s: s[0])
    assert k_max > 0
    for k, ids in seen:
        if ids is not ref:
            assert _common_prefix(ids, ref) == k
    rest = [h for k, ids in seen for h in ids[k:].tolist()]
    assert len(rest) == len(set(rest))  # unique blocks differ across clients and requests
    first = ClientStream(plain, 0, streams).next_request_with_hashes()
    assert first.hash_ids is None and first.think_time_s == 0.0


def test_closed_loop_shared_documents():
    spec = WorkloadSpec.model_validate({"arrival": {"kind": "closed_loop", "clients": 2}, "prefix": DOCS,
                                        "output_tokens": OUT})
    streams = RandomStreams(8)
    doc_len = UniformLength(low=16, high=400).sample(RandomStreams(8).generator("workload.prefix.document_tokens"), 20)
    p = np.arange(1, 21, dtype=float) ** -1.1
    requests, docs = [], []
    for client in range(2):
        stream = ClientStream(spec, client, streams)
        rng = RandomStreams(8).generator(f"workload.prefix.client.{client}")  # chunks of 64: docs, then suffixes
        for _ in range(2):
            chunk_docs = rng.choice(20, size=64, p=p / p.sum())
            chunk_suffix = UniformLength(low=1, high=100).sample(rng, 64)
            for d, suffix in zip(chunk_docs.tolist(), chunk_suffix.tolist()):
                r = stream.next_request_with_hashes()
                assert r.input_tokens == doc_len[d] + suffix
                assert len(r.hash_ids) == math.ceil(r.input_tokens / B)
                requests.append(r)
                docs.append(d)
    pairs = 0
    for i in range(len(requests)):
        for j in range(i + 1, len(requests)):
            common = _common_prefix(requests[i].hash_ids, requests[j].hash_ids)
            if docs[i] == docs[j]:
                assert common == doc_len[docs[i]] // B
                pairs += 1
            else:
                assert common == 0
    assert pairs > 100  # requests of popular documents, within and across clients
    again = ClientStream(spec, 0, RandomStreams(8)).next_request()
    assert again == tuple(requests[0][:3])


# ---------------------------------------------------------------------------------------------
# multi-turn sessions
# ---------------------------------------------------------------------------------------------

MULTI = {"kind": "multi_turn", "turns": {"kind": "uniform", "low": 1, "high": 6},
         "message_tokens": {"kind": "uniform", "low": 1, "high": 200}, "system_prompt_tokens": 100,
         "think_time": 2.0}


def test_multi_turn_turns_extend_the_previous_conversation():
    spec = _spec(prefix=MULTI, output_tokens={"kind": "uniform", "low": 1, "high": 100})
    all_sessions = sessions(spec, 20.0, RandomStreams(6))
    assert np.array_equal([s.arrival_s for s in all_sessions],
                          open_loop_arrival_times(PoissonArrivals(rate=100.0), 20.0,
                                                  RandomStreams(6).generator("workload.arrival")))
    system_blocks = 100 // B
    firsts = []
    checked = 0
    for session in all_sessions:
        turns = list(session.turns())
        assert len(turns) == len(session) >= 1
        assert turns[0].think_time_s == 0.0 and all(t.think_time_s == 2.0 for t in turns[1:])
        assert turns[0].input_tokens == 100 + int(session.message_tokens[0])
        assert np.array_equal([t.input_tokens for t in turns], session.input_tokens)
        firsts.append(turns[0].hash_ids)
        for k, turn in enumerate(turns):
            assert len(turn.hash_ids) == math.ceil(turn.input_tokens / B)
            total = turn.input_tokens + turn.output_tokens
            assert len(turn.sequence_hash_ids) == math.ceil(total / B)
            assert turn.output_tokens == int(session.output_tokens[k])
            full_prompt = turn.input_tokens // B
            assert np.array_equal(turn.sequence_hash_ids[:full_prompt], turn.hash_ids[:full_prompt])
            if k + 1 < len(turns):
                nxt = turns[k + 1]
                assert nxt.input_tokens == total + int(session.message_tokens[k + 1])
                full = total // B
                assert np.array_equal(nxt.hash_ids[:full], turn.sequence_hash_ids[:full])
                assert _common_prefix(nxt.hash_ids, turn.sequence_hash_ids) == full  # the partial block differs
                checked += 1
    assert checked > 500
    # sessions share the system prompt's full blocks and nothing else
    for ids in firsts[1:50]:
        assert _common_prefix(ids, firsts[0]) == system_blocks


def test_multi_turn_lengths_come_from_named_streams():
    spec = _spec(prefix=MULTI, output_tokens={"kind": "uniform", "low": 1, "high": 100})
    got = sessions(spec, 5.0, RandomStreams(12))
    turns = UniformLength(low=1, high=6).sample(RandomStreams(12).generator("workload.prefix.turns"), len(got))
    assert np.array_equal([len(s) for s in got], turns)
    messages = UniformLength(low=1, high=200).sample(RandomStreams(12).generator("workload.prefix.message_tokens"),
                                                     int(turns.sum()))
    assert np.array_equal(np.concatenate([s.message_tokens for s in got]), messages)
    again = sessions(spec, 5.0, RandomStreams(12))
    assert all(np.array_equal(x.hash_ids, y.hash_ids) for a, b in zip(got[:20], again[:20])
               for x, y in zip(a.turns(), b.turns()))
    assert spec.max_input_tokens == 100 + 6 * 200 + 5 * 100


def test_multi_turn_is_not_a_request_list():
    spec = _spec(prefix=MULTI, output_tokens=OUT)
    with pytest.raises(ValueError, match="sessions"):
        open_loop_requests(spec, 5.0, RandomStreams(0))
    with pytest.raises(ValueError, match="multi_turn"):
        sessions(_spec(input_tokens=OUT, output_tokens=OUT), 5.0, RandomStreams(0))


def test_request_arrays_select_keeps_hashes_aligned():
    requests = open_loop_requests(_spec(prefix=DOCS, output_tokens=OUT), 2.0, RandomStreams(1))
    picked = requests.select(requests.input_tokens > 200)
    index = np.flatnonzero(requests.input_tokens > 200)
    assert np.array_equal(picked.arrival_s, requests.arrival_s[index])
    assert all(np.array_equal(a, requests.hash_ids[i]) for a, i in zip(picked.hash_ids, index))
    with pytest.raises(ValueError):
        RequestArrays(np.zeros(1), np.ones(1), np.ones(1), hash_ids=[np.zeros(1, dtype=np.int64)])
