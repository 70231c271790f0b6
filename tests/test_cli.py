"""The command line on valid input: ``kvsim validate``, ``kvsim run`` and its result files, ``kvsim catalog``.

Scenarios are tiny (20 s simulated, 1 instance per system, a low Poisson rate) so a run takes
well under a second.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re

import pandas as pd
import pytest
import yaml

import kvsim
from kvsim.cli import main
from kvsim.units import parse_quantity

SCENARIO = """\
name: cli-tiny
seed: 11
duration: 20 s
warmup: 5 s
model: qwen3-8b
dtype: bf16
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: lognormal, median: 256, sigma: 0.5, max: 1024}
  output_tokens: {kind: lognormal, median: 64, sigma: 0.5, max: 256}
slo: {ttft_p99: 2 s, tpot_p99: 100 ms}
systems:
  h20: {node: h20-8x, instances: 1, instance: {tp: 1}}
  l20: {node: l20-8x, instances: 1, instance: {tp: 1}}
compare: {baseline: l20}
"""
DURATION, WARMUP = 20.0, 5.0
SWEEP = "sweep:\n  workload.arrival.rate: [1/s, 3/s]\n"

SCALAR_KEYS = ["requests_completed", "output_tokens_per_s", "input_tokens_per_s", "requests_per_s",
               "goodput_requests_per_s", "kv_utilization_mean"]
LATENCY_KEYS = ["ttft_s", "tpot_s", "e2e_s"]
STATS = ["mean", "p50", "p90", "p99"]


def _main(*argv) -> tuple[int, str, str]:
    """Run the CLI in-process, capturing stdout/stderr (usable from module-scoped fixtures)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse --version / errors
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """One `kvsim run --out DIR --seed 3` of the two-system scenario, shared by the tests below."""
    base = tmp_path_factory.mktemp("run")
    scenario = base / "tiny.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    out_dir = base / "out"
    rc, out, err = _main("run", scenario, "--out", out_dir, "--seed", "3")
    return {"rc": rc, "stdout": out, "stderr": err, "out": out_dir}


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("sweep")
    scenario = base / "tiny_sweep.yaml"
    scenario.write_text(SCENARIO + SWEEP, encoding="utf-8")
    out_dir = base / "out"
    rc, out, err = _main("run", scenario, "--out", out_dir, "--seed", "3")
    return {"rc": rc, "stdout": out, "stderr": err, "out": out_dir}


def _check_metrics(metrics: dict) -> None:
    """Every required key present, numbers finite, percentiles ordered, rates consistent."""
    for key in SCALAR_KEYS + LATENCY_KEYS:
        assert key in metrics, key
    for key in SCALAR_KEYS:
        value = metrics[key]
        assert isinstance(value, (int, float)) and not isinstance(value, bool), (key, value)
        assert math.isfinite(value) and value >= 0, (key, value)
    assert isinstance(metrics["requests_completed"], int)
    assert metrics["requests_completed"] > 0
    # completions per second of the measurement window
    assert metrics["requests_per_s"] == pytest.approx(metrics["requests_completed"] / (DURATION - WARMUP))
    assert metrics["goodput_requests_per_s"] <= metrics["requests_per_s"] + 1e-12
    assert metrics["output_tokens_per_s"] > 0 and metrics["input_tokens_per_s"] > 0
    assert 0 < metrics["kv_utilization_mean"] <= 1
    for key in LATENCY_KEYS:
        stats = metrics[key]
        assert set(STATS) <= set(stats), (key, stats)
        for stat in STATS:
            assert isinstance(stats[stat], float) and math.isfinite(stats[stat]) and stats[stat] > 0, (key, stats)
        assert stats["p50"] <= stats["p90"] <= stats["p99"], (key, stats)
    # a request's first token comes no later than its last
    assert metrics["ttft_s"]["p50"] <= metrics["e2e_s"]["p99"]
    assert metrics["ttft_s"]["mean"] <= metrics["e2e_s"]["mean"]


# --------------------------------------------------------------------------- validate


