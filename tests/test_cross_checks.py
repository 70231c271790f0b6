"""Every setting cross-checked before the run (issue 22, items 2 and 3).

A P:D controller's settings, every numeric field's physical range, and a model's architecture
(catalog entries and scenario overrides) are refused at ``kvsim validate`` (and ``kvsim run``) time
with one ``file:line: field: message`` and exit 2, instead of a run that spins, never switches, or
dies with an internal error. Each case below edits one line of a valid base scenario (checked valid
first), so the line of the field is known; helpers are those of tests/test_bad_input.py.
"""

from __future__ import annotations

import math
import types
import typing

import pytest
from pydantic import BaseModel, ValidationError

from test_bad_input import assert_bad, cli, edit, line_no, write

# A disaggregated system whose controller reads an attainment signal (block style: one field a line).
PD = """\
name: cross-checks
duration: 10 s
model: qwen3-8b
workload:
  arrival:
    kind: poisson
    rate: 2/s
  input_tokens:
    kind: fixed
    value: 100
  output_tokens:
    kind: fixed
    value: 10
slo:
  ttft_p99: 2 s
  tpot_p99: 100 ms
systems:
  pd:
    pools:
      h:
        node: h20-8x
        roles:
          prefill: 4
          decode: 4
    controller:
      kind: threshold
      signal: ttft_attainment
      interval: 5 s
      low: 0.5
      high: 0.9
"""

# The same system with a proportional controller on the decode KV occupancy.
PD_PROPORTIONAL = edit("      kind: threshold\n      signal: ttft_attainment\n      interval: 5 s\n      low: 0.5\n"
                       "      high: 0.9\n",
                       "      kind: proportional\n      signal: decode_kv_occupancy\n      interval: 5 s\n"
                       "      setpoint: 0.5\n      gain: 8\n", PD)

# A colocated system on catalog parts the scenario overrides, with offload tiers.
PARTS = """\
name: cross-parts
duration: 10 s
model: moe
dtype: fp8
workload:
  arrival:
    kind: poisson
    rate: 2/s
  input_tokens:
    kind: fixed
    value: 100
  output_tokens:
    kind: fixed
    value: 10
catalog:
  models:
    moe:
      base: qwen3-235b-a22b
      num_kv_heads: 4
      moe:
        experts_per_token: 8
        first_dense_layers: 0
  accelerators:
    card:
      base: h20
      memory_bytes: 96 GiB
  nodes:
    box:
      base: h20-8x
      accelerator: card
      host_dram_bytes: 2 TiB
      nvme:
        count: 4
        capacity_bytes: 3.84 TB
  pool_nodes:
    store:
      base: nvme-storage-16x
      capacity_bytes: 100 TB
systems:
  s:
    node: box
    instance:
      tp: 8
    kv_cache:
      dram:
        capacity: 64 GiB
      nvme:
        capacity: 1 TB
"""


def validate_refused(tmp_path, capsys, text: str, field: str, needle: str, *words: str, command: str = "validate"):
    """``kvsim validate`` (or ``run``) refuses ``text`` with exit 2 and one problem at ``field`` on the
    line holding ``needle``, whose message has every one of ``words``; returns the problem."""
    path = write(tmp_path, "s.yaml", text)
    argv = [command, path] + (["--out", tmp_path / "out", "--no-progress", "--watchdog-s", "10"]
                              if command == "run" else [])
    rc, out, err = cli(capsys, *argv)
    if command == "run":
        assert rc == 2 and "Traceback" not in err, (rc, err)
        out = ""  # run prints its plan on stdout before it checks
    problem = assert_bad(rc, out, err, path, field, line_no(text, needle))
    for word in words:
        assert word in problem, problem
    return problem


@pytest.mark.parametrize("base", [PD, PARTS], ids=["pd", "parts"])
def test_the_bases_are_valid(tmp_path, capsys, base):
    rc, out, err = cli(capsys, "validate", write(tmp_path, "s.yaml", base))
    assert rc == 0 and err == "", err


# --------------------------------------------------------------------------- the P:D controller

