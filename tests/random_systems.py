"""The systems of the invariant suite's random scenarios (see :mod:`random_scenarios`): parallel
layouts, colocated and disaggregated pools, scale-up domains and P:D controllers.

Each function draws from the generator it is given, in a fixed order, so that a case stays the
same YAML text; what the validator refuses is drawn again by :func:`random_scenarios.random_case`.
Draws stay physically sensible (durations > 0, shares in [0, 1], counts >= 1) and small: at most
four instances a pool, at most four nodes, two-node instances.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from kvsim.hardware import accelerator_catalog, node_catalog

__all__ = ["MOE", "SMALL", "CARDS_PER_NODE", "pick", "node_names", "scale_up_nodes", "colocated", "disaggregated",
           "domain_features"]

MOE = {"gpt-oss-120b", "qwen3-235b-a22b", "deepseek-r1", "kimi-k2", "llama-4-scout-17b-16e", "moe-small", "oss-small"}
SMALL = {"qwen3-1.7b", "qwen3-8b", "llama-3.1-8b", "qwen2.5-7b", "llama-2-7b", "moe-small", "oss-small"}
CARDS_PER_NODE = 8  # every catalog node (checked in node_names)


def node_names() -> list[str]:
    catalog = node_catalog()
    names = sorted(catalog.names())
    assert all(catalog[n].accelerators_per_node == CARDS_PER_NODE for n in names)
    return names


@functools.cache
def scale_up_nodes() -> list[str]:
    """Nodes whose cards have scale-up links (NVLink, UB): a scale-up domain may span several."""
    catalog, cards = node_catalog(), accelerator_catalog()
    return [n for n in node_names() if cards[catalog[n].accelerator].scale_up_bandwidth is not None]


def pick(rng: np.random.Generator, options, weights=None):
    options = list(options)
    if weights is None:
        return options[int(rng.integers(len(options)))]
    p = np.asarray(weights, dtype=float)
    return options[int(rng.choice(len(options), p=p / p.sum()))]


def _layout(rng: np.random.Generator, model: str, state: dict, wide: bool = True) -> dict[str, Any]:
    """An instance's parallel layout: plain tensor parallelism most often, else pipeline stages,
    expert parallelism or data-parallel attention (MoE models), or an instance of two nodes."""
    moe = model in MOE
    kind = pick(rng, ["tp", "pp", "ep", "dp_attention", "multi_node"],
                [12, 2, 4 if moe else 0, 4 if moe else 0, 1.5 if wide else 0])
    if kind == "tp":
        big = model not in SMALL
        return {"tp": int(rng.choice([1, 2, 4, 8], p=[0.1, 0.2, 0.3, 0.4] if big else [0.55, 0.25, 0.1, 0.1]))}
    state["features"].append(f"layout_{kind}")
    if kind == "pp":
        tp = int(rng.choice([1, 2, 4]))
        layout: dict[str, Any] = {"tp": tp, "pp": int(rng.choice([2, 4] if tp <= 2 else [2]))}
        if rng.random() < 0.3:
            layout["pp_schedule"] = "flush"
        if rng.random() < 0.3:
            layout["micro_batches"] = int(rng.choice([1, 2 * layout["pp"]]))
        return layout
    if kind == "multi_node":  # 16 cards: tensor parallelism over two nodes, or stages on each
        return dict(pick(rng, [{"tp": 16}, {"tp": 8, "pp": 2}, {"tp": 4, "pp": 4}]))
    tp = int(rng.choice([2, 4, 8]))
    layout = {"tp": tp, "ep": tp}
    if kind == "dp_attention":
        layout["dp_attention"] = int(rng.choice([2, tp]))
    if rng.random() < 0.3:
        layout["expert_skew"] = round(float(rng.uniform(0.2, 1.5)), 2)
    return layout


def _cards(layout: dict[str, Any]) -> int:
    return layout.get("tp", 1) * layout.get("pp", 1)


def _instance(rng: np.random.Generator, layout: dict[str, Any]) -> dict[str, Any]:
    inst = dict(layout)
    if rng.random() < 0.5:
        inst["max_num_seqs"] = int(rng.choice([2, 4, 16, 64, 256]))
    if rng.random() < 0.5:
        inst["max_batched_tokens"] = int(rng.choice([256, 512, 2048, 8192]))
    if rng.random() < 0.2:
        inst["block_size_tokens"] = int(rng.choice([16, 32]))
    return inst


def _nodes_for(instances: int, cards: int) -> int:
    """Nodes that hold ``instances`` instances of ``cards`` cards (whole nodes each, if wider)."""
    if cards > CARDS_PER_NODE:
        return instances * cards // CARDS_PER_NODE
    return math.ceil(instances * cards / CARDS_PER_NODE)


def _plain(layout: dict[str, Any]) -> bool:
    """Plain tensor parallelism inside one node (what peer HBM read in place is modelled for)."""
    return set(layout) == {"tp"} and layout["tp"] <= CARDS_PER_NODE


def _domains(rng: np.random.Generator, system: dict[str, Any], linked_nodes: int, state: dict,
             always: bool = False) -> int:
    """Maybe (``always``: surely, if it can) join the system's ``linked_nodes`` nodes (all with
    scale-up links) into scale-up domains of several nodes; returns the nodes per domain."""
    sizes = [d for d in range(2, linked_nodes + 1) if linked_nodes % d == 0]
    if not sizes or (not always and rng.random() < 0.3):
        return 1
    per = int(pick(rng, sizes, [2 if d < linked_nodes else 1 for d in sizes]))  # several domains more often
    system["scale_up_domain_nodes"] = per
    state["features"].append("scale_up_domain")
    return per


def domain_features(placed: list[tuple[int, int]], per: int, in_place: bool) -> list[str]:
    """Features of peer HBM access over domains of ``per`` nodes: ``placed`` holds each caching
    instance's first and last node. Read in place, instances sharing a domain share its store,
    on one node or several; with several domains some hits cross from one to another."""
    domains: dict[int, set] = {}
    for first, last in placed:
        domains.setdefault(first // per, set()).update(range(first, last + 1))
    counts = [sum(1 for first, _ in placed if first // per == d) for d in domains]
    out = ["several_domains"] if len(domains) > 1 else []
    if in_place and max(counts) > 1:
        out.append("domain_store_shared")
        if any(len(nodes) > 1 and n > 1 for nodes, n in zip(domains.values(), counts)):
            out.append("domain_store_multi_node")
    return out


def _placed(instances: int, cards: int, first_node: int = 0) -> list[tuple[int, int]]:
    """First and last node of each of ``instances`` instances filling nodes in order."""
    return [(first_node + (i * cards) // CARDS_PER_NODE, first_node + ((i + 1) * cards - 1) // CARDS_PER_NODE)
            for i in range(instances)]


SIGNAL_BANDS = {  # signal -> (threshold bands, proportional setpoints and gains): values it takes
    "prefill_queue": ([(10, 100), (10, 2000), (200, 1000)], [(100, 0.01), (500, 0.004), (2000, 0.001)]),
    "ttft_attainment": ([(0.5, 0.9), (0.8, 0.99)], [(0.9, 10.0), (0.95, 4.0)]),
    "tpot_attainment": ([(0.5, 0.9), (0.8, 0.99)], [(0.9, 10.0), (0.95, 4.0)]),
    "decode_kv_occupancy": ([(0.2, 0.6), (0.4, 0.9)], [(0.5, 4.0), (0.8, 10.0)]),
    "decode_queue": ([(0.5, 2.0), (1.0, 8.0)], [(1.0, 1.0), (4.0, 0.5)]),
}
"""Bands and setpoints in each signal's own range (tokens per prefill instance; requests per decode
instance; shares in [0, 1])."""


def _pool_bounds(rng: np.random.Generator, pool: dict[str, Any], split: dict[str, int], state: dict) -> None:
    """Sometimes a split pool's own minimum in a role (at most what the split holds in all)."""
    total = split["prefill"] + split["decode"]
    if total >= 3 and rng.random() < 0.3:
        pool[pick(rng, ["min_prefill", "min_decode"])] = int(rng.integers(1, total))
        state["features"].append("pool_bounds")


