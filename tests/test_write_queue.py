"""Bounded write queues (issue 11, item 7): cache writes to a lower tier that cannot keep up are
skipped once a store has ``max_write_flows`` write flows in flight, so the flow solver never holds
thousands of them; skipped writes are counted, and nothing reads a copy that was never written."""

from __future__ import annotations

import math

import pytest
import simpy

import kvsim
from kvsim.metrics.records import RequestRecords
from kvsim.network.transfers import Transfers
from kvsim.rng import RandomStreams
from kvsim.serving.cache import MAX_WRITE_FLOWS
from kvsim.sim import check_scenario
from kvsim.sim.build import build_system

KV_PER_TOKEN = 147_456  # Qwen3-8B bf16: 2 * 36 layers * 8 heads * 128 * 2 bytes

TIERS = """
name: wq
seed: 1
duration: 1 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 64}}
  output_tokens: {{kind: fixed, value: 1}}
systems:
  s: {{node: {node}, instances: 1, instance: {{tp: {tp}}},
      kv_cache: {{dram: {{capacity: {dram}, max_write_flows: {dram_limit}}}, nvme: {{max_write_flows: {limit}}},
                 remote: {{pool_node: {pool}}}, gpu_direct: {gpu_direct}, write_policy: {policy}}}}}
"""


def _system(node="h20-8x", pool="nvme-storage-16x", tp=8, gpu_direct="true", limit=MAX_WRITE_FLOWS,
            dram="64 GiB", dram_limit=MAX_WRITE_FLOWS, policy="write_through"):
    scenario = kvsim.parse_scenario(TIERS.format(node=node, pool=pool, tp=tp, gpu_direct=gpu_direct, limit=limit,
                                                 dram=dram, dram_limit=dram_limit, policy=policy), "wq.yaml")
    sizing = check_scenario(scenario)[(0, "s")]
    return build_system(simpy.Environment(), scenario.spec, sizing, RequestRecords(16), RandomStreams(1), 16)


@pytest.mark.parametrize("node", ["h20-8x", "l20-8x", "rtx-4090-8x"])
@pytest.mark.parametrize("pool", ["nvme-storage-16x", "dram-pool-8x"])
@pytest.mark.parametrize("gpu_direct", ["true", "false"])
def test_the_default_limit_never_idles_a_catalog_medium(node, pool, gpu_direct):
    """Sustaining a medium's write bandwidth D with flows of S bytes that each take T alone needs
    D * T / S flows in flight (Little's law): the default must allow that many, with S one small
    block per card (a 16-token block of Qwen3-8B on each card of a TP-8 instance) and D the
    medium's own write edge (an upper bound on what it can take)."""
    system = _system(node, pool, 8, gpu_direct)
    cache, place = system.cache, system.placements[0]
    gpu = place.gpus[0]
    per_card = 16 * KV_PER_TOKEN / 8
    for store in (cache.dram[place.node], cache.nvme[place.node], cache.remote[0]):
        path = cache.topology.store_path(gpu, cache.endpoint[id(store)], gpu_direct == "true")
        alone_s = system.transfers.uncontended_s([path], per_card, cache.io(store, True, place.node, per_card))
        device_Bps = cache.topology.graph.edges[path[-1]]["capacity_Bps"]
        needed = math.ceil(device_Bps * alone_s / per_card)
        assert 1 <= needed <= MAX_WRITE_FLOWS, (store.name, needed)
        assert cache.write_limit[id(store)] == MAX_WRITE_FLOWS


def _offer(system, store, blocks):
    """Write ``blocks`` (filed in the instance's HBM first) down to ``store`` now, as one copy."""
    cache = system.hooks[(0, system.placements[0].role)]
    for block in blocks:
        if block not in cache.hbm:
            assert system.cache.index.insert(cache.hbm, block) is not None
    cache.writer.write_down(None, blocks, only=store)
    return cache


def test_writes_beyond_the_limit_are_skipped_counted_and_never_filed():
    """A hand-computed case: TP 2 (two flows per copy), limit 7 flows, ten one-block copies offered
    at once, twice. Each time 3 copies fit (6 flows; a fourth would make 8), 7 are skipped; the
    3 land (the queue empties) before the second burst. Nothing skipped is ever in the store."""
    system = _system(tp=2, limit=7)
    env, cache = system.env, system.cache
    nvme = cache.nvme[system.placements[0].node]
    block_bytes = 16 * KV_PER_TOKEN
    flows_seen = []

    def burst(first):
        inst = None
        for k in range(10):
            inst = _offer(system, nvme, [first + k])
            flows_seen.append(system.network.active_flows)
        return inst

    inst = burst(0)
    assert cache.writing[id(nvme)] == 6 and max(flows_seen) <= 7
    assert sorted(b for b in range(10) if inst.hbm.pins(b)) == [0, 1, 2]  # skipped copies pin nothing
    env.run(until=1.0)
    assert cache.writing[id(nvme)] == 0 and system.network.active_flows == 0
    assert [b for b in range(10) if b in nvme] == [0, 1, 2]
    burst(100)
    env.run(until=2.0)
    assert [b for b in range(100, 110) if b in nvme] == [100, 101, 102]
    assert cache.writes_skipped["nvme"] == 14
    assert cache.write_bytes_skipped["nvme"] == pytest.approx(14 * block_bytes)
    assert cache.bytes_written["nvme"] == pytest.approx(6 * block_bytes)
    assert cache.write_flows_peak["nvme"] == 6
    assert max(flows_seen) <= 7
    assert all(not inst.hbm.pins(b) for b in list(range(10)) + list(range(100, 110)))


