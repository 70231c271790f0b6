"""The HTML reports open in a browser with no network: headless Chromium loads a plan's report
and a run's report from disk with every connection cut off, and finds no console error, no
request beyond the page itself, a hover title on the figures' points and legend entries that
hide and show their series (kvsim.report.interactive). Skipped, saying why, only where Chromium
is not installed (.ci/run installs it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from chromium_page import Page, chromium_path  # noqa: E402
from kvsim.report.document import write_files  # noqa: E402
from kvsim.report.plan_report import plan_report_files  # noqa: E402
from kvsim.report.run_report import run_report_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install -y chromium; "
                                "or KVSIM_CHROMIUM=/path/to/chrome): the offline browser test of the HTML report "
                                "needs a browser")

_FIGURES = """Array.from(document.querySelectorAll("figure")).map(function (f) {
  var svg = f.querySelector("svg");
  return {svg: !!svg, img: !!f.querySelector("img"), titles: svg ? svg.querySelectorAll("title").length : 0,
          toggles: svg ? svg.querySelectorAll(".kvsim-toggle").length : 0,
          width: f.getBoundingClientRect().width, height: svg ? svg.getBoundingClientRect().height : 0};
})"""

# click the first legend entry of figure k; how many of its series' parts are drawn, before and after
_TOGGLE = """(function (k) {
  var svg = document.querySelectorAll("figure svg")[k];
  var entry = svg.querySelector(".kvsim-toggle"), key = entry.getAttribute("data-toggle");
  function shown() {
    return Array.from(svg.querySelectorAll('[data-series="' + key + '"]')).filter(function (e) {
      return getComputedStyle(e).display !== "none"; }).length;
  }
  var counts = [shown()];
  entry.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  counts.push(shown());
  entry.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", bubbles: true}));
  counts.push(shown());
  return counts;
})(%d)"""


def _check_offline(page_path: Path) -> list[dict]:
    with Page(CHROMIUM) as page:
        page.open(page_path)
        figures = page.evaluate(_FIGURES)
        toggled = [page.evaluate(_TOGGLE % k) for k, f in enumerate(figures) if f["svg"] and f["toggles"]]
        errors, requests = page.console_errors(), page.requests()
    assert errors == [], f"console errors in {page_path.name}: {errors}"
    assert requests == [page_path.resolve().as_uri()], f"{page_path.name} requested more than itself: {requests}"
    assert figures and all(f["svg"] and not f["img"] for f in figures), figures
    assert all(f["titles"] > 0 and f["height"] > 100 for f in figures), figures
    assert toggled, "no figure has a legend entry that toggles a series"
    for before, hidden, again in toggled:
        assert before > 0 and hidden == 0 and again == before, (before, hidden, again)
    return figures


def test_plan_report_opens_offline_with_hovers_and_toggles(tmp_path):
    answer = json.loads((ROOT / "docs" / "plan_offload.json").read_text(encoding="utf-8"))
    write_files(tmp_path, plan_report_files(answer, "plan"))
    figures = _check_offline(tmp_path / "plan.html")
    assert len(figures) == 4  # shared pool, sensitivity, capacity, probes: each inline SVG


def test_run_report_opens_offline_with_hovers_and_toggles(tmp_path):
    write_files(tmp_path, run_report_files(ROOT / "docs" / "headline", "report"))
    figures = _check_offline(tmp_path / "report.html")
    assert len(figures) >= 3  # throughput, latency, cost (the committed run keeps no records: no CDF)


def test_a_fresh_run_report_with_every_figure_opens_offline(tmp_path):
    # the run of tests/test_run_report.py: its records give the CDFs, its DRAM tier the hit rates
    from kvsim.cli import main
    from test_run_report import SCENARIO

    (tmp_path / "s.yaml").write_text(SCENARIO, encoding="utf-8")
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"), "--workers", "1",
                 "--no-progress"]) == 0
    figures = _check_offline(tmp_path / "out" / "report.html")
    assert len(figures) == 5  # throughput, latency, CDF, hit rates, cost
