"""dbt_like_sql: refs wire dependencies, queries run over current Parquet versions (partition key
exposed, scalar columns only, empty with a note when nothing is materialized), catalog('table')
reads restricted control-plane rows, errors name file:line."""

from datetime import datetime, timezone

import pyarrow as pa
import pytest

from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import LayerStore, TableSpec
from corpus_assets.domain.reports.sql_models import (
    CATALOG_VIEWS,
    Relation,
    SqlModelError,
    catalog_resolver,
    discover_models,
    parse_model,
    read_catalog_table,
    render_and_run,
    run_model,
)

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


# --- release layers: partition key, restricted columns, manifests ------------------------------------


VIEWS = pa.schema([("record_id", pa.string()), ("split", pa.string()), ("n_tokens", pa.int32()),
                   ("input_ids", pa.list_(pa.int32())), ("cache_key", pa.string())])


def _views_store(tmp_path):
    """Two release partitions of a token_views-like layer; r_old's version predates ``cache_key``."""
    store = LayerStore(tmp_path / "rel")
    old = pa.schema([f for f in VIEWS if f.name != "cache_key"])
    for release, schema, rows in (
        ("r_old", old, [{"record_id": "a", "split": "train", "n_tokens": 3, "input_ids": [1, 2, 3]}]),
        ("r_new", VIEWS, [{"record_id": "a", "split": "train", "n_tokens": 3, "input_ids": [1, 2, 3], "cache_key": "k1"},
                          {"record_id": "b", "split": "test", "n_tokens": 2, "input_ids": [4, 5], "cache_key": "k2"}]),
    ):
        with store.new_version("token_views", release, {"views": TableSpec(schema)}, {}) as w:
            w.write("views", rows)
            w.commit(extra_manifest={"report": {"splits": {"train": {"target": 0.75}, "test": {"target": 0.25}}}})
    return store


def _layer_resolver(store, columns=None):
    def resolve(ref):
        parts = tuple((p, tuple(store.current_files("token_views", "views", [p]))) for p in store.partitions("token_views"))
        return Relation(schema=VIEWS, parts=parts, partition_column="release", columns=columns)

    return resolve


def test_release_layer_views_expose_the_partition_key_and_only_scalar_columns(tmp_path):
    store = _views_store(tmp_path)
    m = parse_model(_model(tmp_path, "per_release", "SELECT release, split, sum(n_tokens) AS tokens, count(cache_key) AS keyed\n"
                                                    "FROM {{ ref('token_views', 'views') }}\nGROUP BY ALL ORDER BY ALL"))
    assert render_and_run(m, _layer_resolver(store)).to_pylist() == [
        {"release": "r_new", "split": "test", "tokens": 2, "keyed": 1},
        {"release": "r_new", "split": "train", "tokens": 3, "keyed": 1},
        {"release": "r_old", "split": "train", "tokens": 3, "keyed": 0},  # column added later: NULL in the old version
    ]
    star = parse_model(_model(tmp_path, "star", "SELECT * FROM {{ ref('token_views', 'views') }}"))
    assert render_and_run(star, _layer_resolver(store)).schema.names == ["record_id", "split", "n_tokens", "cache_key", "release"]
    # the token list is never visible, and a restricted column list hides more; the error names the line
    for columns in (None, ("record_id", "split", "n_tokens")):
        bad = _model(tmp_path, "lists", "SELECT record_id,\n       cache_key,\n       input_ids\nFROM {{ ref('token_views', 'views') }}")
        with pytest.raises(SqlModelError) as e:
            render_and_run(parse_model(bad), _layer_resolver(store, columns))
        assert str(e.value).startswith(f"{bad}:{2 if columns else 3}:")


def test_a_ref_with_nothing_materialized_gives_an_empty_result_and_a_note(tmp_path):
    store = LayerStore(tmp_path / "nothing")
    m = parse_model(_model(tmp_path, "empty", "SELECT release, count(*) AS n FROM {{ ref('token_views', 'views') }} GROUP BY release"))
    run = run_model(m, _layer_resolver(store))
    assert run.table.num_rows == 0 and run.table.schema.names == ["release", "n"]
    assert run.notes == ["ref('token_views', 'views'): nothing materialized yet (no current version of any partition "
                         "of token_views); read as an empty table"]


