"""Which pool node holds which block, for many blocks at once.

The remote pool spreads blocks over its nodes by id, as a distributed KV store shards its keys:
block ``b`` lives on node ``hash(b) % nodes``
(:meth:`~kvsim.serving.cache.tiers.SystemCache.remote_store`). A prompt's lookup, its write
and a prewarm ask that of hundreds of blocks at a time; :func:`by_node` answers for a whole list
with NumPy (Python's hash of an int, worked out on the array), giving the same groups, in the
same order, as asking block by block (``tests/test_pool_shards.py``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

import numpy as np

__all__ = ["by_node", "node_of"]

_MODULUS = np.uint64(2**61 - 1)
"""CPython hashes an int ``x`` as ``sign(x) * (|x| mod (2**61 - 1))``, -1 becoming -2
(``sys.hash_info.modulus``; the reference is ``long_hash`` in CPython's Objects/longobject.c)."""

S = TypeVar("S")  # a pool node's store


def node_of(ids: np.ndarray, nodes: int) -> np.ndarray:
    """``hash(int(i)) % nodes`` for each of ``ids`` (int64), as an int64 array."""
    ids = np.asarray(ids, dtype=np.int64)
    negative = ids < 0
    # |x| as uint64 (exact for -2**63 too: -(x + 1) fits, then one is added back)
    magnitude = np.where(negative, (-(ids + 1)).astype(np.uint64) + np.uint64(1), ids.astype(np.uint64))
    hashed = (magnitude % _MODULUS).astype(np.int64)
    hashed = np.where(negative, -hashed, hashed)
    hashed[hashed == -1] = -2
    return np.mod(hashed, nodes)  # (the divisor's sign, as Python's %)


def by_node(stores: list[S], blocks: list[Hashable]) -> list[tuple[S, list[Hashable]]]:
    """``blocks`` (Python ints) grouped by the pool node holding each: ``(store, group)`` in the
    order each node's first block comes, each group in order (``stores[hash(b) % len(stores)]``
    for every ``b``, walked block by block)."""
    count = len(stores)
    if not count:
        return []
    if count == 1:
        return [(stores[0], blocks)] if blocks else []
    if not blocks:
        return []
    try:
        ids = np.asarray(blocks, dtype=np.int64)
    except (OverflowError, TypeError, ValueError):  # (ids that are not int64: block by block)
        groups: dict[int, tuple[S, list[Hashable]]] = {}
        for block in blocks:
            store = stores[hash(block) % count]
            groups.setdefault(id(store), (store, []))[1].append(block)
        return list(groups.values())
    nodes = node_of(ids, count)
    present, first = np.unique(nodes, return_index=True)
    out = []
    for k in present[np.argsort(first)].tolist():
        out.append((stores[k], ids[nodes == k].tolist()))
    return out
