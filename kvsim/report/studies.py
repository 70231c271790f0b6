"""A scenario's study, written next to its results: one entry per ``study.kind``.

Each kind is a frame (one row per compared cell, also written as CSV), a Markdown page and its
figures; :func:`write_study` writes ``<kind>.md``, ``<kind>.csv`` and the figures, and returns the
page (to print) and the paths written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from kvsim.sim.result import RunResult

__all__ = ["write_study"]


class _Study(NamedTuple):
    frame: Callable
    markdown: Callable
    figures: Callable  # (result, out_dir, frame) -> list of paths


def _kinds() -> dict[str, _Study]:
    from kvsim.report.gap import gap_figure, gap_frame, gap_markdown
    from kvsim.report.options import options_figure, options_frame, options_markdown
    from kvsim.report.pd import pd_figures, pd_frame, pd_markdown

    return {
        "pd": _Study(pd_frame, pd_markdown, pd_figures),
        "gap": _Study(gap_frame, gap_markdown, lambda r, out, f: [gap_figure(r, out / "gap.png", f)]),
        "options": _Study(options_frame, options_markdown,
                          lambda r, out, f: [options_figure(r, out / "options.png", f)]),
    }


def write_study(result: RunResult, out: Path) -> tuple[str, list[Path]]:
    """Write the scenario's study into folder ``out``; returns its Markdown and the files written."""
    kind = result.scenario.spec.study.kind
    study = _kinds()[kind]
    frame = study.frame(result)
    markdown = study.markdown(result, frame)
    (out / f"{kind}.md").write_text(markdown, encoding="utf-8")
    frame.to_csv(out / f"{kind}.csv", index=False)
    return markdown, [out / f"{kind}.md", out / f"{kind}.csv"] + list(study.figures(result, out, frame))
