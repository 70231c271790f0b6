"""Prefill/decode disaggregation: pools and roles, the KV handoff, back-pressure, conservation."""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.models.step_time import BatchShape
from kvsim.sim import check_scenario

KV_PER_TOKEN = 147_456  # Qwen3-8B bf16 at tp 1: 2 * 36 layers * 8 KV heads * 128 * 2 bytes

ONE_CLIENT = """
name: pd-one
seed: 4
duration: 20 s
model: qwen3-8b
workload:
  arrival: {{kind: closed_loop, clients: 1, think_time: 1 s}}
  input_tokens: {{kind: fixed, value: {prompt}}}
  output_tokens: {{kind: fixed, value: 8}}
systems:
  pd:
    pools:
      prefill: {{node: h20-8x, instances: 1, role: prefill}}
      decode: {{node: h20-8x, instances: 1, role: decode}}
    kv_handoff: {{mode: {mode}}}
    scale_up_domain_nodes: {domain}
"""


NIC_Bps = 50e9 * 0.975  # one 400 Gbit/s NIC delivering 0.975 of line rate (NicSpec efficiency)

def _one(prompt=1000, mode="whole", domain=1):
    text = ONE_CLIENT.format(prompt=prompt, mode=mode, domain=domain)
    run = kvsim.run(kvsim.parse_scenario(text, "pd.yaml")).runs[0]
    return run.records.to_frame(), run


def test_handoff_bytes_are_the_prompts_kv_per_card_and_take_bytes_over_the_nic_plus_latency():
    frame, _ = _one(prompt=1000, mode="whole")
    assert len(frame) > 5
    assert (frame.handoff_bytes == 1000 * KV_PER_TOKEN).all()
    # whole: the flow starts when the prefill ends; one request at a time, so the links are idle.
    # GPU-Direct RDMA from the prefill server's card to the decode server's: 400 Gbit/s NIC
    # (50 GB/s at 0.975 delivered, below PCIe Gen5's 64 GB/s), 4 PCIe hops of 1 us and 3 us NIC to NIC.
    assert np.allclose(frame.handoff_start_s, frame.prefill_end_s)
    assert np.allclose(frame.handoff_end_s - frame.handoff_start_s, 1000 * KV_PER_TOKEN / NIC_Bps + 7e-6, rtol=1e-9)
    assert (frame.prefill_instance == 0).all() and (frame.instance == 1).all()


def test_inside_one_scale_up_domain_the_handoff_crosses_nvlink():
    frame, _ = _one(prompt=1000, mode="whole", domain=2)
    # both servers in one NVLink domain: 450 GB/s per direction, 3 us
    assert np.allclose(frame.handoff_end_s - frame.handoff_start_s, 1000 * KV_PER_TOKEN / 450e9 + 3e-6, rtol=1e-9)


def test_layer_by_layer_streaming_leaves_only_the_last_layers_share_after_the_prefill():
    whole, _ = _one(prompt=4000, mode="whole")
    layerwise, _ = _one(prompt=4000, mode="layerwise")
    flow_s = 4000 * KV_PER_TOKEN / NIC_Bps + 7e-6
    # the flow starts with the prompt's last iteration, which outlasts it: the handoff ends one
    # layer's share of the flow after the prefill
    assert (layerwise.handoff_start_s < layerwise.prefill_end_s).all()
    assert np.allclose(layerwise.handoff_end_s - layerwise.prefill_end_s, flow_s / 36, rtol=1e-6)
    assert np.allclose(layerwise.handoff_landed_s - layerwise.handoff_start_s, flow_s, rtol=1e-9)
    assert np.allclose(whole.handoff_end_s - whole.prefill_end_s, flow_s, rtol=1e-9)
    assert (layerwise.ttft_s < whole.ttft_s).all()


def test_milestones_are_ordered_and_the_first_token_comes_from_the_decode_instance():
    frame, run = _one(prompt=1000, mode="layerwise")
    order = ["arrival_s", "admit_s", "prefill_end_s", "handoff_end_s", "decode_start_s", "first_token_s", "finish_s"]
    for a, b in zip(order, order[1:]):
        assert (frame[a] <= frame[b]).all(), (a, b)
    assert (frame.first_token_s > frame.handoff_end_s).all()  # one decode step after the KV landed
    assert run.summary["pd"]["handoff_bytes_per_request_mean"] == 1000 * KV_PER_TOKEN
    assert run.summary["tpot_s"]["p50"] > 0


