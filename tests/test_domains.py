"""Addressing domains (issue 8, part 1): peer HBM hits copied in (value reuse), hits in another
domain copied over the message-passing path, the accounting of logical vs physical bytes, and
the bad inputs refused before a run.

The set-up is the offload tests' (tests/test_offload.py): one client sends the same 8192-token
document with a fresh 256-token suffix, one request at a time, to two instances in turn (round
robin); request 0 computes everything on instance 0, request 1 is the first on instance 1.
"""

from __future__ import annotations

import pytest

import kvsim
from kvsim.hardware import accelerator_catalog
from kvsim.models.step_time import BatchShape
from kvsim.network import topology as topo
from kvsim.serving.cache.prefix_loader import PrefixLoader
from kvsim.sim import check_scenario

DOC, SUFFIX = 8192, 256
KV_PER_TOKEN = 147_456  # Qwen3-8B bf16: 2 * 36 layers * 8 heads * 128 * 2 bytes
H20_NVLINK_Bps = 450e9  # per direction (catalog, [AIC] intra_node_bw)
NIC_Bps = 50e9          # ConnectX-7 400 Gbit/s

SCENARIO = """
name: domains
seed: 2
duration: 12 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: 1 s}}
  block_tokens: {block}
  prefix: {{kind: shared_documents, documents: 1, zipf_s: 1.0, document_tokens: {{kind: fixed, value: {doc}}},
           suffix_tokens: {{kind: fixed, value: {suffix}}}}}
  output_tokens: {{kind: fixed, value: 1}}
systems:
  s: {{node: {node}, nodes: {nodes}, instances: 2, router: round_robin, kv_cache: {cache}}}
catalog:
  nodes:
    h20-1x: {{base: h20-8x, accelerators_per_node: 1, nics: {{count: 1, bandwidth: 400 Gbit/s}}}}
"""

BEFORE = "load_mode: before, load_policy: always"


def _text(cache: str, node: str = "h20-8x", nodes: int = 1, block: int = 16, doc: int = DOC) -> str:
    return SCENARIO.format(doc=doc, suffix=SUFFIX, cache=cache, node=node, nodes=nodes, block=block)


def _run(cache: str, **kwargs):
    scenario = kvsim.parse_scenario(_text(cache, **kwargs), "d.yaml")
    run = kvsim.run(scenario).runs[0]
    return run.records.to_frame(), run, check_scenario(scenario)[(0, "s")]


def _suffix_prefill_s(sizing) -> float:
    """TTFT of a request whose document is in its HBM: the request path plus one prefill
    iteration of the suffix on the document (as tests/test_offload.py)."""
    step = sizing.pools[0].step_model()
    engine = sizing.pools[0].engine
    path_s = engine.api_s + engine.tokenize_s_per_token * (DOC + SUFFIX) + engine.output_s
    return path_s + step.iteration_time_s(BatchShape(
        prefill_tokens=SUFFIX, prefill_seqs=1, prefill_pairs=BatchShape.prefill_chunk_pairs(SUFFIX, DOC),
        prefill_context_tokens=DOC, sampled_seqs=1))


def test_without_peer_access_a_peers_hbm_is_not_a_hit():
    frame, run, _ = _run("{}")
    assert frame.hit_tokens_hbm[1] == 0 and frame.computed_tokens[1] == DOC + SUFFIX
    assert frame.hit_tokens_peer_hbm.sum() == 0 and frame.hit_tokens_other_domain.sum() == 0
    assert run.summary["cache"]["domains"]["peer_hbm"] == "none"


