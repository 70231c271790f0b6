"""The CPU time of one simulated system run, from the work it will do on each path.

A run's CPU time is the work of its paths times their rates (:mod:`kvsim.plan.cost_rates`)::

    cpu_s = sum(count[path] * rate[path] for path in PATHS)

The counts (:class:`PathCounts`) are estimated before the run from the scenario alone:

- ``run`` (1), ``instance`` (instances built and summarised);
- ``request``: requests simulated -- open loop counted from the point's arrivals; closed loop
  ``clients x duration / (latency + think time)`` with the latency from the system's step-time
  model (below);
- ``iteration``: engine iterations: each instance iterates back to back while it holds work
  (the share of time it does, ``1 - exp(-L)`` for ``L`` requests in it on average), one decode
  step at a time, plus one per prefill chunk;
- ``prompt_block``: prompt blocks hashed when the point's requests are drawn (workloads with a
  prefix structure: every request's ``input_tokens / block_tokens``, but a shared document's
  blocks once per distinct document drawn, as its chain is memoised:
  :func:`kvsim.plan.run_cost.hashed_blocks`); counted once per point;
- ``hbm_block``: prompt blocks through an HBM prefix cache (systems with ``kv_cache``), every one
  looked up; ``miss_block``: those of them computed and filed into the cache (the misses: each
  context's first request, and once the working set outgrows the caches every request outside
  the contexts they hold; :func:`missed_requests`);
- ``tier_block``: prompt blocks written to or read from each tier below HBM (DRAM, NVMe, remote
  pool); ``flow``: the transfers to and from the node's own tiers (a write per tier per request
  and a load per hit) and ``remote_flow`` the flows to and from a remote pool over the network
  (one per card per pool node a transfer's blocks are spread over, :func:`_touched`);
- ``domain_block``: prompt blocks looked up across the peers of an addressing domain
  (``kv_cache.peer_hbm`` other than ``none``);
- ``extent_request`` and ``extent_miss``: for a system whose cache is kept as extents
  (:func:`kvsim.sim.build.kv_extents`, the builder's own rule: each instance's own HBM, or its
  HBM shared in place per domain, a few entries per stretch of blocks however long), the
  requests through it and the share of each request's prompt it misses (computed, filed and made
  room for), in requests, in place of ``hbm_block``, ``miss_block`` and ``domain_block``;
  ``extent_tier``: such a system's requests x its tiers below HBM (DRAM, NVMe, a one-node pool:
  the lookup's touch, the write-through's missing stretches and their filing, per stretch), in
  place of ``tier_block``;
- ``handoff`` and ``handoff_flow``: prefill-to-decode handoffs (disaggregated systems: one per
  request) and their flows (one per card of the decode instance);
- ``queued_request``: requests x the share of them that wait for a batch slot: closed-loop
  clients beyond ``max_num_seqs`` per instance (the ladder's saturation probe, 4,096 clients on
  8 instances, costs about three times a request of the open-loop ladder);
- ``routed_candidate``: requests x the instances a cache-aware router scores for each (it
  weighs every candidate's cached prefix and load: ``router`` or, disaggregated,
  ``prefill_router: cache_aware``); the other routers keep ordered boards, O(log n) a request;
- ``value_key``: LoRA value reuse (``lora.kv_sharing: value_reuse``): keys looked up to find a
  shared block another adapter computed (about half the adapters' keys per block copied);
  ``refused_block``: the blocks such an admission scans, pins and unpins again each time it is
  refused for want of KV room (:func:`refused_share`);
- ``prewarm_prompt``, ``prewarm_filing`` and ``prewarm_block``: prompts drawn, filings (a
  prompt's blocks into one lower store: each node's DRAM and NVMe, each pool node its blocks
  are spread over) and block insertions (none where the system is kept as extents: a filing is
  then a few stretches) of a cache prewarm (``kv_cache.prewarm``; the prompts' own blocks are
  hashed as they are drawn, counted in ``prompt_block``), the prompts found as
  :meth:`kvsim.serving.cache.tiers.SystemCache.prewarm` stops: every lower store fed twice its
  capacity, or (checked every 1,000 prompts) fewer than 0.005 of future prompts would, at 95 %
  confidence, read a document no prewarm prompt offered (:func:`prewarm_prompts`).

The latency of a request is a bound from the model, not a simulation: its uncached prompt
computed in chunks of ``max_batched_tokens`` plus its output tokens at the decode step time of the
batch it shares, the batch from Little's law (``arrival rate x latency`` per instance, at most
``max_num_seqs`` per attention rank) or, in a closed loop, from the clients. The caches start empty (a prewarmed
system's lower tiers full): over a run of ``n`` requests the share of prompt tokens found is the
shared documents' share times the share of requests that find their context
(:func:`run_hit_fraction`; per adapter where adapters do not share KV). A closed loop completes at
most what its decode batches serve and what its compute instances can compute in the run: every
context's first prompt in full, the others' uncached suffixes (so a short run over long cold
documents simulates little more than the clients' first requests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
from scipy.special import gammaincinv

from kvsim.models.step_time import BatchShape
from kvsim.plan.cost_hits import (  # noqa: F401
    cached_contexts,
    distinct_contexts,
    hit_fraction,
    missed_requests,
    refused_share,
    run_hit_fraction,
    workload_reuse,
    zipf_popularity,
)
from kvsim.plan.cost_rates import rates_for
from kvsim.sim.build import kv_extents
from kvsim.sim.prewarm import MAX_WARM_REQUESTS

__all__ = ["PathCounts", "WorkloadShape", "system_counts", "prewarm_prompts"]

PREWARM_BATCH = 1000
"""Prompts between the prewarm's settle checks (:meth:`SystemCache.prewarm`'s ``batch``)."""
PREWARM_SETTLE = 0.005
PREWARM_CONFIDENCE = 0.95
PREWARM_TURNOVER = 2.0


@dataclass(frozen=True)
class PathCounts:
    """Work of one system run on each path (see the module docstring for the units)."""

    run: float = 0.0
    instance: float = 0.0
    request: float = 0.0
    iteration: float = 0.0
    prompt_block: float = 0.0
    hbm_block: float = 0.0
    tier_block: float = 0.0
    flow: float = 0.0
    domain_block: float = 0.0
    handoff: float = 0.0
    handoff_flow: float = 0.0
    queued_request: float = 0.0
    remote_flow: float = 0.0
    prewarm_prompt: float = 0.0
    prewarm_block: float = 0.0
    routed_candidate: float = 0.0
    miss_block: float = 0.0
    value_key: float = 0.0
    refused_block: float = 0.0
    extent_request: float = 0.0
    extent_miss: float = 0.0
    extent_tier: float = 0.0
    prewarm_filing: float = 0.0
    load: float = 0.0

    def cpu_s(self, backend: str = "python") -> float:
        """CPU-seconds at the measured rates of ``backend`` (:func:`~kvsim.plan.cost_rates.rates_for`)."""
        rates = rates_for(backend)
        return float(sum(getattr(self, f.name) * rates[f.name] for f in fields(self)))

    def __add__(self, other: PathCounts) -> PathCounts:
        return PathCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def scaled(self, k: float) -> PathCounts:
        return PathCounts(**{f.name: getattr(self, f.name) * k for f in fields(self)})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class WorkloadShape:
    """What the cost model needs of a point's workload: its mean lengths and reuse.

    ``requests`` is the open-loop count (None in a closed loop: ``clients`` and ``think_s`` then);
    ``shared_fraction`` the share of a prompt's tokens in a shared document (or shared prefix),
    ``popularity`` the documents' probabilities, most popular first (None: one shared prefix).
    """

    requests: int | None
    input_tokens: float
    output_tokens: float
    block_tokens: int
    hashed: bool = False
    clients: int = 0
    think_s: float = 0.0
    shared_fraction: float = 0.0
    document_tokens: float = 0.0
    popularity: np.ndarray | None = None
    adapters: np.ndarray | None = None  # the LoRA adapters' probabilities (None: the base model)

    @property
    def blocks_per_request(self) -> float:
        return self.input_tokens / self.block_tokens


def _prefill_s(step, tokens: float, chunk: int) -> float:
    """Seconds to compute ``tokens`` prompt tokens alone, in chunks of ``chunk`` tokens."""
    total, done = 0.0, 0
    remaining = max(int(tokens), 1)
    while remaining > 0:
        c = min(chunk, remaining)
        total += step.iteration_time_s(BatchShape(prefill_tokens=c, prefill_pairs=c * done + c * (c + 1) / 2,
                                                  prefill_context_tokens=done, sampled_seqs=1, prefill_seqs=1))
        done += c
        remaining -= c
    return total


def _decode_s(step, seqs: float, context: float) -> float:
    """Seconds of one decode step of ``seqs`` sequences at ``context`` tokens each."""
    b = max(int(round(seqs)), 1)
    return step.iteration_time_s(BatchShape(decode_seqs=b, decode_context_tokens=int(b * context), sampled_seqs=b))


def _touched(stores: int, blocks: float) -> float:
    """Expected stores of ``stores`` a transfer of ``blocks`` blocks spread by id touches."""
    if blocks <= 0.0:
        return 0.0
    return stores * -math.expm1(blocks * math.log1p(-1.0 / stores)) if stores > 1 else 1.0


def _cache_tokens(spec, sizing, prefill_pools) -> tuple[float, float, bool]:
    """``(HBM tokens, lower tiers' tokens, pooled)`` of shared context the system's caches hold:
    the HBM left beside the running sequences (pooled across instances when the router or the
    domains place by cache, else one instance's) and every lower tier."""
    system = spec.systems[sizing.name]
    cache = system.kv_cache
    if cache is None:
        return 0.0, 0.0, False
    pooled = system.router == "cache_aware" or system.prefill_router == "cache_aware" or cache.peer_hbm != "none"
    hbm = lower = 0.0
    for pool in prefill_pools:
        half = 0.5 * pool.kv_tokens_per_instance  # about half the pool runs sequences
        hbm += half * (pool.instances if pooled else 1)
        per_token = pool.kv_bytes_per_token_per_card * pool.layout.cards
        for tier in (cache.dram, cache.nvme):
            if tier is not None and tier.capacity:
                lower += tier.capacity * pool.spec.nodes / max(per_token, 1.0)
    if cache.remote is not None and sizing.pool_node is not None:
        pool = prefill_pools[0]
        per_token = pool.kv_bytes_per_token_per_card * pool.layout.cards
        lower += sizing.pool_node.capacity_bytes * cache.remote.nodes / max(per_token, 1.0)
    return hbm, lower, pooled


def prewarm_prompts(shape: WorkloadShape, store_blocks: list[tuple[float, float]]) -> float:
    """Prompts a prewarm inserts before it stops; ``store_blocks`` lists each lower store's
    ``(capacity in blocks, share of each prompt's blocks it takes)``.

    :meth:`SystemCache.prewarm`'s rule on expected counts: the turnover budget, or the first
    check at which the Poisson upper bound of the documents drawn once (expected
    ``n * sum(p * (1 - p)**(n - 1))``), over ``n``, is below the settle share, or the cap. One
    shared prefix is one document; a workload sharing nothing never settles.
    """
    bpr = max(shape.blocks_per_request, 1e-9)
    budget = max((PREWARM_TURNOVER * cap / (bpr * share) for cap, share in store_blocks if share > 0), default=0.0)
    if shape.popularity is not None:
        p = np.minimum(shape.popularity, 1 - 1e-12)
    elif shape.shared_fraction > 0:
        p = np.array([1 - 1e-12])
    else:
        p = None  # every prompt's lead is its own
    settle = float(MAX_WARM_REQUESTS)
    for batch in range(1, MAX_WARM_REQUESTS // PREWARM_BATCH + 1):
        n = batch * PREWARM_BATCH
        once = n if p is None else n * float((p * np.exp((n - 1) * np.log1p(-p))).sum())
        if gammaincinv(once + 1.0, PREWARM_CONFIDENCE) / n < PREWARM_SETTLE:
            settle = float(n)
            break
        if n >= budget:
            break
    return float(min(budget, settle, MAX_WARM_REQUESTS))


def system_counts(spec, sizing, shape: WorkloadShape) -> PathCounts:
    """The work of one run of system ``sizing.name`` at the point whose spec is ``spec``."""
    system = spec.systems[sizing.name]
    duration = spec.duration
    compute = [p for p in sizing.pools if p.role != "decode"]  # pools that compute prompts
    decode = [p for p in sizing.pools if p.role != "prefill"]
    compute = compute or list(sizing.pools)
    decode = decode or list(sizing.pools)
    n_compute = sum(p.instances for p in compute)
    n_decode = sum(p.instances for p in decode)
    cache = system.kv_cache
    local = 0 if cache is None else (cache.dram is not None) + (cache.nvme is not None)
    remote = cache is not None and cache.remote is not None
    tiers = local + remote
    warm = cache is not None and bool(cache.prewarm) and tiers > 0
    hbm_tokens, lower_tokens, pooled = _cache_tokens(spec, sizing, compute)
    contexts = cached_contexts(shape, system)
    fills: dict[int, float] = {}  # contexts held -> the request at which such a cache fills

    def hits(n: float) -> tuple[float, float]:
        """(share of prompt tokens found in any cache, in HBM) over ``n`` requests; a prewarmed
        system's lower tiers start full (the steady share), its HBM and every other cache empty."""
        if cache is None:
            return 0.0, 0.0
        draws = n if pooled else n / max(n_compute, 1)  # each instance's own cache sees its share
        hbm = run_hit_fraction(shape, hbm_tokens, draws, contexts, fills)
        if warm:
            return max(hbm, hit_fraction(shape, hbm_tokens + lower_tokens)), hbm
        return max(hbm, run_hit_fraction(shape, hbm_tokens + lower_tokens, draws, contexts, fills)), hbm

    inputs, outputs = shape.input_tokens, max(shape.output_tokens, 1.0)
    pool_p, pool_d = compute[0], decode[0]
    step_p, step_d = pool_p.step_model(), pool_d.step_model()
    chunk = pool_p.spec.instance.max_batched_tokens  # one prompt's chunk: one attention rank's budget
    context = inputs + outputs / 2.0
    max_seqs = max(1.0, min(pool_d.spec.instance.instance_max_num_seqs,
                            pool_d.kv_tokens_per_instance / max(context, 1.0)))

    def decode_latency(b: float) -> float:
        return (outputs - 1.0) * _decode_s(step_d, b, context)

    by_document = shape.popularity is not None and shape.shared_fraction > 0.0
    t_full = _prefill_s(step_p, inputs, chunk)
    t_found = _prefill_s(step_p, inputs * (1.0 - shape.shared_fraction), chunk) if by_document else t_full

    def prefill_s(hit: float) -> float:
        """Mean seconds to compute a prompt with ``hit`` of the tokens found in cache: a request
        finds its whole document or none of it (documents), else that share of every prompt."""
        if by_document:
            found = min(1.0, hit / shape.shared_fraction)
            return found * t_found + (1.0 - found) * t_full
        return _prefill_s(step_p, inputs * (1.0 - hit), chunk)

    # a colocated instance's decode steps share their iteration with the prompts' chunks while
    # prompts wait (chunked prefill): each then takes a chunk's time too, by the prefill's utilisation
    t_chunk = 0.0 if sizing.disaggregated else t_full / max(math.ceil(inputs / chunk), 1)

    def requests_at(hit: float, busy_prefill: float = 0.0) -> tuple[float, float, float, float]:
        """``(requests, batch per decode instance, latency, t_prefill)`` with ``hit`` of each
        prompt found in cache and the compute instances computing prompts ``busy_prefill`` of
        the time (a closed loop's, from the previous round)."""
        t_prefill = prefill_s(hit)
        stall_s = (outputs - 1.0) * busy_prefill * t_chunk
        # the decode instances' capacity (requests/s): each runs a full batch of max_seqs sequences
        capacity = n_decode * max_seqs / max(decode_latency(max_seqs), 1e-9)
        # Fixed point of the batch b per decode instance (Little's law on the batch): open loop,
        # b = arrival rate x decode time; closed loop, the clients in the system (not thinking).
        b = 1.0
        for _ in range(60):
            latency = t_prefill + decode_latency(b) + stall_s
            if shape.requests is not None:
                new_b = shape.requests / duration / n_decode * decode_latency(b)
            else:
                new_b = shape.clients / n_decode * latency / (latency + shape.think_s)
            new_b = min(max_seqs, max(new_b, 1.0))
            if abs(new_b - b) < 1e-3 * b:
                b = new_b
                break
            b = 0.5 * (b + new_b)
        latency = t_prefill + decode_latency(b) + stall_s
        if shape.requests is not None:
            return float(shape.requests), b, latency, t_prefill
        # each client sends one at once, then one per latency and think time, at most what the
        # decode batches and the prefill's compute time can complete (clients beyond that queue:
        # by Little's law their response time is clients / throughput - think time)
        completions = min(shape.clients / (latency + shape.think_s), capacity) * duration
        return min(completions, prefill_completions()) + shape.clients, b, latency, t_prefill

    def prefill_completions() -> float:
        """Prompts the compute instances can compute in the run: the most whose compute time
        (the first request of each context in full, :func:`missed_requests`) fits in
        ``instances x duration``."""
        budget_s = n_compute * duration
        if cache is None or not by_document:
            return budget_s / max(prefill_s(hits(1e12)[0]), 1e-9)
        lo, hi = 0.0, math.log1p(budget_s / max(t_found, 1e-9))
        for _ in range(20):
            mid = 0.5 * (lo + hi)
            c = math.expm1(mid)
            lo, hi = (mid, hi) if c * prefill_s(hits(c)[0]) < budget_s else (lo, mid)
        return math.expm1(lo)

    # a closed loop's requests set the caches' hit share (their first sights miss), which sets its
    # requests: two rounds of the fixed point, from the steady share
    hit, hit_hbm = hits(float(shape.requests) if shape.requests is not None else 1e12)
    requests, b, latency, t_prefill = requests_at(hit)
    if shape.requests is None:
        for _ in range(3):
            hit, hit_hbm = hits(requests)
            busy_prefill = min(1.0, (requests - shape.clients) / duration * t_prefill / max(n_compute, 1))
            requests, b, latency, t_prefill = requests_at(hit, busy_prefill)
        hit, hit_hbm = hits(requests)
    if shape.requests is not None:
        # an open loop past its capacity queues too, but no measured case shows such a queue
        # costing per iteration (h20_vs_l20 and pd_ratio_nvidia at their highest loads do not)
        queued = 0.0
    else:
        queued = max(0.0, 1.0 - n_decode * max_seqs / shape.clients)  # clients beyond the batch slots
    in_instance = requests / duration * latency / max(n_compute, 1)  # requests in an instance on average
    busy = -math.expm1(-in_instance)
    iterations = n_decode * duration * busy / max(_decode_s(step_d, b, context), 1e-9) * (outputs > 1.0) \
        + requests * math.ceil(inputs * (1.0 - hit) / chunk)
    bpr = shape.blocks_per_request
    extents = cache is not None and kv_extents(spec, sizing)  # the builder's rule (else kept per block)
    per_block = cache is not None and not extents
    prompts = filings = warm_blocks = 0.0
    if warm:
        prompts, filings, warm_blocks = _prewarm(spec, sizing, compute, shape)
    # the share of prompt tokens found below HBM, and of requests that load theirs from there
    below = max(0.0, hit - hit_hbm)
    loading = min(1.0, below / shape.shared_fraction) if shape.shared_fraction > 0 else 0.0
    remote_flows = 0.0
    if remote:
        # a transfer to or from the pool is one flow per card per pool node its blocks are spread
        # over: the computed blocks written down, and the ones found below HBM loaded (by the
        # share of requests that find their context there)
        nodes, cards = cache.remote.nodes, pool_p.layout.cards
        remote_flows = requests * cards * (_touched(nodes, bpr * (1.0 - hit))
                                           + (loading * _touched(nodes, bpr * below / loading) if loading else 0.0))
    value_keys = refused_blocks = 0.0
    if shape.adapters is not None and system.lora is not None and system.lora.kv_sharing == "value_reuse":
        # the blocks found under another adapter are copied, each after scanning the keys of the
        # base model and the other adapters until one holds it (about half of them)
        other = 1.0 - float((shape.adapters ** 2).sum())  # a request's context cached under another adapter
        value_keys = requests * bpr * hit * other * (1.0 + len(shape.adapters) / 2.0)
        # an admission refused for want of KV room (at a share of the steps while the copies in
        # flight overflow the KV) scans, pins and unpins those blocks again
        refusals = refused_share(shape, pool_p, requests, duration, latency, n_compute) * iterations
        refused_blocks = refusals * bpr * hit * other
    # the router that places a request on a compute instance: the prefill router when disaggregated
    aware = (system.prefill_router if sizing.disaggregated else system.router) == "cache_aware"
    return PathCounts(
        run=1.0,
        instance=float(sizing.instances),
        request=requests,
        iteration=iterations,
        prompt_block=prompts * _hashed_per_prompt(shape) if shape.hashed else 0.0,  # the prewarm's, as drawn
        hbm_block=requests * bpr if per_block else 0.0,
        miss_block=requests * bpr * (1.0 - hit) if per_block else 0.0,
        extent_request=requests if extents else 0.0,
        extent_miss=requests * (1.0 - hit) if extents else 0.0,
        tier_block=requests * bpr * tiers if per_block else 0.0,
        extent_tier=requests * tiers if extents else 0.0,
        flow=requests * local * (1.0 + loading),  # each request's write-through, and the loads from below
        load=requests * loading if tiers else 0.0,
        remote_flow=remote_flows,
        domain_block=requests * bpr if per_block and cache.peer_hbm != "none" else 0.0,
        handoff=requests if sizing.disaggregated else 0.0,
        handoff_flow=requests * pool_d.layout.cards if sizing.disaggregated else 0.0,
        queued_request=requests * queued,
        prewarm_prompt=prompts,
        prewarm_block=warm_blocks if per_block else 0.0,
        prewarm_filing=filings,
        routed_candidate=requests * n_compute if aware else 0.0,
        value_key=value_keys,
        refused_block=refused_blocks,
    )


def _hashed_per_prompt(shape: WorkloadShape) -> float:
    """Blocks hashed when one more prompt is drawn: its own blocks where its document's chain is
    memoised (:func:`kvsim.plan.run_cost.hashed_blocks`), every block otherwise."""
    if shape.popularity is None or shape.document_tokens <= 0:
        return shape.blocks_per_request
    return max(shape.input_tokens - shape.document_tokens, 0.0) / shape.block_tokens + 1.0


def _prewarm(spec, sizing, compute, shape: WorkloadShape) -> tuple[float, float, float]:
    """Prompts drawn, filings and blocks filed by the cache prewarm
    (:meth:`~kvsim.serving.cache.tiers.SystemCache.prewarm`): each prompt's blocks into every
    local store of the system (each node's DRAM and NVMe), one filing each, and into the remote
    pool, one filing per pool node its blocks are spread over (by id, :func:`_touched`)."""
    cache = spec.systems[sizing.name].kv_cache
    pool = compute[0]
    block_bytes = max(pool.kv_bytes_per_token_per_card * pool.layout.cards * shape.block_tokens, 1.0)
    stores: list[tuple[float, float]] = []
    for tier in (cache.dram, cache.nvme):
        if tier is None:
            continue
        capacity = tier.capacity if tier.capacity else pool.node.nvme.count * pool.node.nvme.capacity_bytes
        stores += [(capacity / block_bytes, 1.0)] * sum(p.spec.nodes for p in compute)
    local = len(stores)  # (a one-node pool's share is 1 too: count the node's stores here)
    if cache.remote is not None and sizing.pool_node is not None:
        stores += [(sizing.pool_node.capacity_bytes / block_bytes, 1.0 / cache.remote.nodes)] * cache.remote.nodes
    prompts = prewarm_prompts(shape, stores)
    bpr = shape.blocks_per_request
    pool = _touched(cache.remote.nodes, bpr) if cache.remote is not None else 0.0
    return prompts, prompts * (local + pool), prompts * bpr * (local + (1 if cache.remote is not None else 0))
