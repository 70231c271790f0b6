"""What makes a figure unreadable, measured on the drawn figure: tick labels of one axis that
overlap (by their rendered extents), log-axis tick labels that are not plain numbers, tick labels
read against a multiplier ("1e6") printed at the axis's end, and
texts (axis labels, titles, tick labels, legends, annotations) that leave the figure (clipped
when saved). Used by tests/test_figure_layout.py."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["layout_problems"]

_PLAIN = re.compile(r"^-?\d+(\.\d+)?(e[-+]?\d+)?(x|K|/s)?$")


def _drawn_tick_labels(axis: Any) -> list[Any]:
    low, high = sorted(axis.get_view_interval())
    slack = 1e-9 * abs(high - low)
    return [label for loc, label in zip(axis.get_majorticklocs(), axis.get_majorticklabels())
            if low - slack <= loc <= high + slack and label.get_visible() and label.get_text()]


def _texts(fig: Any) -> list[Any]:
    texts = list(fig.texts)
    legends = list(fig.legends)
    for ax in fig.axes:
        texts += [ax.xaxis.label, ax.yaxis.label, ax.title, ax._left_title, ax._right_title]
        texts += _drawn_tick_labels(ax.xaxis) + _drawn_tick_labels(ax.yaxis) + list(ax.texts)
        if ax.get_legend() is not None:
            legends.append(ax.get_legend())
    if getattr(fig, "_suptitle", None) is not None:
        texts.append(fig._suptitle)
    for legend in legends:
        texts += list(legend.get_texts()) + [legend.get_title()]
    return [t for t in texts if t.get_visible() and t.get_text()]


def layout_problems(fig: Any, tight: bool = False) -> list[str]:
    """Every readability problem of ``fig`` as drawn now, as a sentence; empty when there is none.

    ``tight``: the figure is saved with ``bbox_inches="tight"`` (it grows to hold its texts), so
    no text can fall outside it."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    for k, ax in enumerate(fig.axes):
        for axis in (ax.xaxis, ax.yaxis):
            labels = _drawn_tick_labels(axis)
            boxes = [label.get_window_extent(renderer) for label in labels]
            for i in range(len(boxes)):
                for j in range(i + 1, len(boxes)):
                    if boxes[i].overlaps(boxes[j]):
                        problems.append(f"axes {k} {axis.axis_name}: tick labels {labels[i].get_text()!r} and "
                                        f"{labels[j].get_text()!r} overlap")
            offset = axis.get_offset_text()
            if offset.get_visible() and offset.get_text():
                problems.append(f"axes {k} {axis.axis_name}: tick labels scaled by {offset.get_text()!r} above the axis")
            if axis.get_scale() == "log":
                odd = [label.get_text() for label in labels if not _PLAIN.match(label.get_text())]
                if odd:
                    problems.append(f"axes {k} {axis.axis_name}: log tick labels not plain numbers: {odd}")
    if not tight:
        box = fig.bbox
        for text in _texts(fig):
            extent = text.get_window_extent(renderer)
            if (extent.x0 < box.x0 - 1 or extent.y0 < box.y0 - 1 or extent.x1 > box.x1 + 1
                    or extent.y1 > box.y1 + 1):
                problems.append(f"text {text.get_text()!r} leaves the figure ({extent} outside {box})")
    return problems
