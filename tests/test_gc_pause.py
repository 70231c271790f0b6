"""The collector is spaced out while a run goes and put back as it was however the run ends."""

from __future__ import annotations

import gc
import weakref

import pytest

import kvsim
from kvsim.sim.gc_pause import YOUNG_THRESHOLD, fewer_collections


def test_the_collector_is_spaced_out_inside_and_restored_after():
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold()[0] == max(before[0], YOUNG_THRESHOLD)
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() > 0  # what was alive at the start is out of the passes
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_it_is_restored_when_the_run_fails():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError, match="boom"), fewer_collections():
        raise RuntimeError("boom")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_cycles_made_during_a_run_are_still_collected_after_it():
    class Node:
        pass

    with fewer_collections():
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
    gc.collect()
    assert gone() is None  # the cycle was left for later, not leaked


def test_a_run_leaves_the_collector_as_it_found_it(repo_root):
    before = gc.get_threshold()
    scenario = kvsim.load_scenario(repo_root / "scenarios" / "h20_vs_l20.yaml").with_changes(
        {"duration": "5 s", "warmup": "1 s", "sweep": {"workload.arrival.rate": ["5/s"]}})
    kvsim.run(scenario)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
