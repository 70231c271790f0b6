"""Connector I/O model and load-once fan-out (kvsim/serving/cache/connector.py): each new cost
against a hand calculation, then end to end.

The closed forms: an I/O stream of ``n`` I/Os of ``B`` bytes in all takes
``max(L + max(B / min(bandwidths), n c / k), ceil(n / q) L)``; a pinned buffer of ``P`` bytes lets
a bounce move at most ``P / L`` bytes/s; fan-out puts ``shards`` copies on the NIC and
``tp - shards`` on the scale-up links where per-rank loading puts ``tp`` on the NIC.
"""

from __future__ import annotations

import math

import pytest
import simpy

import kvsim
from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.models import model_catalog
from kvsim.network import FlowNetwork, IoRequest, StorageIO, Transfers, build_topology, network_capacities
from kvsim.network.storage_io import HostPath, pinned_resource, staging_resource
from kvsim.serving.cache.connector import (
    PRESETS,
    ConnectorSpec,
    fanout_plan,
    io_size_bytes,
    object_bytes,
    resolve_fanout,
    stream_time_s,
)
from kvsim.serving.cache.spec import KVCacheSpec
from kvsim.yaml_io import SpecError

KIB, MIB = 2**10, 2**20
ACC = accelerator_catalog()["h20"]
NODE = node_catalog()["h20-8x"]
POOL = pool_node_catalog()["nvme-storage-16x"]


def cluster():
    return build_topology([("n0", NODE, ACC)], [("pool", POOL)])


def run(topo, host_path, moves):
    """Start ``(paths, nbytes_each, io)`` transfers together under a connector's ``host_path``."""
    env = simpy.Environment()
    storage = StorageIO(topo, host_path)
    transfers = Transfers(env, topo, FlowNetwork(env, network_capacities(topo, storage)), storage)
    events = [transfers.move(paths, nbytes, "test", io) for paths, nbytes, io in moves]
    env.run()
    return [event.value for event in events], transfers


def min_bandwidth(topo, path):
    capacity = topo.capacity_Bps()
    # a link crossed twice (host DRAM channels on the bounce path) gives each crossing half
    return min(capacity[edge] / path.count(edge) for edge in path)


# -- object and I/O sizes --------------------------------------------------------------------------

def test_preset_object_and_io_sizes_for_qwen3_235b_at_tp8():
    # Qwen3-235B-A22B in FP8 at TP 8: 4 KV heads over 8 ranks, one head per rank (replicated 2x);
    # per rank, per token, per layer 2 (K, V) x 128 x 1 B = 256 B; 94 layers.
    model = model_catalog()["qwen3-235b-a22b"]
    assert (model.num_layers, model.num_kv_heads, model.head_dim) == (94, 4, 128)
    per_token_card = model.kv_bytes_per_token("fp8", tp=8)
    assert per_token_card == 2 * 94 * 1 * 128 * 1
    block = 256 * per_token_card  # one 256-token cache block on one card: 6,160,384 B
    lmcache = ConnectorSpec(name="lmcache")
    # LMCache: 256-token chunk of all layers (6.16 MB), sliced by Mooncake TE into 64 KiB I/Os
    assert object_bytes(lmcache, block, 256, 94) == block
    assert io_size_bytes(lmcache, block, 256, 94) == 64 * KIB
    # vLLM native: a 16-token block of one layer: 16 x 256 B = 4 KiB per copy
    vllm = ConnectorSpec(name="vllm")
    assert io_size_bytes(vllm, block, 256, 94) == pytest.approx(16 * 256)
    # custom: one object per block, no slicing (kvsim's behaviour before connectors)
    assert io_size_bytes(ConnectorSpec(), block, 256, 94) == block
    # a layer-wise LMCache chunk is 256 x 256 B = 64 KiB per layer
    layerwise = ConnectorSpec(name="lmcache", objects="per_layer", max_io_bytes=None)
    assert io_size_bytes(layerwise, block, 256, 94) == pytest.approx(64 * KIB)


