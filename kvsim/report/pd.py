"""The P:D study: colocated and disaggregated systems side by side, per card and per dollar, and
the timeline of a dynamic P:D ratio.

Every row states its load and carries the summary's steady-state flags (``unstable``,
``too_short``, ``warmup_short``; criteria in :mod:`kvsim.metrics.steady_state`): a flagged
goodput is not a steady-state number, and is marked as such in the table and hollow in the plot.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.escape import literal_figure_text
from kvsim.escape import markdown_text as md
from kvsim.metrics.summary import slo_met
from kvsim.report.table import FLAG_MARK, flag_note, hardware_label
from kvsim.sim.result import RunResult, SystemRun

__all__ = ["pd_frame", "pd_markdown", "pd_figures", "goodput_heatmap"]


def _capex_usd(run: SystemRun) -> float | None:
    prices = [(p.node.price_usd, p.spec.nodes) for p in run.sizing.pools]
    if any(price is None for price, _ in prices):
        return None
    return float(sum(price * nodes for price, nodes in prices))


def _in_system(run: SystemRun, t_s: float) -> int:
    """Requests arrived by ``t_s`` that had neither finished nor been given up on by then."""
    arrival, finish = run.records.column("arrival_s"), run.records.column("finish_s")
    aborted = run.records.column("aborted_s")
    return int(np.count_nonzero((arrival <= t_s) & ~(finish <= t_s) & ~(aborted <= t_s)))


def _flags(run: SystemRun) -> str:
    return ", ".join(run.summary.get("flags") or [])


def _ratio(run: SystemRun) -> str:
    """Prefill:decode cards at the start (colocated systems: ``colocated``)."""
    if not run.sizing.disaggregated:
        return "colocated"
    cards = {"prefill": 0, "decode": 0}
    for pool in run.sizing.pools:
        for role in pool.initial_roles:
            cards[role] += pool.layout.cards
    return f"{cards['prefill']}:{cards['decode']}"


def _phase_attainment(run: SystemRun, spec) -> dict[str, float]:
    """Share of the requests arriving in each workload phase (inside the window) that met every SLO."""
    phases = getattr(spec.workload.arrival, "phases", None)
    if not phases:
        return {}
    arrival = run.records.column("arrival_s")
    met = slo_met(run.records, {"ttft_s": spec.slo.ttft_p99, "tpot_s": spec.slo.tpot_p99, "e2e_s": spec.slo.e2e_p99})
    out, start = {}, 0.0
    for k, phase in enumerate(phases):
        end = start + phase.duration if k < len(phases) - 1 else spec.duration
        inside = (arrival >= max(start, run.summary["window"]["start_s"])) & (arrival < end)
        out[f"slo_attainment_phase{k + 1}"] = float(met[inside].mean()) if inside.any() else math.nan
        start = end
    return out


def pd_frame(result: RunResult) -> pd.DataFrame:
    """One row per (sweep point, system) with the study's figures (SI units, rates per second)."""
    spec = result.scenario.spec
    rows = []
    for run in result.runs:
        s = run.summary
        pd_part = s.get("pd") or {}
        control = run.sizing.spec.controller
        capex = _capex_usd(run)
        links = pd_part.get("busiest_links") or []
        goodput = s["goodput_requests_per_s"]
        rows.append({
            "point": run.point_index, **run.params, "system": run.system,
            "hardware": hardware_label(run.sizing), "cards": run.sizing.cards, "p_d_cards": _ratio(run),
            "controller": "-" if control is None else (control.kind if control.kind == "static"
                                                        else f"{control.kind} on {control.signal}"),
            "goodput_rps": goodput, "goodput_per_card_rps": goodput / run.sizing.cards,
            "goodput_per_musd_rps": goodput / (capex / 1e6) if capex else math.nan,
            "output_tokens_per_s": s["output_tokens_per_s"],
            "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
            "tpot_p50_s": s["tpot_s"]["p50"], "tpot_p99_s": s["tpot_s"]["p99"],
            "handoff_mb_per_request": pd_part.get("handoff_bytes_per_request_mean", 0.0) / 1e6,
            "handoff_gbps": pd_part.get("handoff_Bps", 0.0) / 1e9,
            "busiest_link": f"{links[0]['link']} ({links[0]['utilization_mean']:.0%})" if links else "-",
            "switches": pd_part.get("switches", 0),
            **_phase_attainment(run, spec),
            "slo_met": bool(s["slo_met"]) and all(s["slo_met"].values()),
            "flag": _flags(run),
        })
    return pd.DataFrame(rows)


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def pd_markdown(result: RunResult, frame: pd.DataFrame | None = None) -> str:
    """Markdown: a table per sweep point, one row per system; flagged goodputs are marked."""
    frame = pd_frame(result) if frame is None else frame
    spec = result.scenario.spec
    slo = ", ".join(f"{k} <= {v:g} s" for k, v in (("TTFT p99", spec.slo.ttft_p99), ("TPOT p99", spec.slo.tpot_p99),
                                                    ("E2E p99", spec.slo.e2e_p99)) if v is not None)
    lines = [f"# P:D study: {md(result.scenario.name)}", "",
             f"Window: arrivals in {result.window_phrase()}; seed {result.seed}; "
             f"the run drains after it. SLO: {slo}. Goodput counts requests completed in the window that met "
             "every SLO threshold. P:D is prefill:decode cards at the start. Per M$ divides by the catalog "
             "capex of the servers, where every server of the system has a price (else '-'). A goodput marked "
             "with flags is not a steady-state number: 'unstable', the backlog grew through the window (arrivals "
             "outpace service); 'too_short', too few completions per instance or a median latency above a tenth "
             "of the window; 'warmup_short', MSER-5 finds a longer warm-up (see docs/statistics.md).", ""]
    header = ["system", "hardware", "P:D cards", "controller", "goodput (req/s)", "per card", "per M$",
              "output tok/s", "TTFT p50 (s)", "TTFT p99 (s)", "TPOT p50 (ms)", "TPOT p99 (ms)",
              "handoff MB/req", "handoff GB/s", "busiest link", "switches", "SLO met"]
    phase_columns = [c for c in frame.columns if c.startswith("slo_attainment_phase")]
    header += [f"SLO met, phase {c.removeprefix('slo_attainment_phase')}" for c in phase_columns]
    if phase_columns:
        lines[2:2] = ["The workload shifts in phases; 'SLO met, phase k' is the share of the requests "
                      "arriving in phase k (inside the window) that met every SLO threshold.", ""]
    params = list(result.runs[0].params) if result.runs else []
    for _, rows in frame.groupby("point", sort=True):
        label = ", ".join(f"{k} = {rows.iloc[0][k]}" for k in params)
        lines += [f"## {md(label)}" if label else "## run", "", "| " + " | ".join(header) + " |",
                  "|" + "---|" * len(header)]
        for _, r in rows.iterrows():
            mark = FLAG_MARK if r.flag else ""  # every figure of a flagged row, not only its goodput
            goodput = _fmt(r.goodput_rps) + mark + (f" ({r.flag})" if r.flag else "")
            figures = [_fmt(r.goodput_per_card_rps), _fmt(r.goodput_per_musd_rps), _fmt(r.output_tokens_per_s),
                       _fmt(r.ttft_p50_s), _fmt(r.ttft_p99_s),
                       _fmt(r.tpot_p50_s * 1e3 if r.tpot_p50_s is not None else math.nan),
                       _fmt(r.tpot_p99_s * 1e3 if r.tpot_p99_s is not None else math.nan),
                       _fmt(r.handoff_mb_per_request), _fmt(r.handoff_gbps)]
            # names from the scenario (systems, cards, nodes, links) escaped for Markdown
            named = [md(text, cell=True) for text in (r.system, r.hardware, r.p_d_cards, r.controller)]
            cells = (named + [goodput] + [f + mark for f in figures]
                     + [md(r.busiest_link, cell=True), str(r.switches), "yes" if r.slo_met else "no"]
                     + [f"{r[c]:.0%}{mark}" for c in phase_columns])
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    flags = {f for cell in frame.flag for f in cell.split(", ") if f}
    if flags:
        lines += [md(flag_note(flags)), ""]  # escaped: a literal mark, not a list item
    return "\n".join(lines)


