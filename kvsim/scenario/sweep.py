"""Sweep expansion: a grid over dotted field paths of the raw scenario data.

``sweep: {workload.arrival.rate: [5/s, 10/s], systems.h20.instance.tp: [1, 2]}`` makes four
points, in row-major order of the keys as written (the last key varies fastest).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

__all__ = ["grid_points", "set_path", "split_path"]


def split_path(dotted: str) -> list[str | int]:
    """``"systems.h20.instance.tp"`` -> ``["systems", "h20", "instance", "tp"]`` (digits -> list index)."""
    parts: list[str | int] = []
    for part in dotted.split("."):
        if part == "":
            raise ValueError(f"empty component in field path {dotted!r}")
        parts.append(int(part) if part.isdigit() else part)
    return parts


def set_path(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``data`` with the field at ``dotted`` set to ``value`` (creating mappings)."""
    out = copy.deepcopy(data)
    node: Any = out
    parts = split_path(dotted)
    for depth, part in enumerate(parts[:-1]):
        if isinstance(node, list):
            if not isinstance(part, int) or part >= len(node):
                raise ValueError(f"{'.'.join(map(str, parts[:depth + 1]))}: no such list item")
            node = node[part]
            continue
        if not isinstance(node, dict):
            raise ValueError(f"{'.'.join(map(str, parts[:depth]))} is not a mapping")
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
    if not isinstance(node, (dict, list)):
        raise ValueError(f"{'.'.join(map(str, parts[:-1]))} is not a mapping")
    node[parts[-1]] = copy.deepcopy(value)
    return out


def grid_points(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep values, as ``{dotted path: value}`` dicts."""
    if not sweep:
        return [{}]
    keys = list(sweep)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(sweep[k] for k in keys))]
