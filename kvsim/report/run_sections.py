"""The sections of a run report past its answer and comparison (:mod:`kvsim.report.run_report`):
replications, cache and links, cost, assumptions with their sources, flags; and the cell
formatting they share. Each reads the saved results only."""

from __future__ import annotations

from typing import Any

from kvsim.report.document import Document
from kvsim.report.run_data import Row, RunResults, metric, rows, window_phrase
from kvsim.report.run_figures import figure_cost, figure_hit_rates
from kvsim.report.table import FLAG_MARK, flag_note

__all__ = ["cost_assumptions", "catalog_sources", "add_sections", "replications_section"]


def _cell(value: float | None, scale: float, fmt: str, flagged: bool) -> str:
    if value is None:
        return "-"
    return fmt.format(value * scale) + (FLAG_MARK if flagged else "")


def _num(value: float) -> str:
    """Three significant figures, whole numbers from 1,000 up (1,250, not 1.25e+03)."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def value_label(key: str, value: Any) -> str:
    """A swept value as read in a sentence: ``20/s``, ``16 clients``."""
    if not key.strip().endswith("clients"):
        return str(value)
    return f"{value} client" if str(value) == "1" else f"{value} clients"


def _point_label(row: Row) -> str:
    return ", ".join(value_label(k, v) for k, v in row.params.items())


def cost_assumptions(results: RunResults) -> list[str]:
    """Every assumption the cost summaries name, once each, with the systems they apply to."""
    seen: dict[str, list[str]] = {}
    for p in results.points:
        for system in results.systems:
            cost = p["systems"][system].get("cost") or {}
            for text in cost.get("assumptions") or []:
                systems = seen.setdefault(str(text), [])
                if system not in systems:
                    systems.append(system)
    return [f"{text} ({', '.join(systems)})" for text, systems in seen.items()]


def _lookup(part: dict[str, Any], dotted: str) -> Any:
    value: Any = part
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


_SHOWN_UNITS = {"B": (1e9, "GB"), "B/s": (1e9, "GB/s"), "FLOP/s": (1e12, "TFLOP/s"), "W": (1.0, "W"),
                "s": (1.0, "s")}


def _shown(value: Any) -> str:
    """A catalog value as read in a table: ``96 GB``, ``4e+03 GB/s``; mappings as ``key value``."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_shown(v)}" for k, v in value.items())
    if value is None or isinstance(value, list):
        return ""
    text = str(value)
    number, _, unit = text.partition(" ")
    if unit in _SHOWN_UNITS:
        try:
            factor, name = _SHOWN_UNITS[unit]
            return f"{float(number) / factor:.4g} {name}"
        except ValueError:
            return text
    return text


def catalog_sources(results: RunResults) -> list[list[str]]:
    """``[family, part, field, value, source]`` for every sourced figure of the catalog parts the run
    used (the resolved scenario's ``catalog:``)."""
    out = []
    for family, parts in (results.scenario.get("catalog") or {}).items():
        for name, part in (parts or {}).items():
            for key, source in ((part or {}).get("sources") or {}).items():
                shown = _shown(_lookup(part, key))
                out.append([family, name, key, shown, " ".join(str(source).split())])
    return out


def replications_section(doc: Document, results: RunResults) -> None:
    if int(results.summary.get("replications") or 1) < 2:
        return
    keys = [("goodput (req/s)", "goodput_requests_per_s", 1.0), ("total tok/s", "total_tokens_per_s", 1.0),
            ("TTFT p99 (s)", "ttft_s_p99", 1.0), ("TPOT p99 (ms)", "tpot_s_p99", 1e3)]
    body = []
    for row in rows(results):
        stats = ((row.summary.get("replicas") or {}).get("metrics") or {})
        cells = [_point_label(row) or "-", row.system]
        for _, key, scale in keys:
            entry = stats.get(key) or {}
            mean, half = entry.get("mean"), entry.get("half_width")
            cells.append("-" if mean is None else _num(mean * scale) + ("" if half is None else
                                                                      f" ± {_num(half * scale)}"))
        body.append(cells)
    doc.heading("Replications", 3)
    doc.table(["point", "system"] + [k[0] for k in keys], body,
              f"Mean ± 95 % Student-t half-width over {results.summary['replications']} replications "
              f"(the table above shows replica 0).")


