"""kvsim.plan.command: probes in worker processes, stored and reused; the same answer however run."""

from __future__ import annotations

import json
import re

import kvsim
from kvsim.plan.command import run_plan

PLAN = """
name: tiny-plan
seed: 4
duration: 60 s
warmup: 10 s
model: qwen3-1.7b
workload:
  arrival: {kind: poisson, rate: 1/s}
  input_tokens: {kind: fixed, value: 2000}
  output_tokens: {kind: fixed, value: 64}
slo: {ttft_p99: 1 s}
systems:
  h20: {node: h20-8x, instances: 1, instance: {max_num_seqs: 4}}
  l20: {node: l20-8x, instances: 1, instance: {max_num_seqs: 4}}
plan: {targets: [3/s, 9/s], units: {max: 6}, rel_tol: 0.15}
"""


def _answer(path):
    answer = json.loads((path / "plan.json").read_text())
    answer.pop("kvsim_version")
    return answer


def test_parallel_serial_and_resumed_plans_agree(tmp_path):
    scenario = kvsim.parse_scenario(PLAN, "plan.yaml")
    lines = []
    run_plan(scenario, tmp_path / "two", workers=2, log=lines.append)
    run_plan(scenario, tmp_path / "one", workers=1, log=lambda line: None)
    two, one = _answer(tmp_path / "two"), _answer(tmp_path / "one")
    # the rate search probes 2 rates a round with 2 workers, 1 with one: other probes, same answer
    assert [c["targets"] for c in two["candidates"]] == [c["targets"] for c in one["candidates"]]
    assert two["answers"] == one["answers"]
    assert any("probe 1:" in line for line in lines) and "probes run, 0 reused" in lines[-1]
    # the plan's expected cost first, then each probe's line with what is expected to remain
    assert lines[0].startswith("expected: plan: about ") and "more probes expected, about" in lines[1]
    probes = sorted((tmp_path / "two" / "probes").glob("*.json"))
    assert len(probes) == len(two["probes"])
    # a second run reuses every probe and writes the same answer
    again = []
    run_plan(scenario, tmp_path / "two", workers=2, log=again.append)
    assert f"0 probes run, {len(probes)} reused" in again[-1]
    assert _answer(tmp_path / "two") == two
    # a lost probe (a killed worker) is run again, and only it
    probes[0].unlink()
    again = []
    run_plan(scenario, tmp_path / "two", workers=2, log=again.append)
    assert f"1 probe run, {len(probes) - 1} reused" in again[-1]
    assert _answer(tmp_path / "two") == two
    assert not list((tmp_path / "two").rglob("*.tmp"))


def test_a_changed_input_runs_new_probes(tmp_path):
    scenario = kvsim.parse_scenario(PLAN, "plan.yaml")
    run_plan(scenario, tmp_path, workers=1, log=lambda line: None)
    changed = scenario.with_changes({"slo.ttft_p99": "0.8 s"})
    lines = []
    run_plan(changed, tmp_path, workers=1, log=lines.append)
    assert "0 reused" in lines[-1]


