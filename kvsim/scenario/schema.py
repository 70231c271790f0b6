"""The scenario file's schema: immutable specs validated from YAML.

A scenario names a model and a workload, and one or more *systems* that serve the same request
stream side by side. Quantities carry units in the file (``300 s``, ``20/s``, ``96 GiB``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from kvsim.models.engine import EngineSpec
from kvsim.network.tiers import ScaleUpSpec
from kvsim.scenario.cost_spec import CostSpec
from kvsim.scenario.failures_spec import RunFailureSpec
from kvsim.scenario.limits import MAX_REQUESTS  # noqa: F401 - re-exported (checked in kvsim.scenario.limits)
from kvsim.scenario.plan_spec import PlanSpec
from kvsim.scenario.shared_pool_spec import shared_pool_problems
from kvsim.scenario.study_spec import GapStudySpec, PDStudySpec, StudySpec
from kvsim.serving.cache.spec import KVCacheSpec
from kvsim.serving.specs import (
    CacheAwareSpec,
    ControllerSpec,
    HandoffSpec,
    InstanceSpec,
    LoraSpec,
    PoolSpec,
    RouterKind,
)
from kvsim.spec_types import Count, FrozenSpec, PositiveInt, PositiveSeconds, Seconds
from kvsim.workload import WorkloadSpec
from kvsim.yaml_io import did_you_mean

__all__ = [
    "ScenarioSpec", "SystemSpec", "SloSpec", "CompareSpec", "CatalogEntries", "Dtype", "GapStudySpec",
    "SINGLE_POOL", "PDStudySpec", "StudySpec",
]

Dtype = Literal["bf16", "fp16", "fp8", "fp4", "mxfp4"]

WeightGroup = Literal["embedding", "attention", "feed_forward", "experts", "lm_head"]
"""A part of the checkpoint that ``weight_dtypes`` may store in its own format
(:data:`kvsim.models.llm.WEIGHT_GROUPS`)."""


class SloSpec(FrozenSpec):
    """Service-level objectives. A request counts toward goodput if it meets every threshold given."""

    ttft_p99: PositiveSeconds | None = None  # 0 s: a latency no request could meet
    tpot_p99: PositiveSeconds | None = None
    e2e_p99: PositiveSeconds | None = None


SINGLE_POOL = "main"
"""Name of the one pool of a system written in the single-pool form (``node:`` at system level)."""

_POOL_FIELDS = ("node", "nodes", "instance", "instances")


class SystemSpec(FrozenSpec):
    """One hardware configuration serving the scenario's workload.

    A system is one or more pools of instances (:class:`~kvsim.serving.specs.PoolSpec`). The
    single-pool form gives ``node``, ``nodes``, ``instance`` and ``instances`` here (one pool of
    ``mixed`` instances); the general form gives ``pools``. A disaggregated system has
    ``prefill`` and ``decode`` pools (and no ``mixed`` one). ``model``, ``dtype`` and
    ``kv_dtype`` default to the scenario's and apply to every pool. ``router`` routes requests
    among mixed instances; ``prefill_router`` and ``decode_router`` among prefill and decode
    instances. ``kv_cache`` (prefix caching and offload) applies to the instances that compute
    prompts: mixed and prefill. ``cache_aware`` holds the settings of a ``cache_aware`` router
    (which reads the cluster KV index, so it needs ``kv_cache``). ``lora`` says how it serves the workload's LoRA adapters.
    """

    node: str | None = None
    nodes: PositiveInt = 1
    instance: InstanceSpec = Field(default_factory=InstanceSpec)
    instances: PositiveInt | None = None
    pools: dict[str, PoolSpec] | None = None
    router: RouterKind = "least_outstanding"
    prefill_router: RouterKind = "least_prompt_tokens"
    decode_router: RouterKind = "most_free_kv"
    cache_aware: CacheAwareSpec | None = None
    kv_handoff: HandoffSpec = Field(default_factory=HandoffSpec)
    scale_up_domain_nodes: PositiveInt = 1
    scale_up: ScaleUpSpec | None = None  # supernode tiers (kvsim.network.tiers); replaces scale_up_domain_nodes
    controller: ControllerSpec | None = None
    model: str | None = None
    dtype: Dtype | None = None
    compute_dtype: Dtype | None = None  # the number format matmuls run in (default: dtype); W4A16 is mxfp4 + bf16
    kv_dtype: Dtype | None = None
    kv_cache: KVCacheSpec | None = None
    engine: EngineSpec | None = None
    weight_dtypes: dict[WeightGroup, Dtype] | None = None
    lora: LoraSpec | None = None  # how it serves workload.adapters (default: all resident, no KV reuse)
    failures: RunFailureSpec | None = None  # its nodes fail and are repaired in the run: requests retried, KV lost

    @property
    def domain_nodes(self) -> int:
        """Nodes of one scale-up (addressing) domain: the top tier's of ``scale_up``, else
        ``scale_up_domain_nodes``."""
        return self.scale_up.domain_nodes if self.scale_up is not None else self.scale_up_domain_nodes

    def pool_specs(self) -> dict[str, PoolSpec]:
        """The system's pools by name (the single-pool form is one pool named ``main``)."""
        if self.pools is not None:
            return dict(self.pools)
        if self.node is None:
            return {}
        return {SINGLE_POOL: PoolSpec(node=self.node, nodes=self.nodes, instance=self.instance,
                                      instances=self.instances, role="mixed")}

    def pool_path(self, pool: str) -> tuple[str, ...]:
        """Field path (below ``systems.NAME``) of pool ``pool``'s own fields."""
        return ("pools", pool) if self.pools is not None else ()

    @property
    def disaggregated(self) -> bool:
        """Prefill and decode run on separate instances."""
        return any(p.role != "mixed" or p.roles is not None for p in self.pool_specs().values())

    @property
    def adaptive(self) -> bool:
        """The system's controller moves instances between roles (threshold or proportional)."""
        return self.controller is not None and self.controller.kind != "static"

    def may_switch(self, pool: PoolSpec) -> bool:
        """Instances of ``pool`` may change role in a run: an adaptive controller and a switchable
        pool (:attr:`PoolSpec.may_switch`)."""
        return self.adaptive and pool.may_switch

    def shape_problems(self) -> list[tuple[tuple[str, ...], str]]:
        """Problems with the system's pools, as ``(field path below the system, message)``."""
        problems: list[tuple[tuple[str, ...], str]] = []
        if self.pools is None:
            if self.node is None:
                problems.append((("node",), "required: a node type (kvsim catalog nodes), or pools: "
                                            "{NAME: {node, nodes, instance, role}}"))
            return problems
        given = [f for f in _POOL_FIELDS if f in self.model_fields_set]
        for name in given:
            problems.append(((name,), "give it per pool (under pools:), not beside pools"))
        if not self.pools:
            problems.append((("pools",), "give at least one pool"))
            return problems
        for name in self.pools:
            if not name or not all(c.isalnum() or c in "-_" for c in name):
                problems.append((("pools", name), "pool names use letters, digits, '-' and '_'"))
        roles = set()
        for name, pool in self.pools.items():
            problems += _switch_problems(name, pool)
            if pool.roles is None:
                roles.add(pool.role)
                continue
            if "role" in pool.model_fields_set:
                problems.append((("pools", name, "role"), "give role or roles, not both"))
            for role in ("prefill", "decode"):
                if pool.roles.get(role, 0) < 1:
                    problems.append((("pools", name, "roles"), f"the split leaves the {role} role with no "
                                     f"instance (got {pool.roles.get(role, 0)}); give each role at least one"))
            if pool.instances is not None and pool.instances != sum(pool.roles.values()):
                problems.append((("pools", name, "instances"), f"the roles split {sum(pool.roles.values())} "
                                 f"instances, not {pool.instances}: omit instances"))
            roles |= set(pool.roles)
        if "mixed" in roles and roles != {"mixed"}:
            problems.append((("pools",), "a system either colocates (every pool mixed) or disaggregates "
                                         "(prefill and decode pools): do not combine mixed with "
                                         f"{' and '.join(sorted(roles - {'mixed'}))}"))
        elif "decode" in roles and "prefill" not in roles:
            problems.append((("pools",), "a decode pool needs a prefill pool to hand it prompts' KV"))
        elif "prefill" in roles and "decode" not in roles:
            problems.append((("pools",), "a prefill pool needs a decode pool to hand its prompts' KV to"))
        return problems

    def routing_problems(self) -> list[tuple[tuple[str, ...], str]]:
        """Problems with the routers given the system's shape and cache."""
        problems: list[tuple[tuple[str, ...], str]] = []
        entry = "prefill_router" if self.disaggregated else "router"
        if self.decode_router == "cache_aware":
            problems.append((("decode_router",), "cache_aware routes to the instances that compute prompts "
                                                 "(router, or prefill_router when disaggregated); decode "
                                                 "instances cache nothing"))
        aware = getattr(self, entry) == "cache_aware"
        if aware and self.kv_cache is None:
            problems.append(((entry,), "cache_aware reads the cluster KV index: give the system a kv_cache "
                                       "(kv_cache: {} caches prefixes in HBM only)"))
        if self.cache_aware is not None and not aware:
            problems.append((("cache_aware",), f"settings of the cache_aware router, but this system's {entry} is "
                                               f"{getattr(self, entry)}: set {entry}: cache_aware or drop them"))
        return problems

    def failure_problems(self) -> list[tuple[tuple[str, ...], str]]:
        """What node failures in a run do not cover yet (:mod:`kvsim.sim.failures`)."""
        if self.failures is None:
            return []
        problems: list[tuple[tuple[str, ...], str]] = []
        cache = self.kv_cache
        if cache is not None and cache.peer_hbm != "none":
            problems.append((("failures",), f"failures in a run are simulated with each instance's own HBM cache "
                                            f"so far (peer_hbm: {cache.peer_hbm} shares a failed node's HBM with "
                                            "its peers): drop peer_hbm or failures"))
        if self.adaptive:
            problems.append((("failures",), f"failures in a run are simulated with a fixed P:D split so far: "
                                            f"drop the {self.controller.kind} controller or failures"))
        return problems

    def controller_problems(self, slo: SloSpec) -> list[tuple[tuple[str, ...], str]]:
        """Problems with the controller given the system's shape and the scenario's SLOs."""
        control = self.controller
        if control is None:
            return []
        if not self.disaggregated:
            return [(("controller",), "a controller moves the P:D ratio of a disaggregated system "
                                      "(prefill and decode pools); this system colocates")]
        problems: list[tuple[tuple[str, ...], str]] = []
        if control.kind == "static":
            return problems
        if control.kind == "threshold" and not control.low < control.high:
            problems.append((("controller", "high"), f"must exceed low ({control.low:g}); the band between "
                                                      "them is the hysteresis"))
        pools = self.pool_specs()
        if not any(pool.may_switch for pool in pools.values()):
            fixed = ", ".join(f"{name} ({pool.role})" for name, pool in pools.items())
            problems.append((("controller",), f"a {control.kind} controller moves instances of switchable pools, and "
                                              f"every pool here has a fixed role: {fixed}. Split a pool with roles: "
                                              "{prefill: N, decode: M}, or give a pool switchable: true"))
        for name in control.signal_pools or ():
            if name not in pools:
                problems.append((("controller", "signal_pools"), f"{name!r} is not a pool of this system: "
                                                                 f"{', '.join(pools)}"))
        if control.on_switch == "migrate" and self.failures is not None:
            problems.append((("controller", "on_switch"), "KV migration on a switch is simulated without node "
                                                          "failures so far: drop on_switch: migrate or failures"))
        need = {"ttft_attainment": ("ttft_p99", slo.ttft_p99), "tpot_attainment": ("tpot_p99", slo.tpot_p99)}
        if control.signal in need and need[control.signal][1] is None:
            problems.append((("controller", "signal"), f"{control.signal} needs slo.{need[control.signal][0]}"))
        return problems


