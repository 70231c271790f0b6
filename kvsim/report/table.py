"""Side-by-side text tables: one column per system, plus each system's ratio to the baseline (and,
for a point with replications, the mean and 95 % interval of the headline metrics; the main
table shows replica 0, the run without replications).

A system whose point is flagged as not steady state (``summary["flags"]``, see
:mod:`kvsim.metrics.steady_state`) has every number marked with :data:`FLAG_MARK`, as has every
ratio that involves it, and the table ends with a footnote naming the flags.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from kvsim.sim.result import RunResult

__all__ = ["comparison_table", "hardware_label", "ROWS", "FLAG_MARK", "flag_note"]

FLAG_MARK = "*"
_FLAG_MEANING = {
    "unstable": "the backlog grew through the window (arrivals outpace service)",
    "too_short": "too few completions per instance (client), or median latency a large share of the window",
    "warmup_short": "MSER-5 finds the warm-up longer than configured",
}


def _get(*keys: str) -> Callable[[dict[str, Any]], float | None]:
    def read(summary: dict[str, Any]) -> float | None:
        value: Any = summary
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    return read


# (label, reader, scale for display, format)
ROWS: list[tuple[str, Callable[[dict[str, Any]], Any], float, str]] = [
    ("requests completed", _get("requests_completed"), 1.0, "{:.0f}"),
    ("requests unfinished at end", _get("requests_unfinished"), 1.0, "{:.0f}"),
    ("throughput (requests/s)", _get("requests_per_s"), 1.0, "{:.2f}"),
    ("goodput (requests/s in SLO)", _get("goodput_requests_per_s"), 1.0, "{:.2f}"),
    ("output tokens/s (emitted in window)", _get("output_tokens_per_s"), 1.0, "{:.0f}"),
    ("input tokens/s (prompts done in window)", _get("input_tokens_per_s"), 1.0, "{:.0f}"),
    ("total tokens/s", _get("total_tokens_per_s"), 1.0, "{:.0f}"),
    ("TTFT mean (s)", _get("ttft_s", "mean"), 1.0, "{:.3f}"),
    ("TTFT p50 (s)", _get("ttft_s", "p50"), 1.0, "{:.3f}"),
    ("TTFT p99 (s)", _get("ttft_s", "p99"), 1.0, "{:.3f}"),
    ("TPOT mean (ms)", _get("tpot_s", "mean"), 1e3, "{:.1f}"),
    ("TPOT p50 (ms)", _get("tpot_s", "p50"), 1e3, "{:.1f}"),
    ("TPOT p99 (ms)", _get("tpot_s", "p99"), 1e3, "{:.1f}"),
    ("E2E p50 (s)", _get("e2e_s", "p50"), 1.0, "{:.2f}"),
    ("E2E p99 (s)", _get("e2e_s", "p99"), 1.0, "{:.2f}"),
    ("KV pool utilization (mean)", _get("kv_utilization_mean"), 100.0, "{:.1f}%"),
    ("preemptions", _get("preemptions"), 1.0, "{:.0f}"),
]


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
    return (f"{FLAG_MARK} not a steady-state number ({meaning}); see kvsim.metrics.steady_state "
            "and docs/statistics.md")


def comparison_table(result: RunResult) -> str:
    """A text table per sweep point: metrics by system, and each system's ratio to the baseline."""
    baseline = result.baseline
    systems = list(result.scenario.spec.systems)
    others = [s for s in systems if s != baseline]
    blocks = []
    seen: set[str] = set()
    for point in result.points():
        runs = {s: result.run(s, point) for s in systems}
        flags = {s: runs[s].summary.get("flags") or [] for s in systems}
        seen.update(f for s in systems for f in flags[s])
        header = ["metric"] + systems + [f"{s}/{baseline}" for s in others]
        rows = [header]
        for label, read, scale, fmt in ROWS:
            values = {s: read(runs[s].summary) for s in systems}
            rows.append([label] + [_cell(values[s], scale, fmt, bool(flags[s])) for s in systems]
                        + [_ratio(values[s], values[baseline], bool(flags[s] or flags[baseline])) for s in others])
        rows.append(["steady state"] + [", ".join(flags[s]) if flags[s] else "ok" for s in systems]
                    + [""] * len(others))
        hardware = ["hardware"] + [hardware_label(r.sizing) for r in runs.values()] + [""] * len(others)
        rows.insert(1, hardware)
        slo = runs[baseline].summary.get("slo_met", {})
        if slo:
            rows.append(["SLO p99 met (" + ", ".join(slo) + ")"]
                        + [_slo_cell(runs[s].summary["slo_met"]) for s in systems] + [""] * len(others))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines = []
        params = runs[baseline].params
        if params:
            lines.append("sweep point " + ", ".join(f"{k} = {v}" for k, v in params.items()))
        for n, row in enumerate(rows):
            lines.append("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i])
                                   for i, cell in enumerate(row)))
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        replicas = _replica_block(result, point, systems)
        blocks.append("\n".join(lines + replicas))
    title = (f"scenario {result.scenario.name}: seed {result.seed}, "
             f"measured over [{result.scenario.spec.warmup:g} s, {result.scenario.spec.duration:g} s] "
             f"of simulated time; ratios are system / {baseline}")
    note = flag_note(seen)
    return title + "\n\n" + "\n\n".join(blocks) + "\n" + (f"\n{note}\n" if note else "")


