"""The tombstones each earlier build of a release applied: from the catalog, each manifest read at
most once, so the tombstones_never_shrink check does not grow with the release's history."""

from __future__ import annotations

import json

from corpus_assets.domain.release.tombstone_history import earlier_tombstone_counts, record_build_tombstones
from corpus_assets.domain.storage.catalog import Catalog


def test_counts_come_from_the_catalog_and_each_old_manifest_is_read_once(tmp_path):
    catalog = Catalog.at(tmp_path / "catalog.duckdb")
    manifests = {f"b{i}": json.dumps({"tombstones": {"count": i}}).encode() for i in range(5)}
    rows = [{"build_id": b, "path": f"releases/r/{b}"} for b in manifests] + [{"build_id": "gone", "path": "x"}]
    reads: list[str] = []

    def read(row):
        reads.append(row["build_id"])
        return manifests.get(row["build_id"])

    record_build_tombstones(catalog, "r", "b4", 4)  # registered with its count: never read
    first = earlier_tombstone_counts(catalog, "r", "b3", rows, read)
    assert first == {"b0": 0, "b1": 1, "b2": 2, "b4": 4}  # this build and an unreadable one left out
    assert sorted(reads) == ["b0", "b1", "b2", "gone"]
    reads.clear()
    again = earlier_tombstone_counts(catalog, "r", "b3", rows, read)
    assert again == first and reads == ["gone"]  # only what has no manifest anywhere is tried again
    # another release's counts are its own
    assert earlier_tombstone_counts(catalog, "other", "x", [{"build_id": "b1", "path": "p"}], lambda row: None) == {}
