"""Reading YAML text into plain data within limits, remembering the line of every field.

One reader, with one set of limits, for every YAML kvsim reads: scenario, catalog, calibration
and storage-benchmark files (:func:`kvsim.yaml_io.load_yaml`) and ``--set`` values
(:mod:`kvsim.scenario.overrides`):

- at most :func:`max_bytes` bytes of text (default :data:`MAX_BYTES`, raised with the
  environment variable ``KVSIM_YAML_MAX_BYTES``), checked before parsing starts;
- at most :func:`max_nodes` keys, values and list items, each alias (``*name``) counted as the
  values it stands for (default :data:`MAX_NODES`, ``KVSIM_YAML_MAX_NODES``), counted while
  parsing, which stops at the first one over;
- at most :data:`MAX_DEPTH` levels of nesting, checked while parsing;
- only plain YAML tags, no duplicate keys, keys that are plain values;
- whole numbers within a float's range (:data:`LARGEST_WHOLE`), as floats are: a larger one is
  refused as out of range, before Python converts its digits (over 4,300 of them it refuses to).

The data is built from the parser's event stream in one pass, without recursion (a
100,000-deep ``[[[...`` is refused at its 65th bracket) and in time linear in the text. Events
come from libyaml when PyYAML has it (``yaml.CSafeLoader``: 5-10 times faster than the
pure-Python scanner, which is most of the cost of a large file); a syntax error is then read
again by the pure-Python parser, whose messages :func:`kvsim.yaml_syntax.syntax_error` knows.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode

from kvsim.yaml_limits import (
    BYTES_VARIABLE,
    LIMITS_DOC,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    MAX_PROBLEMS,
    NODES_VARIABLE,
    YamlRefused,
    max_bytes,
    max_nodes,
)
from kvsim.yaml_lines import LineMap
from kvsim.yaml_syntax import syntax_error

__all__ = ["KvsimLoader", "YamlRefused", "Source", "LineMap", "parse_yaml", "max_bytes", "max_nodes", "MAX_BYTES",
           "MAX_NODES", "MAX_DEPTH", "BYTES_VARIABLE", "NODES_VARIABLE"]

LARGEST_WHOLE = sys.float_info.max
"""Largest magnitude of a whole number read (about 1.8e308: a float's range, so that every
number read can be a float, as the model's arithmetic makes it; a larger one is out of range
as a float that reads as infinity is)."""
_FAST_DIGITS = 308
"""Longest digit string converted by the fast path (10**308 - 1 is within :data:`LARGEST_WHOLE`)."""
_MOST_DIGITS = 4300
"""Longest significant digit string of a whole number converted (Python's default limit for a
decimal one; a longer one of any base is beyond :data:`LARGEST_WHOLE`)."""
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

_LOADERS: tuple[type, ...] = (KvsimLoader,)
if yaml.__with_libyaml__:
    class _KvsimCLoader(yaml.CSafeLoader):
        """:class:`KvsimLoader`'s resolver on libyaml's parser."""

        yaml_implicit_resolvers = KvsimLoader.yaml_implicit_resolvers

    _LOADERS = (_KvsimCLoader, KvsimLoader)


@dataclass(frozen=True)
class Source:
    """Where a YAML text came from, as messages name it.

    Parameters
    ----------
    name : str
        A file name, or ``--set ARG`` for a command-line value.
    lines : bool
        Whether messages give line numbers (a one-line ``--set`` value has none worth naming).
    invalid : str
        What a syntax error is called ("not valid YAML", "the value is not valid YAML").
    """

    name: str
    lines: bool = True
    invalid: str = "not valid YAML"

    def at(self, line: int | None) -> str:
        return f"{self.name}:{line}" if self.lines and line is not None else self.name


def parse_yaml(text: str, source: Source, base: tuple[Any, ...] = ()) -> tuple[Any, LineMap]:
    """The data of one YAML document and the 1-based line of each field path in it.

    Parameters
    ----------
    text : str
    source : Source
        Names the text in messages.
    base : tuple
        The field path the text's value goes to (a ``--set`` value's field): it counts towards
        :data:`MAX_DEPTH` and prefixes the paths in messages; the returned lines do not hold it.

    Returns
    -------
    data, lines
        ``data`` is ``{}`` for a text without a document; ``lines`` a :class:`LineMap`.

    Raises
    ------
    YamlRefused
        Over a limit, a syntax error (with its line), a duplicate key or anchor, a tag that is not
        plain YAML, a key that is not a plain value, a value YAML cannot read.
    """
    size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    limit = max_bytes()
    if size > limit:
        raise YamlRefused([f"{source.name}: {size:,} bytes is more than kvsim reads as YAML ({limit:,} bytes; a "
                           f"scenario is a few KB, long lists belong in a length or trace file): is this the right "
                           f"file? To read it anyway, set the environment variable {BYTES_VARIABLE}={size} or more "
                           f"(see {LIMITS_DOC})"])
    nodes = max_nodes()
    for number, loader_type in enumerate(_LOADERS):
        loader = None
        try:
            loader = loader_type(text)  # the pure-Python reader checks the characters here
            return _Builder(loader, source, base, nodes).document()
        except (yaml.YAMLError, UnicodeEncodeError) as exc:  # a syntax error; libyaml: a lone surrogate
            if number + 1 < len(_LOADERS):  # (an undecodable byte of a --set argument)
                continue  # libyaml's words differ: read it again with the parser syntax_error knows
            line, reason = syntax_error(exc, text)
            raise YamlRefused([f"{source.at(line)}: {source.invalid}: {reason}"]) from None
        finally:
            if loader is not None:
                loader.dispose()
    raise AssertionError("unreachable")  # pragma: no cover


_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map",
                                                                  "seq", "timestamp"))
_STR, _SEQ, _MAP, _INT = (f"tag:yaml.org,2002:{name}" for name in ("str", "seq", "map", "int"))
_MERGE, _VALUE = "tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"
_RESOLVED_FIRST = frozenset(KvsimLoader.yaml_implicit_resolvers)
"""First characters of the plain values an implicit tag may match (int, null, bool, ...; the
others are strings: the resolver would look up this character and find nothing)."""
assert None not in _RESOLVED_FIRST  # a resolver for every first character would make the test wrong
_NO_KEY = object()
"""A mapping's next event starts a key."""
_MERGE_KEY = object()
"""The key ``<<`` (merge the mapping or mappings given as its value)."""


