"""A study's fields are checked when the scenario is read, not after the simulation: a metric
typo once gave an infinite gap with exit 0, a bad x or panel a traceback after the run."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.yaml_io import SpecError

GAP = """
name: gap
duration: 20 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 500}}
  output_tokens: {{kind: fixed, value: 10}}
systems:
  h: {{node: h20-8x, instances: 1}}
  l: {{node: l20-8x, instances: 1}}
sweep:
  workload.arrival.rate: [1/s, 2/s]
study:
  kind: gap
  configs: {{none: [h, l]}}
{extra}
"""


@pytest.mark.parametrize("extra, field, words", [
    ("  metric: input_token_per_s", "study.metric", "did you mean 'input_tokens_per_s'"),
    ("  x: workload.arrival.rat", "study.x", "is not a swept field"),
    ("  panel: workload.input_tokens", "study.panel", "is not a swept field"),
])
def test_study_fields_are_checked_before_the_run(extra, field, words):
    with pytest.raises(SpecError) as info:
        kvsim.parse_scenario(GAP.format(extra=extra), "gap.yaml")
    message = str(info.value)
    assert "gap.yaml:" in message and f"{field}: " in message and words in message.lower().replace('"', "'")


def test_a_correct_gap_study_reads():
    scenario = kvsim.parse_scenario(GAP.format(extra="  metric: output_tokens_per_s\n  x: workload.arrival.rate"),
                                    "gap.yaml")
    assert scenario.spec.study.metric == "output_tokens_per_s"
