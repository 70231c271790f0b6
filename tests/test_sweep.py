"""Sweep expansion (kvsim/scenario/sweep.py), sweep points of a parsed scenario, and ``Scenario.with_changes``."""

from __future__ import annotations

import copy

import pytest

import kvsim
from kvsim.scenario.sweep import grid_points, set_path, split_path

SCENARIO = """\
name: sweep-test
seed: 4
duration: 20 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: fixed, value: 128}
  output_tokens: {kind: fixed, value: 32}
systems:
  a: {node: h20-8x, instances: 1, instance: {tp: 1}}
  b: {node: l20-8x, instances: 1}
"""
SWEEP = """\
sweep:
  workload.arrival.rate: [5/s, 30/min]
  systems.a.instance.tp: [1, 2, 4]
"""


# --------------------------------------------------------------------------- grid_points


def test_grid_points_without_sweep_is_one_empty_point():
    assert grid_points({}) == [{}]


def test_grid_points_count_and_order_last_key_fastest():
    points = grid_points({"x": [1, 2], "y": ["a", "b", "c"]})
    assert points == [
        {"x": 1, "y": "a"}, {"x": 1, "y": "b"}, {"x": 1, "y": "c"},
        {"x": 2, "y": "a"}, {"x": 2, "y": "b"}, {"x": 2, "y": "c"},
    ]


def test_grid_points_three_keys_follow_written_order():
    sweep = {"z": [0, 1], "a": [10, 20, 30], "m": ["p", "q"]}
    points = grid_points(sweep)
    assert len(points) == 2 * 3 * 2
    assert all(list(p) == ["z", "a", "m"] for p in points)  # keys keep the order written
    assert [p["m"] for p in points[:4]] == ["p", "q", "p", "q"]  # last key varies fastest
    assert [p["a"] for p in points[:6]] == [10, 10, 20, 20, 30, 30]
    assert [p["z"] for p in points] == [0] * 6 + [1] * 6  # first key slowest
    assert len({tuple(p.values()) for p in points}) == 12  # every combination exactly once


def test_grid_points_single_key():
    assert grid_points({"k": ["only"]}) == [{"k": "only"}]


# --------------------------------------------------------------------------- split_path / set_path


def test_split_path_turns_digits_into_indices():
    assert split_path("systems.h20.instance.tp") == ["systems", "h20", "instance", "tp"]
    assert split_path("items.2.value") == ["items", 2, "value"]
    with pytest.raises(ValueError):
        split_path("a..b")


def test_set_path_creates_nested_mappings():
    assert set_path({}, "a.b.c", 1) == {"a": {"b": {"c": 1}}}
    # an explicit null in the data is replaced by a mapping too
    assert set_path({"slo": None}, "slo.ttft_p99", "2 s") == {"slo": {"ttft_p99": "2 s"}}


def test_set_path_keeps_siblings_and_does_not_mutate_input():
    data = {"workload": {"arrival": {"kind": "poisson", "rate": "2/s"}, "input_tokens": {"value": 3}}}
    before = copy.deepcopy(data)
    out = set_path(data, "workload.arrival.rate", "9/s")
    assert data == before  # the input is untouched
    assert out["workload"]["arrival"] == {"kind": "poisson", "rate": "9/s"}
    assert out["workload"]["input_tokens"] == {"value": 3}
    # the result shares no mutable parts with the input
    out["workload"]["input_tokens"]["value"] = 99
    assert data["workload"]["input_tokens"]["value"] == 3


def test_set_path_copies_the_value():
    value = {"tp": 2}
    out = set_path({}, "instance", value)
    value["tp"] = 8
    assert out == {"instance": {"tp": 2}}


def test_set_path_list_indices():
    data = {"items": [{"v": 1}, {"v": 2}]}
    assert set_path(data, "items.1.v", 5) == {"items": [{"v": 1}, {"v": 5}]}
    assert set_path(data, "items.0", "x") == {"items": ["x", {"v": 2}]}
    assert data == {"items": [{"v": 1}, {"v": 2}]}
    with pytest.raises(ValueError, match="no such list item"):
        set_path(data, "items.5.v", 1)
    with pytest.raises(ValueError, match="no such list item"):
        set_path(data, "items.name.v", 1)  # a list needs an index


