"""Requests that name LoRA adapters: their own random stream, and the shared-context length they carry."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from kvsim.rng import RandomStreams
from kvsim.workload import ClientStream, WorkloadSpec, open_loop_requests

DOCS = {"arrival": {"kind": "poisson", "rate": 20.0},
        "prefix": {"kind": "shared_documents", "documents": 5, "zipf_s": 0.0,
                   "document_tokens": {"kind": "uniform", "low": 300, "high": 900},
                   "suffix_tokens": {"kind": "fixed", "value": 40}},
        "output_tokens": {"kind": "fixed", "value": 8}}


def _requests(spec: dict, seed: int = 3):
    return open_loop_requests(WorkloadSpec.model_validate(spec), 50.0, RandomStreams(seed))


def test_adapters_leave_every_other_draw_unchanged_and_carry_the_document_length():
    plain = _requests(DOCS)
    named = _requests({**DOCS, "adapters": {"count": 8}})
    assert np.array_equal(plain.arrival_s, named.arrival_s)
    assert np.array_equal(plain.input_tokens, named.input_tokens)
    assert all(np.array_equal(a, b) for a, b in zip(plain.hash_ids, named.hash_ids))
    assert plain.adapter is None and named.adapter is not None
    assert set(named.adapter.tolist()) == set(range(8))
    # prompt = document + 40-token suffix, so the shared context is the prompt minus 40
    assert np.array_equal(named.shared_tokens, named.input_tokens - 40)
    # the same adapters for the same seed, different for another
    assert np.array_equal(named.adapter, _requests({**DOCS, "adapters": {"count": 8}}).adapter)
    assert not np.array_equal(named.adapter, _requests({**DOCS, "adapters": {"count": 8}}, seed=4).adapter)


def test_fixed_hit_and_no_prefix_shared_context():
    base = {"arrival": {"kind": "poisson", "rate": 10.0}, "input_tokens": {"kind": "fixed", "value": 1000},
            "output_tokens": {"kind": "fixed", "value": 4}, "adapters": {"count": 2}}
    hit = _requests({**base, "prefix": {"kind": "fixed_hit", "hit_ratio": 0.5}})
    assert set(hit.shared_tokens.tolist()) == {496}  # floor(500 / 16) = 31 whole blocks
    none = _requests(base)
    assert none.hash_ids is None and set(none.shared_tokens.tolist()) == {0}


def test_closed_loop_clients_draw_adapters_from_their_own_stream():
    spec = WorkloadSpec.model_validate({**DOCS, "arrival": {"kind": "closed_loop", "clients": 2, "think_time": 0.1},
                                        "adapters": {"count": 4, "popularity": "zipf"}})
    plain = WorkloadSpec.model_validate({**DOCS, "arrival": {"kind": "closed_loop", "clients": 2, "think_time": 0.1}})
    a, b = ClientStream(spec, 0, RandomStreams(1)), ClientStream(plain, 0, RandomStreams(1))
    for _ in range(100):
        x, y = a.next_request_with_hashes(), b.next_request_with_hashes()
        assert (x.think_time_s, x.input_tokens, x.output_tokens) == (y.think_time_s, y.input_tokens, y.output_tokens)
        assert np.array_equal(x.hash_ids, y.hash_ids)
        assert 0 <= x.adapter < 4 and y.adapter == -1
        assert x.shared_tokens == x.input_tokens - 40


@pytest.mark.parametrize("arrival, prefix, message", [
    ({"kind": "trace", "format": "mooncake", "file": "t.jsonl"}, None, "not trace"),
    ({"kind": "poisson", "rate": 1.0}, {"kind": "multi_turn", "turns": {"kind": "fixed", "value": 2},
                                        "message_tokens": {"kind": "fixed", "value": 10},
                                        "think_time": 1.0}, "adapters with multi_turn"),
])
def test_adapters_refused_where_not_modelled(arrival, prefix, message):
    spec = {"arrival": arrival, "adapters": {"count": 2}}
    if prefix is not None:
        spec.update(prefix=prefix, output_tokens={"kind": "fixed", "value": 4})
    with pytest.raises(ValidationError, match=message):
        WorkloadSpec.model_validate(spec)