PRESSURE = """
name: pd-pressure
seed: 6
duration: 40 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 5/s}
  input_tokens: {kind: uniform, low: 200, high: 3000}
  output_tokens: {kind: uniform, low: 50, high: 600}
systems:
  pd:
    pools:
      prefill: {node: h20-8x, instances: 2, role: prefill, instance: {activation_reserve: 70 GiB}}
      decode: {node: l20-8x, instances: 1, role: decode, instance: {activation_reserve: 22 GiB, max_num_seqs: 64}}
"""


def test_back_pressure_loses_nothing_and_every_request_finishes_once(built_systems):
    systems = built_systems
    run = kvsim.run(kvsim.parse_scenario(PRESSURE, "p.yaml")).runs[0]
    frame = run.records.to_frame()
    system = systems[0]
    assert frame.finish_s.notna().all() and system.front.completed == system.front.submitted == len(frame)
    # the decode instance was short of KV: handoffs waited after their prefill, holding its pages
    waited = frame.handoff_start_s - frame.prefill_end_s
    assert waited.max() > 0.1
    assert frame.preemptions.sum() > 0  # and the decode instance preempted (and recomputed) under pressure
    assert frame.decode_start_s.notna().all()  # a recomputed request's decoding starts with its recompute
    for inst in system.instances:  # every page came back: nothing lost or freed twice
        assert inst.pool.free_blocks == inst.pool.num_blocks
        assert not inst.scheduler.detached and not inst.scheduler.loading and not inst.scheduler.running
    assert (frame.prefill_instance.isin([0, 1])).all() and (frame.instance == 2).all()


def test_one_to_one_pd_never_beats_the_prefill_bound_of_its_one_prefill_instance():
    # decode-light (one output token) and a near-free handoff (both servers in one scale-up domain
    # with an enormous link): the single prefill instance bounds throughput at its best rate, a
    # full token budget per iteration with no attention context
    text = """
name: bound
seed: 9
duration: 60 s
warmup: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 40/s}
  input_tokens: {kind: fixed, value: 1024}
  output_tokens: {kind: fixed, value: 1}
systems:
  pd:
    pools:
      prefill: {node: fast-8x, instances: 1, role: prefill}
      decode: {node: fast-8x, instances: 1, role: decode}
    scale_up_domain_nodes: 2
  colocated: {node: fast-8x, instances: 2}
catalog:
  accelerators:
    fast: {base: h20, scale_up_bandwidth: 1 PB/s, scale_up_latency_s: 0 s}
  nodes:
    fast-8x: {base: h20-8x, accelerator: fast}
"""
    scenario = kvsim.parse_scenario(text, "b.yaml")
    result = kvsim.run(scenario)
    sizing = check_scenario(scenario)[(0, "pd")].pool("prefill")
    budget = sizing.spec.instance.max_batched_tokens
    step = sizing.step_model()
    bound = budget / step.iteration_time_s(BatchShape(prefill_tokens=budget, sampled_seqs=1))
    pd = result.run("pd").summary["input_tokens_per_s"]
    assert 0.8 * bound < pd <= bound
    assert result.run("colocated").summary["input_tokens_per_s"] > 1.5 * pd  # two instances compute prompts


@pytest.mark.parametrize("pools, fragment", [
    ("{d: {node: h20-8x, role: decode}}", "a decode pool needs a prefill pool"),
    ("{p: {node: h20-8x, role: prefill}}", "a prefill pool needs a decode pool"),
    ("{m: {node: h20-8x}, d: {node: h20-8x, role: decode}}", "do not combine mixed with decode"),
    ("{p: {node: h20-8x, role: prefill}, d: {node: l20-8x, role: decode}}",
     "do not fit for the decode role"),
    ("{p: {node: h20-8x, role: prefill}, d: {node: nope-8x, role: decode}}", "nope-8x"),
])
def test_bad_pools_are_refused_with_file_line_and_field(refused, pools, fragment):
    err = refused(f"pools: {pools}", model="qwen3-32b")
    assert fragment in err and "bad.yaml:10" in err and "systems.s.pools" in err


