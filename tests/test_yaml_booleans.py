"""YAML 1.2 booleans: only ``true``/``false`` are booleans; YAML 1.1's ``yes/no/on/off`` are text
where a string is expected (a system named ``off``, ``name: no``) and still mean a boolean where
a boolean field expects one."""

from __future__ import annotations

import pytest

from kvsim import parse_scenario
from kvsim.cli import main
from kvsim.scenario.overrides import parse_override
from kvsim.yaml_io import SpecError, load_yaml

SCENARIO = """\
name: {name}
duration: 10 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 100}}
  output_tokens: {{kind: fixed, value: 10}}
systems:
  {system}:
    node: h20-8x
    instance: {{tp: 1}}
    kv_cache:
      gpu_direct: {flag}
      dram: {{capacity: 64 GiB}}
"""


def _line(text: str, needle: str) -> int:
    (line,) = [n for n, row in enumerate(text.splitlines(), 1) if needle in row]
    return line


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "y", "n", "Yes", "NO", "On", "OFF", "yEs"])
def test_yaml_11_words_are_text(word):
    located = load_yaml(f"a: {word}\n{word}: 1\nb: [{word}]\n", "f.yaml")
    assert located.data == {"a": word, word: 1, "b": [word]}
    assert located.lines[(word,)] == 2  # the key's line is recorded under the text, as data holds it


@pytest.mark.parametrize("word, value", [("true", True), ("True", True), ("TRUE", True),
                                         ("false", False), ("False", False), ("FALSE", False)])
def test_true_and_false_are_booleans(word, value):
    assert load_yaml(f"a: {word}\n", "f.yaml").data == {"a": value}


def test_a_system_named_off_and_a_scenario_named_no():
    scenario = parse_scenario(SCENARIO.format(name="no", system="off", flag="true"), "s.yaml")
    assert scenario.name == "no"
    assert list(scenario.spec.systems) == ["off"]


@pytest.mark.parametrize("flag, value", [("yes", True), ("on", True), ("no", False), ("off", False),
                                         ("true", True), ("false", False)])
def test_a_boolean_field_still_reads_yes_no_on_off(flag, value):
    scenario = parse_scenario(SCENARIO.format(name="x", system="s", flag=flag), "s.yaml")
    assert scenario.spec.systems["s"].kv_cache.gpu_direct is value


def test_a_word_that_is_no_boolean_is_refused_with_its_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    text = SCENARIO.format(name="x", system="s", flag="maybe")
    path.write_text(text, encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{_line(text, 'gpu_direct: maybe')}: systems.s.kv_cache.gpu_direct:" in err and "'maybe'" in err
    assert "Traceback" not in err


def test_errors_after_a_text_key_keep_their_line(tmp_path, capsys):
    text = SCENARIO.format(name="x", system="off", flag="true").replace("tp: 1", "tp: -1")
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{_line(text, 'tp: -1')}: systems.off.instance.tp:" in err


def test_set_reads_values_as_the_file_does(tmp_path, capsys):
    assert parse_override("name=off").value == "off"
    assert parse_override("systems.s.kv_cache.gpu_direct=false").value is False
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(name="x", system="s", flag="true"), encoding="utf-8")
    assert main(["validate", str(path), "--set", "name=off"]) == 0
    assert "valid scenario 'off'" in capsys.readouterr().out


def test_explicit_bool_tag_still_reads_yaml_11_words():
    assert load_yaml("a: !!bool yes\n", "f.yaml").data == {"a": True}
    with pytest.raises(SpecError):
        load_yaml("a: !!bool maybe\n", "f.yaml")
