"""Node failures in a run (issue 26 item 10, the runtime half): the failure process against the
k-out-of-n closed form over many seeds, one end-to-end run whose failures are the process's,
requests retried and none lost, KV freed on the failed instances, both backends equal, a run
without failures unchanged, and the field's checks."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
import simpy

import kvsim
from kvsim.metrics.records import RequestRecords
from kvsim.plan.spares import prob_at_least
from kvsim.rng import RandomStreams
from kvsim.sim.failure_process import NodeFailureProcess, time_at_least_up, up_fraction
from kvsim.yaml_io import SpecError


def test_up_fraction_and_time_at_least_up_by_hand():
    # node a down [2, 5], node b down [4, 6]: over [0, 10] a is up 0.7, b 0.8; both up except
    # [2, 6] (0.6 of the time), at least one up except [4, 5] (0.9)
    down = [[[2.0, 5.0]], [[4.0, 6.0]]]
    assert up_fraction(down[0], 0.0, 10.0) == pytest.approx(0.7)
    assert up_fraction(down[1], 0.0, 10.0) == pytest.approx(0.8)
    assert time_at_least_up(down, 2, 2, 0.0, 10.0) == pytest.approx(0.6)
    assert time_at_least_up(down, 2, 1, 0.0, 10.0) == pytest.approx(0.9)
    # a window that cuts the intervals: [3, 8] -> a down [3, 5], b down [4, 6]
    assert time_at_least_up(down, 2, 2, 3.0, 8.0) == pytest.approx(2.0 / 5.0)
    assert up_fraction([[9.0, math.inf]], 0.0, 10.0) == pytest.approx(0.9)  # still down at the end


@pytest.mark.parametrize("distribution", ["fixed", "exponential"])
def test_failures_availability_matches_k_of_n_closed_form_over_many_seeds(distribution):
    # 6 nodes, each up 40 s on average and repaired in 10 s: A = 0.8 whatever the repair
    # distribution (alternating renewal), and the share of time at least k are up is
    # P[B(6, 0.8) >= k] with independent nodes. 20 seeds of ~400 cycles per node each: the
    # spread of the per-seed shares gives the standard error of their mean, which must be within
    # 4 of them of the closed form (a 1-in-15,000 chance of failing by luck per k).
    nodes, mean_up_s, repair_s = 6, 40.0, 10.0
    availability = mean_up_s / (mean_up_s + repair_s)
    horizon_s = 400 * (mean_up_s + repair_s)
    shares = {k: [] for k in range(1, nodes + 1)}
    node_up = []
    for seed in range(20):
        env = simpy.Environment()
        process = NodeFailureProcess(env, [f"node{k}" for k in range(nodes)], [1.0 / mean_up_s] * nodes, repair_s,
                                     distribution, RandomStreams(seed))
        env.run(until=horizon_s)
        for k in shares:
            shares[k].append(process.time_at_least_up(k, 0.0, horizon_s))
        node_up.append(np.mean(process.availability(0.0, horizon_s)))
        assert process.failures > nodes * 300
    for k, values in shares.items():
        closed = prob_at_least(nodes, k, availability)
        mean, error = float(np.mean(values)), float(np.std(values, ddof=1) / np.sqrt(len(values)))
        assert 0 < error < 0.01
        assert abs(mean - closed) < 4 * error + 1e-6, (k, mean, closed, error)
    error = float(np.std(node_up, ddof=1) / np.sqrt(len(node_up)))
    assert abs(np.mean(node_up) - availability) < 4 * error
    # a wrong model is far outside: all six as one block (all up 80 % of the time)
    assert abs(np.mean(shares[nodes]) - availability) > 20 * float(
        np.std(shares[nodes], ddof=1) / np.sqrt(len(shares[nodes])))


def test_each_node_draws_from_its_own_stream():
    # node1's failures are the same whether the system has 2 nodes or 5
    def node1_down(nodes):
        env = simpy.Environment()
        process = NodeFailureProcess(env, [f"node{k}" for k in range(nodes)], [0.01] * nodes, 20.0, "exponential",
                                     RandomStreams(4))
        env.run(until=5000.0)
        return process.down_intervals[1]

    assert node1_down(2) == node1_down(5) and len(node1_down(2)) > 10


RUN = """
name: failures
seed: {seed}
duration: {duration} s
warmup: 0 s
model: qwen3-1.7b
engine: {{backend: {backend}}}
workload:
  arrival: {{kind: poisson, rate: {rate}/s}}
  input_tokens: {{kind: uniform, low: 256, high: 2048}}
  output_tokens: {{kind: uniform, low: 8, high: 200}}
  timeout: {timeout}
