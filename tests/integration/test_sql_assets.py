"""Each dbt_like_sql model becomes a Dagster asset of the reports group, wired to what it reads."""

import pytest

from corpus_assets.domain.reports.sql_models import SqlModelError


def _model(folder, name, sql):
    (folder / f"{name}.sql").write_text(sql)


def test_models_become_report_assets_with_deps_from_their_refs(tmp_path):
    from corpus_assets.assets.reports.sql_assets import load_sql_assets

    _model(tmp_path, "a", "-- A.\nSELECT * FROM {{ ref('splits', 'assignments') }} JOIN {{ ref('token_views') }} USING (record_id)")
    _model(tmp_path, "b", "SELECT * FROM {{ ref('a') }}, {{ catalog('release_registry') }}, {{ catalog('tombstones') }}")
    assets = {a.key.path[-1]: a for a in load_sql_assets(tmp_path)}
    assert {k.path[-1] for k in assets["a"].dependency_keys} == {"splits", "token_views"}
    assert {k.path[-1] for k in assets["b"].dependency_keys} == {"a", "release_manifest"}
    assert all(a.group_names_by_key[a.key] == "reports" and not a.partitions_def for a in assets.values())
    _model(tmp_path, "c", "SELECT *\nFROM {{ ref('token_views', 'rejected') }}")
    with pytest.raises(SqlModelError, match=r"c\.sql:2: token_views has no readable table 'rejected'"):
        load_sql_assets(tmp_path)