def test_set_path_through_a_scalar_is_refused():
    with pytest.raises(ValueError, match="not a mapping"):
        set_path({"name": "x"}, "name.first", 1)
    with pytest.raises(ValueError, match="not a mapping"):
        set_path({"a": {"b": 3}}, "a.b.c.d", 1)


# --------------------------------------------------------------------------- parsed sweep points


def test_sweep_points_carry_swept_values_in_si():
    scenario = kvsim.parse_scenario(SCENARIO + SWEEP, "s.yaml")
    assert len(scenario.points) == 6
    assert [p.index for p in scenario.points] == list(range(6))
    rates = [p.spec.workload.arrival.rate for p in scenario.points]
    tps = [p.spec.systems["a"].instance.tp for p in scenario.points]
    assert rates == [5.0, 5.0, 5.0, 0.5, 0.5, 0.5]  # "30/min" is 0.5 per second
    assert tps == [1, 2, 4, 1, 2, 4]
    # only the swept system changes
    assert all(p.spec.systems["b"].instance.tp == 1 for p in scenario.points)
    assert all(p.spec.sweep == {} for p in scenario.points)


def test_sweep_point_params_keep_written_values():
    scenario = kvsim.parse_scenario(SCENARIO + SWEEP, "s.yaml")
    assert scenario.points[0].params == {"workload.arrival.rate": "5/s", "systems.a.instance.tp": 1}
    assert scenario.points[5].params == {"workload.arrival.rate": "30/min", "systems.a.instance.tp": 4}
    assert list(scenario.points[3].params) == ["workload.arrival.rate", "systems.a.instance.tp"]


def test_base_spec_keeps_unswept_values():
    scenario = kvsim.parse_scenario(SCENARIO + SWEEP, "s.yaml")
    assert scenario.spec.workload.arrival.rate == 2.0
    assert scenario.spec.systems["a"].instance.tp == 1
    assert scenario.spec.sweep == {"workload.arrival.rate": ["5/s", "30/min"], "systems.a.instance.tp": [1, 2, 4]}


def test_no_sweep_is_one_point_with_the_base_spec():
    scenario = kvsim.parse_scenario(SCENARIO, "s.yaml")
    assert len(scenario.points) == 1
    assert scenario.points[0].params == {}
    assert scenario.points[0].spec == scenario.spec


def test_every_sweep_point_is_sized():
    # tp 2 and 4 divide the 8-card node, so every point can run
    scenario = kvsim.parse_scenario(SCENARIO + SWEEP, "s.yaml")
    kvsim.check(scenario)
    bad = kvsim.parse_scenario(SCENARIO + "sweep:\n  systems.a.instance.tp: [1, 3]\n", "s.yaml")
    with pytest.raises(kvsim.SpecError, match="tp=3"):
        kvsim.check(bad)


# --------------------------------------------------------------------------- with_changes


def test_with_changes_returns_a_new_scenario_and_leaves_the_original():
    original = kvsim.parse_scenario(SCENARIO + SWEEP, "s.yaml")
    raw_before = copy.deepcopy(original.raw)
    changed = original.with_changes({"workload.arrival.rate": "10/s", "sweep": {}})
    assert changed is not original
    assert changed.spec.workload.arrival.rate == 10.0
    assert len(changed.points) == 1 and changed.points[0].spec.workload.arrival.rate == 10.0
    # the original is untouched: spec, raw data and sweep points
    assert original.spec.workload.arrival.rate == 2.0
    assert original.raw == raw_before
    assert len(original.points) == 6


def test_with_changes_accepts_unit_strings_and_si_numbers():
    scenario = kvsim.parse_scenario(SCENARIO, "s.yaml")
    by_string = scenario.with_changes({"workload.arrival.rate": "30/min", "duration": "1 min"})
    by_number = scenario.with_changes({"workload.arrival.rate": 0.5, "duration": 60})
    assert by_string.spec.workload.arrival.rate == by_number.spec.workload.arrival.rate == 0.5
    assert by_string.spec.duration == by_number.spec.duration == 60.0


