"""Control-plane tables in a DuckDB file: crawl state, the snapshot registry, the release
registry, consumption records, deletion requests and tombstones.

The release / consumption / deletion tables are created here (one schema for every process) and
operated by their own modules: ``release/registry.py`` and ``deletion/requests.py`` /
``deletion/tombstones.py``.

DuckDB lets one process at a time open a database file for writing, so every operation opens a
connection, runs one short transaction and closes it; the connection factory retries while
another process holds the lock. That makes concurrent writers from several Dagster runs safe.
``Catalog.session()`` lets a few operations that follow each other directly (no long work in
between) share one connection instead of opening the file once each.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Optional

import duckdb

SCHEMA_VERSION = 2

_DDL = [
    """CREATE TABLE IF NOT EXISTS catalog_meta (key VARCHAR PRIMARY KEY, value VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS crawl_state (
        source_id VARCHAR NOT NULL,
        uri VARCHAR NOT NULL,
        etag VARCHAR,
        last_modified VARCHAR,
        content_sha256 VARCHAR,
        status VARCHAR NOT NULL,  -- active | removed | pending | refused
        last_crawl VARCHAR NOT NULL,  -- snapshot key of the crawl that last updated the entry
        updated_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (source_id, uri))""",
    """CREATE TABLE IF NOT EXISTS snapshots (
        snapshot VARCHAR PRIMARY KEY,
        source_id VARCHAR NOT NULL,
        source_kind VARCHAR NOT NULL,
        captured_at TIMESTAMPTZ NOT NULL,
        items BIGINT NOT NULL,
        raw_version VARCHAR NOT NULL,
        stats_json VARCHAR NOT NULL)""",
    # Published release versions (Algorithm 18.3). status: published | revoked | superseded.
    """CREATE TABLE IF NOT EXISTS release_registry (
        release VARCHAR NOT NULL,
        build_id VARCHAR NOT NULL,
        content_digest VARCHAR NOT NULL,
        path VARCHAR NOT NULL,              -- release directory, relative to CORPUS_HOME
        status VARCHAR NOT NULL,
        published_at TIMESTAMPTZ NOT NULL,
        revoked_at TIMESTAMPTZ,
        successor_build_id VARCHAR,
        revocation_json VARCHAR,            -- request ids, affected runs, note
        PRIMARY KEY (release, build_id))""",
    # Which training run consumed which release version (so a deletion can name affected runs).
    """CREATE TABLE IF NOT EXISTS consumption (
        run_id VARCHAR NOT NULL,
        release VARCHAR NOT NULL,
        build_id VARCHAR NOT NULL,
        consumer VARCHAR NOT NULL,
        consumed_at TIMESTAMPTZ NOT NULL,
        note VARCHAR NOT NULL,
        PRIMARY KEY (run_id, release, build_id))""",
    # Deletion requests. kind: record | uri | source | content. target: the record id, URI, source
    # id, or the sha256 of the content (text is hashed at intake and never stored).
    # status: received | resolved | runs_requested | applied | rejected
    """CREATE TABLE IF NOT EXISTS deletion_requests (
        request_id VARCHAR PRIMARY KEY,
        kind VARCHAR NOT NULL,
        target VARCHAR NOT NULL,
        near_duplicates BOOLEAN NOT NULL,
        near_threshold DOUBLE,
        requester VARCHAR NOT NULL,
        reason VARCHAR NOT NULL,
        received_at TIMESTAMPTZ NOT NULL,
        status VARCHAR NOT NULL,
        status_detail VARCHAR NOT NULL,
        generation BIGINT,                  -- tombstone generation written when resolved
        updated_at TIMESTAMPTZ NOT NULL)""",
    # Tombstones: ids and digests only, never text. One row per (request, record copy); content
    # takedowns also keep the digest so a later capture of the same text is refused.
    """CREATE TABLE IF NOT EXISTS tombstones (
        request_id VARCHAR NOT NULL,
        generation BIGINT NOT NULL,
        scope VARCHAR NOT NULL,             -- record | content
        record_id VARCHAR NOT NULL,         -- '' for a content-only row (digest with no current copy)
        snapshot VARCHAR NOT NULL,          -- '' when not tied to one snapshot
        source_id VARCHAR NOT NULL,
        uri VARCHAR NOT NULL,
        text_sha256 VARCHAR NOT NULL,
        record_sha256 VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (request_id, record_id, snapshot, text_sha256))""",
    # raw items a content takedown matched that never became records (quarantined, unparseable):
    # purged by their bytes' digest, which also stubs a re-capture of the same bytes
    """CREATE TABLE IF NOT EXISTS tombstoned_items (
        request_id VARCHAR NOT NULL,
        generation BIGINT NOT NULL,
        snapshot VARCHAR NOT NULL,
        item_index BIGINT NOT NULL,
        item_id VARCHAR NOT NULL,
        uri VARCHAR NOT NULL,
        raw_sha256 VARCHAR NOT NULL,
        match VARCHAR NOT NULL,             -- bytes | text | near (J=...)
        created_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (request_id, snapshot, item_index))""",
    # Tombstones each build of a release applied (its manifest's tombstones.count), for the
    # tombstones_never_shrink check without reading every earlier manifest (release/tombstone_history.py)
    """CREATE TABLE IF NOT EXISTS release_tombstones (
        release VARCHAR NOT NULL,
        build_id VARCHAR NOT NULL,
        tombstones BIGINT NOT NULL,
        PRIMARY KEY (release, build_id))""",
    # Layer versions the no_tombstoned_records scan found clean, and the fingerprint of the
    # tombstone set they were scanned against (deletion/clean_scans.py): skipped while it holds.
    """CREATE TABLE IF NOT EXISTS tombstone_scans (
        asset VARCHAR NOT NULL,
        partition VARCHAR NOT NULL,
        version VARCHAR NOT NULL,
        content_digest VARCHAR NOT NULL,
        tombstones VARCHAR NOT NULL,        -- tombstone_fingerprint of the set scanned against
        scanned_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (asset, partition))""",
]
# what a catalog file that holds every table above records (Catalog._ensure_tables)
_DDL_DIGEST = hashlib.sha256("\n;\n".join(_DDL).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CrawlStateRow:
    uri: str
    etag: Optional[str]
    last_modified: Optional[str]
    content_sha256: Optional[str]
    status: str  # "active" | "removed" | "pending" | "refused" (see crawl.py)


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "lock" in text or "conflict" in text or "being used by another process" in text


def retrying_connect(path: str, *, attempts: int = 60, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open the catalog, waiting (with jittered backoff, up to ~30 s) while another process holds it."""
    delay = 0.02
    for i in range(attempts):
        try:
            return duckdb.connect(path, read_only=read_only)
        except (duckdb.IOException, duckdb.TransactionException) as exc:
            if not _is_lock_error(exc) or i == attempts - 1:
                raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 1.6, 1.0)
    raise AssertionError("unreachable")


