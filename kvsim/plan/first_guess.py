"""A closed-form first guess of one unit's capacity, where the plan's load search starts, and what
a plan will cost to run (``kvsim validate``).

The guess is roofline arithmetic on the unit's own step-time model (the one its runs use): an
instance serves requests of the workload's mean prompt ``I`` and answer ``O`` tokens with ``B``
sequences decoding at once, ``B`` the largest batch whose decode step stays within the TPOT limit
(if any), the instance's ``max_num_seqs`` (per attention rank, times its ranks) and what its KV pool
holds. One request then costs the
instance ``prefill(I) + (O - 1) * step(B) / B`` seconds of iterations (its prompt computed alone,
emitting the first token; the other ``O - 1`` tokens in ``B``-wide decode steps), so the instance
serves at most ``mu = 1 / that`` requests per second, and the unit ``instances * mu``. The guess is :data:`HEADROOM` of that: a queue needs
slack to keep its TTFT tail within an SLO (M/G/k waits grow as ``1 / (1 - rho)``).

With a prefix cache and prompts that share documents (or one shared prefix), a request finds
its document in cache with the steady hit share of the cost model (:func:`kvsim.plan.cost_hits.hit_fraction`:
the caches -- HBM beside the running sequences and every lower tier -- holding the most popular
documents) and then computes only its own suffix, reading the document as context; otherwise
the whole prompt. It ignores the time to load a hit from a lower tier, chunked prefill mixing
with decodes, and anything a disaggregated (prefill/decode) system does; for those and for a
closed loop there is no guess (None) and the search starts as before. A guess only moves where the search starts: the answer is what the probes find, and a
guess a factor of two off costs one bracketing round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvsim.scenario.load import Scenario

__all__ = ["capacity_guess", "PlanCost", "plan_cost", "HEADROOM"]

HEADROOM = 0.7
"""Share of the roofline service rate taken as the first guess of a unit's capacity within an SLO."""


