"""Where things live: CORPUS_HOME as a directory or an object-store URL, the local root, Dagster's
home and the catalog file — what a deployment sets in its environment."""

from pathlib import Path

from corpus_assets.cli import main as corpus_main
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.core.settings import catalog_path, corpus_home, dagster_home, data_url, project_root


def test_a_directory_is_the_data_root_and_the_local_root(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("CORPUS_CATALOG", raising=False)
    monkeypatch.setenv("CORPUS_HOME", str(tmp_path / "data"))
    assert data_url() is None
    assert corpus_home() == tmp_path / "data"
    assert dagster_home() == tmp_path / "data" / "dagster"
    assert catalog_path() == tmp_path / "data" / "catalog.duckdb"
    monkeypatch.setenv("CORPUS_HOME", f"file://{tmp_path / 'data'}")  # a file:// URL is a directory too
    assert data_url() is None and corpus_home() == tmp_path / "data"


def test_a_bucket_url_keeps_everything_else_on_the_local_root(tmp_path, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("CORPUS_CATALOG", raising=False)
    monkeypatch.delenv("CORPUS_LOCAL", raising=False)
    monkeypatch.setenv("CORPUS_HOME", "s3://my-bucket/corpus/")
    assert data_url() == "s3://my-bucket/corpus"
    default = project_root() / "var" / "object-store" / "s3-my-bucket-corpus"
    assert corpus_home() == default and dagster_home() == default / "dagster"
    monkeypatch.setenv("CORPUS_LOCAL", str(tmp_path / "cache"))
    assert corpus_home() == tmp_path / "cache"
    assert dagster_home() == tmp_path / "cache" / "dagster" and catalog_path() == tmp_path / "cache" / "catalog.duckdb"


def test_corpus_catalog_moves_the_control_plane(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CORPUS_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("CORPUS_CATALOG", str(tmp_path / "shared" / "catalog.duckdb"))
    (tmp_path / "shared").mkdir()
    assert corpus_main(["delete", "--source", "site_docs", "--requester", "ops@example.org", "--reason", "test"]) == 0
    request_id = capsys.readouterr().out.strip().splitlines()[-1]
    assert not Path(tmp_path / "data" / "catalog.duckdb").exists()
    with Catalog.at(tmp_path / "shared" / "catalog.duckdb").transaction() as con:
        rows = con.execute("SELECT request_id FROM deletion_requests").fetchall()
    assert [r[0] for r in rows] == [request_id]
