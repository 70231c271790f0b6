"""The plan report's section on shared KV pools (``plan.shared_pools``, :mod:`kvsim.plan.pool_axis`):
per candidate and target, the frontier of pool sizes -- units needed, cost, and whether one more
step of pool capacity beat adding compute -- in a table, a sentence and a figure. It reads the
saved answer only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvsim.escape import literal_figure_text
from kvsim.report.document import Document, Figure, Strong

__all__ = ["shared_pool_section", "pool_words", "beats_sentence"]


def _usd(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"


def _signed(value: float) -> str:
    return ("-" if value < 0 else "+") + _usd(abs(value))


def pool_words(nodes: int) -> str:
    return f"{nodes} shared pool node" if nodes == 1 else f"{nodes} shared pool nodes"


def beats_sentence(table: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Where adding pool capacity beats adding compute on one frontier, in words."""
    up_to = table["beats_compute_up_to"]
    if up_to is None:
        return "whether pool capacity beats compute is unknown here (a price is missing, or one pool size was tried)"
    first = rows[0]
    if up_to == first["pool_nodes"]:
        units = f"{first['units']} unit" + ("" if first["units"] == 1 else "s")
        return (f"adding pool capacity does not beat adding compute: {first['pool_nodes']} pool "
                f"node{'s' if first['pool_nodes'] != 1 else ''} with {units} is already the cheaper "
                f"start (the next size saves too few units to pay for its nodes)")
    reached = next(r for r in rows if r["pool_nodes"] == up_to)
    text = (f"adding pool capacity beats adding compute up to P={up_to} (from {first['units']} units and "
            f"{_usd(first['cost_per_hour_usd'])}/h at P={first['pool_nodes']} to {reached['units']} units and "
            f"{_usd(reached['cost_per_hour_usd'])}/h)")
    if up_to != rows[-1]["pool_nodes"]:
        text += "; beyond it the units saved no longer pay for the pool nodes added"
    return text


def shared_pool_section(doc: Document, answer: dict[str, Any], stem: str, rate: Callable[[Any], str]) -> None:
    """Add the shared-pool section to ``doc`` for every candidate of ``answer`` with a
    ``shared_pool`` (nothing otherwise)."""
    shared = [c for c in answer["candidates"] if c.get("shared_pool")]
    if not shared:
        return
    doc.heading("Shared KV pool: pool nodes against compute units")
    for c in shared:
        pool = c["shared_pool"]
        if pool["usd_per_tb_month"] is not None:
            price = (f"rented at ${pool['usd_per_tb_month']:g} per TB-month (TB = 1e12 bytes, month = 730 h): "
                     f"{_usd(pool['pool_node_usd_per_hour'])}/h per node of {pool['pool_node_capacity_bytes'] / 1e12:.4g} TB")
        else:
            price = (f"bought at {_usd(pool['pool_node_capex_usd'])} a node, "
                     f"{_usd(pool['pool_node_usd_per_hour'])}/h with its power")
        doc.paragraph(f"{c['system']}: one pool of P x {pool['pool_node']} shared by all its compute units over the "
                      f"network, P searched over {', '.join(map(str, pool['nodes']))}; the pool is {price}; one "
                      f"compute unit costs {_usd(pool['unit_usd_per_hour'])}/h. For each P, n(P) is the fewest "
                      f"units that serve the target with that pool. One unit alone with the pool sustains at least "
                      + "; ".join(f"{rate(p['max_load'])} with P={p['pool_nodes']}" for p in pool["capacity"])
                      + " (the most load each capacity search found within the SLO)."
                      + (f" Not probed: P={', '.join(map(str, pool['not_probed']))} -- at every target even the "
                         f"fewest units allowed with that pool would cost at least the cheapest pair already found."
                         if pool.get("not_probed") else ""))
        for table in pool["frontier"]:
            rows = table["rows"]
            body: list[list[str]] = []
            for r in rows:
                cells: list[str] = [str(r["pool_nodes"]), "none" if r["units"] is None else str(r["units"]),
                         _usd(r["capex_usd"]), _usd(r["cost_per_hour_usd"]),
                         "-" if r["units_saved"] is None else f"{-r['units_saved']:+d} units, {r['pool_nodes_added']:+d} nodes",
                         "-" if r["step_usd_per_hour"] is None else _signed(r["step_usd_per_hour"]) + "/h",
                         "-" if r["pool_beats_compute"] is None else ("pool" if r["pool_beats_compute"] else "compute")]
                strong: list[str] = [Strong(x) for x in cells]
                body.append(strong if r["pool_nodes"] == table["chosen_pool_nodes"] else cells)
            doc.table(["P (pool nodes)", "n(P) units", "capex", "USD/h", "step from the previous P", "cost of the step",
                       "cheaper: more"],
                      body, f"{c['system']} at {rate(table['load'])}: {beats_sentence(table, rows)}. In bold, the "
                            f"cheapest pair. A step: the change in units and pool nodes from the previous P, and in "
                            f"cost per hour; 'pool' where the pool nodes added cost less than the units they saved "
                            f"(more pool was the cheaper way to serve the target), 'compute' where not.")
    figure = _figure(shared, stem, rate)
    if figure is not None:
        doc.figure(figure)


