"""The control-plane catalog is safe when several processes write at once."""

import multiprocessing as mp

from corpus_assets.domain.storage.catalog import Catalog, CrawlStateRow


def _writer(path, worker, n):
    cat = Catalog.at(path)
    for i in range(n):
        cat.upsert_crawl_state(
            "src", f"snap-{worker}", [CrawlStateRow(f"http://h/{worker}/{i}", None, None, f"{i:064x}", "active")]
        )


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "catalog.duckdb")
    Catalog.at(path).crawl_state("src")  # create the schema
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 25)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    state = Catalog.at(path).crawl_state("src")
    assert len(state) == 50
    assert state["http://h/1/24"].content_sha256 == f"{24:064x}"


def test_crawl_state_upsert_replaces_by_uri(tmp_path):
    cat = Catalog.at(tmp_path / "c.duckdb")
    cat.upsert_crawl_state("s", "s.1", [CrawlStateRow("u", "e1", None, "a", "active")])
    cat.upsert_crawl_state("s", "s.2", [CrawlStateRow("u", None, None, "a", "removed")])
    assert cat.crawl_state("s") == {"u": CrawlStateRow("u", None, None, "a", "removed")}
    assert cat.crawl_state("other") == {}


def test_a_catalog_file_from_older_code_gets_the_tables_it_lacks(tmp_path):
    db = tmp_path / "catalog.duckdb"
    Catalog.at(db).snapshots()  # creates every table and records their digest
    with Catalog.at(db).transaction() as conn:  # what a file written before release_tombstones looks like
        conn.execute("DROP TABLE release_tombstones")
        conn.execute("UPDATE catalog_meta SET value = 'an older schema' WHERE key = 'ddl'")
    cat = Catalog.at(db)
    with cat.transaction() as conn:
        assert conn.execute("SELECT count(*) FROM release_tombstones").fetchone()[0] == 0


def test_a_catalog_whose_tables_are_current_is_not_written_to_by_opening_it(tmp_path):
    db = tmp_path / "catalog.duckdb"
    Catalog.at(db).snapshots()
    with Catalog.at(db).transaction() as conn:  # a marker the DDL would not restore if it ran again
        conn.execute("DELETE FROM catalog_meta WHERE key = 'schema_version'")
    Catalog.at(db).snapshots()
    with Catalog.at(db).transaction() as conn:
        assert conn.execute("SELECT count(*) FROM catalog_meta WHERE key = 'schema_version'").fetchone()[0] == 0
