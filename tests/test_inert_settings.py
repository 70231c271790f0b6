"""Settings that would do nothing are refused (or warned about) before the run, with file:line.

kvsim/scenario/inert.py: an error when a setting can never matter, a warning when it matters at
some sweep points or systems and not at others. ``kvsim validate`` also says which layouts a
``layout: best`` system will try.
"""

from __future__ import annotations

import pytest

import kvsim
from kvsim.cli import main

BASE = """\
name: inert
duration: 10 s
model: {model}
dtype: fp8
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 100}}
  output_tokens: {{kind: fixed, value: 10}}
systems:
  s:
    node: h20-8x
    instances: 1
    instance:
      tp: 8
{extra}"""


def scenario(extra: str = "", model: str = "qwen3-235b-a22b", instance: str = "") -> str:
    text = BASE.format(model=model, extra=extra)
    return text.replace("      tp: 8\n", "      tp: 8\n" + instance) if instance else text


def validate(tmp_path, capsys, text: str) -> tuple[int, str, str, str]:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    rc = main(["validate", str(path)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return rc, captured.out, captured.err, str(path)


def line_of(text: str, needle: str) -> int:
    hits = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    assert len(hits) == 1, hits
    return hits[0]


def refused(tmp_path, capsys, text: str, field: str, needle: str) -> str:
    """Exit 2 and exactly one problem, ``path:line: field: ...`` on the line of ``needle``."""
    rc, out, err, path = validate(tmp_path, capsys, text)
    assert rc == 2 and out == "", err
    problems = [line.strip() for line in err.splitlines() if line.startswith("  ")]
    assert len(problems) == 1, err
    assert problems[0].startswith(f"{path}:{line_of(text, needle)}: {field}: does nothing"), problems[0]
    return problems[0]


def test_the_base_is_valid_and_quiet(tmp_path, capsys):
    rc, out, err, _ = validate(tmp_path, capsys, scenario())
    assert rc == 0 and err == "" and "valid scenario" in out


def test_expert_skew_without_expert_parallelism_is_refused(tmp_path, capsys):
    text = scenario(instance="      expert_skew: 1.0\n")
    msg = refused(tmp_path, capsys, text, "systems.s.instance.expert_skew", "expert_skew")
    assert "tp8 inside one h20-8x node is plain tensor parallelism" in msg and "ep = tp" in msg
    # with the experts spread over the cards it is read: accepted
    rc, _, err, _ = validate(tmp_path, capsys, scenario(instance="      ep: 8\n      expert_skew: 1.0\n"))
    assert rc == 0 and err == ""
    # with its cold experts offloaded it picks them: accepted too (kvsim.models.weight_offload)
    rc, _, err, _ = validate(tmp_path, capsys, scenario(
        instance="      expert_skew: 1.0\n      weight_offload: {fraction: 0.25}\n"))
    assert rc == 0 and err == ""


def test_expert_skew_on_a_dense_model_is_refused(tmp_path, capsys):
    text = scenario(model="qwen3-8b", instance="      expert_skew: 0.5\n")
    msg = refused(tmp_path, capsys, text, "systems.s.instance.expert_skew", "expert_skew")
    assert "qwen3-8b is a dense model" in msg and msg.endswith("; remove it")


def test_micro_batches_and_pp_schedule_on_plain_tp_are_refused(tmp_path, capsys):
    text = scenario(instance="      micro_batches: 4\n")
    msg = refused(tmp_path, capsys, text, "systems.s.instance.micro_batches", "micro_batches")
    assert "plain tensor parallelism" in msg and "micro-batches exist only with pp > 1" in msg
    text = scenario(instance="      pp_schedule: flush\n")
    msg = refused(tmp_path, capsys, text, "systems.s.instance.pp_schedule", "pp_schedule")
    assert "pp > 1" in msg
    # with pipeline stages both are read
    both = scenario(instance="      pp: 1\n      micro_batches: 4\n      pp_schedule: flush\n").replace(
        "tp: 8\n      pp: 1", "tp: 4\n      pp: 2")
    rc, _, err, _ = validate(tmp_path, capsys, both)
    assert rc == 0 and err == ""


def test_lm_head_format_of_a_tied_model_is_refused(tmp_path, capsys):
    text = scenario(model="qwen3-1.7b", extra="weight_dtypes: {lm_head: bf16}\n")
    msg = refused(tmp_path, capsys, text, "weight_dtypes.lm_head", "weight_dtypes")
    assert "qwen3-1.7b ties its output projection" in msg and "weight_dtypes.embedding" in msg
    rc, _, err, _ = validate(tmp_path, capsys, scenario(model="qwen3-8b", extra="weight_dtypes: {lm_head: bf16}\n"))
    assert rc == 0 and err == ""  # qwen3-8b has its own lm_head


def test_expert_format_of_a_dense_model_is_refused_at_system_level_too(tmp_path, capsys):
    text = scenario(model="qwen3-8b").replace("    node: h20-8x\n", "    node: h20-8x\n    weight_dtypes: {experts: fp4}\n")
    msg = refused(tmp_path, capsys, text, "systems.s.weight_dtypes.experts", "weight_dtypes")
    assert "qwen3-8b is a dense model: it has no routed experts" in msg


def test_a_setting_that_matters_at_some_sweep_points_is_a_warning(tmp_path, capsys):
    text = scenario(instance="      expert_skew: 1.0\n", extra="sweep:\n  systems.s.instance.ep: [1, 8]\n")
    rc, out, err, path = validate(tmp_path, capsys, text)
    assert rc == 0 and "valid scenario" in out
    [warning] = err.splitlines()
    assert warning.startswith(f"kvsim validate: warning: {path}:{line_of(text, 'expert_skew')}: "
                              "systems.s.instance.expert_skew: does nothing at sweep point "
                              "[systems.s.instance.ep=1]: ")
    assert warning.endswith("(it applies elsewhere, so it is kept)")


def test_a_scenario_wide_format_idle_for_one_system_is_a_warning(tmp_path, capsys):
    text = scenario(extra="  dense:\n    node: h20-8x\n    model: qwen3-8b\n    instances: 1\n"
                          "weight_dtypes: {experts: mxfp4}\n")
    rc, _, err, path = validate(tmp_path, capsys, text)
    assert rc == 0
    [warning] = err.splitlines()
    assert warning.startswith(f"kvsim validate: warning: {path}:{line_of(text, 'weight_dtypes')}: "
                              "weight_dtypes.experts: does nothing for system dense: qwen3-8b is a dense model")


def test_a_swept_setting_idle_at_every_point_is_refused_at_the_sweep_key(tmp_path, capsys):
    text = scenario(extra="sweep:\n  systems.s.instance.expert_skew: [0.5, 1.0]\n")
    msg = refused(tmp_path, capsys, text, "sweep.systems.s.instance.expert_skew", "systems.s.instance.expert_skew")
    assert "(at every sweep point)" in msg


def test_layout_best_refuses_only_what_no_candidate_reads(tmp_path, capsys):
    best = "    instance:\n      layout: best\n      expert_skew: 1.0\n"
    dense = scenario(model="qwen3-8b").replace("    instance:\n      tp: 8\n", best)
    msg = refused(tmp_path, capsys, dense, "systems.s.instance.expert_skew", "expert_skew")
    assert "none of the layouts layout: best tries (tp1, tp1 pp2" in msg and "dense" in msg
    # a MoE model's candidates include expert-parallel layouts: the search may use it
    moe = scenario().replace("    instance:\n      tp: 8\n", best)
    rc, _, err, _ = validate(tmp_path, capsys, moe)
    assert rc == 0 and err == ""


def test_python_changes_make_warnings_not_errors():
    # a notebook switching the layout back to plain TP keeps its expert_skew: warned, not refused
    text = scenario(instance="      ep: 8\n      expert_skew: 1.0\n")
    loaded = kvsim.parse_scenario(text, "s.yaml")
    assert loaded.warnings == ()
    changed = loaded.with_changes({"systems.s.instance.ep": 1})
    [warning] = changed.warnings
    assert warning.startswith(f"s.yaml:{line_of(text, 'expert_skew')}: systems.s.instance.expert_skew: does nothing: ")
    with pytest.raises(kvsim.SpecError, match="expert_skew: does nothing"):
        kvsim.parse_scenario(scenario(instance="      expert_skew: 1.0\n"), "s.yaml")


def test_validate_lists_the_layouts_a_best_system_will_try(tmp_path, capsys):
    from kvsim.sim.layout_search import search_space

    text = scenario(model="qwen3-8b").replace("    instance:\n      tp: 8\n", "    instance: {layout: best}\n")
    rc, out, err, _ = validate(tmp_path, capsys, text)
    assert rc == 0 and err == ""
    loaded = kvsim.parse_scenario(text, "s.yaml")
    (_, layouts), = search_space(loaded.spec, "s", loaded.catalogs).pools
    tried = [layout.label() for layout in layouts]
    assert "tp1" in tried and "tp8" in tried
    lines = out.splitlines()
    assert lines[1].startswith("  s: qwen3-8b fp8, 1 x h20-8x, layout: best, chosen when it runs: pilots of 10 s of "
                               f"{len(tried)} layout(s), then the best 3 at full length")
    assert lines[2] == "    layouts tried: " + ", ".join(tried)


def test_run_prints_the_warnings_before_running(tmp_path, capsys):
    text = scenario(model="qwen3-8b", extra="  moe:\n    node: h20-8x\n    model: gpt-oss-120b\n    instances: 1\n"
                                            "    instance: {tp: 8}\nweight_dtypes: {experts: mxfp4}\n")
    text = text.replace("duration: 10 s", "duration: 3 s")
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"kvsim run: warning: {path}:{line_of(text, 'weight_dtypes')}: weight_dtypes.experts: "
                          "does nothing for system s: qwen3-8b is a dense model")


def test_defaults_written_out_are_not_reported(tmp_path, capsys):
    # a resolved scenario writes every field, defaults included: they ask for nothing
    text = scenario(instance="      expert_skew: 0.0\n      micro_batches: null\n      pp_schedule: continuous\n")
    rc, _, err, _ = validate(tmp_path, capsys, text)
    assert rc == 0 and err == ""
