"""The report of a run (issue 10, part 5): ``kvsim report DIR`` on a run's results folder, and the
report ``kvsim run`` writes at its end. It reads the saved files only, opens without network
access, names every assumption, marks flagged points (in tables and as hollow markers) and the
saturation point of a swept load; bad folders get one line and exit 2."""

from __future__ import annotations

import contextlib
import html
import io
import json
import math
import re
import shutil

import pytest

from kvsim.cli import main
from kvsim.report.run_data import ReportInputError, load_axis, load_results, rows, saturation
from kvsim.report.run_figures import load_series
from kvsim.report.run_report import answer_paragraph, comparison_rows, cost_assumptions, run_document
from kvsim.report.table import FLAG_MARK

# L20 instances serving short prompts over 20 shared documents; 1/s and 4/s are comfortable for both,
# 16/s overloads the two instances without a cache (their backlog grows: flagged unstable)
SCENARIO = """\
name: report-tiny
description: Two one-card systems, one with a host DRAM tier, swept over load.
seed: 5
duration: 40 s
warmup: 5 s
model: qwen3-8b
dtype: bf16
workload:
  arrival: {kind: poisson, rate: 1/s}
  prefix: {kind: shared_documents, documents: 20, zipf_s: 0.9, document_tokens: {kind: fixed, value: 512},
           suffix_tokens: {kind: fixed, value: 64}}
  output_tokens: {kind: lognormal, median: 48, sigma: 0.4, max: 200}
slo: {ttft_p99: 2 s, tpot_p99: 100 ms}
systems:
  two: {node: l20-8x, instances: 2, instance: {tp: 1}}
  cached: {node: l20-8x, instances: 1, instance: {tp: 1}, kv_cache: {dram: {capacity: 16 GiB}}}
compare: {baseline: cached}
sweep:
  workload.arrival.rate: [1/s, 4/s, 16/s]
"""


def _main(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """``kvsim run`` of the scenario above (1 worker); its results folder."""
    base = tmp_path_factory.mktemp("runreport")
    (base / "s.yaml").write_text(SCENARIO, encoding="utf-8")
    rc, out, err = _main("run", base / "s.yaml", "--out", base / "out", "--workers", "1", "--no-progress")
    assert rc == 0, err
    assert "report written:" in out and "warning" not in err
    return base / "out"


def test_run_writes_the_report_and_it_renders_again_from_a_copied_folder(run_dir, tmp_path):
    assert (run_dir / "report.html").is_file() and (run_dir / "report.md").is_file()
    # the copy has no points/ store (no pickled runs): only the saved result files
    copy = tmp_path / "elsewhere"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("points", "report*"))
    rc, out, err = _main("report", copy, "--out", tmp_path / "docs", "--name", "study")
    assert rc == 0, err
    page = (tmp_path / "docs" / "study.html").read_text(encoding="utf-8")
    markdown = (tmp_path / "docs" / "study.md").read_text(encoding="utf-8")
    # the same report as the one kvsim run wrote, up to the figure names
    assert markdown == (run_dir / "report.md").read_text(encoding="utf-8").replace("report_", "study_")
    for figure in re.findall(r"\]\((study_\w+\.png)\)", markdown):
        assert (tmp_path / "docs" / figure).is_file()
    assert len(re.findall(r"<figure>", page)) == len(re.findall(r"!\[", markdown)) >= 4


def test_the_page_needs_no_network_and_names_every_assumption(run_dir):
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    markdown = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "http://" not in page and "https://" not in page and "//" not in re.sub(r"data:[^\"]*", "", page)
    # every reference is inside the page: the inline figures' own ids (markers, clip paths)
    links = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", page)
    ids = set(re.findall(r'\bid="([^"]+)"', page))
    assert links and all(link.startswith("#") and link[1:] in ids for link in links)
    assert "<link" not in page and "@import" not in page
    # one script, the report's own: a legend entry hides or shows its series (no library, nothing fetched)
    from kvsim.report.interactive import TOGGLE_SCRIPT

    assert page.count("<script") == 1 and f"<script>{TOGGLE_SCRIPT}</script>" in page
    summary = json.loads((run_dir / "summary.json").read_text())
    named = {a for p in summary["points"] for s in p["systems"].values() for a in s["cost"]["assumptions"]}
    assert named  # the catalog's L20 prices are assumptions; the cost defaults too
    for assumption in named:
        assert html.escape(assumption) in page and assumption in markdown
    # the catalog figures behind the run are listed with their sources
    assert "Sources of the catalog figures" in markdown and "memory_bandwidth" in markdown


