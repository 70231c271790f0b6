"""Deployment files for a planned system: vLLM and SGLang launch scripts, a Dynamo manifest, a README.

:func:`deployment_files` writes, for ``units`` units of one system of a scenario (every node
count times ``units``, the scaling of :func:`kvsim.plan.planner.scaled_scenario`):

- ``deploy/<system>/vllm.sh`` and ``sglang.sh``: one shell function per group of identical
  instances (a pool in one role), run once per instance (``./vllm.sh main``; arguments after
  the group name are appended to the command, e.g. ``--port``);
- ``deploy/<system>/k8s.yaml``: a Dynamo ``DynamoGraphDeployment`` (``nvidia.com/v1alpha1``,
  the form of ai-dynamo/dynamo's ``examples/backends/vllm/deploy``) with one worker service per
  group, its replicas the group's instance count;
- ``deploy/<system>/mooncake.json`` when vLLM reaches a remote pool through Mooncake's store;
- ``deploy/<system>/README.md``: every flag, variable and manifest field with the scenario field
  and value it came from, and the scenario fields no engine setting carries.

The flags are those of vLLM 0.33.0 and SGLang 0.5.23 (``tests/fixtures/engine_flags.json`` names
the sources; the tests check every generated flag against it). See docs/deploy.md.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from kvsim.plan.deploy_map import (
    LMCACHE_VERSION,
    SGLANG_VERSION,
    VLLM_VERSION,
    DeployError,
    InstanceGroup,
    engine_groups,
)
from kvsim.plan.deploy_tiers import MOONCAKE_CONFIG_PATH, mooncake_client_config
from kvsim.plan.deploy_types import EngineCommand, Gap, Setting

__all__ = ["DYNAMO_IMAGE", "DeployError", "deployment_files"]

DYNAMO_IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:${VERSION}"
"""The worker image of Dynamo's vLLM examples; ``${VERSION}`` is left for the operator to set."""

_ROLE_FLAG = {"prefill": "--is-prefill-worker", "decode": "--is-decode-worker"}


def deployment_files(scenario: Any, system: str, units: int, pool_nodes: int | None = None) -> list[tuple[str, bytes]]:
    """The files that stand up ``units`` units of ``system``, as ``(relative path, content)``.

    Parameters
    ----------
    scenario : kvsim.scenario.load.Scenario
        The validated scenario (a plan's scenario: the chosen candidate is one of its systems).
    system : str
        The system to deploy.
    units : int
        How many units of it (every node count of the system times ``units``).
    pool_nodes : int, optional
        The remote KV pool's nodes, shared by the units (``plan.shared_pools``; the README says so).

    Raises
    ------
    DeployError
        Unknown system, units below 1, or a system that cannot be sized (one message).
    """
    groups, gaps = engine_groups(scenario, system, units, pool_nodes)
    base = f"deploy/{system}"
    files = [(f"{base}/vllm.sh", _script(scenario, system, units, groups, "vllm").encode()),
             (f"{base}/sglang.sh", _script(scenario, system, units, groups, "sglang").encode())]
    mooncake = any(s.name == "MOONCAKE_CONFIG_PATH" for g in groups for s in g.vllm.env)
    files.append((f"{base}/k8s.yaml", _manifest(scenario, system, units, groups, mooncake).encode()))
    if mooncake:
        files.append((f"{base}/mooncake.json", (json.dumps(mooncake_client_config(), indent=2) + "\n").encode()))
    files.append((f"{base}/README.md", _readme(scenario, system, units, groups, gaps, mooncake).encode()))
    return files


def _function_name(group: InstanceGroup) -> str:
    return "launch_" + "".join(c if c.isalnum() else "_" for c in group.label)


