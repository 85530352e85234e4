"""Small Arrow column helpers shared by the release layers, which hold a release's records as
columns rather than as a Python object per record."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def strings(values: Any) -> pa.Array:
    """``values`` (a list, an Arrow array or chunked array, dictionary-encoded or large) as one
    plain Arrow string array."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if not isinstance(values, pa.Array):
        return pa.array(values, pa.string())
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    return values if values.type == pa.string() else values.cast(pa.string())


def run_bounds(sorted_column: Any) -> np.ndarray:
    """Where each run of equal values of a sorted column starts, then the column's length (nulls
    are one run): ``column.take(bounds[:-1])`` are the runs' values, ``bounds[i]:bounds[i + 1]``
    their rows — a sorted table cut into its groups without a Python object per row."""
    col = sorted_column.combine_chunks() if isinstance(sorted_column, pa.ChunkedArray) else sorted_column
    if len(col) == 0:
        return np.zeros(1, dtype=np.int64)
    codes = np.asarray(pc.fill_null(pc.dictionary_encode(col).indices, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.concatenate([[0], np.flatnonzero(np.diff(codes)) + 1, [len(codes)]]).astype(np.int64)


def equal_mask(column: Any, value: Any) -> np.ndarray:
    """Which rows of ``column`` equal ``value`` (nulls: not equal), as a numpy bool array."""
    return np.asarray(pc.fill_null(pc.equal(column, value), False).to_numpy(zero_copy_only=False), dtype=bool)


def sorted_groups(table: pa.Table, by: str, then: Sequence[str] = ()) -> dict:
    """{value of ``by``: its rows}, the table sorted by ``by`` then ``then`` and cut at the runs of
    ``by`` (one sort, not a filter per value; a null ``by`` is the group ``None``)."""
    t = table.sort_by([(c, "ascending") for c in (by, *then)]).combine_chunks()
    bounds = run_bounds(t.column(by))
    values = t.column(by).take(pa.array(bounds[:-1])).to_pylist()
    return {v: t.slice(lo, hi - lo) for v, lo, hi in zip(values, bounds[:-1].tolist(), bounds[1:].tolist())}