def _switch_problems(name: str, pool: PoolSpec) -> list[tuple[tuple[str, ...], str]]:
    """Problems with a pool's switching fields (``switchable``, ``min_prefill``, ``min_decode``)."""
    problems: list[tuple[tuple[str, ...], str]] = []
    path = ("pools", name)
    if pool.switchable and pool.roles is None and pool.role == "mixed":
        problems.append((path + ("switchable",), "a colocated (mixed) pool has no role to switch: give it role: "
                                                 "prefill or decode, or roles: {prefill: N, decode: M}"))
    bounds = [f for f in ("min_prefill", "min_decode") if getattr(pool, f) > 0]  # (a resolved file writes the 0s)
    if bounds and not pool.may_switch:
        problems.append((path + (bounds[0],), f"{bounds[0]} bounds a switchable pool's instances in a role; this "
                                              f"pool keeps role {pool.role}: give it switchable: true or drop "
                                              f"{' and '.join(bounds)}"))
    count = sum(pool.roles.values()) if pool.roles is not None else pool.instances
    if count is not None and pool.min_prefill + pool.min_decode > count:
        problems.append((path + ("min_prefill" if "min_prefill" in bounds else "min_decode",),
                         f"min_prefill {pool.min_prefill} + min_decode {pool.min_decode} exceed the pool's "
                         f"{count} instances"))
    return problems


