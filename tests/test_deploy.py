"""Deployment files (kvsim.plan.deploy): real engine flags, traced values, roles and counts, tier sizes.

The oracle for "real flags" is tests/fixtures/engine_flags.json: the argument lists of vLLM 0.33.0
and SGLang 0.5.23 and LMCache 0.5.6's environment variables, read from the released wheels (the
fixture names the files and how they were read), and the DynamoGraphDeployment fields of
ai-dynamo/dynamo's vLLM examples.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest
import yaml

from kvsim.plan.deploy import DeployError, deployment_files
from kvsim.plan.deploy_map import engine_groups
from kvsim.scenario.load import parse_scenario

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "engine_flags.json").read_text())
GIB = 2.0**30

HEAD = """
name: deploy-test
duration: 60 s
model: {model}
workload:
  arrival: {{kind: poisson, rate: 2/s}}
  prefix:
    kind: shared_documents
    documents: 100
    zipf_s: 0.8
    document_tokens: {{kind: fixed, value: 2048}}
    suffix_tokens: {{kind: fixed, value: 256}}
  output_tokens: {{kind: fixed, value: 64}}
  block_tokens: 256
slo: {{ttft_p99: 2 s}}
systems:
"""

SYSTEMS = {
    "dram": "  s: {node: l20-8x, instance: {tp: 2}, kv_cache: {dram: {capacity: 512 GiB}, prewarm: true}}\n",
    "native": "  s: {node: l20-8x, instance: {tp: 2}, kv_cache: {dram: {capacity: 512 GiB}, connector: {name: vllm}}}\n",
    "nvme": "  s: {node: h20-8x, instance: {tp: 4, max_num_seqs: 64}, kv_cache: {nvme: {}, write_policy: write_back}}\n",
    "pool": ("  s: {node: l20-8x, instance: {tp: 2}, kv_cache: {remote: {pool_node: nvme-storage-16x, nodes: 2}, "
             "gpu_direct: true}}\n"),
    "mooncake": ("  s: {node: l20-8x, instance: {tp: 2}, kv_cache: {dram: {capacity: 256 GiB}, connector: {name: mooncake}, "
                 "remote: {pool_node: nvme-storage-16x}}}\n"),
    "plain": "  s: {node: h20-8x, kv_dtype: fp8, instance: {tp: 8, pp: 1, max_batched_tokens: 8192, block_size_tokens: 32}}\n",
    "pd": ("  s:\n    kv_cache: {dram: {capacity: 256 GiB}, hbm_eviction: s3fifo, preemption: swap}\n"
           "    pools:\n      pre: {node: h20-8x, nodes: 1, role: prefill, instance: {tp: 2}}\n"
           "      dec: {node: h20-8x, nodes: 2, role: decode, instance: {tp: 4}}\n"),
    "split": ("  s:\n    controller: {kind: static}\n"
              "    pools:\n      p: {node: h20-8x, nodes: 1, roles: {prefill: 1, decode: 3}, instance: {tp: 2}}\n"),
}


def scenario(kind: str, model: str = "qwen3-8b"):
    return parse_scenario(HEAD.format(model=model) + SYSTEMS[kind])


def files(kind: str, units: int = 1, model: str = "qwen3-8b") -> dict[str, bytes]:
    return dict(deployment_files(scenario(kind, model), "s", units))


def script_commands(text: str) -> dict[str, tuple[dict[str, str], list[str]]]:
    """Each shell function's exported environment and exec'd argv, as a shell would split them."""
    out, env, name = {}, {}, None
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.endswith("() {"):
            name, env = line[:-4], {}
        elif line.startswith("export "):
            key, value = shlex.split(line[len("export "):])[0].split("=", 1)
            env[key] = value
        elif line.startswith("exec "):
            argv = shlex.split(line)[1:]
            assert argv[-1] == "$@"
            out[name] = (env, argv[:-1])
    return out


def flags_of(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("-")]


def value_of(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def resolve(scenario, path: str):
    """The value a trace's source path names (None past an absent part), or raise KeyError."""
    if path == "units":
        return "units"
    if path.startswith("catalog:"):
        kind, name, *rest = path[len("catalog:"):].split(".")
        node = getattr(scenario.catalogs, kind)[name]
    else:
        node, rest = scenario.spec, path.split(".")
    for part in rest:
        if node is None:
            return None
        if isinstance(node, dict):
            node = node[part]
        elif part in getattr(type(node), "model_fields", {}) or hasattr(type(node), part):
            node = getattr(node, part)
        else:
            raise KeyError(f"{path}: no {part!r}")
    return node


