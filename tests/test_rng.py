"""Tests for kvsim.rng: named, independent random streams from one root seed."""

import numpy as np
import pytest

from kvsim.rng import RandomStreams

N = 20_000
# Under independence the sample Pearson correlation of N pairs has standard error ~ 1/sqrt(N)
# (0.0071 for N = 20,000). Five standard errors (0.035) bound |r| for independent streams; any
# shared structure between streams (same seed, shifted copies) gives |r| near 1.
CORR_BOUND = 5.0 / np.sqrt(N)


def _draws(seed, name, n=N):
    return RandomStreams(seed).generator(name).random(n)


def test_same_seed_and_name_give_identical_draws():
    a = _draws(7, "workload.arrival")
    b = _draws(7, "workload.arrival")
    assert np.array_equal(a, b)


def test_generator_called_twice_restarts_the_sequence():
    streams = RandomStreams(11)
    first = streams.generator("x").random(100)
    streams.generator("y").random(1000)  # unrelated activity in between
    again = streams.generator("x").random(100)
    assert np.array_equal(first, again)


def test_identical_across_distribution_methods():
    # Bit-for-bit reproducibility holds for every kind of draw, not only uniforms.
    g1 = RandomStreams(3).generator("s")
    g2 = RandomStreams(3).generator("s")
    assert np.array_equal(g1.exponential(2.0, 500), g2.exponential(2.0, 500))
    assert np.array_equal(g1.integers(0, 1000, 500), g2.integers(0, 1000, 500))


@pytest.mark.parametrize(
    "name_a, name_b",
    [
        ("workload.arrival", "workload.input_tokens"),
        ("workload.client.1", "workload.client.10"),  # a prefix of the other
        ("workload.client.1", "workload.client.2"),  # differ in one character
        ("a", "b"),
        ("", "x"),
    ],
)
def test_different_names_give_different_uncorrelated_draws(name_a, name_b):
    a = _draws(2024, name_a)
    b = _draws(2024, name_b)
    assert not np.array_equal(a, b)
    # No shared values at all (64-bit uniform floats coincide by chance with negligible odds).
    assert len(np.intersect1d(a, b)) == 0
    # Uncorrelated at lag 0, and not a shifted copy of each other at small lags either.
    for lag in range(0, 4):
        r = np.corrcoef(a[lag:], b[: N - lag])[0, 1]
        assert abs(r) < CORR_BOUND, (lag, r)
        r = np.corrcoef(b[lag:], a[: N - lag])[0, 1]
        assert abs(r) < CORR_BOUND, (lag, r)


def test_streams_are_keyed_by_name_not_by_request_order():
    # Asking for other streams first (and drawing from them) must not shift this stream.
    reference = _draws(5, "workload.output_tokens", 1000)

    streams = RandomStreams(5)
    for other in ("workload.arrival", "network", "kv.eviction", "workload.client.0"):
        streams.generator(other).random(123)
    shifted = streams.generator("workload.output_tokens").random(1000)
    assert np.array_equal(reference, shifted)


def test_different_root_seeds_differ():
    a = _draws(1, "workload.arrival")
    b = _draws(2, "workload.arrival")
    assert not np.array_equal(a, b)
    assert abs(np.corrcoef(a, b)[0, 1]) < CORR_BOUND


def test_seed_zero_is_allowed_and_differs_from_seed_one():
    assert not np.array_equal(_draws(0, "s", 100), _draws(1, "s", 100))


def test_negative_seed_refused():
    with pytest.raises(ValueError, match="non-negative"):
        RandomStreams(-1)


def test_draws_look_uniform():
    # A stream is a usable uniform source: mean 1/2 with standard error sqrt(1/12 / N) = 0.002,
    # checked to five standard errors.
    a = _draws(99, "check.uniform")
    assert abs(a.mean() - 0.5) < 5 * np.sqrt(1 / 12 / N)
    assert a.min() >= 0.0 and a.max() < 1.0
