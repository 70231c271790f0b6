"""Figures a planner can read: measured on the drawn matplotlib figures (tests/figure_checks.py),
no two tick labels of an axis overlap, a log axis is labelled with plain numbers (a speed-up axis
2x, 3x...), and no axis label, title, tick label or legend text leaves the figure. Every figure
the plan report and the run report draw is checked as it is saved; the cases are ones that broke
before: a TTFT CDF spanning decades, a speed-up axis under one decade, a long y label."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from figure_checks import layout_problems  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def checked(monkeypatch):
    """Every figure saved while the test runs, checked just before its first save: {name: problems}."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    seen: dict[int, list[str]] = {}
    save = Figure.savefig

    def checking(self, fname, *args, **kwargs):
        if id(self) not in seen:
            seen[id(self)] = layout_problems(self, tight=kwargs.get("bbox_inches") == "tight")
        return save(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", checking)
    return seen


def _axis(width_in: float, low: float, high: float, which: str = "x", suffix: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvsim.escape import plain_log_ticks

    fig, ax = plt.subplots(figsize=(width_in, width_in) if which == "y" else (width_in, 2.0), dpi=110)
    ax.plot([low, high], [low, high])
    getattr(ax, f"set_{which}scale")("log")
    getattr(ax, f"set_{which}lim")(low, high)
    plain_log_ticks(getattr(ax, f"{which}axis"), suffix)
    fig.tight_layout()
    return fig, ax


def test_log_ticks_on_a_narrow_axis_do_not_overlap():
    # 0.05 to 50 s on a 2.6-inch axis: ten ticks at 1, 2, 5 x 10^k would run into each other
    fig, ax = _axis(2.6, 0.05, 50.0)
    assert layout_problems(fig) == []
    labels = [t.get_text() for t in ax.xaxis.get_majorticklabels() if t.get_text()]
    assert len(labels) >= 2
    # the check itself finds the collision the old ticks made on the same axis
    from matplotlib.ticker import FixedLocator

    ax.xaxis.set_major_locator(FixedLocator([0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50]))
    assert any("overlap" in p for p in layout_problems(fig))


def test_a_wide_axis_keeps_the_1_2_5_ticks():
    fig, ax = _axis(9.0, 0.05, 50.0)
    assert layout_problems(fig) == []
    ticks = [t for t in ax.xaxis.get_majorticklocs() if 0.05 <= t <= 50]
    assert ticks == pytest.approx([0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50])


def test_a_speedup_axis_reads_2x_3x():
    # under one decade (1.5x to 6.5x): round linear steps, written as ratios, never 2 x 10^0
    fig, ax = _axis(4.0, 1.5, 6.5, which="y", suffix="x")
    assert layout_problems(fig) == []
    low, high = ax.get_ylim()
    labels = [label.get_text() for loc, label in zip(ax.yaxis.get_majorticklocs(), ax.yaxis.get_majorticklabels())
              if low <= loc <= high]
    assert labels == ["2x", "3x", "4x", "5x", "6x"]


def test_plan_report_figures_are_readable(checked):
    from kvsim.report.plan_report import plan_report_files

    answer = json.loads((ROOT / "docs" / "plan_offload.json").read_text(encoding="utf-8"))
    plan_report_files(answer, "plan")
    assert len(checked) == 4
    assert [p for problems in checked.values() for p in problems] == []


def test_run_report_figures_are_readable(checked):
    from kvsim.report.run_report import run_report_files

    run_report_files(ROOT / "docs" / "headline", "report")
    assert len(checked) >= 3
    assert [p for problems in checked.values() for p in problems] == []


def test_a_cdf_over_five_decades_is_readable(checked):
    from kvsim.report.run_figures import figure_cdf

    rng = np.random.default_rng(3)
    rows = []
    for system, scale in (("h20", 0.01), ("l20-with-a-long-name", 1.0), ("b200", 30.0)):
        for point in range(6):
            ttft = scale * (1 + point) * rng.lognormal(0.0, 1.0, 400)
            rows.append(pd.DataFrame({"system": system, "point": point, "arrival_s": rng.uniform(0, 100, 400),
                                      "ttft_s": ttft, "tpot_s": 0.01 * (1 + point) * rng.lognormal(0, 0.3, 400)}))
    frame = pd.concat(rows, ignore_index=True)
    figure = figure_cdf(frame, ["h20", "l20-with-a-long-name", "b200"], {k: f"{5 * (k + 1)}/s" for k in range(6)},
                        (0.0, 100.0), {"ttft_p99": 2.0, "tpot_p99": 0.05}, "t")
    assert figure is not None and "<title>" in figure.svg
    assert len(checked) == 1
    assert [p for problems in checked.values() for p in problems] == []


def test_pd_heatmap_marks_and_explains_flagged_cells():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvsim.report.pd import goodput_heatmap

    systems = ["950dt", "950pr"] + [f"pd-{p}-{8 - p}" for p in range(2, 7)]
    rows = [{"system": s, "p_d_cards": "colocated" if s.startswith("950") else f"{8 * int(s[3])}:{8 * int(s[5])}",
             "workload.arrival.rate": rate, "goodput_per_card_rps": 0.47 if rate == "30/s" else 0.001 * k,
             "flag": "" if rate == "30/s" else "unstable"}
            for k, s in enumerate(systems) for rate in ("90/s", "30/s", "60/s")]
    fig = goodput_heatmap(pd.DataFrame(rows), "workload.arrival.rate", "pd", plt)
    try:
        assert layout_problems(fig) == []
        ax = fig.axes[0]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["30/s", "60/s", "90/s"]  # by load, not as listed
        cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
        assert cells[(0, 0)] == "0.47" and cells[(1, 1)] == "0.001*"  # flagged: starred
        assert any("flagged" in t.get_text() for legend in fig.legends for t in legend.get_texts())
    finally:
        plt.close(fig)


def test_study_figures_are_readable(checked, tmp_path):
    # the options and gap studies of the tests that run them (seconds each): checked as they are saved
    import kvsim
    from kvsim.report.gap import gap_figure
    from kvsim.report.options import options_figure
    from test_gap import SCENARIO as GAP
    from test_options_study import SCENARIO as OPTIONS

    options = kvsim.run(kvsim.parse_scenario(OPTIONS.format(ttft="2 s"), "opts.yaml"))
    options_figure(options, tmp_path / "options.png")
    gap = kvsim.run(kvsim.parse_scenario(GAP, "g.yaml"))
    gap_figure(gap, tmp_path / "gap.png")
    assert len(checked) == 2
    assert [p for problems in checked.values() for p in problems] == []


def test_pd_study_figures_are_readable(checked, tmp_path):
    # the P:D study of tests/test_pd_report.py: the goodput heat-map and the timeline
    import kvsim
    from kvsim.report.pd import pd_figures
    from test_pd_report import SCENARIO as PD

    result = kvsim.run(kvsim.parse_scenario(PD, "pd.yaml"))
    assert [p.name for p in pd_figures(result, tmp_path)] == ["pd_goodput.png", "pd_timeline.png"]
    assert len(checked) == 2
    assert [p for problems in checked.values() for p in problems] == []