ALL = sorted(SYSTEMS)


def test_fixture_names_its_sources():
    for engine in ("vllm", "sglang", "lmcache"):
        entry = FIXTURE[engine]
        assert entry["version"] and entry["source"]["files"] and entry["source"]["wheel_sha256"] and entry["method"]
    assert len(FIXTURE["vllm"]["flags"]) > 200 and len(FIXTURE["sglang"]["flags"]) > 300
    assert "LMCACHE_MAX_LOCAL_CPU_SIZE" in FIXTURE["lmcache"]["env"]


@pytest.mark.parametrize("kind", ALL)
def test_commands_use_only_documented_flags(kind):
    out = files(kind)
    vllm, sglang = out["deploy/s/vllm.sh"].decode(), out["deploy/s/sglang.sh"].decode()
    vllm_env = set(FIXTURE["lmcache"]["env"]) | set(FIXTURE["vllm"]["env"])
    for text, engine, env_ok in ((vllm, "vllm", vllm_env), (sglang, "sglang", set(FIXTURE["sglang"]["env"]))):
        commands = script_commands(text)
        assert commands
        for env, argv in commands.values():
            program = FIXTURE[engine]["command"]
            assert argv[:len(program)] == program
            unknown = [f for f in flags_of(argv[len(program):]) if f not in FIXTURE[engine]["flags"]]
            assert not unknown, f"{engine} has no flag {unknown} in version {FIXTURE[engine]['version']}"
            assert set(env) <= env_ok, set(env) - env_ok


@pytest.mark.parametrize("kind", ALL)
def test_scripts_carry_exactly_the_traced_settings(kind):
    sc = scenario(kind)
    groups, _ = engine_groups(sc, "s", 1)
    out = files(kind)
    for engine in ("vllm", "sglang"):
        commands = script_commands(out[f"deploy/s/{engine}.sh"].decode())
        assert len(commands) == len(groups)
        for g in groups:
            cmd = getattr(g, engine)
            env, argv = commands["launch_" + g.label.replace("-", "_")]
            assert argv == cmd.argv()
            assert env == {s.name: s.value for s in cmd.env}
            for setting in cmd.flags + cmd.env:  # every value names fields that exist in the scenario
                assert setting.sources and len(setting.sources) == len(setting.source_values)
                for path, shown in zip(setting.sources, setting.source_values):
                    value = resolve(sc, path)
                    assert value is not None or shown == "absent", (path, shown)


@pytest.mark.parametrize("kind", ALL)
def test_readme_traces_every_flag_and_variable(kind):
    sc = scenario(kind)
    groups, gaps = engine_groups(sc, "s", 1)
    readme = files(kind)["deploy/s/README.md"].decode()
    rows = [r for r in readme.splitlines() if r.startswith(("| vllm |", "| sglang |"))]
    for g in groups:
        for engine in ("vllm", "sglang"):
            for s in getattr(g, engine).flags + getattr(g, engine).env:
                row = [r for r in rows if r.startswith(f"| {engine} | {g.label} | `{s.name}` |")]
                assert len(row) == 1, (engine, g.label, s.name)
                for path in s.sources:
                    assert f"`{path}`" in row[0]
    for gap in gaps:
        assert f"`{gap.field}`" in readme.split("## Not mapped")[1]


@pytest.mark.parametrize("kind", ALL)
def test_manifest_is_a_dynamo_graph_deployment(kind):
    out = files(kind, units=3)
    docs = list(yaml.safe_load_all(out["deploy/s/k8s.yaml"]))
    dgd = FIXTURE["dynamo"]
    graph = docs[0]
    assert graph["apiVersion"] == dgd["apiVersion"] and graph["kind"] == dgd["kind"]
    groups, _ = engine_groups(scenario(kind), "s", 3)
    services = graph["spec"]["services"]
    assert services["Frontend"]["componentType"] == "frontend"
    workers = {k: v for k, v in services.items() if k != "Frontend"}
    assert len(workers) == len(groups)
    for svc in workers.values():
        assert set(svc) <= set(dgd["service_fields"])
        assert svc["componentType"] == "worker"
        container = svc["extraPodSpec"]["mainContainer"]
        assert set(container) <= set(dgd["container_fields"])
        assert container["command"] == dgd["worker_command"]
        unknown = [f for f in flags_of(container["args"]) if f not in FIXTURE["vllm"]["flags"] + dgd["worker_flags"]]
        assert not unknown
        for item in container.get("env", []):
            assert item["name"] in FIXTURE["lmcache"]["env"] + FIXTURE["vllm"]["env"]
    by_role = {}
    for svc in workers.values():
        role = svc.get("subComponentType", "mixed")
        by_role[role] = by_role.get(role, 0) + svc["replicas"]
        cards = int(svc["resources"]["limits"]["gpu"])
        assert any(g.cards == cards and g.role == role for g in groups)
    assert by_role == {g.role: sum(h.count for h in groups if h.role == g.role) for g in groups}
    assert [d["kind"] for d in docs[1:]] == (["ConfigMap"] if "deploy/s/mooncake.json" in out else [])


