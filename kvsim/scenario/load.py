"""Read a scenario file into validated specs; every problem names file, line and field path.

Loading checks, before anything runs: the schema (types, units, unknown keys), references into
the catalogs (model, node, accelerator, number format), the sweep's values, and every file the
scenario names (length, trace and calibration files, opened and checked row by row:
:mod:`kvsim.scenario.files`). Sizing checks that need the model and the hardware together
(weights fit, TP divides the node) live in :mod:`kvsim.sim.sizing`, called by ``validate``/``run``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from pydantic import ValidationError

from kvsim.calibration.calibfile import apply_calibration_engine, apply_calibration_field
from kvsim.catalog import Catalog
from kvsim.hardware import AcceleratorSpec, NodeSpec, PoolNodeSpec, accelerator_catalog, node_catalog, pool_node_catalog
from kvsim.models import ModelSpec, model_catalog
from kvsim.scenario.files import resolve_length_files, swept_length_files, trace_problems
from kvsim.scenario.inert import inert_settings
from kvsim.scenario.limits import size_problems, sweep_size_problems
from kvsim.scenario.overrides import apply_overrides
from kvsim.scenario.problems import PointProblems
from kvsim.scenario.schema import ScenarioSpec
from kvsim.scenario.sweep import grid_points, set_path, zipped_paths
from kvsim.spec_types import STRICT_UNITS
from kvsim.yaml_io import (
    Located,
    Path,
    SpecError,
    did_you_mean,
    dotted_path,
    errors_from_validation,
    load_yaml,
    read_utf8,
    register_union_tags,
    validation_problems,
)

__all__ = ["Catalogs", "ScenarioPoint", "Scenario", "load_scenario", "parse_scenario"]

MAX_PROBLEMS = 12
"""Most sweep-point problems listed (the rest are counted)."""

register_union_tags(["poisson", "gamma", "diurnal", "phases", "closed_loop", "fixed", "uniform", "lognormal",
                     "empirical", "trace", "static", "threshold", "proportional", "gap", "pd", "stages"])


@dataclass(frozen=True)
class Catalogs:
    """The catalogs a scenario sees: shipped entries plus its own ``catalog:`` section."""

    accelerators: Catalog[AcceleratorSpec]
    nodes: Catalog[NodeSpec]
    models: Catalog[ModelSpec]
    pool_nodes: Catalog[PoolNodeSpec]


@dataclass(frozen=True)
class ScenarioPoint:
    """One point of the sweep grid (the only point when there is no sweep).

    ``params`` maps each swept field path to its value as written in the file.
    """

    index: int
    params: dict[str, Any]
    spec: ScenarioSpec
    catalogs: Catalogs | None = None
    """The point's own catalogs when its sweep changes a ``catalog.*`` field (else the scenario's:
    :meth:`Scenario.catalogs_for`)."""


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: its spec, the raw data it came from, catalogs and sweep points."""

    spec: ScenarioSpec
    raw: dict[str, Any]
    located: Located
    catalogs: Catalogs
    points: list[ScenarioPoint] = field(default_factory=list)
    base_dir: FsPath | None = None
    calibration: Any = None  # kvsim.calibration.calibfile.Calibration applied, if any
    warnings: tuple[str, ...] = ()  # file:line: field: message of settings that may do nothing
    watchdog_s: float | None = None
    """A run option, not part of the scenario's results: wall seconds a run may go without progress
    before the watchdog stops it (:mod:`kvsim.sim.watchdog`; None: ``KVSIM_WATCHDOG_S`` or 60 s; 0: off)."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def system_names(self) -> list[str]:
        return list(self.spec.systems)

    def problem(self, path: Path, message: str) -> str:
        return self.located.problem(path, message)

    def catalogs_for(self, point: ScenarioPoint) -> Catalogs:
        """The catalogs ``point`` runs with: its own if its sweep changes a ``catalog.*`` field."""
        return point.catalogs if point.catalogs is not None else self.catalogs

    def with_changes(self, changes: dict[str, Any] | None = None, **by_field: Any) -> Scenario:
        """A new scenario with fields changed by dotted path; values may be unit strings or SI numbers.

        Examples
        --------
        >>> s2 = scenario.with_changes({"workload.arrival.rate": "10/s", "sweep": {}})
        """
        raw = self.raw
        changed = {**(changes or {}), **by_field}
        for dotted, value in changed.items():
            try:
                raw = set_path(raw, dotted, value)
            except ValueError as exc:
                raise SpecError([f"{self.located.filename}: {dotted}: {exc}"]) from None
        raw, problems = swept_length_files(raw, changed, self.base_dir)  # a changed length file is read
        if problems:
            raise SpecError([f"{self.located.filename}: {dotted_path(path)}: {message}" for path, message in problems])
        located = dataclasses.replace(self.located, data=raw)  # keeps --set attributions
        changed = build_scenario(raw, located, self.base_dir, strict=False, calibration=self.calibration)
        return dataclasses.replace(changed, watchdog_s=self.watchdog_s)


def load_scenario(path: str | FsPath, overrides: Sequence[str] = ()) -> Scenario:
    """Read and validate a scenario file.

    ``overrides`` are ``FIELD=VALUE`` texts (the command line's ``--set``), applied to the file's
    data before validation (:mod:`kvsim.scenario.overrides`).

    Raises
    ------
    SpecError
        With one ``file:line: field: message`` line per problem (``--set ARG: field: message``
        for a problem with an overridden field).
    """
    path = FsPath(path)
    _, text = read_utf8(path, "scenario file")
    return parse_scenario(text, str(path), path.parent, overrides)


def parse_scenario(text: str, filename: str = "<scenario>", base_dir: str | FsPath | None = None,
                   overrides: Sequence[str] = ()) -> Scenario:
    """Validate scenario YAML given as text (files it names resolve against ``base_dir``).

    Every trace the scenario replays is loaded and checked here, as the run will load it
    (:func:`kvsim.scenario.files.trace_problems`); :meth:`Scenario.with_changes` does not re-read
    them (a changed trace is checked when it runs).
    """
    located = load_yaml(text, filename)
    if not isinstance(located.data, dict):
        raise SpecError([f"{filename}:1: the scenario must be a mapping of fields (name, duration, ...)"])
    located = apply_overrides(located, overrides)
    base = FsPath(base_dir) if base_dir is not None else None
    raw = resolve_length_files(located.data, located, base)
    raw, calibration = apply_calibration_field(raw, located, base)
    scenario = _with_traces_checked(build_scenario(raw, located, base, strict=True, calibration=calibration))
    if calibration is None:
        return scenario
    if not _systems_on(scenario, calibration.accelerator, every_pool=False):
        raise SpecError([located.problem(("calibration",), (
            f"{calibration.path} was fitted for {calibration.accelerator}, which no system of this scenario uses"))])
    on_card = _systems_on(scenario, calibration.accelerator, every_pool=True)
    calibrated = apply_calibration_engine(raw, calibration, on_card)
    if calibrated is raw:
        return scenario
    return build_scenario(calibrated, located, base, strict=True, calibration=calibration)


def _with_traces_checked(scenario: Scenario) -> Scenario:
    problems = trace_problems(scenario)
    if problems:
        raise SpecError(problems[:MAX_PROBLEMS] + ([f"... and {len(problems) - MAX_PROBLEMS} more problem(s)"]
                                                   if len(problems) > MAX_PROBLEMS else []))
    return scenario


def _systems_on(scenario: Scenario, accelerator: str, every_pool: bool) -> list[str]:
    """Systems of ``scenario`` whose pools run on ``accelerator`` (every pool, or any), at any
    sweep point, in the file's order."""
    nodes = scenario.catalogs.nodes
    test = all if every_pool else any
    names = []
    for point in scenario.points:
        for name, system in point.spec.systems.items():
            if name not in names and test(nodes[pool.node].accelerator == accelerator
                                          for pool in system.pool_specs().values()):
                names.append(name)
    return names


def build_scenario(raw: dict[str, Any], located: Located, base_dir: FsPath | None, strict: bool,
                   calibration: Any = None) -> Scenario:
    """Validate ``raw`` into a :class:`Scenario`.

    ``strict`` is set for text read from a file: a bare number where a unit is due is refused,
    and so is a setting that does nothing anywhere it applies (:mod:`kvsim.scenario.inert`).
    Python callers changing a loaded scenario (:meth:`Scenario.with_changes`) pass SI numbers
    and may leave a setting idle on purpose while they try another layout or model: for them
    such settings are warnings (:attr:`Scenario.warnings`), not errors.
    """
    context = {STRICT_UNITS: strict}
    try:
        spec = ScenarioSpec.model_validate(raw, context=context)
    except ValidationError as exc:
        raise SpecError(errors_from_validation(exc, located)) from None
    catalogs = _catalogs(spec, located)
    problems = _reference_problems(spec, catalogs, located.problem)
    if problems:
        raise SpecError(problems)
    problems = _sweep_name_problems(raw, located)
    if problems:
        raise SpecError(problems)
    problems = [located.problem(path, message) for path, message in sweep_size_problems(spec)]
    if problems:  # before the grid is expanded: a 400 x 400 grid is refused at once
        raise SpecError(problems)
    points = []
    try:
        grid = grid_points(spec.sweep)
    except ValueError as exc:
        key = str(exc).split(":", 1)[0].removeprefix("sweep.")
        raise SpecError([located.problem(("sweep", key), str(exc).split(": ", 1)[1])]) from None
    study = spec.study
    if study is not None and study.kind == "pd" and study.timeline_point >= len(grid):
        raise SpecError([located.problem(("study", "timeline_point"), (
            f"the sweep has {len(grid)} point(s): give 0 to {len(grid) - 1}"))])
    if study is not None and study.kind in ("options", "gap", "pd"):
        # checked now, not after the whole simulation has run
        swept = [f.strip() for key in spec.sweep for f in key.split(",")]
        names = {"options": ("x", "load"), "gap": ("x", "panel"), "pd": ("x",)}[study.kind]
        for name in names:
            field = getattr(study, name, None)
            if field is not None and field not in swept:
                raise SpecError([located.problem(("study", name), (
                    f"{field!r} is not a swept field{did_you_mean(field, swept)} (sweep: {', '.join(swept) or 'none'})"))])
        if study.kind == "gap" and study.metric not in GAP_METRICS:
            raise SpecError([located.problem(("study", "metric"), (
                f"{study.metric!r} is not a metric of the summary{did_you_mean(study.metric, GAP_METRICS)}; "
                f"one of: {', '.join(GAP_METRICS)}"))])
    point_problems = PointProblems(len(grid), located.problem)
    sweep_keys, catalog_keys = _SweepKeys(located.data.get("sweep", {})), None
    for index, params in enumerate(grid):
        if not params:
            points.append(ScenarioPoint(index, {}, spec))
            continue
        point_catalogs = None
        if any(path.startswith("catalog.") for path in params):
            # the sweep changes a catalog part: this point's hardware is its own
            try:
                point_catalogs = _catalogs(_point_catalog_spec(raw, params, context), located)
            except SpecError as exc:
                # a swept catalog value the catalog refuses (nics.count: -1): the point cannot run on
                # the unswept catalog instead, so it is reported, naming the sweep key
                if catalog_keys is None:
                    catalog_keys = _SweepKeys([k for k in raw.get("sweep", {})
                                               if any(p.startswith("catalog.") for p in zipped_paths(str(k)))])
                for problem in exc.problems:
                    problem = _without_where(problem, located.filename)
                    point_problems.add(("sweep", catalog_keys.of(problem.split(":", 1)[0])), problem, params)
                continue
            except (ValidationError, ValueError):
                point_catalogs = None  # _point_spec reports the problem, naming the sweep key
        point_spec = _point_spec(raw, params, located, point_catalogs or catalogs, context, point_problems,
                                 sweep_keys, base_dir)
        if point_spec is not None:
            points.append(ScenarioPoint(index, params, point_spec, point_catalogs))
    if point_problems:
        lines = point_problems.lines()
        if len(lines) > MAX_PROBLEMS:
            lines = lines[:MAX_PROBLEMS] + [f"... and {len(lines) - MAX_PROBLEMS} more problem(s)"]
        raise SpecError(lines)
    errors, warnings = inert_settings(points, catalogs, located)
    if errors and strict:
        raise SpecError(errors)
    warnings += shadowed_catalog_entries(spec, located)
    return Scenario(spec, raw, located, catalogs, points, base_dir, calibration, tuple(errors + warnings))


GAP_METRICS = ("input_tokens_per_s", "output_tokens_per_s", "total_tokens_per_s", "requests_per_s",
               "goodput_requests_per_s", "requests_completed", "kv_utilization_mean")
"""Summary metrics a gap study may divide (:func:`kvsim.metrics.summary.summarize`; numbers, higher is
more served)."""


def _catalogs(spec: ScenarioSpec, located: Located) -> Catalogs:
    """The shipped catalogs extended by ``spec``'s own ``catalog:`` section."""
    return Catalogs(
        accelerators=accelerator_catalog().extended(spec.catalog.accelerators, located, ("catalog", "accelerators")),
        nodes=node_catalog().extended(spec.catalog.nodes, located, ("catalog", "nodes")),
        models=model_catalog().extended(spec.catalog.models, located, ("catalog", "models")),
        pool_nodes=pool_node_catalog().extended(spec.catalog.pool_nodes, located, ("catalog", "pool_nodes")),
    )


_SHIPPED = {"accelerators": ("accelerator", accelerator_catalog, "kvsim/hardware/data/accelerators.yaml"),
            "nodes": ("node", node_catalog, "kvsim/hardware/data/nodes.yaml"),
            "models": ("model", model_catalog, "kvsim/models/data/models.yaml"),
            "pool_nodes": ("pool node", pool_node_catalog, "kvsim/hardware/data/pool_nodes.yaml")}


def shadowed_catalog_entries(spec: ScenarioSpec, located: Located) -> list[str]:
    """Warnings for the scenario's catalog entries named like shipped ones: such an entry replaces
    the shipped entry of that name for this scenario (its fields layered over the shipped ones),
    so figures quoted under the shipped name are not the catalog's."""
    warnings = []
    for family, (kind, shipped, source) in _SHIPPED.items():
        names = shipped().names()
        for name, fields in getattr(spec.catalog, family).items():
            if name not in names:
                continue
            changed = sorted(k for k in (fields or {}) if k not in ("base", "name")) if isinstance(fields, dict) else []
            what = f" ({', '.join(changed)})" if changed else ""
            warnings.append(located.problem(("catalog", family, name), (
                f"replaces the shipped {kind} {name} ({source}) for this scenario{what}: results under that name "
                f"are not the catalog's; to keep both, name it differently and start from it with base: {name}")))
    return warnings


class _SweepKeys:
    """Finds the sweep key that sets a field: the first of ``keys`` (sweep keys, one field or
    several joined by commas) one of whose fields the field path starts with, or the first key.

    Indexed once, so a sweep of many keys with a problem at each costs time linear in their
    number (a scan of every key per problem was quadratic).
    """

    def __init__(self, keys: Sequence[Any]):
        self.keys = list(keys)
        self._first: dict[str, int] = {}
        for index, key in enumerate(self.keys):
            for path in zipped_paths(str(key)):
                self._first.setdefault(path, index)

    def of(self, field_path: str) -> Any:
        """The key setting ``field_path`` (``""`` if the sweep has no keys)."""
        found = [index for end in range(len(field_path) + 1)
                 if (index := self._first.get(field_path[:end])) is not None]
        return self.keys[min(found)] if found else (self.keys[0] if self.keys else "")


def _without_where(problem: str, filename: str) -> str:
    """``field: message`` of a ``file:line: field: message`` problem (the sweep key's line replaces it)."""
    rest = problem.removeprefix(filename)
    return re.sub(r"^(:\d+)?: ", "", rest) if rest != problem else problem


def _point_catalog_spec(raw: dict[str, Any], params: dict[str, Any], context) -> ScenarioSpec:
    """The spec of a point whose sweep sets ``catalog.*`` fields (raises if it does not validate)."""
    point_raw = copy.deepcopy({**raw, "sweep": {}})  # copied once per point, without the sweep lists
    for dotted, value in params.items():
        set_path(point_raw, dotted, value, in_place=True)  # a copy per field would be quadratic in the fields
    return ScenarioSpec.model_validate(point_raw, context=context)


def _sweep_name_problems(raw: dict[str, Any], located: Located) -> list[str]:
    """A sweep that sets a field of a system or pool the file does not have is a misspelt name
    (sweeping a whole new system, ``systems.NAME: [{...}]``, stays allowed); one that sets the
    sweep itself would do nothing."""
    problems = []
    systems = raw.get("systems") if isinstance(raw.get("systems"), dict) else {}
    for key in raw.get("sweep") or {}:
        for dotted in zipped_paths(str(key)):
            parts = dotted.split(".")
            if parts[0] == "sweep":  # a point's own sweep is emptied: the values would go nowhere
                problems.append(located.problem(("sweep", key), f"{dotted}: a sweep cannot change the sweep"))
                continue
            if len(parts) < 3 or parts[0] != "systems":
                continue
            name = parts[1]
            if name not in systems:
                problems.append(located.problem(("sweep", key), (
                    f"{dotted}: no system {name!r}{did_you_mean(name, systems)}; systems: {', '.join(systems)}")))
                continue
            pools = systems[name].get("pools") if isinstance(systems[name], dict) else None
            if len(parts) >= 5 and parts[2] == "pools" and isinstance(pools, dict) and parts[3] not in pools:
                problems.append(located.problem(("sweep", key), (
                    f"{dotted}: system {name!r} has no pool {parts[3]!r}{did_you_mean(parts[3], pools)}; "
                    f"pools: {', '.join(pools)}")))
    return problems


def _point_spec(raw, params, located: Located, catalogs: Catalogs, context, problems: PointProblems,
                sweep_keys: _SweepKeys, base_dir: FsPath | None = None) -> ScenarioSpec | None:
    """The spec of one sweep point, or None after recording its problems in ``problems`` (the
    same problem at many points is then reported once, naming them)."""
    point_raw = copy.deepcopy({**raw, "sweep": {}})  # copied once per point, without the sweep lists
    for dotted, value in params.items():
        try:
            set_path(point_raw, dotted, value, in_place=True)  # a copy per field would be quadratic in the fields
        except ValueError as exc:
            key = next((k for k in raw.get("sweep", {}) if dotted in zipped_paths(k)), dotted)
            raise SpecError([located.problem(("sweep", key), str(exc))]) from None

    def sweep_problem(path: Path, message: str) -> str:
        dotted = dotted_path(path)
        problems.add(("sweep", sweep_keys.of(dotted)), f"{dotted}: {message}", params)
        return message

    point_raw, file_problems = swept_length_files(point_raw, params, base_dir)  # a swept length file is read
    for path, message in file_problems:
        sweep_problem(path, message)
    if file_problems:
        return None
    try:
        spec = ScenarioSpec.model_validate(point_raw, context=context)
    except ValidationError as exc:
        for path, message in validation_problems(exc, point_raw):
            sweep_problem(path, message)
        return None
    if _reference_problems(spec, catalogs, sweep_problem):
        return None
    return spec


def _reference_problems(spec: ScenarioSpec, catalogs: Catalogs, problem) -> list[str]:
    problems = [problem(path, message) for path, message in spec.consistency_problems() + size_problems(spec, catalogs)]
    if spec.model not in catalogs.models:
        problems.append(problem(("model",), catalogs.models.unknown_message(spec.model)))
    for name, system in spec.systems.items():
        path = ("systems", name)
        if system.model is not None and system.model not in catalogs.models:
            problems.append(problem(path + ("model",), catalogs.models.unknown_message(system.model)))
        cache = system.kv_cache
        if cache is not None and cache.remote is not None and cache.remote.pool_node not in catalogs.pool_nodes:
            problems.append(problem(path + ("kv_cache", "remote", "pool_node"),
                                    catalogs.pool_nodes.unknown_message(cache.remote.pool_node)))
        if cache is not None and cache.prewarm and (spec.workload.trace or spec.workload.multi_turn
                                                    or not spec.workload.has_hashes):
            problems.append(problem(path + ("kv_cache", "prewarm"), "prewarm needs a generated workload "
                                    "with prefix structure (shared_documents or fixed_hit), not a trace "
                                    "or multi-turn sessions"))
        if cache is not None and cache.dram is not None and cache.dram.capacity is None:
            problems.append(problem(path + ("kv_cache", "dram"), "give the host DRAM set aside for KV, "
                                    "e.g. capacity: 512 GiB"))
        dtype, compute = spec.system_dtype(name), spec.system_compute_dtype(name)
        for pool_name, pool in system.pool_specs().items():
            pool_path = path + system.pool_path(pool_name)
            if pool.node not in catalogs.nodes:
                problems.append(problem(pool_path + ("node",), catalogs.nodes.unknown_message(pool.node)))
                continue
            node = catalogs.nodes[pool.node]
            if node.accelerator not in catalogs.accelerators:
                problems.append(problem(pool_path + ("node",), f"node {pool.node!r}: "
                                        + catalogs.accelerators.unknown_message(node.accelerator)))
                continue
            accelerator = catalogs.accelerators[node.accelerator]
            if dtype not in accelerator.flops:
                if system.dtype:
                    where = path + ("dtype",)
                elif "dtype" in spec.model_fields_set:
                    where = ("dtype",)
                else:
                    where = pool_path + ("node",)  # the default dtype: blame the choice of hardware
                problems.append(problem(where, f"{accelerator.name} (node {pool.node}) has no {dtype} peak in "
                                        f"the catalog; it lists: {', '.join(accelerator.flops)}"))
            elif compute not in accelerator.flops:
                where = path + ("compute_dtype",) if system.compute_dtype else ("compute_dtype",)
                problems.append(problem(where, f"{accelerator.name} (node {pool.node}) has no {compute} peak in "
                                        f"the catalog to compute in; it lists: {', '.join(accelerator.flops)}"))
    return problems