def _script(scenario: Any, system: str, units: int, groups: list[InstanceGroup], engine: str) -> str:
    version = VLLM_VERSION if engine == "vllm" else SGLANG_VERSION
    lines = ["#!/usr/bin/env bash",
             (f"# {engine} {version} launch commands for system {system} x {units} unit(s) of scenario "
              f"{scenario.spec.name!r}, written by kvsim."),
             "# Usage: ./" + engine + ".sh GROUP [extra engine flags]   (run once per instance of the group,",
             "# each on its own cards, e.g. with CUDA_VISIBLE_DEVICES). README.md says where each value came from.",
             "set -euo pipefail", ""]
    for g in groups:
        cmd: EngineCommand = g.vllm if engine == "vllm" else g.sglang
        lines.append(f"# {g.label}: {g.role}, {g.count} instance(s) of {g.cards} card(s) each on {g.node} "
                     f"nodes ({g.cards_per_node} cards per node)")
        lines.append(f"{_function_name(g)}() {{")
        for s in cmd.env:
            lines.append(f"  export {s.name}={shlex.quote(s.value or '')}")
        argv = cmd.argv()
        head = shlex.join(list(cmd.program))
        parts = [head]
        rest = argv[len(cmd.program):]
        i = 0
        while i < len(rest):  # one flag (and its value) per line
            if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
                parts.append(f"{rest[i]} {shlex.quote(rest[i + 1])}")
                i += 2
            else:
                parts.append(rest[i])
                i += 1
        lines.append("  exec " + " \\\n    ".join(parts + ['"$@"']))
        lines.append("}")
        lines.append("")
    names = " | ".join(g.label for g in groups)
    lines.append('case "${1:-}" in')
    for g in groups:
        lines.append(f'  {shlex.quote(g.label)}) shift; {_function_name(g)} "$@" ;;')
    lines.append(f'  *) echo "usage: $0 {{{names}}} [extra flags]" >&2; exit 2 ;;')
    lines.append("esac")
    return "\n".join(lines) + "\n"


def _service_name(group: InstanceGroup, groups: list[InstanceGroup]) -> str:
    role = {"mixed": "", "prefill": "Prefill", "decode": "Decode"}[group.role]
    pool = "" if len({g.pool for g in groups}) == 1 else "".join(w.capitalize() for w in group.pool.replace("-", "_").split("_"))
    return f"Vllm{role}Worker{pool}"


def _worker_args(group: InstanceGroup) -> list[str]:
    """dynamo.vllm's arguments: vLLM's engine flags (the model by --model), the role flag; for a
    prefill / decode worker Dynamo sets up the handoff itself, so only the offload connector is passed."""
    args = ["--model", group.model_id]
    for s in group.vllm.flags:
        if s.name == "--kv-transfer-config" and group.role != "mixed":
            if group.offload_config is None:
                continue
            value = json.dumps(group.offload_config, separators=(",", ":"))
            args += [s.name, value]
            continue
        args += [s.name] if s.value is None else [s.name, s.value]
    if group.role in _ROLE_FLAG:
        args.append(_ROLE_FLAG[group.role])
    return args


def _manifest(scenario: Any, system: str, units: int, groups: list[InstanceGroup], mooncake: bool) -> str:
    name = "kvsim-" + "".join(c if c.isalnum() else "-" for c in system.lower())
    services: dict[str, Any] = {"Frontend": {"componentType": "frontend", "replicas": 1,
                                             "extraPodSpec": {"mainContainer": {"image": DYNAMO_IMAGE}}}}
    for g in groups:
        container: dict[str, Any] = {"image": DYNAMO_IMAGE, "workingDir": "/workspace/examples/backends/vllm",
                                     "command": ["python3", "-m", "dynamo.vllm"], "args": _worker_args(g)}
        if g.vllm.env:
            container["env"] = [{"name": s.name, "value": s.value} for s in g.vllm.env]
        pod: dict[str, Any] = {"mainContainer": container}
        if mooncake and any(s.name == "MOONCAKE_CONFIG_PATH" for s in g.vllm.env):
            container["volumeMounts"] = [{"name": "mooncake-config", "mountPath": MOONCAKE_CONFIG_PATH.rsplit("/", 1)[0],
                                          "readOnly": True}]
            pod["volumes"] = [{"name": "mooncake-config", "configMap": {"name": f"{name}-mooncake"}}]
        service: dict[str, Any] = {"componentType": "worker"}
        if g.role != "mixed":
            service["subComponentType"] = g.role
        service.update({"replicas": g.count, "resources": {"limits": {"gpu": str(g.cards)}}, "extraPodSpec": pod})
        services[_service_name(g, groups)] = service
    docs: list[dict[str, Any]] = [{
        "apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
        "metadata": {"name": name, "annotations": {"kvsim/scenario": scenario.spec.name, "kvsim/system": system,
                                                   "kvsim/units": str(units), "kvsim/vllm": VLLM_VERSION}},
        "spec": {"services": services}}]
    if mooncake:
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-mooncake"},
                     "data": {"mooncake.json": json.dumps(mooncake_client_config(), indent=2)}})
    head = (f"# Dynamo deployment of system {system} x {units} unit(s) (scenario {scenario.spec.name!r}), written by "
            "kvsim.\n# Set ${VERSION} to the Dynamo runtime image tag; README.md says where each value came from.\n")
    return head + yaml.safe_dump_all(docs, sort_keys=False, width=120)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _rows(group: InstanceGroup, engine: str, settings: list[Setting]) -> list[str]:
    out = []
    for s in settings:
        value = "(flag)" if s.value is None else f"`{s.value}`"
        out.append(f"| {engine} | {_cell(group.label)} | `{s.name}` | {_cell(value)} | {', '.join(f'`{x}`' for x in s.sources)} | "
                   f"{_cell(', '.join(s.source_values))} | {_cell(s.rule)} |")
    return out


