"""Result files: ``summary.json``, ``summary.csv``, ``requests.parquet``, the resolved scenario and the
table (docs/results.md).

A run's own files are written without pandas (its import is about 0.15 CPU-s, a tenth of a short
run's whole process): ``requests.parquet`` from an Arrow table of the records
(:meth:`~kvsim.sim.result.RunResult.requests_table`), and ``summary.csv`` by the csv module where
its cells' types are fixed (one point, no replications), with the bytes pandas wrote. A sweep's
``summary.csv`` and the tables of links, storage, tier occupancy and role switches (lists of rows
of varying fields) are still made by pandas, and only when there is something to write.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

from kvsim._version import __version__
from kvsim.atomic import write_atomic, write_text_atomic
from kvsim.report.table import comparison_table
from kvsim.sim.result import RunResult
from kvsim.spec_types import WITH_UNITS

__all__ = ["write_results", "resolved_scenario"]


def _drop_values_read_from_files(node: Any) -> None:
    """Empirical lengths read from a file (anywhere in the workload: its lengths, a phase's, a
    prefix structure's) are re-read from the (absolute) file rather than inlined."""
    if isinstance(node, dict):
        if node.get("kind") == "empirical" and node.get("file"):
            node.pop("values", None)
            return
        for value in node.values():
            _drop_values_read_from_files(value)
    elif isinstance(node, list):
        for value in node:
            _drop_values_read_from_files(value)


def resolved_scenario(result: RunResult) -> dict[str, Any]:
    """The scenario as run, itself a valid scenario: every field explicit, quantities as SI unit
    strings, and the catalog parts it used written out in full under ``catalog:``."""
    context = {WITH_UNITS: True}
    spec = result.scenario.spec.model_dump(mode="json", context=context)
    spec["seed"] = result.seed
    _drop_values_read_from_files(spec["workload"])
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
    """Write the run's result files into ``out_dir`` (created if needed), each whole or not at all
    (:mod:`kvsim.atomic`); returns the paths written. The caller writes the manifest last
    (:func:`kvsim.report.manifest.finish_results`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def parquet(name: str, frame) -> None:
        write_atomic(out / name, lambda path: frame.to_parquet(path, index=False))
        written.append(out / name)

    def text(name: str, content: str) -> None:
        write_text_atomic(out / name, content)
        written.append(out / name)

    write_atomic(out / "requests.parquet", lambda path: _write_table(result.requests_table(), path))
    written.append(out / "requests.parquet")
    write_atomic(out / "summary.csv", lambda path: _write_summary_csv(result, path))
    written.append(out / "summary.csv")
    header = ("# Resolved by kvsim " + __version__ + ": every field explicit, quantities in SI units, catalog\n"
              "# parts in full. Run it again with: kvsim run scenario.yaml\n")
    text("scenario.yaml", header + yaml.safe_dump(resolved_scenario(result), sort_keys=False, allow_unicode=True))
    if source_text is not None:
        text("scenario.source.yaml", source_text)
    for name, rows in (("links.parquet", "links"), ("storage.parquet", "storage"), ("timeseries.parquet", "timeseries"),
                       ("decisions.parquet", "decisions"), ("switches.parquet", "switches")):
        if any(getattr(run, rows) for run in result.runs):  # the frame has rows (made only then)
            parquet(name, getattr(result, f"{rows}_frame")())
    text("table.txt", comparison_table(result))
    # the summary last of the data files: a reader that finds it finds the records it describes
    text("summary.json", json.dumps(result.summary_dict(), indent=2, allow_nan=False) + "\n")
    return written


def _write_table(table, path: Path) -> None:
    """An Arrow table as a Parquet file, as pandas' ``to_parquet`` writes (snappy)."""
    import pyarrow.parquet as pq

    pq.write_table(table, path, compression="snappy")


SUMMARY_CSV_HEADER = ["point", "system", "replica", "metric", "stat", "value"]
"""``summary.csv``'s columns without swept parameters."""


def _write_summary_csv(result: RunResult, path: Path) -> None:
    """``summary.csv``: by the csv module where its cells' types are fixed, as pandas wrote them
    (integers as digits, floats as ``repr``, no quoting unless needed, ``\\n`` line ends); by
    pandas for a sweep or replications (swept parameters of any type, empty replica cells)."""
    rows = result.summary_value_rows()
    if rows is None:
        result.summary_long_frame().to_csv(path, index=False)
        return
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(SUMMARY_CSV_HEADER)
        writer.writerows(rows)
