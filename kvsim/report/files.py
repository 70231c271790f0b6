"""Result files: ``summary.json``, ``summary.csv``, ``requests.parquet``, the resolved scenario and the
table (docs/results.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kvsim._version import __version__
from kvsim.report.table import comparison_table
from kvsim.sim.result import RunResult
from kvsim.spec_types import WITH_UNITS

__all__ = ["write_results", "resolved_scenario"]


def resolved_scenario(result: RunResult) -> dict[str, Any]:
    """The scenario as run, itself a valid scenario: every field explicit, quantities as SI unit
    strings, and the catalog parts it used written out in full under ``catalog:``."""
    context = {WITH_UNITS: True}
    spec = result.scenario.spec.model_dump(mode="json", context=context)
    spec["seed"] = result.seed
    for key in ("input_tokens", "output_tokens"):
        dist = spec["workload"].get(key)
        if dist and dist.get("kind") == "empirical" and dist.get("file"):
            del dist["values"]  # re-read from the (absolute) file rather than inlined
    for system in spec["systems"].values():
        # one of the two forms: the single-pool fields, or pools
        for key in (("node", "nodes", "instance", "instances") if system.get("pools") else ("pools",)):
            system.pop(key, None)
    arrival = spec["workload"]["arrival"]
    base_dir = result.scenario.base_dir
    traces = [arrival] + [phase["arrival"] for phase in arrival.get("phases", [])]
    for trace in traces:
        if trace.get("kind") == "trace" and base_dir is not None:
            trace["file"] = str((base_dir / trace["file"]).resolve())
    parts: dict[str, dict[str, Any]] = {"accelerators": {}, "nodes": {}, "pool_nodes": {}, "models": {}}
    for run in result.runs:
        s = run.sizing
        used = [("models", s.model)] + [item for p in s.pools for item in (("accelerators", p.accelerator),
                                                                          ("nodes", p.node))]
        if s.pool_node is not None:
            used.append(("pool_nodes", s.pool_node))
        for family, part in used:
            fields = part.model_dump(mode="json", context=context)
            fields.pop("name")
            parts[family][part.name] = fields
    spec["catalog"] = parts
    return spec


def write_results(result: RunResult, out_dir: str | Path, source_text: str | None = None) -> list[Path]:
    """Write the run's result files into ``out_dir`` (created if needed); returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    summary = out / "summary.json"
    summary.write_text(json.dumps(result.summary_dict(), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    written.append(summary)
    long = out / "summary.csv"
    result.summary_long_frame().to_csv(long, index=False)
    written.append(long)
    requests = out / "requests.parquet"
    result.requests_frame().to_parquet(requests, index=False)
    written.append(requests)
    resolved = out / "scenario.yaml"
    header = (f"# Resolved by kvsim {__version__}: every field explicit, quantities in SI units, catalog\n"
              f"# parts in full. Run it again with: kvsim run {resolved.name}\n")
    resolved.write_text(header + yaml.safe_dump(resolved_scenario(result), sort_keys=False, allow_unicode=True),
                        encoding="utf-8")
    written.append(resolved)
    if source_text is not None:
        source = out / "scenario.source.yaml"
        source.write_text(source_text, encoding="utf-8")
        written.append(source)
    for name, frame in (("links.parquet", result.links_frame()), ("storage.parquet", result.storage_frame()),
                        ("timeseries.parquet", result.timeseries_frame()),
                        ("decisions.parquet", result.decisions_frame()), ("switches.parquet", result.switches_frame())):
        if len(frame):
            frame.to_parquet(out / name, index=False)
            written.append(out / name)
    table = out / "table.txt"
    table.write_text(comparison_table(result), encoding="utf-8")
    written.append(table)
    return written
