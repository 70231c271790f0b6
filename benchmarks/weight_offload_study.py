"""The weight-offload study's page and figure (issue 28 item 4), written from three runs.

    .venv/bin/kvsim run scenarios/weight_offload_flexee.yaml --out /work/runs/weight_offload_flexee
    .venv/bin/kvsim run scenarios/weight_offload.yaml --out /work/runs/weight_offload --workers 2
    .venv/bin/kvsim run scenarios/weight_offload_offline.yaml --out /work/runs/weight_offload_offline
    .venv/bin/python benchmarks/weight_offload_study.py /work/runs/weight_offload_flexee /work/runs/weight_offload \\
        /work/runs/weight_offload_offline --out docs/weight_offload.md --figure docs/weight_offload.png

Part 1, one card (``scenarios/weight_offload_flexee.yaml``): each model at each offload share,
with and without early exit, one client at a time (batch 1). The speed-up is the mean end-to-end
time of a request without exits over that with them, both simulated (prefill, which runs every
layer, included), set beside FlexEE's reported points (arXiv:2609.17008) and beside the decode
step's closed form (:mod:`kvsim.models.early_exit`, the arithmetic of ``docs/early_exit.md``).

Part 2, the datacenter (``scenarios/weight_offload.yaml``): Llama-3.1-70B on L20 and H20 servers,
per swept load, goodput (requests/s within every SLO threshold) and output tokens per second, each
also per dollar of the system's hourly cost (capital amortised, energy; ``cost`` in the summary,
:mod:`kvsim.metrics.cost`). Every figure of a point that is not steady state is starred and its
flags named (``unstable``: overloaded; ``too_short``; ``warmup_short``), as the study pages do.

Part 3, offline (``scenarios/weight_offload_offline.yaml``): the same servers as a batch job, a
closed loop holding 16 to 256 requests in flight, output tokens per dollar at each concurrency.
An overloaded open-loop point is no measure of offline throughput: its queue is unbounded, so the
scheduler admits until the KV pool thrashes; a closed loop is steady at a chosen concurrency.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import kvsim
from kvsim.escape import literal_figure_text, plain_log_ticks
from kvsim.models.early_exit_step import EarlyExitStepTime
from kvsim.models.step_time import BatchShape, RooflineStepTime
from kvsim.models.weight_offload import weight_stream

FLEXEE = {"llama-2-7b": {0.0: 1.27, 0.5: 3.16}, "llama-3.1-8b": {0.0: 1.25, 0.5: 2.83}}  # arXiv:2609.17008
NAMES = {"llama-2-7b": "Llama2-7B", "llama-3.1-8b": "Llama3-8B (llama-3.1-8b)"}
STAR = "\\*"  # a literal star in Markdown


def _read(run: Path):
    """(summary.json, the resolved scenario) of a results folder."""
    return json.loads((run / "summary.json").read_text(encoding="utf-8")), kvsim.load_scenario(run / "scenario.yaml")


def _share(spec, system: str) -> float:
    offload = spec.systems[system].instance.weight_offload
    return 0.0 if offload is None else offload.fraction


def _exit_spec(spec, system: str):
    engine = spec.systems[system].engine
    return None if engine is None else engine.early_exit


def step_speed_up(scenario, system: str, exit_system: str, context_tokens: int) -> float:
    """The decode step's closed form at batch 1: step time without exits over the expected one with
    ``exit_system``'s profile, at ``system``'s offload share, each step attending ``context_tokens``."""
    spec, catalogs = scenario.spec, scenario.catalogs
    model = catalogs.models[spec.system_model(system)]
    node = catalogs.nodes[spec.systems[system].node]
    card = catalogs.accelerators[node.accelerator]
    offload = spec.systems[system].instance.weight_offload
    stream = weight_stream(offload, model, card, spec.dtype, None, 1) if offload is not None else None
    plain = RooflineStepTime(model, card, 1, spec.dtype, spec.dtype, stream=stream)
    exits = EarlyExitStepTime(_exit_spec(spec, exit_system), RooflineStepTime(model, card, 1, spec.dtype, spec.dtype),
                              stream)
    shape = BatchShape(decode_seqs=1, decode_context_tokens=context_tokens, sampled_seqs=1)
    return plain.iteration_time_s(shape) / exits.iteration_time_s(shape)


def one_card_rows(summary: dict, scenario) -> list[dict]:
    """One row per (model, offload share): the runs without and with early exit side by side."""
    spec = scenario.spec
    systems = summary["points"][0]["systems"]
    prompt, answer = spec.workload.input_tokens.value, spec.workload.output_tokens.value
    rows = []
    for name in summary["system_names"]:
        if _exit_spec(spec, name) is not None or name + "-exit" not in systems:
            continue
        plain, exits = systems[name], systems[name + "-exit"]
        model, share = spec.system_model(name), _share(spec, name)
        done = plain["e2e_s"]["mean"] is not None and exits["e2e_s"]["mean"] is not None  # a request finished
        rows.append({"model": model, "share": share, "e2e_s": plain["e2e_s"]["mean"],
                     "e2e_exit_s": exits["e2e_s"]["mean"], "tpot_s": plain["tpot_s"]["p50"],
                     "tpot_exit_s": exits["tpot_s"]["p50"],
                     "speed_up": plain["e2e_s"]["mean"] / exits["e2e_s"]["mean"] if done else None,
                     "step_speed_up": step_speed_up(scenario, name, name + "-exit", prompt + answer // 2),
                     "flexee": FLEXEE.get(model, {}).get(share),
                     "flags": sorted(set(plain["flags"] or []) | set(exits["flags"] or []))})
    return rows


def _layout(spec, system: str, run: dict) -> str:
    search = run.get("layout_search") or {}
    if search.get("chosen"):
        return search["chosen"] + " (searched)"
    instance = spec.systems[system].instance
    label = f"tp{instance.tp}" + (f" pp{instance.pp}" if instance.pp > 1 else "")
    return label + (f" offload {instance.weight_offload.fraction:g}" if instance.weight_offload is not None else "")


def datacenter_rows(summary: dict, spec) -> list[dict]:
    """One row per (load, system): goodput and output tokens per second, each also per dollar."""
    rows = []
    for point in summary["points"]:
        rate = ", ".join(str(v) for v in point["params"].values())
        for name in summary["system_names"]:
            run = point["systems"][name]
            hw, cost = run["hardware"], run["cost"]
            per_hour = cost["cost_per_hour_usd"]
            rows.append({"load": rate, "system": name, "cards": hw["cards"], "accelerator": hw["accelerator"],
                         "instances": hw["instances"], "layout": _layout(spec, name, run),
                         "kv_tokens": hw["kv_capacity_tokens_per_instance"] * hw["instances"],
                         "capex_usd": cost["capex_usd"], "usd_per_hour": per_hour,
                         "goodput_rps": run["goodput_requests_per_s"], "rps": run["requests_per_s"],
                         "goodput_per_usd": run["goodput_requests_per_s"] * 3600 / per_hour,
                         "output_tps": run["output_tokens_per_s"],
                         "output_per_usd": run["output_tokens_per_s"] * 3600 / per_hour,
                         "ttft_p99_s": run["ttft_s"]["p99"], "tpot_p50_s": run["tpot_s"]["p50"],
                         "tpot_p99_s": run["tpot_s"]["p99"], "preemptions": run["preemptions"],
                         "flags": list(run["flags"] or []),
                         "verdict": (run.get("layout_search") or {}).get("weight_offload")})
    return rows


def _num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"


def _ms(seconds: float | None) -> str:
    return _num(None if seconds is None else seconds * 1e3)


def page(flexee_run: Path, datacenter_run: Path, offline_run: Path | None = None) -> str:
    """The study page (Markdown) from the results folders (the offline section if ``offline_run``)."""
    f_summary, f_scenario = _read(flexee_run)
    d_summary, d_scenario = _read(datacenter_run)
    fspec, dspec = f_scenario.spec, d_scenario.spec
    w = fspec.workload
    first = f_summary["system_names"][0]
    card = f_scenario.catalogs.nodes[fspec.systems[first].node].accelerator
    exits = next(_exit_spec(fspec, n) for n in f_summary["system_names"] if _exit_spec(fspec, n) is not None)
    heads = [str(layer) for layer in exits.exit_layers if layer < f_scenario.catalogs.models[fspec.system_model(first)].num_layers]
    cost = d_summary["points"][0]["systems"][d_summary["system_names"][0]]["cost"]
    lines = ["# Weight offload and early exit", "",
             "Written by `benchmarks/weight_offload_study.py` from runs of `scenarios/weight_offload_flexee.yaml`, "
             "`scenarios/weight_offload.yaml` and `scenarios/weight_offload_offline.yaml` (its docstring gives the "
             "commands); what it says: "
             "[the how-to page](how-to/study-weight-offload.md). The arithmetic: `kvsim/models/weight_offload.py`, "
             "`kvsim/models/early_exit.py`.", "",
             "## One card: early exit against the offloaded share", "",
             f"One {card} card each (node {fspec.systems[first].node}, one instance; an assumption: FlexEE's testbed is "
             f"not in kvsim's sources), one client at a time (batch 1), {w.input_tokens.value}-token prompts and "
             f"{w.output_tokens.value}-token answers, seed {f_summary['seed']}, arrivals in "
             f"[{f_summary['warmup_s']:g} s, {f_summary['duration_s']:g} s]. Speed-up: the mean end-to-end time of a "
             "request without early exit over that with it, both simulated (prefill runs every layer). Tokens exit "
             f"at layers {', '.join(heads[:-1])} and {heads[-1]} with one share `q` each, the share [docs/early_exit.md](early_exit.md) fits to "
             "FlexEE's 0 % point on the decode step: that fit is the only number taken from FlexEE; every other "
             "cell is predicted. 'Step' is the decode step's closed form at the mean context "
             f"({w.input_tokens.value + w.output_tokens.value // 2} tokens), without prefill.", "",
             "| model | offloaded | E2E without exits (s) | with exits (s) | TPOT p50 without / with (ms) "
             "| speed-up, end to end | step | FlexEE (arXiv:2609.17008) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in one_card_rows(f_summary, f_scenario):
        mark = STAR if r["flags"] else ""
        flexee = f"{r['flexee']:.2f}x" if r["flexee"] is not None else ""
        speed_up = f"{r['speed_up']:.2f}x{mark}" if r["speed_up"] is not None else "-"
        flags = f" ({', '.join(r['flags'])})" if r["flags"] else ""
        lines.append(f"| {NAMES.get(r['model'], r['model'])} | {r['share']:.0%} | {_num(r['e2e_s'])}{mark} "
                     f"| {_num(r['e2e_exit_s'])}{mark} | {_ms(r['tpot_s'])} / {_ms(r['tpot_exit_s'])}{mark} "
                     f"| {speed_up}{flags} | {r['step_speed_up']:.2f}x | {flexee} |")
    rows = datacenter_rows(d_summary, dspec)
    slo = ", ".join(f"{k} <= {v:g} s" for k, v in (("TTFT p99", dspec.slo.ttft_p99), ("TPOT p99", dspec.slo.tpot_p99))
                    if v is not None)
    wd = dspec.workload
    lines += ["", "## The datacenter: Llama-3.1-70B, offload against more cards", "",
              f"{dspec.model} in {dspec.dtype}; prompts lognormal, median {wd.input_tokens.median:g} tokens (at most "
              f"{wd.input_tokens.max:g}), answers median {wd.output_tokens.median:g} (at most {wd.output_tokens.max:g}); "
              f"Poisson arrivals; seed {d_summary['seed']}; arrivals in [{d_summary['warmup_s']:g} s, "
              f"{d_summary['duration_s']:g} s]; SLO {slo}. Goodput counts the requests completed in the window that "
              "met every threshold. Per $ divides by the system's cost per hour (its servers' catalog price "
              f"amortised over {cost['amortisation_h'] / 8760:g} years, and energy at PUE {cost['pue']:g} and "
              f"{cost['energy_usd_per_kwh']:.2f} $/kWh; `kvsim/metrics/cost.py`): requests "
              "within SLO, or output tokens, bought with one dollar. A figure marked `*` is not a steady-state "
              "number and names its flags: `unstable`, the backlog grew through the window (overloaded); "
              "`too_short`; `warmup_short` "
              "([statistics](statistics.md)).", "",
              "| system | hardware | KV room (tokens) | capex | $/h |", "|---|---|---:|---:|---:|"]
    seen = set()
    for r in rows:
        if r["system"] in seen or "searched" in r["layout"]:
            continue
        seen.add(r["system"])
        lines.append(f"| {r['system']} | {r['cards']}x {r['accelerator']}, {r['instances']} x {r['layout']} "
                     f"| {r['kv_tokens']:,} | ${r['capex_usd']:,.0f} | {r['usd_per_hour']:.2f} |")
    searched = [r for r in rows if "searched" in r["layout"]]
    if searched:
        r = searched[0]
        lines.append(f"| {r['system']} | {r['cards']}x {r['accelerator']}, `layout: best` (per load, below) "
                     f"| - | ${r['capex_usd']:,.0f} | {r['usd_per_hour']:.2f} |")
    for load in dict.fromkeys(r["load"] for r in rows):
        lines += ["", f"### {', '.join(dspec.sweep)} = {load}", "",
                  "| system | layout | goodput (req/s) | per $ | output tok/s | per $ | TTFT p99 (s) "
                  "| TPOT p50 (ms) | TPOT p99 (ms) | preemptions |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in (r for r in rows if r["load"] == load):
            mark = STAR if r["flags"] else ""
            cells = [_num(r["goodput_rps"]) + mark + (f" ({', '.join(r['flags'])})" if r["flags"] else ""),
                     _num(r["goodput_per_usd"]) + mark, _num(r["output_tps"]) + mark,
                     _num(r["output_per_usd"]) + mark, _num(r["ttft_p99_s"]) + mark,
                     _ms(r["tpot_p50_s"]) + mark, _ms(r["tpot_p99_s"]) + mark,
                     f"{r['preemptions']:,}"]
            lines.append(f"| {r['system']} | {r['layout']} | " + " | ".join(cells) + " |")
        verdicts = [r for r in rows if r["load"] == load and r["verdict"]]
        for r in verdicts:
            lines += ["", f"Layout search of {r['system']} (30 s pilots): {r['verdict']['verdict']}: "
                          f"{r['verdict']['text']}."]
    if offline_run is not None:
        lines += offline_section(*_read(offline_run))
    return "\n".join(lines) + "\n"


def offline_section(summary: dict, scenario) -> list[str]:
    """The offline part's lines: output tokens per dollar by system and requests in flight, then
    each point's table."""
    spec = scenario.spec
    rows = datacenter_rows(summary, spec)
    loads = list(dict.fromkeys(r["load"] for r in rows))
    field = ", ".join(spec.sweep)
    lines = ["", "## Offline: the same servers as a batch job", "",
             f"`scenarios/weight_offload_offline.yaml`: the same model, workload and servers with no SLO, a closed "
             f"loop of {', '.join(str(v) for v in loads)} clients ({field}) each sending its next request when the "
             f"last one ends, so that many requests are in flight; seed {summary['seed']}; arrivals in "
             f"[{summary['warmup_s']:g} s, {summary['duration_s']:g} s]. Output tokens per dollar (thousands, "
             "per dollar of cost per hour as above) at each concurrency; an offline operator picks the best. "
             "`*`: not steady state, with its flags.", "",
             "| system | layout | " + " | ".join(f"{v} in flight" for v in loads) + " |",
             "|---|---|" + "---:|" * len(loads)]
    for name in summary["system_names"]:
        mine = {r["load"]: r for r in rows if r["system"] == name}
        best = max(mine.values(), key=lambda r: r["output_per_usd"])
        cells = []
        for load in loads:
            r = mine[load]
            cell = _num(r["output_per_usd"] / 1e3) + (STAR if r["flags"] else "")
            cells.append(f"**{cell}**" if r is best else cell)
        lines.append(f"| {name} | {mine[loads[0]]['layout']} | " + " | ".join(cells) + " |")
    lines += ["", "Bold: the system's best concurrency."]
    for load in loads:
        lines += ["", f"### {field} = {load}", "",
                  "| system | output tok/s | per $ | requests/s | TTFT p99 (s) | TPOT p50 (ms) | TPOT p99 (ms) "
                  "| preemptions |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in (r for r in rows if r["load"] == load):
            mark = STAR if r["flags"] else ""
            cells = [_num(r["output_tps"]) + mark + (f" ({', '.join(r['flags'])})" if r["flags"] else ""),
                     _num(r["output_per_usd"]) + mark, _num(r["rps"]) + mark, _num(r["ttft_p99_s"]) + mark,
                     _ms(r["tpot_p50_s"]) + mark, _ms(r["tpot_p99_s"]) + mark, f"{r['preemptions']:,}"]
            lines.append(f"| {r['system']} | " + " | ".join(cells) + " |")
    return lines


def _spread(values: list[float], gap: float) -> list[float]:
    """``values`` moved apart (order kept) so that neighbours are at least ``gap`` apart."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = list(values)
    for a, b in zip(order, order[1:]):
        out[b] = max(out[b], out[a] + gap)
    return out


def _goodput_bars(ax, rows: list[dict], systems: list[str], loads: list, plt) -> None:
    """Horizontal bars: each system's requests within SLO per dollar at each load (a shade per
    load); a bar that is not steady state is hatched; a system with none at any load says so."""
    shades = plt.get_cmap("Blues")([0.35 + 0.6 * k / max(1, len(loads) - 1) for k in range(len(loads))])
    height = 0.8 / len(loads)
    top = max(r["goodput_per_usd"] for r in rows) or 1.0
    for i, system in enumerate(systems):
        rs = {r["load"]: r for r in rows if r["system"] == system}
        for k, load in enumerate(loads):
            r = rs[load]
            y = i - 0.4 + height * (k + 0.5)
            ax.barh(y, r["goodput_per_usd"], height=height * 0.92, color="white" if r["flags"] else shades[k],
                    edgecolor=shades[k], hatch="///" if r["flags"] else None, lw=1.0)
        if all(r["goodput_per_usd"] == 0 for r in rs.values()):
            ax.text(0.02 * top, i, "none within SLO at any load", va="center", fontsize=8.5, color="#444444")
    ax.set_yticks(range(len(systems)))
    ax.set_yticklabels(systems)
    for label, system in zip(ax.get_yticklabels(), systems):
        label.set_color(COLOURS.get(system, "black"))
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.08)
    ax.set_xlabel("requests within SLO per dollar")
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=shades[k], edgecolor=shades[k], label=str(load)) for k, load in enumerate(loads)]
    ax.legend(handles=handles, title="arrival rate", fontsize=8.5, title_fontsize=8.5, loc="lower right")
    ax.set_title("(b) Llama-3.1-70B, one server: goodput per $", fontsize=10.5)


COLOURS = {"l20-tp4": "#1f77b4", "l20-tp4-2x": "#17becf", "l20-tp2-offload": "#9467bd",
           "l20-tp4-offload": "#8c564b", "h20-tp2": "#d62728", "h20-tp1-offload": "#ff7f0e", "l20-best": "#2ca02c",
           "l20-tp2-pp4": "#e377c2"}


@literal_figure_text
def figure(flexee_run: Path, datacenter_run: Path, offline_run: Path, path: Path):
    """Three panels: the one-card speed-up against the offloaded share beside FlexEE's points; the
    datacenter's goodput per dollar by system and load (hatched: not steady state); its offline
    output tokens per dollar against the requests in flight (hollow: not steady state). Returns the
    figure (saved to ``path``)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    f_summary, f_scenario = _read(flexee_run)
    d_summary, d_scenario = _read(datacenter_run)
    fig, axes = plt.subplots(1, 3, figsize=(15.5, 5.2), dpi=110, gridspec_kw={"width_ratios": [1, 1.15, 1.15]})
    ax = axes[0]
    one = one_card_rows(f_summary, f_scenario)
    for model, colour in (("llama-2-7b", "#1f77b4"), ("llama-3.1-8b", "#d62728")):
        rs = sorted((r for r in one if r["model"] == model and r["speed_up"] is not None), key=lambda r: r["share"])
        if not rs:
            continue
        xs, ys = [100 * r["share"] for r in rs], [r["speed_up"] for r in rs]
        ax.plot(xs, ys, "o-", color=colour, lw=2)
        above = model == "llama-2-7b"
        ax.annotate("kvsim, " + NAMES[model].split(" ")[0], (xs[-1], ys[-1]), textcoords="offset points",
                    xytext=(6, 8 if above else -14), color=colour, fontsize=9)
        for share, value in FLEXEE[model].items():
            ax.plot([100 * share], [value], marker="D", ms=10, mfc="none", mec=colour, mew=2, ls="none")
            ax.annotate(f"FlexEE, {NAMES[model].split(' ')[0]}: {value:.2f}x", (100 * share, value),
                        textcoords="offset points", xytext=(12, 14 if above else -18), color=colour, fontsize=8.5)
    ax.set_xlim(-5, 95)
    ax.set_ylim(1.0, 3.5)
    ax.set_xticks([0, 25, 50, 75])
    ax.set_xticklabels(["0%", "25%", "50%", "75%"])
    ax.set_xlabel("weights offloaded to host DRAM")
    ax.set_ylabel("end-to-end speed-up of early exit (x)")
    ax.set_title("(a) one RTX 4090, batch 1: early exit", fontsize=10.5)
    ax.grid(alpha=0.3)
    rows = datacenter_rows(d_summary, d_scenario.spec)
    loads = list(dict.fromkeys(r["load"] for r in rows))
    systems = list(d_summary["system_names"])
    _goodput_bars(axes[1], rows, systems, loads, plt)
    o_summary, o_scenario = _read(offline_run)
    rows = datacenter_rows(o_summary, o_scenario.spec)
    loads = list(dict.fromkeys(r["load"] for r in rows))
    systems = list(o_summary["system_names"])
    ax = axes[2]
    rate = {load: float(str(load).split("/")[0]) for load in loads}
    ends = {}
    for system in systems:
        rs = [r for r in rows if r["system"] == system]
        xs, ys = [rate[r["load"]] for r in rs], [max(r["output_per_usd"], 1.0) / 1e3 for r in rs]
        colour, dash = COLOURS.get(system, "grey"), "--" if "offload" in system else "-"
        ax.plot(xs, ys, dash, color=colour, lw=1.8)
        for x, y, r in zip(xs, ys, rs):
            ax.plot([x], [y], "o", ms=7, color=colour, mfc="white" if r["flags"] else colour, mew=1.5)
        ends[system] = ys[-1]
    ax.set_xscale("log")
    ax.set_xticks([rate[load] for load in loads])
    ax.set_xticklabels([str(load) for load in loads])
    ax.minorticks_off()
    ax.set_xlim(min(rate.values()) / 1.3, max(rate.values()) * 3.4)
    ax.set_xlabel("requests in flight (closed-loop clients)")
    ax.set_ylabel("thousand output tokens per dollar")
    ax.set_yscale("log")
    values = [y for r in rows for y in [r["output_per_usd"] / 1e3] if y > 0]
    ax.set_ylim(min(values) / 1.6, max(values) * 1.6)
    plain_log_ticks(ax.yaxis)
    low, high = (math.log10(v) for v in ax.get_ylim())
    placed = _spread([math.log10(ends[n]) for n in systems], 0.05 * (high - low))
    for name, y in zip(systems, placed):
        ax.text(max(rate.values()) * 1.15, 10 ** y, name, color=COLOURS.get(name, "grey"), va="center", fontsize=8.5)
    ax.grid(alpha=0.3)
    ax.set_title("(c) offline, one server: output tokens per $", fontsize=10.5)
    fig.text(0.995, 0.01, "(b) hatched, (c) hollow: not steady state (overloaded or too short); (c) dashed: weights offloaded",
             ha="right", fontsize=8.5, color="#444444")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path)
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("flexee_run", type=Path, help="results folder of scenarios/weight_offload_flexee.yaml")
    parser.add_argument("datacenter_run", type=Path, help="results folder of scenarios/weight_offload.yaml")
    parser.add_argument("offline_run", type=Path, help="results folder of scenarios/weight_offload_offline.yaml")
    parser.add_argument("--out", type=Path, help="the page to write (default: print it)")
    parser.add_argument("--figure", type=Path, help="the figure to write")
    args = parser.parse_args()
    text = page(args.flexee_run, args.datacenter_run, args.offline_run)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    else:
        print(text)
    if args.figure is not None:
        figure(args.flexee_run, args.datacenter_run, args.offline_run, args.figure)


if __name__ == "__main__":
    main()