def frontier_lines(series: list[tuple[str, dict[str, Any]]], rate: Callable[[Any], str]
                   ) -> list[tuple[str, list[str], list[tuple[int, float, int]], Any]]:
    """The lines of the shared-pool figure: per (system, frontier table), ``(system, loads,
    points, chosen pool nodes)`` with ``points`` the ``(pool nodes, USD/h, units)`` priced.

    Targets whose frontiers are the same points (the same units and costs at every P) are one
    line labelled with every such target: drawn apart, the later would hide the earlier."""
    lines: dict[tuple, tuple[str, list[str], list[tuple[int, float, int]], Any]] = {}
    for system, table in series:
        points = [(r["pool_nodes"], r["cost_per_hour_usd"], r["units"]) for r in table["rows"]
                  if r["cost_per_hour_usd"] is not None]
        key = (system, tuple(points), table["chosen_pool_nodes"])
        if key in lines:
            lines[key][1].append(rate(table["load"]))
        else:
            lines[key] = (system, [rate(table["load"])], points, table["chosen_pool_nodes"])
    return list(lines.values())


@literal_figure_text
def _figure(shared: list[dict[str, Any]], stem: str, rate: Callable[[Any], str]) -> Figure | None:
    series = [(c["system"], t) for c in shared for t in c["shared_pool"]["frontier"]
              if sum(r["cost_per_hour_usd"] is not None for r in t["rows"]) > 1]
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from kvsim.report.interactive import Tags, render

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    tags = Tags()
    for system, loads, points, chosen in frontier_lines(series, rate):
        at = ", ".join(loads)
        label = f"{system} at {at}" if len(shared) > 1 else at
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], label=label)
        tags.series(line, label, label)
        for x, y, n in points:
            ax.annotate(f"{n}u", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
            marker = ax.scatter([x], [y], s=30, color=line.get_color(), zorder=3)
            tags.point(marker, label, f"{label}: {n} unit{'s' if n != 1 else ''} + {x:g} pool node"
                                      f"{'s' if x != 1 else ''}, {_usd(y)} per hour"
                                      + (" (the cheapest pair)" if x == chosen else ""))
        best = next((p for p in points if p[0] == chosen), None)
        if best is not None:
            ring = ax.scatter([best[0]], [best[1]], s=120, facecolors="none", edgecolors=line.get_color(), zorder=3)
            tags.series(ring, label)
    ax.set_xlabel("shared pool nodes P")
    ax.set_ylabel("cost of n(P) units + P pool nodes\n(USD per hour)")
    ax.set_xticks(sorted({r["pool_nodes"] for _, t in series for r in t["rows"]}))
    ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()[0] + [
        Line2D([], [], marker="o", ls="none", markersize=11, markerfacecolor="none", color="gray",
               label="circled: the cheapest pair; 2u: 2 units")]
    tags.legend(ax.legend(handles=handles, fontsize=8))
    fig.tight_layout()
    png, svg = render(fig, f"{stem}_shared_pool.png", tags)
    return Figure(f"{stem}_shared_pool.png", png,
                  "Cost per hour of the fewest units n(P) (labelled) with P shared pool nodes, per target; "
                  "circled: the cheapest pair", svg)
