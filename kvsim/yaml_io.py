"""Safe YAML reading that remembers where every field came from.

Scenario and catalog errors must name the file, the field path and the line. This module reads
YAML with the safe loader, records the line of every mapping key and sequence item, refuses
duplicate keys (PyYAML would silently keep the last one), and turns pydantic validation errors
into :class:`SpecError` messages such as::

    scenarios/x.yaml:12: workload.arrival.rate: must be positive (got -5)
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Iterable

import yaml
from pydantic import BaseModel, ValidationError

from kvsim.input_files import InputFileError, open_checked

__all__ = [
    "SpecError", "Located", "load_yaml", "errors_from_validation", "validation_problems", "Path",
    "dotted_path", "register_union_tags", "read_utf8", "did_you_mean", "KvsimLoader", "load_value",
]

Path = tuple[Any, ...]


class KvsimLoader(yaml.SafeLoader):
    """The safe loader with YAML 1.2 (core schema) booleans: only ``true`` and ``false`` (in
    lower, Title or UPPER case) are booleans; YAML 1.1's ``yes/no/on/off`` stay text.

    A string field then gets the text as written (a system named ``off``, ``name: no``); a
    boolean field still accepts ``yes/no/on/off`` because pydantic reads those strings as the
    boolean they spell, so older files keep working.
    """


KvsimLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
KvsimLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                  list("tTfF"))


def load_value(text: str) -> Any:
    """One YAML value (a ``--set`` argument) read as a scenario file reads it (:class:`KvsimLoader`)."""
    return yaml.load(text, Loader=KvsimLoader)  # noqa: S506 - KvsimLoader is a SafeLoader


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
    try:  # a regular file of sane size, before opening it: a FIFO waits forever, /dev/zero never ends
        checked = open_checked(path, what, text=False, max_bytes=MAX_FILE_BYTES)
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


def did_you_mean(name: Any, choices: Iterable[Any]) -> str:
    """``" (did you mean 'x'?)"`` for the choice closest to a misspelt ``name``, or ``""``."""
    names = [str(c) for c in choices]
    lower = {n.lower(): n for n in reversed(names)}
    close = difflib.get_close_matches(str(name).lower(), list(lower), n=1, cutoff=0.6)  # "H20-8x" is h20-8x
    return f" (did you mean {lower[close[0]]!r}?)" if close else ""


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
    if len(text) > MAX_YAML_CHARS:
        raise SpecError([f"{filename}: {len(text):,} characters is more than a scenario file may hold "
                         f"({MAX_YAML_CHARS:,}); is this the right file?"])
    try:
        root = yaml.compose(text, Loader=KvsimLoader)
    except yaml.YAMLError as exc:
        line, reason = _syntax_error(exc, text)
        where = f"{filename}:{line}" if line is not None else filename
        raise SpecError([f"{where}: not valid YAML: {reason}"]) from None
    except RecursionError:
        raise SpecError([f"{filename}: nested too deeply to read (more than {MAX_YAML_DEPTH} levels)"]) from None
    located = Located(data=None, filename=filename)
    if root is None:
        located.data = {}
        located.lines[()] = 1
        return located
    problems: list[str] = []
    _walk(root, (), located.lines, problems, filename, [MAX_YAML_NODES])
    if problems:
        raise SpecError(problems[:MAX_YAML_PROBLEMS])
    loader = KvsimLoader(text)
    try:
        located.data = loader.construct_document(root)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, KeyError) as exc:  # KeyError: !!bool maybe
        mark = getattr(exc, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}" if mark is not None else filename
        reason = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        raise SpecError([f"{where}: a value YAML cannot read: {reason}"]) from None
    finally:
        loader.dispose()
    return located


MAX_YAML_CHARS = 20_000_000
"""Largest scenario text read, characters (a scenario is a few KB; a trace belongs in its own file)."""
MAX_FILE_BYTES = 4 * MAX_YAML_CHARS
"""Largest YAML file read, bytes (UTF-8 takes at most 4 bytes a character)."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of mappings and lists read (a scenario nests about 8 deep)."""
MAX_YAML_NODES = 1_000_000
"""Most values a file may hold with its aliases expanded (a 751-byte alias bomb expands to 10^9)."""
MAX_YAML_PROBLEMS = 20
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map",
                                                                  "seq", "timestamp"))


