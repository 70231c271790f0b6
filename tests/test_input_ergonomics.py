"""Input ergonomics (issue 10 part 6): byte quantities need units, "did you mean" suggestions,
YAML syntax errors in plain words, each problem reported once however many sweep points share it."""

from __future__ import annotations

import pytest

from kvsim.scenario.load import parse_scenario
from kvsim.yaml_io import SpecError

BASE = """\
name: ergo
duration: 20 s
model: qwen3-8b
workload:
  arrival:
    kind: poisson
    rate: 2/s
  input_tokens:
    kind: fixed
    value: 128
  output_tokens:
    kind: fixed
    value: 32
systems:
  h20:
    node: h20-8x
    instance:
      tp: 1
    kv_cache:
      dram:
        capacity: 64 GiB
  l20:
    node: l20-8x
    instance:
      tp: 1
"""


def edit(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, f"test setup: {old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def line_no(text: str, needle: str) -> int:
    hits = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    assert len(hits) == 1, f"test setup: {needle!r} is on lines {hits}"
    return hits[0]


def problems(text: str, filename: str = "s.yaml") -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_scenario(text, filename)
    return info.value.problems


def test_base_is_valid():
    scenario = parse_scenario(BASE, "s.yaml")
    assert scenario.spec.systems["h20"].kv_cache.dram.capacity == 64 * 2**30


# ------------------------------------------------------------------------------- bytes need units


@pytest.mark.parametrize("bare", ["96", "0", "96e9", "'96'"])
def test_a_bare_capacity_is_refused_with_its_line(bare):
    text = edit("capacity: 64 GiB", f"capacity: {bare}")
    (problem,) = problems(text)
    assert problem.startswith(f"s.yaml:{line_no(text, 'capacity:')}: systems.h20.kv_cache.dram.capacity: ")
    assert "needs its unit" in problem and "GiB" in problem


def test_a_capacity_in_bits_is_refused():
    text = edit("capacity: 64 GiB", "capacity: 96 Gbit")
    (problem,) = problems(text)
    assert "systems.h20.kv_cache.dram.capacity" in problem and "bits" in problem and "12 GB" in problem


def test_a_bare_reserve_is_refused():
    text = edit("      tp: 1\n    kv_cache:", "      tp: 1\n      runtime_reserve: 2147483648\n    kv_cache:")
    (problem,) = problems(text)
    assert f"s.yaml:{line_no(text, 'runtime_reserve')}: systems.h20.instance.runtime_reserve: " in problem
    assert "needs its unit" in problem


def test_a_bare_catalog_capacity_is_refused():
    text = BASE + "catalog:\n  nodes:\n    big-h20: {base: h20-8x, host_dram_bytes: 2048}\n"
    (problem,) = problems(text)
    assert "catalog.nodes.big-h20.host_dram_bytes" in problem and "needs its unit" in problem


def test_bandwidth_still_takes_bits_per_second():
    text = BASE + "catalog:\n  nodes:\n    fast-h20: {base: h20-8x, nics: {count: 8, bandwidth: 400 Gbit/s}}\n"
    scenario = parse_scenario(text, "s.yaml")
    assert scenario.catalogs.nodes["fast-h20"].nics.bandwidth == 50e9


def test_python_callers_still_pass_si_numbers():
    scenario = parse_scenario(BASE, "s.yaml")
    changed = scenario.with_changes({"systems.h20.kv_cache.dram.capacity": 2**30})
    assert changed.spec.systems["h20"].kv_cache.dram.capacity == 2**30
