"""A measured vLLM run as a kvsim scenario, and kvsim's prediction of its metrics.

The scenario reproduces the run's conditions:

- one instance of ``tp`` cards on an ``h100-8x`` node, with the run's ``max_num_seqs``,
  ``max_num_batched_tokens`` and 16-token KV pages; prefix caching on when the run had it
  (``kv_cache: {}``: HBM prefix cache, LRU);
- the inference-perf ``shared_prefix`` workload. inference-perf builds its fixed prompts (a
  group's system prompt + a question) once and sends prompt ``i mod P`` as request ``i``
  (``SharedPrefixDataGenerator``, ``get_request(n)`` returns ``prompts[n % len(prompts)]``), so
  after its first use every *whole* prompt repeats, not only its system prompt. How many: the
  run's ``distinct_prompts``, its profile's ``N`` system prompts x ``M`` users, except where the
  load generator sent another number (inference-sim's pipeline sent 100 whatever its profile:
  :data:`kvsim.calibration.measurements.INFERENCE_SIM_PROMPTS`). kvsim models each prompt as a
  ``shared_documents`` document of ``prompt - 1`` tokens read in turn (``order: cyclic``), plus
  a one-token suffix of each request's own: a warm request then hits ``floor((prompt - 1) / 16)``
  pages and computes the rest, as vLLM does (it caches whole pages only, and always recomputes
  the last token). Approximations: inference-perf shuffles its prompts once (kvsim cycles them in
  index order: the same reuse distance), and the system prompt shared by a group is not shared
  across its questions' first uses (this only affects each prompt's first request);
- arrivals in the run's constant-rate stages back to back (``kind: stages``, the way
  inference-perf's ``constant`` load type spaces them). inference-perf drains each stage and
  pauses before the next; kvsim runs them back to back, which changes nothing at these loads;
- an FP8 checkpoint that keeps some layers in BF16 gets those groups' formats
  (:data:`CHECKPOINT_WEIGHT_DTYPES`), in its weight bytes, KV capacity and reads;
- the engine's version-specific front end: vLLM 0.10.0 to 0.23.x tokenise prompts in 2 ms
  micro-batches (:func:`engine_settings`, :mod:`kvsim.sim.tokenizer_batch`), from the row's
  ``engine`` / ``engine_version`` (a benchmark result file's from its sidecar; none stated: kvsim's
  default, no micro-batching);
- the 8 GiB CPU offload tier of some runs is left out: the prompts mostly stay in HBM, and where
  a run's long outputs crowd them out (reasoning-lite on a small pool) the CPU tier's hits are
  not modelled (nor vLLM's caching of generated blocks, which crowds them out sooner);

Metrics are the run's, client side: TTFT and E2E from arrival, TPOT ``(e2e - ttft) / (output - 1)``
per request, then mean / p90 over requests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kvsim.calibration.bench_files import BenchRun
from kvsim.calibration.checks import engine_version
from kvsim.calibration.measurements import METRICS, VllmRun
from kvsim.calibration.parameters import apply_to_raw
from kvsim.models import model_catalog
from kvsim.scenario.load import Scenario, build_scenario
from kvsim.yaml_io import Located

__all__ = ["MICROBATCH_TOKENIZER_VERSIONS", "engine_settings", "MODEL_ALIASES", "CHECKPOINT_WEIGHT_DTYPES", "GPU_NODES", "catalog_model", "run_scenario_raw", "run_scenario", "predict_run",
           "SUMMARY_COLUMNS"]

MODEL_ALIASES = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",  # the base model: same architecture as the chat one catalogued
    "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic": "llama-4-scout-17b-16e",
    "llama2-70b": "llama-2-70b",  # Splitwise's name
}
"""Measured model names whose catalog entry has another ``hf_id`` (a quantised or base checkpoint)."""

CHECKPOINT_WEIGHT_DTYPES = {
    # llm-compressor's Llama 4 recipes quantise the Linear layers and leave lm_head, self_attn,
    # router, vision_model and multi_modal_projector in BF16 (vllm-project/llm-compressor
    # examples/quantization_w8a8_fp8/llama4_fp8_block_example.py and its Llama 4 W4A16 example;
    # the RedHatAI checkpoint is that team's FP8-dynamic build, M); embeddings are not Linear.
    "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic": {"attention": "bf16", "embedding": "bf16",
                                                             "lm_head": "bf16"},
}
"""Quantised checkpoints whose weights are not all in the run's precision: ``weight_dtypes`` per group."""

GPU_NODES = {"H100-SXM-80GB": ("h100-sxm", "h100-8x"), "h100-80gb": ("h100-sxm", "h100-8x"),
             "a100-80gb": ("a100-sxm", "a100-8x")}
"""Measured GPU names -> (kvsim accelerator, node). Splitwise's ``h100-80gb`` and ``a100-80gb`` are
DGX H100 and DGX A100 (SXM) servers."""

SUMMARY_COLUMNS = {"ttft_mean_s": "ttft_s_mean", "ttft_p90_s": "ttft_s_p90", "ttft_p99_s": "ttft_s_p99",
                   "tpot_mean_s": "tpot_s_mean",
                   "e2e_mean_s": "e2e_s_mean", "e2e_p90_s": "e2e_s_p90"}
"""Measured metric -> kvsim summary column."""