def test_pd_system_gets_prefill_and_decode_commands_with_their_counts():
    sc = scenario("pd")
    units = 3
    groups, _ = engine_groups(sc, "s", units)
    by_role = {g.role: g for g in groups}
    assert set(by_role) == {"prefill", "decode"}
    assert by_role["prefill"].count == 8 // 2 * 1 * units  # 1 node of 8 cards, tp 2
    assert by_role["decode"].count == 8 // 4 * 2 * units  # 2 nodes, tp 4
    out = dict(deployment_files(sc, "s", units))
    vllm = script_commands(out["deploy/s/vllm.sh"].decode())
    sglang = script_commands(out["deploy/s/sglang.sh"].decode())
    pre, dec = vllm["launch_pre_prefill"][1], vllm["launch_dec_decode"][1]
    pre_cfg, dec_cfg = json.loads(value_of(pre, "--kv-transfer-config")), json.loads(value_of(dec, "--kv-transfer-config"))
    assert pre_cfg["kv_role"] == "kv_producer" and dec_cfg == {"kv_connector": "MooncakeConnector", "kv_role": "kv_consumer"}
    # the prefill side also offloads to DRAM: both connectors, under vLLM's MultiConnector
    inner = pre_cfg["kv_connector_extra_config"]["connectors"]
    assert pre_cfg["kv_connector"] == "MultiConnector" and [c["kv_connector"] for c in inner] == [
        "MooncakeConnector", "LMCacheConnectorV1"]
    for name in ("MooncakeConnector", "LMCacheConnectorV1", "MultiConnector"):
        assert name in FIXTURE["vllm"]["kv_connectors"]
    assert "--enable-prefix-caching" in pre and "--no-enable-prefix-caching" in dec
    assert value_of(vllm["launch_pre_prefill"][1], "--tensor-parallel-size") == "2"
    assert value_of(vllm["launch_dec_decode"][1], "--tensor-parallel-size") == "4"
    assert value_of(sglang["launch_pre_prefill"][1], "--disaggregation-mode") == "prefill"
    assert value_of(sglang["launch_dec_decode"][1], "--disaggregation-mode") == "decode"
    assert "--disable-radix-cache" in sglang["launch_dec_decode"][1]
    graph = next(yaml.safe_load_all(out["deploy/s/k8s.yaml"]))
    workers = graph["spec"]["services"]
    assert workers["VllmPrefillWorkerPre"]["replicas"] == by_role["prefill"].count
    assert workers["VllmDecodeWorkerDec"]["replicas"] == by_role["decode"].count
    assert "--is-prefill-worker" in workers["VllmPrefillWorkerPre"]["extraPodSpec"]["mainContainer"]["args"]
    assert "--is-decode-worker" in workers["VllmDecodeWorkerDec"]["extraPodSpec"]["mainContainer"]["args"]


def test_split_pool_roles_follow_the_roles_field():
    groups, gaps = engine_groups(scenario("split"), "s", 2)
    assert {g.role: g.count for g in groups} == {"prefill": 2, "decode": 6}
    assert {g.count_sources[0] for g in groups} == {"systems.s.pools.p.roles.prefill", "systems.s.pools.p.roles.decode"}
    assert any(g.field == "systems.s.controller" for g in gaps)


