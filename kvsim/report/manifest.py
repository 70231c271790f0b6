"""``manifest.json``: the last file a run writes into its results folder, naming every file the
run wrote with its size and SHA-256, the kvsim version and the scenario.

A folder whose manifest is missing, or whose files do not match it, is not a complete result
(its run was killed, or the folder was changed since). A new run into a folder removes the
outputs of an earlier run that it does not write again (so no stale ``gap.md`` or
``links.parquet`` is left beside new results), and refuses a folder that holds another
scenario's results unless asked to overwrite them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kvsim._version import __version__
from kvsim.atomic import write_text_atomic

__all__ = ["MANIFEST", "read_manifest", "foreign_results", "clear_results", "finish_results", "verify_manifest"]

MANIFEST = "manifest.json"

OPTIONAL_OUTPUTS = ("links.parquet", "storage.parquet", "timeseries.parquet", "decisions.parquet",
                    "switches.parquet", "gap.md", "gap.csv", "gap.png", "pd.md", "pd.csv", "pd_goodput.png",
                    "pd_timeline.png", "options.md", "options.csv", "options.png", "report.md", "report.html",
                    "report_cdf.png", "report_cost.png", "report_latency.png", "report_throughput.png",
                    "report_hit_rates.png")
"""Files a run writes only for some scenarios: removed when a new run into the folder does not
write them again, also from folders written before manifests existed."""


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The folder's manifest, or None if it has none (or an unreadable one)."""
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def foreign_results(out: Path, scenario: str) -> str | None:
    """The name of the other scenario whose results ``out`` holds, or None."""
    manifest = read_manifest(out)
    if manifest is None or manifest.get("scenario") == scenario:
        return None
    return str(manifest.get("scenario"))


def clear_results(out: Path) -> None:
    """Remove what an earlier run wrote into ``out`` (the files its manifest names, its stored
    points); other files are left alone."""
    manifest = read_manifest(out) or {}
    for entry in manifest.get("files", []):
        (out / entry["name"]).unlink(missing_ok=True)
    shutil.rmtree(out / "points", ignore_errors=True)
    (out / MANIFEST).unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def finish_results(out: Path, written: Iterable[Path], scenario: str, seed: int | None) -> Path:
    """Remove the earlier run's outputs this run did not write again, then write the manifest of
    ``written`` (last, so its presence means the results are complete)."""
    names = sorted({Path(p).name for p in written if Path(p).parent.resolve() == out.resolve()})
    previous = read_manifest(out) or {}
    stale = {entry.get("name") for entry in previous.get("files", [])} | set(OPTIONAL_OUTPUTS)
    for name in sorted(n for n in stale if isinstance(n, str) and n not in names):
        if "/" not in name and name != MANIFEST:
            (out / name).unlink(missing_ok=True)
    files = [{"name": name, "bytes": (out / name).stat().st_size, "sha256": _sha256(out / name)} for name in names]
    manifest = {"kvsim_version": __version__, "scenario": scenario, "seed": seed, "files": files}
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return out / MANIFEST


def verify_manifest(out: Path) -> list[str]:
    """What is wrong with ``out`` as a complete result: an empty list if its manifest is present
    and every file it names has the size and hash it records."""
    manifest = read_manifest(out)
    if manifest is None:
        return [f"{out / MANIFEST} is missing: the run that wrote this folder did not finish"]
    problems = []
    for entry in manifest.get("files", []):
        path = out / entry["name"]
        if not path.is_file():
            problems.append(f"{entry['name']} is missing")
        elif path.stat().st_size != entry["bytes"] or _sha256(path) != entry["sha256"]:
            problems.append(f"{entry['name']} differs from what the run wrote")
    return problems
