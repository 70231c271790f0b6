"""The ``study:`` section of a scenario: which report a sweep's results become (one spec per
``kind``; the reports are :mod:`kvsim.report`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kvsim.spec_types import Count, FrozenSpec

__all__ = ["GapStudySpec", "PDStudySpec", "OptionsStudySpec", "StudySpec"]


class GapStudySpec(FrozenSpec):
    """Compare a high-end and a low-end configuration under several KV-cache options.

    ``configs`` maps an option's label to its ``[high system, low system]`` pair; the first
    option is the reference (usually no cache). The gap is ``metric`` of high / of low, per
    sweep point; ``x`` and ``panel`` name the sweep fields for the figure's axis and panels.
    """

    kind: Literal["gap"] = "gap"
    high: str = "high"
    low: str = "low"
    configs: dict[str, list[str]] = Field(min_length=1)
    metric: str = "input_tokens_per_s"
    x: str | None = None
    panel: str | None = None
    panel_label: str | None = None


class PDStudySpec(FrozenSpec):
    """Colocated and disaggregated systems side by side: goodput per card and per dollar, latency,
    handoff traffic (``pd.md``, ``pd.csv``, ``pd_goodput.png``); ``x`` names the swept load field
    for the figure, and ``timeline`` the systems whose P:D ratio over time is drawn
    (``pd_timeline.png``) at sweep point ``timeline_point`` (an index into the grid, default 0)."""

    kind: Literal["pd"] = "pd"
    x: str | None = None
    timeline: list[str] = Field(default_factory=list)
    timeline_point: Count = 0


class OptionsStudySpec(FrozenSpec):
    """Systems that differ in one design choice (the options), compared on one workload
    (``options.md``, ``options.csv``, ``options.png``; see :mod:`kvsim.report.options`): TTFT and
    its speed-up over ``reference`` (default: the first system) at the lightest load, hit rate,
    peak KV bytes, dedup and cross-domain bytes, and capacity, the most of ``load`` (a swept
    field, e.g. ``workload.arrival.clients``) within the SLO; one table per value of ``x`` (a
    swept field, e.g. the shared context's length), labelled ``x_label``."""

    kind: Literal["options"] = "options"
    reference: str | None = None
    x: str | None = None
    x_label: str | None = None
    load: str | None = None


StudySpec = Annotated[GapStudySpec | PDStudySpec | OptionsStudySpec, Field(discriminator="kind")]
