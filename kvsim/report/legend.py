"""One legend for a whole figure, below its panels: inside a panel a legend covers that panel's
lines, and side-by-side panels share their systems. The figure grows by the legend's height
(and, where even one column is wider than the figure, by its width), so the panels keep their
size and no entry is cut off."""

from __future__ import annotations

from typing import Any

__all__ = ["legend_below"]


def legend_below(fig: Any, handles: list[Any], most_columns: int = 4, **options: Any) -> Any:
    """Put ``handles`` in a legend centred below the panels of ``fig`` in as many columns (up to
    ``most_columns``) as fit its width, then lay the figure out (``tight_layout``) above it.
    ``options`` go to ``fig.legend`` (``title=``, ``fontsize=``). Returns the legend (None, after
    the layout, when there is no handle)."""
    if not handles:
        fig.tight_layout()
        return None
    options = {"fontsize": 8, "frameon": False, **options}
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = None
    for columns in range(min(most_columns, len(handles)), 0, -1):
        if legend is not None:
            legend.remove()
        legend = fig.legend(handles=handles, loc="lower center", ncol=columns, **options)
        box = legend.get_window_extent(renderer)
        if box.width <= fig.bbox.width * 0.98:
            break
    box = legend.get_window_extent(renderer)
    width_in, height_in = box.width / fig.dpi + 0.1, box.height / fig.dpi + 0.1
    if width_in > fig.get_figwidth():
        fig.set_figwidth(width_in)
    fig.set_figheight(fig.get_figheight() + height_in)
    fig.tight_layout(rect=(0, height_in / fig.get_figheight(), 1, 1))
    return legend
