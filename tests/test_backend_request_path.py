"""The request path's kernels equal the reference (issue 23: a request's milestones, its instance,
the load board, the front end): compiled, they are ``cdef`` classes calling each other in C, and
they must give the same answers as the pure-Python reference.

Whole runs of every shipped scenario and of random ones are held equal by ``test_backends.py``;
here each kernel is held to the reference on its own, and the reference is checked to hold, in
every field the compiled class keeps as a C ``long`` or ``double``, a value that converts to it
exactly.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvsim
from kvsim import backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from random_scenarios import random_case  # noqa: E402
from test_coalesce import _shortened  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

needs_compiled = pytest.mark.skipif(backend.compiled_problem() is not None, reason="the compiled backend is not built")
BACKENDS = ["python"] + (["compiled"] if backend.compiled_problem() is None else [])


def _pxd_fields(module: str, cls: str, ctype: str) -> list[str]:
    """The fields a ``.pxd`` declares ``cdef public <ctype>`` in class ``cls``."""
    text = (REPO / "kvsim" / (module.replace(".", "/") + ".pxd")).read_text()
    body = re.split(rf"cdef class {cls}\b[^\n]*:\n", text, maxsplit=1)[1].split("\ncdef ", 1)[0]
    names = []
    for line in body.splitlines():
        found = re.match(rf"\s+cdef public {ctype} (.+?)\s*(#.*)?$", line)
        if found:
            names += [name.strip() for name in found.group(1).split(",")]
    return names


# ---------------------------------------------------------------------------------------------
# the scheduler's milestones: C calls compiled, overridable in Python

def _log_class(kernels):
    """A Python subclass of the backend's ``SchedulerEvents`` logging every milestone in order."""

    class Log(kernels.scheduler.SchedulerEvents):
        def __init__(self):
            self.seen = []

        def admitted(self, seq, now):
            self.seen.append(("admitted", seq.rid, now))

        def first_token(self, seq, now):
            self.seen.append(("first_token", seq.rid, now))

        def prompt_done(self, seq, now):
            self.seen.append(("prompt_done", seq.rid, now))

        def tokens_emitted(self, count, now):
            self.seen.append(("tokens_emitted", count, now))

        def preempted(self, seq):
            self.seen.append(("preempted", seq.rid))

        def prefill_computed(self, seq, tokens, now):
            self.seen.append(("prefill_computed", seq.rid, tokens, now))

        def finished(self, seq, now):
            self.seen.append(("finished", seq.rid, now))

    return Log


def _milestones(name: str, reqs, block_size: int, spare: int, budget: int, max_seqs: int) -> list:
    kernels = backend.kernels(name)
    longest = max(p + o for p, o in reqs)
    pool = kernels.block_pool.BlockPool(-(-longest // block_size) + spare, block_size)
    log = _log_class(kernels)()
    scheduler = kernels.scheduler.BatchScheduler(pool, budget, max_seqs, log)
    for rid, (prompt, output) in enumerate(reqs):
        scheduler.add(kernels.sequence.Sequence(rid, prompt, output))
    for step in range(100_000):
        batch = scheduler.schedule(step * 0.25)
        if batch is None:
            return log.seen
        scheduler.complete(batch, step * 0.25 + 0.125)
    raise AssertionError("the scheduler did not drain")


@needs_compiled
@settings(max_examples=60, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 300), st.integers(1, 40)), min_size=1, max_size=20),
       block_size=st.sampled_from([1, 4, 16]), spare=st.integers(0, 30), budget=st.integers(1, 512),
       max_seqs=st.integers(1, 12))
def test_a_python_subclass_of_the_events_hears_the_same_milestones_from_both_schedulers(reqs, block_size, spare,
                                                                                      budget, max_seqs):
    """The compiled scheduler calls its events in C; a Python subclass's overrides are still
    called, with the same arguments in the same order as the reference's."""
    reference = _milestones("python", reqs, block_size, spare, budget, max_seqs)
    assert reference and reference[-1][0] in ("finished", "tokens_emitted")
    assert _milestones("compiled", reqs, block_size, spare, budget, max_seqs) == reference


