"""The speed report's inputs (benchmarks/): the rr_conv_80 trace generator reproduces splitwise-sim's
recipe deterministically, the benchmark scenarios validate and size, and the measurement counts what
it says. Speed itself is measured by benchmarks/speed.py, never asserted here."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import simpy

import kvsim
from conftest import REPO, SHARED
from kvsim.workload.traces import load_azure_2023

BENCH = REPO / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import rr_conv_trace  # noqa: E402
import speed_cases  # noqa: E402
import speed_measure  # noqa: E402

AZURE_CONV = SHARED / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"

RR_CONV_80_SHA256 = "d990913fe6a97e32a263e3874ccf2890193330e4b3ad7c9c5f262ae229e0d425"
"""The generated rr_conv_80.csv (rate 80/s, 600 s, seed 0), pinned when the generator was written: numpy's
legacy RandomState stream is frozen (NEP 19), so this moves only if the recipe or the format does."""

needs_azure = pytest.mark.skipif(not AZURE_CONV.exists(), reason="shared/traces/ not beside the repository")


@needs_azure
def test_rr_conv_80_matches_splitwise_recipe_and_issue_count():
    trace = rr_conv_trace.generate(80.0, 600.0, seed=0, lengths=AZURE_CONV)
    # issue 9 quotes 48,263 requests for splitwise-sim's rr_conv_80; an unseeded or differently
    # ordered draw gives another count (Poisson, sd ~ 220)
    assert len(trace.arrival_s) == 48_263
    assert trace.arrival_s[0] > 0 and trace.arrival_s[-1] < 600.0
    assert np.all(np.diff(trace.arrival_s) >= 0)
    # Poisson at 80/s: mean gap 12.5 ms, coefficient of variation 1
    gaps = np.diff(trace.arrival_s)
    assert gaps.mean() == pytest.approx(1 / 80, rel=0.01)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.02)
    # lengths resampled from the Azure 2023 conversation trace: its means are 1,155 / 211 tokens
    # (shared/traces/README.md; splitwise-sim's generate_trace.py docstring gives the same)
    assert trace.input_tokens.mean() == pytest.approx(1155, rel=0.03)
    assert trace.output_tokens.mean() == pytest.approx(211, rel=0.03)
    context, generated = rr_conv_trace.read_lengths(AZURE_CONV)
    assert set(trace.input_tokens.tolist()) <= set(context.tolist())
    assert set(trace.output_tokens.tolist()) <= set(generated.tolist())
    # prompt and output are independent draws (splitwise samples the columns separately)
    assert abs(np.corrcoef(trace.input_tokens, trace.output_tokens)[0, 1]) < 0.03


@needs_azure
def test_generator_is_deterministic_and_seeded(tmp_path):
    first = rr_conv_trace.write(tmp_path / "a.csv", 80.0, 600.0, seed=0, lengths=AZURE_CONV)
    second = rr_conv_trace.write(tmp_path / "b.csv", 80.0, 600.0, seed=0, lengths=AZURE_CONV)
    assert first == second == RR_CONV_80_SHA256
    assert hashlib.sha256((tmp_path / "a.csv").read_bytes()).hexdigest() == first
    other = rr_conv_trace.write(tmp_path / "c.csv", 80.0, 600.0, seed=1, lengths=AZURE_CONV)
    assert other != first


@needs_azure
def test_generated_trace_replays_through_the_azure_loader(tmp_path):
    trace = rr_conv_trace.generate(40.0, 60.0, seed=0, lengths=AZURE_CONV)
    path = tmp_path / "rr_conv_40.csv"
    path.write_text(rr_conv_trace.azure_csv_text(trace), encoding="utf-8")
    replay = load_azure_2023(path)
    assert len(replay) == len(trace.arrival_s)
    np.testing.assert_array_equal(replay.input_tokens, trace.input_tokens)
    np.testing.assert_array_equal(replay.output_tokens, trace.output_tokens)
    # the loader counts from the first row: arrivals shift by the first one, to the nanosecond
    np.testing.assert_allclose(replay.arrival_s, trace.arrival_s - trace.arrival_s[0], atol=2e-9)


@pytest.fixture(scope="module")
def rr_conv_80_yaml(tmp_path_factory):
    """A copy of rr_conv_80.yaml beside its generated trace: the trace is not committed
    (benchmarks/traces/ is filled on demand), and a scenario loads only once the files it names
    exist and read cleanly."""
    if not AZURE_CONV.exists():
        pytest.skip("shared/traces/ not beside the repository")
    folder = tmp_path_factory.mktemp("rr_conv_80")
    rr_conv_trace.write(folder / "traces" / "rr_conv_80.csv", 80.0, 600.0, seed=0, lengths=AZURE_CONV)
    (folder / "rr_conv_80.yaml").write_text((BENCH / "rr_conv_80.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    return folder / "rr_conv_80.yaml"


@pytest.mark.parametrize("name", ["rr_conv_80.yaml", "ladder.yaml", "offload_tiers.yaml", "mooncake_16xh20.yaml"])
def test_benchmark_scenarios_validate_and_size(name, request):
    path = request.getfixturevalue("rr_conv_80_yaml") if name == "rr_conv_80.yaml" else BENCH / name
    scenario = kvsim.load_scenario(path)
    kvsim.check(scenario)  # every system fits (weights, KV pool) at every point


def test_rr_conv_80_scenario_is_splitwise_baseline_cluster(rr_conv_80_yaml):
    spec = kvsim.load_scenario(rr_conv_80_yaml).spec
    system = spec.systems["dgx-h100x40"]
    assert (spec.model, system.node, system.nodes, system.instance.tp) == ("llama-2-70b", "h100-8x", 40, 8)
    assert spec.duration == 600.0 and spec.seed == 0
    assert spec.workload.arrival.format == "azure_2023"


@needs_azure
def test_ladder_cases_set_cards_and_load():
    capacity = 3.0
    for cards in speed_cases.LADDER_CARDS:
        scenario = speed_cases.scenario_for(f"ladder-{cards}", {"capacity_per_s": capacity, "scale": 0.5})
        spec = scenario.spec
        assert spec.systems["h20"].nodes * 8 == cards
        assert spec.workload.arrival.rate == pytest.approx(0.7 * capacity * cards)
        assert spec.duration == pytest.approx(30.0)
    million = speed_cases.scenario_for("million", {"capacity_per_s": capacity}).spec
    assert million.workload.arrival.rate * million.duration == pytest.approx(1e6)
    probe = speed_cases.probe_scenario().spec
    assert probe.systems["h20"].nodes == 1
    assert probe.workload.arrival.clients == 2 * 256 * 8  # every instance full: twice max_num_seqs each


def test_the_domains_and_pd_cases_are_one_point_of_their_scenarios():
    domains = speed_cases.scenario_for("domains", {"scale": 0.5})
    assert len(domains.points) == 1 and list(domains.spec.systems) == ["domain_128", "domains_2x64", "servers_16x8"]
    assert domains.spec.workload.arrival.rate == 8.0 and domains.spec.duration == pytest.approx(120.0)
    assert domains.spec.study is None
    pd = speed_cases.scenario_for("pd", {"scale": 1.0}).spec
    assert list(pd.systems) == ["pd"] and pd.systems["pd"].disaggregated
    assert pd.workload.arrival.rate == 20.0 and pd.duration == 300.0


def test_the_whole_domains_128_and_plan_cases_keep_their_scenarios():
    whole = speed_cases.scenario_for("domains_128", {"scale": 0.1})
    assert [p.spec.workload.arrival.rate for p in whole.points] == [4.0, 8.0, 16.0]
    assert whole.spec.duration == pytest.approx(24.0) and whole.spec.warmup == pytest.approx(6.0)
    assert whole.spec.study is None and len(whole.spec.systems) == 3
    # its requests at full length, as the run draws them: 3 systems x Poisson (4 + 8 + 16)/s x 240 s;
    # the issue's 15,141 are those in the 180 s measurement windows
    full = speed_cases.full_length_requests("domains_128")
    assert full % 3 == 0 and full == pytest.approx(3 * 28 * 240, rel=0.03)
    assert full * 180 / 240 == pytest.approx(15_141, rel=0.03)
    assert speed_cases.full_length_requests("probe") is None  # closed loop: not known before the run
    plan = speed_cases.scenario_for("plan", {"scale": 0.5}).spec
    assert plan.plan.baseline == "h20" and len(plan.systems) == 5  # the baseline and its four alternatives
    assert plan.plan.targets == [4.0, 8.0, 16.0] and plan.duration == pytest.approx(120.0)


def test_probe_capacity_per_instance_three_figures():
    measured = {"instances": 8, "results": [{"requests_per_s": 28.38888}]}
    assert speed_cases.probe_capacity(measured) == 3.55


def test_event_count_is_simpy_scheduled_events(monkeypatch):
    monkeypatch.setattr(simpy.Environment, "__init__", simpy.Environment.__init__)  # restored afterwards
    monkeypatch.setattr(speed_measure, "_ENVIRONMENTS", [])
    speed_measure._keep_environments()
    env = simpy.Environment()
    scheduled = []
    real = env.schedule
    env.schedule = lambda event, *a, **k: (scheduled.append(event), real(event, *a, **k))

    def ticker(env):
        for _ in range(10):
            yield env.timeout(1.0)

    env.process(ticker(env))
    env.run()
    assert speed_measure._ENVIRONMENTS == [env]
    # Initialize + 10 timeouts + the process's own end event
    assert next(env._eid) == len(scheduled) == 12


@needs_azure
def test_measure_a_short_rr_conv_replay(tmp_path, monkeypatch):
    monkeypatch.setattr(simpy.Environment, "__init__", simpy.Environment.__init__)
    monkeypatch.setattr(speed_measure, "_ENVIRONMENTS", [])
    rr_conv_trace.write(tmp_path / "rr.csv", 80.0, 5.0, seed=0, lengths=AZURE_CONV)
    # the file is swapped before loading (as --set does): loading reads the trace it names
    scenario = kvsim.load_scenario(BENCH / "rr_conv_80.yaml", [f"workload.arrival.file={tmp_path / 'rr.csv'}",
                                                               "duration=5 s", "warmup=1 s"])
    m = speed_measure.measure(scenario)
    assert m["requests"] == len(rr_conv_trace.generate(80.0, 5.0, seed=0, lengths=AZURE_CONV).arrival_s)
    assert m["cards"] == 320 and m["instances"] == 40
    # coalesced decode runs: far fewer events than iterations, still a few per request
    assert m["iterations"] > m["events"] > m["requests"]
    assert 5.0 < m["sim_s"] < 60.0  # drained: every request finished after the last arrival
    assert m["rss_peak_bytes"] >= m["rss_before_bytes"] > 0
    assert m["results"][0]["requests_completed"] > 0
    rates = speed_measure.rates(m)
    assert rates["events_per_req"] == pytest.approx(m["events"] / m["requests"])


def _measurement(case, requests, cpu_s, sim_s=100.0, rss_mib=(150, 200), digest="d", answers=None):
    return {"case": case, "requests": requests, "cpu_s": cpu_s, "wall_s": cpu_s, "sim_s": sim_s, "events": 30 * requests,
            "iterations": 10 * requests, "rss_before_bytes": rss_mib[0] * 2**20, "rss_peak_bytes": rss_mib[1] * 2**20,
            "cards": 8, "instances": 8, "records_digest": digest,
            "results": answers or [{"system": "s", "ttft_s": {"p50": 0.1, "p99": 0.5}}]}


def _rows(lines):
    """Target -> its cells (python value, met, compiled value, met, ...) of a targets table."""
    return {line.split(" | ")[0].lstrip("| "): [c.strip() for c in line.rstrip(" |").split(" | ")[1:]]
            for line in lines[2:]}


def test_report_checks_each_target_against_its_measurement():
    import speed
    import speed_cases

    splitwise = speed_cases.SPLITWISE_RR_CONV_80_CPU_S
    results = {
        # 610 sim-s in a 2.0 CPU-s process: 305x real time, splitwise's 92.8 CPU-s / 2.0 = 46x
        "rr_conv_80": {**_measurement("rr_conv_80", 48_263, 1.5, sim_s=610.0), "process_cpu_s": 2.0},
        "ladder-8": _measurement("ladder-8", 1_000, 0.5),                   # 2,000 req/CPU-s
        "ladder-1024": _measurement("ladder-1024", 150_000, 100.0, rss_mib=(150, 350)),  # 1,500: falls 1.33x
        "offload-nocache": _measurement("offload-nocache", 12_031, 40.0),
        "offload-dram_nvme": _measurement("offload-dram_nvme", 12_031, 56.0),  # 1.4x
        # 2,000 requests in 2.2 CPU-s against 478 CPU-s for 20,000: 21.7x
        "domains_128": _measurement("domains_128", 2_000, 2.2),
        "mooncake": _measurement("mooncake", 12_031, 4.0, digest="new"),
    }
    base = {"mooncake": _measurement("mooncake", 12_031, 48.0, digest="old",
                                     answers=[{"system": "s", "ttft_s": {"p50": 0.1, "p99": 0.5 * (1 + 1e-9)}}])}
    slower = {**results, "rr_conv_80": {**results["rr_conv_80"], "process_cpu_s": 4.0},
              "offload-dram_nvme": _measurement("offload-dram_nvme", 12_031, 80.0),  # 2.0x
              "domains_128": _measurement("domains_128", 2_000, 2.5)}                 # 19.1x
    lines = speed.targets({"python": slower, "compiled": results}, base, {"domains_128": 20_000})
    assert lines[0] == "| target (issue 23) | python | met | compiled | met |"
    rows = _rows(lines)
    name = next(n for n in rows if n.startswith("rr_conv_80: >= 30x splitwise-sim's CPU time"))
    assert f"its {splitwise:.0f} CPU-s" in name and splitwise == pytest.approx(92.8, abs=0.05)
    assert rows[name] == [f"{splitwise / 4.0:.1f}x (4.0 CPU-s)", "no", f"{splitwise / 2.0:.1f}x (2.0 CPU-s)", "yes"]
    # splitwise-sim ran the whole trace: a shortened rr_conv_80 is shown, not judged
    short = {"rr_conv_80": {**results["rr_conv_80"], "params": {"scale": 0.05}}}
    assert _rows(speed.targets({"python": short}, None))[name] == ["not judged at --scale 0.05 (2.0 CPU-s)", "-"]
    real_time = rows["rr_conv_80: >= 300x real time per whole-process CPU second"]
    assert real_time[1] == "no" and real_time[2].startswith("305x") and real_time[3] == "yes"
    assert rows["offload tiers + flows <= 1.5x the CPU time of no cache (same requests)"] == [
        "2.00x", "no", "1.40x", "yes"]
    domains = rows["domains_128 (whole scenario): >= 20x today (478 CPU-s for its 20,000 requests at full length)"]
    assert domains[0].startswith("19.1x") and domains[1] == "no"
    assert domains[2].startswith("21.7x") and domains[3] == "yes"
    assert rows["ladder: req / CPU-s falls < 2x from 8 to 1,024 cards"][2:] == ["1.33x", "yes"]
    # 200 MiB over 150,000 requests is 1.3 GiB per million: shown, judged only on --million
    assert rows["memory per million requests (ladder-1024's growth over the run, records written; the target is "
                "judged on --million)"][2:] == ["1.30 GiB", "-"]
    assert rows["Mooncake: >= 10x faster than the baseline (req / CPU-s)"][2:] == ["12.00x", "yes"]
    # different digests, latencies equal to 1e-9: same answers within floating-point tolerance
    assert rows["Mooncake: same hit rates and latencies as the baseline"][2:] == ["within 1.0e-09", "yes"]
    base["mooncake"]["results"][0]["ttft_s"]["p99"] = 0.6
    rows = _rows(speed.targets({"compiled": results}, base, {"domains_128": 20_000}))
    assert rows["Mooncake: same hit rates and latencies as the baseline"][1] == "no"
    million = {"million": {**_measurement("million", 1_000_000, 200.0, rss_mib=(150, 1100))}}
    rows = _rows(speed.targets({"python": million}, None))
    assert rows["memory <= 1 GiB per million requests incl. writing records (million: peak of the process)"] == [
        "1.07 GiB", "no"]


def test_the_table_has_a_row_per_case_and_backend_and_the_compiled_speed_up():
    import speed

    results = {"compiled": {"mooncake": {**_measurement("mooncake", 1_000, 0.5), "backend": "compiled",
                                         "instructions": {"count": 2.5e9, "scale": 0.05}}},
               "python": {"mooncake": {**_measurement("mooncake", 1_000, 2.0), "backend": "python"},
                          "pd": {**_measurement("pd", 500, 1.0), "process_cpu_s": 2.5}}}
    lines = speed.table(results, None)
    assert "| backend |" in lines[0] and "| x python |" in lines[0] and "G instructions (at scale)" in lines[0]
    rows = [line.split(" | ") for line in lines[2:]]
    assert [(r[0].lstrip("| "), r[1]) for r in rows] == [("mooncake", "python"), ("mooncake", "compiled"),
                                                          ("pd", "python")]
    assert rows[1][7] == "4.00" and rows[0][7] == "-"      # compiled: 2,000 req/CPU-s against python's 500
    assert rows[1][-1] == "2.500 (at 0.05) |" and rows[0][-1] == "- |"
    assert rows[2][5] == "2.5" and rows[0][5] == "-"        # process CPU s where it was kept
    # saved measurements without a backend are the pure-Python engine's (files written before backends)
    saved = speed.by_backend([{"case": "a"}, {"case": "b", "backend": "compiled"}])
    assert saved == {"python": {"a": {"case": "a"}}, "compiled": {"b": {"case": "b", "backend": "compiled"}}}


def test_repeated_runs_keep_the_least_cpu_time_and_refuse_different_records(monkeypatch):
    import speed

    cpu = iter([3.0, 2.0, 2.5])
    monkeypatch.setattr(speed, "_run_once", lambda case, params, backend=None: {
        **_measurement(case, 1_000, next(cpu)), "records_digest": "same"})
    best = speed.run_case("mooncake", {}, repeat=3)
    assert (best["cpu_s"], best["runs"], best["cpu_s_all"]) == (2.0, 3, [3.0, 2.0, 2.5])
    assert "Each case ran 3 times" in speed.report({"python": {"mooncake": best}}, None, "`x`", 1.0, None, False,
                                                   speed.machine())
    digests = iter(["a", "b"])
    monkeypatch.setattr(speed, "_run_once", lambda case, params, backend=None: {
        **_measurement(case, 1_000, 1.0), "records_digest": next(digests)})
    with pytest.raises(SystemExit, match="different records"):
        speed.run_case("mooncake", {}, repeat=2)
    monkeypatch.setattr(speed, "_run_once", lambda case, params, backend=None: {
        **_measurement(case, 1_000, 1.0), "backend": "python"})
    with pytest.raises(SystemExit, match="asked to run on compiled but ran on python"):
        speed.run_case("mooncake", {}, backend="compiled")


def test_each_case_runs_in_a_child_on_the_backend_asked(monkeypatch):
    import speed

    seen = []

    class Done:
        returncode = 0

    def run(command, env, check=False):
        assert "PYTHONDONTWRITEBYTECODE" not in env  # the whole-process figure is a user's start-up
        if "--child-out" not in command:
            return Done()  # the import that writes the bytecode cache first
        seen.append(env.get("KVSIM_BACKEND"))
        out = Path(command[command.index("--child-out") + 1])
        out.write_text(json.dumps({"case": "pd", "backend": env.get("KVSIM_BACKEND", "auto")}))
        return Done()

    monkeypatch.setattr(speed.subprocess, "run", run)
    monkeypatch.delenv("KVSIM_BACKEND", raising=False)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert speed._run_once("pd", {"scale": 0.1}, "compiled")["backend"] == "compiled"
    assert speed._run_once("pd", {"scale": 0.1}, "python")["backend"] == "python"
    assert speed._run_once("pd", {"scale": 0.1})["backend"] == "auto"  # None: the child resolves auto itself
    assert seen == ["compiled", "python", None]


def test_backends_to_run_leaves_out_an_unbuilt_compiled_backend(monkeypatch, capsys):
    import kvsim.backend as backend
    import speed

    monkeypatch.setattr(backend, "compiled_problem", lambda: None)
    assert speed.backends_to_run("python,compiled") == ["python", "compiled"]
    assert speed.backends_to_run("compiled, compiled") == ["compiled"]
    with pytest.raises(SystemExit, match="--backends takes python and/or compiled"):
        speed.backends_to_run("pypy")
    monkeypatch.setattr(backend, "compiled_problem", lambda: "not built (no C compiler)")
    assert speed.backends_to_run("python,compiled") == ["python"]
    assert "cannot run here (not built (no C compiler)): measuring python only" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no backend to measure"):
        speed.backends_to_run("compiled")


def test_groups_run_by_default_and_on_request():
    import speed

    default = speed._cases(None, False)
    assert "domains_128" in default and "plan" in default and "pd" in default
    assert "million" not in default and "domains" not in default
    assert speed._cases("domains-8", True) == ["domains", "million"]
    with pytest.raises(SystemExit, match="unknown case"):
        speed._cases("nope", False)


def test_instruction_counts_are_read_from_callgrind_and_failures_named(monkeypatch):
    import instructions

    class Done:
        def __init__(self, code, stderr):
            self.returncode, self.stderr = code, stderr

    counts = {"0.1": "==7== Collected : 5000\n", "0.001": "==7== Collected : 1200\n"}
    seen = []

    def run(command, **kw):
        seen.append(command[-1])
        return Done(0, counts[command[-3]])

    monkeypatch.setattr(instructions.subprocess, "run", run)
    assert instructions.run_instructions(instructions.REPO, "mooncake", 0.1) == 3800
    assert instructions.run_instructions(instructions.REPO, "mooncake", 0.1, ceiling=True) == 3800
    assert seen == ["-", "-", "ceiling", "ceiling"]  # the child applies run_ceiling only when asked
    backends = []
    monkeypatch.setattr(instructions.subprocess, "run", lambda command, env, **kw: (
        backends.append(env.get("KVSIM_BACKEND")), Done(0, counts[command[-3]]))[1])
    monkeypatch.delenv("KVSIM_BACKEND", raising=False)
    assert instructions.run_instructions(instructions.REPO, "mooncake", 0.1, backend="compiled") == 3800
    assert instructions.run_instructions(instructions.REPO, "mooncake", 0.1) == 3800
    assert backends == ["compiled", "compiled", None, None]
    monkeypatch.setattr(instructions.subprocess, "run", lambda command, **kw: Done(
        1, "Traceback (most recent call last):\nValueError: unknown case 'nope'\n==7== I refs: 3\n"))
    with pytest.raises(SystemExit, match="case nope failed under callgrind.*\n(.|\n)*unknown case 'nope'$"):
        instructions.count(instructions.REPO, "nope", 0.1)
    monkeypatch.setattr(instructions.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="valgrind is not installed"):
        instructions.main(["mooncake"])


def test_the_run_ceiling_removes_per_step_work_only(monkeypatch):
    """instructions.py --ceiling: every later step of a run takes the first step's time and runs
    account nothing; the same requests still run to the end, and undoing it restores the results."""
    import run_ceiling
    from kvsim.hardware import accelerator_catalog
    from kvsim.models import model_catalog
    from kvsim.models.step_time import RooflineStepTime

    scenario = kvsim.load_scenario(REPO / "scenarios" / "h20_vs_l20.yaml").with_changes(
        {"duration": "20 s", "warmup": "5 s", "sweep": {},
         "engine.backend": "python"})  # the ceiling patches the pure-Python engine
    real = kvsim.run(scenario)
    step = RooflineStepTime(model_catalog()["qwen3-8b"], accelerator_catalog()["h20"], 1, "bf16", "bf16")
    first = step.decode_steps(7, 7 * 900, 1)
    run_ceiling.apply(monkeypatch.setattr)
    for arrays in (False, True):
        steps = (step.decode_steps_array if arrays else step.decode_steps)(7, 7 * 900, 30)
        assert list(steps.total_s) == first.total_s * 30 and list(steps.memory_s) == first.memory_s * 30
    stubbed = kvsim.run(scenario)
    assert [run.records.n for run in stubbed.runs] == [run.records.n for run in real.runs]
    assert all(cut.iterations < whole.iterations for cut, whole in zip(stubbed.runs, real.runs))  # runs uncounted
    monkeypatch.undo()
    assert kvsim.run(scenario).records_digest() == real.records_digest()


TINY_PLAN = """\
name: tiny-plan
seed: 1
duration: 20 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 256}
  output_tokens: {kind: fixed, value: 16}