def test_the_plan_command_answers_in_one_paragraph_and_writes_the_report(tmp_path, capsys):
    from kvsim.cli import main

    scenario = tmp_path / "plan.yaml"
    scenario.write_text(PLAN)
    assert main(["plan", str(scenario), "--out", str(tmp_path / "out"), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "cheapest by cost per hour" in out and "At 3/s the cheapest is" in out
    for name in ("plan.json", "plan.md", "plan.html"):
        assert (tmp_path / "out" / name).is_file()


def test_the_plan_command_refuses_a_scenario_without_a_plan(tmp_path, capsys):
    from kvsim.cli import main

    scenario = tmp_path / "run.yaml"
    scenario.write_text(PLAN.replace("plan: {targets: [3/s, 9/s], units: {max: 6}, rel_tol: 0.15}\n", ""))
    assert main(["plan", str(scenario), "--out", str(tmp_path / "out")]) == 2
    assert "has no plan: section" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_open_loop_prewarm_over_a_short_duration_takes_many_rounds_without_recursing():
    # each prewarm round draws duration x rate requests (here ~10), so the 1,000 rounds prewarm
    # allows give ~10,000 prompts; each round's streams once nested in the last round's, one level
    # per round: a RecursionError near round 1,000 (it happened on scenarios/plan_offload.yaml)
    from itertools import islice

    from kvsim.rng import RandomStreams
    from kvsim.sim.prewarm import warm_prompts

    text = PLAN.replace("rate: 1/s", "rate: 20/s").replace(
        "  input_tokens: {kind: fixed, value: 2000}\n",
        "  prefix: {kind: shared_documents, documents: 5000, zipf_s: 0.8, document_tokens: {kind: fixed, value: 64},"
        " suffix_tokens: {kind: fixed, value: 16}}\n")
    workload = kvsim.parse_scenario(text, "plan.yaml").spec.workload
    prompts = list(islice(warm_prompts(workload, 0.5, RandomStreams(3), 16), 15_000))
    assert len(prompts) > 9_000
    assert all(len(p) == 5 for p in prompts)  # 80 tokens: 5 full blocks of 16
    again = list(islice(warm_prompts(workload, 0.5, RandomStreams(3), 16), 15_000))
    assert all(list(a) == list(b) for a, b in zip(again, prompts))  # same seed, same prompts


def test_report_renders_a_plan_again_from_its_answer_alone(tmp_path, capsys):
    from kvsim.cli import main

    scenario = kvsim.parse_scenario(PLAN, "plan.yaml")
    run_plan(scenario, tmp_path / "out", workers=1, log=lambda line: None)
    assert main(["report", str(tmp_path / "out"), "--out", str(tmp_path / "docs"), "--name", "study"]) == 0
    first = (tmp_path / "out" / "plan.md").read_text()
    again = (tmp_path / "docs" / "study.md").read_text()
    assert again == first.replace("plan_capacity.png", "study_capacity.png").replace(
        "plan_probes.png", "study_probes.png").replace("plan_sensitivity.png", "study_sensitivity.png").replace(
        " deploy/", " study_deploy/")
    assert (tmp_path / "docs" / "study_probes.png").is_file() and (tmp_path / "docs" / "study.html").is_file()
    # the deployment files go with the report written elsewhere, under <name>_deploy/, listed there
    listed = [name for row in _answer(tmp_path / "out")["deployment"] for name in row["files"]]
    assert listed and all(name.startswith("deploy/") for name in listed)
    for name in listed:
        copied = tmp_path / "docs" / name.replace("deploy/", "study_deploy/", 1)
        assert copied.read_bytes() == (tmp_path / "out" / name).read_bytes()
        assert copied.relative_to(tmp_path / "docs").as_posix() in again
    # a listed file gone from the plan's folder (or a plan.json copied alone): the report is still
    # written, names the files as the plan wrote them, copies none, and says so
    (tmp_path / "out" / listed[0]).unlink()
    assert main(["report", str(tmp_path / "out"), "--out", str(tmp_path / "docs2")]) == 0
    assert f"lists the deployment file {listed[0]}, which is not in" in capsys.readouterr().err
    assert listed[0] in (tmp_path / "docs2" / "plan.md").read_text()
    assert not (tmp_path / "docs2" / "plan_deploy").exists()
    assert main(["report", str(tmp_path)]) == 2
    assert "holds no plan.json" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "plan.json").write_text("{not json")
    assert main(["report", str(tmp_path / "bad")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_the_plan_command_takes_set_seed_and_no_progress_like_run(tmp_path, capsys):
    from kvsim.cli import main

    scenario = tmp_path / "plan.yaml"
    scenario.write_text(PLAN)
    assert main(["plan", str(scenario), "--out", str(tmp_path / "out"), "--workers", "1", "--seed", "9",
                 "--set", "slo.ttft_p99=0.8 s", "--set", "plan.targets=[3/s]", "--no-progress"]) == 0
    answer = _answer(tmp_path / "out")
    assert answer["seed"] == 9 and answer["targets"] == [3.0]
    assert answer["slo"] == [{"metric": "ttft_s", "statistic": "p99", "limit_s": 0.8}]
    err = capsys.readouterr().err
    assert "probe 1:" not in err and "plan done" not in err
    # a bad --set is refused with the field named, before anything runs
    assert main(["plan", str(scenario), "--out", str(tmp_path / "bad"), "--set", "slo.ttft_p99=-1 s"]) == 2
    assert "slo.ttft_p99" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_a_plan_on_dask_gives_the_answer_of_local_workers(tmp_path):
    import pytest

    pytest.importorskip("distributed")
    scenario = kvsim.parse_scenario(PLAN, "plan.yaml")
    run_plan(scenario, tmp_path / "local", workers=2, log=lambda line: None)
    run_plan(scenario, tmp_path / "dask", workers=2, dask=True, log=lambda line: None)
    assert _answer(tmp_path / "dask")["answers"] == _answer(tmp_path / "local")["answers"]
    assert [c["targets"] for c in _answer(tmp_path / "dask")["candidates"]] == \
        [c["targets"] for c in _answer(tmp_path / "local")["candidates"]]


def test_a_plan_on_dask_without_dask_installed_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    import builtins

    from kvsim.cli import main

    real_import = builtins.__import__

    def no_distributed(name, *args, **kwargs):
        if name == "distributed" or name.startswith("distributed."):
            raise ImportError("No module named 'distributed'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_distributed)
    scenario = tmp_path / "plan.yaml"
    scenario.write_text(PLAN)
    assert main(["plan", str(scenario), "--out", str(tmp_path / "out"), "--dask"]) == 2
    assert "pip install 'kvsim[dask]'" in capsys.readouterr().err


def test_a_plan_says_it_is_still_running_when_nothing_else_was_said(tmp_path, monkeypatch):
    from kvsim.plan import progress

    # a heartbeat every 10 ms: probes that take longer than that get a "still running" line
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.01)
    lines: list[str] = []
    run_plan(kvsim.parse_scenario(PLAN, "plan.yaml"), tmp_path, workers=1, log=lines.append)
    beats = [line for line in lines if "still running:" in line]
    assert beats and all(re.match(r"\[ *[0-9.]+ s\] still running: \d+ probes? done, the longest in flight for at "
                                  r"least ", line) for line in beats)
