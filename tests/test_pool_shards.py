"""The pool node of many blocks at once (kvsim/serving/cache/pool_shards.py) is Python's
``hash(b) % nodes`` block by block: the same node for every id (edge values included) and the
same groups in the same order as the per-block walk."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.serving.cache.pool_shards import by_node, node_of

EDGES = [0, 1, -1, -2, 2**61 - 2, 2**61 - 1, 2**61, -(2**61) + 1, -(2**61 - 1), -(2**61), 2**62, -(2**62),
         2**63 - 1, -(2**63), -(2**63) + 1, 12345678901234567]


@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 7, 16])
def test_node_of_is_pythons_hash_modulo(nodes):
    rng = np.random.default_rng(nodes)
    ids = np.concatenate([np.array(EDGES, dtype=np.int64),
                          rng.integers(-(2**63), 2**63 - 1, size=20_000, dtype=np.int64, endpoint=True),
                          rng.integers(-5, 5, size=100, dtype=np.int64)])
    assert node_of(ids, nodes).tolist() == [hash(int(i)) % nodes for i in ids.tolist()]


def _walk(stores, blocks):
    groups: dict[int, tuple] = {}
    for block in blocks:
        store = stores[hash(block) % len(stores)]
        groups.setdefault(id(store), (store, []))[1].append(block)
    return list(groups.values())


@pytest.mark.parametrize("nodes", [1, 2, 4, 5])
def test_by_node_groups_as_the_per_block_walk(nodes):
    rng = np.random.default_rng(10 + nodes)
    stores = [object() for _ in range(nodes)]
    for size in (0, 1, 3, 64, 512):
        blocks = rng.integers(-(2**63), 2**63 - 1, size=size, dtype=np.int64).tolist()
        got = by_node(stores, blocks)
        assert [(id(s), g) for s, g in got] == [(id(s), g) for s, g in _walk(stores, blocks)]
        assert all(type(b) is int for _, g in got for b in g)
    big = [2**70, 3, -(2**65)]  # (not int64: grouped block by block)
    assert [(id(s), g) for s, g in by_node(stores, big)] == [(id(s), g) for s, g in _walk(stores, big)]