def test_copy_in_from_a_peer_in_the_domain_takes_the_block_bytes_over_nvlink():
    frame, run, sizing = _run("{peer_hbm: copy_in, %s}" % BEFORE)
    # request 1 is the first on instance 1: its document is in instance 0's HBM, on the same
    # NVLink server, so it is copied card to card over the scale-up links
    assert frame.instance[1] == 1 and frame.hit_tokens_peer_hbm[1] == DOC and frame.computed_tokens[1] == SUFFIX
    nbytes = DOC * KV_PER_TOKEN  # 1.208 GB
    assert frame.loaded_bytes[1] == pytest.approx(nbytes)
    # gpu0 -> NVSwitch -> gpu1: 450 GB/s per direction, 3 us (half on each link): 2.687 ms
    h20 = accelerator_catalog()["h20"]
    assert h20.scale_up_bandwidth == H20_NVLINK_Bps and h20.scale_up_latency_s is None
    copy_s = nbytes / H20_NVLINK_Bps + topo.SCALE_UP_LATENCY_S
    assert copy_s == pytest.approx(2.6874e-3, rel=1e-4)
    assert frame.ttft_s[1] == pytest.approx(copy_s + _suffix_prefill_s(sizing), rel=1e-9)
    # afterwards each instance holds its own copy: later requests hit their own HBM
    assert frame.hit_tokens_hbm[2] == DOC and frame.hit_tokens_hbm[3] == DOC
    domains = run.summary["cache"]["domains"]
    assert domains["hit_tokens_by_source"]["peer_hbm"] == DOC and domains["cross_domain_bytes"] == 0
    # the copy crossed gpu0's link to the switch and the switch's link to gpu1, nothing else
    links = {row["link"]: row["bytes"] for row in run.links}
    assert links["node0/gpu0->su0"] == pytest.approx(nbytes) and links["su0->node0/gpu1"] == pytest.approx(nbytes)
    assert domains["scale_up"]["links"] == 16 and domains["scale_up"]["utilization_max"] > 0
    # value reuse: the copy duplicates bytes, so nothing is shared across instances
    assert domains["dedup_ratio"] == pytest.approx(1.0)


def test_a_hit_in_another_domain_is_copied_over_the_nics(monkeypatch, built_systems):
    # two one-card servers, each its own scale-up domain; one cache block is the whole document
    grown = []
    real_admit = PrefixLoader.admit

    def admit(loader, seq):
        system = built_systems[-1]
        levels, cache = system.domain_levels, loader.cache
        before = (levels.measure(cache.domain)[0], system.cache.cross_domain_bytes)
        verdict = real_admit(loader, seq)
        grown.append((seq.rid, levels.measure(cache.domain)[0] - before[0],
                      system.cache.cross_domain_bytes - before[1]))
        return verdict

    monkeypatch.setattr(PrefixLoader, "admit", admit)
    frame, run, sizing = _run("{peer_hbm: copy_in, %s}" % BEFORE, node="h20-1x", nodes=2, block=DOC)
    assert frame.hit_tokens_other_domain[1] == DOC and frame.computed_tokens[1] == SUFFIX
    nbytes = DOC * KV_PER_TOKEN
    # GPU-Direct RDMA: gpu -> PCIe switch -> NIC -> fabric -> NIC -> PCIe switch -> gpu; the
    # 400 Gbit/s NICs (50 GB/s) bind; 4 PCIe hops of 1 us and 3 us NIC to NIC
    copy_s = nbytes / NIC_Bps + 4 * topo.PCIE_HOP_LATENCY_S + topo.RDMA_LATENCY_S
    assert frame.ttft_s[1] == pytest.approx(copy_s + _suffix_prefill_s(sizing), rel=1e-9)
    # the copy lands in the reader's domain: its physical bytes grow by the one block, and so
    # does the counter of bytes crossing domain boundaries
    rid, physical, crossed = next(g for g in grown if g[0] == 1)
    assert physical == pytest.approx(nbytes) and crossed == pytest.approx(nbytes)
    domains = run.summary["cache"]["domains"]
    assert domains["domains"] == 2 and domains["cross_domain_bytes"] == pytest.approx(nbytes)
    assert domains["hit_tokens_by_source"]["other_domain"] == DOC
    assert set(domains["by_domain"]) == {"su0", "su1"}
    # no scale-up link carried it: the copy left the domain
    assert domains["scale_up"]["utilization_max"] == 0


def test_a_peer_in_the_domain_is_preferred_to_host_dram():
    # request 0 wrote the document through to node 0's DRAM; a copy from instance 0 over NVLink
    # is estimated faster than the PCIe copy from DRAM, so it is taken
    frame, _, _ = _run("{peer_hbm: copy_in, dram: {capacity: 64 GiB}, %s}" % BEFORE)
    assert frame.hit_tokens_peer_hbm[1] == DOC and frame.hit_tokens_dram[1] == 0
    plain, _, _ = _run("{dram: {capacity: 64 GiB}, %s}" % BEFORE)
    assert plain.hit_tokens_dram[1] == DOC and frame.ttft_s[1] < plain.ttft_s[1]


