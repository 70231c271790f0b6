"""The extent store on real access sequences: every call the domain stores of a run receive is
done again on an ExtentStore (tests/extent_shadow.py) and compared -- answers after every call,
the whole state (order, readers, pins, counters) every few calls and at the end. The runs are a
read-in-place domain under pressure (evictions, moves between cards, pinned loads, preemptions)
and the speed case ``domains`` (three systems: 1, 2 and 16 domains). The shadow changes nothing:
the records are the same with it and without."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import kvsim
from extent_shadow import shadowed
from kvsim.sim import build
from test_domains import PRESSURE

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
import speed_cases  # noqa: E402


@pytest.fixture(autouse=True)
def per_block(monkeypatch):
    """The shadow follows the per-block domain stores (the reference): runs keep them per block."""
    monkeypatch.setattr(build, "KV_EXTENTS", False)


def test_extents_follow_a_domain_under_pressure():
    scenario = kvsim.parse_scenario(PRESSURE.replace("duration: 6 s", "duration: 4 s"), "p.yaml")
    plain = kvsim.run(scenario).records_digest()
    with shadowed(16, check_every=40) as shadow:
        digest = kvsim.run(scenario).records_digest()
    assert digest == plain
    (store, ext), = shadow.shadows
    assert store.evictions > 0 and store.pool.moves > 0  # (pressure reached: victims and moves compared)
    assert shadow.calls > 1000 and ext.extent_count < ext.used_blocks / 20


def test_extents_follow_the_domains_speed_case():
    scenario = speed_cases.scenario_for("domains", {"scale": 0.01})
    plain = kvsim.run(scenario).records_digest()
    with shadowed(16) as shadow:
        digest = kvsim.run(scenario).records_digest()
    assert digest == plain and len(shadow.shadows) == 19  # 1 + 2 + 16 domains
    for store, ext in shadow.shadows:  # a document and a suffix per prompt filed: two extents each
        assert ext.used_blocks == store.used_blocks and ext.extent_count <= 2 * max(1, store.used_blocks // 1000)
