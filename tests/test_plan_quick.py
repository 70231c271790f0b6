"""kvsim plan's quick mode (kvsim.plan.quick): a question on the command line, written out as the
scenario it stands for, which answers the same when run from the file."""

from __future__ import annotations

import json

import pytest

from kvsim.cli import main
from kvsim.hardware import node_catalog, pool_node_catalog
from kvsim.plan.quick import QuickError, parse_candidates, parse_slo

QUICK = ["--model", "qwen3-1.7b", "--target", "4/s", "--slo", "ttft_p99=1s", "--candidates",
         "h20-8x,l20-8x+dram=64GiB", "--prompt-tokens", "2000", "--output-tokens", "64", "--max-units", "4",
         "--workers", "1"]


def _answer(folder):
    answer = json.loads((folder / "plan.json").read_text())
    answer.pop("kvsim_version")
    return answer


def test_a_question_on_the_command_line_answers_as_its_written_scenario_does(tmp_path, capsys):
    assert main(["plan", *QUICK, "--out", str(tmp_path / "quick")]) == 0
    out = capsys.readouterr().out
    written = tmp_path / "quick" / "scenario.yaml"
    assert written.read_text() in out  # printed, so the user can keep it
    assert written.read_text().startswith("# written by: kvsim plan --model qwen3-1.7b --target 4/s")
    assert "l20-8x_dram-64GiB: {node: l20-8x, kv_cache: {dram: {capacity: 64 GiB}}}" in written.read_text()
    assert "the cheapest is" in out
    assert main(["plan", str(written), "--out", str(tmp_path / "file"), "--workers", "1"]) == 0
    quick, again = _answer(tmp_path / "quick"), _answer(tmp_path / "file")
    assert quick["answers"] == again["answers"] and quick["candidates"] == again["candidates"]
    manifest = json.loads((tmp_path / "quick" / "manifest.json").read_text())
    assert "scenario.yaml" in json.dumps(manifest)


def test_a_shared_prefix_becomes_shared_documents_and_warm_lower_tiers(tmp_path, capsys):
    assert main(["plan", *QUICK, "--shared-prefix-tokens", "1500", "--documents", "20",
                 "--candidates", "h20-8x,l20-8x+pool=nvme-storage-16x:2+tp=2", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "scenario.yaml").read_text()
    assert "documents: 20" in text and "zipf_s: 0.8" in text and "suffix_tokens: {kind: fixed, value: 500}" in text
    assert ("l20-8x_pool-nvme-storage-16x_2_tp-2: {node: l20-8x, instance: {tp: 2}, kv_cache: {remote: "
            "{pool_node: nvme-storage-16x, nodes: 2}, gpu_direct: true, prewarm: true}}") in text


@pytest.mark.parametrize("argv, message", [
    (["--model", "qwen3-8b"], "missing: --target, --slo, --candidates"),
    (["--model", "qwen3-8bb", "--target", "4/s", "--slo", "ttft_p99=1s", "--candidates", "h20-8x"],
     "--model: unknown model 'qwen3-8bb' (did you mean 'qwen3-8b'?)"),
    (["--model", "qwen3-8b", "--target=-4/s", "--slo", "ttft_p99=1s", "--candidates", "h20-8x"],
     "--target: '-4/s': a rate above zero"),
    (["--model", "qwen3-8b", "--target", "4 s", "--slo", "ttft_p99=1s", "--candidates", "h20-8x"], "--target: '4 s'"),
    (["--model", "qwen3-8b", "--target", "4/s", "--slo", "ttft_p90=1s", "--candidates", "h20-8x"],
     "--slo: 'ttft_p90=1s': expected NAME=TIME"),
    (["--model", "qwen3-8b", "--target", "4/s", "--slo", "ttft_p99=1s", "--candidates", "h20-8x+drm=1TiB"],
     "'drm=1TiB' is not an option (did you mean 'dram'?)"),
    (["--model", "qwen3-8b", "--target", "4/s", "--slo", "ttft_p99=1s", "--candidates", "h20-8x",
      "--prompt-tokens", "100", "--shared-prefix-tokens", "100"], "--shared-prefix-tokens: 100 must be below"),
])
def test_a_wrong_question_is_refused_with_the_argument_named(tmp_path, capsys, argv, message):
    assert main(["plan", *argv, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_file_and_a_question_together_are_refused(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text("name: x\n")
    assert main(["plan", str(tmp_path / "s.yaml"), "--model", "qwen3-8b", "--out", str(tmp_path / "out")]) == 2
    assert "not both" in capsys.readouterr().err


def test_candidates_and_slo_parse_to_what_they_say():
    nodes, pools = node_catalog().names(), pool_node_catalog().names()
    h20, l20 = parse_candidates("h20-8x, l20-8x+dram=512GiB+nvme=2TiB+pool=nvme-storage-16x:3+tp=4", nodes, pools)
    assert (h20.node, h20.dram_bytes, h20.pool_node) == ("h20-8x", None, None)
    assert (l20.dram_bytes, l20.nvme_bytes, l20.pool_node, l20.pool_nodes, l20.tp) == (
        512 * 2**30, 2 * 2**40, "nvme-storage-16x", 3, 4)
    assert parse_slo("ttft_p99=2s, tpot_p99=100ms") == {"ttft_p99": 2.0, "tpot_p99": 0.1}
    for bad in ("h20-8x,h20-8x", "h20-8x+tp=0", "h20-8x+pool=nvme-storage-16x:0", "h20-8x+dram=512Gbit", "b200"):
        with pytest.raises(QuickError):
            parse_candidates(bad, nodes, pools)


def test_the_plan_writes_deployment_files_of_the_cheapest_and_lists_them(tmp_path):
    from pathlib import Path

    from kvsim.report.manifest import verify_manifest

    assert main(["plan", *QUICK, "--out", str(tmp_path), "--no-progress"]) == 0
    answer = json.loads((tmp_path / "plan.json").read_text())
    [row] = answer["deployment"]
    assert row["system"] == answer["answers"][0]["cheapest"] and row["problem"] is None
    assert {Path(name).name for name in row["files"]} >= {"vllm.sh", "sglang.sh", "k8s.yaml", "README.md"}
    assert all(name.startswith("deploy/at-4-per-s/") and (tmp_path / name).is_file() for name in row["files"])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert set(row["files"]) <= {entry["name"] for entry in manifest["files"]}
    assert verify_manifest(tmp_path) == []
    assert "Deployment files" in (tmp_path / "plan.md").read_text()


@pytest.mark.parametrize("shared, documents", [(0, 1), (7168, 1), (7168, 40)])
def test_every_quick_question_writes_a_scenario_that_loads(shared, documents):
    # the documented example (docs/planning.md) shares one 7K-token prefix: one document
    from kvsim.plan.quick import quick_scenario_text
    from kvsim.scenario.load import parse_scenario

    text = quick_scenario_text(model="qwen3-8b", targets=[40.0], slo={"ttft_p99": 2.0, "tpot_p99": 0.1},
                               candidates=parse_candidates("h20-8x,l20-8x+dram=512GiB,l20-8x+pool=nvme-storage-16x",
                                                           node_catalog().names(), pool_node_catalog().names()),
                               prompt_tokens=8192, output_tokens=200, shared_prefix_tokens=shared,
                               documents=documents)
    scenario = parse_scenario(text, "quick.yaml")
    assert sorted(scenario.spec.systems) == ["h20-8x", "l20-8x_dram-512GiB", "l20-8x_pool-nvme-storage-16x"]