def _controller(rng: np.random.Generator, state: dict, instances: int) -> dict[str, Any]:
    """A P:D controller for a system of ``instances`` instances; notes which SLO it needs."""
    kind = pick(rng, ["static", "threshold", "proportional"], [1, 2, 2])
    state["features"] += ["controller", f"controller_{kind}"]
    interval = f"{float(rng.choice([0.25, 0.5, 1.0]))} s"
    if kind == "static":
        return {"kind": "static", "interval": interval}
    signal = pick(rng, list(SIGNAL_BANDS), [2, 1, 1, 1, 1])
    state["features"].append(f"signal_{signal}")
    if signal.endswith("_attainment"):
        state["slo"] = True
    control: dict[str, Any] = {"kind": kind, "signal": signal, "interval": interval,
                               "switch_time": f"{float(rng.choice([0.1, 0.5, 1.0]))} s"}
    bands, setpoints = SIGNAL_BANDS[signal]
    if kind == "threshold":
        control["low"], control["high"] = pick(rng, bands)
        if rng.random() < 0.3:
            control["step"] = 2
    else:
        control["setpoint"], control["gain"] = pick(rng, setpoints)
        control["max_step"] = int(rng.choice([1, 2]))
    if rng.random() < 0.4:
        control["window"] = f"{float(rng.choice([0.5, 2.0]))} s"
    if instances >= 4 and rng.random() < 0.3:
        control[pick(rng, ["min_prefill", "min_decode"])] = 2
    # KV migration on a switch (not with client timeouts): a third of the adaptive controllers,
    # told by a value drawn already, so the scenarios' other draws stay as they were
    if control["switch_time"] == "0.5 s" and "timeout" not in state["features"]:
        control["on_switch"] = "migrate"
        state["features"].append("on_switch_migrate")
    return control