def test_presets_fill_only_what_is_not_given():
    spec = ConnectorSpec(name="lmcache", chunk_tokens=512)
    assert spec.chunk_tokens == 512 and spec.copy_threads == 0 and spec.queue_depth == 512
    assert spec.max_io_bytes == 64 * KIB and spec.pinned_buffer == 2**30
    for name, preset in PRESETS.items():
        ConnectorSpec.model_validate({"name": name})  # every preset is a valid spec
        assert set(preset) <= set(ConnectorSpec.model_fields)
    # a named connector sets the path and the pipelining unless they are given
    cache = KVCacheSpec.model_validate({"connector": {"name": "lmcache"}})
    assert cache.gpu_direct is False and cache.load_mode == "before"
    cache = KVCacheSpec.model_validate({"connector": {"name": "lmcache"}, "gpu_direct": True, "load_mode": "overlap"})
    assert cache.gpu_direct is True and cache.load_mode == "overlap"
    assert KVCacheSpec.model_validate({"connector": {"name": "mooncake"}}).load_mode == "overlap"
    assert KVCacheSpec().gpu_direct is True and KVCacheSpec().load_mode == "overlap"  # no connector: as before


# -- I/O stream and host path ----------------------------------------------------------------------

def test_io_stream_time_with_the_transport_queue_depth():
    # GPU-Direct read of 64 MiB from the pool in 64 KiB I/Os: n = 1024. With 4 outstanding
    # (the connector's depth, below the pool's 32) the stream is 256 round trips of L; with the
    # Mooncake TE's 512 it is one latency plus the bytes at the slowest link.
    topo = cluster()
    path = topo.load_path("pool/media", "n0/gpu0", True)
    io = IoRequest("pool/media", None, 64 * KIB)
    nbytes, ios = 64 * MIB, 1024
    latency = topo.path_latency_s(path)
    bw = min_bandwidth(topo, path)
    [shallow], _ = run(topo, HostPath(queue_depth=4), [([path], nbytes, io)])
    assert shallow == pytest.approx(256 * latency, rel=1e-9)
    assert 256 * latency > latency + nbytes / bw  # (the depth binds)
    assert stream_time_s(ios, nbytes, [bw], latency, 4) == pytest.approx(shallow, rel=1e-12)
    [deep], _ = run(topo, HostPath(queue_depth=512), [([path], nbytes, io)])
    assert deep == pytest.approx(latency + nbytes / bw, rel=1e-9)
    assert stream_time_s(ios, nbytes, [bw], latency, 512) == pytest.approx(deep, rel=1e-12)


def test_bounce_staging_with_k_threads_and_batching():
    # Host bounce with no copy threads (the NIC lands data in pinned memory, a GPU kernel moves
    # it on: LMCache, HiCache), 2 I/O threads (Mooncake TE workers), 10 us of CPU per 64 KiB I/O:
    # the CPU stages 2 x 64 KiB / 10 us = 13.1 GB/s, below every link. GPU-Direct skips it.
    topo = cluster()
    nbytes, size, c, k = 64 * MIB, 64 * KIB, 10e-6, 2
    bounce = topo.load_path("pool/media", "n0/gpu0", False)
    direct = topo.load_path("pool/media", "n0/gpu0", True)
    host = HostPath(copy_threads=0, io_threads=k, per_io_cpu_s=c, queue_depth=512)
    [t_bounce], transfers = run(topo, host, [([bounce], nbytes, IoRequest("pool/media", None, size, host="n0"))])
    [t_direct], _ = run(topo, host, [([direct], nbytes, IoRequest("pool/media", None, size))])
    ios = nbytes // size
    stage_Bps = k * size / c
    assert stage_Bps < min_bandwidth(topo, bounce)
    latency = topo.path_latency_s(bounce) + c
    assert t_bounce == pytest.approx(latency + nbytes / stage_Bps, rel=1e-9)
    assert stream_time_s(ios, nbytes, [min_bandwidth(topo, bounce)], latency, 512, c, k) == pytest.approx(t_bounce)
    assert transfers.network.bytes_moved(staging_resource("n0")) == pytest.approx(ios * c, rel=1e-9)
    assert t_direct == pytest.approx(topo.path_latency_s(direct) + nbytes / min_bandwidth(topo, direct), rel=1e-9)
    assert t_bounce > 1.5 * t_direct
    # batching 8 I/Os per call pays c once per call: 105 GB/s of staging, so the links bind and
    # the bounce is only its path (DRAM channels, copy engine) and c / 8 of latency behind
    batched = HostPath(copy_threads=0, io_threads=k, per_io_cpu_s=c, batch_ios=8, queue_depth=512)
    [t_batched], _ = run(topo, batched, [([bounce], nbytes, IoRequest("pool/media", None, size, host="n0"))])
    # -- and the pool's own queue depth (32, below the transport's 512) now binds: 32 round trips
    assert k * size / (c / 8) > min_bandwidth(topo, bounce)
    latency_batched = topo.path_latency_s(bounce) + c / 8
    assert POOL.queue_depth == 32
    assert t_batched == pytest.approx(32 * latency_batched, rel=1e-9)
    assert t_batched == pytest.approx(
        stream_time_s(ios, nbytes, [min_bandwidth(topo, bounce)], latency_batched, 32, c / 8, k), rel=1e-9)
    assert t_batched < t_bounce
    # three copy threads at the node's 10 GB/s memcpy: 3 / (1/10e9 + c / size) bytes/s
    copying = HostPath(copy_threads=3, io_threads=1, per_io_cpu_s=c, queue_depth=512)
    [t_copy], _ = run(topo, copying, [([bounce], nbytes, IoRequest("pool/media", None, size, host="n0"))])
    rate = 3 / (1 / NODE.host_staging.memcpy_bandwidth + c / size)
    assert t_copy == pytest.approx(latency + nbytes / rate, rel=1e-9)


