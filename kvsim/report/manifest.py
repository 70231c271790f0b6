"""``manifest.json``: the last file a run writes into its results folder, naming every file the
run wrote with its size and SHA-256, the kvsim version and the scenario.

A folder whose manifest is missing, or whose files do not match it, is not a complete result
(its run was killed, or the folder was changed since). A new run into a folder removes the
outputs of an earlier run that it does not write again (those its manifest names: so no stale
``gap.md`` or ``links.parquet`` is left beside new results).

Whose folder it is (:func:`folder_refusal`): a folder with a manifest is kvsim's, and takes a new
run of the same scenario; another scenario's results are replaced only when asked
(``--overwrite``). A folder without one is kvsim's too when it holds kvsim's resumable store
(``points/``, ``probes/``: a run that was stopped before its manifest); any other folder is
the user's: it takes a run only if it holds no file of a name the run writes, or when asked to
overwrite, and then only those files are replaced -- kvsim never removes a file it did not write.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kvsim._version import __version__
from kvsim.atomic import sha256_of, write_text_atomic
from kvsim.input_files import InputFileError, read_json

__all__ = ["MANIFEST", "RUN_OUTPUTS", "PLAN_FILES", "PLAN_OUTPUTS", "read_manifest", "foreign_results",
           "folder_refusal", "report_refusal", "replaced_files", "clear_results", "finish_results", "record_files", "verify_manifest"]

MANIFEST = "manifest.json"

OPTIONAL_OUTPUTS = ("links.parquet", "storage.parquet", "timeseries.parquet", "decisions.parquet",
                    "switches.parquet", "gap.md", "gap.csv", "gap.png", "pd.md", "pd.csv", "pd_goodput.png",
                    "pd_timeline.png", "options.md", "options.csv", "options.png", "report.md", "report.html",
                    "report_cdf.png", "report_cost.png", "report_latency.png", "report_throughput.png",
                    "report_hit_rates.png")
"""Files a run writes only for some scenarios."""

STORES = ("points", "probes", "sensitivity")
"""The resumable stores: ``points/<key>/`` of ``kvsim run``, ``probes/<key>.json`` of ``kvsim plan`` and
``sensitivity/<key>.json``, its sensitivity probes (:mod:`kvsim.plan.sensitivity`)."""

RUN_OUTPUTS = ("requests.parquet", "summary.csv", "summary.json", "scenario.yaml", "scenario.source.yaml",
               "table.txt") + OPTIONAL_OUTPUTS + (MANIFEST, "points")
"""Every name ``kvsim run`` may write into its results folder."""

PLAN_FILES = ("plan.json", "plan.md", "plan.html", "plan_capacity.png", "plan_probes.png", "plan_sensitivity.png")
"""The answer and report files ``kvsim plan`` writes (the figures when they have data)."""

PLAN_OUTPUTS = PLAN_FILES + ("scenario.yaml", "deploy", MANIFEST, "probes", "sensitivity")  # scenario.yaml: a quick-mode question, written
"""Every name ``kvsim plan`` may write into its results folder."""

_OWN_NAMES = frozenset(RUN_OUTPUTS + PLAN_OUTPUTS) - {MANIFEST, *STORES}
"""The file names a new run may remove when an earlier run's manifest lists them."""

_KEY = re.compile(r"[0-9a-f]{8,64}")
_SHOWN = 5  # names quoted in a refusal; the rest counted


def _plain_name(name: Any) -> bool:
    """A file name of the folder itself: one path component, never ``.``/``..``, a separator or NUL."""
    return (isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\\\0")
            and name != MANIFEST)


DEPLOY = "deploy"
"""The one folder of files kvsim writes below a results folder (``kvsim plan``'s deployment files,
``deploy/<target>/<system>/<file>``); its files are named in the manifest by that relative path."""
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _deploy_name(name: Any) -> bool:
    """A deployment file's name: ``deploy/`` then two or three components of letters, digits,
    ``_ . -`` (none starting with ``.`` or ``-``)."""
    if not isinstance(name, str):
        return False
    parts = name.split("/")
    return parts[0] == DEPLOY and 3 <= len(parts) <= 4 and all(_PART.fullmatch(p) for p in parts[1:])