def _syntax_error(exc: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """The line and a plain-words reading of a YAML syntax error (the parser's words follow in
    brackets when the plain words are a guess at the cause)."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1 if isinstance(exc.position, int) else None
        return line, f"contains a character YAML does not allow (#x{exc.character:04x}); remove it or quote it"
    problem = str(getattr(exc, "problem", None) or exc)
    context = str(getattr(exc, "context", None) or "")
    mark, start = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    opened = start.line + 1 if start is not None else None
    parser = f" [YAML: {context + ': ' if context else ''}{problem}]"
    if problem.startswith("found character '\\t'"):
        return line, "a tab character is not allowed for indentation; indent with spaces"
    found = re.match(r"found character '(.)' that cannot start any token", problem)
    if found:
        return line, f"a plain value cannot start with {found.group(1)!r}: put the value in quotes"
    if problem == "mapping values are not allowed here" and mark is not None and _over_indented(text, mark):
        return line, ("this line is indented more than the line above, so it reads as the rest of that "
                      "line's value: align it with the keys beside it" + parser)
    if problem == "mapping values are not allowed here":
        return line, ("mapping values are not allowed here: is a ':' missing a space after it, or a quote? "
                      "(a value holding ': ' must be quoted)")
    if problem == "could not find expected ':'":
        return opened or line, ("this line is not 'key: value': is the space after ':' missing, "
                                "or the ':' itself?" + parser)
    if "while scanning a quoted scalar" in context:
        return opened or line, "a quote opened on this line is never closed" + parser
    flow = re.match(r"expected ',' or '([\]}])', but got", problem)
    if flow:
        opener = "{" if flow.group(1) == "}" else "["
        return opened or line, (f"a '{opener}' opened on this line is not closed by '{flow.group(1)}' "
                                f"(or its items are not separated by ',')" + parser)
    if problem == "expected <block end>, but found '<block mapping start>'":
        return line, ("this line is indented differently from the keys above it at the same level"
                      + parser)
    if problem == "expected <block end>, but found '?'":
        return line, "a key where a list item ('- ...') was expected, or the other way round" + parser
    if problem == "expected <block end>, but found '<scalar>'":
        return line, "unexpected text after a value: put the whole value in quotes" + parser
    alias = re.match(r"found undefined alias '(.*)'", problem)
    if alias:
        return line, f"'*{alias.group(1)}' refers to an anchor '&{alias.group(1)}' that is not defined before it"
    return line, f"{context + ': ' if context else ''}{problem}"


def _over_indented(text: str, mark: Any) -> bool:
    """The ':' at ``mark`` is its line's first, and the line is indented deeper than the one above."""
    lines = text.splitlines()
    if mark.line >= len(lines) or ":" in lines[mark.line][:mark.column]:
        return False
    indent = len(lines[mark.line]) - len(lines[mark.line].lstrip(" "))
    above = next((ln for ln in reversed(lines[:mark.line]) if ln.strip() and not ln.lstrip().startswith("#")), None)
    return above is not None and indent > len(above) - len(above.lstrip(" "))


def _walk(node: yaml.Node, path: Path, lines: dict[Path, int], problems: list[str], filename: str,
          budget: list[int]) -> None:
    """Record each field's line; refuse duplicate keys, tags that are not plain YAML, keys that
    are not plain values, nesting deeper than :data:`MAX_YAML_DEPTH` and more than
    :data:`MAX_YAML_NODES` values with aliases expanded (``budget`` counts them down)."""
    line = node.start_mark.line + 1
    lines.setdefault(path, line)
    budget[0] -= 1
    if budget[0] < 0:
        if budget[0] == -1:
            problems.append(f"{filename}:{line}: more than {MAX_YAML_NODES:,} values once its aliases (*name) are "
                            f"expanded; a scenario holds a few hundred")
        return
    if len(path) > MAX_YAML_DEPTH:
        problems.append(f"{filename}:{line}: nested more than {MAX_YAML_DEPTH} levels deep")
        return
    if node.tag not in _PLAIN_TAGS:
        problems.append(f"{filename}:{line}: {dotted_path(path) or 'the document'}: the tag {node.tag!r} is not "
                        f"plain YAML; kvsim reads only plain values, lists and mappings")
        return
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                problems.append(f"{filename}:{line}: {dotted_path(path) or 'the document'}: a key must be a plain "
                                f"name, not a list or mapping")
                continue
            key = key_node.value
            if key in seen:
                problems.append(
                    f"{filename}:{line}: {dotted_path(path + (key,))}: duplicate key "
                    f"(first given on line {seen[key]})"
                )
                continue
            seen[key] = line
            lines[path + (key,)] = line
            _walk(value_node, path + (key,), lines, problems, filename, budget)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[path + (index,)] = item.start_mark.line + 1
            _walk(item, path + (index,), lines, problems, filename, budget)


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
    for part in prefix:  # the prefix may be absent from the data (a catalog entry a sweep point adds)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    model = _model_named(exc.title)
    errors = exc.errors(include_url=False)
    # "duraton: unknown field (did you mean 'duration'?)" explains the missing duration: say it once
    misspelt = {tuple(e["loc"][:-1]) + (m.group(1),) for e in errors if e["type"] == "extra_forbidden"
                for m in [re.search(r"did you mean '([^']*)'", _message(e, model))] if m}
    return [(prefix + _data_path(tuple(e["loc"]), node), _message(e, model)) for e in errors
            if not (e["type"] == "missing" and tuple(e["loc"]) in misspelt)]


def errors_from_validation(
    exc: ValidationError, located: Located, prefix: Path = (), limit: int = 6
) -> list[str]:
    """Render a pydantic ``ValidationError`` as ``file:line: field.path: message`` lines."""
    problems = [located.problem(path, message) for path, message in validation_problems(exc, located.data, prefix)]
    if len(problems) > limit:
        problems = problems[:limit] + [f"... and {len(problems) - limit} more problem(s)"]
    return problems


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
