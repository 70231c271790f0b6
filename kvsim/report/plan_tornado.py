"""The "What the answer hinges on" section of a plan's report: a table per target of the assumed
figures varied (:mod:`kvsim.plan.sensitivity`), who is cheapest at each end of each range and where
the answer flips, and a tornado chart of the winner's cost over the runner-up's. It reads
``plan.json``'s ``sensitivity`` only; nothing is re-run."""

from __future__ import annotations

from typing import Any

from kvsim.escape import literal_figure_text
from kvsim.report.document import Document, Figure
from kvsim.report.interactive import Tags, render

__all__ = ["sensitivity_section", "hinge_sentence", "figure_value"]

YEAR_S = 8760.0 * 3600.0


def figure_value(value: float | None, dimension: str | None) -> str:
    """A figure's value as the report writes it: ``$104,400``, ``1.6 kW``, ``4 years``, ``0.6``."""
    from kvsim.units import format_quantity

    if value is None:
        return "-"
    if dimension == "usd":
        return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"
    if dimension == "years":
        return f"{value / YEAR_S:.3g} years"
    if dimension in ("power", "bandwidth", "time"):
        return format_quantity(value, dimension)
    return f"{value:.3g}"


def _figures(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["field"]: f for f in (answer.get("sensitivity") or {}).get("figures") or ()}


def _verdict(row: dict[str, Any], figure: dict[str, Any]) -> str:
    """Where the answer flips, in words, or that it holds over the whole range."""
    def fmt(x: float) -> str:
        return figure_value(x, figure.get("dimension"))

    if row.get("flips_between"):
        parts = [f"flips to {row['cheapest_low' if lo == figure['low'] else 'cheapest_high']} between {fmt(lo)} "
                 f"and {fmt(hi)}" for lo, hi in row["flips_between"]]
        return "; ".join(parts) + " (re-planned at the ends only)"
    inside = [f for f in row.get("flips") or () if f["in_range"]]
    if inside:
        return "; ".join(f"flips to {f['to']} if it {'exceeds' if f['direction'] == 'above' else 'falls below'} "
                         f"{fmt(f['at'])}" for f in inside)
    outside = [f for f in row.get("flips") or () if f["at"] is not None]
    beyond = ", ".join(f"{f['to']} at {fmt(f['at'])}" for f in outside)
    return "holds over the whole range" + (f" (flips beyond it: {beyond})" if beyond else "")


def hinge_sentence(answer: dict[str, Any]) -> str | None:
    """One sentence for the answer: the figures whose range flips the cheapest candidate, per target,
    or that none does; None without a sensitivity section."""
    sens = answer.get("sensitivity")
    if not sens or not sens.get("targets"):
        return None
    figures = _figures(answer)
    unit = "clients" if (answer.get("load") or {}).get("unit") == "clients" else "/s"
    parts = []
    for target in sens["targets"]:
        load = f"{target['load']:g} clients" if unit == "clients" else f"{target['load']:.3g}/s"
        flipping = [f"{figures[r['field']]['label']} ({_verdict(r, figures[r['field']])})" for r in target["rows"]
                    if not r["holds"]]
        if flipping:
            parts.append(f"at {load}, {target['winner']} stays the cheapest unless: " + "; ".join(flipping))
        else:
            parts.append(f"at {load}, {target['winner']} stays the cheapest over every range tested "
                         f"({len(target['rows'])} figures)")
    return "What it hinges on (assumed figures varied over their ranges): " + "; ".join(parts) + "."


