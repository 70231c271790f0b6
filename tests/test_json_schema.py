"""`kvsim schema`: the JSON Schema editors use to complete and check scenario files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from kvsim.cli import main
from kvsim.scenario.json_schema import scenario_json_schema, scenario_json_schema_text
from kvsim.units import DIMENSIONS, EXAMPLES, UnitError, parse_quantity, quantity_pattern

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "docs" / "scenario.schema.json"
SHIPPED = sorted((ROOT / "scenarios").glob("*.yaml")) + sorted((ROOT / "benchmarks").glob("*.yaml"))


@pytest.fixture(scope="module")
def validator():
    schema = scenario_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_committed_schema_is_up_to_date():
    assert COMMITTED.read_text(encoding="utf-8") == scenario_json_schema_text(), (
        "docs/scenario.schema.json is stale: regenerate it with `kvsim schema --out docs/scenario.schema.json`")


def test_schema_command_writes_the_same_text(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["schema", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == scenario_json_schema_text()
    capsys.readouterr()
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == scenario_json_schema()


def test_schema_command_reports_an_unwritable_file(tmp_path, capsys):
    assert main(["schema", "--out", str(tmp_path / "missing" / "s.json")]) == 2
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_scenario_validates_against_the_schema(validator, path):
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(
        yaml.safe_load(path.read_text(encoding="utf-8")))]
    assert errors == []


BASE = {
    "name": "x", "duration": "20 s", "model": "qwen3-8b",
    "workload": {"arrival": {"kind": "poisson", "rate": "2/s"}, "input_tokens": {"kind": "fixed", "value": 8},
                 "output_tokens": {"kind": "fixed", "value": 8}},
    "systems": {"a": {"node": "h20-8x", "kv_cache": {"dram": {"capacity": "96 GiB"}}}},
    "catalog": {"nodes": {"big": {"base": "h20-8x", "host_dram_bytes": "2 TiB",
                                  "nics": {"bandwidth": "400 Gbit/s"}}}},
}


def _with(path: str, value):
    data = json.loads(json.dumps(BASE))
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[part]
    node[last] = value
    return data


def test_the_schema_accepts_a_valid_scenario_and_partial_catalog_entries(validator):
    assert list(validator.iter_errors(BASE)) == []


@pytest.mark.parametrize("path, value", [
    ("duration", 20),  # a bare number where seconds are due
    ("duration", "20 GB"),  # a unit of the wrong dimension
    ("systems.a.kv_cache.dram.capacity", 96),  # bare bytes
    ("systems.a.kv_cache.dram.capacity", "96 Gbit"),  # bits for a capacity
    ("catalog.nodes.big.host_dram_bytes", 2048),
    ("workload.arrival.rate", "2 s"),
    ("workload.arrival.rate", "-1/s"),  # refused by validate too: a rate must be positive
    ("duration", "-5 s"),
    ("systems.a.nodez", 2),  # an unknown field
    ("workload.arrival.kind", "poison"),
])
def test_the_schema_refuses_what_validate_refuses(validator, path, value):
    assert list(validator.iter_errors(_with(path, value))) != []


def test_quantity_fields_are_strings_with_a_pattern_and_examples():
    props = scenario_json_schema()["properties"]
    duration = props["duration"]
    assert duration["type"] == "string" and duration["examples"] == EXAMPLES["time"]
    assert duration["pattern"] == quantity_pattern("time", signed=False)  # no quantity field takes a negative


ALL_UNITS = sorted(set().union(*(d.units for d in DIMENSIONS.values()))
                   | {"Gbit", "b", "parsec", "/ s", "req / s", "M IOPS", "GB IOPS"})


@pytest.mark.parametrize("dimension", sorted(DIMENSIONS))
def test_each_pattern_accepts_exactly_what_the_parser_reads(dimension):
    # the same answer from the editor's regex and from kvsim, over every unit kvsim knows (of any dimension)
    pattern = re.compile(quantity_pattern(dimension))
    for unit in ALL_UNITS:
        for text in (f"3 {unit}", f"2.5{unit}", f" 1e3  {unit} "):
            try:
                parse_quantity(text, dimension)
                parsed = True
            except UnitError:
                parsed = False
            assert parsed == bool(pattern.search(text)), (dimension, text)
    for example in EXAMPLES[dimension]:
        assert pattern.search(example)


def test_catalog_names_are_offered_for_completion_and_other_names_stay_valid(validator):
    from kvsim.hardware import node_catalog, pool_node_catalog
    from kvsim.models import model_catalog

    schema = scenario_json_schema()
    node = schema["$defs"]["SystemSpec"]["properties"]["node"]["anyOf"]
    assert node[0]["enum"] == sorted(node_catalog().names()) and "h20-8x" in node[0]["enum"]
    pool = schema["$defs"]["RemotePoolSpec"]["properties"]["pool_node"]["anyOf"]
    assert pool[0]["enum"] == sorted(pool_node_catalog().names())
    assert schema["properties"]["model"]["anyOf"][0]["enum"] == sorted(model_catalog().names())
    # a scenario's own catalog entry is a valid name too (kvsim validate checks the reference)
    assert list(validator.iter_errors(_with("systems.a.node", "big"))) == []
    assert list(validator.iter_errors(_with("systems.a.node", 5))) != []


def test_a_bare_number_where_a_distribution_belongs_gets_the_fix(tmp_path):
    import kvsim
    from kvsim.yaml_io import SpecError

    text = ("name: x\nduration: 10 s\nmodel: qwen3-1.7b\nworkload:\n  arrival: {kind: poisson, rate: 1/s}\n"
            "  input_tokens: 512\n  output_tokens: {kind: fixed, value: 1}\nsystems:\n  a: {node: h20-8x, instance: 4}\n")
    with pytest.raises(SpecError) as caught:
        kvsim.parse_scenario(text, "x.yaml")
    message = str(caught.value)
    assert "x.yaml:6: workload.input_tokens: expected a mapping with a kind, got the bare number 512: " \
           "write {kind: fixed, value: 512}" in message
    assert "x.yaml:9: systems.a.instance: expected a mapping of fields, got the bare number 4; fields allowed " \
           "here: tp, pp" in message
