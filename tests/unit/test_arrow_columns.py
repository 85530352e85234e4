"""The column helpers the release layers cut their sorted tables with."""

import pyarrow as pa

from corpus_assets.domain.core.arrow_columns import run_bounds, strings


def test_run_bounds_cut_a_sorted_column_into_its_groups_nulls_last():
    col = pa.chunked_array([["a", "a", "b"], ["b", "b", "c", None, None]])
    bounds = run_bounds(col)
    assert bounds.tolist() == [0, 2, 5, 6, 8]
    assert col.take(pa.array(bounds[:-1])).to_pylist() == ["a", "b", "c", None]
    assert run_bounds(pa.array([], pa.string())).tolist() == [0]
    assert run_bounds(pa.array(["x"])).tolist() == [0, 1]


def test_strings_gives_one_plain_string_array():
    assert strings(["a", None]).equals(pa.array(["a", None], pa.string()))
    assert strings(pa.chunked_array([["a"], ["b"]])).equals(pa.array(["a", "b"]))
    assert strings(pa.array(["x", "y", "x"]).dictionary_encode()).equals(pa.array(["x", "y", "x"]))
    assert strings(pa.array(["z"], pa.large_string())).type == pa.string()