class CompareSpec(FrozenSpec):
    baseline: str


class CatalogEntries(FrozenSpec):
    """Parts defined or overridden by the scenario (``base: NAME`` starts from a shipped entry)."""

    accelerators: dict[str, dict[str, Any]] = Field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    pool_nodes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)


class ScenarioSpec(FrozenSpec):
    """A whole scenario file.

    Requests arrive during ``[0, duration)``; metrics are measured over ``[warmup, duration]``.
    After ``duration`` no request arrives and the run drains: it continues until every request
    that arrived has finished, so latency percentiles are not biased toward the fast ones. The
    drain stops after ``drain_limit`` (default: 10 x duration) of extra simulated time.
    """

    name: str = Field(min_length=1)
    description: str = ""
    seed: Count = 0
    replications: PositiveInt = 1
    """Independent runs per sweep point, each with its own seed (:func:`kvsim.rng.replica_seed`;
    replica 0 keeps ``seed``); summaries give the mean and a 95 % Student-t interval across them."""
    duration: PositiveSeconds
    warmup: Seconds = 0.0
    """Seconds measured from 0 before the window opens; ``auto`` (held as ``warmup_auto``) finds
    it per run by MSER-5 instead (:mod:`kvsim.metrics.steady_state`): the run is simulated once
    with the window open from 0, the truncation MSER-5 picks on the number of requests in the
    system becomes the warm-up, and the run is summarised again over that window (two passes)."""
    warmup_auto: bool = False
    """Set by ``warmup: auto`` (``warmup`` is then 0, the first pass's window)."""
    drain_limit: Seconds | None = None  # 0 s: stop at duration, counting what has not finished
    model: str
    dtype: Dtype = "bf16"
    compute_dtype: Dtype | None = None
    """The number format the matrix multiplies run in, whose dense peak bounds compute (default:
    ``dtype``, i.e. W4A4 for mxfp4 weights). Weights stay stored in ``dtype`` (and
    ``weight_dtypes``): ``dtype: mxfp4, compute_dtype: fp8`` is W4A8, ``compute_dtype: bf16`` W4A16."""
    kv_dtype: Dtype | None = None
    weight_dtypes: dict[WeightGroup, Dtype] = Field(default_factory=dict)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    workload: WorkloadSpec
    slo: SloSpec = Field(default_factory=SloSpec)
    systems: dict[str, SystemSpec] = Field(min_length=1)
    compare: CompareSpec | None = None
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    catalog: CatalogEntries = Field(default_factory=CatalogEntries)
    study: StudySpec | None = None
    plan: PlanSpec | None = None
    cost: CostSpec = Field(default_factory=CostSpec)  # cost model parameters (kvsim.metrics.cost)
    calibration: str | None = None
    """A ``calib.yaml`` (``kvsim calibrate``; relative to the scenario file) whose fitted values apply
    to its card: efficiencies under the scenario's own ``catalog:`` entries, engine values to the
    systems whose every pool runs on that card, under the scenario's and the system's own
    ``engine:`` fields (see :mod:`kvsim.calibration.calibfile`)."""

    @model_validator(mode="before")
    @classmethod
    def _auto_warmup(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("warmup"), str) and data["warmup"].strip().lower() == "auto":
            return {**data, "warmup": "0 s", "warmup_auto": True}
        return data

    def _lora_problems(self, name: str, system: SystemSpec) -> list[tuple[tuple[str, ...], str]]:
        lora, adapters = system.lora, self.workload.adapters
        if lora is None:
            return []
        path = ("systems", name, "lora")
        if adapters is None:
            return [(path, "the workload names no adapters: give workload.adapters (count, rank, ...) or drop lora")]
        problems = []
        if lora.max_loras is not None and lora.max_loras > adapters.count:
            problems.append((path + ("max_loras",), f"{lora.max_loras} slots for {adapters.count} adapters: "
                                                    f"give at most {adapters.count}"))
        if lora.kv_sharing != "none" and self.workload.prefix is None:
            problems.append((path + ("kv_sharing",), "the workload has no shared context (workload.prefix: "
                                                     "shared_documents or fixed_hit) to share across adapters"))
        cache = system.kv_cache
        if lora.kv_sharing == "value_reuse" and cache is not None and cache.peer_hbm == "read_in_place":
            problems.append((path + ("kv_sharing",), "value_reuse copies KV into each adapter's own blocks; "
                                                     "with peer_hbm: read_in_place use byte_sharing"))
        if lora.kv_sharing != "none" and system.kv_cache is None:
            problems.append((path + ("kv_sharing",), "KV is reused through the prefix cache: give kv_cache: {}"))
        return problems

    def _options_study_problems(self) -> list[tuple[tuple[str, ...], str]]:
        study, problems = self.study, []
        if study.reference is not None and study.reference not in self.systems:
            problems.append((("study", "reference"), f"{study.reference!r} is not one of the systems"
                                                     f"{did_you_mean(study.reference, self.systems)}: "
                                                     f"{', '.join(self.systems)}"))
        if study.load is not None and self.slo.ttft_p99 is None and self.slo.tpot_p99 is None:
            problems.append((("study", "load"), "capacity is the most load within the SLO: give slo.ttft_p99 "
                                                "and/or slo.tpot_p99"))
        return problems

    def consistency_problems(self) -> list[tuple[tuple[str, ...], str]]:
        """Checks across fields, as ``(field path, message)``; the loader reports them with lines.

        They are not a pydantic validator because a whole-model validator cannot say which
        field is wrong, and the message must point at it.
        """
        problems: list[tuple[tuple[str, ...], str]] = []
        if self.warmup >= self.duration:
            problems.append((("warmup",), f"warmup ({self.warmup:g} s) must be shorter than "
                                          f"duration ({self.duration:g} s)"))
        if self.compare is not None and self.compare.baseline not in self.systems:
            problems.append((("compare", "baseline"), f"{self.compare.baseline!r} is not one of the systems"
                                                      f"{did_you_mean(self.compare.baseline, self.systems)}: "
                                                      f"{', '.join(self.systems)}"))
        for key, values in self.sweep.items():
            if not values:
                problems.append((("sweep", key), "has no values"))
        if self.study is not None and self.study.kind == "pd":
            for system in self.study.timeline:
                if system not in self.systems:
                    problems.append((("study", "timeline"), f"{system!r} is not one of the systems"
                                                                     f"{did_you_mean(system, self.systems)}"))
        elif self.study is not None and self.study.kind == "options":
            problems += self._options_study_problems()
        elif self.study is not None:
            for label, pair in self.study.configs.items():
                if len(pair) != 2:
                    problems.append((("study", "configs", label), "give [high system, low system]"))
                    continue
                for system in pair:
                    if system not in self.systems:
                        problems.append((("study", "configs", label), f"{system!r} is not one of the systems"
                                                                     f"{did_you_mean(system, self.systems)}"))
        for name, system in self.systems.items():
            for path, message in (system.shape_problems() + system.controller_problems(self.slo)
                                  + system.routing_problems() + system.failure_problems()
                                  + (system.scale_up.system_problems(system.model_fields_set) if system.scale_up else [])):
                problems.append((("systems", name) + path, message))
            problems += self._lora_problems(name, system)
            if self.workload.timeout is not None and getattr(system.controller, "on_switch", "drain") == "migrate":
                problems.append((("systems", name, "controller", "on_switch"), "KV migration on a switch is simulated "
                                 "with clients that wait for their answers so far: drop workload.timeout or it"))
        if self.plan is not None:
            problems += self.plan.problems(list(self.systems))
            problems += shared_pool_problems(self.plan.shared_pools, self.plan.chosen(list(self.systems)), self.systems)
            if not any((self.slo.ttft_p99, self.slo.tpot_p99, self.slo.e2e_p99)):
                problems.append((("plan",), "plans the most load within the SLO: give slo.ttft_p99, slo.tpot_p99 "
                                            "and/or slo.e2e_p99"))
            kind = self.workload.arrival.kind
            if self.plan.by_clients and kind != "closed_loop":
                problems.append((("plan", "target_clients"), f"a plan by clients varies a closed loop's clients: "
                                                             f"use arrival kind closed_loop, not {kind} (or give "
                                                             f"targets, arrival rates)"))
            elif self.plan.targets is not None and kind == "closed_loop":
                problems.append((("plan", "targets"), "the workload is a closed loop: give target_clients (numbers "
                                                      "of clients) instead of arrival rates"))
            elif self.plan.targets is not None and getattr(self.workload.arrival, "rate", None) is None:
                problems.append((("workload", "arrival", "kind"), f"kvsim plan varies the arrival rate: use a "
                                                                  f"poisson or gamma arrival, not {kind}"))
            if self.sweep:
                problems.append((("sweep",), "a plan searches the load itself: drop sweep: (or run the sweep "
                                             "without plan:)"))
        return problems  # sizes beyond the limits: kvsim.scenario.limits (it needs the catalogs)

    @property
    def drain_limit_s(self) -> float:
        return self.drain_limit if self.drain_limit is not None else 10.0 * self.duration

    @property
    def baseline(self) -> str:
        """The system others are compared against (the first one unless ``compare`` says)."""
        return self.compare.baseline if self.compare else next(iter(self.systems))

    def system_model(self, system: str) -> str:
        return self.systems[system].model or self.model

    def system_dtype(self, system: str) -> str:
        return self.systems[system].dtype or self.dtype

    def system_compute_dtype(self, system: str) -> str:
        """The number format ``system``'s matrix multiplies run in (its own, the scenario's, or its dtype)."""
        return self.systems[system].compute_dtype or self.compute_dtype or self.system_dtype(system)

    def system_weight_dtypes(self, system: str) -> dict[str, str]:
        """Weight groups stored in another format than ``dtype``: the scenario's, with the
        system's own entries replacing those."""
        return {**self.weight_dtypes, **(self.systems[system].weight_dtypes or {})}

    def system_engine(self, system: str) -> EngineSpec:
        """The engine costs of ``system``: the scenario's ``engine``, with the fields the system's
        own ``engine`` gives replacing those."""
        own = self.systems[system].engine
        if own is None:
            return self.engine
        return self.engine.model_copy(update={k: getattr(own, k) for k in own.model_fields_set})

    def system_kv_dtype(self, system: str) -> str:
        spec = self.systems[system]
        return spec.kv_dtype or self.kv_dtype or spec.dtype or self.dtype