def sensitivity_section(doc: Document, answer: dict[str, Any], stem: str) -> None:
    """Append the section (heading, table, tornado) to ``doc``; nothing without sensitivity data."""
    sens = answer.get("sensitivity")
    if not sens:
        return
    doc.heading("What the answer hinges on")
    figures = _figures(answer)
    if not sens.get("targets"):
        doc.paragraph("No target has a priced cheapest candidate: nothing to test.")
        return
    physics = sum(1 for f in figures.values() if f["kind"] == "physics")
    doc.paragraph(
        f"Every figure the answer depends on that the catalog or the scenario marks as an assumption (or "
        f"unconfirmed) was varied over a range, one at a time, for the cheapest candidate and the runner-up "
        f"at each target ({len(figures)} figures, {physics} of them re-planned with "
        f"{len(sens.get('probes') or ())} probes). Cost figures (prices, power, the cost model's defaults) leave "
        f"the unit counts as they are: the cheapest at each end is over every candidate that serves the target "
        f"and the flip point is exact. Physics figures change capacities: the two are re-planned at each end, and "
        f"a flip lies between that end and the figure as planned. Ratio: the winner's cost per hour over the "
        f"runner-up's (below 1: the winner is cheaper).")
    for target in sens["targets"]:
        rows = []
        for row in target["rows"]:
            f = figures[row["field"]]

            def fmt(x: float, f: dict[str, Any] = f) -> str:
                return figure_value(x, f.get("dimension"))

            units = ""
            if row.get("units_low") is not None:
                units = " / ".join(f"{s}: {row['units_low'].get(s)}-{row['units_high'].get(s)}"
                                   for s in row["units_low"])
            rows.append([f["label"], f"{fmt(f['low'])} - {fmt(f['high'])} (as planned {fmt(f['base'])})",
                         f"{f['confidence']}; {f['range_note']}",
                         row["cheapest_low"] or "none", row["cheapest_high"] or "none",
                         _ratios(row), _verdict(row, f) + (f"; units low-high: {units}" if units else "")])
        load = (f"{target['load']:g} clients" if (answer.get("load") or {}).get("unit") == "clients"
                else f"{target['load']:.3g}/s")
        doc.table(["figure", "range", "source, confidence", "cheapest at low", "cheapest at high",
                   "ratio low / high", "flip point"], rows,
                  f"At {load}: winner {target['winner']}, runner-up {target['runner_up'] or 'none'}. Sorted by "
                  f"swing (the largest change of the ratio first). Sources: plan.json's sensitivity.figures.")
    figure = _tornado(answer, stem)
    if figure is not None:
        doc.figure(figure)
    left = sens.get("left_out") or []
    if left:
        doc.paragraph("Found but not re-planned (beyond plan.sensitivity.physics): "
                      + ", ".join(f["label"] for f in left) + ".")


def _ratios(row: dict[str, Any]) -> str:
    def r(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"
    return f"{r(row['ratio_low'])} / {r(row['ratio_high'])} (as planned {r(row['ratio_base'])})"


@literal_figure_text
def _tornado(answer: dict[str, Any], stem: str) -> Figure | None:
    sens = answer["sensitivity"]
    figures = _figures(answer)
    panels = [t for t in sens["targets"] if t["runner_up"] and any(
        r["ratio_low"] is not None or r["ratio_high"] is not None for r in t["rows"])]
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = max(2.4, 0.42 * max(len(t["rows"]) for t in panels) + 1.3)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8.0, height * len(panels)), dpi=110, squeeze=False)
    clients = (answer.get("load") or {}).get("unit") == "clients"
    tags = Tags()
    for ax, target in zip(axes[:, 0], panels):
        rows = [r for r in target["rows"] if r["ratio_base"] is not None][::-1]  # largest swing on top
        base = rows[0]["ratio_base"] if rows else 1.0
        labelled: set[str] = set()
        for y, row in enumerate(rows):
            if row["ratio_low"] == row["ratio_high"] == base:  # re-planned: the same counts at both ends
                ax.annotate("no change", (base, y), xytext=(4, -3), textcoords="offset points", fontsize=7)
                continue
            for end, color in (("low", "tab:blue"), ("high", "tab:orange")):
                value = row[f"ratio_{end}"]
                if value is None:  # the winner (or the runner-up) serves the target at no count allowed
                    ax.annotate("no count serves it", (base, y), xytext=(4, -3), textcoords="offset points",
                                fontsize=7, color=color)
                    continue
                label = f"figure at its {end} end"
                bars = ax.barh(y, value - base, left=base, color=color, alpha=0.85, height=0.6,
                               label=None if end in labelled else label)
                f = figures[row["field"]]
                tags.point(bars.patches[0], label,
                           f"{f['label']} at {figure_value(f[end], f.get('dimension'))}: ratio {value:.3f} "
                           f"(as planned {base:.3f})")
                labelled.add(end)
        labels = []
        for row in rows:
            f = figures[row["field"]]
            labels.append(f"{f['label']}\n{figure_value(f['low'], f.get('dimension'))} - "
                          f"{figure_value(f['high'], f.get('dimension'))}")
        ax.set_yticks(range(len(rows)))
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_yticklabels(labels, fontsize=7)
        ax.axvline(base, color="black", lw=1)
        ax.axvline(1.0, color="tab:red", ls="--", lw=1, label="as costly as the runner-up")
        load = f"{target['load']:g} clients" if clients else f"{target['load']:.3g}/s"
        ax.set_title(f"{load}: {target['winner']} over {target['runner_up']}", fontsize=9)
        ax.set_xlabel("cost per hour of the winner / of the runner-up")
        ax.grid(alpha=0.3, axis="x")
        tags.legend(ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False))
    fig.tight_layout()
    png, svg = render(fig, f"{stem}_sensitivity.png", tags, bbox_inches="tight")  # the legend sits below the axes
    return Figure(f"{stem}_sensitivity.png", png,
                  "Tornado: the winner's cost per hour over the runner-up's with each assumed figure at the low "
                  "(blue) and high (orange) end of its range, from the ratio as planned (black line); past the red "
                  "dashed line the runner-up is the cheaper. Largest swing on top.", svg)