@pytest.mark.parametrize("base, old, new, field, words", [
    # a tick every 0 s spins at t = 0 until the watchdog stops the run (exit 3)
    (PD, "interval: 5 s", "interval: 0 s", "interval", ["must be positive"]),
    # an empty trailing window has no attainment to read
    (PD, "interval: 5 s", "interval: 5 s\n      window: 0 s", "window", ["must be positive"]),
    # attainment is a share: a band beyond [0, 1] holds (or pushes) for ever
    (PD, "high: 0.9", "high: 1.5", "high", ["ttft_attainment is a share, in [0, 1]", "1.5"]),
    (PD, "low: 0.5", "low: -0.5", "low", ["must not be negative"]),
    (PD_PROPORTIONAL, "setpoint: 0.5", "setpoint: 1.2", "setpoint", ["decode_kv_occupancy is a share", "1.2"]),
    (PD_PROPORTIONAL, "setpoint: 0.5", "setpoint: -3", "setpoint", ["must not be negative"]),
    # the static controller samples the timeline every interval: 0 s spins too
    (PD, "      kind: threshold\n      signal: ttft_attainment\n      interval: 5 s\n      low: 0.5\n      high: 0.9\n",
     "      kind: static\n      interval: 0 s\n", "interval", ["must be positive"]),
])
def test_a_controller_setting_out_of_range_is_refused_at_its_line(tmp_path, capsys, base, old, new, field, words):
    text = edit(old, new, base)
    needle = new.strip().splitlines()[-1] if field != "interval" else "interval: 0 s"
    validate_refused(tmp_path, capsys, text, f"systems.pd.controller.{field}", needle, *words)


def test_a_queue_band_in_tokens_is_not_a_share(tmp_path, capsys):
    # prefill_queue counts tokens: a band above 1 is what it is for
    text = edit("signal: ttft_attainment", "signal: prefill_queue", edit("high: 0.9", "high: 50000", PD))
    rc, _, err = cli(capsys, "validate", write(tmp_path, "s.yaml", text))
    assert rc == 0, err


@pytest.mark.parametrize("added, field, words", [
    # min_prefill equal to every instance leaves none to decode
    ("      min_prefill: 8\n", "min_prefill", ["min_prefill 8 with min_decode 1 needs 9 instances", "has 8",
                                               "at most 7"]),
    # the two minimums together exceed the instances
    ("      min_prefill: 5\n      min_decode: 4\n", "min_prefill", ["needs 9 instances", "at most 4"]),
    ("      min_decode: 9\n", "min_decode", ["min_decode 9 with min_prefill 1", "at most 7"]),
])
def test_controller_minimums_must_fit_in_the_system(tmp_path, capsys, added, field, words):
    text = edit("      interval: 5 s\n", "      interval: 5 s\n" + added, PD)
    needle = f"{field}: " + added.split(f"{field}: ")[1].split()[0]
    validate_refused(tmp_path, capsys, text, f"systems.pd.controller.{field}", needle, *words)


def test_minimums_that_fill_the_system_exactly_are_accepted(tmp_path, capsys):
    text = edit("      interval: 5 s\n", "      interval: 5 s\n      min_prefill: 4\n      min_decode: 4\n", PD)
    rc, _, err = cli(capsys, "validate", write(tmp_path, "s.yaml", text))
    assert rc == 0, err


def test_run_refuses_a_zero_interval_before_it_starts(tmp_path, capsys):
    text = edit("interval: 5 s", "interval: 0 s", PD)
    validate_refused(tmp_path, capsys, text, "systems.pd.controller.interval", "interval: 0 s", command="run")
    assert not (tmp_path / "out" / "summary.json").exists()


def test_a_controller_deciding_more_often_than_any_run_needs_is_refused(tmp_path, capsys):
    """1 us over 10 s is 10^7 decisions: the run would take about an hour of CPU (no stall for the
    watchdog to see), so it is refused at the interval's line, with what it would cost."""
    text = edit("interval: 5 s", "interval: 1 us", PD)
    validate_refused(tmp_path, capsys, text, "systems.pd.controller.interval", "interval: 1 us", "1e+07 decisions",
                     "at most 1e+06")
    # 10 ms over 10 s (1,000 decisions) is fine
    path = write(tmp_path, "ok.yaml", edit("interval: 5 s", "interval: 10 ms", PD))
    assert cli(capsys, "validate", path)[0] == 0


def test_a_huge_gain_moves_at_most_max_step_instead_of_overflowing(tmp_path, capsys):
    # gain x error was rounded before it was clamped: infinity has no int (exit 3)
    text = edit("setpoint: 0.5", "setpoint: 0", edit("gain: 8", "gain: 1e308", edit(
        "signal: decode_kv_occupancy", "signal: prefill_queue", PD_PROPORTIONAL)))
    text = edit("rate: 2/s", "rate: 50/s", edit("value: 100", "value: 4000", text))
    rc, out, err = cli(capsys, "run", write(tmp_path, "s.yaml", text), "--out", tmp_path / "out", "--no-progress",
                       "--no-report")
    assert rc == 0 and "Traceback" not in err, err


