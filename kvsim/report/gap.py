"""The gap study: how far each KV-cache option narrows a high-end / low-end throughput gap.

For every sweep point and every option (``study.configs``), the gap is the high system's
``metric`` divided by the low system's. "Narrowed" is the share of the reference option's
excess gap (gap - 1) that the option removes: 100% means parity, negative means it widened.
A gap either of whose systems is flagged as not steady state (``summary["flags"]``, see
:mod:`kvsim.metrics.steady_state`) is marked in the table and drawn hollow.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim.escape import literal_figure_text, markdown_text as md
from kvsim.report.table import FLAG_MARK, flag_note
from kvsim.sim.result import RunResult

__all__ = ["gap_frame", "gap_markdown", "gap_figure"]


def _layout(run) -> str:
    """The run's instance layout (``tp8``, ``tp4 pp2``...), pool by pool."""
    return " + ".join(p.layout.label() for p in run.sizing.pools)


def _cell(summary: dict[str, Any], metric: str) -> dict[str, Any]:
    cache = summary.get("cache") or {}
    rates = cache.get("hit_rate") or {}
    links = cache.get("busiest_links") or []
    return {
        metric: summary.get(metric),
        "ttft_p50_s": summary["ttft_s"]["p50"],
        "ttft_p99_s": summary["ttft_s"]["p99"],
        "hit_rate": rates.get("total", 0.0),
        "hit_rate_hbm": rates.get("hbm", 0.0),
        "hit_rate_lower": rates.get("total", 0.0) - rates.get("hbm", 0.0),
        "remote_read_GBps": cache.get("remote_read_Bps", 0.0) / 1e9,
        "busiest_link": f"{links[0]['link']} ({links[0]['utilization_mean']:.0%})" if links else "-",
        "bound": summary.get("bound"),
        "flags": ", ".join(summary.get("flags") or []),
    }


def gap_frame(result: RunResult) -> pd.DataFrame:
    """One row per (sweep point, option): both systems' figures, the gap and the narrowing."""
    study = result.scenario.spec.study
    if study is None:
        raise ValueError("the scenario has no study section")
    rows = []
    reference = next(iter(study.configs))
    for point in result.points():
        gaps = {}
        for label, (high, low) in study.configs.items():
            h = _cell(result.run(high, point).summary, study.metric)
            lo = _cell(result.run(low, point).summary, study.metric)
            h["layout"], lo["layout"] = _layout(result.run(high, point)), _layout(result.run(low, point))
            gap = h[study.metric] / lo[study.metric] if lo[study.metric] else float("inf")
            gaps[label] = gap
            row: dict[str, Any] = {"point": point, **result.run(high, point).params, "option": label}
            row.update({f"{study.high}_{k}": v for k, v in h.items()})
            row.update({f"{study.low}_{k}": v for k, v in lo.items()})
            row["gap"] = gap
            row["flagged"] = bool(h["flags"] or lo["flags"])
            if label == reference:
                reference_flagged = row["flagged"]
            row["narrowed_flagged"] = row["flagged"] or reference_flagged  # it is read against the reference
            base = gaps[reference]
            row["narrowed_pct"] = 100.0 * (base - gap) / (base - 1.0) if base != 1.0 else 0.0
            rows.append(row)
    return pd.DataFrame(rows)


def _fmt(value: Any) -> str:
    """A cell: a number as read, a text (an option, a link, from the scenario's names) escaped for Markdown."""
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return md(value, cell=True)


