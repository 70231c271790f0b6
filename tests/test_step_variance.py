"""Step-time variance (``engine.step_variance``, :mod:`kvsim.models.step_variance`; issue 27 item 3).

Off (the default) changes nothing; on, the factor has mean 1 and the configured CV (checked
against closed forms with tolerances from the sampling distributions), draws only from its own
named stream, keeps a closed loop's throughput and widens the latency tails; the coalesced and
step-by-step engines and the two backends give the same records with it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import kvsim
from kvsim.cli import main
from kvsim.models.step_variance import BLOCK, PUBLISHED, StepJitter, StepVarianceSpec
from kvsim.rng import RandomStreams

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_coalesce import CHUNKED, CUT, REPO, _shortened  # noqa: E402

Z = 4.5
"""Tolerance of the sampling checks, in standard errors (two-sided p about 7e-6 for a normal)."""

ON = {"kind": "lognormal", "cv": 0.3, "stall_probability": 0.01, "stall_s": 0.05}

OPEN = """
name: jitter-open
seed: 5
duration: 40 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: {rate}/s}}
  input_tokens: {{kind: uniform, low: 200, high: 2000}}
  output_tokens: {{kind: uniform, low: 50, high: 400}}
systems:
  s: {{node: h20-8x, instance: {{tp: 1}}}}
"""

CLOSED = """
name: jitter-closed
seed: 11
duration: 60 s
warmup: 5 s
replications: {replications}
model: qwen3-8b
workload:
  arrival: {{kind: closed_loop, clients: 24}}
  input_tokens: {{kind: fixed, value: 512}}
  output_tokens: {{kind: fixed, value: 200}}
systems:
  s: {{node: h20-8x, instance: {{tp: 1}}}}