# --------------------------------------------------------------------------- model overrides

@pytest.mark.parametrize("old, new, field, words", [
    # more dense layers than layers: negative weight bytes, then a negative step time (exit 3)
    ("first_dense_layers: 0", "first_dense_layers: 200", "moe.first_dense_layers",
     ["200 dense layers", "num_layers 94", "at most 93"]),
    # as many: an MoE model without an MoE layer
    ("first_dense_layers: 0", "first_dense_layers: 94", "moe.first_dense_layers", ["leave no MoE layers"]),
    ("experts_per_token: 8", "experts_per_token: 200", "moe.experts_per_token", ["num_experts 128"]),
    ("num_kv_heads: 4", "num_kv_heads: 5", "num_kv_heads", ["multiple of num_kv_heads (5)"]),
    ("num_kv_heads: 4", "num_kv_heads: 128", "num_kv_heads", ["more than num_attention_heads (64)"]),
    ("num_kv_heads: 4", "num_kv_heads: 4\n      sliding_window: 128\n      sliding_window_layers: 100",
     "sliding_window_layers", ["num_layers 94"]),
    ("num_kv_heads: 4", "num_kv_heads: 4\n      sliding_window_layers: 10", "sliding_window_layers",
     ["needs sliding_window"]),
    # a size no engine holds; its weights would be ~1e40 TiB
    ("num_kv_heads: 4", "num_kv_heads: 4\n      num_layers: 10000000000000000000000000000000000000000",
     "num_layers", ["less than or equal to 2147483647"]),
])
def test_a_model_override_that_contradicts_itself_is_refused_at_the_field(tmp_path, capsys, old, new, field, words):
    text = edit(old, new, PARTS)
    needle = new.strip().splitlines()[-1]
    validate_refused(tmp_path, capsys, text, f"catalog.models.moe.{field}", needle, *words)


def test_run_refuses_more_dense_layers_than_layers(tmp_path, capsys):
    text = edit("first_dense_layers: 0", "first_dense_layers: 200", PARTS)
    validate_refused(tmp_path, capsys, text, "catalog.models.moe.moe.first_dense_layers", "first_dense_layers: 200",
                     command="run")


def test_python_callers_get_the_model_checks_too():
    from kvsim.models import ModelSpec, model_catalog

    fields = {**model_catalog().raw["deepseek-r1"], "num_layers": 2}  # 3 dense layers of 2
    with pytest.raises(ValidationError) as info:
        ModelSpec.model_validate({**fields, "name": "short"})
    [error] = info.value.errors()
    assert error["loc"] == ("moe", "first_dense_layers") and "num_layers 2" in error["msg"]


def test_a_derived_quantity_that_is_not_positive_is_refused(monkeypatch):
    # the net under the field checks: whatever the fields, a model with no weight bytes is refused
    from kvsim.models import ModelSpec, model_catalog

    monkeypatch.setattr(ModelSpec, "weight_bytes", lambda self, dtype, weight_dtypes=None: -1.0)
    with pytest.raises(ValidationError) as info:
        ModelSpec.model_validate({**model_catalog().raw["qwen3-8b"], "name": "q"})
    [error] = info.value.errors()
    assert error["loc"] == () and "-1 weight bytes" in error["msg"]


def test_every_shipped_model_loads_with_sane_derived_quantities():
    # a guard for the catalog (it held before too): what the validator checks, checked from outside
    from kvsim.models import model_catalog

    catalog = model_catalog()
    assert len(catalog.names()) >= 15
    for name in catalog.names():
        model = catalog[name]
        assert 0 < model.active_params <= model.total_params, name
        assert all(params >= 0 for params in model.group_params().values()), name
        for value in (model.weight_bytes("bf16"), model.kv_bytes_per_token("bf16"), model.linear_flops_per_token,
                      model.attention_flops_per_pair(decode=True)):
            assert math.isfinite(value) and value > 0, name


# --------------------------------------------------------------------------- physical ranges

