"""Result files: ``summary.json``, ``requests.parquet``, the resolved scenario and the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from kvsim.report.table import comparison_table
from kvsim.sim.result import RunResult

__all__ = ["write_results", "resolved_scenario"]


def resolved_scenario(result: RunResult) -> dict[str, Any]:
    """The scenario as run: every field with its default, in SI units, plus the catalog parts used."""
    spec = result.scenario.spec.model_dump(mode="json")
    spec["seed"] = result.seed
    for key in ("input_tokens", "output_tokens"):
        dist = spec["workload"][key]
        if dist.get("kind") == "empirical" and dist.get("file"):
            dist["values"] = f"<{len(dist['values'])} values read from {dist['file']}>"
    parts: dict[str, Any] = {"accelerators": {}, "nodes": {}, "models": {}}
    for run in result.runs:
        s = run.sizing
        parts["accelerators"][s.accelerator.name] = s.accelerator.model_dump(mode="json")
        parts["nodes"][s.node.name] = s.node.model_dump(mode="json")
        parts["models"][s.model.name] = s.model.model_dump(mode="json")
    spec["units"] = "SI: seconds, bytes, bytes/s, FLOP/s, 1/s"
    spec["resolved_catalog"] = parts
    return spec


def write_results(result: RunResult, out_dir: str | Path, source_text: str | None = None) -> list[Path]:
    """Write the run's result files into ``out_dir`` (created if needed); returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    summary = out / "summary.json"
    summary.write_text(json.dumps(result.summary_dict(), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    written.append(summary)
    requests = out / "requests.parquet"
    result.requests_frame().to_parquet(requests, index=False)
    written.append(requests)
    resolved = out / "scenario.yaml"
    resolved.write_text(yaml.safe_dump(resolved_scenario(result), sort_keys=False, allow_unicode=True),
                        encoding="utf-8")
    written.append(resolved)
    if source_text is not None:
        source = out / "scenario.source.yaml"
        source.write_text(source_text, encoding="utf-8")
        written.append(source)
    table = out / "table.txt"
    table.write_text(comparison_table(result), encoding="utf-8")
    written.append(table)
    return written
