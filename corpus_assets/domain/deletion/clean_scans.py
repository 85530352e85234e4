"""Layer versions the tombstone scan found clean, kept per tombstone set in the catalog.

The ``no_tombstoned_records`` check of a release reads the record-id columns of every layer of the
release and of every snapshot it selects. A layer version never changes, so once a scan found no
tombstoned id in it, it stays clean until the tombstone set changes: a release over years of
captures would otherwise read every old snapshot's layers again on every rebuild, as soon as a
single deletion exists. The catalog table ``tombstone_scans`` keeps, per (asset, partition), the
version (and content digest) last found clean and the fingerprint of the tombstone set it was
scanned against; a scan with the same fingerprint skips it. Any new tombstone changes the
fingerprint, so the next scan reads everything again. Rows hold layer names, version ids and
digests only, never a record id."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from typing import Iterable, NamedTuple

from corpus_assets.domain.deletion.tombstones import TombstoneSet
from corpus_assets.domain.storage.catalog import Catalog


class VersionRef(NamedTuple):
    asset: str
    partition: str
    version: str
    content_digest: str


def tombstone_fingerprint(ts: TombstoneSet) -> str:
    """sha256 of every tombstone of the set (ids, digests, sources and their request ids)."""
    doc = {k: sorted(getattr(ts, k).items()) for k in ("record_ids", "uris", "sources", "digests", "raw_digests")}
    doc["generation"] = ts.generation
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def known_clean(catalog: Catalog, fingerprint: str) -> frozenset[VersionRef]:
    """The versions found clean against the tombstone set with this fingerprint."""
    with catalog.transaction() as conn:
        rows = conn.execute("SELECT asset, partition, version, content_digest FROM tombstone_scans WHERE tombstones = ?",
                            [fingerprint]).fetchall()
    return frozenset(VersionRef(*r) for r in rows)


def record_clean(catalog: Catalog, fingerprint: str, versions: Iterable[VersionRef]) -> int:
    """Remember ``versions`` as clean against ``fingerprint`` (one row per asset and partition: the
    newest scan replaces the one before). Returns how many rows were written."""
    rows = sorted(set(versions))
    if not rows:
        return 0
    now = datetime.now(timezone.utc)
    with catalog.transaction() as conn:
        conn.executemany("INSERT OR REPLACE INTO tombstone_scans VALUES (?, ?, ?, ?, ?, ?)",
                         [[*r, fingerprint, now] for r in rows])
    return len(rows)
