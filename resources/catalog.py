"""The ``catalog`` resource: dagster-duckdb's DuckDBResource over the catalog file
(``$CORPUS_CATALOG``, default ``catalog.duckdb`` in the local root; settings.catalog_path)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from dagster_duckdb import DuckDBResource

from corpus_assets.domain.storage.catalog import Catalog, retrying_connect


class CatalogResource(DuckDBResource):
    """Control-plane tables (crawl state, snapshot registry). Short transactions, safe across processes."""

    @contextmanager
    def get_connection(self):
        Path(self.database).parent.mkdir(parents=True, exist_ok=True)
        # DuckDBResource retries too, but with long un-jittered sleeps; ours waits in small jittered steps.
        conn = retrying_connect(self.database)
        try:
            yield conn
        finally:
            conn.close()

    def catalog(self) -> Catalog:
        return Catalog(self.get_connection)
