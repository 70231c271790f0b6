"""Random *valid* small scenarios for the invariant suite (tests/test_invariants.py).

:func:`random_case` draws one scenario from a numpy generator seeded by the case number alone, so
case ``k`` is the same YAML text on every machine and in every run of the suite. The draws cover
every node type of the catalog that can hold the drawn model, small and large models (Qwen3-1.7B
and -8B most often, and two small MoE models defined in the scenario's own catalog), dtypes,
parallel layouts (tensor, pipeline, expert parallelism, data-parallel attention, instances
spanning nodes, ``layout: best``), tight KV pools that force preemption (recompute or swap), no
cache / HBM prefix cache / DRAM and NVMe tiers / a remote pool (eviction, write, load and
peer-HBM policies, prewarm), scale-up domains of several nodes (``scale_up_domain_nodes``) with
peer HBM copied in or read in place (one domain store shared by instances on several nodes),
open loops (Poisson, gamma, diurnal), closed loops, multi-turn sessions, shared documents and
fixed-hit prefixes, client timeouts, disaggregated prefill/decode pools (separate pools, with
their own layouts, or one pool split by roles) with every controller kind (static, threshold,
proportional) on every signal, LoRA adapters, routers and a second system beside the first.

What is valid is the validator's to say: a draw that ``kvsim.parse_scenario`` or ``kvsim.check``
refuses (a model that does not fit the card, a layout the node cannot hold, a swap without DRAM)
is drawn again from the same generator, so the case stays deterministic. Scenarios are kept tiny
(seconds of simulated time, tens of requests, a few instances) so that the default suite runs 60
of them in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

import kvsim
from random_systems import colocated, disaggregated, domain_features, node_names, pick, scale_up_nodes

__all__ = ["Case", "random_case", "MODELS"]

MODELS = {  # model -> weight of the draw: small models most often (cheap and fit everywhere)
    "qwen3-1.7b": 6, "qwen3-8b": 6, "llama-3.1-8b": 2, "qwen2.5-7b": 2, "llama-2-7b": 1,
    "mistral-nemo-12b": 1, "qwen3-32b": 1, "gpt-oss-120b": 1, "qwen3-235b-a22b": 1, "llama-3.1-70b": 1,
    "deepseek-r1": 0.5, "kimi-k2": 0.5, "yi-34b": 0.5, "llama-4-scout-17b-16e": 0.5, "llama-2-70b": 0.5,
    "moe-small": 2, "oss-small": 1.5,
}
CATALOG_MODELS = {
    # the catalog's MoE models in few layers (about 40 GB of bf16 weights), so that expert
    # parallelism and data-parallel attention fit most nodes; oss-small keeps sliding layers
    "moe-small": {"base": "qwen3-235b-a22b", "num_layers": 8},
    "oss-small": {"base": "gpt-oss-120b", "num_layers": 6, "sliding_window_layers": 3},
}
MAX_ATTEMPTS = 60


@dataclass
class Case:
    """One generated scenario.

    Attributes
    ----------
    case : int
        The case number (the generator's seed).
    text : str
        The scenario YAML.
    features : list of str
        What the draw exercises (``pd``, ``preempt_swap``, ``closed_loop`` ...), for coverage counts.
    randomized : bool
        The records must change with the seed: the workload draws a continuous random variable
        the records depend on (open-loop arrival times, exponential think times), so two seeds
        give equal records with probability zero. Discrete draws (lengths, documents, adapters)
        may coincide: a closed loop of 1-token answers (``uniform, low: 1, high: 1``) is the same
        run for every seed.
    timeout_s : float or None
        The clients' timeout, seconds.
    attempts : int
        Draws the validator refused before this one.
    """

    case: int
    text: str
    features: list[str] = field(default_factory=list)
    randomized: bool = True
    timeout_s: float | None = None
    attempts: int = 0

    def scenario(self) -> kvsim.Scenario:
        return kvsim.parse_scenario(self.text, f"<random scenario {self.case}>")


def _length(rng: np.random.Generator, low: int, high: int, state: dict) -> dict[str, Any]:
    """A length distribution with values in [low, high] tokens (the upper half of it for a
    scenario with tight KV pools: requests near the longest, which the pools are sized by)."""
    if state["tight"]:
        low = max(low, high // 2)
    kind = pick(rng, ["fixed", "uniform", "lognormal", "empirical"], [3, 2, 3, 1])
    if kind == "fixed":
        return {"kind": "fixed", "value": int(rng.integers(low, high + 1))}
    if kind == "uniform":
        a, b = sorted(int(x) for x in rng.integers(low, high + 1, size=2))
        return {"kind": "uniform", "low": a, "high": b}
    if kind == "lognormal":
        median = float(rng.uniform(low, max(low + 1, high / 2)))
        return {"kind": "lognormal", "median": round(median, 1), "sigma": round(float(rng.uniform(0.2, 1.2)), 2),
                "min": low, "max": high}
    values = sorted({int(x) for x in rng.integers(low, high + 1, size=int(rng.integers(2, 5)))})
    return {"kind": "empirical", "values": values,
            "weights": [round(float(w), 2) for w in rng.uniform(0.5, 3.0, size=len(values))]}


def _arrival(rng: np.random.Generator, duration: float, requests: float, state: dict,
             open_only: bool = False) -> dict[str, Any]:
    """An arrival process giving about ``requests`` requests over ``duration`` seconds."""
    rate = requests / duration
    kinds, weights = ["poisson", "gamma", "diurnal", "closed_loop"], [4, 2, 1, 3]
    if open_only:
        kinds, weights = kinds[:3], weights[:3]
    kind = pick(rng, kinds, weights)
    state["features"].append(kind)
    if kind == "closed_loop":
        # a client thinks between requests: with no think time, one-token answers from the cache
        # come back in milliseconds and a few clients send thousands of requests in seconds
        think = round(float(rng.choice([0.25, 0.5, 1.0, 2.0])), 2)
        dist = pick(rng, ["fixed", "exponential"])
        if dist == "exponential" and think > 0:
            state["randomized"] = True
        return {"kind": "closed_loop", "clients": int(rng.integers(1, 13)), "think_time": f"{think} s",
                "think_distribution": dist}
    state["randomized"] = True
    if kind == "poisson":
        return {"kind": "poisson", "rate": f"{rate:.4g}/s"}
    if kind == "gamma":
        return {"kind": "gamma", "rate": f"{rate:.4g}/s", "cv": round(float(rng.uniform(0.3, 3.0)), 2)}
    return {"kind": "diurnal", "rate": f"{rate:.4g}/s", "amplitude": round(float(rng.uniform(0.1, 0.9)), 2),
            "period": f"{duration / float(rng.choice([1, 2])):.3g} s"}


def _kv_cache(rng: np.random.Generator, state: dict, instances: int, peer_odds: float = 0.25,
              in_place: bool = True) -> dict[str, Any] | None:
    """A ``kv_cache`` block (None: no cache) for a system whose ``instances`` instances cache;
    peer HBM with probability ``peer_odds``, read in place only if ``in_place`` (plain
    tensor parallelism inside a node, cards with scale-up links, no role switches)."""
    kind = pick(rng, ["none", "hbm", "dram", "nvme", "dram_nvme", "remote", "dram_remote"], [4, 3, 3, 2, 2, 2, 1])
    if kind == "none":
        state["features"].append("no_cache")
        return None
    state["features"].append(f"cache_{kind}")
    cache: dict[str, Any] = {}
    policies = ["lru", "lfu", "s3fifo"]
    if rng.random() < 0.3:
        cache["hbm_eviction"] = pick(rng, policies)
    # a prewarm fills each tier below HBM twice over (a pool's terabytes take seconds): small tiers only
    prewarm = kind not in ("hbm", "remote", "dram_remote") and rng.random() < 0.4
    if "dram" in kind:
        cache["dram"] = {"capacity": f"{int(rng.choice([1, 2] if prewarm else [1, 2, 8, 32]))} GiB",
                         "eviction": pick(rng, policies)}
    if "nvme" in kind:
        cache["nvme"] = {"capacity": f"{int(rng.choice([2, 4] if prewarm else [2, 16, 64]))} GiB",
                         "eviction": pick(rng, policies)}
    if "remote" in kind:
        cache["remote"] = {"pool_node": pick(rng, ["nvme-storage-16x", "dram-pool-8x"]),
                           "nodes": int(rng.integers(1, 3)), "eviction": pick(rng, policies)}
    if kind != "hbm":
        cache["write_policy"] = pick(rng, ["write_through", "write_back"])
        cache["gpu_direct"] = bool(rng.random() < 0.6)
        cache["promote_on_hit"] = bool(rng.random() < 0.7)
        if prewarm:
            cache["prewarm"] = True
            state["features"].append("prewarm")
        if rng.random() < 0.25:
            cache["io_size"] = pick(rng, ["64 KiB", "1 MiB"])
    cache["load_mode"] = pick(rng, ["overlap", "before"])
    cache["load_policy"] = pick(rng, ["faster", "always"])
    if instances > 1 and rng.random() < peer_odds:
        cache["peer_hbm"] = pick(rng, ["copy_in", "read_in_place"]) if in_place else "copy_in"
        state["features"].append(f"peer_{cache['peer_hbm']}")
    return cache


def _draw(rng: np.random.Generator, case: int) -> tuple[dict[str, Any], dict]:
    """One candidate scenario (a dict to dump as YAML) and what it exercises."""
    # tight: every pool's KV holds only a little more than the longest request (see _tighten)
    state: dict[str, Any] = {"features": [], "randomized": False, "tight": bool(rng.random() < 0.4)}
    model = pick(rng, MODELS, list(MODELS.values()))
    dtype = pick(rng, ["bf16", "fp8"], [3, 1])
    duration = float(rng.choice([3.0, 5.0, 8.0]))
    requests = float(rng.choice([4, 10, 20, 40]))
    workload: dict[str, Any] = {}
    prefix = pick(rng, ["none", "shared_documents", "fixed_hit", "multi_turn"], [4, 3, 2, 2])
    state["features"].append(f"prefix_{prefix}")
    workload["arrival"] = _arrival(rng, duration, requests, state, open_only=prefix == "multi_turn")
    max_in = int(rng.choice([64, 512, 2000]))
    max_out = int(rng.choice([1, 8, 64, 200]))
    if prefix == "shared_documents":
        workload["prefix"] = {"kind": "shared_documents", "documents": int(rng.integers(1, 12)),
                              "zipf_s": round(float(rng.uniform(0.0, 1.5)), 2),
                              "document_tokens": _length(rng, 16, max_in, state),
                              "suffix_tokens": _length(rng, 1, 200, state)}
    elif prefix == "multi_turn":
        workload["prefix"] = {"kind": "multi_turn", "turns": _length(rng, 1, 4, state),
                              "message_tokens": _length(rng, 8, 300, state),
                              "system_prompt_tokens": int(rng.choice([0, 64, 500])),
                              "think_time": f"{float(rng.choice([0.0, 0.5, 1.5]))} s",
                              "think_distribution": pick(rng, ["fixed", "exponential"])}
    else:
        workload["input_tokens"] = _length(rng, 1, max_in, state)
        if prefix == "fixed_hit":
            workload["prefix"] = {"kind": "fixed_hit", "hit_ratio": round(float(rng.uniform(0.0, 0.95)), 2)}
    workload["output_tokens"] = _length(rng, 1, max_out, state)
    if rng.random() < 0.2:
        workload["block_tokens"] = int(rng.choice([16, 32, 64]))
    timeout_s = None
    if rng.random() < 0.25:
        timeout_s = round(float(np.exp(rng.uniform(np.log(0.01), np.log(4.0)))), 4)
        workload["timeout"] = f"{timeout_s} s"
        state["features"].append("timeout")
    if rng.random() < 0.08 and prefix in ("shared_documents", "fixed_hit"):
        workload["adapters"] = {"count": int(rng.integers(1, 5)), "rank": int(rng.choice([8, 16])),
                                "popularity": pick(rng, ["uniform", "zipf"])}
        state["features"].append("lora")
    nodes = node_names()
    systems: dict[str, Any] = {}
    for k in range(1 if rng.random() < 0.75 else 2):
        node = pick(rng, nodes)
        state["placed"] = None
        if pick(rng, ["colocated", "disaggregated"], [6, 3]) == "colocated":
            system, instances, in_place = colocated(rng, model, node, state)
        else:
            system, instances, in_place = disaggregated(rng, model, node, nodes, state)
        peer_odds = 0.7 if "scale_up_domain_nodes" in system else 0.25
        in_place = in_place and node in scale_up_nodes()
        cache = _kv_cache(rng, state, instances, peer_odds, in_place)
        if cache is not None and "peer_hbm" in cache and state["placed"] is not None:
            state["features"] += domain_features(*state["placed"], cache["peer_hbm"] == "read_in_place")
        if cache is not None:
            if rng.random() < 0.35:
                cache["preemption"] = "swap"
                state["features"].append("preempt_swap")
            system["kv_cache"] = cache
        if cache is None:
            for key in ("router", "prefill_router"):
                if system.get(key) == "cache_aware":
                    system[key] = "least_outstanding" if key == "router" else "least_prompt_tokens"
        if rng.random() < 0.25:
            system["engine"] = {"async_scheduling": bool(rng.random() < 0.5)}
        if "adapters" in workload and rng.random() < 0.7 and cache is not None:
            system["lora"] = {"kv_sharing": pick(rng, ["none", "value_reuse", "byte_sharing"])}
        systems[f"s{k}"] = system
    if state["tight"]:  # a small KV pool preempts only under concurrency: five times the load
        arrival = workload["arrival"]
        if arrival["kind"] == "closed_loop":
            arrival["clients"] = min(24, arrival["clients"] * 3)
        else:
            arrival["rate"] = f"{5 * requests / duration:.4g}/s"
    raw: dict[str, Any] = {
        "name": f"random-{case}",
        "seed": int(rng.integers(0, 2**31)),
        "duration": f"{duration:g} s",
        "warmup": pick(rng, ["0 s", f"{duration / 4:.3g} s", f"{duration / 2:.3g} s", "auto"], [3, 3, 1, 1]),
        "model": model,
        "dtype": dtype,
        "engine": {"async_scheduling": bool(rng.random() < 0.6), "coalesce": bool(rng.random() < 0.85)},
        "workload": workload,
        "systems": systems,
    }
    if rng.random() < 0.3 or state.get("slo"):  # attainment signals need their SLO
        raw["slo"] = {"ttft_p99": f"{float(rng.choice([0.2, 2.0]))} s", "tpot_p99": "100 ms"}
    if model in CATALOG_MODELS:
        raw["catalog"] = {"models": {model: dict(CATALOG_MODELS[model])}}
    if raw["warmup"] == "auto":
        state["features"].append("warmup_auto")
    return raw, state


def _tighten(raw: dict[str, Any], scenario: kvsim.Scenario, rng: np.random.Generator) -> bool:
    """Shrink the KV pool of every pool of every system to hold only a little more than the
    longest request (so running sequences get preempted); False if no pool could shrink. A
    system searching its layout is left as it is (its pools are sized per candidate)."""
    from kvsim.models.parallel import kv_bytes_per_token_per_card
    from kvsim.sim.layout_search import searches_layout
    from kvsim.sim.sizing import size_system

    spec = scenario.spec
    longest = spec.workload.max_input_tokens + spec.workload.max_output_tokens
    changed = False
    for name, system in raw["systems"].items():
        if searches_layout(spec, name):
            continue
        for pool in size_system(spec, name, scenario.catalogs_for(scenario.points[0])).pools:
            # a card holding a sequence holds more than the pool's average with stages or attention ranks
            on_card = kv_bytes_per_token_per_card(pool.model, pool.layout, pool.kv_dtype)
            target = float(rng.uniform(1.05, 2.5)) * longest * on_card
            if not pool.kv_budget_bytes_per_card > target:
                continue
            instance = system["instance"] if "pools" not in system else system["pools"][pool.name]["instance"]
            utilization = instance.get("memory_utilization", 0.9)
            new = utilization - (pool.kv_budget_bytes_per_card - target) / pool.accelerator.memory_bytes
            instance["memory_utilization"] = round(math.ceil(new * 1e4) / 1e4, 4)
            changed = True
    return changed


def _dump(raw: dict[str, Any]) -> str:
    return yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=110)


def random_case(case: int) -> Case:
    """Scenario number ``case``: deterministic in ``case`` alone (see the module docstring)."""
    rng = np.random.default_rng([case, 20251201])
    for attempt in range(MAX_ATTEMPTS):
        raw, state = _draw(rng, case)
        text = _dump(raw)
        try:
            scenario = kvsim.parse_scenario(text, f"<random scenario {case}>")
            kvsim.check(scenario)
            if state["tight"] and _tighten(raw, scenario, rng):
                text = _dump(raw)
                scenario = kvsim.parse_scenario(text, f"<random scenario {case}>")
                kvsim.check(scenario)
                state["features"].append("tight_kv")
        except kvsim.SpecError:
            continue
        features = list(dict.fromkeys(state["features"]))
        timeout = raw["workload"].get("timeout")
        return Case(case, text, features, bool(state["randomized"]),
                    float(timeout.split()[0]) if timeout else None, attempt)
    raise RuntimeError(f"no valid scenario in {MAX_ATTEMPTS} draws for case {case}")
