"""The limits on every YAML text kvsim reads, and the error that refuses one (see
:mod:`kvsim.yaml_parse`, which applies them): size, values with their aliases expanded, nesting,
problems reported; the first two raised with environment variables.
"""

from __future__ import annotations

import os

__all__ = ["YamlRefused", "max_bytes", "max_nodes", "MAX_BYTES", "MAX_NODES", "MAX_DEPTH", "MAX_PROBLEMS",
           "BYTES_VARIABLE", "NODES_VARIABLE", "LIMITS_DOC"]

MAX_BYTES = 4 * 2**20
"""Default largest YAML text read, bytes (4 MiB; the shipped scenarios and catalogs are at most
24 KB: a long list of lengths belongs in a length file, a trace in a trace file)."""
MAX_NODES = 1_000_000
"""Default most keys, values and list items a YAML text may hold with its aliases expanded (a
scenario holds a few hundred; a 751-byte alias bomb expands to 10^9)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists read (a scenario nests about 8 deep)."""
MAX_PROBLEMS = 20
"""Most problems reported from one text (reading stops there)."""
BYTES_VARIABLE = "KVSIM_YAML_MAX_BYTES"
NODES_VARIABLE = "KVSIM_YAML_MAX_NODES"
LIMITS_DOC = "docs/reference/scenario-files.md, YAML limits"
"""Where the limits are described (named in their messages)."""


class YamlRefused(Exception):
    """YAML text that is not read: one message per problem, each naming the source (and line)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def _limit(variable: str, default: int, what: str) -> int:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise YamlRefused([f"{variable}={text!r}: give the most {what} kvsim reads from a YAML text as a whole "
                           f"number (the default is {default})"])
    return value


def max_bytes() -> int:
    """Largest YAML text read, bytes: ``KVSIM_YAML_MAX_BYTES`` if set, else :data:`MAX_BYTES`."""
    return _limit(BYTES_VARIABLE, MAX_BYTES, "bytes")


def max_nodes() -> int:
    """Most keys, values and list items read (aliases expanded): ``KVSIM_YAML_MAX_NODES`` if set,
    else :data:`MAX_NODES`."""
    return _limit(NODES_VARIABLE, MAX_NODES, "keys, values and list items")
