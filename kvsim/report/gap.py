"""The gap study: how far each KV-cache option narrows a high-end / low-end throughput gap.

For every sweep point and every option (``study.configs``), the gap is the high system's
``metric`` divided by the low system's. "Narrowed" is the share of the reference option's
excess gap (gap - 1) that the option removes: 100% means parity, negative means it widened.
A gap either of whose systems is flagged as not steady state (``summary["flags"]``, see
:mod:`kvsim.metrics.steady_state`) is marked in the table and drawn hollow.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim.escape import literal_figure_text
from kvsim.escape import markdown_text as md
from kvsim.report.table import FLAG_MARK, flag_note
from kvsim.sim.result import RunResult

__all__ = ["ERASED_WITHIN", "best_frame", "gap_figure", "gap_frame", "gap_markdown"]


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


def _money(run) -> dict[str, Any]:
    """What the system is bought with: cards (every card of its servers, used or not) and its hourly
    cost with and without the KV pool bought for it (``summary["cost"]``, :mod:`kvsim.metrics.cost`;
    None where a price or power is unknown)."""
    cost = run.summary.get("cost") or {}
    servers = [line.get("cost_per_hour_usd") for line in cost.get("bill") or [] if line.get("kind") == "compute"]
    return {
        "cards": sum(p.spec.nodes * p.node.accelerators_per_node for p in run.sizing.pools),
        "server_usd_per_h": None if not servers or None in servers else float(sum(servers)),
        "usd_per_h": cost.get("cost_per_hour_usd"),
    }


def _per(value: Any, divisor: Any) -> float | None:
    """``value / divisor``, or None where either is missing or the divisor is not positive."""
    if value is None or divisor is None or not divisor > 0:
        return None
    return float(value) / float(divisor)


def _ratio(high: float | None, low: float | None) -> float | None:
    if high is None or low is None or not low > 0:
        return None
    return high / low


PER = {"card": "cards", "server_usd": "server_usd_per_h", "usd": "usd_per_h"}
"""The buyer's measures of a gap: the metric per card bought, per dollar-hour of the servers, and
per dollar-hour of the servers with the KV pool bought for them (``gap_per_<key>``)."""


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
            for side, run in ((study.high, result.run(high, point)), (study.low, result.run(low, point))):
                row.update({f"{side}_{k}": v for k, v in _money(run).items()})
            for key, divisor in PER.items():
                row[f"gap_per_{key}"] = _ratio(_per(h[study.metric], row[f"{study.high}_{divisor}"]),
                                               _per(lo[study.metric], row[f"{study.low}_{divisor}"]))
            row["flagged"] = bool(h["flags"] or lo["flags"])
            if label == reference:
                reference_flagged = row["flagged"]
            row["narrowed_flagged"] = row["flagged"] or reference_flagged  # it is read against the reference
            base = gaps[reference]
            row["narrowed_pct"] = 100.0 * (base - gap) / (base - 1.0) if base != 1.0 else 0.0
            rows.append(row)
    return pd.DataFrame(rows)


ERASED_WITHIN = 1.10
"""A gap counts as erased, in the sense a buyer means, when it is within 10 % of parity."""


def _pick(rows: pd.DataFrame, side: str, score: pd.Series) -> pd.Series | None:
    """The option row where ``side`` scores best, among its steady-state cells if it has any
    (a flagged cell's figure is not a rate it can sustain); None where no cell has a score."""
    steady = rows[rows[f"{side}_flags"] == ""]
    pool = steady if steady[score.name].notna().any() else rows
    pool = pool[pool[score.name].notna()]
    return None if pool.empty else pool.loc[pool[score.name].idxmax()]


def best_frame(result: RunResult, frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per sweep point: each server at its own best option, and the gaps between them.

    ``{side}_option`` is the option with the side's highest metric, ``{side}_option_per_usd`` the
    one with its highest metric per dollar-hour with the KV pool bought for it; ``gap``,
    ``gap_per_card`` and ``gap_per_server_usd`` compare the throughput-best options,
    ``gap_per_usd`` the per-dollar-best ones. ``flagged``: a chosen cell is not steady state.
    """
    study = result.scenario.spec.study
    frame = gap_frame(result) if frame is None else frame
    params = list(result.runs[0].params) if result.runs else []
    metric, sides = study.metric, (study.high, study.low)
    out = []
    for point, rows in frame.groupby("point", sort=True):
        rows = rows.copy()
        row: dict[str, Any] = {"point": point, **{k: rows.iloc[0][k] for k in params}}
        picks, money_picks = {}, {}
        for side in sides:
            rows[f"{side}_{metric}_per_usd"] = [_per(v, d) for v, d in zip(rows[f"{side}_{metric}"],
                                                                           rows[f"{side}_usd_per_h"])]
            picks[side] = _pick(rows, side, rows[f"{side}_{metric}"])
            money_picks[side] = _pick(rows, side, rows[f"{side}_{metric}_per_usd"])
            row[f"{side}_option"] = None if picks[side] is None else picks[side]["option"]
            row[f"{side}_{metric}"] = None if picks[side] is None else picks[side][f"{side}_{metric}"]
            row[f"{side}_option_per_usd"] = None if money_picks[side] is None else money_picks[side]["option"]
        hi, lo = picks[study.high], picks[study.low]
        measured = hi is not None and lo is not None
        row["gap"] = _ratio(hi[f"{study.high}_{metric}"], lo[f"{study.low}_{metric}"]) if measured else None
        for key in ("card", "server_usd"):
            divisor = PER[key]
            row[f"gap_per_{key}"] = _ratio(_per(hi[f"{study.high}_{metric}"], hi[f"{study.high}_{divisor}"]),
                                           _per(lo[f"{study.low}_{metric}"], lo[f"{study.low}_{divisor}"])) \
                if measured else None
        mh, ml = money_picks[study.high], money_picks[study.low]
        row["gap_per_usd"] = _ratio(mh[f"{study.high}_{metric}_per_usd"], ml[f"{study.low}_{metric}_per_usd"]) \
            if mh is not None and ml is not None else None
        chosen = [(side, r) for side, r in ((study.high, hi), (study.low, lo), (study.high, mh), (study.low, ml))
                  if r is not None]
        row["flagged"] = any(bool(r[f"{side}_flags"]) for side, r in chosen)
        out.append(row)
    return pd.DataFrame(out)


def _prompt_tokens_mean(result: RunResult, point: int) -> float | None:
    """Mean prompt tokens of the point's workload (document + suffix) where it is written as shared
    documents: a panel swept over the document length is then labelled in prompt tokens too."""
    spec = next((p.spec for p in result.scenario.points if p.index == point), None)
    prefix = getattr(getattr(spec, "workload", None), "prefix", None)
    document, suffix = getattr(prefix, "document_tokens", None), getattr(prefix, "suffix_tokens", None)
    if document is None or suffix is None:
        return None
    return float(document.mean + suffix.mean)


def _prompt_note(result: RunResult, points: Any) -> str:
    means = {_prompt_tokens_mean(result, int(p)) for p in points}
    if len(means) != 1 or None in means:
        return ""
    return f"prompt {means.pop():,.0f} tokens (mean)"


def _fmt(value: Any) -> str:
    """A cell: a number as read, a text (an option, a link, from the scenario's names) escaped for Markdown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"  # unknown: a price or power the catalog lacks, or no steady cell to choose
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
               "gap_per_card", "gap_per_server_usd", "gap_per_usd",
               f"{h}_ttft_p50_s", f"{h}_ttft_p99_s", f"{lo}_ttft_p50_s", f"{lo}_ttft_p99_s",
               f"{h}_hit_rate_hbm", f"{h}_hit_rate_lower", f"{lo}_hit_rate_hbm", f"{lo}_hit_rate_lower",
               f"{h}_remote_read_GBps", f"{lo}_remote_read_GBps", f"{h}_busiest_link", f"{lo}_busiest_link",
               f"{h}_bound", f"{lo}_bound"]
    header = ["option", f"{h} layout", f"{lo} layout", f"{h} {metric}", f"{lo} {metric}", "gap (x)", "narrowed (%)",
              "gap per card (x)", "gap per server $ (x)", "gap per $ with KV pool (x)",
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
             "the best of its pilots where the system asks for layout: best. The buyer's gaps divide each "
             f"side's {md(metric)} by what it is bought with first: per card (every card of its servers), per "
             "server dollar (the servers' cost per hour: capital, energy, running cost; kvsim.metrics.cost) "
             "and per dollar with the KV pool (the servers plus the remote KV pool's nodes charged to them, "
             "cost.remote_pool_share of them; host DRAM is part of the server's price).", ""]
    params = list(result.runs[0].params) if result.runs else []
    for point, rows in frame.groupby("point", sort=True):
        label = ", ".join(f"{k} = {rows.iloc[0][k]}" for k in params)
        prompt = _prompt_note(result, [point])
        label = f"{prompt}: {label}" if prompt and label else (prompt or label)
        lines += [f"## {md(label)}" if label else "## run", "",
                  "| " + " | ".join(md(cell, cell=True) for cell in header) + " |", "|" + "---|" * len(header)]
        for _, row in rows.iterrows():
            marked = {f"{h}_{metric}": bool(row[f"{h}_flags"]), f"{lo}_{metric}": bool(row[f"{lo}_flags"]),
                      "gap": bool(row["flagged"]), "narrowed_pct": bool(row["narrowed_flagged"])}
            lines.append("| " + " | ".join(_fmt(row[c]) + (FLAG_MARK if marked.get(c) else "") for c in columns)
                         + " |")
        lines.append("")
    lines += _best_markdown(result, frame)
    flags = {f for side in (h, lo) for cell in frame[f"{side}_flags"] for f in cell.split(", ") if f}
    if flags:
        lines += [md(flag_note(flags)), ""]  # escaped: a literal mark, not a list item
    return "\n".join(lines)


def _best_markdown(result: RunResult, frame: pd.DataFrame) -> list[str]:
    """The buyer's view: each server at its best option per point, the gaps, and where they close."""
    study = result.scenario.spec.study
    best = best_frame(result, frame)
    h, lo, metric = study.high, study.low, study.metric
    params = list(result.runs[0].params) if result.runs else []
    header = [*params, f"{h} best", f"{lo} best", "gap (x)", "gap per card (x)", "gap per server $ (x)",
              f"{h} best per $", f"{lo} best per $", "gap per $ with KV pool (x)"]
    columns = [*params, f"{h}_option", f"{lo}_option", "gap", "gap_per_card", "gap_per_server_usd",
               f"{h}_option_per_usd", f"{lo}_option_per_usd", "gap_per_usd"]
    lines = ["## Each server at its best option", "",
             f"Per point, each server's option with its highest {md(metric)} (steady-state cells first), and "
             "separately its option with the most per dollar with its KV pool; the gaps compare those "
             f"choices. A gap of at most {ERASED_WITHIN:g}x counts as erased.", "",
             "| " + " | ".join(md(cell, cell=True) for cell in header) + " |", "|" + "---|" * len(header)]
    for _, row in best.iterrows():
        lines.append("| " + " | ".join(_fmt(row[c]) + (FLAG_MARK if row["flagged"] and c.startswith("gap") else "")
                                       for c in columns) + " |")
    lines.append("")
    for column, words in (("gap", "per server"), ("gap_per_server_usd", "per server dollar"),
                          ("gap_per_usd", "per dollar with the KV pool")):
        values = [(v, flagged) for v, flagged in zip(best[column], best["flagged"]) if pd.notna(v)]
        if not values:
            continue
        erased = sum(1 for v, _ in values if v <= ERASED_WITHIN)
        reversed_ = sum(1 for v, _ in values if v < 1.0)
        lines.append(f"- Gap {words}, each at its best: {min(v for v, _ in values):.3g}-"
                     f"{max(v for v, _ in values):.3g}x; erased (at most {ERASED_WITHIN:g}x) at {erased} of "
                     f"{len(values)} points" + (f", reversed (the low end ahead) at {reversed_}" if reversed_ else "")
                     + (f" ({sum(f for _, f in values)} with a flagged cell)" if any(f for _, f in values) else "")
                     + ".")
    lines.append("")
    return lines


def coinciding(frame: pd.DataFrame, options: list[str], measures: list[str], rel: float = 0.005) -> dict[str, str]:
    """Options whose every plotted value equals a later-drawn option's (within ``rel``), mapped to
    the last such option: its line lies on top and hides theirs exactly."""
    def values(option: str) -> list[float]:
        rows = frame[frame.option == option]
        return [float("nan") if v is None else float(v) for m in measures for v in rows[m].tolist()]

    def same(a: list[float], b: list[float]) -> bool:
        return len(a) == len(b) and bool(a) and all(
            (x != x and y != y) or abs(x - y) <= rel * max(abs(x), abs(y), 1e-12) for x, y in zip(a, b))

    series = {option: values(option) for option in options}
    hidden: dict[str, str] = {}
    for k, option in enumerate(options):
        on_top = [later for later in options[k + 1:] if same(series[option], series[later])]
        if on_top:
            hidden[option] = on_top[-1]
    return hidden


@literal_figure_text
def gap_figure(result: RunResult, path: str | Path, frame: pd.DataFrame | None = None) -> Path:
    """PNG: the gap against ``study.x``, one panel per value of ``study.panel``, one line per option."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    study = result.scenario.spec.study
    frame = gap_frame(result) if frame is None else frame
    panels = list(dict.fromkeys(frame[study.panel])) if study.panel else [None]
    measures = [("gap", "per server")]
    if frame["gap_per_usd"].notna().any():  # the buyer's view where every part is priced
        measures.append(("gap_per_usd", "per $ with KV pool"))
    fig, axes = plt.subplots(len(measures), len(panels), figsize=(4.2 * len(panels), 3.4 * len(measures)),
                             squeeze=False, sharey="row")
    for (measure, words), ax_row in zip(measures, axes):
        for ax, panel in zip(ax_row, panels):
            rows = frame if panel is None else frame[frame[study.panel] == panel]
            for option in study.configs:
                sub = rows[rows.option == option]
                x = list(sub[study.x]) if study.x else list(range(len(sub)))
                y = [float("nan") if v is None else v for v in sub[measure].tolist()]
                ax.plot(x, y, marker="", label=option)
                color = ax.lines[-1].get_color()
                for xv, yv, flagged in zip(x, y, sub.flagged.tolist()):
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
            title = f"{name} = {panel}" if panel is not None else result.scenario.name
            prompt = _prompt_note(result, rows.point.unique())
            ax.set_title(f"{prompt}\n({title})" if prompt else title, fontsize=10)
        ax_row[0].set_ylabel(f"gap {words}: {study.high} / {study.low}\n{study.metric}")
    # one legend below the panels: inside one, it covers that panel's lines
    from matplotlib.lines import Line2D

    handles = axes[0][0].get_legend_handles_labels()[0]
    same = coinciding(frame, list(study.configs), [m for m, _ in measures])
    for handle in handles:  # a line drawn under another is named in the legend, not lost
        if handle.get_label() in same:
            handle.set_label(f"{handle.get_label()} (under {same[handle.get_label()]}: same values)")
    if frame.flagged.any():
        handles.append(Line2D([], [], marker="o", ls="none", color="gray", markerfacecolor="none",
                              label="hollow: a system flagged as not steady state (see the table)"))
    from kvsim.report.legend import legend_below

    legend_below(fig, handles, title="KV cache", fontsize=9, title_fontsize=9)
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
