"""Safe YAML reading that remembers where every field came from.

Scenario and catalog errors must name the file, the field path and the line. This module reads
YAML files and ``--set`` values through one reader (:mod:`kvsim.yaml_parse`: safe, within limits
of size, values and nesting, the line of every mapping key and sequence item recorded, duplicate
keys refused where PyYAML would silently keep the last one), and turns pydantic validation
errors into :class:`SpecError` messages such as::

    scenarios/x.yaml:12: workload.arrival.rate: must be positive (got -5)
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from kvsim.input_files import InputFileError, open_checked
from kvsim.yaml_parse import MAX_DEPTH as MAX_YAML_DEPTH
from kvsim.yaml_parse import MAX_NODES as MAX_YAML_NODES
from kvsim.yaml_parse import KvsimLoader, Source, YamlRefused, max_bytes, parse_yaml

__all__ = [
    "SpecError", "Located", "load_yaml", "errors_from_validation", "validation_problems", "Path",
    "dotted_path", "register_union_tags", "read_utf8", "did_you_mean", "KvsimLoader", "load_value",
    "MAX_YAML_DEPTH", "MAX_YAML_NODES",
]

Path = tuple[Any, ...]


def load_value(text: str, name: str, path: tuple[Any, ...] = ()) -> Any:
    """One YAML value (a ``--set`` argument's) read as a file is read, within the same limits
    (:func:`kvsim.yaml_parse.parse_yaml`); ``name`` names it in messages (``--set ARG``) and
    ``path`` is the field it goes to (it counts towards the nesting limit).

    Raises
    ------
    SpecError
        Naming ``name``: not valid YAML, over a limit, a duplicate key, a tag that is not plain.
    """
    try:
        data, _ = parse_yaml(text, Source(name, lines=False, invalid="the value is not valid YAML"), path)
    except YamlRefused as exc:
        raise SpecError(exc.problems) from None
    return data


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
    try:  # a YAML limit raised above this one raises it too (the limit itself is checked on parsing)
        cap = max(MAX_FILE_BYTES, max_bytes())
    except YamlRefused:
        cap = MAX_FILE_BYTES
    try:  # a regular file of sane size, before opening it: a FIFO waits forever, /dev/zero never ends
        checked = open_checked(path, what, text=False, max_bytes=cap)
    except InputFileError as exc:
        raise error([str(exc)]) from None
    try:
        data = checked.read_bytes()
    except OSError as exc:
        raise error([f"{path}: cannot read {what}: {exc.strerror or exc}"]) from None
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError:
        raise error([f"{path}: not a UTF-8 text file"]) from None


_CUTOFF = 0.6
"""How alike a misspelt name and a suggestion are at least (``difflib`` ratio)."""


def did_you_mean(name: Any, choices: Iterable[Any]) -> str:
    """``" (did you mean 'x'?)"`` for the choice closest to a misspelt ``name``, or ``""``."""
    names = [str(c) for c in choices]
    lower = {n.lower(): n for n in reversed(names)}
    close = difflib.get_close_matches(str(name).lower(), list(lower), n=1, cutoff=_CUTOFF)  # "H20-8x" is h20-8x
    return f" (did you mean {lower[close[0]]!r}?)" if close else ""


def dotted_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_yaml(text: str, filename: str) -> Located:
    """Parse YAML text with the safe loader, keeping field lines (:func:`kvsim.yaml_parse.parse_yaml`:
    the limits on size, values and nesting, no duplicate keys, only plain tags).

    Raises
    ------
    SpecError
        On a syntax error (with its line), a duplicate key, or over a limit (saying how to raise it).
    """
    try:
        data, lines = parse_yaml(text, Source(filename))
    except YamlRefused as exc:
        raise SpecError(exc.problems) from None
    return Located(data=data, filename=filename, lines=lines)


MAX_FILE_BYTES = 80_000_000
"""Largest file :func:`read_utf8` reads, bytes (a YAML text is also held to
:func:`kvsim.yaml_parse.max_bytes`)."""


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
    errors, model, node = _errors(exc, data, prefix)
    return [(prefix + _data_path(tuple(e["loc"]), node), _message(e, model)) for e in errors]


def errors_from_validation(
    exc: ValidationError, located: Located, prefix: Path = (), limit: int = 6
) -> list[str]:
    """Render a pydantic ``ValidationError`` as ``file:line: field.path: message`` lines (the
    first ``limit``, then how many more: only those shown are worded, so 200,000 unknown keys
    cost no more than their count)."""
    errors, model, node = _errors(exc, located.data, prefix)
    problems = [located.problem(prefix + _data_path(tuple(e["loc"]), node), _message(e, model))
                for e in errors[:limit]]
    if len(errors) > limit:
        problems.append(f"... and {len(errors) - limit} more problem(s)")
    return problems


def _errors(exc: ValidationError, data: Any, prefix: Path) -> tuple[list[dict[str, Any]], Any, Any]:
    """The errors of ``exc`` worth a message, the model it was raised for and the data under ``prefix``.

    A missing field that an unknown one beside it explains ("duraton: unknown field (did you
    mean 'duration'?)") is left out: the unknown one says it.
    """
    node = data
    for part in prefix:  # the prefix may be absent from the data (a catalog entry a sweep point adds)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    model = _model_named(exc.title)
    errors = exc.errors(include_url=False)
    missing: dict[tuple[Any, ...], list[Any]] = {}
    for e in errors:
        if e["type"] == "missing":
            missing.setdefault(tuple(e["loc"][:-1]), []).append(e["loc"][-1])
    if not missing:
        return errors, model, node
    misspelt = set()
    for e in errors:
        parent = tuple(e["loc"][:-1])
        if e["type"] == "extra_forbidden" and parent in missing and _may_suggest(e["loc"][-1], missing[parent]):
            found = re.search(r"did you mean '([^']*)'", _message(e, model))
            if found:
                misspelt.add(parent + (found.group(1),))
    return [e for e in errors if not (e["type"] == "missing" and tuple(e["loc"]) in misspelt)], model, node


def _may_suggest(name: Any, choices: list[Any]) -> bool:
    """Whether :func:`did_you_mean` could suggest one of ``choices`` for ``name``: the test
    ``difflib.get_close_matches`` makes of each, against these few instead of every field."""
    matcher = difflib.SequenceMatcher()
    matcher.set_seq2(str(name).lower())
    for choice in choices:
        matcher.set_seq1(str(choice).lower())
        if matcher.real_quick_ratio() >= _CUTOFF and matcher.quick_ratio() >= _CUTOFF and matcher.ratio() >= _CUTOFF:
            return True
    return False


def _message(error: dict[str, Any], model: type[BaseModel] | None = None) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _fields_at(model, tuple(error["loc"])[:-1]) if model is not None else None
        if not allowed:
            return "unknown field (check the spelling; see the documentation for the fields allowed here)"
        hint = did_you_mean(error["loc"][-1], allowed)
        return f"unknown field{hint}; fields allowed here: {', '.join(allowed)}"
    if kind == "union_tag_invalid":
        tags = re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected_tags", "")))
        return str(error["msg"]) + did_you_mean(error.get("ctx", {}).get("tag"), tags)
    if kind == "literal_error":
        options = re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", "")))
        return f"{error['msg']} (got {error.get('input')!r}){did_you_mean(error.get('input'), options)}"
    if kind == "missing":
        return "required field is missing"
    if kind in ("model_attributes_type", "model_type", "dict_type") and not isinstance(error.get("input"), (dict, list)):
        return _mapping_expected(error.get("input"), model, tuple(error["loc"]))
    message = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    if kind not in ("value_error", "assertion_error") and "input" in error and not isinstance(error["input"], (dict, list)):
        message += f" (got {error['input']!r})"
    return message


# ---------------------------------------------------------------------------------------------
# the fields a model allows at an error's location (for "did you mean")
# ---------------------------------------------------------------------------------------------


def _model_named(title: str) -> type[BaseModel] | None:
    """The pydantic model class a ``ValidationError`` was raised for (None if the name is not unique)."""
    found: list[type[BaseModel]] = []
    stack = list(BaseModel.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__name__ == title and cls not in found:
            found.append(cls)
    return found[0] if len(found) == 1 else None


def _members(annotation: Any) -> list[Any]:
    """The alternatives of a (possibly ``Annotated``, ``Optional``) union annotation."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _is_model(member: Any) -> bool:
    return isinstance(member, type) and issubclass(member, BaseModel)


def _step(annotation: Any, part: Any) -> Any:
    members = _members(annotation)
    for member in members:  # a union member that pydantic names in the location
        if _is_model(member):
            kind = member.model_fields.get("kind")
            if part == member.__name__ or (kind is not None and kind.default == part):
                return member
    for member in members:
        if _is_model(member):
            for name, info in member.model_fields.items():
                if part in (name, info.alias):
                    return info.annotation
        origin = typing.get_origin(member)
        if origin is dict and isinstance(part, str):
            return typing.get_args(member)[1]
        if origin in (list, tuple) and isinstance(part, int):
            return typing.get_args(member)[0]
    return None


def _mapping_expected(value: Any, model: type[BaseModel] | None, loc: tuple[Any, ...]) -> str:
    """The message for a scalar where a mapping belongs, with the mapping to write instead: for a
    field that takes a ``kind:`` (a length distribution, an arrival process), its kinds, and for a
    bare number where a fixed value would do, ``{kind: fixed, value: N}``."""
    annotation: Any = model
    for part in loc:
        annotation = _step(annotation, part) if annotation is not None else None
    kinds = [str(member.model_fields["kind"].default) for member in _members(annotation)
             if _is_model(member) and "kind" in member.model_fields] if annotation is not None else []
    shown = f"the bare number {value!r}" if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else repr(value)
    if kinds and "fixed" in kinds and isinstance(value, (int, float)) and not isinstance(value, bool):
        return (f"expected a mapping with a kind, got {shown}: write {{kind: fixed, value: {value!r}}} "
                f"(other kinds: {', '.join(k for k in kinds if k != 'fixed')})")
    if kinds:
        return f"expected a mapping with a kind ({', '.join(kinds)}), got {shown}"
    fields = _fields_at(model, loc) if model is not None else []
    return f"expected a mapping of fields, got {shown}" + (f"; fields allowed here: {', '.join(fields)}" if fields else "")


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names allowed in the mapping at pydantic location ``loc`` below ``model``."""
    annotation: Any = model
    for part in loc:
        annotation = _step(annotation, part)
        if annotation is None:
            return []
    names: list[str] = []
    for member in _members(annotation):
        if _is_model(member):
            names += [info.alias or name for name, info in member.model_fields.items() if name not in names]
    return names
