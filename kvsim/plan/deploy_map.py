"""What an operator runs to stand up a planned system: engine command lines and a manifest.

:func:`engine_groups` maps one system of a scenario, at ``units`` units (every node count
times ``units``, as :func:`kvsim.plan.planner.scaled_scenario` scales a plan's probes), to its
groups of identical engine instances -- one per pool and starting role -- and, for each group,
the vLLM and the SGLang command line and environment. Every flag and variable is a
:class:`Setting` that names the scenario fields it came from; what the engines have no setting
for is a :class:`Gap`. :func:`kvsim.plan.deploy.deployment_files` renders them as shell
scripts, a Dynamo ``DynamoGraphDeployment`` manifest and a README table.

The engines' flags, variables and units were read from the released sources of the versions
in ``tests/fixtures/engine_flags.json`` (vLLM 0.33.0, SGLang 0.5.23, LMCache 0.5.6); the tests
check every generated flag against that fixture. Units matter: vLLM's ``--kv-offloading-size``
is GiB summed over an instance's TP ranks; LMCache's ``LMCACHE_MAX_LOCAL_CPU_SIZE`` and
``..._DISK_SIZE`` are GiB (x 1024**3) per worker process (one per card); SGLang's
``--hicache-size`` is whole decimal GB (x 1e9) per rank.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from kvsim.plan.deploy_tiers import offload_settings
from kvsim.plan.deploy_types import EngineCommand, Gap, Setting
from kvsim.plan.deploy_types import show as _show
from kvsim.sim.sizing import PoolSizing, SizingError, size_system

__all__ = [
    "LMCACHE_VERSION",
    "SGLANG_VERSION",
    "VLLM_VERSION",
    "DeployError",
    "EngineCommand",
    "Gap",
    "InstanceGroup",
    "Setting",
    "engine_groups",
]

VLLM_VERSION = "0.33.0"
SGLANG_VERSION = "0.5.23"
LMCACHE_VERSION = "0.5.6"

_VLLM_DTYPE = {"bf16": "bfloat16", "fp16": "float16"}
_VLLM_KV_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp8": "fp8"}
_SGLANG_KV_DTYPE = {"bf16": "bfloat16", "fp8": "fp8_e4m3"}


class DeployError(ValueError):
    """The system cannot be written as deployment files (one message, no traceback)."""


@dataclass
class InstanceGroup:
    """``count`` identical instances of one pool in one role, each on ``cards`` cards."""

    system: str
    pool: str
    role: str  # mixed, prefill or decode
    count: int
    cards: int
    node: str
    cards_per_node: int
    count_sources: tuple[str, ...]
    count_rule: str
    model_id: str
    vllm: EngineCommand
    sglang: EngineCommand
    gaps: list[Gap] = field(default_factory=list)
    offload_config: dict[str, Any] | None = None  # vLLM's offload connector entry, without the handoff

    @property
    def label(self) -> str:
        return self.pool if self.role == "mixed" else f"{self.pool}-{self.role}"


def engine_groups(scenario: Any, system: str, units: int,
                  pool_nodes: int | None = None) -> tuple[list[InstanceGroup], list[Gap]]:
    """The instance groups of ``system`` at ``units`` units, with their commands, and the gaps.

    Parameters
    ----------
    scenario : kvsim.scenario.load.Scenario
        The validated scenario.
    system : str
        One of its systems.
    units : int
        How many units of the system (every node count times ``units``).
    pool_nodes : int, optional
        The remote KV pool's node count when one pool is shared by all the units
        (``plan.shared_pools``); None: the pool as written times the units.

    Raises
    ------
    DeployError
        The system is unknown, ``units`` is not a positive whole number, or the system cannot be
        sized.
    """
    spec = scenario.spec
    if system not in spec.systems:
        raise DeployError(f"no system {system!r} in the scenario: {', '.join(spec.systems)}")
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise DeployError(f"units must be a whole number of at least 1, not {units!r}")
    try:
        sizing = size_system(spec, system, scenario.catalogs)
    except SizingError as exc:
        raise DeployError(f"systems.{system}: cannot be sized: {exc}") from None
    sys_spec = spec.systems[system]
    model = sizing.model
    gaps = _system_gaps(spec, system)
    groups: list[InstanceGroup] = []
    for pool in sizing.pools:
        roles = pool.spec.initial_roles(pool.instances)
        for role in ("mixed", "prefill", "decode"):
            n = roles.count(role)
            if n == 0:
                continue
            groups.append(_group(spec, system, pool, role, n, units, model.hf_id, model.name))
    if sys_spec.kv_cache is not None:
        gaps += _cache_gaps(spec, system, units, pool_nodes)
    for pool in sizing.pools:
        gaps += _instance_gaps(spec, system, pool)
    for group in groups:
        gaps += [g for g in group.gaps if g not in gaps]
    return groups, gaps


def _pool_prefix(spec: Any, system: str, pool: PoolSizing) -> str:
    path = ("systems", system) + spec.systems[system].pool_path(pool.name)
    return ".".join(path)


def _group(spec: Any, system: str, pool: PoolSizing, role: str, n: int, units: int, hf_id: str,
           model_name: str) -> InstanceGroup:
    p = _pool_prefix(spec, system, pool)
    sys_spec = spec.systems[system]
    if pool.spec.roles is not None:
        count_sources: tuple[str, ...] = (f"{p}.roles.{role}", f"{p}.nodes", "units")
        rule = f"{n} x units, on nodes x units nodes"
    elif pool.spec.instances is not None:
        count_sources = (f"{p}.instances", f"{p}.nodes", "units")
        rule = f"{n} x units, on nodes x units nodes"
    else:
        count_sources = (f"{p}.nodes", f"catalog:nodes.{pool.node.name}.accelerators_per_node",
                         f"{p}.instance.tp", f"{p}.instance.pp", "units")
        rule = f"nodes x cards per node // (tp x pp) = {n}, x units"
    vllm = EngineCommand("vllm", ("vllm", "serve", hf_id))
    sglang = EngineCommand("sglang", ("python3", "-m", "sglang.launch_server"))
    sglang.add("--model-path", hf_id, (f"catalog:models.{model_name}.hf_id",), (hf_id,))
    _parallel(vllm, sglang, p, pool)
    _batching(vllm, sglang, p, pool, spec, system)
    _kv_dtype(vllm, sglang, spec, system)
    role_path, role_value = _role_source(spec, system, pool)
    caches = role != "decode" and sys_spec.kv_cache is not None
    if caches:
        vllm.add("--enable-prefix-caching", None, (f"systems.{system}.kv_cache",), ("given",),
                 "prefix caching in HBM is on when kv_cache is given")
        eviction = sys_spec.kv_cache.hbm_eviction
        if eviction in ("lru", "lfu"):
            sglang.add("--radix-eviction-policy", eviction, (f"systems.{system}.kv_cache.hbm_eviction",), (eviction,))
    else:
        why = ("no kv_cache: kvsim computes every prompt in full" if sys_spec.kv_cache is None
               else "decode instances cache no prefixes in kvsim")
        src = (role_path,) if role == "decode" else (f"systems.{system}.kv_cache",)
        val = (role_value,) if role == "decode" else ("absent",)
        vllm.add("--no-enable-prefix-caching", None, src, val, why)
        sglang.add("--disable-radix-cache", None, src, val, why)
    if role != "mixed":
        _handoff(vllm, sglang, spec, system, role_path, role_value, role)
    offload, tier_gaps = (offload_settings(vllm, sglang, spec, system, pool, _instances_per_node(pool)) if caches
                          else (None, []))
    if role != "mixed" or offload is not None:
        cache = sys_spec.kv_cache
        name = cache.connector.name if cache is not None and cache.connector is not None else "absent"
        vllm.add("--kv-transfer-config", _vllm_transfer_config(role, offload),
                 (f"systems.{system}.kv_cache.connector.name", role_path), (name, role_value),
                 "the offload connector, and Mooncake's P2P connector for a prefill / decode handoff")
    return InstanceGroup(system=system, pool=pool.name, role=role, count=n * units, cards=pool.layout.cards,
                         node=pool.node.name, cards_per_node=pool.node.accelerators_per_node,
                         count_sources=count_sources, count_rule=rule, model_id=hf_id, vllm=vllm, sglang=sglang,
                         gaps=tier_gaps, offload_config=offload)


def _parallel(vllm: EngineCommand, sglang: EngineCommand, p: str, pool: PoolSizing) -> None:
    lay = pool.layout
    tp_src, dp_src = f"{p}.instance.tp", f"{p}.instance.dp_attention"
    # vLLM: data-parallel attention is DP ranks of tp / dp cards each, experts over all of them
    vllm.add("--tensor-parallel-size", lay.tp // lay.dp_attention, (tp_src, dp_src), (lay.tp, lay.dp_attention),
             "tp / dp_attention (attention TP degree of each DP rank)")
    sglang.add("--tp-size", lay.tp, (tp_src,), (lay.tp,))
    if lay.pp > 1:
        vllm.add("--pipeline-parallel-size", lay.pp, (f"{p}.instance.pp",), (lay.pp,))
        sglang.add("--pp-size", lay.pp, (f"{p}.instance.pp",), (lay.pp,))
    if lay.dp_attention > 1:
        vllm.add("--data-parallel-size", lay.dp_attention, (dp_src,), (lay.dp_attention,))
        sglang.add("--dp-size", lay.dp_attention, (dp_src,), (lay.dp_attention,))
        sglang.add("--enable-dp-attention", None, (dp_src,), (lay.dp_attention,), "dp_attention > 1")
    if lay.ep > 1:
        vllm.add("--enable-expert-parallel", None, (f"{p}.instance.ep",), (lay.ep,),
                 "ep = tp: experts spread over the DP x TP ranks")
        sglang.add("--ep-size", lay.ep, (f"{p}.instance.ep",), (lay.ep,))


def _batching(vllm: EngineCommand, sglang: EngineCommand, p: str, pool: PoolSizing, spec: Any, system: str) -> None:
    inst = pool.spec.instance
    src = f"{p}.instance."
    # kvsim's limits are vLLM's, per data-parallel attention rank; SGLang's count the whole
    # instance and are divided by --dp-size (see InstanceSpec's notes)
    vllm.add("--max-num-seqs", inst.max_num_seqs, (src + "max_num_seqs",), (inst.max_num_seqs,))
    vllm.add("--max-num-batched-tokens", inst.max_batched_tokens, (src + "max_batched_tokens",),
             (inst.max_batched_tokens,))
    chunk_rule = "SGLang's prefill chunk; decode tokens are not counted in it"
    if inst.dp_attention == 1:
        sglang.add("--max-running-requests", inst.max_num_seqs, (src + "max_num_seqs",), (inst.max_num_seqs,))
        sglang.add("--chunked-prefill-size", inst.max_batched_tokens, (src + "max_batched_tokens",),
                   (inst.max_batched_tokens,), chunk_rule)
    else:
        dp = (src + "dp_attention",)
        sglang.add("--max-running-requests", inst.instance_max_num_seqs, (src + "max_num_seqs",) + dp,
                   (inst.max_num_seqs, inst.dp_attention),
                   "max_num_seqs x dp_attention: SGLang divides it by --dp-size")
        sglang.add("--chunked-prefill-size", inst.instance_max_batched_tokens, (src + "max_batched_tokens",) + dp,
                   (inst.max_batched_tokens, inst.dp_attention),
                   chunk_rule + "; max_batched_tokens x dp_attention: SGLang divides it by --dp-size")
    vllm.add("--block-size", inst.block_size_tokens, (src + "block_size_tokens",), (inst.block_size_tokens,))
    sglang.add("--page-size", inst.block_size_tokens, (src + "block_size_tokens",), (inst.block_size_tokens,))
    vllm.add("--gpu-memory-utilization", f"{inst.memory_utilization:g}", (src + "memory_utilization",),
             (inst.memory_utilization,))
    sglang.add("--mem-fraction-static", f"{inst.memory_utilization:g}", (src + "memory_utilization",),
               (inst.memory_utilization,), "weights + KV pool share of device memory")
    if pool.model.vision is not None and inst.images_per_prompt is not None:  # vLLM's default: 999
        n = inst.images_per_prompt
        vllm.add("--limit-mm-per-prompt", json.dumps({"image": n}), (src + "images_per_prompt",), (n,),
                 "0: text only, the vision tower not loaded" if n == 0 else "")
    if pool.model.vision is not None and not inst.mm_profiling:
        vllm.add("--skip-mm-profiling", None, (src + "mm_profiling",), (False,), "mm_profiling: false")
    _graphs(vllm, sglang, spec, system)
    dtype = spec.system_dtype(system)
    where = f"systems.{system}.dtype" if spec.systems[system].dtype else "dtype"
    if dtype in _VLLM_DTYPE:
        vllm.add("--dtype", _VLLM_DTYPE[dtype], (where,), (dtype,))
        sglang.add("--dtype", _VLLM_DTYPE[dtype], (where,), (dtype,))
    elif dtype == "fp8":
        vllm.add("--quantization", "fp8", (where,), (dtype,), "fp8 weights: online fp8 quantization")
        sglang.add("--quantization", "fp8", (where,), (dtype,), "fp8 weights: online fp8 quantization")


def _graphs(vllm: EngineCommand, sglang: EngineCommand, spec: Any, system: str) -> None:
    """Graph capture (``engine.graph_mode``, ``engine.graph_max_tokens``): eager, or a captured maximum."""
    engine = spec.system_engine(system)
    own = spec.systems[system].engine

    def where(name: str) -> str:
        return f"systems.{system}.engine.{name}" if own is not None and name in own.model_fields_set else f"engine.{name}"

    if not engine.graph_mode:
        vllm.add("--enforce-eager", None, (where("graph_mode"),), (False,), "graph_mode: false")
        sglang.add("--disable-cuda-graph", None, (where("graph_mode"),), (False,), "graph_mode: false")
    elif engine.graph_max_tokens is not None:
        n = engine.graph_max_tokens
        vllm.add("--max-cudagraph-capture-size", n, (where("graph_max_tokens"),), (n,))
        sglang.add("--cuda-graph-max-bs-decode", n, (where("graph_max_tokens"),), (n,),
                   "SGLang caps captured decode batches in sequences (one token each)")


def _kv_dtype(vllm: EngineCommand, sglang: EngineCommand, spec: Any, system: str) -> None:
    kv = spec.system_kv_dtype(system)
    s = spec.systems[system]
    where = (f"systems.{system}.kv_dtype" if s.kv_dtype else "kv_dtype" if spec.kv_dtype
             else f"systems.{system}.dtype" if s.dtype else "dtype")
    if kv == spec.system_dtype(system):
        rule = "the KV cache in the model's dtype"
        vllm.add("--kv-cache-dtype", "auto", (where,), (kv,), rule)
        sglang.add("--kv-cache-dtype", "auto", (where,), (kv,), rule)
        return
    if kv in _VLLM_KV_DTYPE:
        vllm.add("--kv-cache-dtype", _VLLM_KV_DTYPE[kv], (where,), (kv,))
    if kv in _SGLANG_KV_DTYPE:
        sglang.add("--kv-cache-dtype", _SGLANG_KV_DTYPE[kv], (where,), (kv,))


def _role_source(spec: Any, system: str, pool: PoolSizing) -> tuple[str, str]:
    """The field that gives a pool's instances their roles, and its value as written."""
    if spec.systems[system].pools is None:
        return f"systems.{system}.node", "single-pool form: every instance mixed"
    p = _pool_prefix(spec, system, pool)
    if pool.spec.roles is not None:
        return f"{p}.roles", ", ".join(f"{k}: {v}" for k, v in pool.spec.roles.items())
    return f"{p}.role", pool.spec.role