def gap_markdown(result: RunResult, frame: pd.DataFrame | None = None) -> str:
    """Markdown: a table per sweep point (one row per option) with the gap and the narrowing."""
    study = result.scenario.spec.study
    frame = gap_frame(result) if frame is None else frame
    metric = study.metric
    h, lo = study.high, study.low
    columns = ["option", f"{h}_layout", f"{lo}_layout", f"{h}_{metric}", f"{lo}_{metric}", "gap", "narrowed_pct",
               f"{h}_ttft_p50_s", f"{h}_ttft_p99_s", f"{lo}_ttft_p50_s", f"{lo}_ttft_p99_s",
               f"{h}_hit_rate_hbm", f"{h}_hit_rate_lower", f"{lo}_hit_rate_hbm", f"{lo}_hit_rate_lower",
               f"{h}_remote_read_GBps", f"{lo}_remote_read_GBps", f"{h}_busiest_link", f"{lo}_busiest_link",
               f"{h}_bound", f"{lo}_bound"]
    header = ["option", f"{h} layout", f"{lo} layout", f"{h} {metric}", f"{lo} {metric}", "gap (x)", "narrowed (%)",
              f"{h} TTFT p50 (s)", f"{h} TTFT p99 (s)", f"{lo} TTFT p50 (s)", f"{lo} TTFT p99 (s)",
              f"{h} hit HBM", f"{h} hit below HBM", f"{lo} hit HBM", f"{lo} hit below HBM",
              f"{h} pool read (GB/s)", f"{lo} pool read (GB/s)", f"{h} busiest link", f"{lo} busiest link",
              f"{h} bound by", f"{lo} bound by"]
    lines = [f"# Gap study: {md(result.scenario.name)}", "",
             f"gap = {md(study.high)} {md(metric)} / {md(study.low)} {md(metric)}; narrowed = share of the "
             f"'{md(next(iter(study.configs)))}' gap's excess over 1 that the option removes. Hit rates are "
             "shares of the prompt KV needed at admission served from HBM and from the tiers below; "
             "pool read counts bytes delivered to the cards (each card loads its copy of replicated "
             "KV heads); link utilisation is the time-weighted mean over the window. Layout: each "
             "server's instance layout (tp x pp, ep, data-parallel attention ranks; kvsim.models.parallel), "
             "the best of its pilots where the system asks for layout: best.", ""]
    params = list(result.runs[0].params) if result.runs else []
    for point, rows in frame.groupby("point", sort=True):
        label = ", ".join(f"{k} = {rows.iloc[0][k]}" for k in params)
        lines += [f"## {md(label)}" if label else "## run", "",
                  "| " + " | ".join(md(cell, cell=True) for cell in header) + " |", "|" + "---|" * len(header)]
        for _, row in rows.iterrows():
            marked = {f"{h}_{metric}": bool(row[f"{h}_flags"]), f"{lo}_{metric}": bool(row[f"{lo}_flags"]),
                      "gap": bool(row["flagged"]), "narrowed_pct": bool(row["narrowed_flagged"])}
            lines.append("| " + " | ".join(_fmt(row[c]) + (FLAG_MARK if marked.get(c) else "") for c in columns)
                         + " |")
        lines.append("")
    flags = {f for side in (h, lo) for cell in frame[f"{side}_flags"] for f in cell.split(", ") if f}
    if flags:
        lines += [md(flag_note(flags)), ""]  # escaped: a literal mark, not a list item
    return "\n".join(lines)


@literal_figure_text
def gap_figure(result: RunResult, path: str | Path, frame: pd.DataFrame | None = None) -> Path:
    """PNG: the gap against ``study.x``, one panel per value of ``study.panel``, one line per option."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    study = result.scenario.spec.study
    frame = gap_frame(result) if frame is None else frame
    panels = list(dict.fromkeys(frame[study.panel])) if study.panel else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False, sharey=True)
    for ax, panel in zip(axes[0], panels):
        rows = frame if panel is None else frame[frame[study.panel] == panel]
        for option in study.configs:
            sub = rows[rows.option == option]
            x = sub[study.x] if study.x else range(len(sub))
            ax.plot(list(x), sub.gap.tolist(), marker="", label=option)
            color = ax.lines[-1].get_color()
            for xv, yv, flagged in zip(list(x), sub.gap.tolist(), sub.flagged.tolist()):
                ax.plot([xv], [yv], marker="o", color=color, markerfacecolor="none" if flagged else color)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
        values = list(set(rows[study.x])) if study.x else []
        # loads and lengths double from point to point: a log axis; text values ("100 Gbit/s"), zeros
        # and negative values have none and keep matplotlib's linear one
        if values and all(isinstance(t, numbers.Real) and not isinstance(t, bool) and t > 0 for t in values):
            ax.set_xscale("log", base=2)
            ticks = sorted(values)
            ax.set_xticks(ticks, [str(t) for t in ticks])
        if study.x:
            ax.set_xlabel(study.x.split(".")[-1])
        name = study.panel_label or (study.panel or "").split(".")[-1]
        ax.set_title(f"{name} = {panel}" if panel is not None else result.scenario.name, fontsize=10)
    axes[0][0].set_ylabel(f"gap: {study.high} / {study.low}\n{study.metric}")
    axes[0][-1].legend(title="KV cache")
    if frame.flagged.any():
        fig.suptitle("hollow: a system flagged as not steady state (see the table)", fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
