"""Replications (``replications: N``) and their statistics (kvsim/metrics/replicas.py), and the one
``summary.json`` shape (format 2) with and without a sweep.

The interval is checked in closed form against Student t quantiles from the standard table
(t_{0.975, 1} = 12.706205, t_{0.975, 4} = 2.776445; e.g. NIST/SEMATECH e-Handbook of Statistical
Methods, section 1.3.6.7.2, "Critical values of the Student's t distribution").
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import kvsim
from kvsim.metrics.replicas import headline_metrics, replica_statistics, t_interval
from kvsim.metrics.summary import LATENCY_KEYS, SCALAR_KEYS
from kvsim.plan import run_sweep
from kvsim.rng import replica_seed

SCENARIO = """\
name: reps
seed: 8
duration: 10 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 3/s}
  input_tokens: {kind: lognormal, median: 200, sigma: 0.5, max: 800}
  output_tokens: {kind: lognormal, median: 40, sigma: 0.5, max: 160}
systems:
  h20: {node: h20-8x, instances: 1}
  l20: {node: l20-8x, instances: 1}
"""


# --------------------------------------------------------------------------- closed form


def test_t_interval_of_one_to_five():
    # mean 3, sample variance 2.5 (sum of squares 10 over 4), half width t_{.975,4} s / sqrt 5
    got = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    half = 2.776445 * math.sqrt(2.5) / math.sqrt(5)
    assert got["n"] == 5 and got["mean"] == 3.0 and got["std"] == pytest.approx(math.sqrt(2.5))
    assert got["half_width"] == pytest.approx(half, rel=1e-6)
    assert (got["ci_low"], got["ci_high"]) == pytest.approx((3.0 - half, 3.0 + half), rel=1e-6)


def test_t_interval_of_two_values_uses_one_degree_of_freedom():
    # s = sqrt(2), so half width = t_{.975,1} sqrt(2) / sqrt(2) = t_{.975,1}
    got = t_interval([0.0, 2.0])
    assert got["mean"] == 1.0 and got["half_width"] == pytest.approx(12.706205, rel=1e-6)


def test_t_interval_without_spread_or_values():
    assert t_interval([4.0]) == {"n": 1, "mean": 4.0, "std": None, "half_width": None, "ci_low": None,
                                 "ci_high": None}
    assert t_interval([None, float("nan")])["n"] == 0
    assert t_interval([2.0, None, 4.0])["n"] == 2  # a replica without the metric is left out
    same = t_interval([7.0, 7.0, 7.0])
    assert same["half_width"] == 0.0 and same["ci_low"] == same["ci_high"] == 7.0


def test_headline_metrics_cover_scalars_and_latency_statistics():
    summary = {key: 1.5 for key in SCALAR_KEYS}
    summary.update({key: {"mean": 0.1, "p50": 0.2, "p90": 0.3, "p99": None} for key in LATENCY_KEYS})
    flat = headline_metrics(summary)
    assert set(flat) == set(SCALAR_KEYS) | {f"{k}_{s}" for k in LATENCY_KEYS for s in ("mean", "p50", "p90", "p99")}
    assert flat["ttft_s_p90"] == 0.3 and flat["ttft_s_p99"] is None


# --------------------------------------------------------------------------- seeds


def test_replica_zero_keeps_the_seed_and_the_others_are_distinct_and_stable():
    assert replica_seed(8, 0) == 8
    seeds = [replica_seed(8, r) for r in range(6)]
    assert len(set(seeds)) == 6 and all(0 <= s < 2 ** 63 for s in seeds)
    assert seeds == [replica_seed(8, r) for r in range(6)]
    assert replica_seed(9, 1) != replica_seed(8, 1)


# --------------------------------------------------------------------------- runs


@pytest.fixture(scope="module")
def replicated():
    return kvsim.run(kvsim.parse_scenario(SCENARIO + "replications: 3\n", "reps.yaml"))


def test_replica_zero_is_the_run_without_replications(replicated):
    plain = kvsim.run(kvsim.parse_scenario(SCENARIO, "reps.yaml"))
    assert replicated.records_digest() == plain.records_digest()
    assert [r.summary for r in replicated.runs] == [r.summary for r in plain.runs]
    assert len(replicated.replicas) == 4 and {r.replica for r in replicated.replicas} == {1, 2}
    arrivals = {r.replica: r.records.column("arrival_s") for r in replicated.all_runs() if r.system == "h20"}
    assert not np.array_equal(arrivals[0], arrivals[1]) and not np.array_equal(arrivals[1], arrivals[2])
    # within a replica both systems serve one request stream
    for rep in (1, 2):
        h20, l20 = (next(r for r in replicated.replicas if r.replica == rep and r.system == s) for s in ("h20", "l20"))
        assert np.array_equal(h20.records.column("arrival_s"), l20.records.column("arrival_s"))


def test_summary_gives_mean_and_interval_across_replicas(replicated):
    entry = replicated.summary_dict()["points"][0]["systems"]["l20"]
    runs = replicated.runs_of("l20", 0)
    assert entry["replicas"]["n"] == 3
    assert entry["replicas"]["seeds"] == [replica_seed(8, r) for r in range(3)]
    stats = entry["replicas"]["metrics"]
    values = [r.summary["requests_per_s"] for r in runs]
    assert stats["requests_per_s"] == t_interval(values)
    p99 = [r.summary["ttft_s"]["p99"] for r in runs]
    assert stats["ttft_s_p99"]["mean"] == pytest.approx(sum(p99) / 3)
    assert stats == replica_statistics([r.summary for r in runs])
    assert entry["requests_per_s"] == values[0]  # the entry's own metrics are replica 0's


def test_replications_run_the_same_on_worker_processes(replicated, tmp_path):
    scenario = kvsim.parse_scenario(SCENARIO + "replications: 3\n", "reps.yaml")
    result = run_sweep(scenario, tmp_path, workers=2, log=False)
    got = result.summary_dict()
    assert len(got["points"][0].pop("stored")) == 3  # one stored task per replica
    assert got == replicated.summary_dict()
    pd.testing.assert_frame_equal(result.requests_frame(), replicated.requests_frame())
    assert set(result.requests_frame()["replica"]) == {0, 1, 2}


def test_summary_csv_is_long_with_interval_rows(replicated, tmp_path):
    from kvsim.report import write_results

    write_results(replicated, tmp_path)
    frame = pd.read_csv(tmp_path / "summary.csv")
    assert list(frame.columns) == ["point", "system", "replica", "metric", "stat", "value"]
    values = frame[frame.stat == "value"]
    assert len(values.groupby(["system", "replica"])) == 6
    rps = values[(values.metric == "requests_per_s") & (values.system == "h20")].sort_values("replica")
    assert rps.value.tolist() == [r.summary["requests_per_s"] for r in replicated.runs_of("h20", 0)]
    mean = frame[(frame.stat == "mean") & (frame.metric == "requests_per_s") & (frame.system == "h20")]
    assert mean.value.item() == pytest.approx(rps.value.mean())
    assert frame[frame.stat != "value"].replica.isna().all()


# --------------------------------------------------------------------------- one shape


def _shape(value):
    """Keys all the way down (lists by their first item), values dropped; ``sweep`` and ``params``
    are mappings keyed by the swept fields, so only their type counts."""
    if isinstance(value, dict):
        return {k: "mapping" if k in ("sweep", "params") else _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value and isinstance(value[0], (dict, list)) else "list"
    return "value"


def test_summary_json_has_one_shape_with_and_without_a_sweep(tmp_path):
    from kvsim.report import write_results

    plain = kvsim.parse_scenario(SCENARIO, "reps.yaml")
    swept = plain.with_changes({"sweep": {"workload.arrival.rate": ["1/s", "2/s"]}})
    summaries = []
    for name, scenario in (("plain", plain), ("swept", swept)):
        write_results(run_sweep(scenario, tmp_path / name, workers=1, log=False), tmp_path / name)
        summaries.append(json.loads((tmp_path / name / "summary.json").read_text()))
    one, two = summaries
    assert one["format"] == two["format"] == 2
    assert len(one["points"]) == 1 and len(two["points"]) == 2
    assert one["points"][0]["params"] == {} and two["points"][1]["params"] == {"workload.arrival.rate": "2/s"}
    assert _shape(one) == _shape(two)
    for key in ("format", "scenario", "seed", "kvsim_version", "duration_s", "warmup_s", "baseline", "sweep",
                "replications", "system_names", "points"):
        assert key in one
    assert set(one["points"][0]) == {"index", "params", "seed", "systems", "stored"}


def test_the_table_adds_intervals_only_with_replications(replicated):
    table = kvsim.comparison_table(replicated)
    assert "mean +- 95% CI, 3 replications" in table
    row = next(line for line in table.splitlines() if line.startswith("h20") and "+-" in line)
    stats = replicated.summary_dict()["points"][0]["systems"]["h20"]["replicas"]["metrics"]["requests_per_s"]
    assert f"{stats['mean']:.2f} +- {stats['half_width']:.2f}" in row
    plain = kvsim.run(kvsim.parse_scenario(SCENARIO, "reps.yaml"))
    assert "+-" not in kvsim.comparison_table(plain)
