"""A sweep over a catalog part runs each point on that point's hardware (it was once ignored:
every point ran the base catalog, so a bandwidth sweep gave the same numbers at 1x and 10x)."""

from __future__ import annotations

import kvsim

SCENARIO = """
name: catalog-sweep
seed: 2
duration: 30 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 0.5/s}
  input_tokens: {kind: fixed, value: 1000}
  output_tokens: {kind: fixed, value: 100}
systems:
  a: {node: l20-8x, instances: 1}
sweep:
  catalog.accelerators.l20.memory_bandwidth: [864 GB/s, 8640 GB/s]
"""


def test_each_point_runs_on_its_swept_hardware():
    scenario = kvsim.parse_scenario(SCENARIO, "catalog_sweep.yaml")
    assert [scenario.catalogs_for(p).accelerators["l20"].memory_bandwidth for p in scenario.points] == [
        864e9, 8640e9]
    result = kvsim.run(scenario)
    slow, fast = (result.run("a", point) for point in result.points())
    assert slow.sizing.pools[0].accelerator.memory_bandwidth == 864e9
    assert fast.sizing.pools[0].accelerator.memory_bandwidth == 8640e9
    # a decode step at light load reads the weights: ten times the bandwidth, several times faster
    assert fast.summary["tpot_s"]["p50"] < slow.summary["tpot_s"]["p50"] / 3


def test_the_shipped_catalog_is_untouched_between_points():
    scenario = kvsim.parse_scenario(SCENARIO, "catalog_sweep.yaml")
    assert scenario.catalogs.accelerators["l20"].memory_bandwidth == 864e9
    assert kvsim.parse_scenario(SCENARIO.split("sweep:")[0], "x.yaml").catalogs.accelerators[
        "l20"].memory_bandwidth == 864e9
