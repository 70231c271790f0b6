"""NumPy from Arrow and back without pandas (kvsim/arrow_numpy.py), held to pyarrow's own
conversions; and the CSV trace reader's wall-clock stamps read by pyarrow held to pandas."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.arrow_numpy import constant_strings, from_numpy, to_numpy
from kvsim.workload import trace_csv
from kvsim.workload.trace_csv import AZURE_2023_COLUMNS, _plain_stamps_ns, read_csv_trace

floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
ints = st.integers(-2**63, 2**63 - 1)


def _chunked(values: list, arrow_type: pa.DataType, cuts: list[int], start: int) -> pa.ChunkedArray:
    """``values[start:]`` as a chunked array cut at ``cuts``, each chunk a slice of a longer array
    (a non-zero offset into its buffers)."""
    whole = pa.array(values, type=arrow_type, from_pandas=False)[start:]
    bounds = sorted({0, len(whole), *(c % (len(whole) + 1) for c in cuts)})
    return pa.chunked_array([whole[a:b] for a, b in zip(bounds, bounds[1:])], type=arrow_type)


@settings(max_examples=120, deadline=None)
@given(data=st.data(), kind=st.sampled_from(["double", "int64", "bool", "timestamp[ns]"]),
       cuts=st.lists(st.integers(0, 60), max_size=4), start=st.integers(0, 9))
def test_to_numpy_gives_pyarrows_values(data, kind, cuts, start):
    element = {"double": st.one_of(floats, st.none()), "int64": ints, "bool": st.booleans(),
               "timestamp[ns]": ints}[kind]
    values = data.draw(st.lists(element, min_size=start, max_size=60))
    arrow_type = {"double": pa.float64(), "int64": pa.int64(), "bool": pa.bool_(),
                  "timestamp[ns]": pa.timestamp("ns")}[kind]
    column = _chunked(values, arrow_type, cuts, start)
    got = to_numpy(column)
    want = column.to_numpy() if kind != "timestamp[ns]" else column.cast(pa.int64()).to_numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=kind == "double")
    if column.num_chunks == 1:
        assert np.array_equal(to_numpy(column.chunk(0)), want, equal_nan=kind == "double")


def test_to_numpy_refuses_what_has_no_numpy_array():
    with pytest.raises(ValueError, match="nulls"):
        to_numpy(pa.array([1, None, 3], type=pa.int64()))
    with pytest.raises(ValueError, match="nulls"):
        to_numpy(pa.array([True, None], type=pa.bool_()))
    with pytest.raises(TypeError, match="string"):
        to_numpy(pa.array(["a"]))
    assert to_numpy(pa.chunked_array([], type=pa.float64())).dtype == np.float64


@settings(max_examples=120, deadline=None)
@given(data=st.data(), kind=st.sampled_from(["float64", "int64", "bool"]), nan_is_null=st.booleans())
def test_from_numpy_makes_pyarrows_array(data, kind, nan_is_null):
    element = {"float64": floats, "int64": ints, "bool": st.booleans()}[kind]
    values = np.array(data.draw(st.lists(element, max_size=70)), dtype=kind)
    step = data.draw(st.integers(1, 3))  # not contiguous: copied once
    values = values[::step]
    got = from_numpy(values, nan_is_null)
    want = pa.array(values, from_pandas=nan_is_null)
    assert got.type == want.type and got.null_count == want.null_count
    assert got.equals(want) or (kind == "float64" and np.array_equal(got.to_numpy(zero_copy_only=False),
                                                                     want.to_numpy(zero_copy_only=False),
                                                                     equal_nan=True))
    assert got.to_pylist() == want.to_pylist() or kind == "float64"
    with pytest.raises(TypeError, match="int32"):
        from_numpy(np.zeros(2, dtype=np.int32))


@pytest.mark.parametrize("text, n", [("dgx-h100x40", 5), ("", 3), ("h20 · 8x", 4), ("x", 0), ("", 0)])
def test_constant_strings_are_pyarrows_large_strings(text, n):
    got = constant_strings(text, n)
    assert got.equals(pa.array([text] * n, type=pa.large_string()))


# ---------------------------------------------------------------------------------------------
# the CSV reader's wall-clock stamps: pyarrow where they are plain, pandas otherwise

def _pandas_seconds(stamps: list[str]) -> np.ndarray:
    """Seconds from the earliest stamp as pandas reads them (the reader's path for other forms)."""
    parsed = pd.to_datetime(pd.Series(stamps), format="ISO8601", errors="raise")
    ns = parsed.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    return (ns - ns.min()) / 1e9


def _column(tmp_path, stamps: list[str]) -> pa.ChunkedArray:
    path = tmp_path / "stamps.csv"
    path.write_text("t\n" + "\n".join(stamps) + "\n")
    return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        column_types={"t": pa.string()}, null_values=[""], strings_can_be_null=False)).column("t")


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_plain_stamps_read_by_pyarrow_are_pandas_seconds(tmp_path_factory, data):
    base = datetime(1990, 1, 1)
    offsets = data.draw(st.lists(st.integers(0, 10**18), min_size=1, max_size=30))  # ns up to ~31 years
    separator = data.draw(st.sampled_from([" ", "T"]))
    stamps = []
    for ns in offsets:
        when = base + timedelta(microseconds=ns // 1000)
        digits = data.draw(st.integers(0, 9))
        fraction = f"{when.microsecond:06d}{ns % 1000:03d}"[:digits]
        stamps.append(when.strftime(f"%Y-%m-%d{separator}%H:%M:%S") + (f".{fraction}" if digits else ""))
    column = _column(tmp_path_factory.mktemp("stamps"), stamps)
    ns = _plain_stamps_ns(column)
    assert ns is not None
    assert np.array_equal((ns - ns.min()) / 1e9, _pandas_seconds(stamps))


@pytest.mark.parametrize("stamps", [
    ["2023-11-16 18:15:46+02:00", "2023-11-16 18:15:47+02:00"],  # a zone
    ["2023-11-16", "2023-11-17"],  # a date alone
    ["2023-11-16 18:15:46.1234567891", "2023-11-16 18:15:47"],  # past nanoseconds
    ["2023-02-30 00:00:00", "2023-03-01 00:00:00"],  # no such day: pandas names it
    ["2023-11-16 24:00:00", "2023-11-16 23:00:00"],
])
def test_other_stamps_are_left_to_pandas(tmp_path, stamps):
    assert _plain_stamps_ns(_column(tmp_path, stamps)) is None


def test_a_trace_of_zoned_stamps_reads_as_before(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46+01:00,10,2\n"
                    "2023-11-16 18:15:47.5+01:00,20,3\n")
    rows = read_csv_trace(path, AZURE_2023_COLUMNS, exact_header=True)
    assert rows.arrival_s.tolist() == [0.0, 1.5]


def test_the_fast_path_is_taken_for_plain_stamps(tmp_path, monkeypatch):
    """A plain trace never reaches pandas: the reader's pandas branch, broken here, is not run."""
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 23:59:59.9999999,10,2\n"
                    "2023-11-17 00:00:01.0000001,20,3\n")
    monkeypatch.setattr(trace_csv, "_plain_stamps_ns", lambda column: None)
    slow = read_csv_trace(path, AZURE_2023_COLUMNS, exact_header=True).arrival_s
    monkeypatch.undo()
    monkeypatch.setattr(pd, "to_datetime", None)  # would fail if called
    fast = read_csv_trace(path, AZURE_2023_COLUMNS, exact_header=True).arrival_s
    assert fast.tolist() == slow.tolist() == [0.0, 1.0000002]
