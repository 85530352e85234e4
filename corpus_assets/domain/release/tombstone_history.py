"""How many tombstones each build of a release applied, for the ``tombstones_never_shrink`` check.

The count is in every build's manifest, but a release rebuilt every hour for a year has thousands
of builds, and reading each one's manifest on every build made the check grow with the release's
history. The catalog table ``release_tombstones`` keeps the count per (release, build): a build
records its own when it is registered, and the manifest of a build registered before the table
existed is read once and its count recorded."""

from __future__ import annotations

import json
from typing import Callable, Optional

from corpus_assets.domain.storage.catalog import Catalog


def record_build_tombstones(catalog: Catalog, release: str, build_id: str, count: int) -> None:
    with catalog.transaction() as conn:
        conn.execute("INSERT OR REPLACE INTO release_tombstones VALUES (?, ?, ?)", [release, build_id, int(count)])


def earlier_tombstone_counts(catalog: Catalog, release: str, build_id: str, rows: list[dict],
                             read_manifest: Callable[[dict], Optional[bytes]]) -> dict[str, int]:
    """build id -> tombstones applied, for every registry row of the release (``rows``) but
    ``build_id``. From the catalog; a row it has no count for is read with ``read_manifest(row)``
    (None: no manifest anywhere, left out) and its count recorded, so each manifest is read once."""
    with catalog.transaction() as conn:
        known = dict(conn.execute("SELECT build_id, tombstones FROM release_tombstones WHERE release = ?",
                                  [release]).fetchall())
    out, new = {}, []
    for row in rows:
        bid = row["build_id"]
        if bid == build_id:
            continue
        if bid not in known:
            raw = read_manifest(row)
            if raw is None:
                continue
            known[bid] = int(json.loads(raw).get("tombstones", {}).get("count", 0))
            new.append((bid, known[bid]))
        out[bid] = known[bid]
    if new:
        with catalog.transaction() as conn:
            conn.executemany("INSERT OR REPLACE INTO release_tombstones VALUES (?, ?, ?)",
                             [[release, bid, n] for bid, n in new])
    return out
