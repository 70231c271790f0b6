"""A small directed graph for the cluster topology: the part of ``networkx.DiGraph`` kvsim uses
(nodes and edges with attributes, in insertion order) and fewest-hop routing with networkx's
exact tie-breaking, without importing networkx (~0.1 CPU-s per process).

Node and edge attributes are plain dicts; nodes, successors and predecessors keep insertion
order, as networkx's do. :func:`shortest_path` is networkx's ``bidirectional_shortest_path``
step for step (the same fringe alternation and neighbour order), so a route is the one networkx
would return: the records of a run do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any

__all__ = ["DiGraph", "NoPath", "shortest_path"]


class NoPath(ValueError):
    """No path between two nodes (networkx's ``NetworkXNoPath``)."""


class _Nodes:
    """``graph.nodes``: ``nodes[n]`` is n's attribute dict; ``nodes(data=True)`` yields
    ``(n, attrs)``; iterating yields the nodes, in insertion order."""

    __slots__ = ("_node",)

    def __init__(self, node: dict[Hashable, dict[str, Any]]):
        self._node = node

    def __getitem__(self, n: Hashable) -> dict[str, Any]:
        return self._node[n]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._node)

    def __len__(self) -> int:
        return len(self._node)

    def __contains__(self, n: object) -> bool:
        return n in self._node

    def __call__(self, data: bool | str = False, default: Any = None) -> Iterator:
        if data is False:
            return iter(self._node)
        if data is True:
            return iter(self._node.items())
        return ((n, attrs.get(data, default)) for n, attrs in self._node.items())


class _Edges:
    """``graph.edges``: ``edges[u, v]`` is the edge's attribute dict; ``edges(data=...)`` yields
    ``(u, v)``, ``(u, v, attrs)`` or ``(u, v, attrs[data])``, by source in node order, then by
    successor in insertion order (networkx's order)."""

    __slots__ = ("_succ",)

    def __init__(self, succ: dict[Hashable, dict[Hashable, dict[str, Any]]]):
        self._succ = succ

    def __getitem__(self, edge: tuple[Hashable, Hashable]) -> dict[str, Any]:
        u, v = edge
        return self._succ[u][v]

    def __iter__(self) -> Iterator[tuple[Hashable, Hashable]]:
        return ((u, v) for u, nbrs in self._succ.items() for v in nbrs)

    def __len__(self) -> int:
        return sum(len(nbrs) for nbrs in self._succ.values())

    def __contains__(self, edge: object) -> bool:
        try:
            u, v = edge  # type: ignore[misc]
        except (TypeError, ValueError):
            return False
        return u in self._succ and v in self._succ[u]

    def __call__(self, data: bool | str = False, default: Any = None) -> Iterator:
        if data is False:
            return iter(self)
        if data is True:
            return ((u, v, d) for u, nbrs in self._succ.items() for v, d in nbrs.items())
        return ((u, v, d.get(data, default)) for u, nbrs in self._succ.items() for v, d in nbrs.items())


class DiGraph:
    """Directed graph with attribute dicts on nodes and edges (one edge per ordered pair)."""

    def __init__(self) -> None:
        self._node: dict[Hashable, dict[str, Any]] = {}
        self._succ: dict[Hashable, dict[Hashable, dict[str, Any]]] = {}
        self._pred: dict[Hashable, dict[Hashable, dict[str, Any]]] = {}

    def add_node(self, n: Hashable, **attrs: Any) -> None:
        """Add ``n`` (or update its attributes if it is there)."""
        if n not in self._node:
            self._succ[n] = {}
            self._pred[n] = {}
            self._node[n] = attrs
        else:
            self._node[n].update(attrs)

    def add_edge(self, u: Hashable, v: Hashable, **attrs: Any) -> None:
        """Add edge ``u -> v`` (and either node if missing), or update its attributes."""
        for n in (u, v):
            if n not in self._node:
                self.add_node(n)
        data = self._succ[u].get(v, {})
        data.update(attrs)
        self._succ[u][v] = data
        self._pred[v][u] = data

    def has_edge(self, u: Hashable, v: Hashable) -> bool:
        return u in self._succ and v in self._succ[u]

    def __contains__(self, n: object) -> bool:
        try:
            return n in self._node
        except TypeError:
            return False

    def __len__(self) -> int:
        return len(self._node)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._node)

    @property
    def nodes(self) -> _Nodes:
        return _Nodes(self._node)

    @property
    def edges(self) -> _Edges:
        return _Edges(self._succ)

    def successors(self, n: Hashable) -> Iterator[Hashable]:
        return iter(self._succ[n])

    def predecessors(self, n: Hashable) -> Iterator[Hashable]:
        return iter(self._pred[n])


def shortest_path(graph: DiGraph, source: Hashable, target: Hashable,
                  edge_ok: Callable[[Hashable, Hashable], bool] | None = None) -> list[Hashable]:
    """Fewest-hop path ``[source, ..., target]`` over the edges ``u -> v`` with ``edge_ok(u, v)``
    (all edges if None): networkx's ``bidirectional_shortest_path`` on ``subgraph_view(graph,
    filter_edge=edge_ok)``, with the same ties.

    Raises
    ------
    KeyError
        ``source`` or ``target`` is not a node.
    NoPath
        ``target`` cannot be reached from ``source``.
    """
    for n in (source, target):
        if n not in graph._node:
            raise KeyError(f"node {n!r} is not in the graph")
    ok = edge_ok if edge_ok is not None else (lambda u, v: True)
    if source == target:
        return [source]
    succ_of, pred_of = graph._succ, graph._pred
    pred: dict[Hashable, Hashable | None] = {source: None}
    succ: dict[Hashable, Hashable | None] = {target: None}
    forward, reverse = [source], [target]
    meet = None
    found = False
    while forward and reverse and not found:
        if len(forward) <= len(reverse):
            level, forward = forward, []
            for v in level:
                for w in succ_of[v]:
                    if not ok(v, w):
                        continue
                    if w not in pred:
                        forward.append(w)
                        pred[w] = v
                    if w in succ:
                        meet, found = w, True
                        break
                if found:
                    break
        else:
            level, reverse = reverse, []
            for v in level:
                for w in pred_of[v]:
                    if not ok(w, v):
                        continue
                    if w not in succ:
                        succ[w] = v
                        reverse.append(w)
                    if w in pred:
                        meet, found = w, True
                        break
                if found:
                    break
    if not found:
        raise NoPath(f"no path between {source!r} and {target!r}")
    path = []
    w = meet
    while w is not None:
        path.append(w)
        w = pred[w]
    path.reverse()
    w = succ[path[-1]]
    while w is not None:
        path.append(w)
        w = succ[w]
    return path
