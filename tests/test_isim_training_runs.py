"""benchmarks/data/isim_training_h100_runs.csv: the 16 inference-sim/training default_args runs.

Every row reads as a measured run; the one run also in the shared calibration set
(20260217-155451) states the same conditions and metrics in both files; every model resolves to a
catalog entry with the architecture of its config.json; the workload is the 10 x 10 prompts
inference-sim's inference-perf sent. No simulation beyond KV sizing.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pytest

from kvsim.calibration.measurements import INFERENCE_SIM_PROMPTS, METRICS, read_measurements
from kvsim.calibration.runs import catalog_model, run_scenario
from kvsim.models import model_catalog

REPO = Path(__file__).resolve().parent.parent
CSV = REPO / "benchmarks" / "data" / "isim_training_h100_runs.csv"
SHARED_RUNS = REPO.parent / "shared" / "calibration" / "vllm_h100_runs.csv"
SHARED_ID = "20260217-155451"

CONDITIONS = ("model", "gpu", "num_gpus", "tp", "dp", "engine", "engine_version", "precision", "max_num_seqs",
              "max_num_batched_tokens", "max_model_len", "gpu_mem_util", "chunked_prefill", "prefix_cache",
              "offload_tier", "gpu_kv_blocks", "cpu_kv_blocks", "workload", "dataset_or_synthetic", "arrival_type",
              "arrival_rate_rps", "arrival_detail", "num_requests", "num_failed", "mean_input_tokens",
              "mean_output_tokens")
LATENCIES = ("ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s", "e2e_mean_s", "e2e_p50_s",
             "e2e_p90_s", "e2e_p99_s")
THROUGHPUTS = ("throughput_tok_s", "output_throughput_tok_s", "throughput_req_s")


def _rows(path: Path) -> dict[str, dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["exp_id"]: row for row in csv.DictReader(handle)}


def _same(a: str, b: str) -> bool:
    """Two cells state the same thing: equal numbers (``128`` and ``128.0``) or equal text."""
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except ValueError:
        return a.strip() == b.strip()


def test_every_row_reads_as_a_run():
    measured = read_measurements(CSV)
    rows = _rows(CSV)
    assert measured.kind == "vllm_runs" and len(measured.runs) == 16 == len(rows)
    assert [r.run_id for r in measured.runs] == list(rows)
    for run in measured.runs:
        assert run.gpu == "H100-SXM-80GB" and run.engine == "vLLM" and run.engine_version == "0.15.1"
        assert run.precision == "FP16" and run.prefix_cache and run.max_num_seqs == 128
        assert run.max_batched_tokens == 2048
        assert run.distinct_prompts == INFERENCE_SIM_PROMPTS  # inference-perf as inference-sim ran it: 10 x 10
        assert all(run.measured[m] is not None for m in METRICS)
        assert rows[run.run_id]["metrics_source"].startswith(
            "inference-sim/training@ed5c1d26900e6909758d5e1641a18edaf56a1caf:default_args/" + run.run_id)
    combos = {(r.model, r.tp) for r in measured.runs}
    assert combos == {("meta-llama/Llama-2-7b-hf", 1), ("meta-llama/Llama-2-70b-hf", 4),
                      ("mistralai/Mixtral-8x7B-v0.1", 2), ("codellama/CodeLlama-34b-Instruct-hf", 2)}
    assert sorted(r.workload for r in measured.runs) == sorted(["codegen", "general", "roleplay", "reasoning"] * 4)


def test_tpot_is_the_shared_definition_with_the_asked_output_length():
    """(E2E mean - TTFT mean) / (output_len - 1), output_len asked (not inference-perf's re-tokenised count)."""
    for run in read_measurements(CSV).runs:
        m = run.measured
        assert m["tpot_mean_s"] == pytest.approx((m["e2e_mean_s"] - m["ttft_mean_s"]) / (run.output_tokens - 1),
                                                 abs=1e-6)


@pytest.mark.skipif(not SHARED_RUNS.exists(), reason="the shared calibration set is not next to the repository")
def test_the_run_shared_with_the_calibration_set_agrees():
    ours, theirs = _rows(CSV)[SHARED_ID], _rows(SHARED_RUNS)[SHARED_ID]
    both = [c for c in CONDITIONS if ours[c].strip() and theirs[c].strip()]
    assert len(both) >= 20  # gpu_mem_util (0.9 assumed here) and cpu_kv_blocks are blank in one of them
    assert {c: (ours[c], theirs[c]) for c in both if not _same(ours[c], theirs[c])} == {}
    for column in LATENCIES:  # both rounded to the microsecond
        assert float(ours[column]) == pytest.approx(float(theirs[column]), abs=1.5e-6), column
    for column in THROUGHPUTS:
        assert float(ours[column]) == pytest.approx(float(theirs[column]), rel=1e-9), column
    assert ours["metrics_source"] == theirs["metrics_source"]
    shared = {r.run_id: r for r in read_measurements(SHARED_RUNS).runs}[SHARED_ID]
    here = {r.run_id: r for r in read_measurements(CSV).runs}[SHARED_ID]
    # every condition kvsim reads (the dataclass compares all but the metrics; the line differs)
    assert dataclasses.replace(here, line=shared.line) == shared
    assert here.measured == pytest.approx(shared.measured, abs=1.5e-6)


def test_catalog_models_resolve_with_their_config_json():
    catalog = model_catalog()
    names = {run.model: catalog_model(run.model) for run in read_measurements(CSV).runs}
    assert names == {"meta-llama/Llama-2-7b-hf": "llama-2-7b", "meta-llama/Llama-2-70b-hf": "llama-2-70b",
                     "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
                     "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b"}
    mixtral, codellama = catalog["mixtral-8x7b"], catalog["codellama-34b"]
    # inference-sim/training@ed5c1d2 model_configs/*/config.json
    assert (mixtral.num_layers, mixtral.hidden_size, mixtral.num_attention_heads, mixtral.num_kv_heads,
            mixtral.vocab_size) == (32, 4096, 32, 8, 32000)
    assert (mixtral.moe.num_experts, mixtral.moe.experts_per_token, mixtral.moe.expert_intermediate_size,
            mixtral.moe.shared_experts) == (8, 2, 14336, 0)
    assert mixtral.total_params == pytest.approx(46.70e9, rel=1e-3)  # Mixtral paper: 47 B total, 13 B active
    assert mixtral.active_params == pytest.approx(12.88e9, rel=1e-3)
    assert (codellama.num_layers, codellama.hidden_size, codellama.num_attention_heads, codellama.num_kv_heads,
            codellama.intermediate_size, codellama.vocab_size) == (48, 8192, 64, 8, 22016, 32000)
    assert codellama.moe is None and codellama.total_params == pytest.approx(33.74e9, rel=1e-3)


def test_kv_blocks_within_two_percent_of_vllms():
    """kvsim's KV sizing (catalog, memory_utilization 0.9) against the blocks vLLM logged, per model."""
    from kvsim.sim import check_scenario

    rows = _rows(CSV)
    seen = set()
    for run in read_measurements(CSV).runs:
        if run.model in seen:
            continue
        seen.add(run.model)
        (sizing,) = check_scenario(run_scenario(run)).values()
        stated = float(rows[run.run_id]["gpu_kv_blocks"])
        assert sizing.pools[0].kv_blocks_per_instance == pytest.approx(stated, rel=0.02), run.label
    assert len(seen) == 4


def test_committed_validation_json_matches_the_csv():
    """The committed datasheet errors were computed from this very file."""
    measured = read_measurements(CSV)
    for name in ("isim_training_validation.json", "isim_training_validation_timeout300.json"):
        result = json.loads((REPO / "benchmarks" / "data" / name).read_text(encoding="utf-8"))
        assert result["sha256"] == measured.sha256
        assert [r["run"] for r in result["runs"]] == measured.ids
