"""The comparison table of a run, as text: long and compact (issue 10) -- one row per (sweep point,
system), the metrics as columns, each system's goodput relative to the baseline where both are
finite (and, for points with replications, the mean and 95 % interval of the headline metrics in
the same shape; the main rows show replica 0, the run without replications).

A system whose point is flagged as not steady state (``summary["flags"]``, see
:mod:`kvsim.metrics.steady_state`) has every number marked with :data:`FLAG_MARK`, as has every
ratio that involves it, and the table ends with a footnote naming the flags.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from kvsim.escape import terminal_text
from kvsim.sim.result import RunResult

__all__ = ["comparison_table", "hardware_label", "COLUMNS", "ROWS", "FLAG_MARK", "flag_note"]

FLAG_MARK = "*"
_FLAG_MEANING = {
    "unstable": "the backlog grew through the window (arrivals outpace service)",
    "too_short": "too few completions per instance (client), or median latency a large share of the window",
    "warmup_short": "MSER-5 finds the warm-up longer than configured",
    "rejected": "requests that could never fit an instance's KV pool were refused (left out of every number)",
}


def _get(*keys: str) -> Callable[[dict[str, Any]], float | None]:
    def read(summary: dict[str, Any]) -> float | None:
        value: Any = summary
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return read


# (header, reader, scale for display, format): the columns of the comparison table, one row per
# (sweep point, system)
COLUMNS: list[tuple[str, Callable[[dict[str, Any]], Any], float, str]] = [
    ("req/s", _get("requests_per_s"), 1.0, "{:.2f}"),
    ("goodput", _get("goodput_requests_per_s"), 1.0, "{:.2f}"),
    ("tok/s", _get("total_tokens_per_s"), 1.0, "{:.0f}"),
    ("TTFT p50", _get("ttft_s", "p50"), 1.0, "{:.3f}"),
    ("TTFT p99", _get("ttft_s", "p99"), 1.0, "{:.3f}"),
    ("TPOT p50", _get("tpot_s", "p50"), 1e3, "{:.1f}"),
    ("TPOT p99", _get("tpot_s", "p99"), 1e3, "{:.1f}"),
    ("E2E p99", _get("e2e_s", "p99"), 1.0, "{:.2f}"),
    ("KV", _get("kv_utilization_mean"), 100.0, "{:.0f}%"),
    ("preempt", _get("preemptions"), 1.0, "{:.0f}"),
    ("backlog", _get("requests_unfinished"), 1.0, "{:.0f}"),
]
ROWS = COLUMNS  # the name before the table turned long (issue 10)

UNITS = ("req/s: requests completed in the window per s; goodput: those within every SLO threshold; tok/s: "
         "prompt + output tokens processed per s; TTFT, E2E in s, TPOT in ms; KV: mean KV pool utilization; "
         "backlog: requests unfinished when arrivals stop")

def _cell(value: Any, scale: float, fmt: str, flagged: bool = False) -> str:
    if value is None:
        return "-"
    return fmt.format(value * scale) + (FLAG_MARK if flagged else "")


def _ratio(value: Any, base: Any, flagged: bool = False) -> str:
    """``value / base`` only where both are finite numbers and the base is not zero, else "-"."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (value, base)):
        return "-"
    if base == 0:
        return "-"
    return f"{value / base:.2f}x" + (FLAG_MARK if flagged else "")


def flag_note(flags: list[str] | set[str]) -> str:
    """The footnote for flagged numbers (empty when nothing is flagged)."""
    if not flags:
        return ""
    meaning = "; ".join(f"{flag}: {_FLAG_MEANING.get(flag, flag)}" for flag in sorted(flags))
    what = "not a steady-state number" if set(flags) - {"rejected"} else "not the whole workload"
    return f"{FLAG_MARK} {what} ({meaning}); see kvsim.metrics.steady_state and docs/statistics.md"


