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
from kvsim.models.kernels import launches_per_pass
from kvsim.models.step_time import BatchShape
from kvsim.network import topology as topo
from kvsim.serving.cache.prefix_loader import PrefixLoader
from kvsim.sim import check_scenario

DOC, SUFFIX = 8192, 256
KV_PER_TOKEN = 147_456  # Qwen3-8B bf16: 2 * 36 layers * 8 heads * 128 * 2 bytes
H20_NVLINK_Bps = 450e9  # per direction (catalog, [AIC] intra_node_bw)
NIC_Bps = 50e9 * 0.975  # ConnectX-7 400 Gbit/s at its delivered 0.975 of line rate (NicSpec)

SCENARIO = """
name: domains
seed: 2
duration: 12 s
warmup: 0 s
model: qwen3-8b
engine: {{host_overlap: false}}  # (host work added to every step, as the hand arithmetic here counts it)
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: 1 s}}
  block_tokens: {block}
  prefix: {{kind: shared_documents, documents: 1, zipf_s: 1.0, document_tokens: {{kind: fixed, value: {doc}}},
           suffix_tokens: {{kind: fixed, value: {suffix}}}}}
  output_tokens: {{kind: fixed, value: {out}}}
systems:
  s: {{node: {node}, nodes: {nodes}, instances: 2, router: round_robin, kv_cache: {cache}}}
catalog:
  accelerators:
    h20-slowlink: {{base: h20, scale_up_bandwidth: 40 GB/s}}
  nodes:
    h20-1x: {{base: h20-8x, accelerators_per_node: 1, nics: {{count: 1, bandwidth: 400 Gbit/s}}}}
    slowlink-8x: {{base: h20-8x, accelerator: h20-slowlink}}
"""

BEFORE = "load_mode: before, load_policy: always"


def _text(cache: str, node: str = "h20-8x", nodes: int = 1, block: int = 16, doc: int = DOC, out: int = 1) -> str:
    return SCENARIO.format(doc=doc, suffix=SUFFIX, cache=cache, node=node, nodes=nodes, block=block, out=out)


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
    frame, run, sizing = _run("{peer_hbm: copy_in, " + BEFORE + "}")
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
    frame, run, sizing = _run("{peer_hbm: copy_in, " + BEFORE + "}", node="h20-1x", nodes=2, block=DOC)
    assert frame.hit_tokens_other_domain[1] == DOC and frame.computed_tokens[1] == SUFFIX
    nbytes = DOC * KV_PER_TOKEN
    # GPU-Direct RDMA: gpu -> PCIe switch -> NIC -> fabric -> NIC -> PCIe switch -> gpu; the
    # 400 Gbit/s NICs (48.75 GB/s delivered) bind; 4 PCIe hops of 1 us and 3 us NIC to NIC
    copy_s = nbytes / NIC_Bps + 4 * topo.PCIE_HOP_LATENCY_S + topo.RDMA_LATENCY_S
    assert frame.ttft_s[1] == pytest.approx(copy_s + _suffix_prefill_s(sizing), rel=1e-9)
    # the copy lands in the reader's domain: its physical bytes grow by the one block (and by the
    # pages of the suffix, its first chunk, which a load-first admission takes at once), and the
    # counter of bytes crossing domain boundaries by the block
    rid, physical, crossed = next(g for g in grown if g[0] == 1)
    assert physical == pytest.approx(nbytes + SUFFIX * KV_PER_TOKEN) and crossed == pytest.approx(nbytes)
    domains = run.summary["cache"]["domains"]
    assert domains["domains"] == 2 and domains["cross_domain_bytes"] == pytest.approx(nbytes)
    assert domains["hit_tokens_by_source"]["other_domain"] == DOC
    assert set(domains["by_domain"]) == {"su0", "su1"}
    # no scale-up link carried it: the copy left the domain
    assert domains["scale_up"]["utilization_max"] == 0


