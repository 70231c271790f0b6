"""Plain words for a YAML syntax error from PyYAML's pure-Python parser (which
:mod:`kvsim.yaml_parse` uses to word an error libyaml found): the likely cause, and the parser's
own words in brackets when the plain words are a guess."""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["syntax_error"]


def syntax_error(exc: yaml.YAMLError, text: str) -> tuple[int | None, str]:
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
    return line, f"{context + ': ' if context else ''}{problem}"


def _over_indented(text: str, mark: Any) -> bool:
    """The ':' at ``mark`` is its line's first, and the line is indented deeper than the one above."""
    lines = text.splitlines()
    if mark.line >= len(lines) or ":" in lines[mark.line][:mark.column]:
        return False
    indent = len(lines[mark.line]) - len(lines[mark.line].lstrip(" "))
    above = next((ln for ln in reversed(lines[:mark.line]) if ln.strip() and not ln.lstrip().startswith("#")), None)
    return above is not None and indent > len(above) - len(above.lstrip(" "))
