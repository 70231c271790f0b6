"""Figures that a reader of the HTML report can query: the matplotlib figure is drawn once and
saved twice, as PNG (beside the Markdown) and as SVG inlined in the HTML page, where every point
tagged while drawing carries its values as a native SVG ``<title>`` (the browser shows it on
hover) and each legend entry hides or shows its series when clicked (:data:`TOGGLE_SCRIPT`, a
few lines of inline JavaScript).

Why no chart library: a JavaScript library (even a small one such as uPlot) would draw every
figure a second time from its data, with its own log axes, flags and labels to keep in step
with the PNG; the SVG is the same drawing as the PNG, needs no file beside the page and no
network, and a browser without JavaScript still shows it with its hovers.
"""

from __future__ import annotations

import html
import io
import re
from typing import Any

__all__ = ["Tags", "render", "TOGGLE_SCRIPT"]

_GID = "kvsim-{kind}{series}-{n}"
_NUMBER = re.compile(r"-?\d+\.\d+")
_GID_OPEN = re.compile(r'<g id="kvsim-(?P<kind>[sl])(?P<series>\d+)-(?P<n>\d+)">')


class Tags:
    """What to make interactive in one figure, recorded while drawing it.

    :meth:`series` names an artist as part of a series (a system; a line of a CDF) with an
    optional hover text, :meth:`point` the same for a single marker; :meth:`legend` then makes
    the entries of a legend whose label is a series' label toggle that series. Artists get an
    SVG group id (matplotlib's ``gid``); :func:`render` turns those into ``<title>`` and
    ``data-`` attributes."""

    def __init__(self) -> None:
        self._series: dict[str, int] = {}
        self._titles: dict[str, str] = {}
        self._count = 0

    def _key(self, label: str) -> int:
        return self._series.setdefault(label, len(self._series))

    def _tag(self, artist: Any, kind: str, label: str, title: str | None) -> None:
        gid = _GID.format(kind=kind, series=self._key(label), n=self._count)
        self._count += 1
        artist.set_gid(gid)
        if title:
            self._titles[gid] = title

    def series(self, artist: Any, label: str, title: str | None = None) -> None:
        """Tag ``artist`` (a line, bars, markers) as part of the series ``label``, with a hover ``title``."""
        self._tag(artist, "s", label, title)

    point = series  # a single marker: the same, its title being its values

    def legend(self, legend: Any) -> None:
        """Make each entry of ``legend`` (from ``ax.legend`` or ``fig.legend``) whose text is a series
        label a toggle of that series: its handle and its text, clicked, hide or show it."""
        if legend is None:
            return
        handles = getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", [])
        for handle, text in zip(handles, legend.get_texts()):
            label = text.get_text()
            if label in self._series:
                for artist in (handle, text):
                    if artist is not None:
                        self._tag(artist, "l", label, f"click: hide or show {label}")

    @property
    def labels(self) -> list[str]:
        """The series labels, in the order first tagged."""
        return list(self._series)

    def title(self, gid: str) -> str | None:
        return self._titles.get(gid)


def render(fig: Any, name: str, tags: Tags | None = None, **savefig: Any) -> tuple[bytes, str]:
    """``fig`` as PNG bytes and as an SVG element (text) to inline in an HTML page; closes ``fig``.
    ``savefig``: further arguments of both saves (``bbox_inches="tight"``).

    Every id in the SVG is prefixed with one made of ``name`` (two figures on one page never share
    one) and matplotlib's hashed ids are salted with it, so the same figure gives the same text."""
    import matplotlib
    import matplotlib.pyplot as plt

    try:
        png = io.BytesIO()
        fig.savefig(png, format="png", **savefig)
        svg = io.StringIO()
        with matplotlib.rc_context({"svg.hashsalt": name, "svg.fonttype": "none"}):
            fig.savefig(svg, format="svg", metadata={"Date": None}, **savefig)
    finally:
        plt.close(fig)
    return png.getvalue(), _interactive(svg.getvalue(), name, tags or Tags())


def _rounded(match: re.Match[str]) -> str:
    return f"{float(match.group(0)):.2f}".rstrip("0").rstrip(".")


def _interactive(svg: str, name: str, tags: Tags) -> str:
    start = svg.index("<svg")
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg[start:], flags=re.S)
    # inline in HTML the parser gives <svg> and xlink:href their namespaces: no URL left in the page
    svg = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg)

    def opened(match: re.Match[str]) -> str:
        gid, kind, series = match.group(0)[7:-2], match.group("kind"), match.group("series")
        title = tags.title(gid)
        if kind == "s":
            attributes = f' data-series="{series}"'
        else:
            attributes = f' class="kvsim-toggle" data-toggle="{series}" tabindex="0" role="button"'
        return (f'<g id="{gid}"{attributes}>' + (f"<title>{html.escape(title)}</title>" if title else ""))

    svg = _GID_OPEN.sub(opened, svg)
    # path coordinates to 0.01 pt (matplotlib writes 1e-6): the same drawing, a third of the bytes
    svg = re.sub(r'\bd="([^"]*)"', lambda m: 'd="' + _NUMBER.sub(_rounded, m.group(1)) + '"', svg)
    prefix = "f-" + re.sub(r"[^A-Za-z0-9_-]", "-", name) + "-"
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", svg)
    svg = re.sub(r'(xlink:href|href)="#([^"]+)"', lambda m: f'{m.group(1)}="#{prefix}{m.group(2)}"', svg)
    return svg.strip()


TOGGLE_SCRIPT = """
document.querySelectorAll("svg .kvsim-toggle").forEach(function (entry) {
  function toggle() {
    var svg = entry.closest("svg"), key = entry.getAttribute("data-toggle");
    var hide = entry.getAttribute("data-hidden") !== "true";
    svg.querySelectorAll('.kvsim-toggle[data-toggle="' + key + '"]').forEach(function (e) {
      e.setAttribute("data-hidden", hide ? "true" : "false");
      e.style.opacity = hide ? "0.3" : "";
    });
    svg.querySelectorAll('[data-series="' + key + '"]').forEach(function (e) {
      e.style.display = hide ? "none" : "";
    });
  }
  entry.addEventListener("click", toggle);
  entry.addEventListener("keydown", function (event) {
    if (event.key === "Enter" || event.key === " ") { event.preventDefault(); toggle(); }
  });
});
"""
"""Hides or shows, within its own figure, the series of a clicked legend entry (and dims the entry)."""
