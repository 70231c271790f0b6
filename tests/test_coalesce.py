"""Coalesced decode runs equal the step-by-step engine: records bit for bit, summaries exactly.

The step-by-step loop (``engine.coalesce: false``, one event per iteration) is the reference.
Every shipped scenario (shortened), 50 random small scenarios (idle to overloaded, with and
without cache tiers, preemption, closed loops, client timeouts) and a case built to cut runs short
at every kind of outside event must give the same records and summaries with runs coalesced.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import simpy

import kvsim
from kvsim.hardware import accelerator_catalog
from kvsim.models import model_catalog
from kvsim.models.engine import EngineSpec
from kvsim.models.step_time import BatchShape, RooflineStepTime, StepBreakdown
from kvsim.serving import decode_run
from kvsim.serving.instance import Instance

REPO = Path(__file__).resolve().parent.parent
ACC = accelerator_catalog()
MODELS = model_catalog()


@pytest.fixture(autouse=True)
def _python_backend(monkeypatch):
    """The pure-Python engine: some tests here patch its decode runs and step model (the compiled
    backend is held equal to it in tests/test_backends.py)."""
    monkeypatch.setenv("KVSIM_BACKEND", "python")


def _same_summary(a, b, path="summary"):
    """Every number of two summaries equal (NaN equal to NaN)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _same_summary(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for k, (x, y) in enumerate(zip(a, b)):
            _same_summary(x, y, f"{path}[{k}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), path
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _both(scenario):
    """(reference, coalesced) results of ``scenario``."""
    return (kvsim.run(scenario.with_changes({"engine.coalesce": False})),
            kvsim.run(scenario.with_changes({"engine.coalesce": True})))


def _assert_equal(reference, coalesced):
    assert coalesced.records_digest() == reference.records_digest()
    for ref, run in zip(reference.runs, coalesced.runs):
        assert run.iterations == ref.iterations
        assert run.busy_s == ref.busy_s
        assert run.in_system_mean == ref.in_system_mean or (math.isnan(ref.in_system_mean)
                                                            and math.isnan(run.in_system_mean))
        _same_summary(ref.summary, run.summary)
        assert run.timeseries == ref.timeseries
    for frame in ("links_frame", "storage_frame", "decisions_frame", "switches_frame"):
        a, b = getattr(reference, frame)(), getattr(coalesced, frame)()
        assert a.equals(b), frame  # links, storage resources, controller decisions, role switches


# ---------------------------------------------------------------------------------------------
# the closed form of a decode run's step times

@pytest.mark.parametrize("model, acc, tp, dtype", [
    ("qwen3-8b", "h20", 1, "bf16"), ("qwen3-8b", "l20", 2, "bf16"), ("qwen3-235b-a22b", "h20", 8, "fp8"),
    ("qwen3-235b-a22b", "l20", 8, "fp8"), ("llama-3.1-70b", "h100-sxm", 4, "fp8"), ("deepseek-r1", "h20", 8, "fp8"), ("llama-2-70b", "a100-sxm", 8, "bf16"),
])
@pytest.mark.parametrize("seqs, context", [(1, 17), (7, 7 * 900), (64, 64 * 3001), (256, 256 * 150)])
def test_decode_steps_equal_the_breakdown_of_each_step_to_the_bit(model, acc, tp, dtype, seqs, context):
    """The reference's steps, and the compiled backend's (its C fill, copied out), against the
    reference's breakdown of each step."""
    from kvsim import backend
    sync = EngineSpec(host_overlap=False)  # (each step's exposed host time overlapped: tests/test_host_overlap.py)
    step = RooflineStepTime(MODELS[model], ACC[acc], tp, dtype, dtype, engine=sync)
    steps = step.decode_steps(seqs, context, 40)
    if backend.compiled_problem() is None:
        compiled = backend.kernels("compiled").step_time.RooflineStepTime(MODELS[model], ACC[acc], tp, dtype, dtype,
                                                                          engine=sync)
        assert compiled.decode_steps(seqs, context, 40) == steps
    fallback = decode_run.decode_steps(_NoClosedForm(step), seqs, context, 40)
    for i in range(40):
        parts = step.breakdown(BatchShape(decode_seqs=seqs, decode_context_tokens=context + i * seqs,
                                          sampled_seqs=seqs))
        assert steps.total_s[i] == parts.total_s == fallback.total_s[i]
        assert steps.compute_s[i] == parts.compute_s == fallback.compute_s[i]
        assert steps.memory_s[i] == parts.memory_s == fallback.memory_s[i]
        assert (steps.comm_s, steps.kernels_s, steps.overhead_s) == (parts.comm_s, parts.kernels_s, parts.overhead_s)
    # contexts grow by one token per sequence per step: decode time grows (memory-bound or not)
    assert steps.total_s[-1] > steps.total_s[0]


class _NoClosedForm:
    """A step model with a breakdown but no closed form (as a layout's)."""

    def __init__(self, inner):
        self.breakdown = inner.breakdown


# ---------------------------------------------------------------------------------------------
# shipped scenarios

# Scenarios whose every system searches its layout on every pool (several hundred pilots even when
# shortened): the shortened runs pin each pool to the layout given here, so the tests that use them
# as an ordinary PD example stay quick; the search itself is tested in tests/test_layout_search_pools.py
# and by pd_ratio_nvidia.yaml below, which searches as shipped.
PINNED_LAYOUTS = {"pd_ratio.yaml": {"tp": 8}}


def _pinned(systems: dict, layout: dict) -> dict:
    def pin(instance: dict) -> dict:
        return {**{k: v for k, v in instance.items() if k != "layout"}, **layout} if instance.get("layout") == "best" \
            else instance
    out = {}
    for name, system in systems.items():
        system = dict(system)
        if "instance" in system:
            system["instance"] = pin(system["instance"])
        if "pools" in system:
            system["pools"] = {pool: {**spec, "instance": pin(spec["instance"])} for pool, spec in system["pools"].items()}
        out[name] = system
    return out


def _shortened(path: Path, duration="12 s", systems: tuple[str, ...] | None = None):
    scenario = kvsim.load_scenario(path)
    changes: dict = {"duration": duration, "warmup": "2 s"}
    chosen = {name: scenario.raw["systems"][name] for name in systems or scenario.raw["systems"]}
    if path.name in PINNED_LAYOUTS:
        changes["systems"] = _pinned(chosen, PINNED_LAYOUTS[path.name])
    if systems is not None:
        changes["systems"] = changes.get("systems", chosen)
        changes["compare"] = None
    sweep = scenario.raw.get("sweep") or {}
    if sweep:
        changes["sweep"] = {}
        for key, values in sweep.items():  # the first point, without any swept duration or warm-up
            fields = [f.strip() for f in key.split(",")]
            first = values[0] if len(fields) > 1 else [values[0]]
            kept = [(f, v) for f, v in zip(fields, first) if f not in ("duration", "warmup")]
            if kept:
                changes["sweep"][", ".join(f for f, _ in kept)] = [[v for _, v in kept]] if len(kept) > 1 else [kept[0][1]]
    if "study" in scenario.raw:
        changes["study"] = None  # one sweep point is no study: the runs are what is compared
    return scenario.with_changes(changes)


SHIPPED = sorted(p.name for p in (REPO / "scenarios").glob("*.yaml"))
# it pilots every layout of every system, each with its cache prewarmed: two systems will do
SLOW = {"offload_gap_layouts.yaml": {"duration": "3 s", "systems": ("h20-none", "l20-dram")},
        # its pools are prewarmed with thousands of documents per system: two systems will do
        "odcc_kv_pool.yaml": {"systems": ("r1-gdr", "qwen-rdma")}}


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenarios_give_the_same_results_coalesced(name):
    _assert_equal(*_both(_shortened(REPO / "scenarios" / name, **SLOW.get(name, {}))))


# ---------------------------------------------------------------------------------------------
# random small scenarios

def _random_scenario(tmp_path: Path, case: int):
    rng = np.random.default_rng(case)
    node, card_GB = [("h20-8x", 102.6), ("l20-8x", 48.3)][case % 2]
    tp = int(rng.choice([1, 2, 4, 8]))
    pp = 2 if tp <= 4 and rng.random() < 0.25 else 1  # a pipeline: the layout step model, no closed form
    instances = int(8 // (tp * pp))
    memory = 0.9
    if rng.random() < 0.4:  # room for only 14k-20k tokens of KV (Qwen3-8B: 16.4 GB of weights, 147 kB/token)
        memory = round((16.4 + float(rng.choice([2.0, 3.0]))) / (tp * pp) / card_GB + 1.8 / card_GB, 3)
    if memory < 0.9:  # and enough clients per instance to outgrow it: preemption
        arrival = f"{{kind: closed_loop, clients: {instances * int(rng.integers(12, 40))}}}"
    elif rng.random() < 0.35:
        arrival = f"{{kind: closed_loop, clients: {int(rng.integers(1, 48))}}}"
    else:
        rate = float(rng.choice([0.3, 2.0, 8.0, 25.0, 80.0]) * instances / 8)
        arrival = f"{{kind: poisson, rate: {rate:.3f}/s}}"
    cache = ""
    if rng.random() < 0.4:
        cache = ", kv_cache: " + str(rng.choice(["{}", "{dram: {capacity: 64 GiB}}"]))
        prompts = ("  prefix: {kind: shared_documents, documents: 8, zipf_s: 1.0, "
                   f"document_tokens: {{kind: fixed, value: {int(rng.choice([256, 1024]))}}}, "
                   "suffix_tokens: {kind: uniform, low: 16, high: 400}}\n")
    else:
        prompts = f"  input_tokens: {{kind: lognormal, median: {int(rng.integers(32, 1500))}, sigma: 0.8, max: 6000}}\n"
    timeout = f"  timeout: {float(rng.uniform(3, 15)):.2f} s\n" if rng.random() < 0.3 else ""
    text = (
        f"name: random-{case}\nseed: {case}\nduration: 10 s\nwarmup: 2 s\nmodel: qwen3-8b\n"
        f"engine: {{async_scheduling: {str(bool(rng.random() < 0.6)).lower()}}}\n"
        f"workload:\n  arrival: {arrival}\n{prompts}"
        f"  output_tokens: {{kind: lognormal, median: {int(rng.integers(4, 400))}, sigma: 0.9, max: 3000}}\n"
        f"{timeout}"
        f"systems:\n  s: {{node: {node}, instance: {{tp: {tp}, pp: {pp}, max_num_seqs: {int(rng.choice([2, 16, 64, 256]))}, "
        f"max_batched_tokens: {int(rng.choice([512, 2048, 8192]))}, memory_utilization: {memory}}}, "
        f"router: {rng.choice(['least_outstanding', 'round_robin', 'most_free_kv', 'least_prompt_tokens'])}{cache}}}\n"
    )
    path = tmp_path / f"random_{case}.yaml"
    path.write_text(text)
    return kvsim.load_scenario(path)


@pytest.mark.parametrize("case", range(50))
def test_random_scenarios_give_the_same_results_coalesced(tmp_path, case):
    """Of the 50, as generated: 8 preempt, 23 cache prefixes, 33 are closed loops, 10 abort
    requests on client timeouts, 15 end backlogged or aborting, 6 run pipelines."""
    _assert_equal(*_both(_random_scenario(tmp_path, case)))


@pytest.mark.parametrize("case", [0, 3, 5, 8, 11, 14, 17, 22])
@pytest.mark.parametrize("per_seq", ["10 us", "150 us"])
def test_random_scenarios_with_the_host_overlapped_give_the_same_results_coalesced(tmp_path, case, per_seq):
    """``engine.host_overlap``: a step that starts an idle engine pays the host time it cannot
    hide and never starts a run; 150 us a sequence outlasts the GPU's decode steps of large
    batches, so runs have steps that show part of the host time and steps that hide it."""
    scenario = _random_scenario(tmp_path, case).with_changes({"engine.host_overlap": True, "engine.async_scheduling": True,
                                                              "engine.step_per_seq_s": per_seq})
    _assert_equal(*_both(scenario))


# ---------------------------------------------------------------------------------------------
# runs cut short by every kind of outside event

CUT = """
name: cut-runs
seed: 3
duration: 30 s
warmup: 1 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: {rate}/s}}
  prefix: {{kind: shared_documents, documents: 6, zipf_s: 1.0, document_tokens: {{kind: fixed, value: 2048}},
           suffix_tokens: {{kind: uniform, low: 16, high: 256}}}}
  output_tokens: {{kind: lognormal, median: 300, sigma: 1.0, max: 3000}}
  timeout: 8 s
systems:
  colocated: {{node: h20-8x, instance: {{tp: 4, memory_utilization: 0.25}},
              kv_cache: {{dram: {{capacity: 8 GiB}}, remote: {{pool_node: nvme-storage-16x, nodes: 1}}}}}}
  pd:
    pools:
      prefill: {{node: h20-8x, instances: 2, role: prefill, instance: {{tp: 2}}}}
      decode: {{node: h20-8x, instances: 2, role: decode, instance: {{tp: 2, max_num_seqs: 24}}}}
    kv_cache: {{dram: {{capacity: 16 GiB}}}}
"""


def _meddle(system):
    """Another component's reads and writes at odd times: read an instance's free KV and held
    tokens, take pages from its pool and give them back (as a peer's domain cache does)."""
    env = system.env
    step = 0
    while True:
        yield env.timeout(0.173)
        step += 1
        instance = system.instances[step % len(system.instances)]
        instance.free_kv_tokens, instance.held_kv_tokens  # noqa: B018 -- read as another component would
        if step % 5 == 0 and instance.pool.free_blocks > 40:
            instance.pool.take(40)
            yield env.timeout(0.05)
            instance.pool.give(40)


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_runs_cut_by_every_kind_of_event_still_equal(tmp_path, monkeypatch, async_scheduling):
    path = tmp_path / "cut.yaml"
    path.write_text(CUT.format(rate=6))
    scenario = kvsim.load_scenario(path).with_changes({"engine.async_scheduling": async_scheduling})
    _start_with_each_system(monkeypatch, _meddle)
    causes: dict[str, int] = {}
    interrupt, cut = Instance.interrupt, decode_run.DecodeRun.cut

    def counted(self):
        if self._decode_run is not None:
            import sys
            caller = sys._getframe(1)
            name = caller.f_code.co_name
            if name == "interrupt":  # the scheduler's or the pool's observer call: one frame up
                caller = caller.f_back
                name = caller.f_code.co_name
            causes[name] = causes.get(name, 0) + 1
        interrupt(self)

    def counted_cut(self, now, keep=0):
        if keep:
            causes["arrival, next step kept"] = causes.get("arrival, next step kept", 0) + 1
        cut(self, now, keep)

    monkeypatch.setattr(Instance, "interrupt", counted)
    monkeypatch.setattr(decode_run.DecodeRun, "cut", counted_cut)
    reference, coalesced = _both(scenario)
    _assert_equal(reference, coalesced)
    # the case reaches what it is built for: runs cut by arrivals (with async scheduling an
    # arrival keeps the next step: it joins the batch after), aborts, loads landing, pages taken
    # and given from outside
    arrival = "arrival, next step kept" if async_scheduling else "submit"
    assert {arrival, "abort", "loaded", "take", "give"} <= causes.keys(), causes
    assert sum(causes.values()) > 100, causes
    assert coalesced.runs[0].summary["requests_aborted"] > 0


SWITCHING = """
name: pd-switching
seed: 5
duration: 20 s
warmup: 2 s
model: qwen3-8b
workload:
  arrival:
    kind: phases
    phases:
      - duration: 10 s
        arrival: {kind: poisson, rate: 30/s}
        input_tokens: {kind: lognormal, median: 3000, sigma: 0.5, max: 8000}
        output_tokens: {kind: lognormal, median: 30, sigma: 0.5, max: 300}
      - duration: 10 s
        arrival: {kind: poisson, rate: 30/s}
        input_tokens: {kind: lognormal, median: 300, sigma: 0.5, max: 2000}
        output_tokens: {kind: lognormal, median: 300, sigma: 0.7, max: 2000}
  timeout: 6 s
slo: {ttft_p99: 1 s, tpot_p99: 30 ms}
systems:
  queue:
    pools: {dt: {node: h20-8x, instance: {tp: 2, max_num_seqs: 64, memory_utilization: 0.3}, roles: {prefill: 2, decode: 2}}}
    controller: {kind: threshold, signal: prefill_queue, interval: 2 s, low: 1000, high: 5000, switch_time: 1 s}
    kv_cache: {dram: {capacity: 8 GiB}}
  occupancy:
    pools: {dt: {node: h20-8x, instance: {tp: 2, max_num_seqs: 64, memory_utilization: 0.3}, roles: {prefill: 2, decode: 2}}}
    controller: {kind: proportional, signal: decode_kv_occupancy, interval: 1.5 s, setpoint: 0.3, gain: 8, max_step: 1,
                 switch_time: 0.5 s}
    kv_handoff: {mode: whole}
  tpot:
    pools: {dt: {node: h20-8x, instance: {tp: 2, max_num_seqs: 32}, roles: {prefill: 2, decode: 2}}}
    controller: {kind: threshold, signal: tpot_attainment, interval: 2 s, window: 3 s, low: 0.9, high: 0.99,
                 switch_time: 0.5 s}
    decode_router: most_free_kv
  ttft:
    pools: {dt: {node: h20-8x, instance: {tp: 2, max_num_seqs: 32}, roles: {prefill: 2, decode: 2}}}
    controller: {kind: threshold, signal: ttft_attainment, interval: 1 s, window: 2 s, low: 0.9, high: 0.99,
                 switch_time: 0.5 s}
"""


def test_role_switches_under_load_give_the_same_results(tmp_path):
    """Controllers that move instances between prefill and decode every few seconds, reading the
    decode pools' KV occupancy, TPOT and TTFT (first tokens of handed-off requests recorded by
    runs) as runs go on: the same decisions, switches and records."""
    path = tmp_path / "switching.yaml"
    path.write_text(SWITCHING)
    reference, coalesced = _both(kvsim.load_scenario(path))
    _assert_equal(reference, coalesced)
    switches = coalesced.switches_frame()
    assert len(switches) >= 3 and switches["system"].nunique() >= 2  # the case does switch roles
    decisions = coalesced.decisions_frame()
    assert decisions[decisions["system"] == "ttft"]["signal_ttft_attainment"].notna().sum() > 5


LORA = """
name: lora-runs
seed: 4
duration: 30 s
warmup: 2 s
model: llama-3.1-8b
workload:
  arrival: {{kind: closed_loop, clients: {clients}, think_time: 0.5 s}}
  prefix: {{kind: shared_documents, documents: 4, zipf_s: 0.5, document_tokens: {{kind: fixed, value: 2048}},
           suffix_tokens: {{kind: uniform, low: 16, high: 256}}}}
  output_tokens: {{kind: uniform, low: 20, high: 400}}
  adapters: {{count: 8, rank: 16, targets: [q, k, v, o]}}
systems:
  none: {{node: h20-8x, instances: 2, kv_cache: {{}}, lora: {{kv_sharing: none, max_loras: 2}}}}
  reuse: {{node: h20-8x, instances: 2, kv_cache: {{}}, lora: {{kv_sharing: value_reuse, max_loras: 4}}}}
  shared: {{node: h20-8x, instances: 2, kv_cache: {{}}, lora: {{kv_sharing: byte_sharing, max_loras: 8}}}}
"""


@pytest.mark.parametrize("clients", [3, 24])
def test_lora_runs_give_the_same_results(tmp_path, monkeypatch, clients):
    """Runs under LoRA adapters: a step that copies one in is never the start of a run; once its
    adapters are resident, activating them again each step changes nothing (same LRU order)."""
    path = tmp_path / "lora.yaml"
    path.write_text(LORA.format(clients=clients))
    planned = []
    plan = decode_run.DecodeRun.plan

    def counted(*args, **kwargs):
        run = plan(*args, **kwargs)
        planned.append(run is not None)
        return run

    monkeypatch.setattr(decode_run.DecodeRun, "plan", staticmethod(counted))
    reference, coalesced = _both(kvsim.load_scenario(path))
    _assert_equal(reference, coalesced)
    assert sum(planned) > 10  # runs were coalesced under adapters
    for ref, run in zip(reference.runs, coalesced.runs):
        assert run.summary["lora"] == ref.summary["lora"]


def test_coalescing_takes_far_fewer_events(repo_root, monkeypatch):
    """The point of it: one event per run, not per iteration (same iterations either way)."""
    scenario = kvsim.load_scenario(repo_root / "scenarios" / "h20_vs_l20.yaml").with_changes(
        {"duration": "30 s", "warmup": "5 s", "sweep": {"workload.arrival.rate": ["10/s"]}})
    counts = {}
    schedule = simpy.Environment.schedule

    def counting(self, event, priority=1, delay=0):
        counts[mode] = counts.get(mode, 0) + 1
        return schedule(self, event, priority, delay)

    monkeypatch.setattr(simpy.Environment, "schedule", counting)
    iterations = {}
    for mode in (False, True):
        result = kvsim.run(scenario.with_changes({"engine.coalesce": mode}))
        iterations[mode] = sum(run.iterations for run in result.runs)
    assert iterations[True] == iterations[False]
    assert counts[True] < counts[False] / 4, counts


# ---------------------------------------------------------------------------------------------
# prefill chunk runs (kvsim.serving.chunk_run)

CHUNKED = """
name: chunk-runs
seed: 7
duration: 30 s
warmup: 1 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: {rate}/s}}
  prefix: {{kind: shared_documents, documents: 6, zipf_s: 1.0, document_tokens: {{kind: fixed, value: 4096}},
           suffix_tokens: {{kind: uniform, low: 16, high: 3000}}}}
  output_tokens: {{kind: lognormal, median: 60, sigma: 1.0, max: 800}}
  timeout: 6 s
systems:
  colocated: {{node: h20-8x, instance: {{tp: 4, memory_utilization: 0.25, max_batched_tokens: 512}},
              kv_cache: {{dram: {{capacity: 8 GiB}}, remote: {{pool_node: nvme-storage-16x, nodes: 1}}}}}}
  nocache: {{node: h20-8x, instance: {{tp: 4, memory_utilization: 0.25, max_batched_tokens: 384}}}}
  pd:
    pools:
      prefill: {{node: h20-8x, instances: 2, role: prefill, instance: {{tp: 2, max_batched_tokens: 1024}}}}
      decode: {{node: h20-8x, instances: 2, role: decode, instance: {{tp: 2, max_num_seqs: 24}}}}
    kv_cache: {{dram: {{capacity: 16 GiB}}}}
"""


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_chunk_runs_equal_the_step_by_step_engine_under_every_kind_of_event(tmp_path, monkeypatch,
                                                                            async_scheduling):
    """Long prompts in small chunks, with a prefix cache whose loads land and whose pages run
    short, client timeouts, prefill instances handing prompts off, and a meddler reading and
    taking pages at odd times: coalesced chunk runs give the same records, summaries and time
    series as the step-by-step engine, and the case does plan runs and cut them."""
    from kvsim.serving import chunk_run

    path = tmp_path / "chunks.yaml"
    path.write_text(CHUNKED.format(rate=10))
    scenario = kvsim.load_scenario(path).with_changes({"engine.async_scheduling": async_scheduling})
    _start_with_each_system(monkeypatch, _meddle)
    planned: list[int] = []
    causes: dict[str, int] = {}
    plan, interrupt = chunk_run.ChunkRun.plan, Instance.interrupt

    def counted_plan(*args, **kwargs):
        run = plan(*args, **kwargs)
        if run is not None:
            planned.append(run.planned)
        return run

    def counted(self):
        if isinstance(self._decode_run, chunk_run.ChunkRun):
            import sys
            caller = sys._getframe(1)
            if caller.f_code.co_name == "interrupt":  # the scheduler's or the pool's observer call
                caller = caller.f_back
            causes[caller.f_code.co_name] = causes.get(caller.f_code.co_name, 0) + 1
        interrupt(self)

    monkeypatch.setattr(chunk_run.ChunkRun, "plan", staticmethod(counted_plan))
    monkeypatch.setattr(Instance, "interrupt", counted)
    reference, coalesced = _both(scenario)
    _assert_equal(reference, coalesced)
    assert len(planned) > 100 and max(planned) >= 8, planned  # runs of many chunks were planned
    # cut by clients giving up, prompts handed off, pages taken and given from outside
    assert {"abort", "release_detached", "take", "give"} <= causes.keys(), causes
    assert sum(causes.values()) > 100, causes
    assert sum(run.summary["requests_aborted"] for run in coalesced.runs) > 0


def test_chunk_runs_take_far_fewer_events(tmp_path, monkeypatch):
    """Prompts of many chunks: one event per run instead of one per chunk (same iterations)."""
    path = tmp_path / "chunks.yaml"
    path.write_text(CHUNKED.format(rate=3))
    scenario = kvsim.load_scenario(path).with_changes(
        {"systems": {"nocache": kvsim.load_scenario(path).raw["systems"]["nocache"]}, "compare": None,
         "workload.timeout": None})
    counts: dict[bool, int] = {}
    schedule = simpy.Environment.schedule

    def counting(self, event, priority=1, delay=0):
        counts[mode] = counts.get(mode, 0) + 1
        return schedule(self, event, priority, delay)

    monkeypatch.setattr(simpy.Environment, "schedule", counting)
    iterations, results = {}, {}
    for mode in (False, True):
        results[mode] = kvsim.run(scenario.with_changes({"engine.coalesce": mode}))
        iterations[mode] = sum(run.iterations for run in results[mode].runs)
    _assert_equal(results[False], results[True])
    assert iterations[True] == iterations[False]
    assert counts[True] < counts[False] / 3, counts


@pytest.mark.parametrize("case", [case for case in range(50, 81) if case != 60])  # (60: a request outgrows its pool)
def test_random_scenarios_in_small_chunks_give_the_same_results_coalesced(tmp_path, case):
    """More random scenarios as above, with a token budget of 64 to 512 tokens: most prompts take
    several chunks. As generated, 21 of the 30 plan chunk runs (179 runs; the others' chunks
    share their iterations with decodes)."""
    scenario = _random_scenario(tmp_path, case)
    budget = [64, 128, 256, 512][case % 4]
    _assert_equal(*_both(scenario.with_changes({"systems.s.instance.max_batched_tokens": budget})))


@pytest.mark.parametrize("bad", [-0.5, 0.0, math.inf, math.nan])
def test_a_bad_step_time_in_a_chunk_run_is_named(tmp_path, monkeypatch, bad):
    """A step model giving a later chunk of a run a time that is not positive and finite: the
    run stops before it and the step-by-step loop names it, coalesced or not."""
    path = tmp_path / "chunks.yaml"
    path.write_text(CHUNKED.format(rate=3))
    scenario = kvsim.load_scenario(path)
    scenario = scenario.with_changes({"systems": {"nocache": scenario.raw["systems"]["nocache"]}, "compare": None})
    real = RooflineStepTime.breakdown

    class Planted(StepBreakdown):
        __slots__ = ()

        @property
        def total_s(self) -> float:
            return bad

    def planted(self, batch, remote_kv_Bps=None):
        parts = real(self, batch, remote_kv_Bps)
        if batch.prefill_tokens == 384 and batch.prefill_context_tokens == 5 * 384:
            return Planted(*parts)  # the sixth chunk of any prompt
        return parts

    monkeypatch.setattr(RooflineStepTime, "breakdown", planted)
    messages = []
    for mode in (False, True):
        with pytest.raises(RuntimeError, match="step-time model returned") as raised:
            kvsim.run(scenario.with_changes({"engine.coalesce": mode}))
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert f"returned {bad!r} s for BatchShape(prefill_tokens=384," in messages[1]


# ---------------------------------------------------------------------------------------------
# the list and array forms of a run's bookkeeping agree with one call per step

def test_pages_lists_and_arrays_agree():
    rng = np.random.default_rng(5)
    for _ in range(300):
        block = int(rng.choice([1, 4, 16, 256]))
        # (one sequence in a quarter of the cases: its pages are counted in closed form)
        size = 1 if rng.random() < 0.25 else int(rng.integers(1, 40))
        firsts = [int(f) for f in rng.integers(2, 3 * block + 3, size=size)]
        steps, free = int(rng.integers(2, 400)), int(rng.integers(0, 200))
        as_list = decode_run._new_pages(firsts, block, steps, free)
        as_array = decode_run._new_pages_array(firsts, block, steps, free)
        assert list(as_array) == as_list
        # by hand: pages needed through each step, stopping before more than ``free``
        def need(i):
            # B023: called within this iteration, never after it
            return sum(1 for f in firsts for _ in range(f, i + 1, block))  # noqa: B023

        assert as_list == [need(i) for i in range(len(as_list))] and as_list[-1] <= free
        assert len(as_list) == steps + 1 or need(len(as_list)) > free  # stops only where pages run out


def _backends_built() -> list[str]:
    from kvsim import backend
    return ["python"] + (["compiled"] if backend.compiled_problem() is None else [])


@pytest.mark.parametrize("name", _backends_built())
@pytest.mark.parametrize("seed", range(20))
def test_level_and_engine_time_bulk_updates_equal_one_call_per_step(seed, name):
    """On each backend (compiled, the bulk updates copy the lists into C arrays and run the C
    methods a decode run calls, ``set_steps``, ``add_steps``, ``add_at_steps``)."""
    from kvsim import backend
    kernels = backend.kernels(name)
    TimeWeightedLevel, WindowCounter = kernels.levels.TimeWeightedLevel, kernels.levels.WindowCounter
    EngineTime = kernels.engine_time.EngineTime

    rng = np.random.default_rng(seed)
    # every fourth: all steps inside the window (the bulk updates' fast path)
    window = (0.0, 1e9) if seed % 4 == 0 else (float(rng.uniform(0, 5)), float(rng.uniform(5, 10)))
    times = list(np.cumsum(rng.uniform(1e-3, 0.2, size=int(rng.integers(1, 120)))) + rng.uniform(1, 6))
    first, then = list(rng.random(len(times))), list(rng.random(len(times)))
    durations, compute, memory = (list(rng.uniform(1e-3, 0.1, size=len(times))) for _ in range(3))
    one, bulk, arrays = (TimeWeightedLevel(*window, initial=0.3) for _ in range(3))
    e_one, e_bulk, e_arrays = (EngineTime(*window) for _ in range(3))
    c_one, c_bulk, c_arrays = (WindowCounter(*window) for _ in range(3))
    for level in (one, bulk, arrays):
        level.set(0.5, 0.25)
    for k, t in enumerate(times):
        one.set(t, first[k])
        one.set(t, then[k])
        e_one.add(t, durations[k], compute[k], memory[k], 1e-4, 2e-4, 3e-4)
        c_one.add(t, 7)
    bulk.set_at_each(times, first, then)
    arrays.set_at_each_array(np.array(times), np.array(first), np.array(then))
    e_bulk.add_each(times, durations, compute, memory, 1e-4, 2e-4, 3e-4)
    e_arrays.add_each_array(np.array(times), np.array(durations), np.array(compute), np.array(memory),
                            1e-4, 2e-4, 3e-4)
    c_bulk.add_at_each(times, 7)
    c_arrays.add_at_each_array(np.array(times), 7)
    for level in (bulk, arrays):
        assert (level.mean(), level.peak(), level.value, level._t) == (one.mean(), one.peak(), one.value, one._t)
    for account in (e_bulk, e_arrays):
        assert (account.busy_s, account.busy_in_window_s, account.by_cause_s) == (
            e_one.busy_s, e_one.busy_in_window_s, e_one.by_cause_s)
    for counter in (c_bulk, c_arrays):
        assert (counter.total, counter.in_window) == (c_one.total, c_one.in_window)
    if name == "python":  # the C methods' source, run on lists (C arrays compiled)
        steps, e_steps, c_steps = TimeWeightedLevel(*window, initial=0.3), EngineTime(*window), WindowCounter(*window)
        steps.set(0.5, 0.25)
        steps.set_steps(times, first, then, len(times))
        e_steps.add_steps(times, durations, compute, memory, len(times), 1e-4, 2e-4, 3e-4)
        c_steps.add_at_steps(times, len(times), 7)
        assert (steps.mean(), steps.peak(), steps.value, steps._t) == (one.mean(), one.peak(), one.value, one._t)
        assert (e_steps.busy_s, e_steps.busy_in_window_s, e_steps.by_cause_s) == (
            e_one.busy_s, e_one.busy_in_window_s, e_one.by_cause_s)
        assert (c_steps.total, c_steps.in_window) == (c_one.total, c_one.in_window)


@pytest.mark.parametrize("array_steps", [2, 10**9])
@pytest.mark.parametrize("case", [1, 4, 7, 12])
def test_runs_kept_as_lists_or_arrays_give_the_same_results(tmp_path, monkeypatch, array_steps, case):
    monkeypatch.setattr(decode_run, "ARRAY_STEPS", array_steps)
    _assert_equal(*_both(_random_scenario(tmp_path, case)))


def test_a_run_cut_just_before_the_end_is_accounted(tmp_path, monkeypatch):
    """A run cut in its last step before the simulation stops (no drain): the summary counts the
    steps it applied (engine time, iterations, tokens, KV level) although the step in progress
    never ends inside the run."""
    path = tmp_path / "cut_at_end.yaml"
    path.write_text("""
name: cut-at-end
seed: 0
duration: 4 s
warmup: 1 s
drain_limit: 0 s
model: qwen3-8b
engine: {async_scheduling: false}
workload:
  arrival: {kind: poisson, rate: 2/s}
  input_tokens: {kind: fixed, value: 64}
  output_tokens: {kind: fixed, value: 2000}
systems:
  s: {node: h20-8x, instance: {tp: 8}}
""")

    def meddle(system):
        yield system.env.timeout(3.9999)
        for instance in system.instances:
            instance.pool.take(1)  # (a cache taking a page): cuts every run going

    _start_with_each_system(monkeypatch, meddle)
    reference, coalesced = _both(kvsim.load_scenario(path))
    _assert_equal(reference, coalesced)


def _start_with_each_system(monkeypatch, process):
    """Every system built from now on also runs ``process(system)``, from its start."""
    import kvsim.sim.run as run_module
    build = run_module.build_system

    def build_and_start(*args, **kwargs):
        system = build(*args, **kwargs)
        system.env.process(process(system))
        return system

    monkeypatch.setattr(run_module, "build_system", build_and_start)


@pytest.mark.parametrize("array_steps", [2, 10**9])
@pytest.mark.parametrize("bad", [-0.5, 0.0, math.inf, math.nan])
def test_a_bad_step_time_in_a_run_is_named(tmp_path, monkeypatch, array_steps, bad):
    """A step-time model giving a run's later step a time that is not positive and finite stops
    the run with the value and the step's shape, as the step-by-step loop would (lists or arrays)."""
    monkeypatch.setattr(decode_run, "ARRAY_STEPS", array_steps)
    real = RooflineStepTime.decode_steps

    def planted(self, seqs, context_tokens, steps):
        parts = real(self, seqs, context_tokens, steps)
        if steps > 3:
            parts.total_s[3] = bad  # step 5 of the run: step 2 attends to context_tokens
            planted.context = context_tokens + 3 * seqs
        return parts

    monkeypatch.setattr(RooflineStepTime, "decode_steps", planted)
    monkeypatch.setattr(RooflineStepTime, "decode_steps_array",
                        lambda self, *args: decode_run.DecodeSteps(*(np.array(part) if isinstance(part, list) else part
                                                                     for part in planted(self, *args))))
    with pytest.raises(RuntimeError, match="step-time model returned") as raised:
        kvsim.run(_random_scenario(tmp_path, 4).with_changes({"engine.coalesce": True}))
    assert f"returned {bad!r} s for BatchShape(" in str(raised.value)
    assert f"decode_context_tokens={planted.context}," in str(raised.value)
