"""NumPy arrays from Arrow columns and Arrow columns from NumPy arrays, without importing pandas.

pyarrow converts to and from NumPy through its pandas shim: ``Array.to_numpy``, ``pa.array`` and
``pa.scalar`` first import pandas when it is installed (about 0.15 CPU-s), even for a column of
plain numbers. A run reads its trace and writes its records through pyarrow and needs pandas for
nothing else, so the fixed-width columns it moves go through the arrays' buffers instead (Arrow's
columnar layout: a validity bitmap and a values buffer, bit-packed for booleans), with pyarrow's
public buffer API. The values are those pyarrow's own conversions give (``tests/test_arrow_numpy.py``).

Units: none (values are moved, not interpreted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["to_numpy", "from_numpy", "constant_strings"]

_NUMPY = {"bool": np.bool_, "int64": np.int64, "double": np.float64, "timestamp[ns]": np.int64}
"""Arrow types read here, by name, and their NumPy types (a timestamp: its int64 nanoseconds)."""


def to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a ``bool``, ``int64``, ``double`` or ``timestamp[ns]`` column as a NumPy array
    (a timestamp's as int64 nanoseconds), as ``column.to_numpy(zero_copy_only=False)`` gives them.
    A null is NaN in a ``double`` column; a null elsewhere has no NumPy value and is refused."""
    chunks = column.chunks if hasattr(column, "chunks") else [column]
    name = str(column.type)
    if name not in _NUMPY:
        raise TypeError(f"to_numpy reads {', '.join(_NUMPY)} columns, not {name}")
    parts = [_chunk(chunk, name) for chunk in chunks]
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=_NUMPY[name])


def _chunk(array: pa.Array, name: str) -> np.ndarray:
    n, offset = len(array), array.offset
    validity, data = array.buffers()[:2]
    if name == "bool":  # one bit per value, least significant first
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=offset + n, bitorder="little")
        values = bits[offset:].astype(np.bool_)
    else:
        dtype = np.dtype(_NUMPY[name])
        values = np.frombuffer(data, dtype=dtype, count=n, offset=offset * dtype.itemsize)
    if array.null_count:
        if name != "double":
            raise ValueError(f"a {name} column with nulls has no NumPy array of {name}")
        valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), count=offset + n, bitorder="little")
        values = np.where(valid[offset:].astype(np.bool_), values, np.nan)
    return values


def from_numpy(values: np.ndarray, nan_is_null: bool = True) -> pa.Array:
    """An Arrow ``int64``, ``double`` or ``bool`` array of ``values`` (copied once, contiguous), as
    ``pa.array(values, from_pandas=nan_is_null)`` makes it: with ``nan_is_null`` a NaN of a
    float column is a null, as pandas writes a missing value."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    kind = {np.dtype(np.int64): pa.int64(), np.dtype(np.float64): pa.float64(), np.dtype(np.bool_): pa.bool_()}
    arrow_type = kind.get(values.dtype)
    if arrow_type is None:
        raise TypeError(f"from_numpy writes int64, float64 and bool arrays, not {values.dtype}")
    n = len(values)
    validity, nulls = None, 0
    if nan_is_null and values.dtype == np.float64:
        missing = np.isnan(values)
        nulls = int(missing.sum())
        if nulls:
            validity = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    data = np.packbits(values, bitorder="little") if values.dtype == np.bool_ else values
    return pa.Array.from_buffers(arrow_type, n, [validity, pa.py_buffer(data)], null_count=nulls)


def constant_strings(text: str, n: int) -> pa.Array:
    """An Arrow ``large_string`` array of ``n`` copies of ``text`` (pandas' strings are written so)."""
    import pyarrow as pa

    encoded = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(encoded)
    data = np.frombuffer(encoded * n, dtype=np.uint8) if n and encoded else np.zeros(0, dtype=np.uint8)
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