def _short_names(keys: list[str]) -> list[str]:
    """Swept field paths by their last part (``rate``), unless two would read the same."""
    short = [k.split(".")[-1].strip() for k in keys]
    return short if len(set(short)) == len(short) else keys


def _render(rows: list[list[str]], left: int, text_tail: int = 0) -> list[str]:
    """Aligned text: the first ``left`` and the last ``text_tail`` columns left-aligned (words),
    the others right-aligned (numbers); a rule under the header. Control characters in a cell (a
    name from the scenario) are shown escaped: printed, they must not rewrite the terminal."""
    rows = [[terminal_text(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    words = set(range(left)) | set(range(len(widths) - text_tail, len(widths)))
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) if i in words else cell.rjust(widths[i])
                               for i, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def comparison_table(result: RunResult) -> str:
    """One long text table: a row per (sweep point, system), the metrics as columns, each
    system's goodput relative to the baseline's ("-" unless both are finite and the base is not
    zero); flagged numbers and ratios marked with :data:`FLAG_MARK`; then, for points with
    replications, the mean and 95 % interval of the headline metrics in the same shape."""
    baseline = result.baseline
    systems = list(result.scenario.spec.systems)
    points = result.points()
    first = {s: result.run(s, points[0]) for s in systems}
    swept = list(dict.fromkeys(k for point in points for k in result.run(systems[0], point).params))
    labels = {s: {hardware_label(result.run(s, point).sizing) for point in points} for s in systems}
    per_point = any(len(v) > 1 for v in labels.values())  # a sweep that changes the hardware: a column
    header = (_short_names(swept) + ["system"] + (["hardware"] if per_point else []) + [c[0] for c in COLUMNS]
              + ["SLO", "steady state"])
    with_ratio = len(systems) > 1
    if with_ratio:
        header.insert(len(header) - 2, f"goodput/{baseline}")
    rows = [header]
    seen: set[str] = set()
    for point in points:
        runs = {s: result.run(s, point) for s in systems}
        flags = {s: runs[s].summary.get("flags") or [] for s in systems}
        seen.update(f for s in systems for f in flags[s])
        base_goodput = _get("goodput_requests_per_s")(runs[baseline].summary)
        for s in systems:
            summary = runs[s].summary
            cells = [str(runs[s].params.get(k, "")) for k in swept] + [s]
            cells += [hardware_label(runs[s].sizing)] if per_point else []
            cells += [_cell(read(summary), scale, fmt, bool(flags[s])) for _, read, scale, fmt in COLUMNS]
            if with_ratio:
                cells.append("" if s == baseline else
                             _ratio(_get("goodput_requests_per_s")(summary), base_goodput,
                                    bool(flags[s] or flags[baseline])))
            cells += [_slo_cell(summary.get("slo_met") or {}), ", ".join(flags[s]) if flags[s] else "ok"]
            rows.append(cells)
    lines = _render(rows, len(swept) + 1 + per_point, text_tail=2)
    replicas = _replica_rows(result, points, systems, swept)
    hardware = "; ".join(f"{s}" + ("" if per_point else f" = {hardware_label(first[s].sizing)}")
                         + (" (baseline)" if s == baseline and with_ratio else "") for s in systems)
    title = (f"scenario {terminal_text(result.scenario.name)}: seed {result.seed}, "
             f"measured over {result.window_phrase()}\nsystems: {terminal_text(hardware)}\n{UNITS}")
    note = flag_note(seen)
    skipped = skipped_writes_note(result)
    return (title + "\n\n" + "\n".join(lines) + "\n" + (("\n" + "\n".join(replicas) + "\n") if replicas else "")
            + (f"\n{note}\n" if note else "") + (f"\n{skipped}\n" if skipped else ""))


def skipped_writes_note(result: RunResult) -> str:
    """A line per run whose cache writes were skipped for a full write queue ("" if none did)."""
    lines = []
    for run in result.all_runs():
        cache = run.summary.get("cache") or {}
        parts = [f"{tier} {count:,} ({cache['write_bytes_skipped'][tier] / 1e9:,.1f} GB)"
                 for tier, count in (cache.get("writes_skipped") or {}).items() if count]
        if parts:
            where = ", ".join(f"{k.split('.')[-1].strip()}={v}" for k, v in run.params.items())
            lines.append("  " + terminal_text(f"{run.system}{' at ' + where if where else ''}: ") + ", ".join(parts))
    if not lines:
        return ""
    return ("cache writes skipped (a store's write queue was full, kv_cache.<tier>.max_write_flows; "
            "those blocks were not copied there):\n" + "\n".join(lines))


def hardware_label(sizing) -> str:
    """``8x h20, 8 inst tp1``; a disaggregated system lists its pools with their roles."""
    if len(sizing.pools) == 1 and not sizing.disaggregated:
        p = sizing.pools[0]
        return f"{p.cards}x {p.accelerator.name}, {p.instances} inst {_layout(p)}"
    return " + ".join(f"{p.role[0].upper()}: {p.cards}x {p.accelerator.name} ({p.instances} {_layout(p)})"
                      for p in sizing.pools)


def _layout(pool) -> str:
    """``tp2``; with weight offload ``tp2, 16/32 layers on host`` (an MoE model: ``tp8, 32 cold
    experts of each of 94 MoE layers on host``; ``in the pool`` with ``home: pool``)."""
    stream = pool.stream
    if stream is None:
        return pool.layout.label()
    what = f"{stream.offloaded}/{stream.layers} layers" if not stream.cold_shares else stream.what()
    return pool.layout.label() + f", {what} " + ("on host" if stream.home == "host" else "in the pool")


def _slo_cell(met: dict[str, bool]) -> str:
    if not met:
        return "-"
    failed = [k for k, ok in met.items() if not ok]
    return "yes" if not failed else "no: " + ", ".join(failed)


# (label, headline metric of kvsim.metrics.replicas, scale, format): the rows given a mean and a
# 95 % interval when a point has replications
REPLICA_ROWS: list[tuple[str, str, float, str]] = [
    ("req/s", "requests_per_s", 1.0, "{:.2f}"),
    ("goodput", "goodput_requests_per_s", 1.0, "{:.2f}"),
    ("output tok/s", "output_tokens_per_s", 1.0, "{:.0f}"),
    ("TTFT p99", "ttft_s_p99", 1.0, "{:.3f}"),
    ("TPOT p99", "tpot_s_p99", 1e3, "{:.1f}"),
    ("E2E p99", "e2e_s_p99", 1.0, "{:.2f}"),
]


def _replica_rows(result: RunResult, points: list[int], systems: list[str], swept: list[str]) -> list[str]:
    """Lines giving mean +- 95 % half-width per (point, system), for the points with several replicas."""
    from kvsim.metrics.replicas import replica_statistics

    def cell(entry, scale: float, fmt: str) -> str:
        if entry is None or entry["mean"] is None:
            return "-"
        half = "" if entry["half_width"] is None else " +- " + fmt.format(entry["half_width"] * scale)
        return fmt.format(entry["mean"] * scale) + half

    rows: list[list[str]] = []
    counts = set()
    for point in points:
        n = len(result.runs_of(systems[0], point))
        if n < 2:
            continue
        counts.add(n)
        for s in systems:
            stats = replica_statistics([r.summary for r in result.runs_of(s, point)])
            params = result.run(s, point).params
            rows.append([str(params.get(k, "")) for k in swept] + [s]
                        + [cell(stats.get(key), scale, fmt) for _, key, scale, fmt in REPLICA_ROWS])
    if not rows:
        return []
    header = _short_names(swept) + ["system"] + [label for label, *_ in REPLICA_ROWS]
    label = f"mean +- 95% CI, {'/'.join(str(n) for n in sorted(counts))} replications"
    return [label] + _render([header] + rows, len(swept) + 1)