def _significant_digits(text: str) -> int:
    """Digits of a whole number as YAML writes it, without its sign, base prefix, ``_``
    separators and leading zeros (``:`` separators of a base-60 one counted: each part has at
    most two digits after the first, so a long text is a large number still)."""
    body = text.replace("_", "").lstrip("+-")
    if body[:2].lower() in ("0x", "0b", "0o"):
        body = body[2:]
    return len(body.lstrip("0"))


def _short(text: str) -> str:
    """``text``, or its start and length when it is long (a message quotes it)."""
    return text if len(text) <= 40 else f"{text[:24]}... ({len(text):,} characters)"


class _Open:
    """A list or mapping being read."""

    __slots__ = ("data", "path", "mapping", "line", "anchor", "first", "height", "key", "key_text", "skip",
                 "seen", "merges")

    def __init__(self, data: Any, path: tuple[Any, ...] | None, line: int, anchor: str | None, first: int):
        self.data, self.path, self.line, self.anchor, self.first = data, path, line, anchor, first
        self.mapping = isinstance(data, dict)
        self.height = 0  # levels below this one (aliases expanded)
        self.key: Any = _NO_KEY  # a mapping's key whose value is read next
        self.key_text = ""  # that key as written (field paths hold it)
        self.skip = False  # that value is read but dropped (its key is refused)
        self.seen: dict[str, int] = {}  # a mapping's keys as written: their lines
        self.merges: list[Any] = []  # values of merge keys (<<: *base)


