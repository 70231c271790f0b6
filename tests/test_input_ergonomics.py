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


# ------------------------------------------------------------------------------- did you mean


@pytest.mark.parametrize("old, new, path, hint", [
    ("duration: 20 s", "duraton: 20 s", "duraton", "duration"),
    ("    rate: 2/s", "    rat: 2/s", "workload.arrival.rat", "rate"),
    ("      tp: 1\n    kv_cache", "      tpp: 1\n    kv_cache", "systems.h20.instance.tpp", "tp"),
    ("        capacity: 64 GiB", "        capacty: 64 GiB", "systems.h20.kv_cache.dram.capacty", "capacity"),
])
def test_unknown_field_suggests_the_closest_and_lists_the_allowed(old, new, path, hint):
    text = edit(old, new)
    found = problems(text)
    typo = new.split(":")[0].strip()
    (problem,) = [p for p in found if f": {path}: " in p]
    assert problem.startswith(f"s.yaml:{line_no(text, typo + ':')}: ")
    assert f"did you mean {hint!r}?" in problem and "fields allowed here:" in problem and hint in problem


def test_a_misspelt_required_field_is_reported_once():
    # "duraton" explains the missing "duration": one problem, not two
    (problem,) = problems(edit("duration: 20 s", "duraton: 20 s"))
    assert "did you mean 'duration'" in problem


def test_an_unknown_field_without_a_close_match_lists_the_allowed():
    (problem,) = problems(edit("        capacity: 64 GiB", "        capacity: 64 GiB\n        zebra: 1"))
    assert "did you mean" not in problem and "fields allowed here: capacity, eviction" in problem


@pytest.mark.parametrize("old, new, path, hint", [
    ("model: qwen3-8b", "model: qwen3-8", "model", "qwen3-8b"),
    ("node: l20-8x", "node: l20-8", "systems.l20.node", "l20-8x"),
    ("node: h20-8x", "node: H20-8x", "systems.h20.node", "h20-8x"),
    ("kind: poisson", "kind: poison", "workload.arrival", "poisson"),
    ("duration: 20 s", "duration: 20 s\ndtype: bf61", "dtype", "bf16"),
    ("systems:", "compare: {baseline: h2O}\nsystems:", "compare.baseline", "h20"),
])
def test_unknown_names_suggest_the_closest(old, new, path, hint):
    found = problems(edit(old, new))
    (problem,) = [p for p in found if f": {path}: " in p]
    assert f"did you mean {hint!r}?" in problem


def test_unknown_accelerator_and_pool_node_suggest_the_closest():
    text = BASE + "catalog:\n  nodes:\n    my-node: {base: h20-8x, accelerator: h2O}\n"
    text = edit("    node: h20-8x", "    node: my-node", text)
    (problem,) = problems(text)
    assert "unknown accelerator 'h2O'" in problem and "did you mean 'h20'?" in problem
    text = edit("        capacity: 64 GiB", "        capacity: 64 GiB\n      remote: {pool_node: nvme-storage-61x}")
    found = problems(text)
    assert any("pool_node" in p and "did you mean 'nvme-storage-16x'?" in p for p in found), found


def test_a_sweep_over_a_misspelt_system_or_pool_is_refused():
    text = BASE + "sweep:\n  systems.h2O.nodes: [1, 2]\n"
    (problem,) = problems(text)
    assert problem.startswith(f"s.yaml:{line_no(text, 'h2O')}: sweep.systems.h2O.nodes: ")
    assert "no system 'h2O'" in problem and "did you mean 'h20'?" in problem


# ------------------------------------------------------------------------------- YAML syntax