def test_with_changes_keyword_form_and_new_nested_field():
    scenario = kvsim.parse_scenario(SCENARIO, "s.yaml")
    changed = scenario.with_changes({"slo.e2e_p99": "5 s"}, warmup="2 s")
    assert changed.spec.slo.e2e_p99 == 5.0  # slo: was absent from the file
    assert changed.spec.warmup == 2.0
    assert scenario.spec.slo.e2e_p99 is None and scenario.spec.warmup == 5.0


def test_with_changes_can_add_a_sweep():
    scenario = kvsim.parse_scenario(SCENARIO, "s.yaml")
    swept = scenario.with_changes({"sweep": {"workload.arrival.rate": ["1/s", "3/s"]}})
    assert [p.spec.workload.arrival.rate for p in swept.points] == [1.0, 3.0]
    assert [p.params for p in swept.points] == [{"workload.arrival.rate": "1/s"}, {"workload.arrival.rate": "3/s"}]


@pytest.mark.parametrize("changes, field", [
    ({"workload.arrival.rate": "-1/s"}, "workload.arrival.rate"),
    ({"workload.arrival.rate": -1}, "workload.arrival.rate"),
    ({"workload.arrival.rate": "2 GB"}, "workload.arrival.rate"),
    ({"systems.a.node": "zz-8x"}, "systems.a.node"),
    ({"model": "no-such-model"}, "model"),
    ({"systems.a.instance.tpx": 2}, "systems.a.instance.tpx"),
    ({"name.first": "x"}, "name.first"),
])
def test_with_changes_invalid_value_raises_spec_error(changes, field):
    scenario = kvsim.parse_scenario(SCENARIO, "s.yaml")
    with pytest.raises(kvsim.SpecError) as info:
        scenario.with_changes(changes)
    text = str(info.value)
    assert "s.yaml" in text and field in text
    assert "Traceback" not in text


def test_with_changes_invalid_value_names_the_line_of_the_field():
    scenario = kvsim.parse_scenario(SCENARIO, "s.yaml")
    rate_line = next(i for i, line in enumerate(SCENARIO.splitlines(), 1) if "rate:" in line)
    with pytest.raises(kvsim.SpecError) as info:
        scenario.with_changes({"workload.arrival.rate": "-1/s"})
    assert info.value.problems[0].startswith(f"s.yaml:{rate_line}: workload.arrival.rate: ")


def test_zipped_sweep_keys_move_fields_together():
    from kvsim.scenario.sweep import grid_points

    points = grid_points({"a.x, a.y": [[1, 10], [2, 20]], "b": ["p", "q"]})
    assert points == [{"a.x": 1, "a.y": 10, "b": "p"}, {"a.x": 1, "a.y": 10, "b": "q"},
                      {"a.x": 2, "a.y": 20, "b": "p"}, {"a.x": 2, "a.y": 20, "b": "q"}]


def test_zipped_sweep_in_a_scenario_and_its_errors():
    text = """
name: zipped
duration: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
systems:
  a: {node: h20-8x}
sweep:
  "workload.input_tokens.value, workload.output_tokens.value": [[200, 20], [400, 40]]
"""
    scenario = kvsim.parse_scenario(text, "z.yaml")
    pairs = [(p.spec.workload.input_tokens.value, p.spec.workload.output_tokens.value) for p in scenario.points]
    assert pairs == [(200, 20), (400, 40)]
    bad = text.replace("[[200, 20], [400, 40]]", "[[200, 20], [400]]")
    with pytest.raises(kvsim.SpecError, match=r"z\.yaml:12: .*one per field"):
        kvsim.parse_scenario(bad, "z.yaml")
    negative = text.replace("[[200, 20], [400, 40]]", "[[200, 20], [400, -4]]")
    with pytest.raises(kvsim.SpecError, match=r"z\.yaml:12: .*sweep point"):
        kvsim.parse_scenario(negative, "z.yaml")