class Catalog:
    """Typed operations on the control plane. ``connect`` yields a short-lived DuckDB connection."""

    def __init__(self, connect: Callable[[], ContextManager[duckdb.DuckDBPyConnection]]) -> None:
        self._connect = connect
        self._ready = False
        self._local = threading.local()  # the open session of this thread, if any

    @classmethod
    def at(cls, path: Path | str) -> "Catalog":
        path = str(path)
        Path(path).parent.mkdir(parents=True, exist_ok=True)

        @contextmanager
        def connect() -> Iterator[duckdb.DuckDBPyConnection]:
            conn = retrying_connect(path)
            try:
                yield conn
            finally:
                conn.close()

        return cls(connect)

    @contextmanager
    def session(self) -> Iterator["Catalog"]:
        """Run the transactions of this block (this thread's) on one connection: opened by the
        first of them — so work done before it does not hold the file — and closed when the block
        ends. Each operation is still its own transaction. Only for operations that follow each
        other directly: while the block runs, other processes cannot open the catalog. Nested
        sessions use the outer one's connection."""
        if getattr(self._local, "session", None) is not None:
            yield self
            return
        stack = ExitStack()
        self._local.session = {"stack": stack, "conn": None}
        try:
            with stack:
                yield self
        finally:
            self._local.session = None

    @contextmanager
    def _connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        s = getattr(self._local, "session", None)
        if s is None:
            with self._connect() as conn:
                yield conn
            return
        if s["conn"] is None:
            s["conn"] = s["stack"].enter_context(self._connect())
        yield s["conn"]

    @staticmethod
    def _ensure_tables(conn: duckdb.DuckDBPyConnection) -> None:
        """Create what ``_DDL`` declares, unless this file says it already holds exactly that
        (``catalog_meta.ddl``, the digest of the statements): a catalog object's first transaction
        would otherwise write to the file every time (about 8 ms, twice per release run)."""
        try:
            row = conn.execute("SELECT value FROM catalog_meta WHERE key = 'ddl'").fetchone()
        except duckdb.CatalogException:  # a new file: no catalog_meta yet
            row = None
        if row is not None and row[0] == _DDL_DIGEST:
            return
        for stmt in _DDL:
            conn.execute(stmt)
        conn.execute("INSERT OR REPLACE INTO catalog_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        conn.execute("INSERT OR REPLACE INTO catalog_meta VALUES ('ddl', ?)", [_DDL_DIGEST])

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._connection() as conn:
            if not self._ready:
                self._ensure_tables(conn)
                self._ready = True
            conn.execute("BEGIN TRANSACTION")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    # --- crawl state -------------------------------------------------------------------------
    def crawl_state(self, source_id: str) -> dict[str, CrawlStateRow]:
        with self.transaction() as conn:
            rows = conn.execute(
                "SELECT uri, etag, last_modified, content_sha256, status FROM crawl_state WHERE source_id = ? ORDER BY uri",
                [source_id],
            ).fetchall()
        return {r[0]: CrawlStateRow(*r) for r in rows}

    def upsert_crawl_state(self, source_id: str, crawl_key: str, rows: list[CrawlStateRow]) -> None:
        now = datetime.now(timezone.utc)
        with self.transaction() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO crawl_state VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (source_id, r.uri, r.etag, r.last_modified, r.content_sha256, r.status, crawl_key, now)
                    for r in rows
                ],
            )

    # --- snapshot registry -------------------------------------------------------------------
    def register_snapshot(
        self, snapshot: str, source_id: str, source_kind: str, captured_at: datetime, items: int, raw_version: str, stats: dict
    ) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?, ?, ?, ?)",
                [snapshot, source_id, source_kind, captured_at, items, raw_version, json.dumps(stats, sort_keys=True)],
            )

    def snapshots(self, source_id: Optional[str] = None) -> list[dict]:
        sql = "SELECT snapshot, source_id, source_kind, captured_at, items, raw_version, stats_json FROM snapshots"
        params: list = []
        if source_id is not None:
            sql += " WHERE source_id = ?"
            params.append(source_id)
        with self.transaction() as conn:
            rows = conn.execute(sql + " ORDER BY snapshot", params).fetchall()
        cols = ["snapshot", "source_id", "source_kind", "captured_at", "items", "raw_version", "stats"]
        out = [dict(zip(cols, r)) for r in rows]
        for d in out:
            d["stats"] = json.loads(d["stats"])
        return out
