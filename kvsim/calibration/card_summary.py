"""Validation errors per card family and model, and the check that committed predictions are current.

A planner choosing between card families needs to know how right kvsim is on each card and model
it was checked against, not only overall: :func:`card_model_rows` groups the results table
(:func:`kvsim.calibration.report.results_frame`) by the card, the model and the measurement set,
and gives the median |error| of the datasheet predictions (catalog values only) and of the
leave-one-out ones (each unit predicted by a fit that did not see it).

:func:`prediction_drift` recomputes the datasheet predictions of chosen units and compares them
with the committed results table: the validation page states errors of *today's* model only while
they agree, so the tests run it on the cheap units and fail when the step-time or engine model
moved without the page being regenerated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvsim.calibration.runs import GPU_NODES

__all__ = ["KIND_METRICS", "CARD_TARGETS", "unit_card_model", "card_model_rows", "card_model_markdown",
           "card_targets_markdown", "prediction_drift"]

KIND_METRICS = {"first token": ("ttft_mean_s", "prompt_time_s"),
                "per token": ("tpot_mean_s", "token_time_s"),
                "end to end": ("e2e_mean_s",)}
"""The page's three columns and the metrics that fill each: a serving run's mean TTFT / TPOT / E2E, or a
step table's prefill-iteration and decode-iteration times (a step table has no end-to-end figure)."""


CARD_TARGETS = (("first token", ("ttft_mean_s", "prompt_time_s"), 0.10),
                ("per token", ("tpot_mean_s", "token_time_s"), 0.06),
                ("end to end", ("e2e_mean_s",), 0.06),
                ("TTFT p99", ("ttft_p99_s",), 0.15))
"""Issue 27's datasheet targets, each card family and measurement set on its own: (kind, the metrics
that measure it, median |error| limit)."""


def card_targets_markdown(frame: pd.DataFrame) -> list[str]:
    """Issue 27's targets per card family and set: the datasheet median |error|, met or missed.

    Parameters
    ----------
    frame : pandas.DataFrame
        The results table with a ``card`` column (one row per unit and metric).
    """
    kinds = " | ".join(f"{kind} (<= {100 * limit:.0f} %)" for kind, _, limit in CARD_TARGETS)
    lines = ["### Targets per card family (issue 27)", "",
             "Datasheet median |error| of each card family and measurement set on its own (a step table has no "
             "end-to-end or p99 figure: '–').", "",
             f"| card | set | units | {kinds} |", "|---|---|---:|" + "---|" * len(CARD_TARGETS)]
    for (card, dataset), group in frame.groupby(["card", "dataset"], sort=True):
        cells = []
        for _, metrics, limit in CARD_TARGETS:
            errors = group.loc[group["metric"].isin(metrics), "err_datasheet"].dropna().abs()
            if errors.empty:
                cells.append("–")
                continue
            value = float(errors.median())
            cells.append(f"{100 * value:.1f} % {'met' if value <= limit else '**missed**'}")
        lines.append(f"| {card} | {dataset} | {group['unit'].nunique()} | " + " | ".join(cells) + " |")
    return lines


def unit_card_model(row: Any) -> tuple[str, str]:
    """(kvsim accelerator, measured model name) of a measured run or step-table point."""
    gpu = getattr(row, "gpu", None) or getattr(row, "hardware", "")
    card = GPU_NODES[gpu][0] if gpu in GPU_NODES else str(gpu)
    return card, str(row.model)


def card_model_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Median |error| per (card, model, set) and kind of metric, datasheet and leave-one-out.

    Parameters
    ----------
    frame : pandas.DataFrame
        The results table with ``card`` and ``model`` columns (one row per unit and metric).

    Returns
    -------
    list of dict
        ``card``, ``model``, ``dataset``, ``units`` and, per kind of :data:`KIND_METRICS`,
        ``<kind>`` -> ``(datasheet median, leave-one-out median)`` as fractions (NaN where the set
        has no such metric), sorted by card, model and set.
    """
    rows = []
    for (card, model, dataset), group in frame.groupby(["card", "model", "dataset"], sort=True):
        row: dict[str, Any] = {"card": card, "model": model, "dataset": dataset, "units": group["unit"].nunique()}
        for kind, metrics in KIND_METRICS.items():
            sub = group[group["metric"].isin(metrics)]
            row[kind] = tuple(float(sub[col].abs().median()) if sub[col].notna().any() else np.nan
                              for col in ("err_datasheet", "err_loo"))
        rows.append(row)
    return rows


def _cell(pair: tuple[float, float]) -> str:
    if all(np.isnan(v) for v in pair):
        return "–"
    return " / ".join("–" if np.isnan(v) else f"{100 * v:.1f} %" for v in pair)


def card_model_markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The validation page's section of :func:`card_model_rows`, as Markdown lines."""
    lines = ["## Per card family and model", "",
             "Median |error| per card, model and measurement set: **datasheet / leave-one-out** (catalog values "
             "only / a fit that did not see the unit). First token is the mean TTFT of a serving run or a step "
             "table's prefill iteration; per token the mean TPOT or decode iteration. A card or model that is not "
             "in this table has no measurement here: its predictions rest on the datasheet and the rules in "
             "`kvsim/hardware/data/accelerators.yaml` alone.", "",
             "| card | model | set | units | " + " | ".join(KIND_METRICS) + " |",
             "|---|---|---|---:|" + "---:|" * len(KIND_METRICS)]
    for r in rows:
        lines.append(f"| {r['card']} | {r['model']} | {r['dataset']} | {r['units']} | "
                     + " | ".join(_cell(r[kind]) for kind in KIND_METRICS) + " |")
    return lines


def prediction_drift(committed: pd.DataFrame, dataset: str, predictions: Mapping[str, Mapping[str, float]],
                     column: str = "datasheet") -> list[str]:
    """Where fresh predictions differ from the committed results table (relative 1e-9), one line each.

    Parameters
    ----------
    committed : pandas.DataFrame
        ``docs/validation_results.csv`` as read.
    dataset : str
        The set the predictions are of (``vllm-h100``, ``splitwise-h100``...).
    predictions : mapping
        unit id -> metric -> predicted value (seconds), from the same parameters as ``column``.
    column : str
        The committed column to compare with (``datasheet`` or ``calibrated``).

    Returns
    -------
    list of str
        Empty when every committed value of those units is reproduced; a unit with no committed
        row is reported too (the page does not cover it).
    """
    sub = committed[committed["dataset"] == dataset]
    problems = []
    for uid, predicted in predictions.items():
        rows = sub[sub["unit"].astype(str) == str(uid)]
        if rows.empty:
            problems.append(f"{dataset} {uid}: not in the committed results")
            continue
        for metric, value in _committed(rows, column):
            fresh = predicted.get(metric)
            if fresh is None or not np.isclose(fresh, value, rtol=1e-9, atol=0.0):
                problems.append(f"{dataset} {uid} {metric}: committed {value:.6g} s, now {fresh} s")
    return problems


def _committed(rows: pd.DataFrame, column: str) -> Iterable[tuple[str, float]]:
    for _, r in rows.iterrows():
        yield str(r["metric"]), float(r[column])