def test_a_template_spanning_lines_keeps_error_lines(tmp_path):
    store = _store_with_two_partitions(tmp_path)
    path = _model(tmp_path, "span", "SELECT *\nFROM {{ ref(\n  'canonical_records'\n) }}\nWHERE nope = 1\n")
    with pytest.raises(SqlModelError) as e:
        render_and_run(parse_model(path), _resolver(store))
    assert str(e.value).startswith(f"{path}:5:")
    path = _model(tmp_path, "span2", "SELECT *\nFROM {{ ref(\n  'canonical_records'\n) }}\nWHERE AND\n")
    with pytest.raises(SqlModelError) as e:
        render_and_run(parse_model(path), _resolver(store))
    assert str(e.value).startswith(f"{path}:5:")


# --- catalog('table') --------------------------------------------------------------------------------


def _catalog_with_a_request(path):
    from corpus_assets.domain.deletion.requests import file_request

    cat = Catalog.at(path)
    rid = file_request(cat, {"kind": "uri", "uri": "https://example.org/private/page", "requester": "alice@example.org",
                             "reason": "please remove my page"}, now=datetime(2026, 1, 2, tzinfo=timezone.utc))
    return cat, rid


def test_catalog_template_reads_restricted_rows_of_the_catalog(tmp_path):
    _, rid = _catalog_with_a_request(tmp_path / "catalog.duckdb")
    path = _model(tmp_path, "deletions", "-- Deletion requests.\nSELECT kind, status, count(*) AS n, min(request_id) AS rid\n"
                                         "FROM {{ catalog('deletion_requests') }}\nGROUP BY ALL")
    m = parse_model(path)
    assert m.catalog_tables == ["deletion_requests"] and m.catalog_refs[0].line == 3 and m.upstream == []
    run = run_model(m, _resolver(None), catalog_resolver(tmp_path / "catalog.duckdb"))
    assert run.table.to_pylist() == [{"kind": "uri", "status": "received", "n": 1, "rid": rid}] and run.notes == []
    # requester, reason, target and status_detail never reach a model: using one is an error naming its line
    leaked = _model(tmp_path, "leak", "SELECT kind,\n       requester\nFROM {{ catalog('deletion_requests') }}\n")
    with pytest.raises(SqlModelError) as e:
        run_model(parse_model(leaked), _resolver(None), catalog_resolver(tmp_path / "catalog.duckdb"))
    assert str(e.value).startswith(f"{leaked}:2:")
    for table in CATALOG_VIEWS:
        names = read_catalog_table(Catalog.at(tmp_path / "catalog.duckdb"), table).schema.names
        assert not {"requester", "reason", "target", "status_detail", "note", "revocation_json", "uri"} & set(names), table


def test_catalog_template_errors_and_a_missing_catalog(tmp_path):
    with pytest.raises(SqlModelError, match=r"c1\.sql:2: catalog\('snapshots'\): unknown catalog table"):
        parse_model(_model(tmp_path, "c1", "SELECT 1\nFROM {{ catalog('snapshots') }}"))
    with pytest.raises(SqlModelError, match=r"c2\.sql:1: unsupported template"):
        parse_model(_model(tmp_path, "c2", "SELECT * FROM {{ catalog(tombstones) }}"))
    m = parse_model(_model(tmp_path, "c3", "SELECT count(*) AS n\nFROM {{ catalog('tombstones') }}"))
    with pytest.raises(SqlModelError, match=r"c3\.sql:2: catalog\('tombstones'\): no catalog is configured"):
        run_model(m, _resolver(None))
    missing = tmp_path / "none" / "catalog.duckdb"
    run = run_model(m, _resolver(None), catalog_resolver(missing))
    assert run.table.to_pylist() == [{"n": 0}]
    assert run.notes == ["catalog('tombstones'): catalog.duckdb does not exist yet; read as an empty table"]
    assert not missing.exists()  # reading reports never creates the catalog