@dataclass
class _Anchor:
    value: Any
    line: int
    size: int = 0  # keys, values and items it stands for
    height: int = 0
    text: str | None = None  # a scalar's text (an aliased key's name)
    path: tuple[Any, ...] | None = None
    done: bool = False


class _Builder:
    """Builds the data of one document from a loader's events (see :func:`parse_yaml`)."""

    def __init__(self, loader: Any, source: Source, base: tuple[Any, ...], max_nodes: int):
        self.loader, self.source, self.base, self.max_nodes = loader, source, base, max_nodes
        self.max_depth = MAX_DEPTH - len(base)
        self.lines = LineMap()
        self.anchors: dict[str, _Anchor] = {}
        self.problems: list[str] = []
        self.total = 0  # keys, values and items read, aliases expanded

    # -- messages ------------------------------------------------------------------------------

    def _dotted(self, path: tuple[Any, ...] | None) -> str:
        out = ""
        for part in self.base + (path or ()):
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        return out or "the document"

    def _problem(self, line: int, message: str, path: tuple[Any, ...] | None = None, named: bool = True) -> None:
        where = f"{self._dotted(path)}: " if named else ""
        self.problems.append(f"{self.source.at(line)}: {where}{message}")
        if len(self.problems) >= MAX_PROBLEMS:
            raise YamlRefused(self.problems)

    def _stop(self, line: int, message: str) -> None:
        self.problems.append(f"{self.source.at(line)}: {message}")
        raise YamlRefused(self.problems)

    def _over(self, depth: int, line: int) -> None:
        """Stop: over the value or the nesting limit (the caller has counted the node)."""
        if self.total > self.max_nodes:
            self._stop(line, f"more than {self.max_nodes:,} keys, values and list items once aliases (*name) are "
                             f"expanded (a scenario holds a few hundred): is this the right file? To read it anyway, "
                             f"set the environment variable {NODES_VARIABLE}={2 * self.max_nodes} or more "
                             f"(see {LIMITS_DOC})")
        if depth > self.max_depth:
            self._stop(line, f"nested more than {MAX_DEPTH} levels deep (a scenario nests about 8)")

    # -- reading -------------------------------------------------------------------------------

    def document(self) -> tuple[Any, LineMap]:
        loader = self.loader
        loader.get_event()  # stream start
        if loader.check_event(StreamEndEvent):
            self.lines[()] = 1
            return {}, self.lines
        loader.get_event()  # document start
        data = self._node()
        loader.get_event()  # document end
        if not loader.check_event(StreamEndEvent):
            extra = loader.get_event()
            self._stop(extra.start_mark.line + 1, f"{self.source.invalid}: expected a single document in the stream, "
                                                  f"but found another document (remove the '---' or '...' line)")
        if self.problems:
            raise YamlRefused(self.problems)
        return data, self.lines

    def _node(self) -> Any:
        """Read events to the end of the node that starts next; return its value."""
        get = self.loader.get_event
        lines, stack = self.lines, []
        parent: _Open | None = None  # stack[-1]
        event = get()
        path: tuple[Any, ...] | None = ()  # of the node the event starts (None: no lines kept)
        lines[()] = event.start_mark.line + 1
        while True:
            kind = type(event)
            line = event.start_mark.line + 1
            text: str | None = None
            if parent is not None and path is not None and not parent.mapping and kind is not SequenceEndEvent:
                lines[path] = line  # a list item's line
            if kind is ScalarEvent:
                self.total += 1
                if self.total > self.max_nodes or len(stack) > self.max_depth:
                    self._over(len(stack), line)
                text = event.value
                if event.tag is not None:
                    value = self._scalar(event.tag, text, event, line, path, parent)
                elif not event.implicit[0]:
                    value = text  # quoted: a string
                elif (text.isascii() and text.isdigit() and (text[0] != "0" or len(text) == 1)
                      and len(text) <= _FAST_DIGITS):
                    value = int(text)  # the resolver's and construct_yaml_int's answer, in a tenth of the time
                elif text and text[0] not in _RESOLVED_FIRST:
                    value = text  # no implicit tag starts with this character: a string
                else:
                    value = self._scalar(self.loader.resolve(ScalarNode, text, event.implicit), text, event, line,
                                         path, parent)
                if event.anchor is not None:
                    self._anchor(event.anchor, _Anchor(value, line, 1, 0, text, path, done=True))
                height = 0
            elif kind is SequenceStartEvent or kind is MappingStartEvent:
                self.total += 1
                if self.total > self.max_nodes or len(stack) > self.max_depth:
                    self._over(len(stack), line)
                mapping = kind is MappingStartEvent
                self._check_collection_tag(event, mapping, line, path)
                if event.anchor is not None:
                    self._anchor(event.anchor, _Anchor(None, line, path=path))
                parent = _Open({} if mapping else [], path, line, event.anchor, self.total)
                stack.append(parent)
                path = self._child_path(parent)
                event = get()
                continue
            elif kind is SequenceEndEvent or kind is MappingEndEvent:
                done = stack.pop()
                value = done.data
                if done.merges:
                    value = self._merged(done)
                height = done.height
                if done.anchor is not None:
                    anchor = self.anchors[done.anchor]
                    anchor.value, anchor.size, anchor.height = value, self.total - done.first + 1, height
                    anchor.done = True
                path, line = done.path, done.line
            elif kind is AliasEvent:
                anchor = self.anchors.get(event.anchor)
                if anchor is None:
                    self._stop(line, f"{self.source.invalid}: '*{event.anchor}' refers to an anchor "
                                     f"'&{event.anchor}' that is not defined before it")
                if not anchor.done:
                    self._stop(line, f"{self._dotted(path)}: '*{event.anchor}' stands for the list or mapping it is "
                                     f"inside (&{event.anchor}, line {anchor.line}), which would never end")
                self.total += anchor.size
                if self.total > self.max_nodes or len(stack) + anchor.height > self.max_depth:
                    self._over(len(stack) + anchor.height, line)
                value, height, text = anchor.value, anchor.height, anchor.text
                if path is not None and anchor.path is not None and anchor.height > 0:
                    lines.alias(path, anchor.path)  # a problem inside names the line that wrote it
            else:  # pragma: no cover - the parser gives nothing else inside a document
                raise AssertionError(event)
            if not stack:
                return value
            parent = stack[-1]
            if height >= parent.height:
                parent.height = height + 1
            if not parent.mapping:
                parent.data.append(value)
                path = None if parent.path is None else parent.path + (len(parent.data),)
            else:
                if parent.key is _NO_KEY:
                    self._key(parent, value, text, line)
                else:
                    if not parent.skip:
                        if parent.key is _MERGE_KEY:
                            parent.merges.append((value, line))
                        else:
                            parent.data[parent.key] = value
                    parent.key, parent.skip = _NO_KEY, False
                path = self._child_path(parent)
            event = get()

    def _check_collection_tag(self, event: Any, mapping: bool, line: int, path: tuple[Any, ...] | None) -> None:
        natural = _MAP if mapping else _SEQ
        tag = event.tag if event.tag not in (None, "!") else natural
        if tag != natural:
            what = "a mapping" if mapping else "a list"
            if tag in _PLAIN_TAGS:
                self._problem(line, f"a value YAML cannot read: the tag {tag!r} cannot be {what}", path)
            else:
                self._problem(line, f"the tag {tag!r} is not plain YAML; kvsim reads only plain values, lists and "
                                    f"mappings", path)

    def _child_path(self, parent: _Open) -> tuple[Any, ...] | None:
        """The path of the node read next inside ``parent`` (None: no lines are kept for it)."""
        if parent.path is None:
            return None
        if parent.mapping:
            if parent.key is _NO_KEY or parent.skip:
                return None  # a key (its line is recorded as its value's), or a refused key's value
            return parent.path + (parent.key_text,)
        return parent.path + (len(parent.data),)

    def _scalar(self, tag: str, text: str, event: Any, line: int, path: tuple[Any, ...] | None,
                parent: _Open | None) -> Any:
        """A scalar's value from its tag (resolved), or None after recording a problem."""
        if tag == _STR or tag == "!":
            return text
        key = parent is not None and parent.mapping and parent.key is _NO_KEY
        if key and tag in (_MERGE, _VALUE):
            return _MERGE_KEY if tag == _MERGE else text
        if tag not in _PLAIN_TAGS:
            self._problem(line, f"the tag {tag!r} is not plain YAML; kvsim reads only plain values, lists and "
                                f"mappings", path)
            return None
        if tag == _INT and _significant_digits(text) > _MOST_DIGITS:
            return self._out_of_range(text, line, path, parent)
        node = ScalarNode(tag, text, event.start_mark, event.end_mark, style=event.style)
        try:
            value = self.loader.yaml_constructors[tag](self.loader, node)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
            reason = str(getattr(exc, "problem", None) or exc).splitlines()[0]
            return self._unreadable(line, path, parent, f"a value YAML cannot read: {reason}")
        except (KeyError, IndexError, AttributeError):  # !!bool maybe; !!int or !!float without digits; !!timestamp 1
            return self._unreadable(line, path, parent, f"a value YAML cannot read: {_short(repr(text))} is not a value of the "
                                                        f"tag !!{tag.rsplit(':', 1)[1]}")
        if tag == _INT and abs(value) > LARGEST_WHOLE:
            return self._out_of_range(text, line, path, parent)
        return value

    def _out_of_range(self, text: str, line: int, path: tuple[Any, ...] | None, parent: _Open | None) -> None:
        """Record a whole number beyond :data:`LARGEST_WHOLE`."""
        return self._unreadable(line, path, parent, f"the whole number {_short(text)} is out of range: kvsim reads numbers "
                                                    f"up to about 1.8e308 (a float's range)")

    def _unreadable(self, line: int, path: tuple[Any, ...] | None, parent: _Open | None, message: str) -> None:
        """Record a scalar that is not read, naming its field (a key's: its mapping's)."""
        if path is None and parent is not None:
            path = parent.path
        self._problem(line, message, path, named=path is not None)

    def _key(self, parent: _Open, value: Any, text: str | None, line: int) -> None:
        """A key of ``parent`` was read: check it, record its line; its value is read next."""
        if text is None:  # a list or mapping (or an alias of one)
            self._problem(line, "a key must be a plain name, not a list or mapping", parent.path)
            parent.key, parent.skip = None, True
            return
        if text in parent.seen:
            first = f" (first given on line {parent.seen[text]})" if self.source.lines else ""
            self._problem(line, f"duplicate key{first}", (parent.path or ()) + (text,))
            parent.key, parent.skip = None, True
            return
        parent.seen[text] = line
        parent.key = value
        parent.key_text = text if value is not _MERGE_KEY else "<<"
        if parent.path is not None:
            self.lines[parent.path + (parent.key_text,)] = line

    def _anchor(self, name: str, anchor: _Anchor) -> None:
        first = self.anchors.get(name)
        if first is not None:
            self._stop(anchor.line, f"{self.source.invalid}: the anchor '&{name}' is defined twice (first on line "
                                    f"{first.line}); give the second another name")
        self.anchors[name] = anchor

    def _merged(self, done: _Open) -> dict[Any, Any]:
        """A mapping with merge keys (``<<: *base`` or ``<<: [*a, *b]``) resolved as YAML says:
        its own keys win, then the merged mappings in their order."""
        merged: dict[Any, Any] = {}
        for value, line in done.merges:
            for part in value if isinstance(value, list) else [value]:
                if not isinstance(part, dict):
                    self._problem(line, "a value YAML cannot read: '<<' merges a mapping or a list of mappings",
                                  done.path)
                    continue
                for key, item in part.items():
                    merged.setdefault(key, item)
        merged.update(done.data)
        return merged