def test_a_peer_in_the_domain_is_preferred_to_host_dram():
    # request 0 wrote the document through to node 0's DRAM; a copy from instance 0 over NVLink
    # is estimated faster than the PCIe copy from DRAM, so it is taken
    frame, _, _ = _run("{peer_hbm: copy_in, dram: {capacity: 64 GiB}, " + BEFORE + "}")
    assert frame.hit_tokens_peer_hbm[1] == DOC and frame.hit_tokens_dram[1] == 0
    plain, _, _ = _run("{dram: {capacity: 64 GiB}, " + BEFORE + "}")
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
    ("pools: {a: {node: h20-8x, instance: {block_size_tokens: 16}}, b: {node: h20-8x, instance: "
     "{block_size_tokens: 64}}}\n    scale_up_domain_nodes: 2\n    kv_cache: {peer_hbm: read_in_place}",
     "one engine page size", "systems.s.kv_cache.peer_hbm"),
])
def test_bad_domains_and_peer_access_are_refused_with_the_field(refused, system, fragment, field):
    err = refused(system)
    assert fragment in err and field in err and "bad.yaml:" in err


def test_an_instance_spanning_nodes_inside_one_domain_may_copy_from_peers():
    text = _text("{peer_hbm: copy_in}", nodes=4).replace(
        "instances: 2, ", "instance: {tp: 8, pp: 2}, scale_up_domain_nodes: 2, ")
    sizing = check_scenario(kvsim.parse_scenario(text, "d.yaml"))[(0, "s")]
    assert sizing.pools[0].instances == 2


# -- read in place: byte sharing inside a domain ------------------------------------------------

def test_read_in_place_hit_moves_no_bytes_and_the_step_pays_the_remote_read():
    frame, run, sizing = _run("{peer_hbm: read_in_place}")
    # request 1 (instance 1) reads the document where instance 0 holds it: no copy, no pages
    assert frame.hit_tokens_peer_hbm[1] == DOC and frame.loaded_bytes[1] == 0 and frame.computed_tokens[1] == SUFFIX
    # its suffix prefill reads the 8192 remote tokens over NVLink at 450 GB/s x 0.8 (3.36 ms),
    # in parallel with the local memory phase; the compute of 256 tokens on 8192 takes longer
    step = sizing.pools[0].step_model()
    shape = BatchShape(prefill_tokens=SUFFIX, prefill_seqs=1, prefill_pairs=BatchShape.prefill_chunk_pairs(SUFFIX, DOC),
                       prefill_context_tokens=DOC, sampled_seqs=1, remote_kv_tokens=DOC)
    parts = step.breakdown(shape)
    assert parts.remote_s == pytest.approx(DOC * KV_PER_TOKEN / (H20_NVLINK_Bps * 0.8), rel=1e-12)
    assert parts.remote_s == pytest.approx(3.3554e-3, rel=1e-4) and parts.compute_s > parts.remote_s
    assert frame.ttft_s[1] == pytest.approx(_suffix_prefill_s(sizing), rel=1e-9)
    # one physical copy in the domain, read by instance 1's and later by every request
    domains = run.summary["cache"]["domains"]
    assert domains["hit_tokens_by_source"]["peer_hbm"] > DOC and domains["scale_up"]["read_in_place_bytes"] > 0


def test_a_decode_step_reading_in_place_takes_the_remote_bytes_over_the_scale_up_link():
    # a 40 GB/s scale-up link makes the remote read the longest part of a decode step
    frame, _, sizing = _run("{peer_hbm: read_in_place}", node="slowlink-8x", out=6)
    assert frame.hit_tokens_peer_hbm[1] == DOC and frame.hit_tokens_hbm[2] == DOC
    engine = sizing.pools[0].engine
    remote_s = DOC * KV_PER_TOKEN / (40e9 * 0.8)  # 37.7 ms: 8192 tokens x 147,456 B at 32 GB/s
    assert remote_s == pytest.approx(37.749e-3, rel=1e-4)
    # one sequence alone: each decode step is its remote read, the kernel launches and the
    # engine's step overhead
    kernels_s = sizing.pools[0].step_model().breakdown(BatchShape(decode_seqs=1, sampled_seqs=1)).kernels_s
    assert kernels_s == pytest.approx(engine.kernel_s * launches_per_pass(sizing.model))
    assert frame.tpot_s[1] == pytest.approx(remote_s + kernels_s + engine.step_overhead_s(1, 1), rel=1e-9)
    # the same request on the instance that holds the document reads it at HBM speed
    assert frame.tpot_s[2] < remote_s / 3