def _entry_name(name: Any) -> bool:
    return _plain_name(name) or _deploy_name(name)


def _no_links(out: Path, name: str) -> bool:
    """No component of ``name`` below ``out`` is a symbolic link (a linked folder would lead outside)."""
    path = out
    for part in name.split("/"):
        path = path / part
        if path.is_symlink():
            return False
    return True


def _written_names(out: Path, written: Iterable[Path]) -> list[str]:
    """The manifest names of ``written``: files of ``out`` itself, and deployment files below it."""
    names = set()
    root = out.resolve()
    for p in written:
        path = Path(p)
        if path.parent.resolve() == root:
            names.add(path.name)
            continue
        try:
            relative = path.resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        if _deploy_name(relative) and _no_links(out, relative):
            names.add(relative)
    return sorted(names)


def _load(out: Path) -> dict[str, Any] | None:
    try:  # a regular file, within a size, parsed without a crash: a folder is data from anywhere
        data = read_json(out / MANIFEST, "manifest")
    except InputFileError:
        return None
    if not (isinstance(data, dict) and "kvsim_version" in data and isinstance(data.get("scenario"), str)
            and isinstance(data.get("files"), list)):
        return None
    return data


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The folder's kvsim manifest, or None if it has none (or an unreadable one, or a
    ``manifest.json`` that is not kvsim's). Entries whose name is not a plain file name of the
    folder (``../x``, ``/etc/x``) or a deployment file below it (``deploy/<target>/<system>/<file>``)
    are dropped: nothing outside the folder is ever touched."""
    data = _load(out)
    if data is None:
        return None
    return {**data, "files": [e for e in data["files"] if isinstance(e, dict) and _entry_name(e.get("name"))]}


def _remove_written(out: Path, entry: dict[str, Any]) -> None:
    """Remove the file of a manifest ``entry`` if it is still the one kvsim wrote: a name kvsim
    writes, a regular file, with the size and SHA-256 the entry records. A manifest is data that
    may have been edited: an entry naming a user's file (or one changed since) removes nothing."""
    name = entry.get("name")
    path = out / str(name)
    own = name in _OWN_NAMES or (_deploy_name(name) and _no_links(out, str(name)))
    if not own or path.is_symlink() or not path.is_file():
        return
    try:
        if path.stat().st_size == entry.get("bytes") and sha256_of(path) == entry.get("sha256"):
            path.unlink(missing_ok=True)
    except OSError:
        return


def _is_store(path: Path) -> bool:
    """``path`` is a kvsim store: a folder (not a link to one) whose entries are all named by a
    key (hidden temporaries aside); an empty folder is one too."""
    try:
        return not path.is_symlink() and path.is_dir() and all(_KEY.fullmatch(entry.name.split(".")[0]) for entry in path.iterdir()
                                     if not entry.name.startswith("."))
    except OSError:
        return False


def _holds_store(out: Path) -> bool:
    return any(_is_store(out / name) and any((out / name).iterdir()) for name in STORES)


def foreign_results(out: Path, scenario: str) -> str | None:
    """The name of the other scenario whose results ``out`` holds, or None."""
    manifest = read_manifest(out)
    if manifest is None or manifest["scenario"] == scenario:
        return None
    return manifest["scenario"]


def replaced_files(out: Path, outputs: Iterable[str]) -> list[str]:
    """The names among ``outputs`` that ``out`` already holds and that are not kvsim's own (a
    kvsim store, which a run adds to, is not replaced)."""
    return [name for name in outputs if (out / name).exists() and not (name in STORES and _is_store(out / name))]


def _quoted(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" (and {len(names) - _SHOWN} more)" if len(names) > _SHOWN else "")


