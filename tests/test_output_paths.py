"""Where results go (issue 22, item 5): a scenario's name becomes one safe folder under
``results/``, and a folder kvsim did not write is never silently written over.

- ``kvsim run`` / ``kvsim plan`` without ``--out`` write into ``results/<safe name>``: never the
  working directory (``..``), ``results/`` itself (``.``), a hidden folder or a path of several
  parts, whatever the name; the shipped scenarios keep their folders.
- An existing ``--out`` without a kvsim manifest that holds files of the names a run writes (a
  user's ``summary.csv``) is refused, naming the folder and the files, unless ``--overwrite``;
  then those files are replaced and nothing else is touched. An empty folder, one holding a
  stopped run's ``points/`` store, or a previous run of the same scenario is taken as before.
- ``kvsim report --out`` refuses to replace files kvsim did not write there, unless ``--overwrite``.
- A ``manifest.json`` naming files outside its folder never makes kvsim remove them.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml

from kvsim.cli import main
from kvsim.cli_output import safe_name as _safe_name
from kvsim.report.manifest import MANIFEST, verify_manifest

REPO = Path(__file__).resolve().parents[1]

SCENARIO = """\
name: {name}
seed: 3
duration: 8 s
warmup: 2 s
model: qwen3-1.7b
workload:
  arrival: {{kind: poisson, rate: 2/s}}
  input_tokens: {{kind: fixed, value: 128}}
  output_tokens: {{kind: fixed, value: 8}}
systems:
  a: {{node: l20-8x, instances: 1}}
"""

PLAN = """\
name: {name}
seed: 4
duration: 20 s
warmup: 4 s
model: qwen3-1.7b
workload:
  arrival: {{kind: poisson, rate: 1/s}}
  input_tokens: {{kind: fixed, value: 500}}
  output_tokens: {{kind: fixed, value: 16}}
