"""`kvsim storage` in MLPerf Storage KV-cache terms (issue 24, item 8): a configuration written like
a submission's system description, and the workload's own metrics (delivered read / write GiB/s, KV
tokens per second, p95 read and write latency)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.hardware import pool_node_catalog
from kvsim.models import model_catalog
from kvsim.scenario.storage_bench import SUBMISSION_STORAGE, load_storage_bench, parse_storage_bench
from kvsim.sim.storage_bench import run_bench_point
from kvsim.yaml_io import SpecError

ROOT = Path(__file__).resolve().parent.parent
GIB = 2.0**30


def test_a_submission_builds_the_pool_node_the_catalog_holds_for_it():
    bench = load_storage_bench(ROOT / "scenarios" / "storage" / "ubix_kv_cache_submission.yaml")
    [point] = bench.points
    built, catalog = point.pool_node, pool_node_catalog()["nvme-gen5-16x"]
    # the same storage node, from the submission's own figures: 16 drives, 4 x 400 Gb/s data ports
    for field in ("capacity_bytes", "read_bandwidth", "write_bandwidth", "read_iops", "write_iops"):
        assert getattr(built, field) == pytest.approx(getattr(catalog, field)), field
    assert (built.nics.count, built.nics.bandwidth, built.nics.efficiency) == (4, 50e9, 0.806)
    # the 1 GbE management port carries no data; the clients' 50 GbE beside their 400 Gb/s port
    # is left out (one speed per node)
    assert (point.node.nics.count, point.node.nics.bandwidth) == (1, 50e9)
    assert point.spec.clients.nodes == 16 and point.node.accelerators_per_node == 2
    assert point.spec.pool.nodes == 3 and point.spec.pool.pool_node == SUBMISSION_STORAGE
    assert point.kv_bytes_per_token == 131072  # llama-3.1-8b in bf16: 32 x 2 x 8 x 128 x 2 B


def test_the_kv_cache_run_reports_the_workloads_own_metrics():
    bench = load_storage_bench(ROOT / "scenarios" / "storage" / "ubix_kv_cache_submission.yaml")
    row = run_bench_point(bench.points[0])
    # published: 443.7 GiB/s read over 32 ranks (MLPerf Storage v3.0, UBIX)
    assert row["read_GiBps"] == pytest.approx(443.7, rel=0.10)
    # tokens per second are the bytes over the model's KV bytes per token
    per_token = model_catalog()["llama-3.1-8b"].kv_bytes_per_token_total("bf16")
    assert row["read_tokens_per_s"] == pytest.approx(row["read_GiBps"] * GIB / per_token, rel=1e-12)
    assert row["write_tokens_per_s"] == pytest.approx(row["write_GiBps"] * GIB / per_token, rel=1e-12)
    # p95 of reads and of writes apart, and within what all transfers span
    assert 0 < row["read_latency_p95_ms"] <= row["latency_p99_ms"] * 1.5
    assert row["write_latency_p95_ms"] > 0


BAD = """
name: b
duration: 1 s
block_size: 8 MiB
{extra}
submission:
  product_nodes:
    - quantity: 2
      networking: [{{speed: 400, unit_count: 2, traffic: [{traffic}]}}]
      drives: [{{unit_count: 8, capacity_in_GB: 1000, performance: {{seq_read_MBps: 7000, seq_write_MBps: {write}}}}}]
  clients:
    - quantity: 2
      networking: [{{speed: 200, unit_count: 1}}]
"""


@pytest.mark.parametrize("extra, traffic, write, message", [
    ("", "management", 3000, "submission.product_nodes[0].networking: no networking entry carries data"),
    ("", "data", -1, "submission.product_nodes[0].drives[0].performance.seq_write_MBps"),
    ("clients: {node: h20-8x}", "data", 3000, "submission: give either submission: or clients: and pool:"),
    ("model: no-such-model", "data", 3000, "model: "),
])
def test_bad_submissions_get_one_clear_message(extra, traffic, write, message):
    with pytest.raises(SpecError) as caught:
        parse_storage_bench(BAD.format(extra=extra, traffic=traffic, write=write), "bench.yaml")
    problems = caught.value.problems
    assert len(problems) == 1 and problems[0].startswith("bench.yaml:") and message in problems[0], problems


def test_a_small_submission_runs_at_its_closed_form():
    # (a warm-up staggers the clients' starts: started together they would pay their latency in lock step)
    text = BAD.format(extra="read_fraction: 1.0\nconcurrency: 8\nwarmup: 0.1 s", traffic="data", write=3000)
    client_group = "    - quantity: {}\n      networking: [{{speed: 200"
    one_client = text.replace(client_group.format(2), client_group.format(1))
    row = run_bench_point(parse_storage_bench(one_client, "bench.yaml").points[0])
    # one client's 200 Gb/s port at RDMA's 0.975 binds: below a storage port's 400 Gb/s x 0.806 (a
    # client reaches each storage node through one of its ports) and a node's 8 x 7 GB/s of drives
    assert row["read_GiBps"] * GIB == pytest.approx(25e9 * 0.975, rel=1e-6)
