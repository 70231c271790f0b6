"""Text from input (scenario, system, pool and catalog names, swept values, descriptions) made safe
to write where it would otherwise be read as markup or as terminal commands.

:func:`markdown_text` is the one escaper for Markdown: every plain text a report writes into a
``.md`` page goes through it, so a name shows as written and never as HTML, a link, emphasis or a
table column -- in CommonMark/GFM viewers (GitHub, GitLab, markdown-it) and in Python-Markdown
alike. :func:`terminal_text` shows control characters (ANSI escape sequences, bidirectional
overrides) as ``\\x1b``-style escapes, so a name printed on a terminal cannot move its cursor,
recolour it or reorder the text around it. :func:`literal_figure_text` draws a figure's text as
written: a ``$...$`` in a name is not parsed as matplotlib mathtext (which refused ``$\\x{$``
and ended the run); a log axis drawn so needs :func:`plain_log_ticks`, since matplotlib's own
log tick labels are mathtext.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from typing import TypeVar

__all__ = ["markdown_text", "terminal_text", "literal_figure_text", "plain_log_ticks"]

_F = TypeVar("_F", bound=Callable)

# bidirectional marks, embeddings, overrides and isolates: invisible, yet they reorder what a
# terminal or a page shows around them ("Trojan source")
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def terminal_text(text: object) -> str:
    """``text`` with every control character (C0, DEL, C1; newline and tab too) and every
    bidirectional control written as its Python escape (``\\x1b``, ``\\n``, ``\\u202e``)."""
    return "".join(c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) == "Cc" or c in _BIDI
                   else c for c in str(text))


# Characters that start markup wherever they stand. The HTML ones become entities (a backslash
# does not stop raw HTML in Python-Markdown); the others a backslash escape, which CommonMark
# allows before any ASCII punctuation and Python-Markdown before these.
_ALWAYS = {"\\": "\\\\", "`": "\\`", "*": "\\*", "[": "\\[", "]": "\\]", "#": "\\#", "|": "\\|",
           "<": "&lt;", ">": "&gt;", "&": "&amp;"}
_ACTIVE = re.compile("[" + re.escape("".join(_ALWAYS)) + "_]")
# at the start of a block only: a list item (``- ``, ``+ ``, ``1. ``, ``1) ``) or a thematic break (``---``)
_BLOCK_START = re.compile(r"^(?:[-+](?=\s|$|-)|\d{1,9}[.)](?=\s|$))")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char != "_":
        return _ALWAYS[char]
    # an underscore between two letters or digits never opens nor closes emphasis (CommonMark's
    # flanking rules; Python-Markdown's too): h20_vs_l20 stays as written
    text, at = match.string, match.start()
    inside = 0 < at < len(text) - 1 and text[at - 1].isalnum() and text[at + 1].isalnum()
    return "_" if inside else "\\_"


def markdown_text(text: object, cell: bool = False) -> str:
    """``text`` as Markdown that renders as exactly that text (whitespace runs as one space);
    ``cell``: it fills a table cell, where nothing starts a block (a lone ``-`` stays as it is).

    Line breaks become spaces (a name must not end a table row or start a block), control
    characters are shown as escapes (:func:`terminal_text`), ``< > &`` become entities,
    ``\\ ` * [ ] # |`` and underscores outside words get a backslash, and so does a leading
    ``-``, ``+`` or ``1.`` that would start a list. Ordinary names (``h20_vs_l20``,
    ``offload-gap.v2``, ``tp8 pp2``) are unchanged.
    """
    flat = terminal_text(" ".join(str(text).split()))
    escaped = _ACTIVE.sub(_escape, flat)
    start = None if cell else _BLOCK_START.match(escaped)
    if start is None:
        return escaped
    marker = start.group()
    return (marker[:-1] + "\\" + marker[-1]) + escaped[len(marker):]


def literal_figure_text(draw: _F) -> _F:
    """Decorate a function that builds (and saves) a matplotlib figure: every text in it is drawn
    as written, never parsed as mathtext, while it runs (the caller's settings are restored)."""
    @functools.wraps(draw)
    def literally(*args, **kwargs):
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)
    return literally  # type: ignore[return-value]


def plain_log_ticks(axis, suffix: str = "") -> None:
    """Ticks of a base-10 log ``axis`` at 1, 2, 5 x 10^k -- at 10^k alone where those labels would
    touch at the axis's drawn length, at every other decade where even those would -- or, on an
    axis spanning less than about three such steps (0.9 to 1.6, as a speed-up near 1 often does),
    at round linear steps; written as plain numbers (200, not 2 x 10^2) followed by ``suffix``
    (``"x"``: a ratio reads 2x, 3x), no minor labels. Matplotlib writes log tick labels as mathtext
    (``$\\mathdefault{10^{2}}$``), which a figure drawn by :func:`literal_figure_text` would show as
    those characters."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    def label(value: float, _position: object = None) -> str:
        return f"{value:g}{suffix}"

    axis.set_major_locator(_PlainLogLocator(LogLocator(subs=(1.0, 2.0, 5.0)), LogLocator(subs=(1.0,)),
                                            MaxNLocator(nbins=5, steps=[1, 2, 5, 10]), label))
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


def _crowded(axis, ticks: list[float], low: float, high: float, label: Callable[[float], str]) -> bool:
    """Whether two neighbouring labels of ``ticks`` (on a log ``axis`` viewing ``low`` to ``high``)
    would touch at the axis's current drawn length: widths estimated at 0.62 em a character
    along x, heights at 1.25 em along y, with 3 pixels between."""
    import math

    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties

    axes = getattr(axis, "axes", None)
    if axes is None or len(ticks) < 2 or low <= 0 or high <= low:
        return False
    along_x = axis.axis_name == "x"
    length_px = axes.bbox.width if along_x else axes.bbox.height
    size_px = (FontProperties(size=rcParams[f"{axis.axis_name}tick.labelsize"]).get_size_in_points()
               * axes.figure.dpi / 72.0)
    span = math.log10(high) - math.log10(low)
    where = [(math.log10(t) - math.log10(low)) / span * length_px for t in ticks]
    for (a, pa), (b, pb) in zip(zip(ticks, where), zip(ticks[1:], where[1:])):
        need = ((len(label(a)) + len(label(b))) / 2 * 0.62 * size_px if along_x else 1.25 * size_px) + 3.0
        if pb - pa < need:
            return True
    return False


def _PlainLogLocator(log, decades, linear, label):
    """A locator that gives ``log``'s ticks inside the view where they are 3 to 10 and their labels
    do not touch, the ``decades``' where ``log`` would give more or crowd them (every other decade
    where those crowd), and ``linear``'s (positive ones) where ``log`` gives fewer than 3."""
    from matplotlib.ticker import Locator

    class PlainLogLocator(Locator):
        def set_axis(self, axis):
            super().set_axis(axis)
            for locator in (log, decades, linear):
                locator.set_axis(axis)

        def __call__(self):
            low, high = sorted(self.axis.get_view_interval())
            return self.tick_values(low, high)

        def tick_values(self, vmin, vmax):
            low, high = sorted((vmin, vmax))
            slack = 1e-9 * (high - low)

            def inside(ticks):
                return [t for t in ticks if low - slack <= t <= high + slack]

            def crowded(ticks):
                return self.axis is not None and _crowded(self.axis, ticks, low, high, label)

            ticks = inside(log.tick_values(low, high))
            if len(ticks) > 10 or (len(ticks) >= 3 and crowded(ticks)):
                ticks = inside(decades.tick_values(low, high))
                while len(ticks) > 2 and crowded(ticks):
                    ticks = ticks[::2]
                return ticks
            if len(ticks) >= 3:
                return ticks
            return [t for t in inside(linear.tick_values(low, high)) if t > 0]

    return PlainLogLocator()