@literal_figure_text
def pd_figures(result: RunResult, out_dir: str | Path, frame: pd.DataFrame | None = None) -> list[Path]:
    """``pd_goodput.png`` (a heat-map of goodput per card by system -- its P:D split -- and swept
    load; flagged cells hatched and starred) and, when the study names systems for it,
    ``pd_timeline.png`` (P and D instances, prefill queue and SLO attainment over time)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    study = result.scenario.spec.study
    frame = pd_frame(result) if frame is None else frame
    out = Path(out_dir)
    written = []
    x = study.x
    if x is not None and x in frame.columns:
        fig = goodput_heatmap(frame, x, result.scenario.name, plt)
        path = out / "pd_goodput.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    if study.timeline:
        written.append(_timeline(result, out / "pd_timeline.png", study.timeline, study.timeline_point, plt))
    return written


def goodput_heatmap(frame: pd.DataFrame, x: str, name: str, plt) -> Any:
    """A figure: one row per system (labelled with its P:D cards), one column per value of the
    swept ``x``, each cell coloured and written with the goodput per card (requests/s within the
    SLO); a flagged cell (not a steady-state number) is hatched and its value starred. Lines of
    seven systems that coincide at one load and at zero at the others read as one; cells do not."""
    from matplotlib.colors import Normalize
    from matplotlib.patches import Patch, Rectangle

    systems = list(dict.fromkeys(frame.system))
    loads = sorted(dict.fromkeys(frame[x]), key=_number)
    split = dict(zip(frame.system, frame.p_d_cards))
    values = np.full((len(systems), len(loads)), np.nan)
    flagged = np.zeros((len(systems), len(loads)), dtype=bool)
    for system, load, goodput, flag in zip(frame.system, frame[x], frame.goodput_per_card_rps, frame.flag):
        i, j = systems.index(system), loads.index(load)
        values[i, j] = goodput
        flagged[i, j] = bool(flag)
    top = np.nanmax(values) if np.isfinite(values).any() and np.nanmax(values) > 0 else 1.0
    norm, cmap = Normalize(0.0, top), plt.get_cmap("viridis")
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(loads) + 3.6), 0.42 * len(systems) + 2.1))
    image = ax.imshow(values, cmap=cmap, norm=norm, aspect="auto")
    for i in range(len(systems)):
        for j in range(len(loads)):
            value = values[i, j]
            if not np.isfinite(value):
                continue
            red, green, blue, _ = cmap(norm(value))
            ink = "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"
            # on a hatched cell the number sits on a patch of the cell's own colour, clear of the hatching
            ax.text(j, i, f"{value:.3g}" + ("*" if flagged[i, j] else ""), ha="center", va="center", fontsize=8,
                    color=ink, zorder=4, bbox=dict(boxstyle="square,pad=0.2", facecolor=(red, green, blue),
                                                   edgecolor="none") if flagged[i, j] else None)
            if flagged[i, j]:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="0.6",
                                       linewidth=0))
    ax.set_xticks(range(len(loads)), [str(v) for v in loads])
    ax.set_yticks(range(len(systems)), [f"{s} ({split[s]})" for s in systems], fontsize=8)
    ax.set_xlabel(f"{x.split('.')[-1]} (requests/s offered)")
    ax.set_ylabel("system (prefill:decode cards)")
    ax.set_title(name, fontsize=10)
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    bar.set_label("goodput per card\n(requests/s within SLO)", fontsize=8)
    from kvsim.report.legend import legend_below

    legend_below(fig, [Patch(facecolor="white", edgecolor="0.6", hatch="///",
                             label="hatched, *: flagged, not a steady-state number (see the table)")]
                 if flagged.any() else [])
    return fig


def _number(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    return float(str(value).split("/")[0])


def _timeline(result: RunResult, path: Path, systems: list[str], point: int, plt) -> Path:
    decisions = result.decisions_frame()
    spec = result.scenario.spec
    panels = [("prefill", "prefill instances\nserving"), ("signal_prefill_queue", "prefill queue\n(tokens / instance)"),
              ("signal_decode_kv_occupancy", "decode KV\noccupancy"), ("signal_ttft_attainment", "TTFT attainment"),
              ("signal_tpot_attainment", "TPOT attainment")]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9.5, 10), sharex=True)
    labelled = False
    # no controller decided within the run (shorter than its interval): empty panels
    for system in [] if decisions.empty else systems:
        rows = decisions[(decisions.system == system) & (decisions.point == point)]
        for ax, (column, _) in zip(axes, panels):
            if column not in rows:  # a signal no controller of this run reads
                continue
            ax.plot(rows.time_s, rows[column], label=system, linewidth=1.2, drawstyle="steps-post"
                    if column == "prefill" else "default")
            labelled = labelled or ax is axes[0]
    for ax, (column, label) in zip(axes, panels):
        ax.set_ylabel(label, fontsize=9)
        ax.grid(alpha=0.3)
        if column.endswith(("attainment", "occupancy")):
            ax.set_ylim(-0.05, 1.05)  # shares: a flat line at 1 must not be zoomed into noise
        elif column == "signal_prefill_queue":  # 2M, not 2 under a "1e6" above the axis
            from matplotlib.ticker import EngFormatter

            ax.yaxis.set_major_formatter(EngFormatter(sep=""))
    boundary = 0.0
    arrival = spec.workload.arrival
    for phase in getattr(arrival, "phases", [])[:-1]:
        boundary += phase.duration
        for ax in axes:
            ax.axvline(boundary, color="grey", linestyle=":", linewidth=1)
    if labelled:  # no system drawn (no decisions; phase lines have no label): no legend, no matplotlib warning
        axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    phased = bool(getattr(arrival, "phases", None))
    axes[-1].set_xlabel("simulated time (s)" + ("; dotted: workload phase change" if phased else ""))
    axes[-1].set_xlim(0, spec.duration)  # the arrivals; the run then drains
    params = next((r.params for r in result.runs if r.point_index == point), {})
    where = ", ".join(f"{k.split('.')[-1]} = {v}" for k, v in params.items())
    axes[0].set_title(f"{result.scenario.name}: P:D ratio over time" + (f" ({where})" if where else ""), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
