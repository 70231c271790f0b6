"""The run's cost before it runs (kvsim/plan/run_cost.py): requests x systems x points x replications."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kvsim
from kvsim.plan.cost_model import PathCounts, WorkloadShape, hit_fraction, prewarm_prompts, zipf_popularity
from kvsim.plan.cost_rates import PATHS, RATES, rates_for
from kvsim.plan.run_cost import run_cost
from kvsim.sim.prewarm import MAX_WARM_REQUESTS

SCENARIO = """\
name: cost
seed: 4
duration: 20 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 3/s}
  input_tokens: {kind: fixed, value: 128}
  output_tokens: {kind: fixed, value: 16}
systems:
  a: {node: h20-8x, instances: 1}
  b: {node: l20-8x, instances: 1}
sweep:
  workload.arrival.rate: [1/s, 3/s]
"""


def test_open_loop_requests_are_counted_as_the_run_draws_them():
    scenario = kvsim.parse_scenario(SCENARIO, "cost.yaml")
    cost = run_cost(scenario)
    result = kvsim.run(scenario)
    # every drawn request is a record of each system: the estimate is exact for replica 0
    assert cost.requests == sum(r.records.n for r in result.runs) > 0
    assert (cost.points, cost.systems, cost.runs) == (2, 2, 4)
    # the CPU estimate is the model's counts times the measured rates
    rates = rates_for("python")
    assert cost.cpu_s == pytest.approx(sum(v * rates[k] for k, v in cost.counts.as_dict().items()))
    assert cost.counts.request == cost.requests and cost.counts.run == 4
    assert "2 point(s) x 2 system(s) x 1 replication(s) = 4 system run(s)" in cost.describe()


def test_replications_multiply_the_count():
    one = run_cost(kvsim.parse_scenario(SCENARIO, "cost.yaml"))
    three = run_cost(kvsim.parse_scenario(SCENARIO + "replications: 3\n", "cost.yaml"))
    assert three.runs == 3 * one.runs and three.requests == 3 * one.requests


def _closed(clients="[1, 2]", think="0 s"):
    return SCENARIO.replace("{kind: poisson, rate: 3/s}", f"{{kind: closed_loop, clients: 2, think_time: {think}}}").replace(
        "workload.arrival.rate: [1/s, 3/s]", f"workload.arrival.clients: {clients}")


def test_closed_loop_requests_and_cpu_are_estimated():
    cost = run_cost(kvsim.parse_scenario(_closed(), "cost.yaml"))
    assert cost.requests is None and cost.closed_loop_points == 2
    assert cost.estimated_requests > 0 and cost.cpu_s > 0
    text = cost.describe()
    assert "closed loop" in text and "an estimate" in text and "think time" in text
    assert "estimated CPU time" in text
    # more clients and no think time send more requests than fewer clients who think
    more = run_cost(kvsim.parse_scenario(_closed("[8]"), "cost.yaml"))
    fewer = run_cost(kvsim.parse_scenario(_closed("[1]", "5 s"), "cost.yaml"))
    assert more.estimated_requests > fewer.estimated_requests and more.cpu_s > fewer.cpu_s
    # a client waiting 5 s between requests of well under a second each sends about duration / 5 s
    # (each of the two systems)
    assert 20 / 5 * 0.5 <= fewer.estimated_requests / 2 <= 20 / 5 + 2


def test_closed_loop_estimate_is_the_right_order_of_magnitude():
    # the model's latency bound against a real run: within 2x of the requests it completes
    scenario = kvsim.parse_scenario(_closed("[4]"), "cost.yaml")
    estimated = run_cost(scenario).estimated_requests
    simulated = sum(r.records.n for r in kvsim.run(scenario).runs)
    assert 0.5 <= estimated / simulated <= 2.0


def test_path_counts_price_each_path_at_its_rate():
    rates = rates_for("python")
    counts = PathCounts(request=1000, hbm_block=2.0e4, handoff=10)
    assert counts.cpu_s() == pytest.approx(1000 * rates["request"] + 2.0e4 * rates["hbm_block"] + 10 * rates["handoff"])
    assert (counts + counts).cpu_s() == pytest.approx(2 * counts.cpu_s()) == pytest.approx(counts.scaled(2).cpu_s())
    assert set(counts.as_dict()) == set(PATHS) == set(rates)


def test_each_backend_has_its_own_measured_rates_and_validate_names_them(monkeypatch):
    from kvsim.backend import BACKENDS

    # every backend a run can resolve to has a full set of its own rates (fitted separately:
    # not the python rates under another name)
    resolved = [b for b in BACKENDS if b != "auto"]
    assert set(RATES) == set(resolved)
    for backend in resolved:
        assert set(rates_for(backend)) == set(PATHS) and all(rate >= 0 for rate in rates_for(backend).values())
    assert dict(rates_for("compiled")) != dict(rates_for("python"))
    assert rates_for("unmeasured") is RATES["python"]  # the reference's: an upper bound
    scenario = kvsim.parse_scenario(SCENARIO, "cost.yaml")
    python, compiled = run_cost(scenario, backend="python"), run_cost(scenario, backend="compiled")
    assert python.counts == compiled.counts  # the same work, priced at each backend's rates
    assert compiled.cpu_s == pytest.approx(compiled.counts.cpu_s("compiled"))
    assert compiled.cpu_s != pytest.approx(python.cpu_s)
    line = compiled.describe().splitlines()[-1]
    assert "(compiled engine; per-path rates measured" in line and "pure-Python" not in line
    import kvsim.plan.cost_rates as cost_rates

    monkeypatch.setattr(cost_rates, "RATES", {"python": RATES["python"]})
    line = run_cost(scenario, backend="compiled").describe().splitlines()[-1]
    assert "compiled engine, at the pure-Python engine's rates: its own are not measured yet" in line


def test_hit_fraction_and_prewarm_arithmetic():
    # four equally popular 1,000-token documents, each prompt 3/4 document: caches holding two
    # documents find half the documents, 3/8 of the prompt tokens
    shape = WorkloadShape(100, 1333.0, 10.0, 16, True, shared_fraction=0.75, document_tokens=1000.0,
                          popularity=zipf_popularity(4, 0.0))
    assert zipf_popularity(4, 0.0) == pytest.approx([0.25] * 4)
    assert zipf_popularity(3, 1.0) == pytest.approx([6 / 11, 3 / 11, 2 / 11])
    assert hit_fraction(shape, 2000.0) == pytest.approx(0.375)
    assert hit_fraction(shape, 1e9) == pytest.approx(0.75) and hit_fraction(shape, 0.0) == 0.0
    # no reuse: every prompt's content is its own, so no check finds it offered and only the cap
    # stops a store that never fills; a store of 3,000 blocks fed 10 blocks a prompt turns over
    # twice in 600
    none = WorkloadShape(100, 160.0, 10.0, 16)
    assert prewarm_prompts(none, [(1e12, 1.0)]) == MAX_WARM_REQUESTS
    assert prewarm_prompts(none, [(3000.0, 1.0)]) == pytest.approx(600)
    # one shared prefix is offered by the first prompt: the first check (1,000 prompts) passes,
    # its bound 3.0 / 1,000 (no prefix seen once, 95 %) below 0.005
    assert prewarm_prompts(WorkloadShape(100, 160.0, 10.0, 16, True, shared_fraction=0.5), [(1e12, 1.0)]) == 1000
    # 6,000 documents at Zipf 0.1: 34,000 prompts, as SystemCache.prewarm used in
    # tests/test_prewarm.py's case (benchmarks/prewarm_coverage.py)
    many = WorkloadShape(100, 2560.0, 1.0, 256, True, shared_fraction=0.8, document_tokens=2048.0,
                         popularity=zipf_popularity(6000, 0.1))
    assert prewarm_prompts(many, [(1e12, 1.0)]) == 34000
    # a remote store taking a quarter of the blocks needs four times the prompts
    assert prewarm_prompts(none, [(300.0, 0.25)]) == pytest.approx(240)


CACHED = SCENARIO.replace("sweep:\n  workload.arrival.rate: [1/s, 3/s]\n", "")


def _cost(text: str) -> float:
    return run_cost(kvsim.parse_scenario(text, "cost.yaml")).cpu_s


def test_more_work_on_any_path_costs_more():
    base = _cost(CACHED)
    assert _cost(CACHED.replace("rate: 3/s", "rate: 6/s")) > base  # more requests
    cached = CACHED.replace("instances: 1}", "instances: 1, kv_cache: {}}")
    assert _cost(cached) > base  # an HBM cache handles every prompt block
    longer = cached.replace("value: 128", "value: 1024")
    assert _cost(longer) > _cost(cached)  # more blocks per prompt
    assert _cost(cached.replace("  output_tokens", "  block_tokens: 64\n  output_tokens")) < _cost(
        cached.replace("  output_tokens", "  block_tokens: 16\n  output_tokens"))  # smaller blocks: more of them
    dram = cached.replace("kv_cache: {}", "kv_cache: {dram: {capacity: 64 GiB}}")
    assert _cost(dram) > _cost(cached)  # a lower tier: its blocks and transfers
    both = cached.replace("kv_cache: {}", "kv_cache: {dram: {capacity: 64 GiB}, nvme: {capacity: 1 TiB}}")
    assert _cost(both) > _cost(dram)
    shared = "  prefix: {kind: fixed_hit, hit_ratio: 0.5}\n  output_tokens"
    warm = dram.replace("}}", "}, prewarm: true}").replace("  output_tokens", shared)
    assert _cost(warm) > _cost(dram.replace("  output_tokens", shared))  # the prewarm fills the tier first



def test_a_cache_aware_router_scores_every_instance_per_request():
    four = CACHED.replace("a: {node: h20-8x, instances: 1}", "a: {node: h20-8x, instances: 4, kv_cache: {}}").replace(
        "  b: {node: l20-8x, instances: 1}\n", "")
    plain = run_cost(kvsim.parse_scenario(four, "cost.yaml")).counts
    aware = run_cost(kvsim.parse_scenario(four.replace("kv_cache: {}", "kv_cache: {}, router: cache_aware"),
                                          "cost.yaml")).counts
    assert plain.routed_candidate == 0.0  # least outstanding: an ordered board, no per-instance scan
    assert aware.routed_candidate == pytest.approx(4 * aware.request) and aware.request == plain.request > 0
    assert aware.cpu_s("python") >= plain.cpu_s("python") and aware.cpu_s("compiled") >= plain.cpu_s("compiled")


def test_a_trace_is_read_once_however_many_points_leave_the_workload_alone(tmp_path, monkeypatch):
    # a seed sweep over a trace replay read the trace at every point (10,000 points: minutes)
    import kvsim.workload.traces as traces

    (tmp_path / "t.csv").write_text("t,prompt,gen\n0.5,100,10\n1.5,200,20\n30,10,1\n", encoding="utf-8")
    text = SCENARIO.replace("{kind: poisson, rate: 3/s}", (
        "{kind: trace, format: csv, file: t.csv, columns: {arrival: t, input_tokens: prompt, output_tokens: gen}}"
    )).replace("workload.arrival.rate: [1/s, 3/s]", "seed: [1, 2, 3, 4, 5]")
    text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(("  input_tokens:", "  output_tokens:")))
    scenario = kvsim.parse_scenario(text, "cost.yaml", tmp_path)
    reads = []
    real = traces.load_csv
    monkeypatch.setattr(traces, "load_csv", lambda *a, **k: reads.append(1) or real(*a, **k))
    cost = run_cost(scenario)
    assert cost.per_point == {i: 2 * 2 for i in range(5)}  # two requests before 20 s, two systems each
    assert len(reads) == 1


# --------------------------------------------------------------------------- the benchmarks' helpers

def _bench():
    import sys

    from conftest import REPO

    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    import check_run_cost
    import cost_rates

    return check_run_cost, cost_rates


def test_the_fit_recovers_rates_that_made_the_measurements():
    # measurements made exactly by known rates on three paths are fitted back to those rates
    _, cost_rates = _bench()
    truth = {"request": 4e-4, "hbm_block": 1e-5, "handoff": 2e-4}
    rows = []
    for n, blocks, handoffs in [(100, 0, 0), (1000, 5e4, 0), (500, 1e4, 500), (2000, 0, 2000), (300, 9e4, 0)]:
        counts = {p: 0.0 for p in PATHS}
        counts.update(request=n, hbm_block=blocks, handoff=handoffs)
        rows.append({"counts": counts, "cpu_s": sum(counts[k] * v for k, v in truth.items())})
    rates = cost_rates.fit(rows)
    for path in PATHS:
        assert rates[path] == pytest.approx(truth.get(path, 0.0), rel=1e-6, abs=1e-12)


def test_the_fit_is_written_as_a_table_of_rates_and_cases(tmp_path):
    _, cost_rates = _bench()
    counts = {p: 0.0 for p in PATHS}
    rows = [{"case": "ladder-8", "system": "h20", "requests": 1200, "cpu_s": 0.5,
             "counts": {**counts, "request": 1000.0}}]
    text = cost_rates.rates_table(rows, {**counts, "request": 4e-4}, "compiled", "`cmd`", "commit abc")
    assert text.startswith("The compiled backend, fitted on 1 runs (`cmd`; measured at commit abc):")
    assert "| request | 0.0004 |" in text and "| run | 0 |" in text
    assert "| ladder-8 | h20 | 1,200 | 0.500 | 0.400 | 0.80 |" in text  # 1,000 x 4e-4 against 0.5 measured
    module = tmp_path / "cost_rates.py"
    module.write_text(cost_rates.MODULE.read_text(encoding="utf-8"), encoding="utf-8")
    fitted = {p: 0.0 for p in PATHS} | {"request": 1.234567e-4, "hbm_block": 5e-6}
    cost_rates.write_module(fitted, "compiled", "python benchmarks/cost_rates.py --backend compiled", "commit abc",
                            module)
    namespace: dict = {}
    exec(compile(module.read_text(encoding="utf-8"), str(module), "exec"), namespace)
    assert dict(namespace["RATES"]["compiled"]) == {p: 0.0 for p in PATHS} | {"request": 1.23e-4, "hbm_block": 5e-6}
    assert dict(namespace["RATES"]["python"]) == dict(RATES["python"])  # the other backend's left as it was
    assert "--backend compiled` (each run the least CPU time of --repeat) at commit abc" in " ".join(
        line.strip("# ") for line in module.read_text(encoding="utf-8").splitlines())
    out = tmp_path / "page.md"
    cost_rates.write_between(out, "<a>", "</a>", "one")
    cost_rates.write_between(out, "<a>", "</a>", "two")
    assert out.read_text(encoding="utf-8") == "<a>\ntwo\n</a>\n"


def test_check_picks_points_and_writes_its_table_between_markers(tmp_path):
    check_run_cost, _ = _bench()
    six = kvsim.parse_scenario(SCENARIO.replace("[1/s, 3/s]", "[1/s, 2/s, 3/s, 4/s, 5/s, 6/s]"), "cost.yaml")
    assert check_run_cost.chosen_points(six) == [0, 3, 5]
    assert check_run_cost.chosen_points(kvsim.parse_scenario(SCENARIO, "cost.yaml")) == [0, 1]
    out = tmp_path / "run_cost.md"
    py_start, py_end = check_run_cost.markers("python")
    c_start, c_end = check_run_cost.markers("compiled")
    assert len({py_start, py_end, c_start, c_end}) == 4
    out.write_text(f"# head\n{py_start}\nold\n{py_end}\nmiddle\n{c_start}\nold too\n{c_end}\ntail\n",
                   encoding="utf-8")
    check_run_cost.write_table(out, "new table", "compiled")  # each backend's table between its own markers
    assert out.read_text(encoding="utf-8") == (
        f"# head\n{py_start}\nold\n{py_end}\nmiddle\n{c_start}\nnew table\n{c_end}\ntail\n")
    rows = [{"scenario": "a.yaml", "points": 3, "checked": [0, 2], "system_runs": 4, "requests": 10,
             "estimate_requests": 12.0, "cpu_s": 2.0, "estimate_cpu_s": 5.0, "ratio": 2.5}]
    text = check_run_cost.table(rows, "cmd", "compiled")
    assert text.startswith("The compiled backend: measured by `cmd`")
    assert "| a.yaml | 0, 2 of 3 | 4 | 10 | 12 | 2.00 | 5.00 | 2.50 |" in text
    assert "Within 2x on every scenario: no" in text


# --------------------------------------------------------------------------- misses, full caches, the closed loop

def test_misses_are_first_sights_until_the_cache_is_full_then_the_unheld_share():
    from kvsim.plan.cost_model import distinct_contexts, missed_requests

    four = zipf_popularity(4, 0.0)
    # a cache that holds every context: only each context's first request misses, 4 (1 - (3/4)^n)
    assert distinct_contexts(four, 2) == pytest.approx(1.75)
    assert missed_requests(four, 4, 2) == pytest.approx(1.75)
    assert missed_requests(four, 10, 1000) == pytest.approx(4.0)
    # a cache of 2 contexts with a working set of 4: full at the request m where 4 (1 - (3/4)^m) = 2,
    # m = ln 0.5 / ln 0.75 = 2.409; then every request outside the 2 held (half of them) misses
    m = math.log(0.5) / math.log(0.75)
    assert missed_requests(four, 2, 100) == pytest.approx(2 + (100 - m) * 0.5, rel=1e-5)
    # a cache that holds nothing misses every request; one shared context misses once
    assert missed_requests(four, 0, 50) == pytest.approx(50)
    assert missed_requests(np.array([1.0]), 1, 50) == pytest.approx(1.0)


DOCUMENT = """\
name: one-document
seed: 4
duration: 20 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 5/s}
  prefix: {kind: shared_documents, documents: DOCS, zipf_s: 0.0, document_tokens: {kind: fixed, value: 1024},
           suffix_tokens: {kind: fixed, value: 128}}
  output_tokens: {kind: fixed, value: 16}
  block_tokens: 16