def _readers(pool) -> list[int]:
    """The reader count of every block of a domain's store that has readers (per block or as
    extents)."""
    if hasattr(pool, "home"):
        return [pool.store.readers(block) for block in pool.home if pool.store.readers(block)]
    return [e.readers for e in pool.store.extents() for _ in range(e.start, e.end) if e.readers]


def _homed_blocks(pool, cache) -> int:
    """Blocks of a domain homed in ``cache``'s HBM (per block or as extents)."""
    if hasattr(pool, "resident"):
        return len(pool.resident[id(cache)])
    return sum(e.count for e in pool.homes.extents(cache))


@pytest.fixture(params=[True, False], ids=["extents", "per-block"])
def kv_extents(request, monkeypatch):
    """Domains kept as extents (the default for these workloads) or per block (the reference)."""
    from kvsim.sim import build

    monkeypatch.setattr(build, "KV_EXTENTS", request.param)
    return request.param


def test_a_block_read_by_k_instances_is_held_once_and_counted_k_times(monkeypatch, kv_extents):
    """Three clients start together on three instances: each computes the document, the first
    to finish files it, the other two give their copies back and read it in place."""
    import kvsim.sim.run as run_module

    seen = {}
    real_build = run_module.build_system

    def build(env, *args, **kwargs):
        system = real_build(env, *args, **kwargs)

        def look():
            yield env.timeout(2.0)  # the prompts are done (~1.6 s); 200 tokens are decoding
            pool = system.cache.domain_pools["su0"]
            assert system.cache.extents == kv_extents
            seen["readers"] = _readers(pool)
            seen["levels"] = system.domain_levels.measure("su0")
            seen["running"] = sum(len(inst.scheduler.running) for inst in system.instances)
        env.process(look())
        return system

    monkeypatch.setattr(run_module, "build_system", build)
    text = _text("{peer_hbm: read_in_place}", out=200).replace("clients: 1", "clients: 3").replace(
        "instances: 2", "instances: 3").replace("duration: 12 s", "duration: 3 s")
    frame = kvsim.run(kvsim.parse_scenario(text, "d.yaml")).runs[0].records.to_frame()
    assert seen["running"] == 3 and sorted(frame.instance[:3]) == [0, 1, 2]
    doc_blocks = DOC // 16
    assert seen["readers"].count(3) == doc_blocks and max(seen["readers"]) == 3
    physical, logical = seen["levels"]
    assert logical - physical == pytest.approx((3 - 1) * doc_blocks * 16 * KV_PER_TOKEN)


def _check_pages(system) -> None:
    """Every page of every instance is a running sequence's own or a cached block's, never both;
    no scheduled sequence writes below its shared prefix."""
    for inst in system.instances:
        inst.settle()  # an instance in a coalesced decode run: its sequences' counts as of now
        cache = inst.hook
        pool = cache.domain_pool
        ppb = cache.geometry.pages_per_block
        held = inst.scheduler.running + list(inst.scheduler.loading.values())
        own = sum(seq.kv_blocks for seq in held)
        assert inst.pool.used_blocks == own + ppb * _homed_blocks(pool, cache)
        for seq in held:
            assert seq.shared_tokens % cache.geometry.block_tokens == 0 and seq.kv_tokens >= seq.shared_tokens
            assert seq.remote_tokens <= seq.shared_tokens


PRESSURE = """
name: pressure
seed: 3
duration: 6 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 12/s}
  prefix: {kind: shared_documents, documents: 100, zipf_s: 1.0, document_tokens: {kind: lognormal, median: 6000,
           sigma: 0.5, max: 8000}, suffix_tokens: {kind: fixed, value: 300}}
  output_tokens: {kind: lognormal, median: 200, sigma: 0.5, max: 1000}
systems:
  s: {node: h20-8x, kv_cache: {peer_hbm: read_in_place}, instance: {memory_utilization: 0.2}}
"""


