"""The report of a plan (``plan.json``, see :mod:`kvsim.plan.answer`): the question, the answer in
one paragraph, the tables, the figures, the assumptions and the flags -- as Markdown and as one
self-contained HTML page. It reads the saved answer only; nothing is re-run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvsim.escape import literal_figure_text, plain_log_ticks
from kvsim.report.document import Document, Figure, Strong
from kvsim.report.interactive import Tags, render
from kvsim.report.legend import legend_below
from kvsim.report.plan_tornado import hinge_sentence, sensitivity_section
from kvsim.report.pool_frontier import pool_words, shared_pool_section

__all__ = ["plan_document", "summary_paragraph", "plan_report_files", "write_plan_report"]


def _by_clients(answer: dict[str, Any]) -> bool:
    return (answer.get("load") or {}).get("unit") == "clients"


def _loader(answer: dict[str, Any]):
    """How the plan's loads read: ``4.5/s`` (arrival rates), or ``64 clients`` (a closed loop)."""
    if _by_clients(answer):
        return lambda value: "-" if value is None else f"{value:.0f} clients"
    return lambda value: "-" if value is None else f"{value:.3g}/s"


def _usd(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"${value:,.0f}" if abs(value) >= 100 else f"${value:,.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def _slo_text(answer: dict[str, Any]) -> str:
    def seconds(value: float) -> str:
        return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
    return " and ".join(f"{o['metric'].removesuffix('_s').upper()} {o['statistic']} <= {seconds(o['limit_s'])}"
                        for o in answer["slo"])


def _units(n: int) -> str:
    return f"{n} unit" if n == 1 else f"{n} units"


def _spares(doc: Any, answer: dict[str, Any], _rate: Any) -> None:
    """The spares each candidate needs to hold its SLO through failures (``plan.failures``), if any."""
    if not any(c.get("failures") for c in answer["candidates"]):
        return
    doc.heading("Spares for failures")
    header = ["candidate", "cards, nodes a unit", "unit failures a year", "unit availability"] + [
        f"{_rate(t)}: units + spares (USD/h)" for t in answer["targets"]]
    rows = []
    for c in answer["candidates"]:
        f = c["failures"]
        cells = [c["system"], f"{f['cards_per_unit']}, {f['nodes_per_unit']}", f"{f['unit_failures_per_year']:.3g}",
                 f"{f['unit_availability']:.6f}"]
        for t, a in zip(c["targets"], answer["answers"]):
            spares = t.get("spares")
            if t["units"] is None or spares is None:
                cell = "none"
            elif spares["units"] is None:
                cell = f"{t['units']} + no count of spares reaches the confidence"
            else:
                cell = (f"{t['units']} + {spares['units']} ({_usd(spares['cost_per_hour_usd'])}; enough up "
                        f"{spares['prob_enough_up_without']:.4g} of the time without spares, "
                        f"{spares['prob_enough_up']:.6g} with)")
            cells.append(Strong(cell) if a.get("cheapest") == c["system"] else cell)
        rows.append(cells)
    doc.table(header, rows, "A unit is down from any failure of its cards or nodes until it is repaired; units fail "
                            "and are repaired independently, so the units up at a random moment are binomial "
                            "(k-out-of-n availability, kvsim/plan/spares.py). Spares: the fewest extra units that "
                            "keep at least the units the SLO needs up for the plan's confidence share of the time; "
                            "the cheapest (in bold) is chosen with its spares. Not priced: the requests and KV a "
                            "failed unit loses, and common-cause failures (a shared switch or power feed).")


def summary_paragraph(answer: dict[str, Any]) -> str:
    baseline = answer["baseline"]
    _rate = _loader(answer)
    sentences = []
    for row in answer["answers"]:
        target = _rate(row["load"])
        cheapest = row["cheapest"]
        if cheapest is None:
            sentences.append(f"At {target}: {row['note']}.")
            continue
        cost = next(t for c in answer["candidates"] if c["system"] == cheapest for t in c["targets"]
                    if t["load"] == row["load"])
        pool = f" + {pool_words(cost['pool_nodes'])}" if cost.get("pool_nodes") is not None else ""
        text = (f"At {target} the cheapest is {cheapest} ({_units(cost['units'])}{pool}, {_usd(cost['capex_usd'])} capex, "
                f"{_usd(cost['cost_per_hour_usd'])}/h)")
        spares = cost.get("spares")
        if spares and spares["units"] is not None:
            text += (f" and {spares['units']} spare unit(s) for failures ({_usd(spares['cost_per_hour_usd'])}/h with "
                     f"them; enough units up {spares['prob_enough_up']:.6g} of the time)")
        saving = row["savings_vs_baseline"].get(cheapest)
        if saving and saving["capex_usd"] is not None:
            text += f", {_pct(saving['capex_usd'])} capex against {baseline}"
        like = (row.get("savings_like_for_like") or {}).get(cheapest)
        if like and like["against"] not in (None, baseline, cheapest) and like["capex_usd"] is not None:
            text += f" ({_pct(like['capex_usd'])} like for like, against {like['against']} with the same KV options)"
        elif saving and saving["capex_usd"] is not None and like and like["against"] is None:
            text += " (no candidate on its compute nodes has its KV options: not like for like)"
        check = cost.get("seed_check")
        if check:
            text += "; " + _seed_words(check, cost["units"])
        if row.get("cannot_tell_apart"):
            text += ("; it cannot be told apart from " + ", ".join(row["cannot_tell_apart"])
                     + " (their costs overlap over the unit counts the seeds call for)")
        if row.get("unconfirmed"):
            text += f"; unconfirmed: the {_units(cost['units'])} met the SLO but were {row['unconfirmed']}"
        sentences.append(text + ".")
    if answer.get("no_candidate_meets_slo"):
        return (f"No candidate serves {answer['model']} within {_slo_text(answer)}: none meets it at any load "
                f"probed. " + " ".join(sentences))
    if all(row["cheapest"] is None and row.get("nearest_miss") for row in answer["answers"]):
        return (f"No candidate serves any target load of {answer['model']} within {_slo_text(answer)}. "
                + " ".join(sentences))
    return (f"Serving {answer['model']} within {_slo_text(answer)}, cheapest by cost per hour (amortised capex "
            f"and power): " + " ".join(sentences))


@literal_figure_text
def _figure_capacity(answer: dict[str, Any], stem: str) -> Figure | None:
    points = [(c["system"], c["unit_cost"]["cost_per_hour_usd"], c["capacity"]["max_load"])
              for c in answer["candidates"]
              if c["unit_cost"] and c["unit_cost"].get("cost_per_hour_usd") and c["capacity"]["max_load"]]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    tags = Tags()
    front = []
    for name, cost, capacity in sorted(points, key=lambda p: (p[1], -p[2])):
        if not front or capacity > front[-1][2]:
            front.append((name, cost, capacity))
    x_span = (max(p[1] for p in points) - min(p[1] for p in points)) or 1.0
    y_span = (max(p[2] for p in points) - min(p[2] for p in points)) or 1.0
    placed: list[tuple[float, float]] = []
    for name, cost, capacity in points:
        on_front = any(f[0] == name for f in front)
        marker = ax.scatter([cost], [capacity], s=50, color="tab:blue" if on_front else "tab:gray", zorder=3)
        tags.point(marker, name, f"{name}: {_usd(cost)} per hour a unit, sustains {capacity:.3g} "
                                 f"{answer['load']['unit']} within the SLO" + (" (on the front)" if on_front else ""))
        # candidates at almost the same point: stack their labels instead of printing them over each other
        near = sum(1 for x, y in placed if abs(x - cost) < 0.08 * x_span and abs(y - capacity) < 0.08 * y_span)
        placed.append((cost, capacity))
        ax.annotate(name, (cost, capacity), textcoords="offset points", xytext=(6, 4 + 11 * near), fontsize=9)
    if len(front) > 1:
        ax.plot([f[1] for f in front], [f[2] for f in front], color="tab:blue", lw=1, zorder=2,
                label="cost-capacity front")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("cost of one unit (USD per hour)")
    ax.set_ylabel(f"load one unit sustains within the SLO ({answer['load']['unit']})")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png, svg = render(fig, f"{stem}_capacity.png", tags)
    return Figure(f"{stem}_capacity.png", png, "Capacity against cost, per unit of each candidate "
                                               "(blue: no other candidate is both cheaper and larger)", svg)


@literal_figure_text
def _figure_probes(answer: dict[str, Any], stem: str) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ttft_limits = [o["limit_s"] for o in answer["slo"] if o["metric"] == "ttft_s" and o["statistic"] == "p99"]
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    tags = Tags()
    unit = "clients" if _by_clients(answer) else "/s"
    marks = set()
    for k, candidate in enumerate(answer["candidates"]):
        probes = sorted((p for p in answer["probes"] if p["system"] == candidate["system"] and p["units"] == 1
                         and p.get("seed") is None
                         and p["ttft_p99_s"] is not None), key=lambda p: p["load"])
        if not probes:
            continue
        color, name = f"C{k}", candidate["system"]
        line, = ax.plot([p["load"] for p in probes], [p["ttft_p99_s"] for p in probes], color=color, lw=1, label=name)
        tags.series(line, name, name)
        for p in probes:
            flagged = bool(p["flags"])
            stopped = p.get("stopped_at_s") is not None
            where = f"{name} at {p['load']:.3g}{' ' if unit == 'clients' else ''}{unit}: TTFT p99 "
            if stopped:  # a lower bound: an upward triangle
                marker = ax.scatter([p["load"]], [p["ttft_p99_s"]], color=color, zorder=3, marker="^",
                                    facecolors="none", s=36)
                tags.point(marker, name, f"{where}>= {p['ttft_p99_s']:.3g} s (stopped once its failure was certain)")
                marks.add("stopped")
                continue
            marker = ax.scatter([p["load"]], [p["ttft_p99_s"]], color=color, zorder=3,
                                facecolors="none" if flagged else color, s=30)
            tags.point(marker, name, f"{where}{p['ttft_p99_s']:.3g} s"
                       + (f" (flagged: {', '.join(p['flags'])})" if flagged else ""))
            marks.update({"flagged"} if flagged else set())
        capacity = candidate["capacity"]["max_load"]
        if capacity:
            mark = ax.axvline(capacity, color=color, ls=":", lw=1)
            tags.series(mark, name, f"{name}: unit capacity {capacity:.3g}{' ' if unit == 'clients' else ''}{unit}")
            marks.add("capacity")
    for limit in ttft_limits:
        ax.axhline(limit, color="black", ls="--", lw=1, label="SLO: TTFT p99")
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    loads = [p["load"] for p in answer["probes"] if p["units"] == 1 and p["ttft_p99_s"] is not None]
    if loads and min(loads) > 0 and max(loads) > 4 * min(loads):  # candidates tens of times apart: each legible
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
    ax.set_xlabel("clients of one unit" if _by_clients(answer) else "arrival rate on one unit (requests/s)")
    ax.set_ylabel("TTFT p99 (s)")
    ax.grid(alpha=0.3, which="both")
    key = {"flagged": Line2D([], [], marker="o", ls="none", color="gray", markerfacecolor="none",
                             label="hollow: flagged, not steady state"),
           "stopped": Line2D([], [], marker="^", ls="none", color="gray", markerfacecolor="none",
                             label="triangle: stopped early, a lower bound"),
           "capacity": Line2D([], [], ls=":", color="gray", label="dotted: unit capacity found")}
    handles = ax.get_legend_handles_labels()[0] + [key[m] for m in ("flagged", "stopped", "capacity") if m in marks]
    tags.legend(legend_below(fig, handles, most_columns=3))  # inside, it covers the largest candidate's points
    png, svg = render(fig, f"{stem}_probes.png", tags)
    return Figure(f"{stem}_probes.png", png, "TTFT p99 of one unit against load, per candidate; dotted: the "
                                             "unit capacity found; hollow markers: runs flagged unstable or too "
                                             "short (not steady state); triangles: runs stopped once their "
                                             "failure was certain (their TTFT p99 is a lower bound)", svg)


def plan_document(answer: dict[str, Any], stem: str = "plan", deploy_dir: str = "deploy") -> Document:
    """The report of a plan's answer (the dict of ``plan.json``); figures are named ``<stem>_*.png``;
    the deployment files are listed under ``deploy_dir`` (the plan writes them under ``deploy/``)."""
    doc = Document(f"Capacity plan: {answer['scenario']}")
    _rate = _loader(answer)
    targets = ", ".join(_rate(t) for t in answer["targets"])
    doc.heading("Question")
    doc.paragraph(f"What is the cheapest configuration that serves {targets} of the workload of "
                  f"'{answer['scenario']}' ({answer['description'].strip() or 'no description'}) within "
                  f"{_slo_text(answer)}, among {len(answer['candidates'])} candidates, and what does each save "
                  f"against {answer['baseline']}?")
    doc.heading("Answer")
    doc.paragraph(summary_paragraph(answer))
    hinge = hinge_sentence(answer)
    if hinge is not None:
        doc.paragraph(hinge)
    _nearest_misses(doc, answer)
    deployment = [row for row in answer.get("deployment") or () if row["files"] or row.get("problem")]
    if deployment:
        doc.heading("Deployment files")
        doc.paragraph("For the cheapest candidate at each target, at the units it needs there: vLLM and SGLang "
                      "launch scripts, a Dynamo manifest and a README tracing every flag to its scenario field and "
                      "listing what could not be mapped (docs/deploy.md).")
        doc.table(["target", "candidate", "units", "files"],
                  [[_rate(row["load"]), row["system"], str(row["units"]),
                    ", ".join(_moved(name, deploy_dir) for name in row["files"]) if row["files"]
                    else f"none: {row['problem']}"] for row in deployment])
    doc.heading("Units and cost per target load")
    header = ["candidate", "one unit"] + [f"{_rate(t)}: units (capex, USD/h)" for t in answer["targets"]]
    rows = []
    for c in answer["candidates"]:
        cells = [c["system"], c["unit"]]
        for t, a in zip(c["targets"], answer["answers"]):
            check = t.get("seed_check")
            spread = (f" [{check['units_low']}-{check['units_high']} by seed]" if check and not check["agree"]
                      else " [seeds agree]" if check else "")
            pool = f" + {t['pool_nodes']} pool" if t.get("pool_nodes") is not None else ""
            cell = ("none" if t["units"] is None else
                    f"{t['units']}{spread}{pool} ({_usd(t['capex_usd'])}, {_usd(t['cost_per_hour_usd'])})"
                    + (", unconfirmed" if t.get("unconfirmed") else ""))
            cells.append(Strong(cell) if a.get("cheapest") == c["system"] else cell)
        rows.append(cells)
    doc.table(header, rows, "A unit is the system as written in the scenario; n units multiply every node count"
                            + (" (but '+ P pool': one remote KV pool of P nodes shared by the n units, its cost "
                               "included; see Shared KV pool)" if any(c.get("shared_pool") for c in answer["candidates"])
                               else "") + ". "
                            f"'none': no count up to {answer['units']['max']} units meets the SLO; 'unconfirmed': "
                            f"the count met the SLO in a run still flagged after its longer re-runs (see Flags). "
                            f"In bold, the cheapest per target. [seeds agree]: the count and one fewer were run "
                            f"again under other seeds (the same for every candidate) and every seed called for the "
                            f"count; [a-b by seed]: the seeds call for between a and b units.")
    _spares(doc, answer, _rate)
    doc.heading(f"Savings against {answer['baseline']}, as named and like for like")
    header = ["candidate", "against"] + [f"{_rate(a['load'])}: capex, USD/h" for a in answer["answers"]]
    rows = []
    for c in answer["candidates"]:
        if c["system"] == answer["baseline"]:
            continue
        name = c["system"]
        rows.append([name, f"{answer['baseline']} (as named)"]
                    + [f"{_pct(a['savings_vs_baseline'][name]['capex_usd'])}, "
                       f"{_pct(a['savings_vs_baseline'][name]['cost_per_hour_usd'])}" for a in answer["answers"]])
        like = [a.get("savings_like_for_like", {}).get(name) for a in answer["answers"]]
        against = next((x["against"] for x in like if x), None)
        if against is None:
            rows.append([name, "like for like: no candidate"] + ["-" for _ in like])
        elif against not in (answer["baseline"], name):  # a candidate on the baseline's nodes is its own
            rows.append([name, f"{against} (like for like)"]
                        + [f"{_pct(x['capex_usd'])}, {_pct(x['cost_per_hour_usd'])}" for x in like])
    doc.table(header, rows, f"Relative to the other's cost at the same load; '-' where either side serves no load "
                            f"or has no price. As named: against {answer['baseline']} as the scenario writes it. "
                            f"Like for like: against the candidate on {answer['baseline']}'s compute nodes with the "
                            f"same KV options (kv_cache section), where the named baseline's differ; 'no "
                            f"candidate' where the plan has none such.")
    shared_pool_section(doc, answer, stem, _rate)
    sensitivity_section(doc, answer, stem)
    doc.heading("Capacity of one unit")
    rows = [[c["system"], _capacity_text(c["capacity"], _rate), _rate(c["capacity"]["fail_load"]),
             "yes" if c["capacity"]["converged"] else "no", c["capacity"]["note"]] for c in answer["candidates"]]
    doc.table(["candidate", "meets the SLO at", "fails at", "converged", "search"], rows,
              f"The most load one unit sustains lies between the two loads (searched to within "
              f"{answer['rel_tol']:.0%}" + (", or one client" if _by_clients(answer) else "") + ").")
    for figure in (_figure_capacity(answer, stem), _figure_probes(answer, stem)):
        if figure is not None:
            doc.figure(figure)
    doc.heading("Assumptions")
    window = answer["window"]
    warmup = ("a warm-up MSER-5 found in each probe (warmup: auto)" if window.get("warmup") == "mser5"
              else f"a {window['warmup_s']:g} s warm-up")
    if _by_clients(answer):
        length = (f"Each probe simulates at least {window['duration_s']:g} s of a closed loop (longer where a run "
                  f"that met the SLO held fewer than {window['completions_per_client']:g} completions per client "
                  f"or requests too long for its window)")
    else:
        length = (f"Each probe simulates at least {window['duration_s']:g} s of Poisson arrivals (longer where a "
                  f"light load on many instances needs more time for {window['completions_per_instance']:g} "
                  f"completions per instance)")
    items = [f"{length}, measured after {warmup}, seed {answer['seed']} at every probe (common random numbers).",
             "A probe flagged unstable (backlog growing) or rejecting requests does not count as meeting the SLO. "
             "One flagged too_short or warmup_short whose verdict rests on the flag is run again, up to three "
             "times, over a longer window or after a longer warm-up; if it met every objective and the flag "
             "remains, its verdict is 'meets, unconfirmed' and every number resting on it says so.",
             f"kvsim {answer['kvsim_version']}."]
    for c in answer["candidates"]:
        for assumption in (c["unit_cost"] or {}).get("assumptions") or []:
            items.append(f"{c['system']}: {assumption}")
        if not c["unit_cost"]:
            items.append(f"{c['system']}: no cost model given: its cost is unknown.")
    doc.items(list(dict.fromkeys(items)))
    flagged = [p for p in answer["probes"] if p["flags"]]
    doc.heading("Flags")
    if flagged:
        doc.table(["candidate", "units", "load", "flags", "longer runs", "verdict"],
                  [[p["system"], str(p["units"]), _rate(p["load"]), ", ".join(p["flags"]), str(p.get("reruns") or 0),
                    _verdict(p)] for p in flagged],
                  "The flags of the run each verdict was judged on. unstable (the backlog grew through the "
                  "window) never counts as meeting the SLO, nor does a run that rejected requests it could never "
                  "hold (rejected). too_short (too few completions, or latencies too long for the window, to "
                  "judge) and warmup_short (the warm-up MSER-5 detects is longer than the configured one and "
                  "shifts the window's mean) are cleared by running the probe again longer: a probe that met "
                  "every objective and still carries one after its re-runs meets the SLO unconfirmed.")
    else:
        doc.paragraph("No probe was flagged.")
    doc.heading("Every probe")
    doc.paragraph("A probe's TTFT and TPOT p99 over the requests it measured; '>=' where it stopped once its failure "
                  "was certain (the rest of the window was not simulated, so the figure is a lower bound).")
    doc.table(["candidate", "units", "load", "seed", "TTFT p99 (s)", "TPOT p99 (s)", "verdict"],
              [[p["system"], str(p["units"]), _rate(p["load"]),
                str(answer["seed"] if p.get("seed") is None else p["seed"]),
                "-" if p["ttft_p99_s"] is None else _bound(p, f"{p['ttft_p99_s']:.3g}"),
                "-" if p["tpot_p99_s"] is None else _bound(p, f"{p['tpot_p99_s']:.3g}"),
                _verdict(p)] for p in answer["probes"]])
    return doc


def _bound(probe: dict[str, Any], value: str) -> str:
    """A probe's statistic, as a lower bound (">= x") where its run stopped early: only its first part was seen."""
    return f">= {value}" if probe.get("stopped_at_s") is not None else value


def _seed_words(check: dict[str, Any], units: int) -> str:
    """A unit count's seed check in words (:func:`kvsim.plan.planner.seed_check`)."""
    n = len(check["seeds"])
    met = sum(check["meets"])
    fewer = sum(check["fewer_meets"] or [])
    if check["agree"]:
        return f"{n} of {n} seeds call for {_units(units)}"
    parts = []
    if met < n:
        parts.append(f"{_units(units)} met the SLO under {met} of {n} seeds")
    if fewer:
        parts.append(f"{_units(units - 1)} under {fewer} of {n}")
    return "uncertain by seed: " + ", ".join(parts) + f" (between {check['units_low']} and {check['units_high']} units)"


def _verdict(probe: dict[str, Any]) -> str:
    if not probe["meets"]:
        return probe["reason"]
    return f"meets, unconfirmed ({probe['unconfirmed']})" if probe.get("unconfirmed") else "meets"


def _capacity_text(capacity: dict[str, Any], rate: Any) -> str:
    """One unit's capacity: the highest load that met the SLO, '>= x, unconfirmed' where that rests on a
    flagged probe."""
    if capacity.get("unconfirmed") and capacity["max_load"] is not None:
        return f">= {rate(capacity['max_load'])}, unconfirmed ({capacity['unconfirmed']})"
    return rate(capacity["max_load"])


def _nearest_misses(doc: Document, answer: dict[str, Any]) -> None:
    """The table of the target loads no candidate serves: who came closest, and how close."""
    misses = [(row["load"], row["nearest_miss"]) for row in answer["answers"] if row.get("nearest_miss")]
    if not misses:
        return
    _rate = _loader(answer)

    def seconds(value: float) -> str:
        return f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"

    def reached(v: dict[str, Any]) -> str:
        name = f"{v['metric'].removesuffix('_s').upper()} {v['statistic']}"
        if v["value_s"] is None:
            return f"{name}: not measured"
        return f"{name} {seconds(v['value_s'])} against {seconds(v['limit_s'])} ({v['ratio']:.3g}x)"

    rows = [[_rate(load), m["system"], str(m["units"]), "; ".join(reached(v) for v in m["slo"]) or "-",
             m["reason"] or "-",
             _rate(m["meets_per_unit"]) if m["meets_per_unit"] is not None else
             f"none (down to {_rate(m['lowest_load_probed'])})"]
            for load, m in misses]
    doc.heading("Nearest miss")
    doc.table(["target", "closest candidate", "units", "SLO reached", "why it fails", "one unit meets the SLO up to"],
              rows, f"No candidate serves these loads with up to {answer['units']['max']} units. The closest is "
                    "the one whose attempt at the target with the most units came nearest to the SLO (the smallest "
                    "multiple of a limit, over the objectives).")


def _moved(name: str, deploy_dir: str) -> str:
    """A deployment file's name (``deploy/...``, as the plan wrote it) under ``deploy_dir``."""
    head, sep, rest = name.partition("/")
    return f"{deploy_dir}/{rest}" if sep and head == "deploy" else name


def plan_report_files(answer: dict[str, Any], stem: str = "plan",
                      deploy_files: dict[str, bytes] | None = None) -> list[tuple[str, bytes]]:
    """The files of a plan's report as (name, bytes): ``<stem>.json`` (the answer), the PNG
    figures, ``<stem>.md`` and ``<stem>.html``, not yet written.

    ``deploy_files``: the plan's deployment files by the names ``plan.json`` lists
    (``deploy/...``), for a report written away from the plan's folder: they are then part of the
    report, under ``<stem>_deploy/``, and the report lists them there."""
    import json

    from kvsim.report.document import document_files

    answer_file = (f"{stem}.json", (json.dumps(answer, indent=2, allow_nan=False) + "\n").encode())
    deploy_dir = f"{stem}_deploy" if deploy_files else "deploy"
    moved = [(_moved(name, deploy_dir), data) for name, data in (deploy_files or {}).items()]
    return [answer_file] + document_files(plan_document(answer, stem, deploy_dir), stem) + moved


def plan_deploy_files(results: Path, answer: dict[str, Any]) -> dict[str, bytes] | str:
    """The deployment files ``plan.json`` lists (``deploy/...``), read from the plan's folder to go
    with a report written elsewhere; or, when they cannot all be (a listed file missing, e.g. a
    plan.json copied alone, or outside ``deploy/``), why not: the report then names them as the
    plan wrote them, relative to the plan's folder."""
    files: dict[str, bytes] = {}
    root = (results / "deploy").resolve()
    for row in answer.get("deployment") or ():
        for name in row.get("files") or ():
            path = (results / str(name)).resolve()
            if not (isinstance(name, str) and path.is_relative_to(root) and path.is_file()):
                return (f"note: {results / 'plan.json'} lists the deployment file {name}, which is not in "
                        f"{results / 'deploy'}: the report names the files as the plan wrote them, none copied")
            files[name] = path.read_bytes()
    return files


def write_plan_report(answer: dict[str, Any], out_dir: Any, stem: str = "plan") -> list[Any]:
    """Write ``<stem>.json``, ``<stem>.md`` (with its PNG figures) and ``<stem>.html`` into
    ``out_dir``, each to a temporary name first and then renamed, so a killed run leaves no
    half-written file. Returns the paths written."""
    from kvsim.report.document import write_files

    return write_files(out_dir, plan_report_files(answer, stem))