@pytest.mark.parametrize("old, new, bad_line, words", [
    ("    kind: poisson", "\tkind: poisson", "kind: poisson", "a tab character is not allowed for indentation"),
    ("duration: 20 s", "duration: 20 s: oops", "oops", "is a ':' missing a space after it, or a quote?"),
    ("duration: 20 s", "duration:20 s", "duration:20", "is the space after ':' missing"),
    ("duration: 20 s", "duration: '20 s", "duration: '20", "quote opened on this line is never closed"),
    ("duration: 20 s", "duration: {a: 1, b: 2", "duration: {", "'{' opened on this line is not closed"),
    ("    rate: 2/s", "     rate: 2/s", "rate: 2/s", "indented more than the line above"),
    ("    rate: 2/s", "   rate: 2/s", "rate: 2/s", "indented differently"),
    ("duration: 20 s", "duration: @20 s", "duration: @", "cannot start with '@'"),
    ("duration: 20 s", "duration: *twenty", "twenty", "anchor '&twenty' that is not defined"),
])
def test_yaml_syntax_errors_in_plain_words_with_the_line(old, new, bad_line, words):
    text = edit(old, new)
    (problem,) = problems(text, "scenario.yaml")
    assert problem.startswith(f"scenario.yaml:{line_no(text, bad_line)}: not valid YAML: "), problem
    assert words in problem


def test_a_control_character_names_its_line():
    text = edit("model: qwen3-8b", "model: qwen3\x07-8b")
    (problem,) = problems(text)
    assert problem.startswith(f"s.yaml:{line_no(text, 'model:')}: ") and "#x0007" in problem


# ------------------------------------------------------------------------------- once, not per point


def test_a_problem_at_every_sweep_point_is_reported_once():
    text = edit("capacity: 64 GiB", "capacity: 64") + "sweep:\n  workload.arrival.rate: [1/s, 2/s, 3/s, 4/s]\n"
    # the base file is already wrong: one problem, on the field's own line
    (problem,) = problems(text)
    assert problem.startswith(f"s.yaml:{line_no(text, 'capacity: 64')}: ")
    text = BASE + ("sweep:\n  workload.arrival.rate: [1/s, 2/s, 3/s, 4/s]\n"
                   "  systems.h20.kv_cache.dram.capacity: [64]\n")
    (problem,) = problems(text)
    assert "at every sweep point (4)" in problem and "needs its unit" in problem


def test_a_problem_at_some_sweep_points_names_them():
    text = BASE + "sweep:\n  workload.arrival.rate: [1/s, 2/s]\n  systems.h20.node: [h20-8x, h20-8, l20-8]\n"
    found = problems(text)
    assert len(found) == 2  # one per distinct bad name, each naming the two loads it fails at
    assert all("at sweep points [" in p and "] and [" in p for p in found)
    assert any("'h20-8'" in p and "did you mean 'h20-8x'?" in p for p in found)


def test_point_problems_merge_and_count():
    from kvsim.scenario.problems import PointProblems

    merged = PointProblems(10, lambda path, message: f"f:1: {'.'.join(path)}: {message}")
    for rate in range(5):
        merged.add(("a",), "too big", {"rate": rate})
    merged.add(("b",), "bad", {"rate": 1})
    merged.add(("c",), "always", None)
    assert merged.lines() == ["f:1: a: at 5 of 10 sweep points ([rate=0], [rate=1], [rate=2], ...): too big",
                              "f:1: b: at sweep point [rate=1]: bad", "f:1: c: always"]


SIZING_SWEEP = edit("model: qwen3-8b", "model: qwen3-235b-a22b") + "sweep:\n  workload.arrival.rate: [1/s, 2/s, 3/s]\n"


def test_a_sizing_problem_at_every_sweep_point_is_reported_once():
    from kvsim.sim import check_scenario

    scenario = parse_scenario(SIZING_SWEEP, "s.yaml")
    with pytest.raises(SpecError) as info:
        check_scenario(scenario)
    found = info.value.problems
    # qwen3-235b does not fit one card of either server, whatever the load: one line per system
    assert len(found) == 2, found
    assert all("at every sweep point (3)" in p for p in found)