def hardware_label(sizing) -> str:
    """``8x h20, 8 inst tp1``; a disaggregated system lists its pools with their roles."""
    if len(sizing.pools) == 1 and not sizing.disaggregated:
        p = sizing.pools[0]
        return f"{p.cards}x {p.accelerator.name}, {p.instances} inst {p.layout.label()}"
    return " + ".join(f"{p.role[0].upper()}: {p.cards}x {p.accelerator.name} ({p.instances} {p.layout.label()})"
                      for p in sizing.pools)


def _slo_cell(met: dict[str, bool]) -> str:
    return "yes" if met and all(met.values()) else ("no (" + ", ".join(k for k, ok in met.items() if not ok) + ")")


# (label, headline metric of kvsim.metrics.replicas, scale, format): the rows given a mean and a
# 95 % interval when a point has replications
REPLICA_ROWS: list[tuple[str, str, float, str]] = [
    ("throughput (requests/s)", "requests_per_s", 1.0, "{:.2f}"),
    ("goodput (requests/s in SLO)", "goodput_requests_per_s", 1.0, "{:.2f}"),
    ("output tokens/s", "output_tokens_per_s", 1.0, "{:.0f}"),
    ("TTFT p99 (s)", "ttft_s_p99", 1.0, "{:.3f}"),
    ("TPOT p99 (ms)", "tpot_s_p99", 1e3, "{:.1f}"),
    ("E2E p99 (s)", "e2e_s_p99", 1.0, "{:.2f}"),
]


def _replica_block(result: RunResult, point: int, systems: list[str]) -> list[str]:
    """Lines giving mean +- 95 % half-width per system, when the point has several replicas."""
    from kvsim.metrics.replicas import replica_statistics

    stats = {s: replica_statistics([r.summary for r in result.runs_of(s, point)]) for s in systems}
    n = len(result.runs_of(systems[0], point))
    if n < 2:
        return []

    def cell(entry, scale: float, fmt: str) -> str:
        if entry is None or entry["mean"] is None:
            return "-"
        half = "" if entry["half_width"] is None else " +- " + fmt.format(entry["half_width"] * scale)
        return fmt.format(entry["mean"] * scale) + half

    rows = [[f"mean +- 95% CI, {n} replications"] + systems]
    for label, key, scale, fmt in REPLICA_ROWS:
        rows.append([label] + [cell(stats[s].get(key), scale, fmt) for s in systems])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [""]
    for k, row in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines
