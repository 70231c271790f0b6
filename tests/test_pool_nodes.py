"""The shipped pool nodes of today against published delivered bandwidth (issue 24, item 4).

Each check runs the storage benchmark file that docs/storage_bench.md quotes, on the transfer layer
only, and holds kvsim's delivered GiB/s within +-10 % of the published figure. The figures the
catalog entries are built from are not the figures checked: nvme-gen5-16x takes its drives from
the submission's datasheet figures and its NIC efficiency from 3FS, and is checked against UBIX's
own results. dram-pool-l35 takes Mooncake's DRAM rate on one host; carried to another host by the
channels' peak it misses that host's measurement, and the tests hold the arithmetic that says why
(docs/storage_bench.md). 3FS's KVCache client is checked against the peak its README plots. HPE's
K3000 KV-cache submission is a miss the model cannot explain: the test holds kvsim's figure to the
storage NICs' closed form and the published one outside +-10 % of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.hardware import pool_node_catalog
from kvsim.scenario.storage_bench import load_storage_bench
from kvsim.sim.storage_bench import run_bench_point

ROOT = Path(__file__).resolve().parent.parent
GIB = 2.0**30


def _rows(name: str, reads_only: bool = False) -> list[dict]:
    bench = load_storage_bench(ROOT / "scenarios" / "storage" / name)
    return [run_bench_point(point) for point in bench.points
            if not reads_only or point.spec.read_fraction == 1.0]


def test_gen5_nvme_pool_node_delivers_the_published_ubix_figures():
    training, kv_cache = _rows("ubix_ubipower18000.yaml")
    # MLPerf Storage v3.0 closed, UBIX UbiPower 18000, 3 storage nodes x 4 NDR400: training read
    # 454.1 GiB/s; KV-cache read 443.7 GiB/s (industry newsletter; rank 0's result file agrees)
    assert training["read_GiBps"] == pytest.approx(454.1, rel=0.10)
    assert kv_cache["read_GiBps"] == pytest.approx(443.7, rel=0.10)
    # and for the reason the model gives: the storage NICs at 0.806 of line rate (3FS), not the
    # drives (16 x 14.5 GB/s per node) nor the clients' 16 x 400 Gb/s
    line_GiBps = 3 * 4 * 50e9 / GIB
    assert training["read_GiBps"] == pytest.approx(line_GiBps * 0.806, rel=1e-3)
    assert "pool" in training["bottleneck"] and "nic" in training["bottleneck"]
    node = pool_node_catalog()["nvme-gen5-16x"]
    assert node.read_bandwidth == 16 * 14_500e6 and node.nics.efficiency == 0.806


def test_dram_pool_node_on_its_own_host_is_media_bound_and_its_transfer_to_p5en_is_a_closed_form():
    rows = {(row["param:pool.pool_node"], row["read_fraction"]): row for row in _rows("dram_pool_l35.yaml")}
    # on the host its figures come from, the media bind (circular: only the NICs are checked)
    assert rows["dram-pool-l35", 1.0]["read_GiBps"] * GIB == pytest.approx(270e9, rel=1e-3)
    assert rows["dram-pool-l35", 0.0]["write_GiBps"] * GIB == pytest.approx(283e9, rel=1e-3)
    # p5en-dram is the node's figures times the channels' peak, 614.4 / 716.8 GB/s, and the bench
    # delivers exactly that (media-bound; 16 x 200 Gb/s x 0.975 = 390 GB/s of NICs not reached).
    # It is NOT a reproduction of Mooncake's p5en measurement (212.18 read, 213.57 write GB/s):
    # the write lands 13.5 % high, and the scaling it rests on is refuted by Mooncake's own hosts
    # (docs/storage_bench.md, "Why the two pool checks miss").
    scale = 614.4 / 716.8
    assert rows["p5en-dram", 1.0]["read_GiBps"] * GIB == pytest.approx(270.47e9 * scale, rel=1e-3)
    assert rows["p5en-dram", 0.0]["write_GiBps"] * GIB == pytest.approx(282.93e9 * scale, rel=1e-3)
    assert "media" in rows["p5en-dram", 1.0]["bottleneck"]


def test_channel_peak_scaling_cannot_transfer_a_dma_to_dram_figure_between_hosts():
    """Mooncake's CPU-to-CPU EFA figures (efa_transport.md @ 3b5a5941, measured, 1 MiB blocks) over
    each host's DDR channel peak: if what NIC DMA draws from DRAM were a fixed share of the channels'
    peak, these shares would agree; they spread by 2.5x, so no host's figure predicts another's."""
    write_GBps = {"p6-b300 (2 x 8559C, 16 x DDR5-5600)": (282.93, 16 * 5600e6 * 8 / 1e9),
                  "p5en (2 x 8488C, 16 x DDR5-4800)": (213.57, 16 * 4800e6 * 8 / 1e9),
                  "p5 (2 x EPYC 7R13, 16 x DDR4-3200)": (63.60, 16 * 3200e6 * 8 / 1e9)}
    shares = {host: measured / peak for host, (measured, peak) in write_GBps.items()}
    assert shares["p6-b300 (2 x 8559C, 16 x DDR5-5600)"] == pytest.approx(0.395, abs=1e-3)
    assert shares["p5en (2 x 8488C, 16 x DDR5-4800)"] == pytest.approx(0.348, abs=1e-3)
    assert shares["p5 (2 x EPYC 7R13, 16 x DDR4-3200)"] == pytest.approx(0.155, abs=1e-3)
    assert max(shares.values()) / min(shares.values()) > 2.5
    # even between the two DDR5 Xeons the shares differ by more than the +-10 % a check allows
    assert shares["p6-b300 (2 x 8559C, 16 x DDR5-5600)"] / shares["p5en (2 x 8488C, 16 x DDR5-4800)"] > 1.10


def test_3fs_kvcache_client_ceiling_sits_just_above_the_published_peak():
    (row,) = _rows("threefs_kvcache_client.yaml")
    # 3FS README (deepseek-ai/3FS @ e2cef822): each dot of its KVCache plot is one client's sampled
    # read rate in production, the "Peak Read" line the highest client per sample: "up to 40 GiB/s"
    # in the text, 42.2 GiB/s at the line's top as read off docs/images/kvcache_read_throughput.png.
    # A peak of samples is a lower bound on a client's ceiling: kvsim's must not be below it.
    plotted_peak_GiBps = 42.2
    assert row["read_GiBps"] >= plotted_peak_GiBps
    assert row["read_GiBps"] == pytest.approx(plotted_peak_GiBps, rel=0.10)
    # and the ceiling is the client's one 400 Gb/s NIC at RDMA's delivered 0.975 of line rate
    assert row["read_GiBps"] == pytest.approx(50e9 * 0.975 / GIB, rel=1e-3)
    assert "client0/nic0" in row["bottleneck"]


def test_hpe_k3000_kv_cache_submission_misses_by_twice_at_the_storage_nics_ceiling():
    (row,) = _rows("hpe_k3000_kv_cache_submission.yaml")
    # kvsim: the 4 servers' 8 x 400 Gb/s data ports at the 3FS efficiency (the drives, 16 x 13 GB/s
    # per server from the PM1743 datasheet, and the 16 clients' 400 Gb/s ports are not reached)
    storage_ports_GiBps = 4 * 2 * 50e9 / GIB
    assert row["read_GiBps"] == pytest.approx(storage_ports_GiBps * 0.806, rel=1e-3)
    assert "pool" in row["bottleneck"] and "nic" in row["bottleneck"]
    # MLPerf Storage v3.0, closed/HPE/results/K3000-kvcache, option 1 trial 0: the 32 ranks' read
    # bandwidths summed = 149.7 GiB/s (0.40 of the ports' line rate). A miss, not a match: kvsim is
    # about twice the published figure (docs/storage_bench.md, "HPE K3000 misses by 2x")
    published_read_GiBps = 149.7
    assert row["read_GiBps"] / published_read_GiBps == pytest.approx(2.006, abs=0.01)
    assert row["read_GiBps"] != pytest.approx(published_read_GiBps, rel=0.10)
