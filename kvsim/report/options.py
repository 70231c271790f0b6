"""The options study: systems that differ in one design choice, compared on the same workload.

For every value of ``study.x`` (e.g. the shared context's length) and every system (an option,
e.g. a way to share KV), over the loads of ``study.load`` (e.g. closed-loop clients):

- TTFT p50 and p99 at the lightest load, and the TTFT speed-up over the reference system
  (reference TTFT p50 / the option's);
- the token hit rate and the peak KV bytes held in HBM at that load (physical bytes: a block
  shared by many readers counts once);
- where the system has addressing domains (``kv_cache.peer_hbm``): logical / physical HBM bytes
  (the dedup ratio) and the bytes that crossed a domain boundary;
- capacity: the largest load whose p99 TTFT and TPOT met the scenario's SLO, with a flag when
  the swept loads do not bracket it ("≥" every load met it, "<" none did).

A figure read from a point flagged as not steady state (``summary["flags"]``, see
:mod:`kvsim.metrics.steady_state`) is marked in the table and drawn hollow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from kvsim.escape import literal_figure_text, plain_log_ticks
from kvsim.escape import markdown_text as md
from kvsim.report.table import FLAG_MARK, flag_note
from kvsim.sim.result import RunResult

__all__ = ["options_frame", "options_markdown", "options_figure"]


def _number(value: Any) -> Any:
    """A swept value as a number: ``"8/s"`` is a rate (8.0 per second), ``32`` stays 32."""
    if isinstance(value, str):
        from kvsim.units import UnitError, parse_quantity

        try:
            return parse_quantity(value, "rate")
        except UnitError:
            return float(value)
    return value


def _met(summary: dict[str, Any]) -> bool:
    met = summary.get("slo_met") or {}
    return bool(met) and all(met.values())


def _domains(summary: dict[str, Any]) -> tuple[float | None, float | None]:
    domains = (summary.get("cache") or {}).get("domains")
    if not domains:
        return None, None
    return domains.get("dedup_ratio"), domains.get("cross_domain_bytes")


def options_frame(result: RunResult) -> pd.DataFrame:
    """One row per (``x`` value, system)."""
    study = result.scenario.spec.study
    systems = list(result.scenario.spec.systems)
    reference = study.reference or systems[0]
    cells: dict[tuple[Any, str], list[tuple[Any, dict]]] = {}
    for point in result.points():
        for system in systems:
            run = result.run(system, point)
            x = _number(run.params.get(study.x)) if study.x else None
            load = _number(run.params.get(study.load)) if study.load else None
            cells.setdefault((x, system), []).append((load, run.summary))
    rows = []
    xs = list(dict.fromkeys(x for x, _ in cells))
    for x in xs:
        light_ref = min(cells[(x, reference)], key=lambda c: (c[0] is None, c[0]))[1]
        for system in systems:
            points = sorted(cells[(x, system)], key=lambda c: (c[0] is None, c[0]))
            load0, light = points[0]
            met = [load for load, summary in points if _met(summary)]
            capacity = max(met) if met and study.load else None
            if not study.load:
                capacity_flag = ""
            elif capacity is None:
                capacity_flag = "<"
            elif capacity == points[-1][0]:
                capacity_flag = ">="
            else:
                capacity_flag = ""
            dedup, cross = _domains(light)
            ttft = light["ttft_s"]["p50"]
            ref_ttft = light_ref["ttft_s"]["p50"]
            rows.append({
                "x": x, "system": system, "light_load": load0,
                "ttft_p50_s": ttft, "ttft_p99_s": light["ttft_s"]["p99"],
                "ttft_speedup": ref_ttft / ttft if ttft and ref_ttft else None,
                "hit_rate": ((light.get("cache") or {}).get("hit_rate") or {}).get("total", 0.0),
                "kv_peak_GB": light.get("kv_bytes_peak", 0.0) / 1e9,
                "dedup_ratio": dedup, "cross_domain_GB": cross / 1e9 if cross is not None else None,
                "goodput_at_capacity": next((s["goodput_requests_per_s"] for load, s in points if load == capacity),
                                            None),
                "capacity": capacity, "capacity_flag": capacity_flag,
                "light_flags": ", ".join(light.get("flags") or []),
                "capacity_flags": ", ".join(next((s.get("flags") or [] for load, s in points if load == capacity),
                                                 [])),
            })
    return pd.DataFrame(rows)


def _fmt(value: Any, digits: str = ".3g") -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:{digits}}"
    return str(value)


def options_markdown(result: RunResult, frame: pd.DataFrame | None = None) -> str:
    """Markdown: one table per ``x`` value, one row per system."""
    study = result.scenario.spec.study
    spec = result.scenario.spec
    frame = options_frame(result) if frame is None else frame
    systems = list(spec.systems)
    reference = study.reference or systems[0]
    slo = ", ".join(([f"p99 TTFT <= {spec.slo.ttft_p99:g} s"] if spec.slo.ttft_p99 is not None else [])
                    + ([f"p99 TPOT <= {1e3 * spec.slo.tpot_p99:g} ms"] if spec.slo.tpot_p99 is not None else [])
                    ) or "none given"  # a scenario without slo: is valid; every request then meets it
    load_name = (study.load or "load").split(".")[-1]
    lines = [f"# Options study: {md(result.scenario.name)}", "",
             f"Seed {result.seed}; measured over {result.window_phrase()}. "
             f"TTFT, hit rate and peak KV bytes at the lightest {md(load_name)} swept; speed-up = {md(reference)}'s "
             f"TTFT p50 / the system's. Capacity = the most {md(load_name)} whose requests met the SLO ({slo}); "
             "'>=' means every swept load met it (capacity is at least that), '<' that none did. Peak KV "
             "counts physical bytes in HBM (a block read by many counts once); dedup = logical / physical "
             "HBM bytes, and cross-domain the KV bytes copied between addressing domains, where the system "
             "has them.", ""]
    header = ["system", "TTFT p50 (s)", "TTFT p99 (s)", "speed-up", "hit rate", "peak KV (GB)", "dedup",
              "cross-domain (GB)", f"capacity ({md(load_name, cell=True)})", "goodput at capacity (req/s)"]
    x_name = study.x_label or (study.x or "").split(".")[-1]
    for x, rows in frame.groupby("x", sort=False, dropna=False):
        lines += [f"## {md(f'{x_name} = {x}')}" if study.x else "## all", "",
                  "| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        for _, r in rows.iterrows():
            capacity = "-" if r.capacity is None or r.capacity != r.capacity else f"{r.capacity_flag}{r.capacity:g}"
            if r.capacity_flag == "<":
                capacity = f"< {rows.light_load.iloc[0]:g}"
            light = FLAG_MARK if r.light_flags else ""
            at_capacity = FLAG_MARK if r.capacity_flags else ""
            lines.append("| " + " | ".join([
                md(r.system, cell=True), _fmt(r.ttft_p50_s) + light, _fmt(r.ttft_p99_s) + light,
                _fmt(r.ttft_speedup, ".2f") + ("x" if r.ttft_speedup is not None else "") + light,
                f"{100 * r.hit_rate:.1f} %{light}", _fmt(r.kv_peak_GB) + light, _fmt(r.dedup_ratio, ".2f") + light,
                _fmt(r.cross_domain_GB) + light, capacity + at_capacity,
                _fmt(r.goodput_at_capacity) + at_capacity]) + " |")
        lines.append("")
    flags = {f for column in ("light_flags", "capacity_flags") for cell in frame[column] for f in cell.split(", ") if f}
    if flags:
        lines += [md(flag_note(flags)), ""]  # escaped: a literal mark, not a list item
    return "\n".join(lines)


@literal_figure_text
def options_figure(result: RunResult, path: str | Path, frame: pd.DataFrame | None = None) -> Path:
    """PNG: TTFT speed-up, peak KV bytes and capacity against ``study.x``, one line per system."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    study = result.scenario.spec.study
    frame = options_frame(result) if frame is None else frame
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 3.8))
    third = (("capacity", f"capacity ({study.load.split('.')[-1]} within SLO)") if study.load
             else ("cross_domain_GB", "KV copied across domains (GB)"))
    panels = (("ttft_speedup", "TTFT p50 speed-up"), ("kv_peak_GB", "peak KV in HBM (GB)"), third)
    if study.x is None:
        _bars(axes, frame, panels)
    else:
        _lines(axes, frame, panels, study)
    fig.suptitle(result.scenario.name, fontsize=10)
    handles = []
    if study.x is not None:  # one legend below the panels, with what hollow markers mean
        from matplotlib.lines import Line2D

        handles = axes[0].get_legend_handles_labels()[0]
        if frame.light_flags.astype(bool).any() or frame.capacity_flags.astype(bool).any():
            handles.append(Line2D([], [], marker="o", ls="none", color="gray", markerfacecolor="none",
                                  label="hollow: flagged, not steady state (see the table)"))
    from kvsim.report.legend import legend_below

    legend_below(fig, handles)
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _bars(axes, frame: pd.DataFrame, panels) -> None:
    """One value per system (no swept ``x``): a bar each."""
    names = frame.system.tolist()
    for ax, (column, label) in zip(axes, panels):
        ys = [0.0 if v is None or v != v else float(v) for v in frame[column].tolist()]
        bars = ax.bar(names, ys, color=[f"C{k}" for k in range(len(names))])
        flagged = frame.capacity_flags if column == "capacity" else frame.light_flags
        for bar, flag in zip(bars, flagged):
            if flag:  # not a steady-state number: hatched, like a hollow point
                bar.set_hatch("//")
                bar.set_alpha(0.5)
        if column == "capacity":
            for bar, flag in zip(bars, frame.capacity_flag):
                ax.annotate(flag or "", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
        ax.set_ylabel(label)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(alpha=0.3, axis="y")


def _lines(axes, frame: pd.DataFrame, panels, study) -> None:
    """One line per system against the swept ``x``."""
    x_name = study.x_label or (study.x or "").split(".")[-1]
    styles = [("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-")]
    for ax, (column, label) in zip(axes, panels):
        top, positive, finite = 0.0, False, False
        for k, (system, rows) in enumerate(frame.groupby("system", sort=False)):
            marker, line = styles[k % len(styles)]
            ys = [float("nan") if v is None else float(v) for v in rows[column].tolist()]
            top = max([top] + [y for y in ys if y == y])
            positive = positive or any(y > 0 for y in ys if y == y)
            finite = finite or any(y == y for y in ys)
            ax.plot(rows.x.tolist(), ys, marker="", linestyle=line, label=system, alpha=0.85)
            color = ax.lines[-1].get_color()
            flagged = rows.capacity_flags if column == "capacity" else rows.light_flags
            for xv, yv, flag in zip(rows.x.tolist(), ys, flagged.tolist()):
                ax.plot([xv], [yv], marker=marker, color=color, markerfacecolor="none" if flag else color, alpha=0.85)
            if column == "capacity":  # a system that met the SLO at no swept load: an x on the axis
                below = [x for x, flag in zip(rows.x, rows.capacity_flag) if flag == "<"]
                ax.plot(below, [0.0] * len(below), marker="x", linestyle="none", color=ax.lines[-1].get_color(),
                        markersize=9)
                for x, y, flag in zip(rows.x, ys, rows.capacity_flag):
                    if flag == ">=" and y == y:
                        ax.annotate(">=", (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
        if column == "ttft_speedup" and positive:  # no request finished at any point: no log axis
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis, suffix="x")
        else:
            top = top if top > 0 else 1.0
            ax.set_ylim(-0.06 * top if column == "capacity" else 0.0, top * 1.15)
        # a panel with no value drawn (no request finished) has no data for a log axis to scale
        if study.x and finite and frame.x.notna().all() and min(frame.x) > 0:
            ax.set_xscale("log", base=2)
            ticks = sorted(set(frame.x))
            ax.set_xticks(ticks, [f"{t / 1024:g}K" if t >= 1024 else f"{t:g}" for t in ticks])
        ax.set_xlabel(x_name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if study.load:
        axes[2].set_title("x: no swept load met the SLO; >=: every one did", fontsize=8)