def test_a_copy_wider_than_the_limit_goes_alone():
    """Limit 1 flow, TP 2: a copy is taken only when nothing is in flight (else no copy could ever be
    made); the next one waits for nothing and is skipped."""
    system = _system(tp=2, limit=1)
    cache = system.cache
    nvme = cache.nvme[system.placements[0].node]
    _offer(system, nvme, [1])
    _offer(system, nvme, [2])
    assert cache.writing[id(nvme)] == 2 and cache.writes_skipped["nvme"] == 1
    system.env.run(until=1.0)
    _offer(system, nvme, [3])
    system.env.run(until=2.0)
    assert [b for b in (1, 2, 3) if b in nvme] == [1, 3]


def test_write_back_and_its_cascade_skip_when_the_next_tier_is_busy():
    """Write-back: HBM victims go to DRAM, DRAM victims cascade to NVMe; either copy is dropped
    (not filed anywhere) when its target's queue is full."""
    block_bytes = 16 * KV_PER_TOKEN
    system = _system(tp=2, dram=f"{2 * block_bytes:.0f} B", dram_limit=2, limit=1, policy="write_back")
    cache = system.cache
    node = system.placements[0].node
    dram, nvme = cache.dram[node], cache.nvme[node]
    writer = system.hooks[(0, system.placements[0].role)].writer
    writer.write_back([1])  # two flows: the DRAM queue is full
    writer.write_back([2])
    assert cache.writes_skipped["dram"] == 1
    system.env.run(until=1.0)
    assert 1 in dram and 2 not in dram
    cache.file(dram, [3, 4])  # DRAM holds two blocks: 1 is evicted and cascades (one flow, medium to medium)
    cache.file(dram, [5])     # 3 is evicted while 1's copy is in flight: NVMe's queue (1 flow) is full
    assert cache.writes_skipped["nvme"] == 1
    system.env.run(until=2.0)
    assert 1 in nvme and 3 not in nvme and 3 not in dram
    assert cache.bytes_written == pytest.approx({"dram": block_bytes, "nvme": block_bytes, "remote": 0.0})
    assert cache.write_bytes_skipped == pytest.approx({"dram": block_bytes, "nvme": block_bytes, "remote": 0.0})


OVERLOAD = """
name: write-cliff
seed: 3
duration: {duration}
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 100/s}}
  prefix: {{kind: shared_documents, documents: 300, zipf_s: 1.0,
           document_tokens: {{kind: fixed, value: 1024}}, suffix_tokens: {{kind: fixed, value: 16}}}}
  output_tokens: {{kind: fixed, value: 8}}
systems:
  s: {{node: slow-nvme-8x, instance: {{tp: 1, memory_utilization: 0.25}}, kv_cache: {{nvme: {{{limit}}}}}}}
catalog:
  nodes:
    slow-nvme-8x: {{base: h20-8x, nvme: {{count: 1, capacity_bytes: 3.84 TB, read_bandwidth: 2000 MB/s,
                                        write_bandwidth: 500 MB/s}}}}
"""


def _overloaded(monkeypatch, duration, limit=""):
    """Run the overload scenario (write-through to one NVMe drive at 500 MB/s, about 8x slower than
    the prompts it is offered), counting cache-write flows in flight from outside the cache code."""
    live = {"now": 0, "peak": 0}
    move = Transfers.move

    def counted(self, paths, nbytes_each, purpose, io=None, cancellable=False):
        done = move(self, paths, nbytes_each, purpose, io, cancellable)
        if purpose == "cache_write":
            live["now"] += len(paths)
            live["peak"] = max(live["peak"], live["now"])

            def landed(_event, n=len(paths)):  # noqa: B008 -- the count bound now, as the transfer starts
                live["now"] -= n

            done.callbacks.append(landed)
        return done

    monkeypatch.setattr(Transfers, "move", counted)
    scenario = kvsim.parse_scenario(OVERLOAD.format(duration=duration, limit=limit), "cliff.yaml")
    return kvsim.run(scenario).runs[0], live["peak"]


def test_an_overloaded_tier_keeps_its_flows_under_the_limit_and_its_bytes_conserved(monkeypatch):
    run, peak = _overloaded(monkeypatch, "6 s", "max_write_flows: 12")
    cache = run.summary["cache"]
    assert cache["writes_skipped"]["nvme"] > 0 and cache["write_bytes_skipped"]["nvme"] > 0
    assert peak <= 12 and cache["write_flows_peak"]["nvme"] == peak
    # what was written is re-read (HBM is small), never more than was written
    assert 0 < cache["bytes_loaded"]["nvme"] <= cache["bytes_written"]["nvme"]
    # every offered copy is whole blocks, written or skipped
    block_bytes = 16 * KV_PER_TOKEN
    for key in ("bytes_written", "write_bytes_skipped"):
        blocks = cache[key]["nvme"] / block_bytes
        assert blocks == pytest.approx(round(blocks))
    assert run.summary["requests_completed"] > 0
    assert run.summary["requests_undrained"] == 0


def test_the_default_limit_binds_under_sustained_overload(monkeypatch):
    run, peak = _overloaded(monkeypatch, "6 s")
    cache = run.summary["cache"]
    assert peak <= MAX_WRITE_FLOWS and cache["writes_skipped"]["nvme"] > 0
    assert run.summary["requests_undrained"] == 0
