"""Closed-form queueing checks of the whole engine: M/D/1, Little's law, the response-time law.

These run the real simulator (SimPy engine loop, scheduler, router, records) on configurations
whose answer is known from queueing theory.
"""

from __future__ import annotations

import numpy as np
import pytest

import kvsim
from kvsim.models.step_time import BatchShape
from kvsim.sim import check_scenario

MD1 = """
name: md1
seed: {seed}
duration: {duration} s
warmup: 0 s
model: qwen3-1.7b
engine: {{host_overlap: false}}  # (host work added to every step, as the hand arithmetic here counts it)
workload:
  arrival: {{kind: poisson, rate: {rate}/s}}
  input_tokens: {{kind: fixed, value: 512}}
  output_tokens: {{kind: fixed, value: 1}}
systems:
  one: {{node: h20-8x, instances: 1, instance: {{max_num_seqs: 1}}}}
"""


def _service_time_s() -> float:
    # One request = one prefill iteration of 512 tokens that emits the only output token.
    scenario = kvsim.parse_scenario(MD1.format(seed=0, duration=10, rate=1), "md1.yaml")
    sizing = check_scenario(scenario)[(0, "one")]
    return sizing.pools[0].step_model().iteration_time_s(
        BatchShape(prefill_tokens=512, prefill_seqs=1, prefill_pairs=512 * 513 / 2, sampled_seqs=1))


def _engine():
    scenario = kvsim.parse_scenario(MD1.format(seed=0, duration=10, rate=1), "md1.yaml")
    return check_scenario(scenario)[(0, "one")].pools[0].engine


@pytest.mark.parametrize("rho, tolerance", [(0.5, 0.06), (0.8, 0.10)])
def test_single_server_fixed_work_matches_md1_mean_wait(rho, tolerance):
    # max_num_seqs=1 and one-token outputs make the instance a single deterministic server
    # fed by Poisson arrivals: M/D/1, mean wait W_q = rho * D / (2 (1 - rho)).
    # 40,000 customers give a relative standard error of ~1% at rho=0.5 and ~3% at rho=0.8
    # (waits are autocorrelated); the tolerances are about 3 standard errors. A wrong service
    # discipline (e.g. exponential service, M/M/1) would double the wait.
    service_s = _service_time_s()
    rate = rho / service_s
    customers = 40_000
    scenario = kvsim.parse_scenario(MD1.format(seed=11, duration=customers / rate, rate=rate), "md1.yaml")
    run = kvsim.run(scenario).runs[0]
    frame = run.records.to_frame()
    # every request spends the same fixed time in the API server before it reaches the queue
    engine = _engine()
    wait_s = (frame.admit_s - frame.arrival_s).to_numpy() - engine.request_in_s(512)
    predicted = rho * service_s / (2 * (1 - rho))
    assert np.nanmean(wait_s) == pytest.approx(predicted, rel=tolerance)
    # every completed request took exactly one service time after admission (plus its streaming)
    served = frame.dropna(subset=["finish_s"])
    assert np.allclose(served.finish_s - served.admit_s, service_s + engine.output_s)
    # utilisation = busy time / elapsed time = rho (to sampling error of the arrival count)
    assert run.busy_s / scenario.spec.duration == pytest.approx(rho, rel=0.03)


LITTLE = """
name: little
seed: 5
duration: 900 s
warmup: 100 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 6/s}
  input_tokens: {kind: lognormal, median: 800, sigma: 0.7, max: 6000}
  output_tokens: {kind: lognormal, median: 150, sigma: 0.6, max: 1000}
systems:
  pair: {node: l20-8x, instances: 2, router: round_robin}
"""


def test_littles_law_holds_on_the_simulated_system():
    # L = lambda * W: the time-average number of requests in the system (tracked by the engine
    # at every arrival and completion) equals arrival rate times mean time in system (from the
    # per-request records). Window-edge effects are a few E2E times over an 800 s window.
    scenario = kvsim.parse_scenario(LITTLE, "little.yaml")
    run = kvsim.run(scenario).runs[0]
    frame = run.records.to_frame()
    warmup, duration = scenario.spec.warmup, scenario.spec.duration
    window = frame[frame.arrival_s >= warmup]
    assert window.finish_s.notna().all()  # the run drains: every arrival finishes
    arrival_rate = len(window) / (duration - warmup)
    mean_time_in_system = window.e2e_s.mean()
    assert run.in_system_mean == pytest.approx(arrival_rate * mean_time_in_system, rel=0.04)


def test_requests_in_system_are_conserved_between_engine_and_records():
    # The engine's time-weighted count of requests in the system, integrated over the window,
    # must equal the sum over requests of the part of [arrival, finish) inside the window,
    # computed from the records alone. Any request lost or counted twice breaks the equality.
    scenario = kvsim.parse_scenario(LITTLE, "little.yaml")
    run = kvsim.run(scenario).runs[0]
    frame = run.records.to_frame()
    warmup, duration = scenario.spec.warmup, scenario.spec.duration
    finish = frame.finish_s.fillna(duration).clip(upper=duration)
    overlap = (finish - frame.arrival_s.clip(lower=warmup)).clip(lower=0).sum()
    assert run.in_system_mean * (duration - warmup) == pytest.approx(overlap, rel=1e-9)


CLOSED = """
name: closed
seed: 9
duration: 600 s
warmup: 60 s
model: qwen3-8b
workload:
  arrival: {{kind: closed_loop, clients: {clients}, think_time: {think} s, think_distribution: exponential}}
  input_tokens: {{kind: uniform, low: 200, high: 1200}}
  output_tokens: {{kind: uniform, low: 50, high: 250}}
systems:
  one: {{node: h20-8x, instances: 1}}
"""


def test_closed_loop_without_think_time_keeps_exactly_n_in_system():
    scenario = kvsim.parse_scenario(CLOSED.format(clients=12, think=0), "closed.yaml")
    run = kvsim.run(scenario).runs[0]
    # a client re-submits at the instant its request completes, so N are always in the system
    assert run.in_system_mean == pytest.approx(12, rel=1e-9)


def test_closed_loop_obeys_the_interactive_response_time_law():
    # X = N / (R + Z): throughput of N clients with mean response time R and mean think time Z.
    clients, think_s = 24, 5.0
    scenario = kvsim.parse_scenario(CLOSED.format(clients=clients, think=think_s), "closed.yaml")
    run = kvsim.run(scenario).runs[0]
    frame = run.records.to_frame()
    window = frame[frame.finish_s.between(scenario.spec.warmup, scenario.spec.duration)]
    throughput = len(window) / (scenario.spec.duration - scenario.spec.warmup)
    response_s = window.e2e_s.mean()
    assert throughput == pytest.approx(clients / (response_s + think_s), rel=0.05)
    assert run.in_system_mean < clients  # thinking clients are not in the system
