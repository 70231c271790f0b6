"""The compiled backend equals the pure-Python reference, bit for bit (issue 23, items 2 and 3).

Both backends run the same sources (Cython's pure-Python mode, compiled without floating-point
contraction), so every record, summary number and time series must be equal: on the kernels
alone (step times, decode runs' closed forms, levels, engine time), on every shipped scenario
(shortened), on random scenarios of the invariant generator (24 here, 240 more under ``-m
backends``), and on runs cut short by every kind of outside event. Then: the choice of backend,
its errors, and a run where the compiled kernels cannot be loaded.

The compiled backend must have been built (``pip install -e .`` builds it where a C compiler
is found); set ``KVSIM_NO_COMPILE=1`` for a pure-Python install, and these tests skip.
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim
from kvsim import SpecError, backend
from kvsim.hardware import accelerator_catalog
from kvsim.models import model_catalog

sys.path.insert(0, str(Path(__file__).resolve().parent))
from random_scenarios import random_case  # noqa: E402
from test_chunk_reclaim import reclaim_scenario  # noqa: E402
from test_coalesce import CHUNKED, CUT, SHIPPED, SLOW, _same_summary, _shortened  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ACC = accelerator_catalog()
MODELS = model_catalog()
PURE_INSTALL = bool(os.environ.get("KVSIM_NO_COMPILE"))

needs_compiled = pytest.mark.skipif(PURE_INSTALL, reason="KVSIM_NO_COMPILE: a pure-Python install")


def test_the_compiled_backend_was_built():
    """An install with a C compiler builds the compiled kernels; a build that silently fell back
    would leave every other test here skipped."""
    if PURE_INSTALL:
        assert backend.resolve("auto") == "python"
        return
    assert backend.compiled_problem() is None
    assert backend.resolve("compiled") == "compiled"
    if not os.environ.get("KVSIM_BACKEND"):  # (CI's second pass sets python: the reference everywhere)
        assert backend.resolve("auto") == "compiled"
    for module in backend.kernels("compiled")[1:]:
        assert module.__file__.endswith(".so"), module.__file__  # an extension, not a copied .py


def test_the_kernel_list_is_the_backends_modules():
    """setup.py compiles KERNELS; kvsim.backend imports them by name: the two lists agree."""
    assert [m.rsplit(".", 1)[1] for m in backend.KERNELS] == list(backend.Kernels._fields[1:])
    assert [m.__name__ for m in backend.kernels("python")[1:]] == list(backend.KERNELS)
    if not PURE_INSTALL:
        assert [m.__name__ for m in backend.kernels("compiled")[1:]] == [backend.compiled_name(m)
                                                                         for m in backend.KERNELS]


# ---------------------------------------------------------------------------------------------
# kernels alone

PY, CY = (backend.kernels("python"), None if PURE_INSTALL else backend.kernels("compiled"))


@needs_compiled
@pytest.mark.parametrize("model, acc, tp, dtype", [
    ("qwen3-8b", "h20", 1, "bf16"), ("qwen3-8b", "l20", 2, "bf16"), ("qwen3-235b-a22b", "h20", 8, "fp8"),
    ("deepseek-r1", "h20", 8, "fp8"), ("llama-2-70b", "a100-sxm", 8, "bf16"),
])
def test_step_times_are_equal_to_the_bit(model, acc, tp, dtype):
    py = PY.step_time.RooflineStepTime(MODELS[model], ACC[acc], tp, dtype, dtype)
    cy = CY.step_time.RooflineStepTime(MODELS[model], ACC[acc], tp, dtype, dtype)
    rng = np.random.default_rng(tp)
    for _ in range(300):
        shape = PY.step_time.BatchShape(
            prefill_tokens=int(rng.integers(0, 9000)), prefill_pairs=float(rng.integers(0, 10**8)) / 2,
            prefill_context_tokens=int(rng.integers(0, 10**5)), decode_seqs=int(rng.integers(0, 300)),
            decode_context_tokens=int(rng.integers(0, 10**7)), sampled_seqs=int(rng.integers(1, 300)),
            prefill_seqs=int(rng.integers(0, 8)))
        assert tuple(cy.breakdown(shape)) == tuple(py.breakdown(shape))
        assert cy.iteration_time_s(shape) == py.iteration_time_s(shape)
    for seqs, context, steps in ((1, 17, 5), (7, 6300, 200), (256, 256 * 150, 40)):
        for name in ("decode_steps", "decode_steps_array"):
            a, b = getattr(py, name)(seqs, context, steps), getattr(cy, name)(seqs, context, steps)
            for x, y in zip(a, b):
                assert np.array_equal(np.asarray(x), np.asarray(y))


times = st.lists(st.floats(0, 50, allow_nan=False), min_size=1, max_size=40).map(sorted)


@needs_compiled
@settings(max_examples=150, deadline=None)
@given(times=times, start=st.floats(0, 20), span=st.floats(0, 40), seed=st.integers(0, 2**32 - 1))
def test_levels_and_engine_time_are_equal_to_the_bit(times, start, span, seed):
    rng = np.random.default_rng(seed)
    first, then = rng.random(len(times)).tolist(), rng.random(len(times)).tolist()
    durations = (rng.random(len(times)) * 0.05).tolist()
    compute, memory = (rng.random(len(times)) * 0.03).tolist(), (rng.random(len(times)) * 0.03).tolist()
    out = []
    for k in (PY, CY):
        level = k.levels.TimeWeightedLevel(start, start + span, 0.25)
        level.set(times[0] / 2, 0.5)
        level.set_at_each(times, first, then)
        arr = k.levels.TimeWeightedLevel(start, start + span, 0.25)
        arr.set_at_each_array(np.array(times), np.array(first), np.array(then))
        counter = k.levels.WindowCounter(start, start + span)
        counter.add_at_each(times, 3)
        counter.add_at_each_array(np.array(times), 2)
        engine = k.engine_time.EngineTime(start, start + span)
        engine.add_each(times, durations, compute, memory, 1e-4, 2e-4, 3e-4)
        engine.add_each_array(np.array(times), np.array(durations), np.array(compute), np.array(memory),
                              1e-4, 2e-4, 3e-4)
        engine.add(times[-1], 0.01, 0.004, 0.006, 1e-4, 2e-4, 3e-4)
        out.append((level.mean(), level.peak(), arr.mean(), arr.peak(), counter.total, counter.in_window,
                    engine.busy_s, engine.busy_in_window_s, dict(engine.by_cause_s)))
    _same_summary(list(out[0]), list(out[1]))


# ---------------------------------------------------------------------------------------------
# whole runs

def _both(scenario):
    """(python, compiled) results of ``scenario``."""
    return (kvsim.run(scenario.with_changes({"engine.backend": "python"})),
            kvsim.run(scenario.with_changes({"engine.backend": "compiled"})))


def _assert_equal(reference, compiled):
    assert compiled.records_digest() == reference.records_digest()
    for ref, run in zip(reference.runs, compiled.runs):
        assert (ref.summary["engine_backend"], run.summary["engine_backend"]) == ("python", "compiled")
        assert run.iterations == ref.iterations
        assert run.busy_s == ref.busy_s
        assert run.in_system_mean == ref.in_system_mean or (math.isnan(ref.in_system_mean)
                                                            and math.isnan(run.in_system_mean))
        _same_summary({**ref.summary, "engine_backend": None}, {**run.summary, "engine_backend": None})
        assert run.timeseries == ref.timeseries
    for frame in ("links_frame", "storage_frame", "decisions_frame", "switches_frame"):
        a, b = getattr(reference, frame)(), getattr(compiled, frame)()
        assert a.equals(b), frame


@needs_compiled
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_give_the_same_results_compiled(name):
    _assert_equal(*_both(_shortened(REPO / "scenarios" / name, **SLOW.get(name, {}))))


def _random(case: int):
    return random_case(case).scenario()


@needs_compiled
@pytest.mark.parametrize("case", range(24))
def test_random_scenarios_give_the_same_results_compiled(case):
    _assert_equal(*_both(_random(case)))


@needs_compiled
@pytest.mark.parametrize("case", [0, 2, 5, 9, 13, 21])
def test_random_scenarios_with_the_host_overlapped_give_the_same_results_compiled(case):
    """``engine.host_overlap``, 150 us a sequence: decode runs with steps that show part of the
    host time and steps that hide it, accounted by the C methods on the compiled side."""
    scenario = _random(case).with_changes({"engine.host_overlap": True, "engine.async_scheduling": True,
                                           "engine.step_per_seq_s": "150 us"})
    _assert_equal(*_both(scenario))


@needs_compiled
@pytest.mark.backends
@pytest.mark.parametrize("case", range(24, 264))
def test_more_random_scenarios_give_the_same_results_compiled(case):
    _assert_equal(*_both(_random(case)))


@needs_compiled
@pytest.mark.parametrize("rate", [3, 12])
def test_runs_cut_by_every_kind_of_event_are_the_same_compiled(tmp_path, rate):
    path = tmp_path / "cut.yaml"
    path.write_text(CUT.format(rate=rate))
    _assert_equal(*_both(kvsim.load_scenario(path)))


@needs_compiled
@pytest.mark.parametrize("rate", [3, 10])
def test_prefill_chunk_runs_are_the_same_compiled(tmp_path, rate):
    """Long prompts in small chunks (coalesced into chunk runs), with caches, timeouts and handoffs."""
    path = tmp_path / "chunks.yaml"
    path.write_text(CHUNKED.format(rate=rate))
    _assert_equal(*_both(kvsim.load_scenario(path)))


@needs_compiled
@pytest.mark.parametrize("rate", [6, 14])
def test_chunk_runs_across_deferred_reclaims_are_the_same_compiled(tmp_path, rate):
    """Chunk runs that cross cached-page reclaims, made when the runs are settled
    (tests/test_chunk_reclaim.py), with routers reading the index and copies landing."""
    _assert_equal(*_both(reclaim_scenario(tmp_path, rate=rate, duration="20 s")))


@needs_compiled
@pytest.mark.parametrize("bad", ["nan", "inf", "negative"])
def test_a_bad_step_time_in_a_run_is_named_the_same_by_both_backends(tmp_path, monkeypatch, bad):
    """A step-time model whose decode steps come out not positive and finite stops a run with the
    same message on both backends (the compiled run plans its steps in C arrays, the reference
    in lists): the value and the shape of the first bad step."""
    for kernels in (PY, CY):
        real = kernels.step_time.RooflineStepTime

        class Planted(real):  # the compiled class is a cdef class: subclassed, not patched
            def _decode_terms(self, seqs):
                terms = list(super()._decode_terms(seqs))
                if bad == "negative":
                    terms[7] = -1.0  # kernel launches: every step's total below zero
                else:
                    terms[3] = float(bad)  # the weights' streaming time: the memory phase
                return tuple(terms)

        monkeypatch.setattr(kernels.step_time, "RooflineStepTime", Planted)
    path = tmp_path / "bad_step.yaml"
    path.write_text(CUT.format(rate=3))
    scenario = kvsim.load_scenario(path)
    messages = []
    for name in ("python", "compiled"):
        with pytest.raises(RuntimeError, match="step-time model returned") as raised:
            # (host work added: overlapped, an exposed host time would lift the planted total above 0)
            kvsim.run(scenario.with_changes({"engine.backend": name, "engine.host_overlap": False}))
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert "for BatchShape(" in messages[0], messages[0]


@needs_compiled
@pytest.mark.parametrize("backend_name", ["python", "compiled"])
def test_a_run_builds_its_live_objects_from_its_backend(built_systems, monkeypatch, backend_name):
    """One run, one backend: the requests, KV pools and schedulers it makes are that backend's
    (a compiled scheduler given a reference Sequence would refuse it; the two never mix)."""
    monkeypatch.setenv("KVSIM_BACKEND", backend_name)
    seen = []
    scenario = _shortened(REPO / "scenarios" / "pd_ratio.yaml", duration="4 s")
    import kvsim.sim.run as run_module

    real_build = run_module.build_system

    def build(*args, **kwargs):  # every sequence the front end makes, seen as it is made
        system = real_build(*args, **kwargs)
        make = system.front.sequence_type

        def sequence(*a, **k):
            seen.append(make(*a, **k))
            return seen[-1]

        system.front.sequence_type = sequence
        return system

    monkeypatch.setattr(run_module, "build_system", build)
    kvsim.run(scenario)
    want = backend.kernels(backend_name)
    assert seen and {type(seq) for seq in seen} == {want.sequence.Sequence}
    for system in built_systems:
        assert type(system.network) is want.flows.FlowNetwork  # the flows of cache loads and handoffs
        assert type(system.front) is want.frontend.FrontEnd and type(system.board) is want.load_board.LoadBoard
        assert type(system.board.router()) is want.load_board.LeastOutstandingRouter
        for instance in system.instances:
            assert type(instance) is want.instance.Instance
            assert type(instance.scheduler) is want.scheduler.BatchScheduler
            assert type(instance.pool) is want.block_pool.BlockPool
    typed = want.name == "compiled"
    assert type(want.sequence.Sequence(0, 1, 1)).__module__.startswith("kvsim._compiled") is typed


LONG_FIELDS = ("rid", "prompt_tokens", "output_tokens", "generated", "kv_tokens", "prefill_target", "kv_blocks",
               "shared_tokens", "preemptions", "queued_tokens", "not_before", "adapter", "remote_tokens",
               "prompt_counted")


@pytest.mark.parametrize("source", ["offload_gap.yaml", "pd_ratio.yaml", "lora_shared_context.yaml", 3, 7, 11])
def test_the_reference_holds_whole_numbers_where_the_compiled_sequence_has_c_longs(monkeypatch, source):
    """A C ``long`` field truncates a float silently, so the compiled backend is exact only if the
    reference never stores a fraction there: every count of every sequence, decode copies
    included, is a Python int at the end of a run of the reference."""
    monkeypatch.setenv("KVSIM_BACKEND", "python")
    seen = []
    import kvsim.sim.frontend as frontend_module

    real_route = frontend_module.FrontEnd.route

    def route(self, seq):
        seen.append(seq)
        return real_route(self, seq)

    monkeypatch.setattr(frontend_module.FrontEnd, "route", route)
    if isinstance(source, str):
        kvsim.run(_shortened(REPO / "scenarios" / source, duration="8 s"))
    else:
        kvsim.run(_random(source))
    copies = [seq.decode_copy for seq in seen if seq.decode_copy is not None]
    assert seen
    for seq in seen + copies:
        for name in LONG_FIELDS:
            assert type(getattr(seq, name)) is int, (name, getattr(seq, name))


def _pxd_fields(module: str, cls: str, ctype: str) -> list[str]:
    """The fields a ``.pxd`` declares ``cdef public <ctype>`` in class ``cls``."""
    text = (REPO / "kvsim" / (module.replace(".", "/") + ".pxd")).read_text()
    body = text.split(f"cdef class {cls}:", 1)[1].split("\ncdef ", 1)[0]
    names = []
    for line in body.splitlines():
        found = re.match(rf"\s+cdef public {ctype} (.+)$", line)
        if found:
            names += [name.strip() for name in found.group(1).split(",")]
    return names


@pytest.mark.parametrize("source", ["h20_vs_l20.yaml", "offload_gap.yaml", "pd_ratio.yaml", 1, 2, 3, 4, 6, 8, 13])
def test_the_reference_step_time_holds_floats_where_the_compiled_one_has_c_doubles(monkeypatch, source):
    """The compiled RooflineStepTime keeps its constants as C doubles and counts as C longs: it
    computes the same only if the reference holds a float (an int would multiply exactly) or an
    int there in every step-time model a run builds."""
    monkeypatch.setenv("KVSIM_BACKEND", "python")
    from kvsim.models import step_time

    built = []
    real_init = step_time.RooflineStepTime.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(step_time.RooflineStepTime, "__init__", init)
    if isinstance(source, str):
        kvsim.run(_shortened(REPO / "scenarios" / source, duration="4 s"))
    else:
        kvsim.run(_random(source))
    doubles = _pxd_fields("models.step_time", "RooflineStepTime", "double")
    longs = _pxd_fields("models.step_time", "RooflineStepTime", "long")
    assert built and len(doubles) >= 14 and "tp" in longs
    for model in built:
        for name in doubles:
            assert type(getattr(model, name)) is float, (name, getattr(model, name))
        for name in longs:
            assert type(getattr(model, name)) is int, (name, getattr(model, name))


def test_a_kernels_field_types_are_part_of_its_digest():
    """A kernel's ``.pxd`` (its classes' field types) changes what is compiled: editing it alone
    makes the build stale too."""
    import hashlib

    with_types = [m for m in backend.KERNELS
                  if (REPO / Path(*m.split("."))).with_suffix(".pxd").exists()]
    assert {"kvsim.serving.sequence", "kvsim.kv.block_pool", "kvsim.serving.scheduler"} <= set(with_types)
    for module in with_types:
        source = (REPO / Path(*module.split("."))).with_suffix(".py")
        assert backend._source_digest(module) != hashlib.sha256(source.read_bytes()).hexdigest()
        both = hashlib.sha256(source.read_bytes() + source.with_suffix(".pxd").read_bytes()).hexdigest()
        assert backend._source_digest(module) == both


# ---------------------------------------------------------------------------------------------
# choosing a backend

def test_kvsim_backend_overrides_auto(monkeypatch):
    monkeypatch.setenv("KVSIM_BACKEND", "python")
    assert backend.resolve("auto") == "python"
    monkeypatch.setenv("KVSIM_BACKEND", "fortran")
    with pytest.raises(ValueError, match="KVSIM_BACKEND must be python or compiled, not 'fortran'"):
        backend.resolve("auto")


def test_an_unknown_backend_is_named_with_its_line(tmp_path):
    path = tmp_path / "s.yaml"
    text = (REPO / "scenarios" / "h20_vs_l20.yaml").read_text()
    path.write_text(text + "\nengine: {backend: fast}\n")
    with pytest.raises(SpecError) as error:
        kvsim.load_scenario(path)
    assert re.search(r"s\.yaml:\d+: engine\.backend: .*'fast'", str(error.value)), str(error.value)


@pytest.fixture
def compiled_missing(monkeypatch):
    """The compiled kernels cannot be imported (as on a machine without a C compiler)."""
    import kvsim._compiled

    for module in backend.KERNELS:
        name = backend.compiled_name(module)
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
        monkeypatch.delattr(kvsim._compiled, name.rsplit(".", 1)[1], raising=False)
    monkeypatch.delenv("KVSIM_BACKEND", raising=False)
    backend.compiled_problem.cache_clear()
    backend.kernels.cache_clear()
    yield
    backend.compiled_problem.cache_clear()
    backend.kernels.cache_clear()


def test_without_the_compiled_kernels_runs_use_the_reference(compiled_missing, tmp_path):
    assert backend.resolve("auto") == "python"
    scenario = _shortened(REPO / "scenarios" / "h20_vs_l20.yaml", duration="6 s")
    result = kvsim.run(scenario)
    assert {run.summary["engine_backend"] for run in result.runs} == {"python"}
    path = tmp_path / "s.yaml"
    path.write_text((REPO / "scenarios" / "h20_vs_l20.yaml").read_text() + "\nengine: {backend: compiled}\n")
    with pytest.raises(SpecError) as error:
        kvsim.load_scenario(path)
    message = str(error.value)
    assert re.search(r"s\.yaml:\d+: engine\.backend: .*the compiled backend cannot run here: not built", message), message
    with pytest.raises(backend.BackendError, match="not built"):
        backend.resolve("compiled")


def test_a_stale_build_is_not_used(monkeypatch):
    """Compiled kernels built from other sources than the installed ones would drift: refused."""
    if PURE_INSTALL:
        pytest.skip("a pure-Python install has no build to go stale")
    backend.compiled_problem.cache_clear()
    monkeypatch.setattr(backend, "_source_digest", lambda module: "0" * 64)
    try:
        problem = backend.compiled_problem()
        assert problem is not None and "was built from another version of" in problem and "pip install -e ." in problem
    finally:
        monkeypatch.undo()
        backend.compiled_problem.cache_clear()
    assert backend.compiled_problem() is None


def test_the_command_line_refuses_a_bad_kvsim_backend(monkeypatch, capsys):
    from kvsim.cli import main

    monkeypatch.setenv("KVSIM_BACKEND", "fortran")
    assert main(["validate", str(REPO / "scenarios" / "h20_vs_l20.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "kvsim validate: KVSIM_BACKEND: KVSIM_BACKEND must be python or compiled, not 'fortran'"


def test_the_command_line_says_when_the_reference_runs_instead(compiled_missing, capsys):
    from kvsim.cli import main

    assert main(["validate", str(REPO / "scenarios" / "h20_vs_l20.yaml")]) == 0
    err = capsys.readouterr().err
    assert "kvsim validate: note: the compiled backend cannot run here (not built" in err
    assert "the pure-Python engine runs instead (the same results, slower" in err