def test_dram_tier_sizes_in_each_engine_unit():
    """512 GiB of host DRAM per l20-8x node, four tp-2 instances per node: 128 GiB per instance."""
    out = files("dram")
    vllm = script_commands(out["deploy/s/vllm.sh"].decode())["launch_main"]
    sglang = script_commands(out["deploy/s/sglang.sh"].decode())["launch_main"]
    env, argv = vllm
    assert json.loads(value_of(argv, "--kv-transfer-config"))["kv_connector"] == "LMCacheConnectorV1"
    assert env["LMCACHE_LOCAL_CPU"] == "True"
    assert float(env["LMCACHE_MAX_LOCAL_CPU_SIZE"]) == 64.0  # GiB per worker: 128 GiB / 2 cards
    assert env["LMCACHE_CHUNK_SIZE"] == "256"
    # SGLang's --hicache-size is decimal GB per rank: 64 GiB = 68.7 GB, rounded down
    assert int(value_of(sglang[1], "--hicache-size")) == math.floor(64 * GIB / 1e9) == 68
    assert "--enable-hierarchical-cache" in sglang[1]
    native = script_commands(files("native")["deploy/s/vllm.sh"].decode())["launch_main"][1]
    assert value_of(native, "--kv-offloading-backend") == "native"
    assert float(value_of(native, "--kv-offloading-size")) == 128.0  # GiB per instance, over its TP ranks
    assert "--kv-transfer-config" not in native