def test_pinned_buffer_bounds_the_bounce_at_buffer_over_latency():
    # A 256 KiB pinned buffer; no CPU cost per I/O. A staged byte holds its room for the flow's
    # per-I/O latency L, so one flow moves at most P / L; two cards' flows share it.
    topo = cluster()
    P = 256 * KIB
    host = HostPath(copy_threads=0, per_io_cpu_s=0.0, pinned_buffer_bytes=P, queue_depth=512)
    paths = [topo.load_path("pool/media", f"n0/gpu{i}", False) for i in (0, 1)]
    nbytes = 16 * MIB
    latency = topo.path_latency_s(paths[0])
    assert P / latency < min_bandwidth(topo, paths[0])
    [t_one], _ = run(topo, host, [([paths[0]], nbytes, IoRequest("pool/media", None, 64 * KIB, host="n0"))])
    assert t_one == pytest.approx(latency + nbytes / (P / latency), rel=1e-9)
    _, transfers = run(topo, host, [(paths, nbytes, IoRequest("pool/media", None, 64 * KIB, host="n0"))])
    t_two = transfers.env.now  # both cards' flows have landed
    assert t_two == pytest.approx(latency + 2 * nbytes / (P / latency), rel=1e-6)
    # the buffer held 2 x 16 MiB x L byte-seconds of room
    assert transfers.network.bytes_moved(pinned_resource("n0")) == pytest.approx(2 * nbytes * latency, rel=1e-9)
    # GPU-Direct needs no buffer
    direct = [topo.load_path("pool/media", "n0/gpu0", True)]
    [t_direct], _ = run(topo, host, [(direct, nbytes, IoRequest("pool/media", None, 64 * KIB))])
    assert t_direct < t_one / 3


# -- fan-out ---------------------------------------------------------------------------------------

