"""The lines of a YAML text's field paths, as :mod:`kvsim.yaml_parse` records them: a path
inside an alias (``*name``) is looked up inside its anchor's value."""

from __future__ import annotations

from typing import Any

__all__ = ["LineMap"]


class LineMap(dict):
    """The 1-based line of each field path (a ``dict`` of path -> line), where a path inside an
    alias (``*name``) is looked up inside its anchor's value: ``lines[alias path + sub]`` is
    ``lines[anchor path + sub]``, the line that wrote it.

    Each alias is recorded once, as a redirection, rather than by copying its anchor's lines under
    its path: a copy per alias is as large as the value expanded, with path tuples as long as its
    nesting (a 53 KB file of aliases 55 deep held 980,000 of them, 500 MB).
    """

    __slots__ = ("aliases", "_alias_lengths")

    def __init__(self) -> None:
        super().__init__()
        self.aliases: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # alias path -> its anchor's path
        self._alias_lengths: tuple[int, ...] = ()  # the lengths of those alias paths, ascending

    def alias(self, path: tuple[Any, ...], anchor_path: tuple[Any, ...]) -> None:
        """Record that the value at ``path`` is an alias of the anchor at ``anchor_path``."""
        self.aliases[path] = anchor_path
        if len(path) not in self._alias_lengths:
            self._alias_lengths = tuple(sorted(self._alias_lengths + (len(path),)))

    def recorded(self, path: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The path whose line ``path`` has (itself, or its place inside an anchor), or None."""
        path = tuple(path)
        while not dict.__contains__(self, path):
            # at most one prefix of a path is an alias (nothing is written inside an alias); its
            # anchor's path is earlier in the text, so the redirections end
            for cut in self._alias_lengths:
                if cut < len(path) and path[:cut] in self.aliases:
                    path = self.aliases[path[:cut]] + path[cut:]
                    break
            else:
                return None
        return path

    def __contains__(self, path: object) -> bool:
        return isinstance(path, tuple) and self.recorded(path) is not None

    def __missing__(self, path: tuple[Any, ...]) -> int:
        found = self.recorded(path) if isinstance(path, tuple) else None
        if found is None:
            raise KeyError(path)
        return dict.__getitem__(self, found)

    def get(self, path: Any, default: Any = None) -> Any:
        return self[path] if path in self else default

    def __eq__(self, other: object) -> bool:
        return dict.__eq__(self, other) and self.aliases == getattr(other, "aliases", {})

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]
