"""Safe YAML reading that remembers where every field came from.

Scenario and catalog errors must name the file, the field path and the line. This module reads
YAML with the safe loader, records the line of every mapping key and sequence item, refuses
duplicate keys (PyYAML would silently keep the last one), and turns pydantic validation errors
into :class:`SpecError` messages such as::

    scenarios/x.yaml:12: workload.arrival.rate: must be positive (got -5)
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, field
from typing import Any, Iterable

import yaml
from pydantic import ValidationError

__all__ = [
    "SpecError", "Located", "load_yaml", "errors_from_validation", "validation_problems", "Path",
    "dotted_path", "register_union_tags", "read_utf8",
]

Path = tuple[Any, ...]


class SpecError(Exception):
    """Invalid input: one message per problem, each naming file, line and field path."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class Located:
    """YAML data plus the 1-based line of each field path in its file."""

    data: Any
    filename: str
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Iterable[Any]) -> int | None:
        """Line of ``path`` or of its nearest ancestor that has one."""
        path = tuple(path)
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = path[:-1]

    def where(self, path: Iterable[Any]) -> str:
        """``file:line`` (or just ``file``) for a field path."""
        line = self.line_of(path)
        return f"{self.filename}:{line}" if line is not None else self.filename

    def problem(self, path: Iterable[Any], message: str) -> str:
        path = tuple(path)
        dotted = dotted_path(path) or "(top level)"
        return f"{self.where(path)}: {dotted}: {message}"


def read_utf8(path: os.PathLike[str] | str, what: str, error: type[SpecError] = SpecError) -> tuple[bytes, str]:
    """The bytes of a UTF-8 text file and its text; ``error`` (one clear line naming the file)
    if it cannot be read or is not UTF-8. ``what`` names the file's role ("scenario file")."""
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise error([f"{path}: cannot read {what}: {exc.strerror or exc}"]) from None
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError:
        raise error([f"{path}: not a UTF-8 text file"]) from None


def dotted_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_yaml(text: str, filename: str) -> Located:
    """Parse YAML text with the safe loader, keeping field lines.

    Raises
    ------
    SpecError
        On a syntax error (with its line) or a duplicate key.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}" if mark is not None else filename
        reason = getattr(exc, "problem", None) or str(exc)
        raise SpecError([f"{where}: not valid YAML: {reason}"]) from None
    located = Located(data=None, filename=filename)
    if root is None:
        located.data = {}
        located.lines[()] = 1
        return located
    problems: list[str] = []
    _walk(root, (), located.lines, problems, filename)
    if problems:
        raise SpecError(problems)
    loader = yaml.SafeLoader(text)
    try:
        located.data = loader.construct_document(root)
    finally:
        loader.dispose()
    return located


def _walk(node: yaml.Node, path: Path, lines: dict[Path, int], problems: list[str], filename: str) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                problems.append(
                    f"{filename}:{line}: {dotted_path(path + (key,))}: duplicate key "
                    f"(first given on line {seen[key]})"
                )
                continue
            seen[key] = line
            lines[path + (key,)] = line
            _walk(value_node, path + (key,), lines, problems, filename)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[path + (index,)] = item.start_mark.line + 1
            _walk(item, path + (index,), lines, problems, filename)


def _data_path(loc: tuple[Any, ...], data: Any) -> Path:
    """Map a pydantic error location onto the data: drop union-member tags it inserts."""
    path: list[Any] = []
    node = data
    for part in loc:
        if isinstance(node, dict):
            if part in node:
                path.append(part)
                node = node[part]
                continue
            if isinstance(part, str) and ("[" in part or part in _UNION_TAGS or part.startswith("function-")):
                continue
            path.append(part)  # a missing field: name it where it should have been
            node = None
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif isinstance(part, str) and ("[" in part or part in _UNION_TAGS or part.startswith("function-")):
            continue
        else:
            path.append(part)
            node = None
    return tuple(path)


_UNION_TAGS: set[str] = set()


def register_union_tags(tags: Iterable[str]) -> None:
    """Tell the error mapper which ``kind:`` tags pydantic may insert into error locations."""
    _UNION_TAGS.update(tags)


def validation_problems(exc: ValidationError, data: Any, prefix: Path = ()) -> list[tuple[Path, str]]:
    """``(field path, message)`` for each error of a pydantic ``ValidationError`` on ``data``."""
    node = data
    for part in prefix:
        node = node[part] if isinstance(node, (dict, list)) else None
    return [(prefix + _data_path(tuple(e["loc"]), node), _message(e)) for e in exc.errors(include_url=False)]


def errors_from_validation(
    exc: ValidationError, located: Located, prefix: Path = (), limit: int = 6
) -> list[str]:
    """Render a pydantic ``ValidationError`` as ``file:line: field.path: message`` lines."""
    problems = [located.problem(path, message) for path, message in validation_problems(exc, located.data, prefix)]
    if len(problems) > limit:
        problems = problems[:limit] + [f"... and {len(problems) - limit} more problem(s)"]
    return problems


def _message(error: dict[str, Any]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; see the documentation for the fields allowed here)"
    if kind == "missing":
        return "required field is missing"
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    if kind not in ("value_error", "assertion_error") and "input" in error and not isinstance(error["input"], (dict, list)):
        message += f" (got {error['input']!r})"
    return message
