"""The report of a run (``kvsim run``'s results folder, docs/results.md): the question, the answer
in one paragraph, the comparison table, figures, cache and links, cost, the assumptions with their
sources, and the flags -- as Markdown and as one self-contained HTML page. It reads the saved
files only (summary.json, scenario.yaml, requests.parquet); nothing is re-run.

A flagged system-point (``flags``: not a steady-state number, docs/statistics.md) has its numbers
marked with :data:`~kvsim.report.table.FLAG_MARK` in tables and is drawn hollow (hatched) in
figures; the answer names it as flagged and never quotes its numbers as a result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvsim.report.document import Document, document_files, write_files
from kvsim.report.run_data import (
    Row,
    RunResults,
    load_axis,
    load_results,
    metric,
    rows,
    run_windows,
    saturation,
    window_phrase,
)
from kvsim.report.run_figures import figure_cdf, figure_latency, figure_throughput, slo_limits_s
from kvsim.report.run_sections import (
    _cell,
    _num,
    _point_label,
    add_sections,
    catalog_sources,
    cost_assumptions,
    replications_section,
    value_label,
)
from kvsim.report.table import FLAG_MARK, flag_note

__all__ = ["run_document", "answer_paragraph", "comparison_rows", "run_report_files", "write_run_report",
           "catalog_sources", "cost_assumptions"]

# (header, flat metric, scale, format) of the comparison table
COLUMNS: list[tuple[str, str, float, str]] = [
    ("goodput (req/s)", "goodput_requests_per_s", 1.0, "{:.3g}"),
    ("req/s", "requests_per_s", 1.0, "{:.3g}"),
    ("total tok/s", "total_tokens_per_s", 1.0, "{:,.0f}"),
    ("output tok/s", "output_tokens_per_s", 1.0, "{:,.0f}"),
    ("TTFT p50 (s)", "ttft_s_p50", 1.0, "{:.3g}"),
    ("TTFT p99 (s)", "ttft_s_p99", 1.0, "{:.3g}"),
    ("TPOT p50 (ms)", "tpot_s_p50", 1e3, "{:.3g}"),
    ("TPOT p99 (ms)", "tpot_s_p99", 1e3, "{:.3g}"),
    ("KV util", "kv_utilization_mean", 100.0, "{:.0f}%"),
    ("USD/M out tok", "cost.usd_per_million_output_tokens", 1.0, "{:.3g}"),
]


def _failed(row: Row, short: bool = False) -> list[str]:
    """The SLO thresholds a row misses, readable: ``TPOT p99`` (``short``: ``TPOT``, in a table whose
    header says p99)."""
    met = row.summary.get("slo_met") or {}
    names = [k.removesuffix("_p99") if short else k for k, ok in met.items() if not ok]
    return [name.replace("_", " ").upper().replace(" P", " p") for name in names]


def _slo_text(row: Row) -> str:
    if not row.summary.get("slo_met"):
        return "-"
    failed = _failed(row, short=True)
    return "yes" if not failed else "no: " + ", ".join(failed)


def _ratio(value: float | None, base: float | None, flagged: bool) -> str:
    """``value / base``, or "-" unless both are finite and the base is not zero."""
    if value is None or base is None or base == 0:
        return "-"
    return f"{value / base:.2f}x" + (FLAG_MARK if flagged else "")


def comparison_rows(results: RunResults) -> tuple[list[str], list[list[str]]]:
    """The long comparison table: one row per (point, system); the swept fields, the system, the
    metrics of :data:`COLUMNS` (flagged numbers marked), the goodput ratio to the baseline (as the
    printed table orders them), the SLO verdict and the flags."""
    all_rows = rows(results)
    swept = list(dict.fromkeys(k for p in results.points for k in (p.get("params") or {})))
    baseline = results.summary.get("baseline")
    with_ratio = baseline in results.systems and len(results.systems) > 1
    short = [k.split(".")[-1] for k in swept]
    header = ((short if len(set(short)) == len(short) else swept) + ["system"] + [c[0] for c in COLUMNS]
              + ([f"goodput / {baseline}"] if with_ratio else []) + ["SLO p99 met", "steady state"])
    body = []
    by_point = {(r.point, r.system): r for r in all_rows}
    for row in all_rows:
        flagged = bool(row.flags)
        cells = [str(row.params.get(k, "")) for k in swept] + [row.system]
        cells += [_cell(metric(row.summary, key), scale, fmt, flagged) for _, key, scale, fmt in COLUMNS]
        if with_ratio:
            base = by_point[(row.point, baseline)]
            cells.append("" if row.system == baseline else
                         _ratio(metric(row.summary, "goodput_requests_per_s"),
                                metric(base.summary, "goodput_requests_per_s"), flagged or bool(base.flags)))
        cells += [_slo_text(row), ", ".join(row.flags) if flagged else "ok"]
        body.append(cells)
    return header, body


def answer_paragraph(results: RunResults) -> str:
    """Which system serves the most goodput within the SLO at each point, with ratios only between
    steady-state, finite figures; flagged systems are named as such; then the saturation points and
    the cheapest cost per million output tokens."""
    all_rows = rows(results)
    sentences = []
    within_slo = "within the SLO"
    if not any(r.summary.get("slo_met") for r in all_rows):
        sentences.append("No SLO is set, so goodput counts every completed request.")
        within_slo = "(no SLO)"
    for point in results.points:
        index = point.get("index")
        here = [r for r in all_rows if r.point == index]
        prefix = f"At {_point_label(here[0])}" if here[0].params else "In this run"
        steady = [r for r in here if not r.flags and metric(r.summary, "goodput_requests_per_s") is not None]
        within = [r for r in steady if r.slo_met is not False]
        parts = []
        if within and not any(metric(r.summary, "goodput_requests_per_s") for r in within):
            parts.append(f"{prefix} no steady system completes requests {within_slo}")
        elif within:
            best = max(within, key=lambda r: metric(r.summary, "goodput_requests_per_s"))
            value = metric(best.summary, "goodput_requests_per_s")
            text = f"{prefix} {best.system} serves the most goodput {within_slo}, {_num(value)} requests/s"
            others = []
            for r in within:
                other = metric(r.summary, "goodput_requests_per_s")
                if r is not best and other:
                    others.append(f"{value / other:.2f}x {r.system}'s {_num(other)}")
            parts.append(text + (f" ({'; '.join(others)})" if others else ""))
        else:
            parts.append(f"{prefix} no system serves the load {within_slo} in a steady state")
        missing = [r for r in steady if r.slo_met is False]
        if missing:
            parts.append(", ".join(f"{r.system} misses the SLO ({', '.join(_failed(r))})" for r in missing))
        flagged: dict[str, list[str]] = {}
        for r in here:
            if r.flags:
                flagged.setdefault(", ".join(r.flags), []).append(r.system)
        if flagged:
            parts.append(", ".join(("every system is" if len(names) == len(here) > 1 else
                                    f"{', '.join(names)} {'is' if len(names) == 1 else 'are'}") + f" flagged {flags}"
                                   for flags, names in flagged.items()) + " (not a steady-state number)")
        sentences.append("; ".join(parts) + ".")
    axis = load_axis(results)
    if axis is not None:
        saturated = []
        for system in results.systems:
            groups: dict[str, list[Row]] = {}
            for r in all_rows:
                if r.system == system:
                    groups.setdefault(r.group, []).append(r)
            for group, series in groups.items():
                name = f"{system} ({group})" if group else system
                sat = saturation(series)
                top = max((r for r in series if r.load is not None), key=lambda r: r.load)
                saturated.append(f"{name} at {value_label(axis.key, sat.params[axis.key])}" if sat else
                                 f"{name} not within the loads run (up to "
                                 f"{value_label(axis.key, top.params[axis.key])})")
        sentences.append("Saturation (the first load flagged unstable or missing the SLO): " + "; ".join(saturated) + ".")
    priced = [r for r in all_rows if not r.flags and r.slo_met is not False
              and metric(r.summary, "cost.usd_per_million_output_tokens") is not None]
    if priced:
        cheapest = min(priced, key=lambda r: metric(r.summary, "cost.usd_per_million_output_tokens"))
        where = f" at {_point_label(cheapest)}" if cheapest.params else ""
        sentences.append(f"The lowest cost per million output tokens among steady points {within_slo} is "
                         f"{cheapest.system}'s{where}, USD "
                         f"{metric(cheapest.summary, 'cost.usd_per_million_output_tokens'):.3g}.")
    return " ".join(sentences)


def _regime(results: RunResults) -> str:
    arrival = ((results.scenario.get("workload") or {}).get("arrival") or {})
    kind = arrival.get("kind")
    swept = " ".join(results.summary.get("sweep") or {})
    if kind == "poisson":
        text = "Poisson arrivals" + ("" if "arrival.rate" in swept else f" at {arrival.get('rate')}")
    elif kind == "closed_loop":
        text = "a closed loop of " + ("clients" if "arrival.clients" in swept else f"{arrival.get('clients')} clients")
    elif kind == "trace":
        text = f"arrivals replayed from the trace {Path(str(arrival.get('file'))).name}"
    elif kind:
        text = f"{kind} arrivals"
    else:
        text = "the scenario's arrivals (no scenario.yaml beside the summary)"
    sweep = results.summary.get("sweep") or {}
    if sweep:
        text += "; swept: " + "; ".join(f"{k} over {', '.join(str(v) for v in values)}" for k, values in sweep.items())
    return text


def _slo_phrase(results: RunResults) -> str:
    limits = slo_limits_s(results.scenario)
    if not limits:
        return "no SLO set"
    def name(key: str) -> str:
        return key.replace("_", " ").upper().replace(" P", " p")
    return " and ".join(f"{name(k)} <= {v * 1e3:.3g} ms" if v < 1 else f"{name(k)} <= {v:.3g} s"
                        for k, v in limits.items())


def _hardware(summary: dict[str, Any]) -> str:
    hw = summary.get("hardware") or {}
    pools = hw.get("pools") or {}
    if len(pools) > 1:
        return " + ".join(f"{p.get('role', name)}: {p.get('cards')}x {p.get('accelerator')} "
                          f"({p.get('instances')} inst tp{p.get('tp')})" for name, p in pools.items())
    if not hw:
        return "-"
    return f"{hw.get('cards')}x {hw.get('accelerator')} ({hw.get('nodes')}x {hw.get('node')}), " \
           f"{hw.get('instances')} inst tp{hw.get('tp')}"


def _usd(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"


def run_document(results_dir: str | Path | RunResults, stem: str = "report") -> Document:
    """The report of a results folder of ``kvsim run``; figures are named ``<stem>_*.png``.

    Raises
    ------
    ReportInputError
        When the folder's files are missing or of another shape.
    """
    results = results_dir if isinstance(results_dir, RunResults) else load_results(results_dir)
    s = results.summary
    all_rows = rows(results)
    axis = load_axis(results)
    limits = slo_limits_s(results.scenario)
    doc = Document(f"Run report: {s['scenario']}")

    doc.heading("Question")
    description = " ".join(str(results.scenario.get("description") or "").split())
    systems = ", ".join(results.systems)
    doc.paragraph(f"How do {systems} compare serving the workload of '{s['scenario']}'"
                  + (f" ({description})" if description else "") + f"? Load: {_regime(results)}. SLO: "
                  f"{_slo_phrase(results)}. Measured over {window_phrase(results)}; "
                  f"seed {s.get('seed')}, {s.get('replications', 1)} replication(s) per point; "
                  f"baseline {s.get('baseline')}; kvsim {s.get('kvsim_version')}.")

    doc.heading("Answer")
    doc.paragraph(answer_paragraph(results))

    doc.heading("Comparison")
    header, body = comparison_rows(results)
    seen_flags = {f for r in all_rows for f in r.flags}
    doc.table(header, body, " ".join(filter(None, [
        "goodput: requests completed in the window within every SLO threshold; total tok/s: prompt and output "
        "tokens processed in the window (docs/statistics.md); USD/M out tok: the system's hourly cost over its "
        "output tokens (docs/cost.md); ratios only where both sides are finite and the base is not zero.",
        flag_note(seen_flags)])))
    doc.heading("Systems", 3)
    first = results.points[0]["systems"]
    doc.table(["system", "hardware", "capex", "cost per hour"],
              [[name, _hardware(first[name]), _usd(metric(first[name], "cost.capex_usd")),
                _usd(metric(first[name], "cost.cost_per_hour_usd"))] for name in results.systems])
    replications_section(doc, results)

    doc.heading("Figures")
    if axis is not None:
        doc.figure(figure_throughput(all_rows, axis, stem))
        doc.figure(figure_latency(all_rows, axis, limits, stem))
    else:
        doc.paragraph("No arrival rate or client count is swept: no plot against load.")
    labels = {int(p.get("index", k)): ", ".join(str(v) for v in (p.get("params") or {}).values()) or "run"
              for k, p in enumerate(results.points)}
    cdf = figure_cdf(results.requests(), results.systems, labels, (float(s["warmup_s"]), float(s["duration_s"])),
                     limits, stem, run_windows(results))
    if cdf is not None:
        doc.figure(cdf)

    add_sections(doc, results, all_rows, stem)
    return doc


def run_report_files(results_dir: str | Path | RunResults, stem: str = "report") -> list[tuple[str, bytes]]:
    """The report files of a results folder as (name, bytes): its PNG figures, ``<stem>.md`` and
    ``<stem>.html`` (:func:`kvsim.report.document.document_files`), not yet written.

    Raises
    ------
    ReportInputError
        When the folder's files are missing or of another shape.
    """
    return document_files(run_document(results_dir, stem), stem)


def write_run_report(results_dir: str | Path, out_dir: str | Path | None = None, stem: str = "report") -> list[Path]:
    """Write ``<stem>.md`` (with its PNG figures) and ``<stem>.html`` for a results folder, into
    ``out_dir`` (default: the results folder), each to a temporary name first and then renamed.
    Returns the paths written.

    Raises
    ------
    ReportInputError
        When the folder's files are missing or of another shape.
    OSError
        When ``out_dir`` cannot be written.
    """
    return write_files(out_dir if out_dir is not None else results_dir, run_report_files(results_dir, stem))