def test_catalog_is_read_while_another_process_holds_the_write_lock(tmp_path):
    """DuckDB lets one process open the file for writing; the report waits (retrying connect) instead
    of failing as a plain read-only ATTACH would."""
    import subprocess
    import sys
    import time

    import duckdb

    path = tmp_path / "catalog.duckdb"
    _catalog_with_a_request(path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('locked', flush=True); "
                               "time.sleep(1.5); c.close()", str(path)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(duckdb.Error):
            duckdb.connect(str(path), read_only=True)  # what a plain read-only attach would hit
        started = time.monotonic()
        rows = read_catalog_table(Catalog.at(path), "deletion_requests").to_pylist()
        assert [r["status"] for r in rows] == ["received"] and time.monotonic() - started > 0.3
    finally:
        holder.wait(timeout=30)


# --- refs resolved through the layer registry -----------------------------------------------------


def test_release_layer_refs_manifest_rows_and_what_a_model_may_read(tmp_path):
    from corpus_assets.domain.reports.sql_models import check_models, make_resolver, ref_layer

    store = _views_store(tmp_path)
    m = parse_model(_model(tmp_path, "targets", "SELECT m.release, s.key AS split, CAST(s.value ->> 'target' AS DOUBLE) AS target\n"
                                                "FROM {{ ref('token_views', 'manifest') }} AS m, json_each(m.extra_json, '$.report.splits') AS s\n"
                                                "ORDER BY ALL"))
    rows = render_and_run(m, make_resolver(store, {})).to_pylist()
    assert rows == [{"release": r, "split": s, "target": t} for r in ("r_new", "r_old") for s, t in (("test", 0.25), ("train", 0.75))]
    for asset in ("dedup_clusters", "splits", "token_views", "mixture_plan", "packed_shards"):
        assert ref_layer(asset) is not None and ref_layer(asset).partition_column == "release"
    views = ref_layer("token_views").tables["views"]
    assert "input_ids" not in views.columns
    assert {n for n, t in ref_layer("mixture_plan").tables.items() if t.readable} == {"plan", "sources", "decisions"}
    assert ref_layer("tokenizer") is None and ref_layer("eval_registry") is None

    folder = tmp_path / "models"
    folder.mkdir()
    _model(folder, "c", "SELECT *\nFROM {{ ref('token_views', 'rejected') }}")
    with pytest.raises(SqlModelError, match=r"c\.sql:2: token_views has no readable table 'rejected'"):
        check_models(discover_models(folder))
    (folder / "c.sql").unlink()
    _model(folder, "d", "SELECT *\nFROM {{ ref('curated_records', 'quarantine') }}")
    with pytest.raises(SqlModelError, match=r"d\.sql:2: curated_records\.quarantine is owner-only"):
        check_models(discover_models(folder))


def test_mixture_sources_table_holds_the_report_fields():
    from corpus_assets.domain.pack.mixture import MixtureSpec, SourceUnits, build_plan
    from corpus_assets.domain.pack.mixture_layer import sources_table

    spec = MixtureSpec(unit="documents", weights={"a": 0.75, "b": 0.25}, budget=8, target_weights={"a": 0.5, "b": 0.5})
    plan = build_plan(spec, {"a": SourceUnits.from_counts({"a1": 5, "a2": 7}), "b": SourceUnits.from_counts({"b1": 3})})
    report = plan.report()
    rows = {r["source"]: r for r in sources_table(report).to_pylist()}
    for src in ("a", "b"):
        r, s = rows[src], report["sources"][src]
        assert (r["target_share"], r["document_share"], r["token_share"], r["effective_epochs"], r["importance_weight"]) == (
            s["target_share"], s["document_share"], s["token_share"], s["effective_epochs"], s["importance_weight"])
        assert r["unit"] == "documents" and r["key"] == "source" and r["epoch_limit"] == spec.epoch_limit
    assert rows["b"]["draws"] == 2 and rows["b"]["effective_epochs"] == 2.0