systems:
  a: {node: h20-8x, instances: 1, instance: {tp: 1}, kv_cache: {}}
"""


def test_miss_blocks_count_the_blocks_a_cache_computes_and_files(monkeypatch):
    from kvsim.sim import build

    # one shared 1,024-token document (64 blocks) and 128-token suffixes (8 blocks): the first
    # request computes all 72 blocks, every later one its 8 suffix blocks. Kept as extents (an
    # instance's own HBM, shared documents), the cache is counted per request and missed share
    cost = run_cost(kvsim.parse_scenario(DOCUMENT.replace("DOCS", "1"), "doc.yaml"))
    n = cost.requests
    assert n > 50
    assert cost.counts.hbm_block == cost.counts.miss_block == 0.0
    assert cost.counts.extent_request == n
    assert cost.counts.extent_miss * 72 == pytest.approx(72 + (n - 1) * 8)
    # kept per block (the reference), per block
    monkeypatch.setattr(build, "KV_EXTENTS", False)
    cost = run_cost(kvsim.parse_scenario(DOCUMENT.replace("DOCS", "1"), "doc.yaml"))
    assert cost.counts.extent_request == cost.counts.extent_miss == 0.0
    assert cost.counts.miss_block == pytest.approx(72 + (n - 1) * 8)
    assert cost.counts.hbm_block == pytest.approx(72 * n)  # every block is looked up
    # 10,000 documents, each seen about once in the run: nearly every request computes its document
    many = run_cost(kvsim.parse_scenario(DOCUMENT.replace("DOCS", "10000"), "doc.yaml"))
    assert many.requests == n
    assert 0.97 * 72 * n <= many.counts.miss_block <= 72 * n
    for backend in RATES:  # computing the documents costs more on every backend
        assert many.counts.cpu_s(backend) > cost.counts.cpu_s(backend)


def _sized(scenario):
    from kvsim.sim.sizing import size_system

    point = scenario.points[0]
    return size_system(point.spec, "a", scenario.catalogs_for(point))


SATURATED = """\
name: saturated
seed: 4
duration: 30 s
warmup: 0 s
model: qwen3-8b
workload:
  arrival: {kind: closed_loop, clients: 64, think_time: 0 s}
  input_tokens: {kind: fixed, value: 16384}
  output_tokens: {kind: fixed, value: 1}
