"""The files a scenario references, opened and checked when it loads (``kvsim validate`` and
``kvsim run`` alike), with errors naming the scenario's line *and* the line inside the file::

    s.yaml:5: workload.arrival.file: traces/t.csv:3: input_tokens: must be >= 1, got -20

- **Length files** (``{kind: empirical, file: ..., column: ...}`` anywhere under ``workload:``) are
  read into the distribution's ``values`` (:func:`resolve_length_files`), their path made absolute
  so a resolved copy of the scenario re-runs from anywhere.
- **Trace files** (``arrival: {kind: trace, ...}``, also as a phase's arrival) are read by the
  same loader the run uses (:meth:`kvsim.workload.TraceSpec.load`), once per distinct trace and
  window over the sweep points (:func:`trace_problems`); the run reads them again (the parsed
  requests are not kept: a sweep's points travel to worker processes, and a million-row trace
  is cheaper to re-read there than to send).
- **Calibration files** are read by :mod:`kvsim.calibration.calibfile`, which checks them the same way.

What the loaders check is in :mod:`kvsim.input_files` (path, type, size, encoding) and
:mod:`kvsim.workload.traces` (rows).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path as FsPath
from typing import Any

from kvsim.input_files import InputFileError
from kvsim.scenario.problems import PointProblems
from kvsim.scenario.sweep import split_path, zipped_paths
from kvsim.workload.arrivals import PhasedArrivals
from kvsim.workload.length_files import read_length_file
from kvsim.workload.traces import TraceSpec
from kvsim.yaml_io import Located, Path, SpecError

__all__ = ["resolve_length_files", "swept_length_files", "trace_problems", "trace_specs"]


def resolve_length_files(data: dict[str, Any], located: Located, base_dir: FsPath | None) -> dict[str, Any]:
    """``data`` with every empirical length distribution's ``file`` read into ``values`` (a new
    dict; ``data`` is not changed).

    Raises
    ------
    SpecError
        ``scenario:line: workload...file: <file>:<line>: <problem>`` for the first bad file.
    """
    workload = data.get("workload")
    if not isinstance(workload, dict):
        return data
    found = list(_empirical_files(workload, ("workload",)))
    if not found:
        return data
    out = copy.deepcopy(data)
    for path in found:
        problem = _read_into(_at(out, path), path, base_dir)
        if problem is not None:
            raise SpecError([located.problem(*problem)])
    return out


def swept_length_files(point_raw: dict[str, Any], params: dict[str, Any], base_dir: FsPath | None
                       ) -> tuple[dict[str, Any], list[tuple[Path, str]]]:
    """``point_raw`` (one sweep point's data) with the length files its sweep values change read
    into ``values``, and the ``(field path, problem)`` of those that cannot be read.

    A swept ``...file`` or ``...column`` replaces the values read from the file as written; a
    swept distribution (or a part of the workload holding one) is read like the file's own.
    """
    workload = point_raw.get("workload")
    if not isinstance(workload, dict) or not params:
        return point_raw, []
    swept = []
    for dotted in params:
        try:
            swept.append(tuple(split_path(dotted)))
        except ValueError:
            continue
    targets = []
    for path in _empirical_files(workload, ("workload",)):
        for parts in swept:
            if len(parts) > len(path) and parts[: len(path)] == path:
                targets.append((path, True))  # its file or column swept: the values read are stale
                break
            if path[: len(parts)] == parts:
                targets.append((path, False))  # set whole by the sweep value
                break
    if not targets:
        return point_raw, []
    out = copy.deepcopy(point_raw)
    problems = []
    for path, stale in targets:
        dist = _at(out, path)
        if stale:
            dist.pop("values", None)
        problem = _read_into(dist, path, base_dir)
        if problem is not None:
            problems.append(problem)
    return out, problems


def _at(data: Any, path: Path) -> Any:
    for part in path:
        data = data[part]
    return data


def _read_into(dist: dict[str, Any], path: Path, base_dir: FsPath | None) -> tuple[Path, str] | None:
    """Read the length file of the empirical distribution ``dist`` (at ``path``) into its
    ``values``, its ``file`` made absolute (so a resolved copy re-runs from anywhere); the
    ``(field path, problem)`` if it cannot be read."""
    where = path + ("file",)
    if "values" in dist:
        return where, "give either file or values, not both"
    name, column = dist["file"], dist.get("column")
    if not isinstance(name, str) or not name.strip():
        return where, "expected the path of a file of token lengths"
    if column is not None and not isinstance(column, str):
        return path + ("column",), "expected the name of a column (or JSON field)"
    file = _resolve(name, base_dir)
    try:
        values = read_length_file(file, column)
    except InputFileError as exc:
        return where, str(exc)
    except (OSError, ValueError) as exc:  # not foreseen by the reader: still one line, not a traceback
        return where, f"{file}: cannot read token lengths: {exc}"
    dist["values"] = values.tolist()
    dist["file"] = str(file.resolve())
    return None


def _empirical_files(node: Any, path: Path) -> Iterator[Path]:
    """Field paths of the ``{kind: empirical, file: ...}`` mappings under ``node``."""
    if isinstance(node, dict):
        if node.get("kind") == "empirical" and node.get("file") is not None:
            yield path
            return
        for key, value in node.items():
            yield from _empirical_files(value, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _empirical_files(value, path + (index,))


def _resolve(name: str, base_dir: FsPath | None) -> FsPath:
    file = FsPath(name)
    return file if file.is_absolute() or base_dir is None else base_dir / file


def trace_specs(workload: Any) -> Iterator[tuple[Path, TraceSpec]]:
    """``(field path, spec)`` of every trace a workload spec replays (its arrival, or phases')."""
    arrival = workload.arrival
    if isinstance(arrival, TraceSpec):
        yield ("workload", "arrival"), arrival
    elif isinstance(arrival, PhasedArrivals):
        for k, phase in enumerate(arrival.phases):
            if isinstance(phase.arrival, TraceSpec):
                yield ("workload", "arrival", "phases", k, "arrival"), phase.arrival


def trace_problems(scenario: Any) -> list[str]:
    """Load every trace of every sweep point of ``scenario`` (a
    :class:`~kvsim.scenario.load.Scenario`) as the run will, and return one
    ``scenario:line: field: <file>:<line>: <field>: <problem>`` per trace that cannot be replayed.

    A problem the sweep brings in (a swept file, window or whole arrival) is blamed on the sweep
    key and names the points it holds at; one the file as written already has is blamed on its
    ``file:`` line.
    """
    located: Located = scenario.located
    sweep = located.data.get("sweep") if isinstance(located.data.get("sweep"), dict) else {}
    problems = PointProblems(len(scenario.points), located.problem)
    outcome: dict[tuple[str, str], str | None] = {}  # one load per distinct trace and window

    def problem(trace: TraceSpec) -> str | None:
        key = (str(trace.path(scenario.base_dir)), trace.model_dump_json())
        if key not in outcome:
            outcome[key] = _load_problem(trace, scenario.base_dir)
        return outcome[key]

    as_written = dict(trace_specs(scenario.spec.workload)) if sweep else {}
    for point in scenario.points:
        for path, trace in trace_specs(point.spec.workload):
            message = problem(trace)
            if message is None:
                continue
            swept = _sweep_key(path, point.params, sweep)
            if swept is None or (path in as_written and problem(as_written[path]) == message):
                problems.add(path + ("file",), message)
            else:
                problems.add(("sweep", swept), message, point.params)
    return problems.lines()


def _load_problem(trace: TraceSpec, base_dir: FsPath | None) -> str | None:
    try:
        trace.load(base_dir)
    except InputFileError as exc:
        return str(exc)
    except (OSError, ValueError) as exc:  # not foreseen by the loader: still one line, not a traceback
        return f"{trace.path(base_dir)}: cannot read trace: {str(exc).splitlines()[0] if str(exc) else exc!r}"
    return None


def _sweep_key(path: Path, params: dict[str, Any], sweep: dict[str, Any]) -> str | None:
    """The sweep key (as written) that sets the trace at ``path`` or a part of it, if any."""
    for dotted in params:
        try:
            parts = tuple(split_path(dotted))
        except ValueError:
            continue
        if parts[: len(path)] == path or path[: len(parts)] == parts:
            return next((k for k in sweep if dotted in zipped_paths(str(k))), dotted)
    return None
