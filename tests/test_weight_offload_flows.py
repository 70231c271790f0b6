"""A weight stream through the flow network (``weight_offload.contend``, issue 28 item 1's last
part): the stream and a KV load share a card's host link fairly, by hand (the step's transfers
slow, the load lands later); a KV write, the other direction of the full-duplex link, does not
contend; bytes are conserved on the links; a stream from the pool shares the NIC with pool loads;
without KV flows the step times are today's; coalescing on or off gives the same records, on both
backends."""

from __future__ import annotations

import pytest
import simpy

import kvsim
from kvsim import backend
from kvsim.hardware import accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.models import model_catalog
from kvsim.models.step_time import BatchShape
from kvsim.models.weight_offload import PoolHome, WeightOffloadSpec, pool_stream_Bps, weight_stream
from kvsim.network import StorageIO, Transfers, build_topology, network_capacities
from kvsim.network.cluster_graph import copy_engine
from kvsim.serving.weight_flows import StreamedStepTime, WeightFlows, stream_paths
from kvsim.sim import check_scenario
from kvsim.yaml_io import SpecError

BACKENDS = ["python"] + (["compiled"] if backend.compiled_problem() is None else [])
H20, NODE = accelerator_catalog()["h20"], node_catalog()["h20-8x"]
LLAMA = model_catalog()["llama-3.1-8b"]
GPU, DRAM = "n0/gpu0", "n0/dram"


def _network(kernels, pool: bool = False):
    pools = [("pool0", pool_node_catalog()["dram-pool-8x"])] if pool else []
    topology = build_topology([("n0", NODE, H20)], pools)
    env = simpy.Environment()
    storage = StorageIO(topology)
    network = kernels.flows.FlowNetwork(env, network_capacities(topology, storage))
    return env, topology, network, Transfers(env, topology, network, storage)


def _flows(topology, network, transfers, stream, gpus=(GPU,)):
    paths, sources = stream_paths(topology, "n0", list(gpus), stream.home)
    return WeightFlows(stream, network, transfers, [network.route(path) for path in paths], sources)


@pytest.mark.parametrize("name", BACKENDS)
def test_a_kv_load_and_the_stream_share_the_host_link_by_hand(name):
    kernels = backend.kernels(name)
    env, topology, network, transfers = _network(kernels)
    stream = weight_stream(WeightOffloadSpec(fraction=0.5, contend=True), LLAMA, H20, "bf16", None, 1)
    copy_Bps = H20.host_link_bandwidth * H20.efficiency.host_copy  # the card's h2d copy engine: the bottleneck
    assert stream.rate_Bps == copy_Bps
    streamed = stream.step_bytes(8)  # 16 of 32 layers, one card's bytes
    assert streamed == 16 * stream.unit_bytes
    load = 3 * streamed  # a KV load from host DRAM into the same card, started first
    path = topology.load_path(DRAM, GPU, True)
    latency = topology.path_latency_s(path)
    landed = transfers.move([path], load, "load")
    flows = _flows(topology, network, transfers, stream)
    # max-min: the copy engine's C is split in two halves: the stream runs at C / 2, twice its time
    assert flows.begin(8) == 2.0
    env.run(landed)
    # both at C/2 until the stream's S bytes land (2S/C), then the load alone at C: (X + S) / C
    assert env.now == pytest.approx((load + streamed) / copy_Bps + latency, rel=1e-12)
    assert env.now - (load / copy_Bps + latency) == pytest.approx(streamed / copy_Bps, rel=1e-9)  # later by S / C
    # the iteration: its transfers at half the rate, the step model's bound with tau doubled
    step = kernels.step_time.RooflineStepTime(LLAMA, H20, 1, "bf16", "bf16", stream=stream)
    half = kernels.step_time.RooflineStepTime(LLAMA, H20, 1, "bf16", "bf16", stream=weight_stream(
        WeightOffloadSpec(fraction=0.5), LLAMA, H20, "bf16", None, 1, rate_Bps=copy_Bps / 2))
    batch = BatchShape(decode_seqs=8, decode_context_tokens=8 * 2000, sampled_seqs=8)
    contended = StreamedStepTime(step, flows)
    transfers.move([path], load, "load")  # a KV load in flight as the iteration starts
    parts = contended.breakdown(batch)
    assert parts.total_s == pytest.approx(half.breakdown(batch).total_s, rel=1e-12)
    assert parts.total_s > 1.5 * step.breakdown(batch).total_s  # the stream bounds a decode step
    local_s = kernels.step_time.RooflineStepTime(LLAMA, H20, 1, "bf16", "bf16").breakdown(batch).memory_s
    c = max(parts.compute_s, local_s) / 32  # one layer's share of the iteration's own roofline
    assert parts.memory_s == pytest.approx(16 * 2 * stream.layer_s + c, rel=1e-9)  # k (2 tau) + c, by hand


