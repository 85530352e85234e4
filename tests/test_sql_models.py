"""dbt_like_sql: refs wire dependencies, queries run over current Parquet versions, errors name file:line."""

import pyarrow as pa
import pytest

from corpus_assets.domain.layer_store import LayerStore, TableSpec
from corpus_assets.domain.sql_models import SqlModelError, discover_models, parse_model, render_and_run

DEC = pa.schema([("source_id", pa.string()), ("outcome", pa.string()), ("reason", pa.string())])


def _store_with_two_partitions(tmp_path):
    store = LayerStore(tmp_path / "home")
    for part, rows in {
        "a.20260101T000000": [("a", "accepted", "ok"), ("a", "quarantined", "malformed_json")],
        "b.20260101T000000": [("b", "accepted", "ok")] * 3,
    }.items():
        with store.new_version("canonical_records", part, {"decisions": TableSpec(DEC)}, {}) as w:
            w.write("decisions", [dict(zip(DEC.names, r)) for r in rows])
            w.commit()
    return store


def _resolver(store):
    def resolve(ref):
        if ref.asset != "canonical_records":
            raise KeyError(f"unknown asset {ref.asset!r}")
        if ref.table == "quarantine":
            raise PermissionError("owner-only")
        return store.current_files(ref.asset, ref.table or "decisions"), DEC

    return resolve


def _model(tmp_path, name, sql):
    p = tmp_path / f"{name}.sql"
    p.write_text(sql)
    return p


def test_model_reads_every_current_partition(tmp_path):
    store = _store_with_two_partitions(tmp_path)
    m = parse_model(_model(tmp_path, "acc", "-- Accounting.\nSELECT source_id, outcome, count(*) AS n\nFROM {{ ref('canonical_records', 'decisions') }}\nGROUP BY ALL ORDER BY ALL"))
    assert m.upstream == ["canonical_records"] and m.description == "Accounting."
    out = render_and_run(m, _resolver(store)).to_pylist()
    assert out == [
        {"source_id": "a", "outcome": "accepted", "n": 1},
        {"source_id": "a", "outcome": "quarantined", "n": 1},
        {"source_id": "b", "outcome": "accepted", "n": 3},
    ]


def test_nothing_materialized_gives_an_empty_result_not_an_error(tmp_path):
    store = LayerStore(tmp_path / "empty")
    m = parse_model(_model(tmp_path, "acc", "SELECT count(*) AS n FROM {{ ref('canonical_records') }}"))
    assert render_and_run(m, _resolver(store)).to_pylist() == [{"n": 0}]


def test_sql_error_names_file_and_line(tmp_path):
    store = _store_with_two_partitions(tmp_path)
    path = _model(tmp_path, "broken", "-- broken\nSELECT source_id,\n       no_such_column\nFROM {{ ref('canonical_records') }}\n")
    with pytest.raises(SqlModelError) as e:
        render_and_run(parse_model(path), _resolver(store))
    assert str(e.value).startswith(f"{path}:3:")
    syntax = _model(tmp_path, "syntax", "SELECT *\nFROM {{ ref('canonical_records') }}\nWHERE AND\n")
    with pytest.raises(SqlModelError) as e:
        render_and_run(parse_model(syntax), _resolver(store))
    assert str(e.value).startswith(f"{syntax}:3:")


def test_bad_templates_private_tables_and_cycles(tmp_path):
    with pytest.raises(SqlModelError, match=r"t1\.sql:2: unsupported template"):
        parse_model(_model(tmp_path, "t1", "SELECT 1\nFROM {{ source('x') }}, {{ ref('canonical_records') }}"))
    with pytest.raises(SqlModelError, match=r"t2\.sql:1: a model must read"):
        parse_model(_model(tmp_path, "t2", "SELECT 1"))
    store = _store_with_two_partitions(tmp_path)
    m = parse_model(_model(tmp_path, "t3", "SELECT *\nFROM {{ ref('canonical_records', 'quarantine') }}"))
    with pytest.raises(SqlModelError, match=r"t3\.sql:2: .*owner-only"):
        render_and_run(m, _resolver(store))
    folder = tmp_path / "cyc"
    folder.mkdir()
    _model(folder, "x", "SELECT * FROM {{ ref('y') }}")
    _model(folder, "y", "SELECT * FROM {{ ref('x') }}")
    with pytest.raises(SqlModelError, match="cycle"):
        discover_models(folder)