def test_flagged_points_are_marked_in_the_table_and_hollow_in_the_plots(run_dir):
    results = load_results(run_dir)
    all_rows = rows(results)
    assert any(r.flags for r in all_rows) and any(not r.flags for r in all_rows)
    header, body = comparison_rows(results)
    numeric = [header.index(h) for h in ("goodput (req/s)", "total tok/s", "TTFT p99 (s)", "TPOT p99 (ms)")]
    for row, cells in zip(all_rows, body):
        assert cells[header.index("system")] == row.system
        for k in numeric:
            assert cells[k].endswith(FLAG_MARK) == bool(row.flags), (row.system, row.params, cells[k])
        assert cells[header.index("steady state")] == (", ".join(row.flags) if row.flags else "ok")
    for name in ("total_tokens_per_s", "goodput_requests_per_s", "ttft_s_p99", "tpot_s_p99"):
        series = load_series(all_rows, name)
        assert set(series) == {(s, "") for s in results.systems}
        for (system, _), points in series.items():
            flagged = {r.load: bool(r.flags) for r in all_rows if r.system == system}
            assert [p[0] for p in points] == sorted(flagged)
            assert all(hollow == flagged[load] for load, _, hollow in points)
    # the answer never quotes a flagged system's goodput as a result, and names its flags
    answer = answer_paragraph(results)
    for r in all_rows:
        if r.flags:
            assert f"{r.system} is flagged {', '.join(r.flags)}" in answer


def test_a_swept_load_gets_its_saturation_point(run_dir):
    results = load_results(run_dir)
    axis = load_axis(results)
    assert axis.key == "workload.arrival.rate" and axis.value("16/s") == 16.0
    all_rows = rows(results)
    for system in results.systems:
        series = [r for r in all_rows if r.system == system]
        # by hand: the first load, in increasing order, flagged unstable or missing an SLO threshold
        expected = next((r.load for r in sorted(series, key=lambda r: r.load)
                         if "unstable" in r.flags or not all(r.summary["slo_met"].values())), None)
        found = saturation(series)
        assert (found.load if found else None) == expected
    # without a cache, two instances compute every prompt in full and fall behind at 16/s; the one
    # with a cache serves most prompt tokens from HBM and keeps up
    uncached = saturation([r for r in all_rows if r.system == "two"])
    assert uncached is not None and uncached.load == 16.0 and "unstable" in uncached.flags
    assert saturation([r for r in all_rows if r.system == "cached"]) is None
    assert "two at 16/s; cached not within the loads run (up to 16/s)" in answer_paragraph(results)


def _row(goodput, flags=(), slo=True, tpot=0.05):
    return {"goodput_requests_per_s": goodput, "requests_per_s": goodput, "total_tokens_per_s": 100 * goodput,
            "ttft_s": {"p50": 0.2, "p99": 0.5}, "tpot_s": {"p50": tpot / 2, "p99": tpot},
            "slo_met": {"ttft_p99": True, "tpot_p99": slo}, "flags": list(flags),
            "cost": {"usd_per_million_output_tokens": 1.0 / max(goodput, 1e-9), "assumptions": [f"assumed {goodput}"]}}


