"""Figures of a run report (PNG, matplotlib's Agg backend, and the same drawing as SVG for the HTML
page, with hover values and legend toggles: :mod:`kvsim.report.interactive`): throughput and
latency against the swept load with the SLO line and each system's saturation point, TTFT/TPOT
distributions, cache hit rates per tier, cost per million tokens. Flagged points (not steady
state) are drawn hollow or hatched, and each figure's legend says so; :func:`load_series` is the
data that decides it."""

from __future__ import annotations

from typing import Any

from kvsim.escape import literal_figure_text, plain_log_ticks
from kvsim.report.document import Figure
from kvsim.report.interactive import Tags, render
from kvsim.report.legend import legend_below
from kvsim.report.run_data import LoadAxis, Row, metric, saturation

__all__ = ["load_series", "figure_throughput", "figure_latency", "figure_cdf", "figure_hit_rates", "figure_cost",
           "slo_limits_s"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def slo_limits_s(scenario: dict[str, Any]) -> dict[str, float]:
    """The SLO thresholds of the resolved scenario (``ttft_p99`` -> seconds), those that are set."""
    from kvsim.units import UnitError, parse_quantity

    out = {}
    for key, value in (scenario.get("slo") or {}).items():
        if value is None:
            continue
        try:
            out[key] = parse_quantity(value, "time")
        except (UnitError, TypeError, ValueError):
            continue
    return out


def load_series(all_rows: list[Row], name: str) -> dict[tuple[str, str], list[tuple[float, float, bool]]]:
    """Per (system, group of the other swept fields): ``(load, value, hollow)`` in increasing load,
    ``hollow`` when the point is flagged (not steady state). Points without the metric are left out."""
    out: dict[tuple[str, str], list[tuple[float, float, bool]]] = {}
    for row in all_rows:
        value = metric(row.summary, name)
        if row.load is None or value is None:
            continue
        out.setdefault((row.system, row.group), []).append((row.load, value, bool(row.flags)))
    return {key: sorted(points) for key, points in out.items()}


def _saturations(all_rows: list[Row]) -> dict[tuple[str, str], Row]:
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in all_rows:
        groups.setdefault((row.system, row.group), []).append(row)
    return {key: sat for key, series in groups.items() if (sat := saturation(series)) is not None}


def _label(system: str, group: str) -> str:
    return f"{system} ({group})" if group else system


def _draw(ax: Any, all_rows: list[Row], name: str, axis: LoadAxis, ylabel: str, tags: Tags,
          scale: float = 1.0) -> tuple[bool, bool]:
    """One line per (system, group) with a marker per point; returns whether any point is hollow
    (flagged) and whether any saturation line is drawn, for the legend's key to them."""
    series = load_series(all_rows, name)
    colors = {key: f"C{k % 10}" for k, key in enumerate(series)}
    saturated = _saturations(all_rows)
    any_hollow = False
    for key, points in series.items():
        color, label = colors[key], _label(*key)
        line, = ax.plot([p[0] for p in points], [p[1] * scale for p in points], color=color, lw=1.2, label=label)
        tags.series(line, label, label)
        for x, y, hollow in points:
            marker = ax.scatter([x], [y * scale], s=36, zorder=3, edgecolors=color, linewidths=1.4,
                                facecolors="none" if hollow else color)
            tags.point(marker, label, f"{label}\n{axis.label}: {x:g}\n{ylabel}: {y * scale:.3g}"
                       + ("\nflagged: not steady state" if hollow else ""))
            any_hollow = any_hollow or hollow
        if key in saturated:
            mark = ax.axvline(saturated[key].load, color=color, ls=":", lw=1.2)
            tags.series(mark, label, f"{label} saturates at {axis.label} {saturated[key].load:g}")
    return any_hollow, bool(saturated)


def _key_handles(hollow: bool, saturated: bool) -> list[Any]:
    """Legend entries that explain the marks in the figure itself: hollow markers, dotted lines."""
    from matplotlib.lines import Line2D

    handles = []
    if hollow:
        handles.append(Line2D([], [], marker="o", ls="none", color="gray", markerfacecolor="none",
                              label="hollow: flagged, not steady state"))
    if saturated:
        handles.append(Line2D([], [], ls=":", color="gray", label="dotted: saturation point"))
    return handles


def _load_figure(all_rows: list[Row], axis: LoadAxis, panels: list[tuple[str, str, float, float | None]],
                 name: str, caption: str, log: bool) -> Figure:
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.0 * len(panels), 3.9), dpi=110, squeeze=False)
    tags = Tags()
    any_hollow = any_saturated = False
    for ax, (key, ylabel, scale, limit) in zip(axes[0], panels):
        hollow, saturated = _draw(ax, all_rows, key, axis, ylabel, tags, scale)
        any_hollow, any_saturated = any_hollow or hollow, any_saturated or saturated
        if limit is not None:
            ax.axhline(limit * scale, color="black", ls="--", lw=1, label="dashed: SLO")
        if key == "goodput_requests_per_s" and axis.kind == "rate":
            loads = sorted({r.load for r in all_rows if r.load is not None})
            ax.plot(loads, loads, color="gray", lw=0.8, ls="-.", label="dash-dot: offered load")
        if log:
            ax.set_yscale("log")
            plain_log_ticks(ax.yaxis)
        ax.set_xlabel(axis.label)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
    # one legend for the panels, below them: the same systems in each, and no panel's lines under it
    entries: dict[str, Any] = {}
    for ax in axes[0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    tags.legend(legend_below(fig, list(entries.values()) + _key_handles(any_hollow, any_saturated)))
    png, svg = render(fig, name, tags)
    return Figure(name, png, caption, svg)


_MARKS = ("hollow markers: points flagged as not steady state; dotted vertical line: the system's "
          "saturation point (the first load flagged unstable or missing the SLO)")


@literal_figure_text
def figure_throughput(all_rows: list[Row], axis: LoadAxis, stem: str) -> Figure:
    return _load_figure(all_rows, axis, [("total_tokens_per_s", "tokens processed in the window (tokens/s)", 1.0, None),
                                         ("goodput_requests_per_s", "goodput (requests/s within the SLO)", 1.0, None)],
                        f"{stem}_throughput.png", f"Throughput against load; {_MARKS}", log=False)


@literal_figure_text
def figure_latency(all_rows: list[Row], axis: LoadAxis, limits: dict[str, float], stem: str) -> Figure:
    return _load_figure(all_rows, axis, [("ttft_s_p99", "TTFT p99 (s)", 1.0, limits.get("ttft_p99")),
                                         ("tpot_s_p99", "TPOT p99 (ms)", 1e3, limits.get("tpot_p99"))],
                        f"{stem}_latency.png", f"Tail latency against load; dashed: the SLO; {_MARKS}", log=True)


@literal_figure_text
def figure_cdf(frame: Any, systems: list[str], labels: dict[int, str], window: tuple[float, float],
               limits: dict[str, float], stem: str,
               windows: dict[tuple[str, int], tuple[float, float]] | None = None) -> Figure | None:
    """TTFT and TPOT distributions of the requests that arrived in the window (of replica 0 when
    the run has replications), one line per system and sweep point (lighter: earlier points).
    ``labels`` maps a point index to its label; ``windows`` gives a (system, point) its own
    window, seconds (``warmup: auto`` finds one per run), else ``window`` applies."""
    import numpy as np

    if frame is None or not len(frame) or "ttft_s" not in frame:
        return None
    measured = frame
    if "replica" in measured:  # replica 0: the run the summary's numbers are of
        measured = measured[measured["replica"] == 0]
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.0), dpi=110)
    # one legend entry per line while that stays readable; else one per system (its darkest line)
    points = sorted(labels)
    every = len(points) * len(systems) <= 16
    drawn = False
    tags = Tags()
    for (column, title, scale, limit), ax in zip((("ttft_s", "TTFT (s)", 1.0, limits.get("ttft_p99")),
                                                  ("tpot_s", "TPOT (ms)", 1e3, limits.get("tpot_p99"))), axes):
        for k, system in enumerate(systems):
            for j, point in enumerate(points):
                start_s, end_s = (windows or {}).get((system, point), window)
                rows = measured[(measured["system"] == system) & (measured["point"] == point)
                                & (measured["arrival_s"] >= start_s) & (measured["arrival_s"] < end_s)]
                values = np.sort(rows[column].to_numpy(dtype=float))
                values = values[np.isfinite(values)] * scale
                if not len(values):
                    continue
                alpha = 1.0 if len(points) == 1 else 0.35 + 0.65 * j / (len(points) - 1)
                label = system if len(points) == 1 else (f"{system}, {labels[point]}" if every else
                                                         (f"{system} (darkest: {labels[point]})"
                                                          if j == len(points) - 1 else None))
                xs, shares = _cdf_steps(values)
                line, = ax.step(xs, shares, where="post", color=f"C{k % 10}", alpha=alpha, lw=1.1, label=label)
                # toggled with its system's legend entry (one per line, or one per system)
                key = label if every or len(points) == 1 else f"{system} (darkest: {labels[points[-1]]})"
                p50, p99 = np.quantile(values, [0.5, 0.99])
                tags.series(line, key, f"{system}, {labels.get(point, '')}: {title} p50 {p50:.3g}, p99 {p99:.3g} "
                                       f"({len(values)} requests)")
                drawn = True
        if limit is not None:
            ax.axvline(limit * scale, color="black", ls="--", lw=1, label="SLO (p99)")
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
        ax.set_xlabel(title)
        ax.set_ylabel("share of requests")
        ax.grid(alpha=0.3, which="both")
    if not drawn:
        plt.close(fig)
        return None
    handles, names = axes[0].get_legend_handles_labels()
    legend = fig.legend(handles, names, loc="center right", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    tags.legend(legend)
    # the panels take what the legend (its longest name) leaves; the figure widens for a long one
    fig.canvas.draw()
    width_in = legend.get_window_extent().width / fig.dpi + 0.1
    fig.set_figwidth(max(fig.get_figwidth(), 8.8 + width_in))
    fig.tight_layout(rect=(0, 0, 1 - width_in / fig.get_figwidth(), 1))
    png, svg = render(fig, f"{stem}_cdf.png", tags)
    return Figure(f"{stem}_cdf.png", png, "Distribution of TTFT and TPOT over the requests that arrived in "
                  "the measurement window (lighter lines: lower loads; requests without a first token left out)", svg)


def _cdf_steps(values: Any, most: int = 300) -> tuple[Any, Any]:
    """The steps of the empirical CDF of sorted ``values``: every value where there are at most
    ``most``, else ``most`` evenly spaced ranks (the first and last kept) -- the same curve to the
    eye, and an SVG of a few kilobytes where a run has a hundred thousand requests."""
    import numpy as np

    n = len(values)
    ranks = np.arange(n) if n <= most else np.unique(np.linspace(0, n - 1, most).round().astype(int))
    return values[ranks], (ranks + 1) / n


def _bars(ax: Any, labels: list[str], values: list[list[float]], names: list[str], hatched: list[bool],
          stacked: bool, tags: Tags, unit: str) -> None:
    import numpy as np

    x = np.arange(len(labels))
    width = 0.8 if stacked else 0.8 / max(1, len(names))
    bottom = np.zeros(len(labels))
    for k, name in enumerate(names):
        heights = np.array([v[k] for v in values])
        offset = 0 if stacked else (k - (len(names) - 1) / 2) * width
        bars = ax.bar(x + offset, heights, width, bottom=bottom if stacked else None, color=f"C{k % 10}")
        for bar, hatch, label, height in zip(bars, hatched, labels, heights):
            if hatch:
                bar.set_hatch("///")
                bar.set_edgecolor("white")
            tags.point(bar, name, f"{label}: {name} {unit.format(height)}"
                       + ("\nflagged: not steady state" if hatch else ""))
        if stacked:
            bottom = bottom + heights
    from matplotlib.patches import Patch

    # legend from plain patches: a bar's own patch would carry its hatch
    handles = [Patch(facecolor=f"C{k % 10}", label=name) for k, name in enumerate(names)]
    if any(hatched):
        handles.append(Patch(facecolor="lightgray", hatch="///", edgecolor="white",
                             label="hatched: flagged, not steady state"))
    tags.legend(ax.legend(handles=handles, fontsize=8))
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center",
                       fontsize=8)
    ax.grid(alpha=0.3, axis="y")


