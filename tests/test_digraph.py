"""kvsim's own directed graph (kvsim/network/digraph.py) against networkx, which it replaces in
the run: the same nodes, edges and attributes in the same order, and the same fewest-hop route
between every pair of nodes, ties included (kvsim itself no longer imports networkx)."""

from __future__ import annotations

import random

import networkx as nx
import pytest

import kvsim.network.cluster_graph as cluster_module
from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.network.cluster_graph import cluster_graph
from kvsim.network.digraph import DiGraph, NoPath, shortest_path


def _routes(g: nx.DiGraph):
    return nx.subgraph_view(g, filter_edge=lambda u, v: g.edges[u, v]["kind"] != "scale_up")


def _clusters():
    nodes, accs, pools = node_catalog(), accelerator_catalog(), pool_node_catalog()
    h20, l20, ascend = nodes["h20-8x"], nodes["l20-8x"], nodes["atlas-850"]
    yield "one h20 server", [("n0", h20, accs["h20"])], [], None
    yield "two l20 servers and both pools", [("a", l20, accs["l20"]), ("b", l20, accs["l20"])], \
        [("pool0", pools["dram-pool-8x"]), ("pool1", pools["nvme-storage-16x"])], None
    yield "a SuperPoD of three Atlas nodes", [(f"s{k}", ascend, accs[ascend.accelerator]) for k in range(3)], \
        [("pool0", pools["dram-pool-8x"])], [["s0", "s1", "s2"]]
    yield "mixed h20 and l20 with a pool", [("h", h20, accs["h20"]), ("l", l20, accs["l20"])], \
        [("p", pools["nvme-storage-16x"])], None


@pytest.mark.parametrize("case", list(_clusters()), ids=lambda c: c[0])
def test_cluster_graphs_route_as_networkx_does(case, monkeypatch):
    _, compute, pools, domains = case
    graph = cluster_graph(compute, pools, domains)
    # the same construction, call for call, into a networkx graph (a copy made from ``graph``
    # would order each node's predecessors differently: by source, not by when edges were added)
    monkeypatch.setattr(cluster_module, "DiGraph", nx.DiGraph)
    reference = cluster_graph(compute, pools, domains)
    assert isinstance(reference, nx.DiGraph) and isinstance(graph, DiGraph)
    assert list(graph.nodes(data=True)) == list(reference.nodes(data=True))
    assert list(graph.edges(data=True)) == list(reference.edges(data=True))
    assert list(graph.edges(data="kind")) == list(reference.edges(data="kind"))
    routes = _routes(reference)
    names = list(graph.nodes)
    compared = 0
    for src in names:
        for dst in names:
            try:
                expected = nx.shortest_path(routes, src, dst)
            except nx.NetworkXNoPath:
                with pytest.raises(NoPath):
                    shortest_path(graph, src, dst, lambda u, v: graph.edges[u, v]["kind"] != "scale_up")
                continue
            got = shortest_path(graph, src, dst, lambda u, v: graph.edges[u, v]["kind"] != "scale_up")
            assert got == expected, (src, dst)
            compared += 1
    assert compared > len(names) ** 2 // 2  # most pairs are connected: the check is not vacuous


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_tie_break_as_networkx_does(seed):
    """Sparse random digraphs with many equal-length routes (and unreachable pairs), every
    third edge filtered out: each route and each missing route is networkx's."""
    rng = random.Random(seed)
    n = rng.randint(2, 30)
    graph, reference = DiGraph(), nx.DiGraph()
    calls = [("node", f"v{k}") for k in rng.sample(range(n), n // 2)]  # some nodes first, shuffled
    calls += [("edge", *(f"v{k}" for k in rng.sample(range(n), 2)), "cut" if rng.random() < 0.33 else "keep")
              for _ in range(rng.randint(0, 3 * n))]
    calls += [("node", f"v{k}") for k in range(n)]  # the rest (and attributes for all)
    for call in calls:
        for g in (graph, reference):
            if call[0] == "node":
                g.add_node(call[1], kind="x")
            else:
                g.add_edge(call[1], call[2], kind=call[3])
    assert list(graph.edges(data=True)) == list(reference.edges(data=True))
    keep = nx.subgraph_view(reference, filter_edge=lambda u, v: reference.edges[u, v]["kind"] == "keep")
    for src in graph.nodes:
        for dst in graph.nodes:
            try:
                expected = nx.shortest_path(keep, src, dst)
            except nx.NetworkXNoPath:
                expected = None
            try:
                got = shortest_path(graph, src, dst, lambda u, v: graph.edges[u, v]["kind"] == "keep")
            except NoPath:
                got = None
            assert got == expected, (seed, src, dst)


def test_the_graph_behaves_as_networkx_for_what_kvsim_reads():
    graph, reference = DiGraph(), nx.DiGraph()
    for g in (graph, reference):
        g.add_edge("a", "b", cap=1.0)  # nodes made by their first edge
        g.add_node("a", kind="gpu")  # then given attributes
        g.add_node("c", kind="nic")
        g.add_edge("a", "b", lat=2.0)  # an edge's attributes updated, not replaced
        g.add_edge("b", "c", cap=3.0)
    assert list(graph.nodes(data=True)) == list(reference.nodes(data=True))
    assert list(graph.edges(data=True)) == list(reference.edges(data=True))
    assert list(graph.edges(data="cap")) == list(reference.edges(data="cap"))
    assert graph.edges["a", "b"] == reference.edges["a", "b"] == {"cap": 1.0, "lat": 2.0}
    assert graph.nodes["a"] == {"kind": "gpu"} and "c" in graph and "z" not in graph
    assert graph.has_edge("b", "c") and not graph.has_edge("c", "b")
    assert shortest_path(graph, "a", "a") == [nx.shortest_path(reference, "a", "a")][0] == ["a"]
    with pytest.raises(NoPath):
        shortest_path(graph, "c", "a")
    with pytest.raises(KeyError):
        shortest_path(graph, "a", "z")