def test_pools_and_a_system_level_node_do_not_mix(refused):
    err = refused("node: h20-8x\n    pools: {p: {node: h20-8x, role: prefill}, d: {node: h20-8x, role: decode}}")
    assert "bad.yaml:10: systems.s.node: give it per pool" in err


def test_the_resolved_scenario_of_a_disaggregated_run_runs_again_identically(tmp_path):
    import json

    from kvsim.cli import main

    source = tmp_path / "pd.yaml"
    source.write_text(ONE_CLIENT.format(prompt=700, mode="layerwise", domain=1), encoding="utf-8")
    assert main(["run", str(source), "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    assert main(["run", str(tmp_path / "a" / "scenario.yaml"), "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    first, second = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("a", "b"))
    assert [p["systems"] for p in first["points"]] == [p["systems"] for p in second["points"]]
    hardware = first["points"][0]["systems"]["pd"]["hardware"]
    assert set(hardware["pools"]) == {"prefill", "decode"} and hardware["cards"] == 2


def test_the_prefix_aware_prefill_router_sends_a_shared_document_where_it_is_cached():
    text = """
name: prefix-route
seed: 3
duration: 60 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 12/s}
  prefix: {kind: shared_documents, documents: 400, zipf_s: 0.6, document_tokens: {kind: fixed, value: 4096},
           suffix_tokens: {kind: fixed, value: 128}}
  output_tokens: {kind: fixed, value: 16}
systems:
  aware:
    pools: {h: {node: h20-8x, instances: 6, roles: {prefill: 4, decode: 2}}}
    prefill_router: prefix_aware
    kv_cache: {}
  blind:
    pools: {h: {node: h20-8x, instances: 6, roles: {prefill: 4, decode: 2}}}
    kv_cache: {}
"""
    result = kvsim.run(kvsim.parse_scenario(text, "r.yaml"))
    aware, blind = (result.run(s).summary["cache"]["hit_rate"]["hbm"] for s in ("aware", "blind"))
    # 400 documents of 4K tokens, more than one instance's HBM holds: sent where it is cached, a
    # document is cached once for the pool; spread by queued tokens, every instance caches its
    # own copies of the popular ones and holds fewer distinct documents
    assert aware > blind + 0.05


def test_an_instant_handoff_finishes_each_request_once(built_systems):
    # a handoff that takes no time at all completes inside the prefill iteration that detaches the
    # prompt: the prompt must still leave the prefill instance's running set
    text = """
name: instant
seed: 9
duration: 20 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: fixed, value: 1024}
  output_tokens: {kind: fixed, value: 4}
systems:
  pd:
    pools:
      prefill: {node: instant-8x, instances: 1, role: prefill}
      decode: {node: instant-8x, instances: 1, role: decode}
    scale_up_domain_nodes: 2
catalog:
  accelerators:
    instant: {base: h20, scale_up_bandwidth: 1e30 B/s, scale_up_latency_s: 0 s}
  nodes:
    instant-8x: {base: h20-8x, accelerator: instant}
"""
    frame = kvsim.run(kvsim.parse_scenario(text, "i.yaml")).runs[0].records.to_frame()
    front = built_systems[0].front
    assert front.completed == front.submitted == len(frame) and frame.finish_s.notna().all()
    assert (frame.handoff_landed_s == frame.handoff_start_s).all()


def test_a_decode_pool_that_may_switch_to_prefill_is_checked_for_the_cache(refused):
    pools = ("pools: {p: {node: h20-8x, instances: 2, role: prefill}, d: {node: h20-8x, instances: 2, "
             "role: decode, switchable: SWITCH, instance: {block_size_tokens: 32}}}\n    kv_cache: {}\n"
             "    controller: {kind: threshold, signal: prefill_queue, low: 1, high: 2}")
    err = refused(pools.replace("SWITCH", "true"))
    assert "whole engine pages of 32 tokens" in err
    # a decode pool that never switches never caches: its page size is its own
    err = refused(pools.replace("SWITCH", "false"))
    assert "whole engine pages" not in err and "every pool here has a fixed role" in err