systems:
  a: {node: h20-8x, instances: 1, instance: {tp: 1}}
"""


def test_a_saturated_closed_loop_completes_what_its_prefill_time_allows():
    from kvsim.plan.cost_model import _prefill_s

    # 64 clients with no think time on one instance computing 16K-token prompts (1 output token):
    # the instance computes one prompt after another, so by Little's law the run completes
    # duration / (one prompt's compute time), and each client's first request is simulated too
    scenario = kvsim.parse_scenario(SATURATED, "sat.yaml")
    pool = _sized(scenario).pools[0]
    t_prompt = _prefill_s(pool.step_model(), 16384, pool.spec.instance.max_batched_tokens)
    cost = run_cost(scenario)
    assert cost.estimated_requests == pytest.approx(64 + 30 / t_prompt, rel=1e-6)
    simulated = sum(r.records.n for r in kvsim.run(scenario).runs)
    assert 0.5 <= cost.estimated_requests / simulated <= 2.0


def test_a_closed_loop_whose_caches_warm_slower_than_the_run_is_bounded_by_the_cold_prompts():
    from kvsim.plan.cost_model import _prefill_s

    # lora_shared_context's last point in small: 32 clients over 4 documents of 32K tokens on one
    # card, each document's first prompt ~8 s of compute. The steady hit share would let the loop
    # turn over hundreds of times; the run cannot even compute the four documents, so it simulates
    # little more than the clients' first requests.
    text = (DOCUMENT.replace("DOCS", "4").replace("value: 1024", "value: 32768").replace("5/s", "1/s")
            .replace("{kind: poisson, rate: 1/s}", "{kind: closed_loop, clients: 32, think_time: 2 s}")
            .replace("duration: 20 s", "duration: 18 s"))
    scenario = kvsim.parse_scenario(text, "cold.yaml")
    pool = _sized(scenario).pools[0]
    t_full = _prefill_s(pool.step_model(), 32768 + 128, pool.spec.instance.max_batched_tokens)
    assert 18 < 4 * t_full  # the four documents take longer than the run
    cost = run_cost(scenario)
    # at most the first-sight prompts that fit in 18 s, on top of the 32 first requests
    assert 32 <= cost.estimated_requests <= 32 + 18 / t_full + 1
    simulated = sum(r.records.n for r in kvsim.run(scenario).runs)
    assert 0.5 <= cost.estimated_requests / simulated <= 2.0


def test_adapters_that_do_not_share_kv_cache_each_document_per_adapter():
    from kvsim.plan.cost_model import WorkloadShape, cached_contexts

    # 2 documents x 4 uniform adapters: 8 contexts of 1/8 each without sharing, the 2 documents with it
    shape = WorkloadShape(10, 1100.0, 10.0, 16, True, shared_fraction=0.9, document_tokens=1000.0,
                          popularity=zipf_popularity(2, 0.0), adapters=np.full(4, 0.25))

    class System:
        def __init__(self, sharing):
            self.lora = type("Lora", (), {"kv_sharing": sharing})()

    assert cached_contexts(shape, System("none")) == pytest.approx([1 / 8] * 8)
    assert cached_contexts(shape, System("byte_sharing")) == pytest.approx([0.5, 0.5])
    assert cached_contexts(shape, System("value_reuse")) == pytest.approx([0.5, 0.5])


def test_remote_pool_flows_are_one_per_card_per_pool_node_touched():
    from kvsim.plan.cost_model import _touched

    assert _touched(4, 1) == pytest.approx(1.0)
    assert _touched(4, 2) == pytest.approx(4 * (1 - 0.75 ** 2))  # 1.75 of the 4 nodes
    assert _touched(4, 1000) == pytest.approx(4.0)
    assert _touched(1, 30) == 1.0 and _touched(4, 0) == 0.0


def test_the_ridge_splits_the_cost_of_paths_that_move_together():
    _, cost_rates = _bench()
    # tier blocks and flows in the same ratio in every case: plain NNLS may put all on one;
    # the ridge shares it out (in proportion to the columns' scale) and still fits the cases
    rows = []
    for n in (100, 400, 900):
        counts = {p: 0.0 for p in PATHS}
        counts.update(run=1.0, tier_block=10.0 * n, flow=n)
        rows.append({"counts": counts, "cpu_s": 1e-3 + 2e-4 * n})
    plain, ridged = cost_rates.fit(rows), cost_rates.fit(rows, 1e-4)
    for rates in (plain, ridged):
        for row in rows:
            fitted = sum(row["counts"][p] * rates[p] for p in PATHS)
            assert fitted == pytest.approx(row["cpu_s"], rel=0.02)
    assert ridged["tier_block"] > 0 and ridged["flow"] > 0
    assert ridged["tier_block"] * 10 == pytest.approx(ridged["flow"], rel=0.05)  # an equal split of the cost


def test_value_reuse_is_refused_when_the_copies_in_flight_overflow_the_kv():
    from kvsim.plan.cost_model import WorkloadShape, refused_share

    # 4 documents x 8 adapters, uniform: 32 (document, adapter) copies; 32 clients with no think
    # time all in flight hold 32 (1 - (31/32)^32) = 20.5 distinct copies of 32,768 tokens, and
    # each its own 128-token suffix and 128 output tokens
    shape = WorkloadShape(None, 32768.0 + 128, 128.0, 16, True, clients=32, think_s=0.0,
                          shared_fraction=32768 / (32768 + 128), document_tokens=32768.0,
                          popularity=zipf_popularity(4, 0.0), adapters=np.full(8, 1 / 8))
    demand = 32 * (1 - (31 / 32) ** 32) * 32768 + 32 * 256
    pool = type("Pool", (), {"kv_tokens_per_instance": 568016})()
    assert demand == pytest.approx(677_126, rel=1e-5)
    assert refused_share(shape, pool, 0.0, 18.0, 5.0, 1) == 1.0  # 677,126 tokens > 568,016: refused
    pool.kv_tokens_per_instance = 700_000  # room for every copy in flight: never refused
    assert refused_share(shape, pool, 0.0, 18.0, 5.0, 1) == 0.0
    # the base model (no adapters) copies nothing
    from dataclasses import replace

    assert refused_share(replace(shape, adapters=None), pool, 0.0, 18.0, 5.0, 1) == 0.0


def test_every_path_of_the_cost_model_has_words_and_rates():
    """``kvsim validate`` names the paths a run's cost goes to: each path of the model has its
    words and a rate on every backend (a path added without them ended validate in a traceback)."""
    from dataclasses import fields

    from kvsim.plan.cost_model import PathCounts
    from kvsim.plan.cost_rates import PATHS, RATES
    from kvsim.plan.run_cost import _PATH_WORDS

    assert [f.name for f in fields(PathCounts)] == list(PATHS)
    assert set(_PATH_WORDS) == set(PATHS)
    for rates in RATES.values():
        assert set(rates) == set(PATHS)
