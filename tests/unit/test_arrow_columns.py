"""The column helpers the release layers cut their sorted tables with."""

import pyarrow as pa

from corpus_assets.domain.core.arrow_columns import equal_mask, run_bounds, sorted_groups, strings


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


def test_sorted_groups_cut_a_table_by_one_column_sorted_within_by_the_others():
    t = pa.table({"snap": ["b", "a", None, "b", "a"], "id": ["3", "2", "9", "1", "1"], "n": [1, 2, 3, 4, 5]})
    groups = sorted_groups(t, "snap", ["id"])
    assert list(groups) == ["a", "b", None]
    assert groups["a"].column("id").to_pylist() == ["1", "2"] and groups["a"].column("n").to_pylist() == [5, 2]
    assert groups["b"].column("id").to_pylist() == ["1", "3"] and groups[None].column("n").to_pylist() == [3]
    assert sorted_groups(t.slice(0, 0), "snap") == {}


def test_equal_mask_treats_null_as_not_equal():
    assert equal_mask(pa.array(["x", None, "y", "x"]), "x").tolist() == [True, False, False, True]