def _write(folder, points, systems=("a", "b")):
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"format": 2, "scenario": "hand", "seed": 1, "kvsim_version": "x", "duration_s": 100.0,
               "warmup_s": 10.0, "baseline": "b", "sweep": {"workload.arrival.rate": [p[0] for p in points]},
               "replications": 1, "system_names": list(systems),
               "points": [{"index": k, "params": {"workload.arrival.rate": rate}, "seed": 1,
                           "systems": dict(zip(systems, metrics))} for k, (rate, metrics) in enumerate(points)]}
    (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return folder


def test_the_answer_gives_ratios_only_between_steady_finite_figures(tmp_path):
    folder = _write(tmp_path / "r", [
        ("1/s", [_row(1.0), _row(0.5)]),                           # both steady: a ratio
        ("2/s", [_row(2.0), _row(1.9, flags=["unstable"])]),       # b flagged: no ratio, named flagged
        ("4/s", [_row(3.0, slo=False, tpot=0.2), _row(0.0)]),      # a misses the SLO; b's zero: no ratio
        ("6/s", [_row(3.0, slo=False, tpot=0.2), _row(0.5)]),
        ("8/s", [_row(0.1, flags=["unstable", "too_short"]), _row(math.nan)]),
    ])
    results = load_results(folder)
    answer = answer_paragraph(results)
    assert "At 1/s a serves the most goodput within the SLO, 1 requests/s (2.00x b's 0.5)" in answer
    assert "At 2/s a serves the most goodput within the SLO, 2 requests/s;" in answer
    assert "b is flagged unstable (not a steady-state number)" in answer and "1.9" not in answer
    assert "At 4/s no steady system completes requests within the SLO; a misses the SLO (TPOT p99)" in answer
    assert "At 6/s b serves the most goodput within the SLO, 0.5 requests/s; a misses the SLO (TPOT p99)" in answer
    assert "At 8/s no system serves the load within the SLO in a steady state" in answer
    assert "inf" not in answer and "nan" not in answer.lower()
    assert "a at 4/s" in answer and "b at 2/s" in answer  # saturation: SLO miss for a, unstable for b
    header, body = comparison_rows(results)
    ratios = [cells[header.index("goodput / b")] for cells in body]
    assert ratios == ["2.00x", "", f"1.05x{FLAG_MARK}", "", "-", "", "6.00x", "", "-", ""]
    # renders without scenario.yaml or requests.parquet (no CDF, no sources), every assumption named
    doc = run_document(results)
    text = "\n".join(str(v) for _, v in doc.blocks)
    assert all(a in text for a in cost_assumptions(results))
    assert [f.name for f in doc.figures()] == ["report_throughput.png", "report_latency.png", "report_cost.png"]


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "holds no plan.json nor summary.json"),
    (lambda d: (d / "summary.json").write_text("{not json"), "cannot read"),
    (lambda d: (d / "summary.json").write_text(json.dumps({"systems": {}})), "not a run summary of format 2"),
    (lambda d: (d / "summary.json").write_text(json.dumps({"format": 2, "scenario": "x", "system_names": ["a"],
                                                           "points": [], "duration_s": 1, "warmup_s": 0})),
     "non-empty list"),
])
def test_report_on_a_bad_folder_exits_2_with_one_line(tmp_path, setup, message):
    folder = tmp_path / "bad"
    folder.mkdir()
    setup(folder)
    rc, out, err = _main("report", folder)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err
    with pytest.raises(ReportInputError):
        load_results(folder)


def test_report_on_a_damaged_requests_file_exits_2(tmp_path):
    folder = _write(tmp_path / "r", [("1/s", [_row(1.0), _row(0.5)])])
    (folder / "requests.parquet").write_bytes(b"not parquet")
    rc, _, err = _main("report", folder)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "requests.parquet" in err


def test_a_report_that_fails_to_render_keeps_the_run(tmp_path, monkeypatch):
    import kvsim.report.run_report as run_report

    def broken(*args, **kwargs):
        raise RuntimeError("renderer\nbroke")

    monkeypatch.setattr(run_report, "write_run_report", broken)
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("[1/s, 4/s, 16/s]", "[1/s]").replace("40 s", "10 s"))
    rc, out, err = _main("run", tmp_path / "s.yaml", "--out", tmp_path / "out", "--workers", "1", "--no-progress")
    assert rc == 0 and (tmp_path / "out" / "summary.json").is_file() and "results written:" in out
    warning = [line for line in err.splitlines() if "report was not written" in line]
    assert warning == ["kvsim run: warning: the report was not written (RuntimeError: renderer broke)"]
    assert not (tmp_path / "out" / "report.html").exists()
    monkeypatch.undo()
    rc, out, _ = _main("run", tmp_path / "s.yaml", "--out", tmp_path / "out", "--workers", "1", "--no-progress",
                       "--no-report")
    assert rc == 0 and "report written" not in out and not (tmp_path / "out" / "report.html").exists()


def test_printed_ratios_are_dashes_where_a_side_is_not_finite():
    from kvsim.report.table import _ratio

    assert _ratio(2.0, 1.0) == "2.00x" and _ratio(2.0, 1.0, flagged=True) == f"2.00x{FLAG_MARK}"
    for value, base in ((1.0, 0.0), (0.0, 0.0), (math.inf, 1.0), (1.0, math.nan), (None, 1.0), (1.0, math.inf)):
        assert _ratio(value, base) == "-"