def _cache_section(doc: Document, all_rows: list[Row], stem: str) -> None:
    cached = [r for r in all_rows if isinstance(r.summary.get("cache"), dict)]
    linked = [(r, links) for r in all_rows
              if (links := ((r.summary.get("cache") or {}).get("busiest_links")
                            or (r.summary.get("pd") or {}).get("busiest_links")))]
    if not cached and not linked:
        return
    doc.heading("Cache and links")
    tiers = [t for t in ("hbm", "peer_hbm", "other_domain", "dram", "nvme", "remote")
             if any(metric(r.summary, f"cache.hit_rate.{t}") for r in cached)]
    if cached:
        doc.table(["point", "system"] + [f"hit {t}" for t in tiers] + ["hit total", "bound"],
                  [[_point_label(r) or "-", r.system]
                   + [_cell(metric(r.summary, f"cache.hit_rate.{t}"), 100.0, "{:.1f}%", bool(r.flags)) for t in tiers]
                   + [_cell(metric(r.summary, "cache.hit_rate.total"), 100.0, "{:.1f}%", bool(r.flags)),
                      str(r.summary.get("bound") or "-")] for r in cached],
                  "Share of prompt tokens served from each tier (the rest computed).")
        figure = figure_hit_rates(all_rows, tiers, stem)
        if figure is not None:
            doc.figure(figure)
        skipped = _skipped_writes(cached)
        if skipped:
            doc.table(["point", "system", "tier", "writes skipped", "GB skipped", "GB written", "peak write flows"],
                      skipped, "Cache writes refused because the store's write queue was full "
                      "(kv_cache.<tier>.max_write_flows): those blocks were not copied to that tier.")
    if linked:
        body = []
        for r, links in linked:
            for link in links[:3]:
                body.append([_point_label(r) or "-", r.system, str(link.get("link")),
                             _cell(metric(link, "utilization_mean"), 100.0, "{:.1f}%", bool(r.flags)),
                             _cell(metric(link, "bytes"), 1e-9, "{:,.1f}", bool(r.flags))])
        doc.table(["point", "system", "link", "mean utilization", "GB moved"], body,
                  "The three busiest links of each system and point (links.parquet has every link).")


def _skipped_writes(cached: list[Row]) -> list[list[str]]:
    """One row per (run, tier) that skipped cache writes (none: an empty list)."""
    body = []
    for r in cached:
        cache = r.summary["cache"]
        for tier, count in (cache.get("writes_skipped") or {}).items():
            if count:
                body.append([_point_label(r) or "-", r.system, tier, f"{count:,}",
                             _cell(metric(cache, f"write_bytes_skipped.{tier}"), 1e-9, "{:,.1f}", bool(r.flags)),
                             _cell(metric(cache, f"bytes_written.{tier}"), 1e-9, "{:,.1f}", bool(r.flags)),
                             str((cache.get("write_flows_peak") or {}).get(tier, "-"))])
    return body


def _cost_section(doc: Document, all_rows: list[Row], stem: str) -> None:
    costed = [r for r in all_rows if isinstance(r.summary.get("cost"), dict)]
    if not costed:
        return
    doc.heading("Cost")
    doc.table(["point", "system", "USD/h", "USD/M output tok", "USD/M prompt tok", "goodput req/USD", "unknown"],
              [[_point_label(r) or "-", r.system, _cell(metric(r.summary, "cost.cost_per_hour_usd"), 1, "{:.3g}", False),
                _cell(metric(r.summary, "cost.usd_per_million_output_tokens"), 1, "{:.3g}", bool(r.flags)),
                _cell(metric(r.summary, "cost.usd_per_million_prompt_tokens"), 1, "{:.3g}", bool(r.flags)),
                _cell(metric(r.summary, "cost.goodput_requests_per_usd"), 1, "{:,.0f}", bool(r.flags)),
                "; ".join(r.summary["cost"].get("unknown") or []) or "-"] for r in costed],
              "Hourly cost: amortised capex + energy (IT power x PUE x price) + opex (docs/cost.md). A per-token "
              "figure is a capacity cost only at a point that meets its SLO and is not flagged.")
    figure = figure_cost(all_rows, stem)
    if figure is not None:
        doc.figure(figure)