def test_fanout_bytes_on_the_nic_and_the_scale_up_links():
    models = model_catalog()
    r1, qwen = models["deepseek-r1"], models["qwen3-235b-a22b"]
    # DeepSeek-R1 MLA, FP8: the latent 61 x 576 x 1 B = 35,136 B/token, held whole by every rank
    latent = r1.kv_bytes_per_token("fp8", tp=8)
    assert latent == 61 * 576 == r1.kv_bytes_per_token_total("fp8")
    per_rank, once = fanout_plan(8, 1, "per_rank", load=True), fanout_plan(8, 1, "once_per_node", load=True)
    assert len(per_rank.readers) * latent == 281_088 and not per_rank.hops  # 8x the latent on the NIC
    assert once.readers == (0,) and len(once.readers) * latent == 35_136
    assert once.hops == tuple((i, i + 1) for i in range(7))  # a ring broadcast: 7 x the latent on NVLink
    # Qwen3-235B at TP 8: 4 KV heads, each on two consecutive ranks; per card one head (1/4 of the KV)
    total, card = qwen.kv_bytes_per_token_total("fp8"), qwen.kv_bytes_per_token("fp8", tp=8)
    assert total == 4 * card
    per_rank, once = fanout_plan(8, 4, "per_rank", load=True), fanout_plan(8, 4, "once_per_node", load=True)
    assert len(per_rank.readers) * card == 2 * total  # replicated heads read twice
    assert once.readers == (0, 2, 4, 6) and len(once.readers) * card == total
    assert once.hops == ((0, 1), (2, 3), (4, 5), (6, 7)) and len(once.hops) * card == total
    # writes: once per node writes each distinct shard once, with no hop
    assert fanout_plan(8, 4, "once_per_node", load=False) == type(once)((0, 2, 4, 6), ())
    # nothing replicated (8 heads over 8 ranks) or heads that cannot be grouped: every rank
    assert fanout_plan(8, 8, "once_per_node", load=True).readers == tuple(range(8))
    assert fanout_plan(8, 3, "once_per_node", load=True).readers == tuple(range(8))
    # defaults: the connector's rule for the model's kind; without a connector, kvsim's own
    lmcache, mooncake = ConnectorSpec(name="lmcache"), ConnectorSpec(name="mooncake")
    assert resolve_fanout(None, lmcache, mla=True, replicated=False) == ("once_per_node", "once_per_node")
    assert resolve_fanout(None, lmcache, mla=False, replicated=True) == ("per_rank", "per_rank")
    assert resolve_fanout(None, mooncake, mla=True, replicated=False) == ("per_rank", "once_per_node")
    assert resolve_fanout(None, None, mla=True, replicated=False) == ("per_rank", "legacy")
    assert resolve_fanout("once_per_node", None, mla=False, replicated=True) == ("once_per_node", "once_per_node")


R1_POOL = """
name: fanout
seed: 3
duration: 30 s
warmup: 0 s
model: {model}
dtype: fp8
workload:
  arrival: {{kind: closed_loop, clients: 4}}
  prefix: {{kind: shared_documents, documents: 20, zipf_s: 0.9, document_tokens: {{kind: fixed, value: 7680}},
           suffix_tokens: {{kind: fixed, value: 512}}}}
  output_tokens: {{kind: fixed, value: 1}}
  block_tokens: 256
systems:
  per-rank: {{node: {node}, instance: {{tp: 8}}, kv_cache: {{remote: {{pool_node: nvme-storage-16x, nodes: 2}}, prewarm: true,
             fanout: per_rank, load_policy: always}}}}
  once: {{node: {node}, instance: {{tp: 8}}, kv_cache: {{remote: {{pool_node: nvme-storage-16x, nodes: 2}}, prewarm: true,
         fanout: once_per_node, load_policy: always}}}}
"""


def _link_bytes(run, match) -> float:
    return sum(row["bytes"] for row in run.links if match(row["link"]))


