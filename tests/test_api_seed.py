"""The Python API refuses a seed that is not a non-negative integer (it once truncated 1.5 to 1)."""

from __future__ import annotations

import numpy as np
import pytest

import kvsim


@pytest.fixture
def scenario(repo_root):
    return kvsim.load_scenario(repo_root / "scenarios" / "h20_vs_l20.yaml").with_changes(
        {"duration": "10 s", "warmup": "2 s", "sweep": {}, "compare": None,
         "systems": {"h20": {"node": "h20-8x"}}})


@pytest.mark.parametrize("seed", [1.5, -1, True, "3"])
def test_a_seed_that_is_not_a_non_negative_integer_is_refused(scenario, seed):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        kvsim.run(scenario, seed=seed)


def test_integer_seeds_of_any_integer_type_run_alike(scenario):
    assert kvsim.run(scenario, seed=np.int64(3)).records_digest() == kvsim.run(scenario, seed=3).records_digest()