MICROBATCH_TOKENIZER_VERSIONS = ((0, 10, 0), (0, 24, 0))
"""vLLM releases whose API server tokenises through ``AsyncMicrobatchTokenizer`` (2 ms wait, 32
prompts): from 0.10.0 (vllm-project/vllm pull 19334; in ``vllm/utils/__init__.py`` of the 0.10.0
release, absent from 0.9.2) to before 0.24.0 (removed by pull 45759; in
``vllm/utils/async_utils.py`` of 0.23.0, absent from 0.24.0). Read in the releases' source (H)."""


def engine_settings(engine: str, version: str) -> dict[str, Any]:
    """The ``engine`` fields a measured engine's name and version fix (not fitted: read in its
    source): vLLM 0.10.0-0.23.x's micro-batching tokeniser. Empty for anything else."""
    found = engine_version(version)
    if engine.strip().lower() != "vllm" or found is None:
        return {}
    low, high = MICROBATCH_TOKENIZER_VERSIONS
    if low <= found < high:
        return {"tokenizer_batch_wait_s": 0.002, "tokenizer_batch_max": 32}
    return {}


def catalog_model(name: str) -> str:
    """The kvsim catalog model for a measured model name (an HF id or an alias)."""
    catalog = model_catalog()
    if name in MODEL_ALIASES:
        return MODEL_ALIASES[name]
    for entry in catalog.names():
        if catalog[entry].hf_id.lower() == name.lower():
            return entry
    raise ValueError(f"no kvsim catalog model for {name!r} (kvsim catalog models lists them; "
                     f"add it, or an alias in kvsim/calibration/runs.py MODEL_ALIASES)")


def gpu_node(gpu: str) -> tuple[str, str]:
    if gpu not in GPU_NODES:
        raise ValueError(f"no kvsim node for GPU {gpu!r}; known: {', '.join(GPU_NODES)}")
    return GPU_NODES[gpu]


def run_scenario_raw(run: VllmRun | BenchRun, time_scale: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """Scenario data (SI numbers) reproducing ``run``; ``time_scale`` shortens every stage alike
    (the stages keep their rates and their share of the requests). A run of a benchmark result
    file (:class:`~kvsim.calibration.bench_files.BenchRun`) gets its workload from
    :func:`kvsim.calibration.bench_runs.bench_workload`."""
    model = catalog_model(run.model)
    _, node = gpu_node(run.gpu)
    fp8 = run.precision.upper().startswith("FP8")
    if isinstance(run, BenchRun):
        from kvsim.calibration.bench_runs import bench_workload

        workload, duration = bench_workload(run, time_scale, seed)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", run.run_id)
    else:
        stages = [{"rate": rate, "duration": seconds * time_scale} for rate, seconds in run.stages]
        workload = {
            "arrival": {"kind": "stages", "stages": stages},
            "prefix": {"kind": "shared_documents", "documents": run.distinct_prompts, "zipf_s": 0.0, "order": "cyclic",
                       "document_tokens": {"kind": "fixed", "value": run.prompt_tokens - 1},
                       "suffix_tokens": {"kind": "fixed", "value": 1}},
            "output_tokens": {"kind": "fixed", "value": run.output_tokens},
            "block_tokens": 16,
        }
        # a little past the last stage: its last request lands exactly at the stage's end, and
        # kvsim admits arrivals in [0, duration)
        duration = sum(s["duration"] for s in stages) + 1.0
        name = run.run_id
    system: dict[str, Any] = {
        "node": node, "nodes": 1, "instances": 1,
        "instance": {"tp": run.tp, "max_num_seqs": run.max_num_seqs, "max_batched_tokens": run.max_batched_tokens,
                     "block_size_tokens": 16},
    }
    if run.prefix_cache:
        system["kv_cache"] = {}
    engine = engine_settings(run.engine, run.engine_version)
    return {
        "name": f"vllm-run-{name}",
        "description": f"kvsim reproduction of measured run {run.label}",
        "seed": seed,
        "duration": duration,
        "model": model,
        "dtype": "fp8" if fp8 else "bf16",  # FP16 runs: same peak and bytes as bf16 on H100
        "weight_dtypes": CHECKPOINT_WEIGHT_DTYPES.get(run.model, {}) if fp8 else {},
        "kv_dtype": "bf16",
        "workload": workload,
        "systems": {"vllm": system},
    } | ({"engine": engine} if engine else {})


def run_scenario(run: VllmRun | BenchRun, values: Mapping[str, float] | None = None, time_scale: float = 1.0,
                 seed: int = 0) -> Scenario:
    """The validated kvsim scenario of ``run`` with calibration ``values`` applied (None: datasheet)."""
    raw = run_scenario_raw(run, time_scale, seed)
    if values:
        raw = apply_to_raw(raw, gpu_node(run.gpu)[0], values)
    return build_scenario(raw, Located(raw, f"<run {run.run_id}>"), None, strict=False)


def predict_run(run: VllmRun | BenchRun, values: Mapping[str, float] | None = None, time_scale: float = 1.0,
                seed: int = 0) -> dict[str, float]:
    """kvsim's prediction of each of :data:`METRICS` for ``run`` (seconds)."""
    from kvsim.sim import run_scenario as simulate

    result = simulate(run_scenario(run, values, time_scale, seed))
    row = result.summary_frame().iloc[0]
    return {m: float(row[SUMMARY_COLUMNS[m]]) for m in METRICS}
