"""``plan.shared_pools``: a candidate whose remote KV pool is sized on its own axis.

A candidate of ``kvsim plan`` is normally one *unit*, and n units multiply every node count,
the remote KV pool's included: a 2-unit plan buys two pools. A candidate named here instead
keeps **one** pool of ``P`` pool nodes, shared by all its compute units over the scale-out
network (the simulator's remote pool is one pool per system, reached by every compute node's
NICs over the fabric: :mod:`kvsim.network.cluster_graph`, :class:`kvsim.serving.cache.SystemCache`).
The plan searches ``P`` over ``nodes`` and, for each ``P``, the fewest compute units ``n(P)`` per
target; the candidate's answer is the cheapest ``(n, P)`` (:mod:`kvsim.plan.pool_axis`).

``usd_per_tb_month`` prices a rented (cloud) pool by its capacity instead of buying its nodes:
US dollars per TB-month of the pool's raw capacity, TB = 1e12 bytes, a month = 730 h (8,760 h /
12). It replaces the pool nodes' price, power and running cost in the bill (the provider's).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kvsim.spec_types import FrozenSpec, PositiveFloat, PositiveInt

__all__ = ["SharedPoolSpec", "shared_pool_problems", "HOURS_PER_MONTH", "TB_BYTES"]

HOURS_PER_MONTH = 8760.0 / 12.0
"""Hours in the month of ``usd_per_tb_month`` (an average month: 730 h)."""
TB_BYTES = 1e12
"""Bytes in the TB of ``usd_per_tb_month`` (decimal, as storage is sold)."""


class SharedPoolSpec(FrozenSpec):
    """One candidate's shared remote KV pool, searched on its own axis.

    Attributes
    ----------
    nodes : list of int
        Pool node counts to try, ascending, each >= 1 (they replace ``kv_cache.remote.nodes``).
    usd_per_tb_month : float, optional
        Rent of the pool, US dollars per TB-month of capacity (TB = 1e12 bytes, month = 730 h);
        without it the pool nodes are bought at the catalog's price and power.
    """

    nodes: list[PositiveInt] = Field(min_length=1, max_length=16)
    usd_per_tb_month: PositiveFloat | None = None


def shared_pool_problems(pools: dict[str, SharedPoolSpec] | None, candidates: list[str],
                         systems: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """Checks of ``plan.shared_pools`` against the plan's candidates and their systems, as
    ``(field path, message)``: each named system is a candidate with a ``kv_cache.remote`` pool,
    and its node counts ascend without repeats."""
    found: list[tuple[tuple[str, ...], str]] = []
    for name, pool in (pools or {}).items():
        path = ("plan", "shared_pools", name)
        if name not in systems:
            found.append((path, f"{name!r} is not one of the systems: {', '.join(systems)}"))
            continue
        if name not in candidates:
            found.append((path, f"{name!r} is not one of the plan's candidates: {', '.join(candidates)}"))
        cache = getattr(systems[name], "kv_cache", None)
        if cache is None or cache.remote is None:
            found.append((path, (f"system {name!r} has no remote KV pool to share: give it kv_cache.remote "
                                 "({pool_node: NAME}; kvsim catalog pool_nodes lists them)")))
        if list(pool.nodes) != sorted(set(pool.nodes)):
            found.append((path + ("nodes",), (f"give pool node counts in ascending order without repeats, e.g. "
                                              f"{sorted(set(pool.nodes))}, not {list(pool.nodes)}")))
    return found