"""


def _scenario(tmp_path, text: str, **fmt):
    path = tmp_path / "s.yaml"
    path.write_text(text.format(**fmt), encoding="utf-8")
    return kvsim.load_scenario(path)


def _varied(scenario, variance=ON):
    return scenario.with_changes({"engine.step_variance": dict(variance)})


# ---------------------------------------------------------------------------------------------
# the factor

class _Fixed:
    """A stand-in generator giving known normal deviates and uniforms (a block at a time)."""

    def __init__(self, z, u):
        self.z, self.u = list(z), list(u)

    def standard_normal(self, n):
        out, self.z = self.z[:n] + [0.0] * max(0, n - len(self.z)), self.z[n:]
        return np.array(out)

    def random(self, n):
        out, self.u = self.u[:n] + [0.5] * max(0, n - len(self.u)), self.u[n:]
        return np.array(out)


def test_a_step_by_hand():
    """cv 0.5, stalls of 20 ms with probability 0.1: sigma^2 = ln 1.25, mu = -sigma^2 / 2; a
    10 ms step with z = 1 and no stall, then z = -2 with a stall."""
    spec = StepVarianceSpec(kind="lognormal", cv=0.5, stall_probability=0.1, stall_s=0.02)
    jitter = StepJitter(spec, _Fixed([1.0, -2.0], [0.9, 0.05]))
    sigma = math.sqrt(math.log(1.25))
    mu = -sigma * sigma / 2
    keep = 0.01 / (0.01 + 0.1 * 0.02)  # hands back the stalls' mean time, 2 ms a step
    assert jitter.duration(0.01, 0) == pytest.approx(0.01 * math.exp(mu + sigma) * keep, rel=1e-12)
    assert jitter.duration(0.01, 1) == pytest.approx((0.01 * math.exp(mu - 2 * sigma) + 0.02) * keep, rel=1e-12)
    # iteration 2 has z = 0 and no stall (the stand-in's padding): the median step, less the hand-back
    assert jitter.duration(0.01, 2) == pytest.approx(0.01 * math.exp(mu) * keep, rel=1e-12)


def test_many_steps_at_once_equal_one_at_a_time_to_the_bit():
    spec = StepVarianceSpec(kind="lognormal", cv=0.2, stall_probability=0.05, stall_s=0.03)
    steps = np.random.default_rng(1).uniform(0.002, 0.05, 3 * BLOCK + 17).tolist()
    one = StepJitter(spec, RandomStreams(3).generator("x"))
    many = StepJitter(spec, RandomStreams(3).generator("x"))
    singles = [one.duration(s, 5 + i) for i, s in enumerate(steps)]
    # a run planned far ahead, cut, and planned again from the step after the cut
    cut = 1500
    ahead = many.durations(steps, 5)
    again = many.durations(steps[cut:], 5 + cut)
    assert ahead == singles and again == singles[cut:]
    with pytest.raises(ValueError, match="asked after"):
        many.duration(0.01, 5)  # its block is gone: iterations only move forward


@pytest.mark.parametrize("cv, p, stall_s", [(0.05, 0.0, 0.0), (0.3, 0.0, 0.0), (0.1, 0.01, 0.04)])
def test_the_factor_has_mean_one_and_the_configured_spread(cv, p, stall_s):
    """Over n = 400,000 iterations of a step of d = 10 ms: the sample mean of the factor within
    Z standard errors of 1, and its sample variance within Z standard errors of the closed form.
    Lognormal L with E[L] = 1 has E[L^k] = exp(k (k - 1) sigma^2 / 2); with stalls the factor is
    (L + s B / d) / (1 + p s / d)."""
    n, d = 400_000, 0.01
    spec = StepVarianceSpec(kind="lognormal", cv=cv, stall_probability=p, stall_s=stall_s)
    jitter = StepJitter(spec, RandomStreams(17).generator("engine.step_variance.0"))
    f = np.array(jitter.durations([d] * n, 0)) / d
    s2 = math.log1p(cv * cv)
    moment = [math.exp(k * (k - 1) * s2 / 2) for k in range(5)]  # E[L^k]
    a, c = 1.0 / (1.0 + p * stall_s / d), stall_s / d
    var = a * a * (cv * cv + c * c * p * (1 - p))  # Var[a (L + c B)], L and B independent
    assert abs(f.mean() - 1.0) < Z * math.sqrt(var / n)
    if p == 0:
        assert f.std() == pytest.approx(cv, rel=0.05)  # the CV as configured (sd of a mean-one factor)
        mu4 = moment[4] - 4 * moment[3] + 6 * moment[2] - 3  # E[(L - 1)^4]
        assert abs(f.var(ddof=1) - cv * cv) < Z * math.sqrt((mu4 - cv ** 4) / n)
        logs = np.log(f)  # and exactly lognormal: ln L ~ N(-sigma^2 / 2, sigma^2)
        assert abs(logs.mean() + s2 / 2) < Z * math.sqrt(s2 / n)
        assert stats.kstest((logs + s2 / 2) / math.sqrt(s2), "norm").pvalue > 1e-4
    else:
        assert abs(f.var(ddof=1) - var) < 0.05 * var  # (the stall's Bernoulli makes the tail heavy)
        stalled = np.mean(f > 1.0 + 0.5 * c)  # a stall adds 4 steps' time: it stands out
        assert abs(stalled - p) < Z * math.sqrt(p * (1 - p) / n)


def test_different_seeds_draw_different_factors_and_the_same_seed_the_same():
    spec = StepVarianceSpec(kind="lognormal", cv=0.2)
    def draw(seed, name="engine.step_variance.0"):
        return StepJitter(spec, RandomStreams(seed).generator(name)) \
            .durations([1.0] * 100, 0)
    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    assert draw(1) != draw(1, "engine.step_variance.1")  # each instance its own stream


def test_the_published_setting_is_what_kind_lognormal_alone_gives():
    spec = StepVarianceSpec(kind="lognormal")
    assert (spec.cv, spec.stall_probability, spec.stall_s) == (PUBLISHED["cv"], PUBLISHED["stall_probability"],
                                                              PUBLISHED["stall_s"])
    assert spec.active and not StepVarianceSpec().active
    assert not StepVarianceSpec(kind="lognormal", cv=0.0).active  # nothing varies: no stream, no draws


# ---------------------------------------------------------------------------------------------
# whole runs

def test_off_reproduces_the_records(tmp_path):
    """No field, ``kind: none`` with parameters, and a lognormal of cv 0 without stalls are
    today's engine (benchmarks/records_digest.py holds every shipped scenario to it)."""
    scenario = _scenario(tmp_path, OPEN, rate=3)
    base = kvsim.run(scenario).records_digest()
    assert kvsim.run(_varied(scenario, {**ON, "kind": "none"})).records_digest() == base
    assert kvsim.run(_varied(scenario, {"kind": "lognormal", "cv": 0.0})).records_digest() == base
    assert kvsim.run(_varied(scenario)).records_digest() != base


def test_same_seed_same_records_another_seed_other_records(tmp_path):
    scenario = _varied(_scenario(tmp_path, OPEN, rate=3))
    first = kvsim.run(scenario)
    assert kvsim.run(scenario).records_digest() == first.records_digest()
    assert kvsim.run(scenario.with_changes({"seed": 6})).records_digest() != first.records_digest()