def _readme(scenario: Any, system: str, units: int, groups: list[InstanceGroup], gaps: list[Gap], mooncake: bool) -> str:
    lines = [f"# Deployment of system `{system}` x {units} unit(s)", "",
             (f"Written by kvsim from scenario `{scenario.spec.name}`: what an operator runs to stand the planned "
              f"system up. Engines: vLLM {VLLM_VERSION} (`vllm.sh`, and Dynamo's `dynamo.vllm` workers in "
              f"`k8s.yaml`), SGLang {SGLANG_VERSION} (`sglang.sh`), LMCache {LMCACHE_VERSION} for vLLM's offload "
              "tiers. Every value below names the scenario field it came from (`catalog:` for the model and node "
              "catalogs, `units` for the number of units deployed)."), "",
             "## Instances", "",
             "| group | role | instances | cards each | node type | from | rule |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for g in groups:
        lines.append(f"| {g.label} | {g.role} | {g.count} | {g.cards} | {g.node} | "
                     f"{', '.join(f'`{x}`' for x in g.count_sources)} | {_cell(g.count_rule)} |")
    lines += ["", "## Command lines and environment", "",
              "| engine | group | flag / variable | value | from | scenario value | rule |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for g in groups:
        lines += _rows(g, "vllm", g.vllm.flags) + _rows(g, "vllm", g.vllm.env)
        lines += _rows(g, "sglang", g.sglang.flags) + _rows(g, "sglang", g.sglang.env)
    lines += ["", "## Manifest (`k8s.yaml`, Dynamo DynamoGraphDeployment)", "",
              "| field | value | from |", "| --- | --- | --- |"]
    for g in groups:
        svc = _service_name(g, groups)
        lines.append(f"| `spec.services.{svc}.replicas` | {g.count} | instances of group {g.label} (above) |")
        lines.append(f"| `spec.services.{svc}.resources.limits.gpu` | {g.cards} | `{'`, `'.join(_cards_sources(g))}` |")
        if g.role != "mixed":
            lines.append(f"| `spec.services.{svc}.subComponentType` | {g.role} | role of group {g.label} |")
        lines.append(f"| `spec.services.{svc}.extraPodSpec.mainContainer.args` | the vLLM flags of group {g.label} | "
                     "the rows above" + (", with the role flag " + _ROLE_FLAG[g.role] if g.role in _ROLE_FLAG else "") + " |")
    if mooncake:
        lines.append("| `ConfigMap ...-mooncake` | `mooncake.json` | the remote pool (vLLM's Mooncake store client) |")
    lines += ["", "## Not mapped", "",
              ("Scenario fields with a value that these files do not carry, and why: set them by hand where they "
               "matter."), "", "| engine | scenario field | value | why |", "| --- | --- | --- | --- |"]
    for gap in gaps:
        lines.append(f"| {gap.engine} | `{gap.field}` | {_cell(gap.value)} | {_cell(gap.why)} |")
    lines += ["", "## Left to the operator", "",
              "- the Dynamo image tag (`${VERSION}`), the Hugging Face token secret, node selectors for the server type;",
              "- a prefill / decode system's router (SGLang's `sglang_router`, or Dynamo's frontend, which k8s.yaml has);",
              ("- the remote pool's servers (a Mooncake master reachable as `kv-pool:50051`, and its store nodes), "
               "when the system has one; the NVMe tier mounted at `/mnt/kv-nvme` on each node, when it has one."), ""]
    return "\n".join(lines)


def _cards_sources(group: InstanceGroup) -> list[str]:
    tp = next((s for s in group.sglang.flags if s.name == "--tp-size"), None)
    pp = next((s for s in group.sglang.flags if s.name == "--pp-size"), None)
    return [x for s in (tp, pp) if s is not None for x in s.sources]
