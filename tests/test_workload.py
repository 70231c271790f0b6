"""Tests for kvsim.workload: arrival processes, length distributions and request generation.

Statistical checks use fixed seeds (so they are deterministic) and tolerances of 5 standard
errors of the estimated quantity (so a correct implementation passes with any seed except with
probability ~6e-7, and a wrong mean, rate or spread of a few percent fails). Each test states the
standard error it uses.
"""

import math

import numpy as np
import pytest
from pydantic import ValidationError

from kvsim.rng import RandomStreams
from kvsim.workload import (
    ClientStream,
    ClosedLoop,
    EmpiricalLength,
    FixedLength,
    GammaArrivals,
    LognormalLength,
    PoissonArrivals,
    UniformLength,
    WorkloadSpec,
    open_loop_requests,
)
from kvsim.workload.arrivals import open_loop_arrival_times

Z = 5.0  # tolerance in standard errors


def _rng(seed, name="test"):
    return RandomStreams(seed).generator(name)


def _interarrivals(times):
    return np.diff(np.concatenate([[0.0], times]))


def _cv(x):
    return float(np.std(x, ddof=1) / np.mean(x))


def _cv_standard_error(cv, n):
    """Asymptotic standard error of the sample CV of n i.i.d. Gamma draws with true CV ``cv``.

    For Gamma with shape a = 1/cv^2 the delta method on s^2/m^2 gives
    Var(CV_hat) = (1/(2a) + 1/(2a^2)) / n; for the exponential (a = 1) that is 1/n.
    """
    a = 1.0 / cv**2
    return math.sqrt((1.0 / (2 * a) + 1.0 / (2 * a * a)) / n)


def _normal_cdf(x):
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


# ---------------------------------------------------------------------------------------------
# arrivals
# ---------------------------------------------------------------------------------------------

RATE, HORIZON = 20.0, 2000.0  # 40,000 expected arrivals


def test_poisson_rate_and_cv():
    times = open_loop_arrival_times(PoissonArrivals(rate=RATE), HORIZON, _rng(1))
    n, expected = len(times), RATE * HORIZON
    # The count of a Poisson process over T has standard deviation sqrt(rate * T) = 200.
    assert abs(n - expected) < Z * math.sqrt(expected)
    gaps = _interarrivals(times)
    # Mean gap 1/rate with standard error (1/rate)/sqrt(n) (exponential: sd = mean).
    assert abs(gaps.mean() - 1 / RATE) < Z * (1 / RATE) / math.sqrt(n)
    # Exponential gaps have CV 1; standard error of the sample CV ~ 1/sqrt(n) = 0.005.
    assert abs(_cv(gaps) - 1.0) < Z * _cv_standard_error(1.0, n)


def test_arrivals_sorted_within_horizon_and_cover_it_evenly():
    times = open_loop_arrival_times(PoissonArrivals(rate=RATE), HORIZON, _rng(2))
    assert np.all(np.diff(times) > 0)
    assert times.min() >= 0.0 and times.max() < HORIZON
    # The last 5% of the horizon holds ~5% of arrivals (count ~ Poisson(2000), sd ~ 44.7): an
    # arrival stream cut short or padded near the end would show here.
    tail = np.count_nonzero(times >= 0.95 * HORIZON)
    expected_tail = RATE * 0.05 * HORIZON
    assert abs(tail - expected_tail) < Z * math.sqrt(expected_tail)


def test_short_horizons():
    assert len(open_loop_arrival_times(PoissonArrivals(rate=5.0), 0.0, _rng(3))) == 0
    # Much longer than the generator's first chunk: it must keep drawing to the end.
    times = open_loop_arrival_times(PoissonArrivals(rate=1000.0), 30.0, _rng(4))
    assert abs(len(times) - 30_000) < Z * math.sqrt(30_000)
    assert times.max() > 29.9


@pytest.mark.parametrize("cv", [2.0, 0.5])
def test_gamma_rate_and_cv(cv):
    spec = GammaArrivals(rate=RATE, cv=cv)
    times = open_loop_arrival_times(spec, HORIZON, _rng(5))
    n, expected = len(times), RATE * HORIZON
    # A renewal process's count over T has variance ~ rate * T * cv^2 (sd 400 for cv 2, 100 for 0.5).
    assert abs(n - expected) < Z * math.sqrt(expected) * cv
    gaps = _interarrivals(times)
    # Mean gap 1/rate; its standard error is cv * (1/rate) / sqrt(n).
    assert abs(gaps.mean() - 1 / RATE) < Z * cv * (1 / RATE) / math.sqrt(n)
    # CV: standard error 0.0158 for cv 2, 0.0020 for cv 0.5 (see _cv_standard_error).
    assert abs(_cv(gaps) - cv) < Z * _cv_standard_error(cv, n)


def test_gamma_with_cv_one_matches_poisson_spread():
    gaps = GammaArrivals(rate=4.0, cv=1.0).interarrivals(_rng(6), 40_000)
    assert abs(_cv(gaps) - 1.0) < Z * _cv_standard_error(1.0, 40_000)


