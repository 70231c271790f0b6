"""Windowed metrics: time-weighted levels, counters, and the drain after the window."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.metrics.levels import TimeWeightedLevel, WindowCounter


def test_time_weighted_level_integrates_only_inside_the_window():
    level = TimeWeightedLevel(window_start_s=10.0, window_end_s=30.0)
    level.set(5.0, 4.0)    # 4 from t=5; only [10, 20) counts
    level.set(20.0, 1.0)   # 1 over [20, 30]; what follows 30 must not count
    level.set(40.0, 100.0)
    assert level.mean() == pytest.approx((4.0 * 10 + 1.0 * 10) / 20)


def test_window_counter_counts_only_events_in_the_window():
    counter = WindowCounter(window_start_s=1.0, window_end_s=2.0)
    for t, n in [(0.5, 10), (1.0, 1), (1.5, 2), (2.0, 3), (2.5, 100)]:
        counter.add(t, n)
    assert counter.in_window == 6 and counter.total == 116


OVERLOADED = """
name: overload
seed: 3
duration: 60 s
warmup: 10 s
{drain}
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 12/s}}
  input_tokens: {{kind: fixed, value: 2000}}
  output_tokens: {{kind: fixed, value: 200}}
systems:
  l20: {{node: l20-8x, instances: 1}}
"""


def test_overloaded_run_drains_so_latencies_cover_every_window_arrival():
    result = kvsim.run(kvsim.parse_scenario(OVERLOADED.format(drain=""), "o.yaml"))
    summary = result.run("l20").summary
    frame = result.run("l20").records.to_frame()
    arrived = frame[frame.arrival_s >= 10.0]
    assert summary["requests_unfinished"] > 100  # a large backlog when the window closed...
    assert summary["requests_undrained"] == 0    # ...all of which the drain served
    # so the percentiles are over every window arrival, including the slowest
    assert summary["e2e_s"]["p99"] == pytest.approx(arrived.e2e_s.quantile(0.99))
    assert arrived.e2e_s.max() > 60.0
    # throughput still counts only the window: at most one instance's capacity, not the drain
    assert summary["requests_completed"] == int(frame.finish_s.between(10.0, 60.0).sum())


def test_drain_limit_bounds_the_extra_simulated_time():
    result = kvsim.run(kvsim.parse_scenario(OVERLOADED.format(drain="drain_limit: 5 s"), "o.yaml"))
    run = result.run("l20")
    assert run.summary["requests_undrained"] > 0
    finished = run.records.to_frame().finish_s.dropna()
    assert finished.max() <= 65.0 + 1e-9


def test_bound_resource_names_the_largest_share_of_engine_time():
    from kvsim.metrics.cache_summary import bound_resource

    causes = {"compute": 10.0, "memory": 2.0, "tp_comm": 30.0, "overhead": 1.0}
    assert bound_resource(0.95, causes, []) == "tp all-reduce link"
    assert bound_resource(0.3, causes, []) == "none"
    link = [{"link": "a->b", "utilization_mean": 0.99}]
    assert bound_resource(0.9, causes, link) == "link a->b"


def test_l20_tp8_prefill_is_bound_by_the_pcie_all_reduce_and_h20_is_not():
    # Without NVLink, a TP-8 group all-reduces over PCIe: for Qwen3-235B that costs more per
    # token than the FP8 matmuls, while H20's NVLink keeps compute the limit.
    text = """
name: tp8
duration: 60 s
warmup: 10 s
model: qwen3-235b-a22b
dtype: fp8
workload:
  arrival: {kind: closed_loop, clients: 8}
  input_tokens: {kind: fixed, value: 4096}
  output_tokens: {kind: fixed, value: 1}
systems:
  h20: {node: h20-8x, instance: {tp: 8}}
  l20: {node: l20-8x, instance: {tp: 8}}
"""
    result = kvsim.run(kvsim.parse_scenario(text, "tp8.yaml"))
    assert result.run("l20").summary["bound"] == "tp all-reduce link"
    assert result.run("h20").summary["bound"] == "gpu compute"
    share = result.run("l20").summary["gpu_time_share"]
    assert share["tp_comm"] > share["compute"]
