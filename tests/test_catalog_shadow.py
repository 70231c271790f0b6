"""A scenario's catalog entry named like a shipped one replaces it for that scenario: kvsim says so
(issue 27 item 4), naming the entry, its line and the shipped file; a new name with base: does not."""

from __future__ import annotations

import kvsim

SCENARIO = """name: shadow
duration: 10 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 100}
  output_tokens: {kind: fixed, value: 10}
systems:
  s: {node: h20-8x}
catalog:
  accelerators:
ENTRY
"""


def test_an_entry_with_a_shipped_name_is_warned_about_with_its_line():
    scenario = kvsim.parse_scenario(SCENARIO.replace("ENTRY", "    h20: {memory_bandwidth: 3 TB/s}"), "shadow.yaml")
    (warning,) = [w for w in scenario.warnings if "replaces the shipped" in w]
    assert warning.startswith("shadow.yaml:12: catalog.accelerators.h20:")
    assert "replaces the shipped accelerator h20 (kvsim/hardware/data/accelerators.yaml) for this scenario " \
           "(memory_bandwidth)" in warning and "base: h20" in warning
    # and it does replace it: the system runs on the changed card
    assert scenario.catalogs.accelerators["h20"].memory_bandwidth == 3e12


def test_a_new_name_started_from_a_shipped_entry_is_not_warned_about():
    scenario = kvsim.parse_scenario(SCENARIO.replace("ENTRY", "    h20-slow: {base: h20, memory_bandwidth: 3 TB/s}"),
                                    "shadow.yaml")
    assert not [w for w in scenario.warnings if "replaces the shipped" in w]


def test_the_cli_prints_the_warning(tmp_path, capsys):
    from kvsim.cli import main

    path = tmp_path / "shadow.yaml"
    path.write_text(SCENARIO.replace("ENTRY", "    h20: {memory_bandwidth: 3 TB/s}"))
    assert main(["validate", str(path)]) == 0
    assert "kvsim validate: warning: " in (err := capsys.readouterr().err) and "replaces the shipped accelerator h20" in err
