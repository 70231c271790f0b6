"""Storage benchmark mode: delivered throughput against the hand-computed bottleneck, and where
GPU-Direct beats the host-bounce path (small I/Os, busy host memory) and where it does not."""

from __future__ import annotations

import pytest

from kvsim.cli import main
from kvsim.scenario.storage_bench import load_storage_bench, parse_storage_bench
from kvsim.sim.storage_bench import run_storage_bench
from kvsim.yaml_io import SpecError

GIB = 2**30
BASE = """
name: t
duration: 0.12 s
warmup: 0.02 s
clients: {node: h20-8x, nodes: 1}
pool: {pool_node: nvme-storage-16x, nodes: 1}
block_size: 8 MiB
concurrency: 2
"""


def bench(extra: str = "") -> list[dict]:
    return run_storage_bench(parse_storage_bench(BASE + extra))


def test_large_reads_deliver_the_pool_media_rate():
    # 16 flows (8 cards x 2) of 8 MiB reads: the pool node's media (37.5 GiB/s) binds before its
    # two 200G NICs (46.6 GiB/s) and the client's four 400G NICs.
    [row] = bench()
    assert row["bottleneck"] == "pool0/media->pool0/pcie"
    assert row["total_GiBps"] == pytest.approx(37.5, rel=0.02)
    assert row["write_GiBps"] == 0.0


def test_small_writes_deliver_the_write_iops_ceiling():
    # 4 KiB writes: 16 x 250 K = 4 M IOPS x 4 KiB = 16.4 GB/s = 15.26 GiB/s, below the 20 GiB/s
    # write bandwidth; each 8 MiB block is 2048 I/Os (64 waves of 32: ~5.6 ms, shorter than its
    # 8.2 ms share of the IOPS), so the ceiling binds, not the queue depth.
    [row] = bench("read_fraction: 0.0\nio_size: 4 KiB\n")
    assert row["bottleneck"] == "pool0/media->write_iops"
    assert row["total_GiBps"] == pytest.approx(4e6 * 4096 / GIB, rel=0.02)
    assert row["kiops"] == pytest.approx(4e3, rel=0.02)


def test_small_host_bounce_reads_deliver_the_cpu_staging_rate():
    # Bounced 4 KiB reads: 8 threads / (1/10 GB/s + 5 us / 4 KiB) = 6.06 GB/s = 5.64 GiB/s.
    [row] = bench("gpu_direct: false\nio_size: 4 KiB\n")
    assert row["bottleneck"] == "client0/cpu->staging"
    assert row["total_GiBps"] == pytest.approx(8 / (1 / 10e9 + 5e-6 / 4096) / GIB, rel=0.02)


def test_gpu_direct_wins_on_small_ios_and_busy_host_memory_but_not_on_large_blocks_idle_host():
    rows = bench("sweep:\n  io_size: [4 KiB, 8 MiB]\n  host_memory_load: [0.0, 0.9]\n  gpu_direct: [true, false]\n")
    by = {(r["param:io_size"], r["param:host_memory_load"], r["param:gpu_direct"]): r for r in rows}
    ratio = {key[:2]: by[key[:2] + (False,)]["total_GiBps"] / by[key[:2] + (True,)]["total_GiBps"] for key in by}
    # large blocks, idle host: the bounce is as fast (both bound by the pool media)
    assert ratio[("8 MiB", 0.0)] == pytest.approx(1.0, abs=0.01)
    # small I/Os: the bounce is CPU-bound at 5.64 GiB/s; GPU-Direct is bound by its queue depth:
    # 2048 I/Os per block in 64 waves of 86 us (80 us media, 3 us fabric, 3 PCIe hops), so 16
    # flows x 8 MiB / 5.5 ms = 22.7 GiB/s -- four times the bounce
    latency = 80e-6 + 3e-6 + 3e-6
    assert by[("4 KiB", 0.0, True)]["total_GiBps"] == pytest.approx(16 * 8 * 2**20 / (64 * latency) / GIB, rel=0.02)
    assert ratio[("4 KiB", 0.0)] < 0.3
    # busy host memory: 10% of 614.4 GB/s left, and the bounce crosses it four times per byte
    # (NIC -> DRAM, the staging copy's read and write, DRAM -> GPU): 15.4 GB/s = 14.3 GiB/s
    assert by[("8 MiB", 0.9, False)]["total_GiBps"] == pytest.approx(0.1 * 614.4e9 / 4 / GIB, rel=0.02)
    assert by[("8 MiB", 0.9, False)]["bottleneck"] == "client0/imc->client0/ddr"
    assert by[("8 MiB", 0.9, True)]["total_GiBps"] == pytest.approx(by[("8 MiB", 0.0, True)]["total_GiBps"])
    # latency follows: a bounced small-I/O block waits longer
    assert by[("4 KiB", 0.0, False)]["latency_p50_ms"] > 3 * by[("4 KiB", 0.0, True)]["latency_p50_ms"]


def test_bad_bench_files_name_the_field(tmp_path, capsys):
    with pytest.raises(SpecError) as err:
        parse_storage_bench(BASE.replace("nvme-storage-16x", "nope") + "io_size: 0 KiB\n", "b.yaml")
    assert "b.yaml:" in err.value.problems[0] and "io_size" in err.value.problems[0]
    with pytest.raises(SpecError) as err:
        parse_storage_bench(BASE.replace("nvme-storage-16x", "nope"), "b.yaml")
    assert "pool.pool_node" in err.value.problems[0] and "unknown pool node" in err.value.problems[0]
    path = tmp_path / "b.yaml"
    path.write_text(BASE + "read_fraction: 2\n")
    assert main(["storage", str(path)]) == 2
    assert "read_fraction" in capsys.readouterr().err


def test_cli_writes_the_table(tmp_path, capsys):
    path = tmp_path / "b.yaml"
    path.write_text(BASE.replace("0.12 s", "0.03 s").replace("0.02 s", "0.01 s"))
    assert main(["storage", str(path), "--out", str(tmp_path / "out")]) == 0
    assert "total_GiBps" in capsys.readouterr().out
    assert (tmp_path / "out" / "storage_bench.csv").read_text().count("\n") == 2


def test_every_shipped_storage_bench_validates(repo_root):
    # storage benchmarks live apart from scenarios (scenarios/storage/), in their own format
    files = sorted((repo_root / "scenarios" / "storage").glob("*.yaml"))
    assert files
    for path in files:
        assert load_storage_bench(path).points


def test_a_benchmark_file_that_is_not_utf8_is_one_clear_error(tmp_path, capsys):
    from kvsim.cli import main

    path = tmp_path / "bad.yaml"
    path.write_bytes(b"name: x\n\xff\xfe")
    assert main(["storage", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not a UTF-8 text file" in err and "Traceback" not in err
