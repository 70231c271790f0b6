"""The HTML report's figures (kvsim.report.interactive): the SVG of a figure carries a hover
title on each tagged point and toggle attributes on the legend entries of tagged series, its ids
are its own (two figures on one page share none), and the same figure gives the same text."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from kvsim.report.document import Document, Figure, to_html, to_markdown  # noqa: E402
from kvsim.report.interactive import Tags, render  # noqa: E402


def _figure(name: str) -> Figure:
    fig, ax = plt.subplots(figsize=(4, 3))
    tags = Tags()
    for label, ys in (("h20", [1, 2, 4]), ("l20 <&>", [1, 1.5, 2])):
        line, = ax.plot([1, 2, 3], ys, label=label)
        tags.series(line, label, label)
        for x, y in zip([1, 2, 3], ys):
            tags.point(ax.scatter([x], [y]), label, f"{label} at {x}: {y}")
    tags.legend(ax.legend())
    png, svg = render(fig, name, tags)
    return Figure(name, png, "a caption", svg)


def test_points_carry_titles_and_legend_entries_toggle_their_series():
    svg = _figure("a.png").svg
    assert svg.startswith("<svg") and "<?xml" not in svg and "<metadata" not in svg
    assert "<title>h20 at 2: 2</title>" in svg and "<title>l20 &lt;&amp;&gt; at 3: 2</title>" in svg
    series = {m for m in re.findall(r'data-series="(\d+)"', svg)}
    toggles = re.findall(r'class="kvsim-toggle" data-toggle="(\d+)"', svg)
    assert series == {"0", "1"}
    assert sorted(toggles) == ["0", "0", "1", "1"]  # each entry's line and its text
    # 3 markers and the line per series
    assert len(re.findall(r'data-series="0"', svg)) == 4


def test_two_figures_on_a_page_share_no_id_and_render_the_same_twice():
    first, second = _figure("a.png"), _figure("b.png")
    assert first.svg == _figure("a.png").svg  # no date, no random id
    ids_a = set(re.findall(r'\bid="([^"]+)"', first.svg))
    ids_b = set(re.findall(r'\bid="([^"]+)"', second.svg))
    assert ids_a and not ids_a & ids_b
    # every reference points at an id of its own figure
    for svg, ids in ((first.svg, ids_a), (second.svg, ids_b)):
        refs = set(re.findall(r'url\(#([^)]+)\)', svg)) | set(re.findall(r'href="#([^"]+)"', svg))
        assert refs and refs <= ids


def test_html_inlines_the_svg_with_its_script_and_markdown_keeps_the_png():
    doc = Document("t")
    doc.figure(_figure("a.png"))
    page = to_html(doc)
    assert page.count("<svg") == 1 and "data:image/png" not in page and page.count("<script>") == 1
    assert "http://" not in page and "https://" not in page
    assert "![a caption](a.png)" in to_markdown(doc)
    plain = Document("t")
    plain.figure(Figure("b.png", b"\x89PNG", "png only"))
    assert "<script>" not in to_html(plain) and "data:image/png;base64," in to_html(plain)
