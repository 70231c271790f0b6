"""Write ``benchmarks/data/isim_training_h100_runs.csv`` from inference-sim/training's ``default_args/``.

    .venv/bin/python benchmarks/isim_training_csv.py [--repo /work/.mirror/inference-sim+training/repo]
        [--out benchmarks/data/isim_training_h100_runs.csv]

Reads, at the pinned commit of a local git copy of https://github.com/inference-sim/training, each
experiment's ``exp-config.yaml`` (model, TP, max_model_len, max_num_batched_tokens, max_num_seqs),
``profile.yaml`` (inference-perf ``shared_prefix`` N x M, lengths, stages), ``results/config.yaml``
(checked: 10 groups x 10 prompts, the 100 prompts kvsim's ``INFERENCE_SIM_PROMPTS`` assumes) and
``results/summary_lifecycle_metrics.json`` (the successes' TTFT / E2E percentiles, counts and
throughputs), and writes one row per experiment in the columns of
``../shared/calibration/vllm_h100_runs.csv``, following its row ``20260217-155451`` exactly:
``mean_input_tokens`` / ``mean_output_tokens`` are the lengths asked (system + question; output_len
with ignore_eos), and ``tpot_mean_s = (e2e_mean - ttft_mean) / (output_len - 1)`` with the asked
length, not inference-perf's own TPOT (whose output length is re-tokenised client side, ~195 of
247). The facts no experiment file states (GPU, vLLM version, precision, prefix caching, chunked
prefill, offloading, KV blocks, gpu_memory_utilization) come from the sources in :data:`FACTS`.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
COMMIT = "ed5c1d26900e6909758d5e1641a18edaf56a1caf"
REPO = "inference-sim/training"
DEFAULT_MIRROR = Path("/work/.mirror/inference-sim+training/repo")
OUT = HERE / "data" / "isim_training_h100_runs.csv"

S2R = "inference-sim/sim-to-real-accuracy-validation@dcec3fd4711c761ac16557db720d1856b604579c"
S2R_DESIGN = f"{S2R}:docs/plans/2026-03-04-sim-to-real-accuracy-validation-design.md"
ISIM = "inference-sim/inference-sim@f90a1e3a"
FACTS = {
    "gpu": f"{REPO}@{COMMIT[:7]}:README.md ('datasheets/ GPU hardware specs (H100 SXM)'), DESIGN.md "
           "('instrumented vLLM on H100 SXM GPUs'); 80 GB: the SXM H100's only size (datasheets/h100-sxm.json)",
    "version": f"vLLM 0.15.1: {S2R_DESIGN} section 1 ('All experiments: vLLM v0.15.1 ...' of these 16 runs; "
               f"{REPO} itself names no version)",
    "precision": f"FP16: {S2R_DESIGN} section 1 ('fp16'); the checkpoints' config.json torch_dtype is bfloat16 "
                 "(model_configs/): same H100 peak and bytes",
    "caching": f"prefix caching on, chunked prefill on: {S2R_DESIGN} section 1 (also vLLM 0.15.1's V1 defaults)",
    "offload": f"CPU offload 8 GiB OffloadingConnector: {S2R_DESIGN} section 1 (kvsim leaves the CPU tier out)",
    "mem_util": "gpu_memory_utilization: not stated anywhere found; vLLM's default 0.9 (assumed, kvsim's default)",
    "kv_7b": f"gpu_kv_blocks 7463 (GPU KV cache size 119,408 tokens / 16): {ISIM}:testdata/trained_physics_iter29.json "
             "(runs 20260217-155451, -162547, -231439; -170634 same model and engine settings, M) and "
             f"{S2R}:tests/test_kv_cache_extractor.py",
    "kv_fixture": f"gpu_kv_blocks from the vllm.log line quoted in {S2R}:tests/test_kv_cache_extractor.py "
                  "(a test fixture naming the model, M: the vllm.log files are not published)",
}
KV_BLOCKS = {  # model -> (blocks, source key)
    "meta-llama/Llama-2-7b-hf": (7463, "kv_7b"),
    "meta-llama/Llama-2-70b-hf": (31357, "kv_fixture"),  # 501,712 tokens
    "mistralai/Mixtral-8x7B-v0.1": (27511, "kv_fixture"),  # 440,176 tokens
    "codellama/CodeLlama-34b-Instruct-hf": (26603, "kv_fixture"),  # 425,648 tokens
}
OVERLOAD_NOTE = ("overload: {failed:,} of {sent:,} requests failed (inference-perf's 300 s request timeout); "
                 "latencies are the successes' only; inference-sim/training DESIGN.md excludes this run")

COLUMNS = ["exp_id", "model", "gpu", "num_gpus", "tp", "dp", "engine", "engine_version", "precision", "max_num_seqs",
           "max_num_batched_tokens", "max_model_len", "gpu_mem_util", "chunked_prefill", "prefix_cache",
           "offload_tier", "offload_capacity", "gpu_kv_blocks", "cpu_kv_blocks", "workload", "dataset_or_synthetic",
           "arrival_type", "arrival_rate_rps", "arrival_detail", "num_requests", "num_failed", "mean_input_tokens",
           "mean_output_tokens", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s",
           "e2e_mean_s", "e2e_p50_s", "e2e_p90_s", "e2e_p99_s", "throughput_tok_s", "output_throughput_tok_s",
           "throughput_req_s", "metrics_source", "conditions_source", "notes"]


def show(mirror: Path, path: str) -> str:
    return subprocess.run(["git", "-C", str(mirror), "show", f"{COMMIT}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def experiments(mirror: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(mirror), "ls-tree", "--name-only", f"{COMMIT}:default_args"], check=True,
                         capture_output=True, text=True).stdout
    return sorted(line for line in out.splitlines() if line)


def number(x: float) -> str:
    return f"{x:g}" if float(x).is_integer() else f"{round(x, 6)}"


def row(mirror: Path, folder: str) -> dict[str, str]:
    base = f"default_args/{folder}"
    exp = yaml.safe_load(show(mirror, f"{base}/exp-config.yaml"))
    profile = yaml.safe_load(show(mirror, f"{base}/profile.yaml"))
    resolved = yaml.safe_load(show(mirror, f"{base}/results/config.yaml"))
    summary = json.loads(show(mirror, f"{base}/results/summary_lifecycle_metrics.json"))
    sp, rsp = profile["data"]["shared_prefix"], resolved["data"]["shared_prefix"]
    if (rsp["num_groups"], rsp["num_prompts_per_group"]) != (10, 10):
        raise SystemExit(f"{folder}: results/config.yaml sends {rsp['num_groups']} x {rsp['num_prompts_per_group']} "
                         "prompts, not the 10 x 10 of INFERENCE_SIM_PROMPTS")
    for key in ("system_prompt_len", "question_len", "output_len"):
        if rsp[key] != sp[key]:
            raise SystemExit(f"{folder}: {key} {rsp[key]} in results/config.yaml, {sp[key]} in profile.yaml")
    if not profile["server"].get("ignore_eos") or profile["load"]["type"] != "constant":
        raise SystemExit(f"{folder}: expected ignore_eos and constant-rate stages")
    stages = [(float(s["rate"]), float(s["duration"])) for s in resolved["load"]["stages"]]
    ok, lat = summary["successes"], summary["successes"]["latency"]
    ttft, e2e = lat["time_to_first_token"], lat["request_latency"]
    out = int(sp["output_len"])
    sent, failed = summary["load_summary"]["count"], summary["failures"]["count"]
    exp_id = "-".join(folder.split("-")[:2])
    workload = folder.rsplit("-", 1)[1]
    blocks, kv_source = KV_BLOCKS[exp["model"]]
    notes = [f"measured (re-tokenised client side) means: prompt_len {ok['prompt_len']['mean']:.1f}, output_len "
             f"{ok['output_len']['mean']:.1f} (asked {out}, ignore_eos); tpot uses the asked length"]
    if failed > 0.01 * sent:
        notes.insert(0, OVERLOAD_NOTE.format(failed=failed, sent=sent))
    tp = int(exp["tensor_parallelism"])
    return {
        "exp_id": exp_id, "model": exp["model"], "gpu": "H100-SXM-80GB", "num_gpus": str(tp), "tp": str(tp), "dp": "",
        "engine": "vLLM", "engine_version": "0.15.1", "precision": "FP16",
        "max_num_seqs": str(exp["max_num_seqs"]), "max_num_batched_tokens": str(exp["max_num_batched_tokens"]),
        "max_model_len": str(exp["max_model_len"]), "gpu_mem_util": "0.9", "chunked_prefill": "on",
        "prefix_cache": "on", "offload_tier": "cpu", "offload_capacity": "8 GiB OffloadingConnector (stated for these 16)",
        "gpu_kv_blocks": str(blocks), "cpu_kv_blocks": "", "workload": workload,
        "dataset_or_synthetic": (f"synthetic inference-perf shared_prefix ({sp['num_unique_system_prompts']} sys prompts "
                                 f"x {sp['num_users_per_system_prompt']} users; sys {sp['system_prompt_len']} + q "
                                 f"{sp['question_len']} tok; ignore_eos, out {out})"),
        "arrival_type": "constant-rate stages (inference-perf load.type=constant)",
        "arrival_rate_rps": number(sum(r * s for r, s in stages) / sum(s for _, s in stages)),
        "arrival_detail": ";".join(f"{r:g} rps x {s:g} s" for r, s in stages),
        "num_requests": str(sent), "num_failed": str(failed),
        "mean_input_tokens": str(sp["system_prompt_len"] + sp["question_len"]), "mean_output_tokens": str(out),
        "ttft_mean_s": number(ttft["mean"]), "ttft_p50_s": number(ttft["median"]), "ttft_p90_s": number(ttft["p90"]),
        "ttft_p99_s": number(ttft["p99"]), "tpot_mean_s": number((e2e["mean"] - ttft["mean"]) / (out - 1)),
        "e2e_mean_s": number(e2e["mean"]), "e2e_p50_s": number(e2e["median"]), "e2e_p90_s": number(e2e["p90"]),
        "e2e_p99_s": number(e2e["p99"]),
        "throughput_tok_s": repr(ok["throughput"]["total_tokens_per_sec"]),
        "output_throughput_tok_s": repr(ok["throughput"]["output_tokens_per_sec"]),
        "throughput_req_s": repr(ok["throughput"]["requests_per_sec"]),
        "metrics_source": f"{REPO}@{COMMIT}:{base}/results/summary_lifecycle_metrics.json",
        "conditions_source": (f"{REPO}@{COMMIT}:{base}/{{exp-config.yaml,profile.yaml,results/config.yaml}}; "
                              + "; ".join(FACTS[k] for k in ("gpu", "version", "precision", "caching", "offload",
                                                             "mem_util", kv_source))),
        "notes": "; ".join(notes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", type=Path, default=DEFAULT_MIRROR, help="a git copy of inference-sim/training")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    rows = [row(args.repo, folder) for folder in experiments(args.repo)]
    with args.out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.out} ({len(rows)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