def test_rates_accept_unit_strings():
    assert PoissonArrivals(rate="20/s").rate == 20.0
    assert GammaArrivals(rate="120/min", cv=2).rate == 2.0


# ---------------------------------------------------------------------------------------------
# lengths
# ---------------------------------------------------------------------------------------------


def test_lognormal_median():
    spec = LognormalLength(median=1000, sigma=1.0, max=1_000_000)
    n = 40_001
    x = spec.sample(_rng(7), n)
    # Sample median standard error 1/(2 f(m) sqrt(n)) with the lognormal density at its median
    # f(m) = 1/(m sigma sqrt(2 pi)): here 1000 * sqrt(2 pi) / (2 * 200) = 6.3 tokens. Rounding to
    # integers moves the median by at most 0.5.
    se = 1000 * 1.0 * math.sqrt(2 * math.pi) / (2 * math.sqrt(n))
    assert abs(np.median(x) - 1000) < Z * se + 0.5


def test_lognormal_clipping():
    low, high, median, sigma = 200, 3000, 1000, 2.0
    n = 40_000
    x = LognormalLength(median=median, sigma=sigma, min=low, max=high).sample(_rng(8), n)
    assert np.issubdtype(x.dtype, np.integer)
    assert x.min() >= low and x.max() <= high
    # Draws outside [min, max] are clipped onto the bounds (not redrawn): the mass at each bound
    # is the lognormal tail beyond it (rounding: x rounds to <= 200 iff x <= 200.5).
    p_high = 1 - _normal_cdf(math.log((high - 0.5) / median) / sigma)  # ~0.29
    p_low = _normal_cdf(math.log((low + 0.5) / median) / sigma)  # ~0.21
    for observed, p in ((np.mean(x == high), p_high), (np.mean(x == low), p_low)):
        assert abs(observed - p) < Z * math.sqrt(p * (1 - p) / n), (observed, p)


def test_lognormal_small_median_never_below_one_token():
    x = LognormalLength(median=1.2, sigma=1.5, max=100).sample(_rng(9), 10_000)
    assert np.issubdtype(x.dtype, np.integer)
    assert x.min() == 1  # many draws round to 0 and must be clipped up to 1
    assert x.max() <= 100


def test_uniform_is_inclusive_of_both_ends():
    n = 50_000
    x = UniformLength(low=3, high=7).sample(_rng(10), n)
    assert np.issubdtype(x.dtype, np.integer)
    assert set(np.unique(x).tolist()) == {3, 4, 5, 6, 7}
    # Each of 5 values has probability 0.2; standard error sqrt(0.2 * 0.8 / n) = 0.0018.
    for v in range(3, 8):
        assert abs(np.mean(x == v) - 0.2) < Z * math.sqrt(0.2 * 0.8 / n)


def test_uniform_single_value():
    assert np.all(UniformLength(low=64, high=64).sample(_rng(11), 100) == 64)


def test_fixed_is_constant():
    x = FixedLength(value=128).sample(_rng(12), 1000)
    assert np.issubdtype(x.dtype, np.integer)
    assert len(x) == 1000 and np.all(x == 128)


def test_empirical_resamples_given_values_with_weights():
    n = 50_000
    x = EmpiricalLength(values=[10, 20, 30], weights=[1, 2, 7]).sample(_rng(13), n)
    assert set(np.unique(x).tolist()) <= {10, 20, 30}
    for v, p in ((10, 0.1), (20, 0.2), (30, 0.7)):
        assert abs(np.mean(x == v) - p) < Z * math.sqrt(p * (1 - p) / n)


def test_empirical_unweighted_counts_duplicates():
    # Without weights each listed observation is equally likely: 5 appears twice in three.
    n = 30_000
    x = EmpiricalLength(values=[5, 5, 9]).sample(_rng(14), n)
    assert set(np.unique(x).tolist()) == {5, 9}
    p = 2 / 3
    assert abs(np.mean(x == 5) - p) < Z * math.sqrt(p * (1 - p) / n)


# ---------------------------------------------------------------------------------------------
# request generation
# ---------------------------------------------------------------------------------------------

OPEN_LOOP = {
    "arrival": {"kind": "poisson", "rate": "10/s"},
    "input_tokens": {"kind": "lognormal", "median": 500, "sigma": 1.0, "max": 8000},
    "output_tokens": {"kind": "uniform", "low": 10, "high": 200},
}


def _requests(seed, duration=300.0, spec=OPEN_LOOP):
    return open_loop_requests(WorkloadSpec.model_validate(spec), duration, RandomStreams(seed))


def test_open_loop_requests_deterministic_per_seed():
    a, b = _requests(42), _requests(42)
    assert len(a) > 0
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.input_tokens, b.input_tokens)
    assert np.array_equal(a.output_tokens, b.output_tokens)
    c = _requests(43)
    assert not np.array_equal(a.input_tokens[:100], c.input_tokens[:100])


