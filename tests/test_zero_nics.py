"""Nodes and pool nodes without NICs: refused before the run where the system needs the network
(they once passed validate and ended the run in a traceback)."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.sim import check_scenario
from kvsim.yaml_io import SpecError

BASE = """
name: nics
duration: 20 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 500}}
  output_tokens: {{kind: fixed, value: 50}}
systems:
{systems}
catalog:
  nodes:
    zero: {{base: h20-8x, nics: {{count: 0, bandwidth: 400 Gbit/s}}}}
  pool_nodes:
    nonic-pool: {{base: nvme-storage-16x, nics: {{count: 0, bandwidth: 400 Gbit/s}}}}
"""

PD = """  pd:
    pools:
      prefill: {node: zero, nodes: 1, instance: {tp: 1}, role: prefill}
      decode: {node: h20-8x, nodes: 1, instance: {tp: 1}, role: decode}"""


@pytest.mark.parametrize("systems, field, words", [
    ("  a: {node: zero, instances: 1, kv_cache: {remote: {pool_node: nvme-storage-16x, nodes: 1}}}",
     "systems.a.node", "could not reach the remote KV pool"),
    ("  a: {node: h20-8x, instances: 1, kv_cache: {remote: {pool_node: nonic-pool, nodes: 1}}}",
     "systems.a.kv_cache.remote.pool_node", "compute nodes could not reach it"),
    (PD, "systems.pd.pools.prefill.node", "could not hand KV between prefill and decode"),
])
def test_a_system_that_needs_the_network_refuses_nodes_without_nics(systems, field, words):
    scenario = kvsim.parse_scenario(BASE.format(systems=systems), "nics.yaml")
    with pytest.raises(SpecError) as info:
        check_scenario(scenario)
    message = str(info.value)
    assert f"{field}: " in message and words in message and "nics.yaml:" in message


def test_a_node_without_nics_that_needs_no_network_still_runs():
    scenario = kvsim.parse_scenario(BASE.format(systems="  a: {node: zero, instances: 1}"), "nics.yaml")
    run = kvsim.run(scenario).runs[0]
    assert run.summary["requests_completed"] > 0
