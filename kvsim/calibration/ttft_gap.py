"""Where first-token time goes, run by run: evidence for the validation page.

This module measures kvsim's TTFT error in the unit that matters to an engine, its own step: measured TTFT / measured TPOT against kvsim's TTFT / TPOT
(TPOT is the mean decode step a client sees), and tests one candidate mechanism against it.

The candidate: the API server as a single-threaded queue. vLLM's front end handles every
engine step's outputs for all running requests (detokenise, serialise, stream) in one process;
a new request's tokenisation queues behind that work. If each step delivers its outputs as one
batch of work ``L c`` (``L`` running requests, ``c`` seconds per streamed token) every step of
length ``T``, the server is busy a fraction ``rho = L c / T`` of the time and a request arriving
at a random moment waits on average ``rho * (L c) / 2 = rho**2 T / 2``. A server that keeps up
(``rho < 1``) therefore adds at most half a step. The ``rho`` a run would need to explain its
whole gap, ``sqrt(2 gap / T)``, is reported; above 1 the queue cannot be the explanation, because
a server that does not keep up delays every later token too, and the measured TPOT would show it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from kvsim.calibration.measurements import VllmRun

__all__ = ["ttft_gap_rows", "ttft_gap_markdown", "workload_spread_rows"]


def ttft_gap_rows(frame: pd.DataFrame, runs: Sequence[VllmRun], dataset: str = "vllm-h100") -> list[dict[str, Any]]:
    """One row per measured run: TTFT in steps (measured and datasheet), the gap in seconds and in
    steps, the concurrency (Little's law on the measured E2E) and the API-server utilisation the
    gap would need (see the module docstring).

    Parameters
    ----------
    frame : pandas.DataFrame
        :func:`kvsim.calibration.report.results_frame` rows (columns dataset, unit, metric,
        measured, datasheet).
    runs : sequence of VllmRun
        The measured runs (arrival stages, output length).
    """
    rows = []
    sub = frame[frame.dataset == dataset]
    for run in runs:
        per = sub[sub.unit == run.run_id].set_index("metric")
        if not {"ttft_mean_s", "tpot_mean_s", "e2e_mean_s"} <= set(per.index):
            continue
        ttft_m, tpot_m = float(per.at["ttft_mean_s", "measured"]), float(per.at["tpot_mean_s", "measured"])
        ttft_p, tpot_p = float(per.at["ttft_mean_s", "datasheet"]), float(per.at["tpot_mean_s", "datasheet"])
        seconds = sum(s for _, s in run.stages)
        rate_per_s = sum(r * s for r, s in run.stages) / seconds
        concurrency = rate_per_s * float(per.at["e2e_mean_s", "measured"])
        gap_s = ttft_m - ttft_p
        rows.append({
            "run": run.run_id, "model": run.model.split("/")[-1], "tp": run.tp, "workload": run.workload,
            "rate_per_s": rate_per_s, "output_tokens": run.output_tokens, "concurrency": concurrency,
            "ttft_steps_measured": ttft_m / tpot_m, "ttft_steps_kvsim": ttft_p / tpot_p,
            "gap_s": gap_s, "gap_steps": gap_s / tpot_m,
            "api_rho_needed": math.sqrt(2.0 * gap_s / tpot_m) if gap_s > 0 else 0.0,
        })
    return rows


def workload_spread_rows(frame: pd.DataFrame, metric: str = "tpot_mean_s",
                         dataset: str = "vllm-h100") -> list[dict[str, Any]]:
    """Per model with at least two runs: the lowest and highest datasheet error of ``metric``
    across its workloads. One card, one model, one engine: a parameter of the card or the model
    moves all of a model's runs together, so this spread is what no such parameter can remove."""
    sub = frame[(frame.dataset == dataset) & (frame.metric == metric)].copy()
    sub["model"] = sub.label.str.split().str[1]
    rows = []
    for model, group in sub.groupby("model", sort=True):
        if len(group) < 2:
            continue
        rows.append({"model": model, "runs": len(group), "lowest": float(group.err_datasheet.min()),
                     "highest": float(group.err_datasheet.max()),
                     "spread": float(group.err_datasheet.max() - group.err_datasheet.min())})
    return rows


def ttft_gap_markdown(gaps: list[dict[str, Any]], spread: list[dict[str, Any]]) -> list[str]:
    """The validation page's section on why the targets are missed (Markdown lines)."""
    lines = ["## TTFT in engine steps, and the spread across workloads", "",
             "**TTFT in engine steps.** A step is the run's measured TPOT. kvsim's first token leaves about "
             "2.5 steps after arrival under async scheduling (the rest of the step in flight, the step already "
             "scheduled, then the request's own step) plus the request path; the measured runs take 3 to 5 "
             "steps. The last column is the API-server utilisation a single-threaded front-end queue would "
             "need to explain the whole gap (`kvsim/calibration/ttft_gap.py`): above 1 it cannot, because a "
             "front end that does not keep up would slow every token and show in TPOT.", "",
             "| run | model | tp | workload | req/s | concurrency | measured steps | kvsim steps | gap | gap (steps) "
             "| API utilisation needed |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for g in gaps:
        lines.append(f"| {g['run']} | {g['model']} | {g['tp']} | {g['workload']} | {g['rate_per_s']:.2f} | "
                     f"{g['concurrency']:.0f} | {g['ttft_steps_measured']:.2f} | {g['ttft_steps_kvsim']:.2f} | "
                     f"{1e3 * g['gap_s']:.1f} ms | {g['gap_steps']:.2f} | {g['api_rho_needed']:.2f} |")
    lines += ["", "**The same model on different workloads.** Datasheet TPOT error per model across its "
              "workloads. A card or model parameter (an efficiency, an overhead) moves a model's runs "
              "together; the spread below is left whatever value it takes, and a leave-one-out median under "
              "5 % needs most runs inside a band narrower than that.", "",
              "| model | runs | lowest error | highest error | spread |", "|---|---:|---:|---:|---:|"]
    for s in spread:
        lines.append(f"| {s['model']} | {s['runs']} | {100 * s['lowest']:+.1f} % | {100 * s['highest']:+.1f} % | "
                     f"{100 * s['spread']:.1f} points |")
    return lines