def test_sources_rank_by_estimated_load_time(built_systems):
    text = _text("{peer_hbm: copy_in, dram: {capacity: 64 GiB}, nvme: {}, remote: {pool_node: nvme-storage-16x}}",
                 nodes=2).replace("instances: 2, ", "")
    kvsim.run(kvsim.parse_scenario(text.replace("duration: 12 s", "duration: 1 s"), "d.yaml"))
    cache = built_systems[0].cache
    reader = next(c for c in cache.access.members["su0"] if c.index == 0)
    peer = next(c for c in cache.access.members["su0"] if c.index == 1)
    other = next(c for c in cache.access.members["su1"])
    rank = cache.access.rank(reader)
    order = [reader.hbm, peer.hbm, cache.dram["node0"], other.hbm, cache.nvme["node0"], cache.remote[0]]
    times = [rank(store) for store in order]
    # own HBM < peer HBM (NVLink) < host DRAM (PCIe copy engine) < another domain (RDMA) < the
    # storage tiers; between local NVMe (one 13 GB/s drive) and the 16-drive pool the estimate
    # decides (here the pool: 180 vs 263 us for a 2.4 MB block)
    assert times[0] == 0 and times[:4] == sorted(times[:4]) and len(set(times)) == len(times)
    assert max(times[:4]) < min(times[4:])
    # a peer's block: 16 tokens x 147,456 B over NVLink plus its latency
    assert times[1] == pytest.approx(16 * KV_PER_TOKEN / H20_NVLINK_Bps + topo.SCALE_UP_LATENCY_S, rel=1e-12)


def test_copy_in_runs_are_deterministic():
    text = _text("{peer_hbm: copy_in, dram: {capacity: 64 GiB}}", nodes=2).replace(
        "instances: 2, ", "").replace("clients: 1", "clients: 12")
    digests = {kvsim.run(kvsim.parse_scenario(text, "d.yaml")).records_digest() for _ in range(2)}
    assert len(digests) == 1


@pytest.mark.parametrize("system, fragment, field", [
    ("node: h20-8x\n    nodes: 2\n    scale_up_domain_nodes: 3", "larger than the 2 node(s)",
     "systems.s.scale_up_domain_nodes"),
    ("node: h20-8x\n    nodes: 3\n    scale_up_domain_nodes: 2", "does not divide the 3 nodes",
     "systems.s.scale_up_domain_nodes"),
    ("node: l20-8x\n    nodes: 2\n    scale_up_domain_nodes: 2", "no card of this system has a scale-up link",
     "systems.s.scale_up_domain_nodes"),
    ("node: h20-8x\n    nodes: 2\n    instance: {tp: 8, pp: 2}\n    kv_cache: {peer_hbm: copy_in}",
     "spans two scale-up domains", "systems.s.kv_cache.peer_hbm"),
    ("pools: {a: {node: h20-8x, instance: {tp: 1}}, b: {node: h20-8x, instance: {tp: 2}}}\n"
     "    kv_cache: {peer_hbm: copy_in}", "same cards per instance", "systems.s.kv_cache.peer_hbm"),
    ("node: h20-8x\n    kv_cache: {peer_hbm: borrow}", "copy_in", "systems.s.kv_cache.peer_hbm"),
])
def test_bad_domains_and_peer_access_are_refused_with_the_field(refused, system, fragment, field):
    err = refused(system)
    assert fragment in err and field in err and "bad.yaml:" in err


def test_an_instance_spanning_nodes_inside_one_domain_may_copy_from_peers():
    text = _text("{peer_hbm: copy_in}", nodes=4).replace(
        "instances: 2, ", "instance: {tp: 8, pp: 2}, scale_up_domain_nodes: 2, ")
    sizing = check_scenario(kvsim.parse_scenario(text, "d.yaml"))[(0, "s")]
    assert sizing.pools[0].instances == 2