@pytest.mark.parametrize("model, node, card_bytes, readers", [
    # DeepSeek-R1 (MLA) on the H20: every card holds the whole latent, 61 x 576 B a token
    ("deepseek-r1", "h20-8x", 61 * 576, 1),
    # Qwen3-235B on the L20 (no NVLink): one of 4 KV heads per card, 2 x 94 x 128 B a token
    ("qwen3-235b-a22b", "l20-8x", 2 * 94 * 128, 4),
])
def test_load_once_per_node_reads_each_shard_once_and_hands_it_on(model, node, card_bytes, readers):
    # Per rank, every card's flow crosses the NIC (8 copies of its bytes a token); once per node
    # one card per distinct shard (1 for MLA, 4 for 4 KV heads) and 8 - readers hops hand them
    # on -- over NVLink on the H20, card to card through the PCIe switches on the L20.
    result = kvsim.run(kvsim.parse_scenario(R1_POOL.format(model=model, node=node), "fanout.yaml"))
    per_rank, once = result.run("per-rank"), result.run("once")
    loaded = {run.system: run.summary["cache"]["bytes_loaded"]["remote"] for run in (per_rank, once)}
    hits = {run.system: run.records.to_frame()["hit_tokens_remote"].sum() for run in (per_rank, once)}
    assert min(hits.values()) > 0
    # bytes read from the pool per remote hit token (hits counted at admission, bytes when the
    # transfer starts: the same instant)
    assert loaded["per-rank"] / hits["per-rank"] == pytest.approx(8 * card_bytes, rel=1e-9)
    assert loaded["once"] / hits["once"] == pytest.approx(readers * card_bytes, rel=1e-9)

    def nic_in(link):
        return link.startswith("fabric->node0/nic")

    assert _link_bytes(per_rank, nic_in) > (8 / readers - 1) * _link_bytes(once, nic_in)
    hops = (8 - readers) / readers  # bytes handed on per byte read
    if node == "h20-8x":
        into_cards = _link_bytes(once, lambda link: link.startswith("su0->"))
        assert _link_bytes(per_rank, lambda link: link.startswith("su0->")) == 0
        assert into_cards == pytest.approx(hops * _link_bytes(once, nic_in), rel=0.02)
    else:  # PCIe peer to peer: each hop enters its card from its switch, as the loads do

        def card_in(link):
            return link.startswith("node0/pcie") and "->node0/gpu" in link

        assert _link_bytes(once, card_in) == pytest.approx((1 + hops) * _link_bytes(once, nic_in), rel=0.02)
        assert _link_bytes(per_rank, card_in) == pytest.approx(_link_bytes(per_rank, nic_in), rel=0.02)


def test_writes_per_rank_store_every_ranks_copy():
    # MLA at TP 8: per rank, all 8 cards write their latent (and the pool holds 8 copies); once
    # per node, card 0 alone (LMCache's save_only_first_rank, SGLang's TP-0 backup).
    text = R1_POOL.format(model="deepseek-r1", node="h20-8x").replace("prewarm: true,", "prewarm: false,")
    result = kvsim.run(kvsim.parse_scenario(text, "r1.yaml"))
    per_rank, once = result.run("per-rank"), result.run("once")
    block = 256 * 61 * 576  # one 256-token block of the latent
    for run, copies in ((per_rank, 8), (once, 1)):
        written = run.records.to_frame()["written_bytes"].to_numpy()
        blocks = written / (copies * block)
        assert written.sum() > 0
        assert blocks == pytest.approx(blocks.round(), abs=1e-9)  # whole blocks of `copies` latents each
    assert per_rank.summary["cache"]["write_flows_peak"]["remote"] >= 8
    assert once.summary["cache"]["write_flows_peak"]["remote"] < per_rank.summary["cache"]["write_flows_peak"]["remote"]


# -- YAML ------------------------------------------------------------------------------------------

BAD = """
name: bad
seed: 1
duration: 10 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 100}}
  output_tokens: {{kind: fixed, value: 1}}
systems:
  s: {{node: h20-8x, kv_cache: {cache}}}
"""


@pytest.mark.parametrize("cache, words", [
    ("{connector: {name: nixl}}", "connector.name: Input should be 'custom', 'lmcache', 'mooncake' or 'vllm'"),
    ("{connector: {name: vllm}, remote: {pool_node: nvme-storage-16x}}", "offloads to host DRAM only"),
    ("{connector: {name: lmcache, chunk_tokens: 0}}", "connector.chunk_tokens"),
    ("{connector: {name: lmcache, max_io_bytes: 65536}}", "needs its unit"),
    ("{connector: {name: lmcache, threads: 4}}", "connector.threads"),
    ("{fanout: once}", "fanout: Input should be 'per_rank' or 'once_per_node'"),
])
def test_bad_connector_fields_get_one_clear_message(cache, words):
    with pytest.raises(SpecError) as err:
        kvsim.parse_scenario(BAD.format(cache=cache), "bad.yaml")
    assert words in str(err.value)
    assert "Traceback" not in str(err.value)


def test_no_connector_keeps_one_io_per_block_per_card():
    # without a connector the I/O is the block on one card, as before (io_size None)
    assert KVCacheSpec().connector is None and KVCacheSpec().fanout is None
    assert math.isinf(HostPath().pinned_buffer_bytes or math.inf)
