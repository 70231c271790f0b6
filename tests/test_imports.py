"""Start-up cost (issue 23): ``import kvsim`` and a plain run load only what they use.

Each check runs in a fresh interpreter (the test process has long since imported everything)
and reads ``sys.modules`` there: what was imported, not how long it took.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

HEAVY = ("pandas", "networkx", "matplotlib", "scipy")
"""Libraries a plain ``import kvsim`` must not load."""

NOT_FOR_A_RUN = ("pandas", "pyarrow", "matplotlib", "kvsim.calibration.measurements", "kvsim.calibration.checks",
                 "kvsim.report.run_report", "kvsim.report.files", "kvsim.plan.sweep", "kvsim.plan.store")
"""Modules a run of a scenario without a trace or length file needs none of (frames, reports,
calibration, the sweep's store are for writing and other commands; pyarrow reads files)."""


def _loaded(code: str) -> dict:
    """Run ``code`` in a fresh interpreter at the repository root; returns the JSON it prints
    last, with ``modules``: every module imported by then."""
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps({'modules': sorted(sys.modules), **OUT}))\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _heavy(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules]


def test_import_kvsim_loads_no_heavy_library():
    loaded = _loaded("import kvsim\nOUT = {}")
    assert _heavy(loaded["modules"], HEAVY) == []
    assert not any(m.startswith(("kvsim.sim", "kvsim.report", "kvsim.calibration")) for m in loaded["modules"])


def test_every_public_name_resolves_to_its_source():
    loaded = _loaded("""
        import kvsim
        from kvsim import *  # noqa: F403
        import kvsim.api, kvsim.yaml_io
        OUT = {"missing": [n for n in kvsim.__all__ if n not in globals()],
               "differ": [n for n in kvsim.__all__ if n != "__version__"
                          and getattr(kvsim, n) is not getattr(kvsim.yaml_io if n == "SpecError" else kvsim.api, n)],
               "dir": [n for n in kvsim.__all__ if n not in dir(kvsim)]}
    """)
    assert loaded["missing"] == [] and loaded["differ"] == [] and loaded["dir"] == []


def test_an_unknown_name_is_an_attribute_error():
    import kvsim

    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        kvsim.no_such_name  # noqa: B018
    assert not hasattr(kvsim.report, "no_such_name")


def test_lazy_packages_keep_their_names():
    loaded = _loaded("""
        import kvsim.plan.run_cost
        import kvsim.plan
        from kvsim.plan import ExecutorError, RunCost, SweepStats, default_workers, run_cost, run_sweep
        from kvsim.report import comparison_table, run_document, write_results, write_run_report
        from kvsim.calibration import MeasurementError, StepPoint, VllmRun, read_measurements
        import kvsim.report.files, kvsim.plan.sweep, kvsim.calibration.measurements
        OUT = {"run_cost_is_function": callable(run_cost) and not hasattr(run_cost, "__path__")
                                       and kvsim.plan.run_cost is run_cost,
               "same": [write_results is kvsim.report.files.write_results, run_sweep is kvsim.plan.sweep.run_sweep,
                        read_measurements is kvsim.calibration.measurements.read_measurements]}
    """)
    assert loaded["run_cost_is_function"] and all(loaded["same"])


def test_probing_a_private_name_loads_nothing():
    loaded = _loaded("import kvsim\nOUT = {'has': hasattr(kvsim, '_pytest_probe') or hasattr(kvsim, '__wrapped__')}")
    assert not loaded["has"] and "kvsim.api" not in loaded["modules"]


def test_a_submodule_read_as_an_attribute_is_imported():
    """``import kvsim`` then ``kvsim.sim.run_scenario``: the package once imported it eagerly."""
    loaded = _loaded("import kvsim\nOUT = {'sim': kvsim.sim.run_scenario.__module__}")
    assert loaded["sim"] == "kvsim.sim.run"


def test_a_run_loads_no_frames_reports_or_calibration():
    loaded = _loaded("""
        import kvsim
        scenario = kvsim.load_scenario("scenarios/h20_vs_l20.yaml").with_changes(
            {"duration": "20 s", "warmup": "5 s", "sweep": {}})
        result = kvsim.run(scenario)
        OUT = {"requests": int(sum(run.records.n for run in result.runs))}
    """)
    assert loaded["requests"] > 0
    assert _heavy(loaded["modules"], NOT_FOR_A_RUN) == []


def test_a_run_of_a_csv_trace_and_its_result_files_load_no_pandas(tmp_path):
    """A trace read by pyarrow, the records written to Parquet and the summary to CSV: pyarrow's
    own conversions would import pandas (kvsim/arrow_numpy.py), a run's process does not."""
    trace = tmp_path / "azure.csv"
    rows = [f"2023-11-16 18:{m:02d}:{s:02d}.{s * 7919 % 10**7:07d},{100 + s},{2 + s % 9}"
            for m in range(2) for s in range(0, 60, 3)]
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    loaded = _loaded(f"""
        import kvsim
        from kvsim.report import write_results
        scenario = kvsim.load_scenario("scenarios/h20_vs_l20.yaml").with_changes(
            {{"duration": "200 s", "warmup": "5 s", "sweep": {{}}, "workload.input_tokens": None,
              "workload.output_tokens": None,
              "workload.arrival": {{"kind": "trace", "format": "azure_2023", "file": {str(trace)!r}}}}})
        result = kvsim.run(scenario)
        write_results(result, {str(tmp_path / "out")!r})
        OUT = {{"requests": int(sum(run.records.n for run in result.runs))}}
    """)
    assert loaded["requests"] == 2 * len(rows)  # each of the two systems served the trace
    assert "pyarrow.csv" in loaded["modules"] and "pyarrow.parquet" in loaded["modules"]
    assert _heavy(loaded["modules"], ("pandas", "matplotlib", "kvsim.report.run_report", "kvsim.plan.store")) == []
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {"requests.parquet", "summary.csv", "table.txt"}


def test_validate_loads_no_frames_nor_the_sweep_nor_a_graph():
    loaded = _loaded("""
        import contextlib, io
        from kvsim.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["validate", "scenarios/h20_vs_l20.yaml"])
        OUT = {"code": code}
    """)
    assert loaded["code"] == 0
    assert _heavy(loaded["modules"], NOT_FOR_A_RUN + ("networkx",)) == []  # it builds no topology


def test_frames_still_come_when_asked_for():
    loaded = _loaded("""
        import kvsim
        scenario = kvsim.load_scenario("scenarios/h20_vs_l20.yaml").with_changes(
            {"duration": "20 s", "warmup": "5 s", "sweep": {}})
        frame = kvsim.run(scenario).requests_frame()
        OUT = {"type": type(frame).__module__, "rows": len(frame)}
    """)
    assert loaded["type"].startswith("pandas") and loaded["rows"] > 0
    assert "pandas" in loaded["modules"]


def test_the_lazy_names_are_listed():
    """The tables above name real modules (a renamed one would make the checks pass vacuously)."""
    import importlib.util

    for name in NOT_FOR_A_RUN + ("networkx",):
        assert importlib.util.find_spec(name) is not None, name