def colocated(rng: np.random.Generator, model: str, node: str, state: dict) -> tuple[dict[str, Any], int, bool]:
    """A colocated system: its dict, its instances, and whether peer HBM may be read in place."""
    # the layout search pilots every layout of one node's cards: not under the load of a tight case
    if not state["tight"] and rng.random() < 0.05:
        state["features"].append("layout_best")
        instance = _instance(rng, {"layout": "best"})
        return {"node": node, "instance": instance, "router": _router(rng)}, CARDS_PER_NODE, False
    domains = node in scale_up_nodes() and rng.random() < 0.25
    layout = _layout(rng, model, state)
    if domains and _cards(layout) < 4:  # a few instances per node, so that several nodes hold some
        layout = {"tp": int(rng.choice([4, 8]))}
    cards = _cards(layout)
    if domains:  # two or four nodes, every card in use by at most four instances
        nodes = int(pick(rng, [n for n in (2, 4) if n * CARDS_PER_NODE // cards <= 4 and n * CARDS_PER_NODE >= cards]))
        instances = nodes * CARDS_PER_NODE // cards
    else:
        instances = int(rng.integers(1, 3 if cards > CARDS_PER_NODE else 4))
        nodes = _nodes_for(instances, cards)
    if cards > CARDS_PER_NODE:
        state["features"].append("multi_node_instance")
    system: dict[str, Any] = {"node": node, "instances": instances, "instance": _instance(rng, layout)}
    if nodes > 1:
        system["nodes"] = nodes
    system["router"] = _router(rng)
    per = _domains(rng, system, nodes, state, always=True) if domains else 1
    state["placed"] = (_placed(instances, cards), per)
    return system, instances, _plain(layout)


def _router(rng: np.random.Generator) -> str:
    return pick(rng, ["least_outstanding", "round_robin", "least_prompt_tokens", "most_free_kv", "prefix_aware",
                      "cache_aware"])


def disaggregated(rng: np.random.Generator, model: str, node: str, nodes: list[str],
                   state: dict) -> tuple[dict[str, Any], int, bool]:
    """Prefill and decode pools (``pd_pools``, each with its own node type and layout) or one
    pool split by roles (``pd_roles``), maybe with a controller; returns the system, the
    instances that cache and whether peer HBM may be read in place."""
    shape = pick(rng, ["pd_pools", "pd_roles"], [2, 1.5])
    state["features"].append(shape)
    system: dict[str, Any] = {}
    layout = _layout(rng, model, state)
    cards = _cards(layout)
    linked = 0
    scale_up = scale_up_nodes()
    if shape == "pd_pools":
        node_d = pick(rng, nodes) if rng.random() < 0.5 else node
        layout_d = _layout(rng, model, state) if rng.random() < 0.3 else layout
        if layout_d != layout:
            state["features"].append("pd_layouts_differ")
        n_p, n_d = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        pools = {
            "p": {"node": node, "nodes": _nodes_for(n_p, cards), "instances": n_p,
                  "instance": _instance(rng, layout), "role": "prefill"},
            "d": {"node": node_d, "nodes": _nodes_for(n_d, _cards(layout_d)), "instances": n_d,
                  "instance": _instance(rng, layout_d), "role": "decode"},
        }
        total, caching, plain = n_p + n_d, n_p, _plain(layout)
        state["placed"] = (_placed(n_p, cards), 1)
        if node in scale_up and node_d in scale_up:
            linked = pools["p"]["nodes"] + pools["d"]["nodes"]
        if max(_cards(layout), _cards(layout_d)) > CARDS_PER_NODE:
            state["features"].append("multi_node_instance")
        system["pools"] = pools
    else:
        split = {"prefill": int(rng.integers(1, 4)), "decode": int(rng.integers(1, 4))}
        total = caching = split["prefill"] + split["decode"]
        pool = {"node": node, "instance": _instance(rng, layout), "roles": split}
        pool["nodes"] = _nodes_for(total, cards)
        caching, plain = split["prefill"], _plain(layout)
        state["placed"] = (_placed(split["prefill"], cards), 1)
        if node in scale_up:
            linked = pool["nodes"]
        if cards > CARDS_PER_NODE:
            state["features"].append("multi_node_instance")
        system["pools"] = {"dt": pool}
    switchable = False
    if rng.random() < (0.7 if shape == "pd_roles" else 0.45):
        system["controller"] = control = _controller(rng, state, total)
        if control["kind"] != "static":  # an instance of a switchable pool may come to compute prompts
            switchable = True
            if shape == "pd_roles":
                caching = total
                _pool_bounds(rng, system["pools"]["dt"], split, state)
            else:  # fixed roles: the controller may move only the pools declared switchable
                which = pick(rng, ["d", "p", "both"], [2, 1, 1])
                for name in ("p", "d") if which == "both" else (which,):
                    system["pools"][name]["switchable"] = True
                state["features"].append("pool_fixed_beside_switchable" if which != "both" else "pools_switchable")
                caching = n_p + (n_d if which != "p" else 0)
    if linked and rng.random() < 0.4:
        per = _domains(rng, system, linked, state)
        state["placed"] = (state["placed"][0], per)
    system["kv_handoff"] = {"mode": pick(rng, ["layerwise", "whole"]), "gpu_direct": bool(rng.random() < 0.7)}
    system["prefill_router"] = pick(rng, ["least_prompt_tokens", "least_outstanding", "round_robin",
                                          "prefix_aware", "cache_aware"])
    system["decode_router"] = pick(rng, ["most_free_kv", "least_outstanding", "round_robin"])
    return system, caching, plain and not switchable
