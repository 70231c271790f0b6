"""A run's results folder ends with a manifest (every file, its size and hash): stale outputs of
an earlier run are removed, another scenario's results are not overwritten unasked, and a
folder can be checked for completeness (issue 11)."""

from __future__ import annotations

import json

from kvsim.cli import main
from kvsim.report.manifest import MANIFEST, verify_manifest

SCENARIO = """
name: {name}
seed: 3
duration: 20 s
warmup: 5 s
model: qwen3-8b
workload:
  arrival: {{kind: poisson, rate: 2/s}}
  input_tokens: {{kind: fixed, value: 500}}
  output_tokens: {{kind: fixed, value: 20}}
systems:
  a: {{node: h20-8x, instances: 1}}
  b: {{node: l20-8x, instances: 1}}
"""


def _write(tmp_path, name="m"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name))
    return path


def test_the_manifest_names_every_file_and_a_changed_file_is_caught(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(_write(tmp_path)), "--out", str(out), "--workers", "1", "--no-report"]) == 0
    manifest = json.loads((out / MANIFEST).read_text())
    names = {entry["name"] for entry in manifest["files"]}
    assert {"summary.json", "requests.parquet", "scenario.yaml", "table.txt", "summary.csv"} <= names
    assert manifest["scenario"] == "m" and verify_manifest(out) == []
    (out / "table.txt").write_text("edited")
    assert verify_manifest(out) == ["table.txt differs from what the run wrote"]
    (out / MANIFEST).unlink()
    assert "did not finish" in verify_manifest(out)[0]
    assert not list(out.glob(".*.tmp"))


def test_a_rerun_removes_what_it_no_longer_writes(tmp_path):
    out = tmp_path / "out"
    scenario = _write(tmp_path)
    assert main(["run", str(scenario), "--out", str(out), "--workers", "1"]) == 0
    assert (out / "report.html").is_file()
    (out / "notes.txt").write_text("mine")  # not kvsim's: left alone
    assert main(["run", str(scenario), "--out", str(out), "--workers", "1", "--no-report"]) == 0
    assert not (out / "report.html").exists() and not (out / "report_cdf.png").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert verify_manifest(out) == []


def test_another_scenarios_results_are_kept_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(_write(tmp_path, "first")), "--out", str(out), "--workers", "1", "--no-report"]) == 0
    before = (out / "summary.json").read_text()
    assert main(["run", str(_write(tmp_path, "second")), "--out", str(out), "--workers", "1", "--no-report"]) == 2
    assert "holds the results of scenario 'first'" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == before
    assert main(["run", str(_write(tmp_path, "second")), "--out", str(out), "--workers", "1", "--no-report",
                 "--overwrite"]) == 0
    assert json.loads((out / MANIFEST).read_text())["scenario"] == "second"


def test_deployment_files_are_named_below_deploy_and_nothing_else_below_the_folder(tmp_path):
    import json

    from kvsim.report.manifest import clear_results, finish_results, read_manifest, verify_manifest

    out = tmp_path / "out"
    (out / "deploy" / "at-4-per-s" / "a").mkdir(parents=True)
    script = out / "deploy" / "at-4-per-s" / "a" / "vllm.sh"
    script.write_text("echo\n")
    finish_results(out, [script, tmp_path / "elsewhere.txt"], "s", 1)
    assert [e["name"] for e in read_manifest(out)["files"]] == ["deploy/at-4-per-s/a/vllm.sh"]
    assert verify_manifest(out) == []
    # an edited manifest naming a path outside deploy/<target>/<system>/ is dropped, never followed
    outside = tmp_path / "victim.txt"
    outside.write_text("keep\n")
    data = json.loads((out / "manifest.json").read_text())
    data["files"] += [{"name": "deploy/../../victim.txt", "bytes": 5, "sha256": "x"},
                      {"name": "deploy/x", "bytes": 5, "sha256": "x"}]
    (out / "manifest.json").write_text(json.dumps(data))
    assert [e["name"] for e in read_manifest(out)["files"]] == ["deploy/at-4-per-s/a/vllm.sh"]
    # a deploy folder replaced by a link to elsewhere: its files are not kvsim's to remove
    elsewhere = tmp_path / "linked"
    (elsewhere / "at-4-per-s" / "a").mkdir(parents=True)
    (elsewhere / "at-4-per-s" / "a" / "vllm.sh").write_text("echo\n")
    import shutil

    shutil.rmtree(out / "deploy")
    (out / "deploy").symlink_to(elsewhere)
    assert verify_manifest(out) != []
    clear_results(out)
    assert (elsewhere / "at-4-per-s" / "a" / "vllm.sh").is_file() and outside.is_file()