def test_validate_prints_per_system_sizing(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    rc, out, err = _main("validate", path)
    assert rc == 0, err
    assert err == ""
    assert "valid scenario 'cli-tiny'" in out
    assert "2 system(s)" in out and "1 sweep point(s)" in out
    lines = {line.strip().split(":")[0]: line for line in out.splitlines()[1:-3]}
    assert set(lines) == {"h20", "l20"}
    # the run's cost: 1 point x 2 systems x 1 replication, requests drawn as the run draws them,
    # and the cost model's CPU time (kvsim/plan/cost_model.py)
    assert "cost: 1 point(s) x 2 system(s) x 1 replication(s) = 2 system run(s)" in out.splitlines()[-3]
    assert "requests simulated in all" in out.splitlines()[-2]
    assert "estimated CPU time" in out.splitlines()[-1] and "benchmarks/cost_rates.py" in out.splitlines()[-1]
    assert "1 x h20-8x" in lines["h20"] and "1 x l20-8x" in lines["l20"]
    for line in lines.values():
        assert "tp=1" in line and "qwen3-8b bf16" in line
        assert "weights/card" in line and "tokens/instance" in line
    # a 48 GB L20 leaves a smaller KV pool than a 96 GB H20 for the same weights
    tokens = {name: int(re.search(r"= ([\d,]+) tokens/instance", line).group(1).replace(",", ""))
              for name, line in lines.items()}
    assert tokens["h20"] > tokens["l20"] > 0


# --------------------------------------------------------------------------- run: table


def test_run_exits_0_and_prints_a_ratio_table(single_run):
    assert single_run["rc"] == 0, single_run["stderr"]
    assert "Traceback" not in single_run["stderr"]
    table = single_run["stdout"]
    header = next(line for line in table.splitlines() if line.startswith("system "))
    # one row per system, metrics as columns; goodput relative to the baseline, l20 from compare:
    assert header.split()[:3] == ["system", "req/s", "goodput"] and "goodput/l20" in header.split()
    assert "l20 = 1x l20, 1 inst tp1 (baseline)" in table
    assert "seed 3" in table
    assert re.search(r"\d+\.\d\dx", table), "ratio cells look like 1.23x"
    assert "results written:" in table


def test_table_ratio_matches_the_summary(single_run):
    # each system's row: requests/s second, then the other metrics; h20's goodput/l20 after them
    lines = {line.split()[0]: line.split() for line in single_run["stdout"].splitlines()
             if line.split() and line.split()[0] in ("h20", "l20")}
    h20, l20 = lines["h20"][1], lines["l20"][1]
    summary = json.loads((single_run["out"] / "summary.json").read_text())
    rps = {name: summary["points"][0]["systems"][name]["requests_per_s"] for name in ("h20", "l20")}
    good = {name: summary["points"][0]["systems"][name]["goodput_requests_per_s"] for name in ("h20", "l20")}
    ratio = lines["h20"][12]
    # a flagged system's numbers (not steady state) carry a mark
    flagged = {name: bool(summary["points"][0]["systems"][name]["flags"]) for name in ("h20", "l20")}
    assert h20.endswith("*") == flagged["h20"] and l20.endswith("*") == flagged["l20"]
    assert ratio.endswith("*") == (flagged["h20"] or flagged["l20"])
    assert float(h20.rstrip("*")) == pytest.approx(rps["h20"], abs=0.006)
    assert float(l20.rstrip("*")) == pytest.approx(rps["l20"], abs=0.006)
    assert ratio.rstrip("*") == f"{good['h20'] / good['l20']:.2f}x"


# --------------------------------------------------------------------------- run: summary.json


def test_summary_json_top_level(single_run):
    summary = json.loads((single_run["out"] / "summary.json").read_text(encoding="utf-8"))
    assert summary["scenario"] == "cli-tiny"
    assert summary["seed"] == 3  # --seed overrides the file's seed 11
    assert summary["kvsim_version"] == kvsim.__version__
    assert summary["format"] == 2 and summary["system_names"] == ["h20", "l20"]
    # no sweep: still a list of points, the one point with empty params
    assert len(summary["points"]) == 1 and summary["points"][0]["params"] == {}
    assert set(summary["points"][0]["systems"]) == {"h20", "l20"}


def test_summary_json_metrics(single_run):
    summary = json.loads((single_run["out"] / "summary.json").read_text(encoding="utf-8"))
    for name, metrics in summary["points"][0]["systems"].items():
        assert isinstance(metrics, dict), name
        _check_metrics(metrics)


# --------------------------------------------------------------------------- run: requests.parquet


def test_requests_parquet(single_run):
    frame = pd.read_parquet(single_run["out"] / "requests.parquet")
    for column in ["system", "arrival_s", "first_token_s", "finish_s", "input_tokens", "output_tokens",
                   "preemptions"]:
        assert column in frame.columns, column
    assert set(frame["system"]) == {"h20", "l20"}
    by_system = {name: group.reset_index(drop=True) for name, group in frame.groupby("system")}
    # one row per request per system: both systems serve the same open-loop request stream
    assert len(by_system["h20"]) == len(by_system["l20"]) > 0
    for column in ("arrival_s", "input_tokens", "output_tokens"):
        assert by_system["h20"][column].tolist() == by_system["l20"][column].tolist(), column
    assert frame["arrival_s"].between(0, DURATION, inclusive="left").all()
    assert (frame["input_tokens"] >= 1).all() and (frame["input_tokens"] <= 1024).all()
    assert (frame["output_tokens"] >= 1).all() and (frame["output_tokens"] <= 256).all()
    assert (frame["preemptions"] >= 0).all()
    # milestones in order wherever they were reached
    first = frame.dropna(subset=["first_token_s"])
    assert len(first) > 0
    assert (first["first_token_s"] >= first["arrival_s"]).all()
    done = frame.dropna(subset=["finish_s"])
    assert done["first_token_s"].notna().all()
    assert (done["finish_s"] >= done["first_token_s"]).all()
    # the summary's completed count is the rows that finished inside the window [warmup, duration]
    # (the run drains after the window, so some rows finish later and do not count)
    summary = json.loads((single_run["out"] / "summary.json").read_text(encoding="utf-8"))
    for name, group in by_system.items():
        completed = int(group["finish_s"].between(WARMUP, DURATION).sum())
        assert completed == summary["points"][0]["systems"][name]["requests_completed"], name
    # after the drain every request has finished
    assert frame["finish_s"].notna().all()


# --------------------------------------------------------------------------- run: scenario.yaml


def test_resolved_scenario_yaml(single_run):
    resolved = yaml.safe_load((single_run["out"] / "scenario.yaml").read_text(encoding="utf-8"))
    assert resolved["name"] == "cli-tiny"
    assert resolved["seed"] == 3  # the seed actually used, not the file's 11
    # quantities are written as SI unit strings, so the file is itself a valid scenario
    assert parse_quantity(resolved["duration"], "time") == DURATION
    assert parse_quantity(resolved["warmup"], "time") == WARMUP
    assert parse_quantity(resolved["workload"]["arrival"]["rate"], "rate") == 2.0
    assert parse_quantity(resolved["slo"]["tpot_p99"], "time") == pytest.approx(0.1)
    assert set(resolved["systems"]) == {"h20", "l20"}
    parts = resolved["catalog"]
    assert set(parts["accelerators"]) == {"h20", "l20"}
    assert set(parts["nodes"]) == {"h20-8x", "l20-8x"}
    assert set(parts["models"]) == {"qwen3-8b"}
    # resolved parts carry numbers and sources, not just names
    h20_bytes = parse_quantity(parts["accelerators"]["h20"]["memory_bytes"], "bytes")
    assert h20_bytes > parse_quantity(parts["accelerators"]["l20"]["memory_bytes"], "bytes") > 0
    assert parts["accelerators"]["h20"]["sources"]["memory_bandwidth"]


# --------------------------------------------------------------------------- run: sweep


def test_sweep_run_writes_one_entry_per_point(sweep_run):
    assert sweep_run["rc"] == 0, sweep_run["stderr"]
    summary = json.loads((sweep_run["out"] / "summary.json").read_text(encoding="utf-8"))
    assert summary["seed"] == 3
    assert summary["system_names"] == ["h20", "l20"]
    assert [p["params"] for p in summary["points"]] == [{"workload.arrival.rate": "1/s"},
                                                         {"workload.arrival.rate": "3/s"}]
    for name in ("h20", "l20"):
        entries = [{"params": p["params"], **p["systems"][name]} for p in summary["points"]]
        assert len(entries) == 2, name
        assert [e["params"] for e in entries] == [{"workload.arrival.rate": "1/s"},
                                                  {"workload.arrival.rate": "3/s"}]
        for entry in entries:
            _check_metrics(entry)
        # three times the load completes more requests in the same window
        assert entries[1]["requests_completed"] > entries[0]["requests_completed"]


def test_sweep_run_table_and_requests(sweep_run):
    table = sweep_run["stdout"]
    rows = [line.split()[:2] for line in table.splitlines() if line.split()]
    assert rows.count(["1/s", "h20"]) == rows.count(["1/s", "l20"]) == 1  # the swept rate, then the system
    assert rows.count(["3/s", "h20"]) == rows.count(["3/s", "l20"]) == 1
    assert ["rate", "system"] in rows
    frame = pd.read_parquet(sweep_run["out"] / "requests.parquet")
    assert set(frame["point"]) == {0, 1}
    assert set(frame.groupby(["system", "point"]).size().index) == {("h20", 0), ("h20", 1), ("l20", 0), ("l20", 1)}
    counts = frame.groupby("point").size()
    assert counts[1] > counts[0]


# --------------------------------------------------------------------------- run: default --out


def test_default_out_is_results_scenario_name_under_cwd(tmp_path, monkeypatch):
    scenario = tmp_path / "elsewhere" / "tiny.yaml"
    scenario.parent.mkdir()
    scenario.write_text(SCENARIO, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    rc, out, err = _main("run", scenario)
    assert rc == 0, err
    out_dir = tmp_path / "results" / "cli-tiny"
    for name in ("summary.json", "requests.parquet", "scenario.yaml"):
        assert (out_dir / name).is_file(), name
    assert not (scenario.parent / "results").exists()  # relative to the CWD, not the scenario file
    # without --seed, the file's seed is used
    assert json.loads((out_dir / "summary.json").read_text())["seed"] == 11


# --------------------------------------------------------------------------- catalog


def test_catalog_lists_parts():
    rc, out, err = _main("catalog")
    assert rc == 0, err
    names = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert {"h20", "l20", "h20-8x", "l20-8x", "nvme-storage-16x", "qwen3-8b"} <= names
    assert "accelerators:" in out and "nodes:" in out and "pool_nodes:" in out and "models:" in out
    # a pool node's line: its medium, capacity, bandwidths and how it is reached, with units
    line = next(line for line in out.splitlines() if line.split() and line.split()[0] == "nvme-storage-16x")
    assert "NVME 224 TiB" in line and "GB/s" in line and "2 x 200 Gbit/s NIC" in line


def test_catalog_one_family():
    rc, out, err = _main("catalog", "models")
    assert rc == 0, err
    names = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert "qwen3-8b" in names and "h20" not in names


def test_catalog_json_carries_sources():
    rc, out, err = _main("catalog", "--json")
    assert rc == 0, err
    payload = json.loads(out)
    assert set(payload) == {"accelerators", "nodes", "pool_nodes", "models"}
    assert {"h20", "l20"} <= set(payload["accelerators"])
    assert "qwen3-8b" in payload["models"]
    for family, entries in payload.items():
        for name, entry in entries.items():
            assert "sources" in entry, (family, name)
    for family, name in (("accelerators", "h20"), ("accelerators", "l20"), ("models", "qwen3-8b")):
        assert payload[family][name]["sources"], (family, name)


def test_version_flag():
    rc, out, err = _main("--version")
    assert rc == 0
    assert kvsim.__version__ in out