def test_copy_on_write_no_page_is_both_a_sequences_and_shared(monkeypatch, built_systems, kv_extents):
    from kvsim.serving.scheduler import BatchScheduler

    real_schedule = BatchScheduler.schedule
    checks = []

    def schedule(scheduler, now):
        batch = real_schedule(scheduler, now)
        if batch is not None:
            for seq, chunk in batch.prefills + [(seq, 1) for seq in batch.decodes]:
                # the tokens it writes now go to its own pages, past the shared prefix
                page = scheduler.pool.block_size_tokens
                assert seq.kv_tokens >= seq.shared_tokens
                assert seq.kv_blocks * page >= seq.kv_tokens + chunk - seq.shared_tokens
            _check_pages(built_systems[-1])
            checks.append(len(batch.prefills) + len(batch.decodes))
        return batch

    monkeypatch.setattr(BatchScheduler, "schedule", schedule)
    monkeypatch.setenv("KVSIM_BACKEND", "python")  # the patch is the reference's scheduler
    run = kvsim.run(kvsim.parse_scenario(PRESSURE, "p.yaml")).runs[0]
    pool = built_systems[-1].cache.domain_pools["su0"]
    # the run was under pressure: blocks moved between cards, were evicted, and requests shared
    assert len(checks) > 1000 and pool.moves > 0 and pool.store.evictions > 0
    assert run.summary["cache"]["domains"]["moved_bytes"] > 0
    assert run.records.column("preemptions").sum() > 0
    domains = run.summary["cache"]["domains"]
    assert domains["dedup_ratio"] > 1 and domains["hit_tokens_by_source"]["peer_hbm"] > 0


def test_read_in_place_runs_are_deterministic():
    text = PRESSURE.replace("duration: 6 s", "duration: 4 s")
    digests = {kvsim.run(kvsim.parse_scenario(text, "p.yaml")).records_digest() for _ in range(2)}
    assert len(digests) == 1


def test_read_in_place_hit_in_another_domain_is_copied_into_the_readers_domain():
    frame, run, _ = _run("{peer_hbm: read_in_place, " + BEFORE + "}", node="h20-1x", nodes=2, block=DOC)
    assert frame.hit_tokens_other_domain[1] == DOC and frame.loaded_bytes[1] == pytest.approx(DOC * KV_PER_TOKEN)
    domains = run.summary["cache"]["domains"]
    assert domains["cross_domain_bytes"] == pytest.approx(DOC * KV_PER_TOKEN)
    # afterwards each domain holds its own copy: both instances hit their own HBM
    assert frame.hit_tokens_hbm[2] == DOC and frame.hit_tokens_hbm[3] == DOC


@pytest.mark.parametrize("system, fragment", [
    ("node: l20-8x\n    kv_cache: {peer_hbm: read_in_place}", "has none (PCIe"),
    ("node: h20-8x\n    nodes: 2\n    scale_up_domain_nodes: 2\n    instance: {tp: 8, pp: 2}\n"
     "    kv_cache: {peer_hbm: read_in_place}", "plain tensor-parallel instances inside one node"),
    ("pools: {h: {node: h20-8x, roles: {prefill: 4, decode: 4}}}\n    controller: {kind: threshold, "
     "signal: prefill_queue, low: 2, high: 5}\n    kv_cache: {peer_hbm: read_in_place}", "switches roles"),
])
def test_read_in_place_where_it_is_not_modelled_is_refused(refused, system, fragment):
    err = refused(system)
    assert fragment in err and "systems.s.kv_cache.peer_hbm" in err and "bad.yaml:" in err


def test_a_domain_that_held_nothing_has_no_dedup_ratio_and_its_summary_writes():
    """A domain whose pools held no KV in the window states no ratio (not NaN, which JSON refuses:
    ``kvsim run`` wrote no summary for such a run)."""
    import json

    from kvsim.kv.block_pool import BlockPool
    from kvsim.metrics.domain_summary import DomainLevels

    levels = DomainLevels(0.0, 10.0, {"idle": ([(BlockPool(8, 16), 4096.0)], [])})
    for t in (0.0, 5.0, 10.0):
        levels.sample(t)
    summary = levels.summary("idle")
    assert summary["physical_bytes_mean"] == 0.0 and summary["dedup_ratio"] is None
    json.dumps(summary, allow_nan=False)