@pytest.mark.parametrize("name", BACKENDS)
def test_alone_the_stream_keeps_its_nominal_rate_and_a_kv_write_does_not_contend(name):
    kernels = backend.kernels(name)
    env, topology, network, transfers = _network(kernels)
    stream = weight_stream(WeightOffloadSpec(fraction=0.5, contend=True), LLAMA, H20, "bf16", None, 1)
    flows = _flows(topology, network, transfers, stream)
    step = kernels.step_time.RooflineStepTime(LLAMA, H20, 1, "bf16", "bf16", stream=stream)
    batch = BatchShape(decode_seqs=8, decode_context_tokens=8 * 2000, sampled_seqs=8)
    assert StreamedStepTime(step, flows).breakdown(batch) == step.breakdown(batch)  # to the bit
    env.run()
    # a write goes device -> host: the other direction of the full-duplex link and the other copy
    # engine; only the DDR channels are common, and they do not bind
    write = topology.store_path(GPU, DRAM, True)
    assert (copy_engine(GPU, "h2d") not in {v for _, v in write}) and ("n0/imc", "n0/ddr") in write
    start = env.now
    written = transfers.move([write], 4e9, "write")
    assert flows.begin(8) == 1.0
    env.run(written)
    alone = 4e9 / (H20.host_link_bandwidth * H20.efficiency.host_copy) + topology.path_latency_s(write)
    assert env.now - start == pytest.approx(alone, rel=1e-9)


@pytest.mark.parametrize("name", BACKENDS)
def test_bytes_are_conserved_on_the_links(name):
    kernels = backend.kernels(name)
    env, topology, network, transfers = _network(kernels)
    stream = weight_stream(WeightOffloadSpec(fraction=0.25, contend=True), LLAMA, H20, "bf16", None, 2)
    gpus = (GPU, "n0/gpu1")
    flows = _flows(topology, network, transfers, stream, gpus)
    load = 2.5e9
    transfers.move([topology.load_path(DRAM, GPU, True)], load, "load")
    steps = 5
    for _ in range(steps):  # five iterations, each started as the last one's stream lands
        flows.begin(4)
        env.run(env.now + 0.05)
    env.run()
    streamed = stream.step_bytes(4)
    assert transfers.bytes_by_purpose["weights"] == pytest.approx(steps * streamed * 2, rel=1e-12)
    h2d = (GPU, copy_engine(GPU, "h2d"))
    assert network.bytes_moved(h2d) == pytest.approx(steps * streamed + load, rel=1e-12)
    assert network.bytes_moved(("n0/gpu1", copy_engine("n0/gpu1", "h2d"))) == pytest.approx(steps * streamed,
                                                                                               rel=1e-12)
    # the DDR channels carried every byte read from host DRAM: both cards' streams and the load
    assert network.bytes_moved(("n0/imc", "n0/ddr")) == pytest.approx(2 * steps * streamed + load, rel=1e-12)


@pytest.mark.parametrize("name", BACKENDS)
def test_a_pool_stream_shares_the_nic_with_pool_loads_by_hand(name):
    kernels = backend.kernels(name)
    env, topology, network, transfers = _network(kernels, pool=True)
    pool_node = pool_node_catalog()["dram-pool-8x"]
    nominal = pool_stream_Bps(NODE, H20, PoolHome(pool_node, 1, 1))  # one card streams from the pool
    stream = weight_stream(WeightOffloadSpec(fraction=0.5, home="pool", contend=True), LLAMA, H20, "bf16", None, 1,
                           rate_Bps=nominal)
    path = topology.load_path("pool0/media", GPU, True)
    capacity = network_capacities(topology, StorageIO(topology))
    nic = NODE.nics.delivered_bandwidth  # the card's NIC's network link: the path's narrowest
    assert min(capacity[edge] for edge in path) == nic and len({edge for edge in path if capacity[edge] == nic}) >= 1
    # two cards a NIC: the card's nominal share is half of it
    assert nominal == pytest.approx(nic / 2, rel=1e-12)
    flows = _flows(topology, network, transfers, stream)
    load = transfers.move([path], 2e9, "load")
    # one pool load: max-min gives each half the NIC, the stream's share: it keeps its rate
    assert flows.begin(8) == 1.0
    assert network.rate_of(load) == pytest.approx(nic / 2, rel=1e-12)
    env.run()
    # two pool loads: a third of the NIC each, the stream's transfers take 1.5 times as long
    transfers.move([path], 2e9, "load")
    transfers.move([path], 2e9, "load")
    assert flows.begin(8) == pytest.approx(nominal / (nic / 3), rel=1e-12) == pytest.approx(1.5, rel=1e-12)


