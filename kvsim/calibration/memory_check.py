"""KV capacity as kvsim sizes it against the KV blocks vLLM reported for the same runs.

vLLM logs the number of KV blocks it could allocate (``gpu_kv_blocks`` in the calibration set,
16-token blocks per GPU worker); kvsim sizes the same configuration from the catalog figures and
its vLLM-style reserve (:mod:`kvsim.models.memory`). Nothing here is fitted: it checks the memory
accounting, model by model.
"""

from __future__ import annotations

import csv
from pathlib import Path

from kvsim.calibration.measurements import read_measurements
from kvsim.calibration.runs import run_scenario
from kvsim.sim import check_scenario

__all__ = ["kv_capacity_rows", "kv_capacity_markdown"]


def kv_capacity_rows(path: str | Path) -> list[dict]:
    """One row per run of a vLLM runs table that reports ``gpu_kv_blocks``: model, TP, token
    budget, vLLM's blocks, kvsim's blocks and the relative error."""
    path = Path(path)
    runs = read_measurements(path).runs  # first: it checks every cell (gpu_kv_blocks too) with its line
    reported = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("gpu_kv_blocks"):
                reported[row["exp_id"]] = float(row["gpu_kv_blocks"])
    rows = []
    for run in runs:
        if run.run_id not in reported:
            continue
        (sizing,) = check_scenario(run_scenario(run)).values()
        pool = sizing.pools[0]
        vllm = reported[run.run_id]
        rows.append({"run": run.run_id, "model": run.model, "tp": pool.tp, "precision": run.precision,
                     "max_batched_tokens": run.max_batched_tokens, "vllm_blocks": vllm,
                     "kvsim_blocks": pool.kv_blocks_per_instance,
                     "error": pool.kv_blocks_per_instance / vllm - 1.0})
    return rows


def kv_capacity_markdown(rows: list[dict]) -> list[str]:
    """The validation page's section on KV capacity (Markdown lines)."""
    lines = ["## KV capacity against vLLM's reported blocks", "",
             "KV blocks of 16 tokens per GPU worker: what vLLM reported at start-up (`gpu_kv_blocks`) against "
             "what kvsim sizes from the catalog (`memory_utilization` 0.9, weights, the vLLM-style reserve of "
             "`kvsim/models/memory.py`, with the vision tower, RoPE table and encoder profiling pass of a multimodal "
             "checkpoint). Nothing is fitted.", "",
             "| run | model | tp | precision | token budget | vLLM blocks | kvsim blocks | error |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['model']} | {r['tp']} | {r['precision']} | {r['max_batched_tokens']} | "
                     f"{r['vllm_blocks']:.0f} | {r['kvsim_blocks']} | {100 * r['error']:+.1f} % |")
    return lines