def test_variance_draws_from_its_own_stream_only(tmp_path):
    """Arrivals, prompt and output lengths are the same with variance on; only times move."""
    scenario = _scenario(tmp_path, OPEN, rate=3)
    off = kvsim.run(scenario).requests_frame()
    on = kvsim.run(_varied(scenario)).requests_frame()
    for column in ("request_id", "arrival_s", "input_tokens", "output_tokens"):
        assert on[column].tolist() == off[column].tolist(), column
    assert on["finish_s"].tolist() != off["finish_s"].tolist()


def test_the_latency_tails_grow(tmp_path):
    """At a moderate load, TTFT p99 and TPOT p99 are larger with variance on (cv 0.3, 1 % of
    steps stalling 50 ms) than without, and the mean TPOT moves much less than its p99."""
    scenario = _scenario(tmp_path, OPEN, rate=6)
    off, on = kvsim.run(scenario).runs[0].summary, kvsim.run(_varied(scenario)).runs[0].summary
    assert on["ttft_s"]["p99"] > off["ttft_s"]["p99"]
    assert on["tpot_s"]["p99"] > off["tpot_s"]["p99"]
    grow_p99 = on["tpot_s"]["p99"] / off["tpot_s"]["p99"] - 1
    grow_mean = abs(on["tpot_s"]["mean"] / off["tpot_s"]["mean"] - 1)
    assert grow_mean < grow_p99


def test_a_closed_loops_throughput_is_unchanged_within_its_confidence_interval(tmp_path):
    """24 clients of fixed requests (no randomness but the steps'): the output throughput without
    variance lies in the 99.9 % Student-t interval of eight replications with it."""
    off = kvsim.run(_scenario(tmp_path, CLOSED, replications=1)).runs[0].summary["output_tokens_per_s"]
    on = kvsim.run(_varied(_scenario(tmp_path, CLOSED, replications=8), {"kind": "lognormal", "cv": 0.3}))
    values = np.array([r.summary["output_tokens_per_s"] for r in on.all_runs()])
    assert len(values) == 8 and values.std() > 0
    half = stats.t.ppf(0.9995, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    assert abs(values.mean() - off) < half
    assert half < 0.02 * off  # and the interval is narrow enough to mean something


@pytest.mark.parametrize("text, rate", [(CUT, 6), (CHUNKED, 6), ("pd_dynamic.yaml", None)])
def test_coalesced_runs_and_both_backends_give_the_same_records(tmp_path, text, rate):
    """Decode runs and prefill chunk runs planned ahead read each iteration's own factor: the
    step-by-step engine and the coalesced one, pure Python and compiled, agree to the bit (also
    with instances switching roles and migrating KV, the shipped pd_dynamic shortened)."""
    scenario = _varied(_scenario(tmp_path, text, rate=rate) if rate is not None
                       else _shortened(REPO / "scenarios" / text, duration="8 s"))
    backends = ["python"] + (["compiled"] if kvsim.backend.compiled_problem() is None else [])
    results = [kvsim.run(scenario.with_changes({"engine.backend": b, "engine.coalesce": c}))
               for b in backends for c in (False, True)]
    reference = results[0]
    for result in results[1:]:
        assert result.records_digest() == reference.records_digest()
        assert [r.busy_s for r in result.runs] == [r.busy_s for r in reference.runs]
        assert [r.iterations for r in result.runs] == [r.iterations for r in reference.runs]


@pytest.mark.parametrize("value, field, says", [
    ("{kind: lognormal, cv: -0.1}", "engine.step_variance.cv", "must not be negative"),
    ("{kind: lognormal, stall_probability: 1.5, stall_s: 20 ms}", "engine.step_variance.stall_probability",
     "must be in [0, 1]"),
    ("{kind: lognormal, stall_probability: 0.1}", "engine.step_variance.stall_s", "a stall needs both"),
    ("{kind: gamma}", "engine.step_variance.kind", "'none' or 'lognormal'"),
])
def test_bad_values_get_one_message_naming_the_field(tmp_path, capsys, value, field, says):
    path = tmp_path / "bad.yaml"
    path.write_text(OPEN.format(rate=1).replace("model: qwen3-8b", f"model: qwen3-8b\nengine:\n  step_variance: {value}"),
                    encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    problems = [line for line in err.splitlines() if line.startswith("  ")]
    assert len(problems) == 1 and field in problems[0] and says in problems[0], err
    assert "bad.yaml:8:" in problems[0]  # the line of the field (OPEN opens with a blank line)
