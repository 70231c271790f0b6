"""Sweep expansion: a grid over dotted field paths of the raw scenario data.

``sweep: {workload.arrival.rate: [5/s, 10/s], systems.h20.instance.tp: [1, 2]}`` makes four
points, in row-major order of the keys as written (the last key varies fastest).

Fields that must move together share one key, comma-separated, whose values are lists:
``"a.x, a.y": [[1, 10], [2, 20]]`` is one grid axis of two points (x=1, y=10), (x=2, y=20).
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
        # an index is ASCII digits of a sane length ("²" is a digit to str.isdigit, and 5,000 digits
        # exceed int()'s limit): anything else is a key like any other
        parts.append(int(part) if part.isascii() and part.isdigit() and len(part) <= 18 else part)
    return parts


def set_path(data: dict[str, Any], dotted: str, value: Any, in_place: bool = False) -> dict[str, Any]:
    """A deep copy of ``data`` (or ``data``, ``in_place``) with the field at ``dotted`` set to ``value``
    (creating mappings)."""
    out = data if in_place else copy.deepcopy(data)
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


def zipped_paths(key: str) -> list[str]:
    """The field paths of a sweep key (one, or several joined by commas)."""
    return [part.strip() for part in key.split(",")]


def grid_points(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep values, as ``{dotted path: value}`` dicts.

    Raises
    ------
    ValueError
        If a value of a comma-joined key is not a list with one entry per path.
    """
    if not sweep:
        return [{}]
    axes = []
    for key, values in sweep.items():
        paths = zipped_paths(key)
        if len(paths) == 1:
            axes.append([{key: value} for value in values])
            continue
        axis = []
        for value in values:
            if not isinstance(value, list) or len(value) != len(paths):
                raise ValueError(f"sweep.{key}: each value must be a list of {len(paths)} "
                                 f"(one per field), got {value!r}")
            axis.append(dict(zip(paths, value)))
        axes.append(axis)
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*axes)]