def _failures_section(doc: Document, all_rows: list[Row]) -> None:
    """Runs with node failures (``systems.NAME.failures``): availability, failures, retries and
    the SLO the retried requests met."""
    failing = [r for r in all_rows if isinstance(r.summary.get("failures"), dict)]
    if not failing:
        return
    doc.heading("Node failures")

    def share(value: Any) -> str:
        return "-" if value is None else f"{100 * value:.1f} %"

    rows = []
    for r in failing:
        f = r.summary["failures"]
        rows.append([_point_label(r) or "-", r.system, str(f["node_failures"]),
                     f"{share(f['node_availability_mean'])} ({share(f['node_availability_expected'])})",
                     share(f["instance_availability_mean"]), f"{f['retried_requests']:,}",
                     _cell(f["retry_lost_s_mean"], 1, "{:.3g}", False),
                     f"{share(f.get('ttft_slo_met_retried'))} / {share(f.get('ttft_slo_met_not_retried'))}",
                     f"{share(f.get('e2e_slo_met_retried'))} / {share(f.get('e2e_slo_met_not_retried'))}"])
    doc.table(["point", "system", "node failures", "nodes up (closed form)", "instances up", "retried requests",
               "time lost per retried (s)", "TTFT SLO met: retried / others", "E2E SLO met: retried / others"], rows,
              "Over the measured window. Nodes up: the share of time a node was up, and the closed form "
              "MTBF / (MTBF + repair) it tends to; instances up: the share of time an instance served (a rebuild "
              "keeps it down after its node is back). A retried request started over from its prompt when an "
              "instance holding it failed; its latencies are its last attempt's, from its arrival.")


def _assumptions(doc: Document, results: RunResults) -> None:
    s = results.summary
    doc.heading("Assumptions")
    warmup = (f"the warm-up MSER-5 found in each run (window {window_phrase(results).split(' of ')[0]})"
              if s.get("warmup") == "mser5" else f"a {s['warmup_s']:g} s warm-up")
    items = [f"Each point simulates {s['duration_s']:g} s of arrivals and measures after {warmup}, then drains so every request that arrived in the window finishes (none is censored).",
             f"Root seed {s.get('seed')}; every system of a point sees the same drawn requests.",
             "Figures come from the model and the catalog, not from measurements of real deployments."]
    costs = cost_assumptions(results)
    items += costs
    sources = catalog_sources(results)
    for family, part, key, value, source in sources:
        # the cost model names its own (price, power) once already
        if "assumption" in source.lower() and not any(f"{part} {key} =" in text for text in costs):
            items.append(f"{family.removesuffix('s').replace('_', ' ')} {part} {key}"
                         + (f" = {value}" if value else "") + f": {source}")
    doc.items(items)
    if sources:
        doc.heading("Sources of the catalog figures", 3)
        doc.table(["family", "part", "field", "value", "source"], sources,
                  "From the resolved scenario.yaml (catalog:), as used by this run.")
    elif not results.scenario:
        doc.paragraph("No scenario.yaml beside the summary: the catalog figures' sources are not shown.")


def _flags(doc: Document, all_rows: list[Row]) -> None:
    doc.heading("Flags")
    flagged = [r for r in all_rows if r.flags]
    if not flagged:
        doc.paragraph("No point is flagged: every number above is a steady-state measurement by the criteria of "
                      "docs/statistics.md.")
        return
    body = []
    for r in flagged:
        st = r.summary.get("steady_state") or {}
        body.append([_point_label(r) or "-", r.system, ", ".join(r.flags),
                     _cell(metric(st, "in_system_growth_share"), 100.0, "{:+.1f}%", False),
                     _cell(metric(st, "completions_per_instance") or metric(st, "completions_per_client"), 1.0,
                           "{:.0f}", False),
                     _cell(metric(st, "e2e_p50_window_share"), 100.0, "{:.0f}%", False),
                     _cell(metric(st, "mser5_warmup_s"), 1.0, "{:.3g} s", False)])
    doc.table(["point", "system", "flags", "backlog growth", "completions per instance", "E2E p50 / window",
               "MSER-5 warm-up"], body,
              flag_note({f for r in flagged for f in r.flags}) + ". Thresholds: unstable when the backlog grows "
              "by more than 5 % of the window's arrivals (and 10 requests); too_short under 20 completions per "
              "instance (10 per client) or a median E2E above 10 % of the window.")


def add_sections(doc: Document, results: RunResults, all_rows: list[Row], stem: str) -> None:
    """Cache and links, cost, node failures, assumptions and flags, in that order."""
    _cache_section(doc, all_rows, stem)
    _cost_section(doc, all_rows, stem)
    _failures_section(doc, all_rows)
    _assumptions(doc, results)
    _flags(doc, all_rows)