slo: {{ttft_p99: 1 s, e2e_p99: 10 s}}
systems:
  {system}
"""

MIXED = """a:
    node: l20-8x
    nodes: 4
    instance: {{tp: 8}}
    failures: {failures}"""

PD = """pd:
    pools:
      prefill: {{node: l20-8x, nodes: 2, instance: {{tp: 4}}, role: prefill}}
      decode: {{node: l20-8x, nodes: 2, instance: {{tp: 4}}, role: decode}}
    failures: {failures}"""


def _run(system=MIXED, failures="{mtbf: 100 s, mtbf_cards: 8, repair: 30 s}", seed=3, duration=400, rate=4,
         timeout="null", backend="auto"):
    text = RUN.format(seed=seed, duration=duration, rate=rate, timeout=timeout, backend=backend,
                      system=system.format(failures=failures))
    return kvsim.run(kvsim.parse_scenario(text, "failures.yaml"))


def _check_conservation(run, lower_tiers=False):
    records = run.records
    finished = ~np.isnan(records.column("finish_s"))
    aborted = ~np.isnan(records.column("aborted_s"))
    rejected = ~np.isnan(records.column("rejected_s"))
    assert records.n > 0
    assert not (finished & aborted).any()
    assert (finished | aborted | rejected).all()  # every request finished or is reported given up
    f = run.summary["failures"]
    assert f["kv_blocks_at_rebuild"] == 0  # an instance serves again with an empty pool
    if not lower_tiers:  # no load in flight from a lower tier: the pages all came back at once
        assert f["kv_blocks_after_failure"] == 0
    retries = records.column("retries")
    lost = records.column("retry_lost_s")
    assert (lost[retries > 0] > 0).all() and (lost[retries == 0] == 0).all()
    assert f["retried_requests"] == int(np.count_nonzero(retries)) and f["retries"] == int(retries.sum())
    # a retried request's milestones are its last attempt's: admitted after it arrived plus the time lost
    admit = records.column("admit_s")
    done = finished & (retries > 0)
    assert (admit[done] >= records.column("arrival_s")[done] + lost[done] - 1e-9).all()
    return f


def test_a_run_with_failures_retries_loses_no_request_and_frees_the_failed_kv():
    result = _run(rate=6, duration=600)
    run = result.runs[0]
    f = _check_conservation(run)
    assert f["node_failures_total"] >= 10 and f["retried_requests"] >= 5
    # the run's failures are the process's: the same streams give the same down times
    env = simpy.Environment()
    alone = NodeFailureProcess(env, [f"node{k}" for k in range(4)], [1 / 100.0] * 4, 30.0, "fixed", RandomStreams(3))
    env.run(until=600.0)
    assert f["node_availability"] == pytest.approx(dict(zip(alone.nodes, alone.availability(0.0, 600.0))), abs=1e-12)
    assert f["time_at_least_nodes_up"]["3"] == pytest.approx(alone.time_at_least_up(3, 0.0, 600.0), abs=1e-12)
    # one instance per node, rebuilt at once: an instance is up exactly when its node is
    assert f["instance_availability"] == pytest.approx(list(f["node_availability"].values()), abs=1e-12)
    assert f["node_availability_expected"] == pytest.approx(100 / 130)
    # the timeline counts the nodes and instances up after each event
    for event in f["timeline"]:
        assert 0 <= event["instances_up"] <= event["nodes_up"] <= 4
    # the SLO met by retried requests and by the others, both measured
    for key in ("ttft_slo_met_retried", "ttft_slo_met_not_retried", "e2e_slo_met_retried", "e2e_slo_met_not_retried"):
        assert 0.0 <= f[key] <= 1.0
    assert f["retry_lost_s"] == pytest.approx(float(run.records.column("retry_lost_s").sum()))


def test_a_rebuild_keeps_an_instance_down_after_its_node():
    run = _run(failures="{mtbf: 100 s, mtbf_cards: 8, repair: 30 s, rebuild: 10 s}").runs[0]
    f = _check_conservation(run)
    nodes = list(f["node_availability"].values())
    assert all(i < n for i, n in zip(f["instance_availability"], nodes) if n < 1)


CACHED = """c:
    node: l20-8x
    nodes: 4
    instance: {{tp: 4}}
    router: cache_aware
    kv_cache: {{}}
    failures: {failures}"""


def test_a_failed_instance_loses_its_prefix_cache():
    text = RUN.format(seed=2, duration=200, rate=8, timeout="null", backend="auto",
                      system=CACHED.format(failures="{mtbf: 60 s, mtbf_cards: 8, repair: 20 s}"))
    text = text.replace("  input_tokens: {kind: uniform, low: 256, high: 2048}\n",
                        "  prefix: {kind: shared_documents, documents: 20, zipf_s: 1.0, document_tokens: {kind: fixed, "
                        "value: 1600}, suffix_tokens: {kind: uniform, low: 16, high: 400}}\n")
    run = kvsim.run(kvsim.parse_scenario(text, "failures.yaml")).runs[0]
    f = _check_conservation(run)  # its cached blocks too: the pool is empty once it is down
    assert f["node_failures_total"] > 5 and run.summary["cache"]["hit_rate"]["total"] > 0.3
    # two instances a node: the time series counts them, down two at a time
    counts = {row["instances_up"] for row in run.timeseries}
    assert counts <= {0, 2, 4, 6, 8} and min(counts) < 8


@pytest.mark.parametrize("timeout", ["null", "20 s"])
def test_disaggregated_failures_retry_from_the_prompt_and_lose_nothing(timeout):
    run = _run(system=PD, failures="{mtbf: 60 s, mtbf_cards: 8, repair: 20 s, repair_distribution: exponential}",
               rate=8, duration=300, timeout=timeout).runs[0]
    f = _check_conservation(run)
    assert f["retried_requests"] > 0
    records = run.records
    done = ~np.isnan(records.column("finish_s"))
    assert (records.column("prefill_instance")[done] >= 0).all() and (records.column("instance")[done] >= 0).all()


def test_both_backends_equal_with_failures():
    python = _run(system=PD, rate=6, duration=200, backend="python", failures="{mtbf: 60 s, mtbf_cards: 8, repair: 20 s}")
    compiled = _run(system=PD, rate=6, duration=200, backend="auto", failures="{mtbf: 60 s, mtbf_cards: 8, repair: 20 s}")
    assert python.runs[0].summary["failures"]["retries"] > 0
    assert python.records_digest() == compiled.records_digest()


TIERS = """t:
    node: l20-8x
    nodes: 4
    instance: {{tp: 4, memory_utilization: 0.4}}
    kv_cache: {{dram: {{capacity: 8 GiB}}, nvme: {{capacity: 20 GiB}}{more}}}
    failures: {failures}"""

DOCUMENTS = ("  prefix: {kind: shared_documents, documents: 200, zipf_s: 1.0, document_tokens: {kind: fixed, "
             "value: 4000}, suffix_tokens: {kind: uniform, low: 16, high: 400}}\n")


@pytest.mark.parametrize("more", ["", ", remote: {{pool_node: dram-pool-8x}}"])
def test_a_failed_node_loses_its_dram_and_nvme_tiers(more):
    # a node's DRAM and NVMe go with it (the remote pool, on its own nodes, keeps its blocks)
    text = RUN.format(seed=1, duration=120, rate=6, timeout="null", backend="auto",
                      system=TIERS.replace("{more}", more).format(
                          failures="{mtbf: 60 s, mtbf_cards: 8, repair: 20 s, rebuild: 2 s}"))
    text = text.replace("  input_tokens: {kind: uniform, low: 256, high: 2048}\n", DOCUMENTS).replace(
        "qwen3-1.7b", "qwen3-8b")
    run = kvsim.run(kvsim.parse_scenario(text, "failures.yaml")).runs[0]
    f = _check_conservation(run, lower_tiers=True)
    lost = f["cached_blocks_lost"]
    assert f["node_failures_total"] >= 3 and lost["hbm"] > 0
    if not more:
        assert lost["dram"] > 0 and lost["nvme"] > 0 and run.summary["cache"]["hit_rate"]["dram"] > 0
    else:
        assert run.summary["cache"]["hit_rate"]["remote"] > 0


@pytest.mark.parametrize("system", [MIXED, PD, TIERS.replace("{more}", ", write_policy: write_back")])
def test_coalesced_runs_equal_the_step_by_step_engine_through_failures(system):
    # a failure aborts requests in the middle of coalesced decode and prefill runs: they are cut
    # at the step in progress, as for a client timeout, and the records are the reference's
    failures = "{mtbf: 60 s, mtbf_cards: 8, repair: 20 s, rebuild: 3 s}"
    text = RUN.format(seed=4, duration=100 if "kv_cache" in system else 200, rate=6, timeout="30 s",
                      backend="python", system=system.format(failures=failures))
    if "kv_cache" in system:
        text = text.replace("  input_tokens: {kind: uniform, low: 256, high: 2048}\n", DOCUMENTS)
    stepwise = kvsim.run(kvsim.parse_scenario(text.replace("backend: python", "backend: python, coalesce: false"),
                                              "failures.yaml"))
    coalesced = kvsim.run(kvsim.parse_scenario(text, "failures.yaml"))
    assert coalesced.runs[0].summary["failures"]["retries"] > 0
    assert coalesced.records_digest() == stepwise.records_digest()


def test_failures_that_never_come_leave_the_run_as_it_was():
    # a node failing once in 10^9 s: the streams, the router wrapper and the retry bookkeeping are
    # there, and the records are bit for bit those of the system without failures
    with_field = _run(failures="{mtbf: 1000000000 s, repair: 30 s}", duration=100)
    without = _run(failures="null", duration=100)
    assert with_field.runs[0].summary["failures"]["node_failures_total"] == 0
    assert "failures" not in without.runs[0].summary
    assert with_field.records_digest(RequestRecords.fields) == without.records_digest()
    assert without.runs[0].records.extra_fields == ()
    assert with_field.runs[0].records.extra_fields == ("retries", "retry_lost_s")


def test_failures_field_checks():
    cached = MIXED.replace("failures:", "kv_cache: {{peer_hbm: copy_in}}\n    failures:")
    for system, failures, field in ((cached, "{mtbf: 100 s, repair: 30 s}", "systems.a.failures"),
                                    (MIXED, "{mtbf: 100 s, repair: 30 s, repair_distribution: gamma}",
                                     "systems.a.failures.repair_distribution"),
                                    (MIXED, "{mtbf: 100 s, repair: 30 s, confidence: 0.9}",
                                     "systems.a.failures.confidence"),
                                    (MIXED, "{mtbf: 100 s}", "systems.a.failures.repair")):
        with pytest.raises(SpecError) as caught:
            _run(system=system, failures=failures)
        assert "failures.yaml" in str(caught.value) and field in str(caught.value), str(caught.value)


TWO = MIXED + """
  b:
    node: l20-8x
    nodes: 4
    instance: {{tp: 8}}"""


def test_the_retry_columns_reach_the_requests_table_and_come_back_from_a_stored_point(tmp_path):
    from kvsim.plan import SweepStats, run_sweep

    text = RUN.format(seed=3, duration=200, rate=6, timeout="null", backend="auto",
                      system=TWO.format(failures="{mtbf: 60 s, mtbf_cards: 8, repair: 20 s}"))
    scenario = kvsim.parse_scenario(text, "failures.yaml")
    first = run_sweep(scenario, tmp_path, workers=1, log=False)
    by_system = {run.system: run for run in first.runs}
    assert by_system["a"].records.column("retries").sum() > 0 and by_system["b"].records.extra_fields == ()
    # the Arrow table is pandas' (the system without failures has NaN retries, both are float)
    table = first.requests_table()
    assert table.equals(pa.Table.from_pandas(first.requests_frame(), preserve_index=False), check_metadata=False)
    stats = SweepStats()
    again = run_sweep(scenario, tmp_path, workers=1, log=False, stats=stats)
    assert stats.reused and not stats.ran
    assert again.records_digest() == first.records_digest()
    # the report's section: system a's failures, not b's
    from kvsim.report.document import to_markdown
    from kvsim.report.files import write_results
    from kvsim.report.run_report import run_document

    write_results(again, tmp_path / "results")
    text = to_markdown(run_document(tmp_path / "results"))
    section = text[text.index("## Node failures"):]
    section = section[:section.index("\n## ", 5)]
    assert "| a |" in section and "| b |" not in section