# ---------------------------------------------------------------------------------------------
# what the reference holds where the compiled classes keep C numbers

SOURCES = ["h20_vs_l20.yaml", "offload_gap.yaml", "pd_ratio.yaml", "lora_shared_context.yaml", 1, 3, 7, 11]


def _run(source):
    if isinstance(source, str):
        return kvsim.run(_shortened(REPO / "scenarios" / source, duration="4 s"))
    return kvsim.run(random_case(source).scenario())


@pytest.mark.parametrize("source", SOURCES)
def test_the_reference_instance_holds_what_the_compiled_fields_keep(built_systems, monkeypatch, source):
    """A C ``long`` truncates a float and a C ``double`` rounds a large int: the compiled
    instance computes the same only if the reference's instances hold ints and floats there at
    the end of a run (and its recording events the counters' own window counters)."""
    monkeypatch.setenv("KVSIM_BACKEND", "python")
    _run(source)
    longs = _pxd_fields("serving.instance", "Instance", "long")
    doubles = _pxd_fields("serving.instance", "Instance", "double")
    flags = _pxd_fields("serving.instance", "Instance", "bint")
    assert {"index", "decode_horizon"} <= set(longs) and doubles == ["output_s"] and "_final" in flags
    instances = [inst for system in built_systems for inst in system.instances]
    assert instances
    for inst in instances:
        for name in longs:
            assert type(getattr(inst, name)) is int, (name, getattr(inst, name))
        for name in doubles:
            assert type(getattr(inst, name)) is float, (name, getattr(inst, name))
        for name in flags:
            assert type(getattr(inst, name)) is bool, (name, getattr(inst, name))
        events = inst.scheduler.events
        assert events.input_tokens is inst.counters.input_tokens
        assert events.output_tokens is inst.counters.output_tokens
    front_longs = _pxd_fields("sim.frontend", "FrontEnd", "long")
    assert {"submitted", "completed", "aborted", "rejected", "block_tokens"} <= set(front_longs)
    assert _pxd_fields("sim.frontend", "FrontEnd", "double") == ["output_s"]
    for system in built_systems:
        for name in front_longs:
            assert type(getattr(system.front, name)) is int, (name, getattr(system.front, name))
        assert type(system.front.output_s) is float


@needs_compiled
@pytest.mark.parametrize("source", SOURCES)
def test_both_backends_end_a_run_with_the_same_instance_and_front_end_state(built_systems, monkeypatch, source):
    """Every field of every instance (the numbers, flags and roles the engine loop reads in C),
    of the front end (its counts of requests) and of the board (its members by role) ends a run
    equal on both backends."""
    ends = []
    for name in ("python", "compiled"):
        monkeypatch.setenv("KVSIM_BACKEND", name)
        built_systems.clear()
        _run(source)
        ends.append([(inst.index, inst.role, inst.decode_horizon, inst.output_s, inst._in_flight, inst._final,
                      inst.accepting, inst.outstanding, inst.coalesce, inst.async_scheduling, type(inst).__module__)
                     for system in built_systems for inst in system.instances]
                    + [(front.submitted, front.completed, front.aborted, front.rejected, front.output_s,
                        front.entry_role, front.block_tokens, front.adapter_count, front.with_hashes,
                        len(front.prompt_hashes), len(front.held_hashes), type(front).__module__)
                       for front in (system.front for system in built_systems)]
                    + [tuple((role, [inst.index for inst in system.board.members(role)], type(system.board).__module__)
                             for role in ("mixed", "prefill", "decode"))
                       for system in built_systems])
    assert len(ends[0]) == len(ends[1])
    for reference, compiled in zip(*ends):
        if isinstance(reference[0], tuple):  # the board's roles
            assert [r[:2] for r in reference] == [c[:2] for c in compiled]
            modules = (reference[0][2], compiled[0][2])
            assert modules == ("kvsim.serving.load_board", "kvsim._compiled.serving_load_board")
        else:
            assert reference[:-1] == compiled[:-1]
            assert reference[-1].replace("kvsim.", "kvsim._compiled.").replace(".serving.", ".serving_").replace(
                ".sim.", ".sim_") == compiled[-1]