def test_open_loop_requests_within_duration_and_aligned():
    duration = 300.0
    r = _requests(1, duration)
    assert r.arrival_s.min() >= 0.0 and r.arrival_s.max() < duration
    assert np.all(np.diff(r.arrival_s) >= 0)
    assert len(r.input_tokens) == len(r.output_tokens) == len(r.arrival_s) == len(r)
    assert r.output_tokens.min() >= 10 and r.output_tokens.max() <= 200
    assert r.input_tokens.min() >= 1 and r.input_tokens.max() <= 8000
    # ~3000 arrivals expected, Poisson sd ~ 55.
    assert abs(len(r) - 3000) < Z * math.sqrt(3000)


def test_changing_one_distribution_leaves_other_draws_alone():
    # Arrivals, prompt and output lengths come from separately named streams.
    other = {**OPEN_LOOP, "output_tokens": {"kind": "fixed", "value": 50}}
    a, b = _requests(7), _requests(7, spec=other)
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.input_tokens, b.input_tokens)
    assert np.all(b.output_tokens == 50)


def test_open_loop_requests_refuses_closed_loop_spec():
    spec = WorkloadSpec.model_validate({**OPEN_LOOP, "arrival": {"kind": "closed_loop", "clients": 4}})
    with pytest.raises(ValueError):
        open_loop_requests(spec, 10.0, RandomStreams(0))


CLOSED_LOOP = {
    "arrival": {"kind": "closed_loop", "clients": 8, "think_time": 2.0, "think_distribution": "exponential"},
    "input_tokens": {"kind": "uniform", "low": 100, "high": 2000},
    "output_tokens": {"kind": "lognormal", "median": 200, "sigma": 0.8, "max": 4000},
}


def _client_requests(seed, client, n, spec=CLOSED_LOOP, streams=None):
    stream = ClientStream(WorkloadSpec.model_validate(spec), client, streams or RandomStreams(seed))
    return [stream.next_request() for _ in range(n)]


def test_client_stream_same_seed_same_sequence():
    # 200 requests span several of the stream's internal refills.
    a = _client_requests(42, 3, 200)
    b = _client_requests(42, 3, 200)
    assert a == b
    assert a != _client_requests(43, 3, 200)
    assert a != _client_requests(42, 4, 200)


def test_client_stream_independent_of_other_clients():
    streams = RandomStreams(42)
    _client_requests(42, 0, 500, streams=streams)  # another client drawing first
    assert _client_requests(42, 3, 100, streams=streams) == _client_requests(42, 3, 100)


def test_client_first_request_has_no_think_time():
    for client in range(4):
        requests = _client_requests(9, client, 2000)
        assert requests[0][0] == 0.0
        think = np.array([r[0] for r in requests[1:]])
        assert np.all(think > 0)
        # Exponential think time with mean 2 s: standard error 2 / sqrt(1999) = 0.045 s.
        assert abs(think.mean() - 2.0) < Z * 2.0 / math.sqrt(len(think))
        inputs = [r[1] for r in requests]
        assert min(inputs) >= 100 and max(inputs) <= 2000


def test_client_fixed_think_time():
    spec = {**CLOSED_LOOP, "arrival": {"kind": "closed_loop", "clients": 2, "think_time": "1.5 s"}}
    requests = _client_requests(1, 0, 100, spec=spec)
    assert requests[0][0] == 0.0
    assert all(r[0] == 1.5 for r in requests[1:])


def test_client_stream_refuses_open_loop_spec():
    with pytest.raises(ValueError):
        ClientStream(WorkloadSpec.model_validate(OPEN_LOOP), 0, RandomStreams(0))


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: UniformLength(low=10, high=5),
        lambda: LognormalLength(median=100, sigma=1.0, min=50, max=10),
        lambda: LognormalLength(median=0, sigma=1.0, max=10),
        lambda: LognormalLength(median=100, sigma=0, max=1000),
        lambda: GammaArrivals(rate=1.0, cv=0),
        lambda: GammaArrivals(rate=1.0, cv=-1.0),
        lambda: GammaArrivals(rate=0, cv=1.0),
        lambda: PoissonArrivals(rate=0),
        lambda: PoissonArrivals(rate=-5.0),
        lambda: PoissonArrivals(rate="-5/s"),
        lambda: PoissonArrivals(rate="20"),  # a bare number as text: unit missing
        lambda: FixedLength(value=0),
        lambda: EmpiricalLength(values=[]),
        lambda: EmpiricalLength(values=[0, 5]),
        lambda: EmpiricalLength(values=[1, 2], weights=[1.0]),
        lambda: ClosedLoop(clients=0),
        lambda: WorkloadSpec.model_validate({**OPEN_LOOP, "arrival": {"kind": "gamma", "rate": 1.0, "cv": 0}}),
        lambda: WorkloadSpec.model_validate({**OPEN_LOOP, "arrival": {"kind": "zipf", "rate": 1.0}}),
    ],
)
def test_invalid_specs_raise_validation_error(build):
    with pytest.raises(ValidationError):
        build()


def test_validation_messages_name_the_problem():
    with pytest.raises(ValidationError) as info:
        UniformLength(low=10, high=5)
    assert "high (5) must be >= low (10)" in str(info.value)
    with pytest.raises(ValidationError) as info:
        LognormalLength(median=100, sigma=1.0, min=50, max=10)
    assert "max (10) must be >= min (50)" in str(info.value)
