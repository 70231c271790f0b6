"""Command-line overrides: ``--set workload.arrival.rate=20/s`` changes one field of the file.

The value is read as YAML, like the file (``20/s`` and ``96 GiB`` stay unit strings, ``4`` is a
number, ``[1, 2]`` a list, ``{}`` a mapping), and the changed scenario is validated exactly as if
the file said it: a problem with an overridden field names the ``--set`` argument instead of a
file line (:class:`OverriddenLocated`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvsim.scenario.sweep import set_path, split_path, zipped_paths
from kvsim.yaml_io import MAX_YAML_DEPTH, Located, SpecError, dotted_path, load_value

__all__ = ["Override", "parse_override", "apply_overrides", "OverriddenLocated"]


@dataclass(frozen=True)
class Override:
    """One ``--set PATH=VALUE``: the field path, the value read as YAML, and the argument as given."""

    path: tuple[str | int, ...]
    value: Any
    text: str

    @property
    def dotted(self) -> str:
        return ".".join(map(str, self.path))


def parse_override(text: str) -> Override:
    """Read one ``PATH=VALUE`` argument.

    The value is read by the file reader, within the same limits (:mod:`kvsim.yaml_parse`: size,
    values, nesting counted from the top of the scenario, duplicate keys, plain tags).

    Raises
    ------
    SpecError
        One line naming the argument (cut to :data:`SHOWN_CHARS`), if it has no ``=``, an empty
        or malformed path, or a value that is not YAML or over a limit.
    """
    name = f"--set {shown(text)}"
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SpecError([f"{name}: expected FIELD=VALUE, e.g. --set workload.arrival.rate=20/s"])
    try:
        path = tuple(split_path(key))
    except ValueError as exc:
        raise SpecError([f"{name}: {exc}"]) from None
    if len(path) > MAX_YAML_DEPTH:
        raise SpecError([f"{name}: the field path is nested more than {MAX_YAML_DEPTH} levels deep"])
    parsed = load_value(value, name, path) if value.strip() else None
    if parsed is None:
        raise SpecError([f"{name}: give a value after '=' (null is not a value)"])
    return Override(path, parsed, text)


SHOWN_CHARS = 80
"""Longest ``--set`` argument quoted whole in a message (a hostile one may be megabytes)."""


def shown(text: str) -> str:
    """``text`` as a message quotes it: cut to :data:`SHOWN_CHARS` characters."""
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


@dataclass
class OverriddenLocated(Located):
    """:class:`~kvsim.yaml_io.Located` data with overrides: a problem at or below an overridden
    field says ``--set ARG: field: message``; the others keep the file's line and name the
    overrides given (a file field may conflict with an overridden one)."""

    overrides: tuple[Override, ...] = field(default=())

    def problem(self, path: Iterable[Any], message: str) -> str:
        path = tuple(path)
        matches = [o for o in self.overrides if _within(path, o.path) or _within(o.path, path) and path]
        if not matches:  # a file field, perhaps in conflict with an overridden one: say both
            given = ", ".join(f"--set {shown(o.text)}" for o in self.overrides)
            return super().problem(path, f"{message} (with {given})")
        chosen = max(matches, key=lambda o: len(o.path))
        return f"--set {shown(chosen.text)}: {dotted_path(path) or chosen.dotted}: {message}"


def _within(path: tuple, prefix: tuple) -> bool:
    return len(path) >= len(prefix) and tuple(map(str, path[: len(prefix)])) == tuple(map(str, prefix))


def apply_overrides(located: Located, texts: Sequence[str]) -> Located:
    """``located`` with every ``--set`` of ``texts`` applied, in order (a later one wins).

    Raises
    ------
    SpecError
        Naming the argument: unreadable, a path through something that is not a mapping, or a
        field the scenario's sweep sets at every point (change the sweep instead).
    """
    if not texts:
        return located
    overrides = tuple(parse_override(t) for t in texts)
    data = located.data
    problems = []
    for o in overrides:
        sweep = data.get("sweep") if isinstance(data, dict) else None
        swept = [p for key in sweep for p in zipped_paths(str(key))] if isinstance(sweep, dict) else []
        hit = next((p for p in swept if _within(o.path, tuple(split_path(p)))
                    or _within(tuple(split_path(p)), o.path)), None)
        if hit is not None and o.path[0] != "sweep":
            problems.append(f"--set {shown(o.text)}: {hit} is swept (sweep: {hit}), so every point sets it: "
                            f"change the sweep's values instead")
            continue
        try:
            data = set_path(data, o.dotted, o.value)
        except ValueError as exc:
            problems.append(f"--set {shown(o.text)}: {exc}")
    if problems:
        raise SpecError(problems)
    return OverriddenLocated(data, located.filename, located.lines, overrides)