def _row_label(row: Row, many_points: bool) -> str:
    if not many_points:
        return row.system
    params = ", ".join(str(v) for v in row.params.values())
    return f"{row.system} @ {params}" if params else row.system


@literal_figure_text
def figure_hit_rates(all_rows: list[Row], tiers: list[str], stem: str) -> Figure | None:
    """Stacked bars: the share of prompt tokens served from each tier, per system and point."""
    cached = [r for r in all_rows if isinstance(r.summary.get("cache"), dict)]
    if not cached or not tiers:
        return None
    many = len({r.point for r in all_rows}) > 1
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(cached) + 3), 3.9), dpi=110)
    values = [[metric(r.summary, f"cache.hit_rate.{t}") or 0.0 for t in tiers] for r in cached]
    tags = Tags()
    _bars(ax, [_row_label(r, many) for r in cached], values, tiers, [bool(r.flags) for r in cached], stacked=True,
          tags=tags, unit="{:.1%} of prompt tokens")
    ax.set_ylabel("prompt tokens served from cache (share)")
    ax.set_ylim(0, 1)
    fig.tight_layout()
    png, svg = render(fig, f"{stem}_hit_rates.png", tags)
    return Figure(f"{stem}_hit_rates.png", png, "Cache hit rate by tier (share of prompt tokens), per system "
                  "and point; hatched: points flagged as not steady state", svg)


@literal_figure_text
def figure_cost(all_rows: list[Row], stem: str) -> Figure | None:
    """Bars: USD per million output and per million prompt tokens, per system and point."""
    keys = [("cost.usd_per_million_output_tokens", "per million output tokens"),
            ("cost.usd_per_million_prompt_tokens", "per million prompt tokens")]
    priced = [r for r in all_rows if any(metric(r.summary, k) is not None for k, _ in keys)]
    if not priced:
        return None
    many = len({r.point for r in all_rows}) > 1
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.7 * len(priced) + 3), 3.9), dpi=110)
    values = [[metric(r.summary, k) or 0.0 for k, _ in keys] for r in priced]
    tags = Tags()
    _bars(ax, [_row_label(r, many) for r in priced], values, [n for _, n in keys], [bool(r.flags) for r in priced],
          stacked=False, tags=tags, unit="USD {:.3g}")
    ax.set_ylabel("USD")
    fig.tight_layout()
    png, svg = render(fig, f"{stem}_cost.png", tags)
    return Figure(f"{stem}_cost.png", png, "Cost per million tokens at the load served (the whole system's "
                  "hourly cost charged to each stream; docs/cost.md); hatched: points flagged as not steady state, "
                  "where the figure is not a capacity cost", svg)