def test_an_moe_stream_moves_the_touched_experts_bytes():
    qwen, h20 = model_catalog()["qwen3-235b-a22b"], accelerator_catalog()["h20"]
    stream = weight_stream(WeightOffloadSpec(fraction=0.25, contend=True), qwen, h20, "fp8", None, 8, expert_skew=1.0)
    for tokens in (1, 16, 128):
        # the bytes of an iteration over the rate: the k MoE layers' transfers of the step model
        assert stream.step_bytes(tokens) / stream.rate_Bps == pytest.approx(
            stream.offloaded * stream.layer_s_at(tokens), rel=1e-12)
    assert stream.step_bytes(1) < stream.step_bytes(16) < stream.step_bytes(128) < \
        stream.offloaded * len(stream.cold_shares) * stream.unit_bytes


SCENARIO = """
name: wf
seed: 3
duration: 8 s
warmup: 1 s
model: llama-3.1-8b
engine: {{backend: {backend}, coalesce: {coalesce}}}
workload:
  arrival: {{kind: poisson, rate: 6/s}}
  prefix: {{kind: shared_documents, documents: 20, zipf_s: 1.0, document_tokens: {{kind: fixed, value: 3000}},
           suffix_tokens: {{kind: fixed, value: 200}}}}
  output_tokens: {{kind: lognormal, median: 60, sigma: 0.5, max: 200}}
systems:
  s: {{node: h20-8x, instances: 2, {cache} instance: {{tp: 1, memory_utilization: 0.5,
      weight_offload: {{fraction: 0.5, contend: {contend}}}}}}}
"""


def _run(backend_name: str, contend: bool, coalesce: bool = True, cache: str = ""):
    text = SCENARIO.format(backend=backend_name, contend=str(contend).lower(), coalesce=str(coalesce).lower(),
                           cache=cache)
    return kvsim.run(kvsim.parse_scenario(text, "wf.yaml"))


@pytest.mark.parametrize("name", BACKENDS)
def test_without_kv_flows_the_step_times_are_todays(name):
    today, contended = _run(name, False), _run(name, True)
    assert contended.records_digest() == today.records_digest()
    a, b = today.runs[0].summary, contended.runs[0].summary
    assert a["tpot_s"] == b["tpot_s"] and a["ttft_s"] == b["ttft_s"]


CACHE = "router: cache_aware, kv_cache: {dram: {capacity: 8 GiB}},"


@pytest.mark.parametrize("name", BACKENDS)
def test_coalesced_and_step_by_step_runs_are_equal_with_the_stream(name, monkeypatch):
    """A contending instance runs its iterations one by one whatever engine.coalesce says, so the
    two give the same records (a coalesced run would start none of its iterations' flows)."""
    begin, scales = WeightFlows.begin, []

    def counted(self, tokens):
        scales.append(begin(self, tokens))
        return scales[-1]

    monkeypatch.setattr(WeightFlows, "begin", counted)
    coalesced, stepped = _run(name, True, True, CACHE), _run(name, True, False, CACHE)
    assert len(scales) > 100 and any(scale > 1.0 for scale in scales)  # some iterations met a KV load
    assert coalesced.records_digest() == stepped.records_digest()
    assert coalesced.runs[0].summary["tpot_s"] == stepped.runs[0].summary["tpot_s"]
    # the KV loads from host DRAM share the cards' host links with the stream: decode slows
    today = _run(name, False, True, CACHE)
    assert today.runs[0].records.column("hit_tokens_dram").sum() > 0
    assert coalesced.runs[0].summary["tpot_s"]["mean"] >= today.runs[0].summary["tpot_s"]["mean"]


def test_the_backends_agree_with_the_stream():
    if backend.compiled_problem() is not None:
        pytest.skip("no compiled backend")
    assert _run("python", True, True, CACHE).records_digest() == _run("compiled", True, True, CACHE).records_digest()


def test_contend_with_early_exit_is_refused():
    text = SCENARIO.format(backend="python", contend="true", coalesce="true", cache="").replace(
        "coalesce: true}", "coalesce: true, early_exit: {exit_layers: [16, 24, 32], distribution: [0.2, 0.3, 0.5]}}")
    with pytest.raises(SpecError) as caught:
        check_scenario(kvsim.parse_scenario(text, "wf.yaml"))
    assert "weight_offload.contend" in str(caught.value) and "early_exit" in str(caught.value)