def capacity_guess(scenario: Scenario, system: str) -> float | None:
    """Requests/s one unit of ``system`` sustains by roofline arithmetic (module docstring), or
    None where the arithmetic does not apply (a disaggregated system, a closed loop, a trace, an
    unsized system)."""
    from kvsim.models.step_time import BatchShape
    from kvsim.sim.sizing import SizingError, size_system

    spec = scenario.spec
    workload = spec.workload
    if spec.plan is None or spec.plan.by_clients or workload.trace or workload.phased or workload.multi_turn:
        return None
    try:
        sizing = size_system(spec, system, scenario.catalogs)
    except SizingError:
        return None
    if sizing.disaggregated:
        return None
    prefix = workload.prefix
    prompt = (prefix.document_tokens.mean + prefix.suffix_tokens.mean if prefix is not None
              and hasattr(prefix, "document_tokens") else workload.input_tokens.mean)
    found, document = _found_share(spec, sizing, workload, prompt)
    answer = max(1.0, workload.output_tokens.mean)
    tpot_limit = getattr(spec.slo, "tpot_p99", None) if spec.slo is not None else None
    total = 0.0
    for pool in sizing.pools:
        step = pool.step_model()
        limit = pool.spec.instance.instance_max_num_seqs  # (per attention rank, every rank)
        by_kv = max(1, int(pool.kv_tokens_per_instance // max(1.0, prompt + answer)))
        batch = max(1, min(limit, by_kv))
        context = prompt + answer / 2

        # B023: called within this iteration, never after it
        def decode_step(b: int) -> float:
            return step.iteration_time_s(BatchShape(decode_seqs=b, decode_context_tokens=int(b * context),  # noqa: B023
                                                    sampled_seqs=b))

        if tpot_limit is not None and decode_step(batch) > tpot_limit:
            low, high = 1, batch  # the largest batch whose step is within the limit (steps grow with b)
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (mid, high) if decode_step(mid) <= tpot_limit else (low, mid)
            batch = low
        tokens = int(round(prompt))
        prefill_s = step.iteration_time_s(BatchShape(prefill_tokens=tokens, prefill_pairs=tokens * (tokens + 1) / 2,
                                                     prefill_seqs=1, sampled_seqs=1))
        if found > 0.0:  # the document read from cache as context, the suffix computed
            own = max(1, tokens - document)
            suffix_s = step.iteration_time_s(BatchShape(prefill_tokens=own, prefill_pairs=own * document + own * (own + 1) / 2,
                                                        prefill_context_tokens=document, prefill_seqs=1, sampled_seqs=1))
            prefill_s = found * suffix_s + (1.0 - found) * prefill_s
        per_request_s = prefill_s + (answer - 1.0) * decode_step(batch) / batch  # the prefill emits the first token
        total += pool.instances / per_request_s
    guess = HEADROOM * total
    return guess if guess > 0 and math.isfinite(guess) else None


def _found_share(spec: Any, sizing: Any, workload: Any, prompt: float) -> tuple[float, int]:
    """``(share of requests that find their shared document in cache, its tokens)``: the cost
    model's steady hit share over the system's caches (module docstring); ``(0, 0)`` without a
    prefix cache or shared documents."""
    from kvsim.plan.cost_hits import hit_fraction, workload_reuse
    from kvsim.plan.cost_model import WorkloadShape, _cache_tokens

    shared, document, popularity = workload_reuse(workload)
    if spec.systems[sizing.name].kv_cache is None or shared <= 0.0:
        return 0.0, 0
    if document <= 0.0:  # one prefix shared by every prompt (fixed_hit): that share of the mean prompt
        document = shared * prompt
    compute = [p for p in sizing.pools if p.role != "decode"] or list(sizing.pools)
    hbm_tokens, lower_tokens, _pooled = _cache_tokens(spec, sizing, compute)
    shape = WorkloadShape(None, prompt, workload.output_tokens.mean, workload.block_tokens, True,
                          shared_fraction=shared, document_tokens=document, popularity=popularity)
    return hit_fraction(shape, hbm_tokens + lower_tokens) / shared, int(round(document))


@dataclass(frozen=True)
class PlanCost:
    """What a plan is expected to run: ``probes`` (a range, low and high), the requests they
    simulate and their CPU time on one core (seconds), per candidate and in all."""

    probes: tuple[int, int]
    requests: tuple[int, int]
    cpu_s: tuple[float, float]
    per_candidate: dict[str, dict[str, Any]]

    def describe(self) -> str:
        from kvsim.plan.progress import format_duration

        low, high = self.probes
        return (f"plan: about {low}-{high} probes over {len(self.per_candidate)} candidate(s), "
                f"~{self.requests[0]:,}-{self.requests[1]:,} requests simulated, "
                f"estimated CPU time {format_duration(self.cpu_s[0])}-{format_duration(self.cpu_s[1])} on one core "
                f"(the probes run in parallel over --workers processes)")


def plan_cost(scenario: Scenario, backend: str = "compiled") -> PlanCost | None:
    """The expected cost of ``kvsim plan`` on ``scenario`` (None without a ``plan:`` section).

    Per candidate: the capacity search brackets from the first guess (or a quarter of the smallest
    target) and narrows to ``rel_tol`` -- about ``log2(1 / rel_tol)`` probes plus one to three to
    bracket (six with no guess) -- at about the guessed load; each target then takes one (the
    fewest units allowed meets it) to four probes of ``ceil(target / capacity)`` units at the
    target load, and where the candidate is the cheapest or the runner-up, the count and one fewer
    under each of ``plan.seed_checks`` other seeds. A probe's cost is
    :func:`kvsim.plan.run_cost.run_cost` of the probe's own scenario. A shared-pool candidate
    (``plan.shared_pools``) runs that once per pool size on its axis (probed with the smallest).
    """
    from kvsim.plan.planner import Probe, probe_scenario
    from kvsim.plan.run_cost import run_cost

    plan = scenario.spec.plan
    if plan is None:
        return None
    narrowing = max(1, math.ceil(math.log2(1.0 / plan.rel_tol)))
    per: dict[str, dict[str, Any]] = {}
    probes = [0, 0]
    requests = [0, 0]
    cpu = [0.0, 0.0]
    for system in plan.chosen(list(scenario.spec.systems)):
        shared = (plan.shared_pools or {}).get(system)
        pool, sizes = (shared.nodes[0], len(shared.nodes)) if shared is not None else (None, 1)
        guess = capacity_guess(scenario, system)
        start = guess or (max(1, math.floor(plan.loads[0] / 4)) if plan.by_clients else plan.loads[0] / 4)
        search = (narrowing + 1, narrowing + (3 if guess else 6))
        cost = run_cost(probe_scenario(scenario, Probe(system, 1, _load(start, plan.by_clients), pool_nodes=pool)),
                        backend=backend)
        units = [max(1, min(plan.units.max, math.ceil(t / start))) for t in plan.loads]
        target_costs = [run_cost(probe_scenario(scenario, Probe(system, n, _load(t, plan.by_clients), pool_nodes=pool)),
                                 backend=backend) for n, t in zip(units, plan.loads)]
        low = (search[0] * (cost.requests or 0) + sum(c.requests or 0 for c in target_costs),
               search[0] * cost.cpu_s + sum(c.cpu_s for c in target_costs))
        per_target = 4 + 2 * plan.seed_checks  # and, if it is checked, the count and one fewer under each seed
        high = (search[1] * (cost.requests or 0) + sum(per_target * (c.requests or 0) for c in target_costs),
                search[1] * cost.cpu_s + sum(per_target * c.cpu_s for c in target_costs))
        count = (search[0] + len(plan.loads), search[1] + per_target * len(plan.loads))
        if sizes > 1:  # the unit search again at each pool size (the seed checks only once: small, ignored)
            count = (count[0] * sizes, count[1] * sizes)
            low, high = (low[0] * sizes, low[1] * sizes), (high[0] * sizes, high[1] * sizes)
        per[system] = {"first_guess": guess, "probes": count, "requests": (low[0], high[0]), "cpu_s": (low[1], high[1])}
        for k in (0, 1):
            probes[k] += count[k]
            requests[k] += int(low[0] if k == 0 else high[0])
            cpu[k] += low[1] if k == 0 else high[1]
    return PlanCost((probes[0], probes[1]), (requests[0], requests[1]), (cpu[0], cpu[1]), per)


def _load(value: float, by_clients: bool) -> float:
    return float(max(1, round(value))) if by_clients else float(value)