def test_nvme_and_remote_tiers():
    env, argv = script_commands(files("nvme")["deploy/s/vllm.sh"].decode())["launch_main"]
    per_worker = 4 * 3.84e12 / 2 / 4  # 4 drives of 3.84 TB, two tp-4 instances per node, 4 cards each
    assert env["LMCACHE_LOCAL_DISK"].startswith("file:///")
    assert float(env["LMCACHE_MAX_LOCAL_DISK_SIZE"]) == pytest.approx(per_worker / GIB, abs=0.01)
    assert float(env["LMCACHE_MAX_LOCAL_DISK_SIZE"]) <= per_worker / GIB
    assert value_of(argv, "--max-num-seqs") == "64"
    env, argv = script_commands(files("nvme")["deploy/s/sglang.sh"].decode())["launch_main"]
    assert value_of(argv, "--hicache-storage-backend") == "file"
    assert value_of(argv, "--hicache-write-policy") == "write_back"
    assert int(env["SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"]) == int(4 * 3.84e12 / 2 // 4)
    env, _ = script_commands(files("pool")["deploy/s/vllm.sh"].decode())["launch_main"]
    assert env["LMCACHE_REMOTE_URL"].split("://")[0] + "://" in FIXTURE["lmcache"]["remote_url_schemes"]
    out = files("mooncake")
    env, argv = script_commands(out["deploy/s/vllm.sh"].decode())["launch_main"]
    assert json.loads(value_of(argv, "--kv-transfer-config"))["kv_connector"] == "MooncakeStoreConnector"
    client = json.loads(out["deploy/s/mooncake.json"])
    assert client["mode"] == "standalone-store" and client["global_segment_size"] == 0
    env, argv = script_commands(out["deploy/s/sglang.sh"].decode())["launch_main"]
    assert value_of(argv, "--hicache-storage-backend") == "mooncake" and env["MOONCAKE_GLOBAL_SEGMENT_SIZE"] == "0"


def test_layout_and_batching_flags():
    env, argv = script_commands(files("plain")["deploy/s/vllm.sh"].decode())["launch_main"]
    assert value_of(argv, "--tensor-parallel-size") == "8" and value_of(argv, "--max-num-batched-tokens") == "8192"
    assert value_of(argv, "--block-size") == "32" and value_of(argv, "--kv-cache-dtype") == "fp8"
    assert "--no-enable-prefix-caching" in argv and not env
    _, argv = script_commands(files("plain")["deploy/s/sglang.sh"].decode())["launch_main"]
    assert value_of(argv, "--kv-cache-dtype") == "fp8_e4m3" and value_of(argv, "--page-size") == "32"
    assert "--disable-radix-cache" in argv


def test_moe_dp_attention_and_expert_parallel():
    text = HEAD.format(model="qwen3-235b-a22b") + "  s: {node: h20-8x, instance: {tp: 8, ep: 8, dp_attention: 4}}\n"
    out = dict(deployment_files(parse_scenario(text), "s", 1))
    _, vllm = script_commands(out["deploy/s/vllm.sh"].decode())["launch_main"]
    assert value_of(vllm, "--tensor-parallel-size") == "2" and value_of(vllm, "--data-parallel-size") == "4"
    assert "--enable-expert-parallel" in vllm
    _, sglang = script_commands(out["deploy/s/sglang.sh"].decode())["launch_main"]
    assert value_of(sglang, "--tp-size") == "8" and value_of(sglang, "--dp-size") == "4"
    assert value_of(sglang, "--ep-size") == "8" and "--enable-dp-attention" in sglang
    # kvsim's batch limits are vLLM's, per DP rank: vLLM takes them as they are; SGLang counts
    # them over the instance and divides by --dp-size, so it is given dp_attention times them
    assert value_of(vllm, "--max-num-seqs") == "256" and value_of(vllm, "--max-num-batched-tokens") == "2048"
    assert value_of(sglang, "--max-running-requests") == str(4 * 256)
    assert value_of(sglang, "--chunked-prefill-size") == str(4 * 2048)


def test_fields_without_an_engine_setting_are_listed_not_dropped():
    sc = scenario("pd")
    groups, gaps = engine_groups(sc, "s", 1)
    covered = {p for g in groups for s in g.vllm.flags + g.vllm.env + g.sglang.flags + g.sglang.env for p in s.sources}
    covered |= {gap.field for gap in gaps}
    cache = sc.spec.systems["s"].kv_cache
    for name in cache.model_fields_set:  # every kv_cache field the scenario sets is either mapped or a gap
        path = f"systems.s.kv_cache.{name}"
        assert any(c == path or c.startswith(path + ".") for c in covered), path
    fields = {gap.field: gap for gap in gaps}
    assert fields["systems.s.kv_cache.hbm_eviction"].value == "s3fifo"
    assert fields["systems.s.kv_cache.preemption"].value == "swap"
    readme = dict(deployment_files(sc, "s", 1))["deploy/s/README.md"].decode()
    assert "| `systems.s.kv_cache.hbm_eviction` | s3fifo |" in readme


def set_fields(model, path: str):
    """Dotted paths of every field the scenario file set below ``model`` (leaves and sub-models)."""
    for name in sorted(model.model_fields_set):
        value = getattr(model, name)
        here = f"{path}.{name}"
        yield here
        if hasattr(type(value), "model_fields"):
            yield from set_fields(value, here)
        elif isinstance(value, dict):
            for key, item in value.items():
                if hasattr(type(item), "model_fields"):
                    yield from set_fields(item, f"{here}.{key}")


@pytest.mark.parametrize("kind", ALL)
def test_every_set_field_is_mapped_or_listed(kind):
    """A field the scenario sets under the system is a source of some setting, an instance count, or a gap."""
    sc = scenario(kind)
    groups, gaps = engine_groups(sc, "s", 1)
    covered = {p for g in groups for s in g.vllm.flags + g.vllm.env + g.sglang.flags + g.sglang.env for p in s.sources}
    covered |= {p for g in groups for p in g.count_sources} | {gap.field for gap in gaps}
    whole = {gap.field for gap in gaps}  # a gap on a sub-model covers its fields; a setting's source does not
    for path in set_fields(sc.spec.systems["s"], "systems.s"):
        if path.endswith((".instance", ".pools")) or path.count(".") == 3 and ".pools." in path:
            continue  # containers: their own fields are checked
        assert (any(c == path or c.startswith(path + ".") for c in covered)
                or any(path.startswith(w + ".") for w in whole)), path


def test_formats_without_an_engine_equivalent_are_listed():
    text = (HEAD.format(model="qwen3-8b") + "  s: {node: h20-8x, kv_dtype: fp4, weight_dtypes: {feed_forward: fp8}, "
            "instance: {tp: 2}}\n")
    sc = parse_scenario(text)
    groups, gaps = engine_groups(sc, "s", 1)
    fields = {(g.engine, g.field): g.value for g in gaps}
    assert fields[("vllm", "systems.s.kv_dtype")] == "fp4" and fields[("sglang", "systems.s.kv_dtype")] == "fp4"
    assert fields[("all", "systems.s.weight_dtypes")] == "feed_forward: fp8"
    assert "--kv-cache-dtype" not in groups[0].vllm.argv()


def test_bad_input_is_one_clear_message():
    sc = scenario("dram")
    with pytest.raises(DeployError, match="no system 'nope'"):
        deployment_files(sc, "nope", 1)
    with pytest.raises(DeployError, match="units must be a whole number"):
        deployment_files(sc, "s", 0)


def test_units_multiply_the_instances_as_the_planner_scales_probes():
    from kvsim.plan.planner import scaled_scenario
    from kvsim.sim.sizing import size_system
    sc = scenario("pd")
    groups, _ = engine_groups(sc, "s", 3)
    scaled = scaled_scenario(sc, "s", 3, 2.0)
    sizing = size_system(scaled.spec, "s", scaled.catalogs)
    assert sum(g.count for g in groups) == sizing.instances