def _handoff(vllm: EngineCommand, sglang: EngineCommand, spec: Any, system: str, role_path: str, role_value: str,
             role: str) -> None:
    sglang.add("--disaggregation-mode", role, (role_path,), (role_value,))
    sglang.add("--disaggregation-transfer-backend", "mooncake", (f"systems.{system}.kv_handoff.gpu_direct",),
               (spec.systems[system].kv_handoff.gpu_direct,), "a KV transfer engine moving KV NIC to NIC (Mooncake)")


def _vllm_transfer_config(role: str, offload: dict[str, Any] | None) -> str:
    """vLLM's ``--kv-transfer-config`` JSON: the PD handoff connector, the offload one, or both."""
    handoff = None if role == "mixed" else {"kv_connector": "MooncakeConnector",
                                            "kv_role": "kv_producer" if role == "prefill" else "kv_consumer"}
    config: dict[str, Any]
    if handoff and offload:
        config = {"kv_connector": "MultiConnector", "kv_role": handoff["kv_role"],
                  "kv_connector_extra_config": {"connectors": [handoff, offload]}}
    else:
        config = handoff or offload or {}
    return json.dumps(config, separators=(",", ":"))


def _instances_per_node(pool: PoolSizing) -> int:
    """Instances sharing one node's DRAM / NVMe tier (tiers are modelled per node, instances on one node)."""
    per_node = max(1, pool.node.accelerators_per_node // pool.layout.cards)
    return max(1, min(per_node, math.ceil(pool.instances / pool.spec.nodes)))


def _dtype_gaps(spec: Any, system: str) -> list[Gap]:
    s = spec.systems[system]
    gaps = []
    dtype, kv = spec.system_dtype(system), spec.system_kv_dtype(system)
    where = f"systems.{system}.dtype" if s.dtype else "dtype"
    if dtype not in _VLLM_DTYPE and dtype != "fp8":
        gaps.append(Gap("all", where, dtype, "4-bit weights come with a quantized checkpoint: serve its model id"))
    weights = spec.system_weight_dtypes(system)
    if weights:
        gaps.append(Gap("all", f"systems.{system}.weight_dtypes" if s.weight_dtypes else "weight_dtypes",
                        ", ".join(f"{k}: {v}" for k, v in weights.items()),
                        "per-group weight formats come with the checkpoint: serve a model id quantized that way"))
    kv_where = f"systems.{system}.kv_dtype" if s.kv_dtype else "kv_dtype"
    if kv != dtype:
        for engine, table in (("vllm", _VLLM_KV_DTYPE), ("sglang", _SGLANG_KV_DTYPE)):
            if kv not in table:
                gaps.append(Gap(engine, kv_where, kv, f"no {engine} --kv-cache-dtype is the same format"))
    return gaps


def _system_gaps(spec: Any, system: str) -> list[Gap]:
    s = spec.systems[system]
    gaps = _dtype_gaps(spec, system)
    for name in ("router", "prefill_router", "decode_router"):
        if name in s.model_fields_set or (name == "router" and not s.disaggregated):
            gaps.append(Gap("all", f"systems.{system}.{name}", getattr(s, name),
                            "routing is the gateway's (Dynamo frontend, llm-d inference scheduler), not an engine flag"))
    if s.cache_aware is not None:
        gaps.append(Gap("all", f"systems.{system}.cache_aware", "given", "the gateway's KV-aware routing settings"))
    if s.controller is not None:
        gaps.append(Gap("all", f"systems.{system}.controller", s.controller.kind,
                        "a dynamic P:D ratio is a planner's job (Dynamo planner); only the starting roles are written"))
    if s.disaggregated:
        h = s.kv_handoff
        gaps.append(Gap("all", f"systems.{system}.kv_handoff.mode", h.mode,
                        "layer-wise or whole transfer is the connector's own behaviour, not a flag"))
    if s.lora is not None:
        gaps.append(Gap("all", f"systems.{system}.lora", "given", "LoRA adapters are not written (name them with --lora-modules)"))
    if s.engine is not None or spec.engine.model_fields_set:
        gaps.append(Gap("all", "engine", "given", "kvsim's engine cost figures describe the engine; they are not settings (graph_mode and "
                        "graph_max_tokens are written as flags)"))
    return gaps


def _cache_gaps(spec: Any, system: str, units: int, pool_nodes: int | None = None) -> list[Gap]:
    c = spec.systems[system].kv_cache
    p = f"systems.{system}.kv_cache"
    gaps = [Gap("vllm", f"{p}.hbm_eviction", c.hbm_eviction, "vLLM evicts cached blocks LRU; no flag chooses")]
    if c.hbm_eviction not in ("lru", "lfu"):
        gaps.append(Gap("sglang", f"{p}.hbm_eviction", c.hbm_eviction, "--radix-eviction-policy offers lru and lfu"))
    for name, why in (("load_policy", "whether a hit is loaded or recomputed is the connector's decision"),
                      ("load_mode", "layer-wise loading is the connector's own behaviour"),
                      ("promote_on_hit", "copying NVMe / pool hits into DRAM is the connector's own behaviour"),
                      ("prewarm", "a simulation setting: a warm cache at the start of the run"),
                      ("peer_hbm", "reading other instances' HBM is not a flag of either engine"),
                      ("preemption", "vLLM V1 recomputes preempted sequences; swap is not offered"),
                      ("fanout", "how ranks share KV transfers is the connector's own behaviour"),
                      ("io_size", "the storage I/O size is the connector's own behaviour"),
                      ("gpu_direct", "GPU-Direct (GDS / RDMA) setup is the connector's and the cluster's")):
        value = getattr(c, name)
        if value is not None and (name in c.model_fields_set or name in ("load_policy", "preemption")):
            gaps.append(Gap("all", f"{p}.{name}", _show(value), why))
    for tier in ("dram", "nvme"):
        t = getattr(c, tier)
        if t is not None and t.eviction != "lru":
            gaps.append(Gap("all", f"{p}.{tier}.eviction", t.eviction, "the offload tiers evict LRU; no flag chooses"))
        if t is not None and "max_write_flows" in t.model_fields_set:
            gaps.append(Gap("all", f"{p}.{tier}.max_write_flows", t.max_write_flows, "a model of the write queue, not a flag"))
    if c.remote is not None and pool_nodes is not None:  # plan.shared_pools: one pool for all the units
        gaps.append(Gap("all", f"{p}.remote.nodes", f"{pool_nodes} {c.remote.pool_node} shared by the {units} units "
                        "(plan.shared_pools)", "the pool's own servers (Mooncake store / LMCache server) are deployed "
                        "separately; the engines are only pointed at them"))
    elif c.remote is not None:
        gaps.append(Gap("all", f"{p}.remote.nodes", f"{c.remote.nodes} x {units} units = {c.remote.nodes * units} "
                        f"{c.remote.pool_node}",
                        "the pool's own servers (Mooncake store / LMCache server) are deployed separately; "
                        "the engines are only pointed at them"))
    if c.connector is not None:
        lmcache = c.connector.name in ("lmcache", "custom")  # LMCache written: its chunk size is mapped
        extra = sorted(c.connector.model_fields_set - ({"name", "chunk_tokens"} if lmcache else {"name"}))
        if extra:
            gaps.append(Gap("all", f"{p}.connector", ", ".join(extra), "transport details kvsim models but the "
                            "engines' launch lines do not set"))
    if c.write_policy == "write_back":
        gaps.append(Gap("vllm", f"{p}.write_policy", c.write_policy, "LMCache and vLLM's offloader store on prefill (write-through)"))
    return gaps


def _instance_gaps(spec: Any, system: str, pool: PoolSizing) -> list[Gap]:
    inst = pool.spec.instance
    gaps = []
    prefix = _pool_prefix(spec, system, pool)
    where = prefix + ".instance"
    gaps.append(Gap("k8s", f"{prefix}.node", pool.node.name, "Kubernetes places pods by the cluster's own node "
                    "labels: add a nodeSelector for that server type"))
    for name, why in (("micro_batches", "the engines pick their own number of micro-batches"),
                      ("pp_schedule", "the engines' pipeline schedule is not a flag"),
                      ("expert_skew", "a property of the workload, not a setting"),
                      ("activation_reserve", "the engines profile their activation memory at start-up"),
                      ("runtime_reserve", "the engines profile their runtime memory at start-up"),
                      ("layout", "the layout written is the pool's given fields"),
                      ("weight_offload", "not written: vLLM's offloaders (--cpu-offload-gb; --offload-group-size "
                                         "with --offload-num-in-group) place the host-resident layers their own way, "
                                         "not as kvsim's last layers: size them from the HBM this frees")):
        if name in inst.model_fields_set:
            gaps.append(Gap("all", f"{where}.{name}", _show(getattr(inst, name)), why))
    for name in ("images_per_prompt", "mm_profiling"):
        if pool.model.vision is not None and name in inst.model_fields_set:
            gaps.append(Gap("sglang", f"{where}.{name}", _show(getattr(inst, name)), "written for vLLM only"))
    if pool.layout.cards > pool.node.accelerators_per_node:
        gaps.append(Gap("all", f"{where}.tp", pool.layout.tp, f"an instance spans {pool.layout.cards // pool.node.accelerators_per_node} "
                        "nodes: the commands need the engines' multi-node options (vLLM --nnodes / Ray, SGLang "
                        "--nnodes --node-rank --dist-init-addr), which are not written"))
    return gaps