def folder_refusal(out: Path, scenario: str, outputs: Iterable[str], overwrite: bool) -> str | None:
    """Why a run of ``scenario`` writing ``outputs`` (:data:`RUN_OUTPUTS`, :data:`PLAN_OUTPUTS`)
    must not write into the existing folder ``out``, or None when it may: ``out`` holds another
    scenario's results, or is not kvsim's (no manifest, no store) and holds files the run would
    replace. ``overwrite`` allows both."""
    if overwrite:
        return None
    other = foreign_results(out, scenario)
    if other is not None:
        return (f"{out} holds the results of scenario {other!r}, not {scenario!r}: give another --out, or "
                f"--overwrite to replace them")
    if read_manifest(out) is not None or _holds_store(out):
        return None
    mine = replaced_files(out, outputs)
    if not mine:
        return None
    return (f"{out} is not a kvsim results folder (it has no kvsim {MANIFEST}) and holds files of names kvsim "
            f"writes ({_quoted(mine)}): give another --out, or --overwrite to replace those this run writes "
            f"(nothing else in the folder is touched)")


def report_refusal(out: Path, results: Path, names: Iterable[str], overwrite: bool) -> str | None:
    """Why ``kvsim report RESULTS --out OUT`` must not write the files ``names``, or None: ``out``
    holds files of those names that kvsim did not write there (only files ``out``'s manifest
    names, when ``out`` is the results folder itself, are kvsim's to replace). ``overwrite``
    allows it."""
    if overwrite:
        return None
    manifest = read_manifest(out) if out.resolve() == results.resolve() else None
    own = {entry["name"] for entry in (manifest or {}).get("files", [])}
    clashing = [name for name in names if (out / name).exists() and name not in own]
    if not clashing:
        return None
    return (f"{out} already holds {_quoted(clashing)}, which this report would overwrite: give another --out "
            f"or --name, or --overwrite to replace them")


def clear_results(out: Path) -> None:
    """Remove what an earlier kvsim run wrote into ``out``: the files its manifest names, its
    stores (``points/``, ``probes/``) and the manifest. Other files are left alone, and so is a
    folder named like a store that is not one."""
    manifest = read_manifest(out)
    for entry in (manifest or {}).get("files", []):
        _remove_written(out, entry)
    for name in STORES:
        if _is_store(out / name):
            shutil.rmtree(out / name, ignore_errors=True)
    if manifest is not None:
        (out / MANIFEST).unlink(missing_ok=True)


def finish_results(out: Path, written: Iterable[Path], scenario: str, seed: int | None) -> Path:
    """Remove the earlier run's outputs (those its manifest names) this run did not write again,
    then write the manifest of ``written`` (last, so its presence means the results are complete)."""
    names = _written_names(out, written)
    previous = read_manifest(out) or {}
    for entry in previous.get("files", []):
        if entry["name"] not in names:
            _remove_written(out, entry)
    files = [{"name": name, "bytes": (out / name).stat().st_size, "sha256": sha256_of(out / name)} for name in names]
    manifest = {"kvsim_version": __version__, "scenario": scenario, "seed": seed, "files": files}
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return out / MANIFEST


def record_files(out: Path, written: Iterable[Path]) -> bool:
    """Add ``written`` (files kvsim wrote into ``out`` after its run, e.g. a report rendered again)
    to ``out``'s manifest with their new sizes and hashes, so it still verifies; False (and
    nothing written) when ``out`` has no manifest."""
    manifest = read_manifest(out)
    if manifest is None:
        return False
    names = _written_names(out, written)
    entries = {e["name"]: e for e in manifest["files"]}
    for name in names:
        entries[name] = {"name": name, "bytes": (out / name).stat().st_size, "sha256": sha256_of(out / name)}
    manifest["files"] = [entries[name] for name in sorted(entries)]
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return True


def verify_manifest(out: Path) -> list[str]:
    """What is wrong with ``out`` as a complete result: an empty list if its manifest is present
    and every file it names has the size and hash it records."""
    manifest = _load(out)
    if manifest is None:
        return [f"{out / MANIFEST} is missing (or not a kvsim manifest): the run that wrote this folder did not "
                f"finish"]
    problems = []
    for entry in manifest["files"]:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not _entry_name(name) or not _no_links(out, str(name)):
            problems.append(f"{MANIFEST} names {name!r}, which is not a file of this folder")
            continue
        path = out / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != entry.get("bytes") or sha256_of(path) != entry.get("sha256"):
            problems.append(f"{name} differs from what the run wrote")
    return problems