slo: {{ttft_p99: 1 s}}
systems:
  h20: {{node: h20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
  l20: {{node: l20-8x, instances: 1, instance: {{max_num_seqs: 4}}}}
plan: {{targets: [2/s], units: {{max: 2}}, rel_tol: 0.5}}
"""


def _main(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse refusing an argument
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def _scenario(folder: Path, name: str, text: str = SCENARIO) -> Path:
    path = folder / "s.yaml"
    path.write_text(text.format(name=json.dumps(name)), encoding="utf-8")
    return path


def _run(scenario: Path, *extra) -> tuple[int, str, str]:
    return _main("run", scenario, "--workers", "1", "--no-progress", "--no-report", *extra)


@pytest.mark.parametrize("name, folder", [
    ("..", "__"), (".", "_"), ("../../escaped", "___.._escaped"), (".hidden", "_hidden"),
    ("trailing.", "trailing_"),
])
def test_a_run_without_out_writes_into_one_folder_under_results(tmp_path, monkeypatch, name, folder):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    rc, _, err = _run(_scenario(tmp_path, name))
    assert rc == 0, err
    assert sorted(p.name for p in work.iterdir()) == ["results"]  # nothing beside results/
    assert sorted(p.name for p in (work / "results").iterdir()) == [folder]
    assert (work / "results" / folder / "summary.json").is_file()
    assert not list(tmp_path.glob("escaped*")) and not (work / "results" / "summary.json").exists()


def test_a_plan_without_out_writes_into_one_folder_under_results(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    rc, _, err = _main("plan", _scenario(tmp_path, "..", PLAN), "--workers", "1")
    assert rc == 0, err
    assert sorted(p.name for p in work.iterdir()) == ["results"]
    assert (work / "results" / "__" / "plan.json").is_file()


def test_safe_names_keep_ordinary_names_and_bound_long_ones():
    shipped = [yaml.safe_load(p.read_text(encoding="utf-8"))["name"] for p in sorted((REPO / "scenarios").glob("*.yaml"))]
    assert len(shipped) >= 10
    for name in shipped + ["h20_vs_l20", "offload-gap.v2", "run-3_b.final"]:
        assert _safe_name(name) == name  # their default folders do not move
    long_a, long_b = "x" * 300 + "a", "x" * 300 + "b"
    assert len(_safe_name(long_a).encode()) <= 100 and _safe_name(long_a) != _safe_name(long_b)
    assert len(_safe_name("é" * 300).encode()) <= 100
    for name in ("..", ".", "...", "/", "\\", "\x00", " ", "a/../b", ".x", "x."):
        safe = _safe_name(name)
        assert safe and safe not in (".", "..") and not safe.startswith(".") and not safe.endswith(".")
        assert "/" not in safe and "\\" not in safe and "\x00" not in safe


def test_a_users_folder_is_refused_unless_overwrite_and_only_kvsims_names_are_replaced(tmp_path):
    scenario = _scenario(tmp_path, "mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.csv").write_text("my own table\n")
    (out / "table.txt").write_text("my own notes\n")
    (out / "notes.txt").write_text("not a name kvsim writes\n")
    (out / "gap.md").write_text("a name only a gap study writes\n")
    rc, out_text, err = _run(scenario, "--out", out)
    assert rc == 2 and out_text == ""
    assert len(err.strip().splitlines()) == 1, err
    assert str(out) in err and "summary.csv" in err and "table.txt" in err and "--overwrite" in err
    assert "notes.txt" not in err  # not a name kvsim writes (gap.md is: a gap study's)
    assert (out / "summary.csv").read_text() == "my own table\n" and not (out / MANIFEST).exists()
    assert not (out / "points").exists()  # refused before anything ran

    rc, _, err = _run(scenario, "--out", out, "--overwrite")
    assert rc == 0, err
    assert (out / "summary.csv").read_text() != "my own table\n" and verify_manifest(out) == []
    # files the run does not write stay, even of names other runs write
    assert (out / "notes.txt").read_text() == "not a name kvsim writes\n"
    assert (out / "gap.md").read_text() == "a name only a gap study writes\n"


def test_a_users_folder_named_like_a_store_is_neither_taken_nor_removed(tmp_path):
    scenario = _scenario(tmp_path, "mine")
    out = tmp_path / "out"
    (out / "points").mkdir(parents=True)
    (out / "points" / "photo.jpg").write_text("mine")
    rc, _, err = _run(scenario, "--out", out)
    assert rc == 2 and "points" in err
    rc, _, err = _run(scenario, "--out", out, "--overwrite")
    assert rc == 0, err
    assert (out / "points" / "photo.jpg").read_text() == "mine"


def test_empty_resumable_and_own_folders_are_taken(tmp_path):
    scenario = _scenario(tmp_path, "mine")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run(scenario, "--out", empty)[0] == 0
    # a run stopped before its manifest: its points/ store (and some outputs) are kvsim's, it resumes
    (empty / MANIFEST).unlink()
    rc, _, err = _run(scenario, "--out", empty)
    assert rc == 0, err
    assert "already stored" in err and verify_manifest(empty) == []
    # a previous run of the same scenario
    rc, _, err = _run(scenario, "--out", empty)
    assert rc == 0 and "already stored" in err
    # a folder holding only the store
    only_store = tmp_path / "store"
    only_store.mkdir()
    shutil.copytree(empty / "points", only_store / "points")
    assert _run(scenario, "--out", only_store)[0] == 0
    # a user's folder with no file of kvsim's names
    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    assert _run(scenario, "--out", users)[0] == 0 and (users / "notes.txt").read_text() == "mine"


def test_a_plan_refuses_a_users_folder_unless_overwrite(tmp_path):
    scenario = _scenario(tmp_path, "planned", PLAN)
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.md").write_text("my plan\n")
    (out / "plan_budget.png").write_bytes(b"my figure")
    rc, _, err = _main("plan", scenario, "--out", out, "--workers", "1")
    assert rc == 2 and str(out) in err and "plan.md" in err and "--overwrite" in err
    assert (out / "plan.md").read_text() == "my plan\n" and not (out / "probes").exists()
    rc, _, err = _main("plan", scenario, "--out", out, "--workers", "1", "--overwrite")
    assert rc == 0, err
    assert (out / "plan.md").read_text() != "my plan\n" and verify_manifest(out) == []
    manifest = json.loads((out / MANIFEST).read_text())
    assert "plan_budget.png" not in {e["name"] for e in manifest["files"]}  # the user's figure is not kvsim's
    # another scenario's plan in the folder: refused, then replaced with --overwrite
    other = _scenario(tmp_path, "other plan", PLAN)
    rc, _, err = _main("plan", other, "--out", out, "--workers", "1")
    assert rc == 2 and "holds the results of scenario 'planned'" in err
    assert _main("plan", other, "--out", out, "--workers", "1", "--overwrite")[0] == 0
    assert json.loads((out / MANIFEST).read_text())["scenario"] == "other plan"
    assert (out / "plan_budget.png").read_bytes() == b"my figure"


def test_a_manifest_never_makes_kvsim_remove_files_outside_its_folder(tmp_path):
    scenario = _scenario(tmp_path, "mine")
    out = tmp_path / "out"
    assert _run(scenario, "--out", out)[0] == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["scenario"] = "someone else's"
    manifest["files"] += [{"name": "../victim.txt", "bytes": 7, "sha256": "0"},
                          {"name": str(victim), "bytes": 7, "sha256": "0"}, {"name": "..", "bytes": 0, "sha256": "0"}]
    (out / MANIFEST).write_text(json.dumps(manifest))
    assert any("not a file of this folder" in p for p in verify_manifest(out))
    rc, _, err = _run(scenario, "--out", out, "--overwrite")  # clears the other scenario's files
    assert rc == 0, err
    assert victim.read_text() == "keep me"
    manifest["scenario"] = "mine"  # the same scenario: a re-run removes the earlier run's stale files
    (out / MANIFEST).write_text(json.dumps(manifest))
    rc, _, err = _run(scenario, "--out", out)
    assert rc == 0, err
    assert victim.read_text() == "keep me"


def test_a_foreign_manifest_json_is_a_users_file(tmp_path):
    scenario = _scenario(tmp_path, "mine")
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text(json.dumps({"name": "my web app", "files": ["summary.json"]}))
    rc, _, err = _run(scenario, "--out", out)
    assert rc == 2 and "(manifest.json)" in err and "--overwrite" in err


def test_report_out_refuses_to_replace_files_kvsim_did_not_write_there(tmp_path):
    scenario = _scenario(tmp_path, "mine")
    out = tmp_path / "out"
    assert _main("run", scenario, "--out", out, "--workers", "1", "--no-progress")[0] == 0
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "study.md").write_text("my study\n")
    rc, _, err = _main("report", out, "--out", docs, "--name", "study")
    assert rc == 2 and str(docs) in err and "study.md" in err and "--overwrite" in err
    assert (docs / "study.md").read_text() == "my study\n" and not (docs / "study.html").exists()
    assert _main("report", out, "--out", docs, "--name", "study", "--overwrite")[0] == 0
    assert (docs / "study.md").read_text().startswith("# Run report: mine")
    # into the results folder itself: its own report files are replaced, the manifest still verifies,
    # and a new stem is kvsim's from then on
    for _ in range(2):
        rc, _, err = _main("report", out)
        assert rc == 0, err
        rc, _, err = _main("report", out, "--name", "again")
        assert rc == 0, err
    assert verify_manifest(out) == []
    # a user's file of the report's name in the results folder is not kvsim's
    (out / "mine.md").write_text("my notes\n")
    rc, _, err = _main("report", out, "--name", "mine")
    assert rc == 2 and "mine.md" in err and (out / "mine.md").read_text() == "my notes\n"


@pytest.mark.parametrize("stem", ["../escaped", "a/b", "..", ".hidden", ""])
def test_report_name_is_a_file_stem(tmp_path, stem):
    rc, _, err = _main("report", tmp_path, "--name", stem)
    assert rc == 2 and "--name" in err and "file stem" in err
    assert not list(tmp_path.parent.glob("escaped*"))