slo: {ttft_p99: 2 s, tpot_p99: 100 ms}
systems:
  h20: {node: h20-8x, instance: {tp: 8}}
plan: {targets: [2/s], baseline: h20, units: {max: 2}, rel_tol: 0.5}
"""


def test_a_plan_is_measured_over_its_probes(monkeypatch):
    monkeypatch.setattr(simpy.Environment, "__init__", simpy.Environment.__init__)
    monkeypatch.setattr(speed_measure, "_ENVIRONMENTS", [])
    import kvsim.sim.run as sim_run

    real = sim_run.run_scenario
    scenario = kvsim.parse_scenario(TINY_PLAN, "tiny-plan.yaml").with_changes({"engine.backend": "python"})
    m = speed_measure.measure_plan(scenario)
    assert sim_run.run_scenario is real  # the probes' counter is taken off again
    # every probe's run is counted: requests, events and iterations of each, one run per probe here
    assert m["probes"] >= 1 and m["requests"] >= m["probes"] * 10 and m["iterations"] > m["requests"]
    # each probe simulates at least the 20 s duration: its last request finishes well after the 5 s warm-up
    assert m["events"] > m["requests"] and m["sim_s"] >= 15.0 * m["probes"]
    assert m["backend"] == "python" and m["systems"] == 1 and m["cpu_s"] > 0
    assert any(c.get("system") == "h20" for c in m["results"]) and any("cheapest" in c for c in m["results"])
    assert speed_measure.measure_plan(scenario)["records_digest"] == m["records_digest"]  # the same answer again