@pytest.mark.parametrize("base, old, new, field", [
    (PD, "ttft_p99: 2 s", "ttft_p99: 0 s", "slo.ttft_p99"),
    (PD, "tpot_p99: 100 ms", "tpot_p99: 0 ms", "slo.tpot_p99"),
    (PD, "    kind: fixed\n    value: 10\n", "    kind: empirical\n    values: [10, 0, 30]\n",
     "workload.output_tokens.values[1]"),
    (PD, "low: 0.5", "low: -1", "systems.pd.controller.low"),
    (PD, "high: 0.9", "high: 1.5", "systems.pd.controller.high"),
    (PD_PROPORTIONAL, "setpoint: 0.5", "setpoint: 1.5", "systems.pd.controller.setpoint"),
    (PARTS, "memory_bytes: 96 GiB", "memory_bytes: 0 B", "catalog.accelerators.card.memory_bytes"),
    (PARTS, "host_dram_bytes: 2 TiB", "host_dram_bytes: 0 B", "catalog.nodes.box.host_dram_bytes"),
    (PARTS, "capacity_bytes: 3.84 TB", "capacity_bytes: 0 B", "catalog.nodes.box.nvme.capacity_bytes"),
    (PARTS, "capacity_bytes: 100 TB", "capacity_bytes: 0 B", "catalog.pool_nodes.store.capacity_bytes"),
    (PARTS, "capacity: 64 GiB", "capacity: 0 B", "systems.s.kv_cache.dram.capacity"),
    (PARTS, "capacity: 1 TB", "capacity: 0 B", "systems.s.kv_cache.nvme.capacity"),
])
def test_a_value_outside_its_physical_range_is_refused_with_the_field(tmp_path, capsys, base, old, new, field):
    text = edit(old, new, base)
    validate_refused(tmp_path, capsys, text, field, new.strip().splitlines()[-1])


def test_a_node_without_drives_may_give_them_no_capacity(tmp_path, capsys):
    text = edit("        count: 4\n        capacity_bytes: 3.84 TB\n", "        count: 0\n        capacity_bytes: 0 B\n",
                PARTS)
    text = edit("      nvme:\n        capacity: 1 TB\n", "", text)
    rc, _, err = cli(capsys, "validate", write(tmp_path, "s.yaml", text))
    assert rc == 0, err


# Numeric fields whose range is checked elsewhere, with a better message than a bound would give.
RANGE_CHECKED_ELSEWHERE = {
    ("PoolSpec", "roles"),  # each role >= 1: SystemSpec.shape_problems says which role is left empty
}


def _members(annotation):
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list, dict, tuple):
        for arg in typing.get_args(annotation):
            yield from _members(arg)
    elif origin is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        if typing.get_origin(inner) in (typing.Union, types.UnionType) or _is_model(inner):
            yield from _members(inner)
        else:
            yield inner, metadata
    else:
        yield annotation, []


def _is_model(kind) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _bounded(metadata) -> bool:
    from annotated_types import Ge, Gt, Le, Lt

    for item in metadata:
        if isinstance(item, (Ge, Gt, Le, Lt)):
            return True
        func = getattr(item, "func", None)
        if func is not None and func.__name__ in ("_positive", "_non_negative", "_fraction", "_share"):
            return True
        if _bounded(getattr(item, "metadata", [])):
            return True
    return False


def test_every_numeric_field_of_every_spec_declares_its_range():
    """The rule, enforced once in the types: a number a scenario or a catalog entry gives has its
    physical range in its type (durations > 0 or >= 0, shares in [0, 1], counts >= 1 or >= 0)."""
    from kvsim.hardware import AcceleratorSpec, NodeSpec, PoolNodeSpec
    from kvsim.models import ModelSpec
    from kvsim.scenario.schema import ScenarioSpec
    from kvsim.scenario.storage_bench import StorageBenchSpec

    seen, unbounded = set(), []

    def walk(model) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, info in model.model_fields.items():
            for kind, metadata in _members(info.annotation):
                if _is_model(kind):
                    walk(kind)
                elif kind in (int, float) and not _bounded(list(metadata) + list(info.metadata)) \
                        and (model.__name__, name) not in RANGE_CHECKED_ELSEWHERE:
                    unbounded.append(f"{model.__name__}.{name}")

    for root in (ScenarioSpec, AcceleratorSpec, NodeSpec, PoolNodeSpec, ModelSpec, StorageBenchSpec):
        walk(root)
    assert len(seen) > 40  # the walk reached the specs below the roots
    assert unbounded == []
