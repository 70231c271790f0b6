"""A run's result files written without pandas hold what pandas wrote (kvsim/report/files.py):
``requests.parquet`` from an Arrow table of the records, the same columns, types, values and
nulls as pandas' table of the requests frame; ``summary.csv`` of one point without replications
by the csv module, byte for byte what pandas' ``to_csv`` wrote; every other file as before."""

from __future__ import annotations

import filecmp
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import kvsim
from kvsim.report import write_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from random_scenarios import random_case  # noqa: E402
from test_coalesce import _shortened  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

SOURCES = ["h20_vs_l20.yaml", "offload_gap.yaml", "pd_ratio.yaml", "pd_dynamic.yaml", "lora_shared_context.yaml",
           "routing_mooncake.yaml", 2, 5, 9]


def _result(source, swept: bool = False, replications: int = 1):
    if isinstance(source, str):
        scenario = _shortened(REPO / "scenarios" / source, duration="4 s")
        if not swept:
            scenario = scenario.with_changes({"sweep": {}})
    else:
        scenario = random_case(source).scenario()
    if replications > 1:
        scenario = scenario.with_changes({"replications": replications})
    return kvsim.run(scenario)


@pytest.fixture(scope="module", params=SOURCES)
def result(request):
    return _result(request.param)


def _old_frame(records) -> pd.DataFrame:
    """``RequestRecords.to_frame`` as it was written with pandas' operations."""
    frame = pd.DataFrame({name: records.column(name).copy() for name in records.fields})
    frame.insert(0, "request_id", np.arange(records.n, dtype=np.int64))
    frame["ttft_s"] = frame["first_token_s"] - frame["arrival_s"]
    frame["e2e_s"] = frame["finish_s"] - frame["arrival_s"]
    decode_steps = (frame["output_tokens"] - 1).where(frame["output_tokens"] > 1)
    frame["tpot_s"] = (frame["finish_s"] - frame["first_token_s"]) / decode_steps
    return frame


def test_the_records_columns_are_the_frame_pandas_made(result):
    for run in result.runs:
        pd.testing.assert_frame_equal(run.records.to_frame(), _old_frame(run.records), check_exact=True)


def _pandas_table(result) -> pa.Table:
    return pa.Table.from_pandas(result.requests_frame(), preserve_index=False)


def test_the_requests_table_is_pandas_table_of_the_requests_frame(result):
    table, want = result.requests_table(), _pandas_table(result)
    assert table.schema.equals(want.schema, check_metadata=False)
    assert table.equals(want, check_metadata=False)
    assert sum(table.column(name).null_count for name in table.column_names) > 0  # NaN written as null


@pytest.mark.parametrize("source, swept, replications", [("h20_vs_l20.yaml", True, 1), (3, False, 2),
                                                         ("pd_ratio.yaml", True, 2)])
def test_the_requests_table_of_sweeps_and_replications(source, swept, replications):
    result = _result(source, swept, replications)
    assert result.replicas or any(run.params for run in result.runs)
    assert result.requests_table().equals(_pandas_table(result), check_metadata=False)


def test_summary_rows_without_pandas_are_the_long_frames(result, tmp_path):
    rows = result.summary_value_rows()
    assert rows
    frame = result.summary_long_frame()
    assert rows == [[int(r.point), r.system, int(r.replica), r.metric, r.stat, r.value] for r in frame.itertuples()]
    write_results(result, tmp_path / "new")
    frame.to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "new" / "summary.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()


@pytest.mark.parametrize("source, swept, replications", [("h20_vs_l20.yaml", True, 1), (3, False, 2)])
def test_a_sweep_or_replications_summary_is_written_by_pandas(source, swept, replications, tmp_path):
    result = _result(source, swept, replications)
    assert result.summary_value_rows() is None
    write_results(result, tmp_path)
    result.summary_long_frame().to_csv(tmp_path / "pandas.csv", index=False)
    assert filecmp.cmp(tmp_path / "summary.csv", tmp_path / "pandas.csv", shallow=False)


def _write_with_pandas(result, out: Path) -> None:
    """The data files as ``write_results`` wrote them with pandas."""
    out.mkdir()
    result.requests_frame().to_parquet(out / "requests.parquet", index=False)
    result.summary_long_frame().to_csv(out / "summary.csv", index=False)
    for name in ("links", "storage", "timeseries", "decisions", "switches"):
        frame = getattr(result, f"{name}_frame")()
        if len(frame):
            frame.to_parquet(out / f"{name}.parquet", index=False)


def test_the_files_hold_what_pandas_wrote(result, tmp_path):
    write_results(result, tmp_path / "new")
    _write_with_pandas(result, tmp_path / "old")
    old = {p.name for p in (tmp_path / "old").iterdir()}
    new = {p.name for p in (tmp_path / "new").iterdir() if p.suffix in (".parquet", ".csv")}
    assert new == old  # the same tables, each written only when it has rows
    for name in sorted(old):
        if name.endswith(".csv"):
            assert (tmp_path / "new" / name).read_bytes() == (tmp_path / "old" / name).read_bytes()
        else:
            pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "new" / name),
                                          pd.read_parquet(tmp_path / "old" / name), check_exact=True)
            assert pq.read_table(tmp_path / "new" / name).equals(pq.read_table(tmp_path / "old" / name),
                                                                 check_metadata=False)
