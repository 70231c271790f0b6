"""The vectorised JSONL reader (kvsim.workload.trace_jsonl) gives exactly what the row-by-row
reader gives, and hands every file that is not entirely well-formed back to it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import kvsim.workload.traces as traces
from kvsim.workload.trace_jsonl import read_hashed_jsonl

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
BAILIAN = [
    {"chat_id": 0, "parent_chat_id": -1, "timestamp": 100.0, "input_length": 40, "output_length": 20,
     "type": "text", "turn": 1, "hash_ids": [0, 1, 2]},
    {"chat_id": 2, "parent_chat_id": 0, "timestamp": 99.25, "input_length": 90, "output_length": 11,
     "type": "text", "turn": 2, "hash_ids": [0, 1, 3, 4, 5, 6], "extra": "ignored"},
]


def _both(load, path, monkeypatch):
    fast = load(path)
    monkeypatch.setattr(traces, "read_hashed_jsonl", lambda *a, **k: None)
    slow = load(path)
    monkeypatch.undo()
    return fast, slow


def _same(a, b):
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.input_tokens, b.input_tokens) and np.array_equal(a.output_tokens, b.output_tokens)
    assert len(a.hash_ids) == len(b.hash_ids) and all(np.array_equal(x, y) for x, y in zip(a.hash_ids, b.hash_ids))
    assert a.block_tokens == b.block_tokens


@pytest.mark.parametrize("name", ["mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl"])
def test_mooncake_fast_equals_row_by_row(name, monkeypatch):
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    assert read_hashed_jsonl(path, 512, 1000.0, session=False) is not None  # the fast path is taken
    _same(*_both(traces.load_mooncake, path, monkeypatch))


def test_bailian_fast_equals_row_by_row(tmp_path, monkeypatch):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in BAILIAN) + "\n\n")
    assert read_hashed_jsonl(path, 16, 1.0, session=True) is not None
    fast, slow = _both(traces.load_bailian, path, monkeypatch)
    _same(fast, slow)
    assert fast.arrival_s.tolist() == [0.0, 0.75]


@pytest.mark.parametrize("change", [
    {"input_length": 40.0},  # a float: the row reader refuses it, naming the line
    {"timestamp": "100"},
    {"hash_ids": [0, 1]},
    {"turn": 0},
    {"parent_chat_id": -2},
    {"output_length": 0},
])
def test_anything_irregular_goes_to_the_row_reader(tmp_path, change):
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps({**r, **change} if i == 0 else r) for i, r in enumerate(BAILIAN)) + "\n")
    assert read_hashed_jsonl(path, 16, 1.0, session=True) is None


def test_a_missing_session_field_goes_to_the_row_reader(tmp_path):
    path = tmp_path / "q.jsonl"
    row = {k: v for k, v in BAILIAN[0].items() if k != "turn"}
    path.write_text(json.dumps(row) + "\n" + json.dumps(BAILIAN[1]) + "\n")
    assert read_hashed_jsonl(path, 16, 1.0, session=True) is None
    with pytest.raises(ValueError, match=r"q.jsonl:1: turn: missing"):
        traces.load_bailian(path)
