"""Which builds a deletion reaches, on a machine that holds none of them: with an object-store data
root the builds' lineage is read from the bucket, so only the builds made from a tombstoned record
are reached — not every build this machine never downloaded (fsspec's memory file system, the same
``ObjectStore`` code as s3://)."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus_assets.domain.deletion.builds import TombstonedIds, builds_reached
from corpus_assets.domain.deletion.tombstones import TombstoneSet
from corpus_assets.domain.release import registry as reg
from corpus_assets.domain.release.mirror import push_release
from corpus_assets.domain.release.publish import build_id, publish_release
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.object_store import ObjectStore


def _publish(releases_root: Path, n: int, record_ids: list[str], *, spans_only: bool = False):
    def stage(tmp: Path) -> None:
        (tmp / "shards" / "train").mkdir(parents=True)
        (tmp / "shards" / "train" / "train-00000.bin").write_bytes(bytes([n]) * 64)
        table = pa.table({"record_id": record_ids})
        if spans_only:  # a build from before lineage files: its shards' provenance spans name the records
            pq.write_table(table, tmp / "shards" / "train" / "train-00000.spans.parquet")
        else:
            (tmp / "lineage").mkdir()
            pq.write_table(table, tmp / "lineage" / "records.parquet")

    created = datetime.now(timezone.utc).isoformat()
    return publish_release(releases_root, "demo", build_id({"build": n}), stage,
                           lambda _t, _a: {"release": "demo", "created_at": created}, signing_key=None)


def test_a_machine_without_the_builds_reads_their_lineage_from_the_bucket(tmp_path):
    remote = ObjectStore(f"memory://corpus-{uuid.uuid4().hex[:10]}/data")
    cat = Catalog.at(tmp_path / "catalog.duckdb")  # the deployment's shared catalog
    builds = [_publish(tmp_path / "machine_a" / "releases", 0, ["web:a", "web:b"]),
              _publish(tmp_path / "machine_a" / "releases", 1, ["web:c"]),
              _publish(tmp_path / "machine_a" / "releases", 2, ["web:b", "web:d"], spans_only=True)]
    for b in builds:
        push_release(remote, b.path, "demo", b.build_id, b.content_digest)
        reg.register_published(cat, "demo", b.build_id, b.content_digest, f"releases/demo/{b.build_id}")
    tombs = TombstoneSet(generation=1, record_ids={"web:b": "del-1"}, request_ids=("del-1",))

    machine_b = tmp_path / "machine_b"  # the daemon's machine: none of the builds in its cache
    reached = builds_reached(cat, machine_b, tombs, remote=remote)
    assert sorted((r.build_id, r.records, r.request_ids, r.evidence) for r in reached) == sorted([
        (builds[0].build_id, 1, ("del-1",), "lineage (bucket)"),
        (builds[2].build_id, 1, ("del-1",), "shard spans (bucket)")])
    assert not machine_b.exists()  # read, not cached

    # the machine that built them reads its own copies, with the same answer
    local = builds_reached(cat, tmp_path / "machine_a", tombs)
    assert sorted((r.build_id, r.records) for r in local) == sorted((r.build_id, r.records) for r in reached)
    # without the bucket, a build this machine does not hold counts as reached (the safe side), and says so
    logged = []
    blind = builds_reached(cat, machine_b, tombs, log=logged.append)
    assert {r.build_id for r in blind} == {b.build_id for b in builds} and {r.evidence for r in blind} == {"unknown"}
    assert len(logged) == 3 and all("inputs unknown" in line for line in logged)

    # a source withdrawal reaches every build made from one of the source's records
    by_source = TombstoneSet(generation=2, sources={"web": "del-2"}, request_ids=("del-2",))
    assert {r.build_id: r.records for r in builds_reached(cat, machine_b, by_source, remote=remote)} == {
        builds[0].build_id: 2, builds[1].build_id: 1, builds[2].build_id: 2}


@pytest.mark.parametrize("other_sources", [0, 9], ids=["prefix-scans", "split-ids"])
def test_the_batched_match_finds_what_asking_each_record_finds(tmp_path, other_sources):
    """``TombstonedIds`` filters in Arrow before asking ``is_tombstoned``: it must find exactly what
    asking every record id finds (ids, source prefixes, ids without a prefix, nulls, a source name
    that is only a prefix of another, ids split over batches and files)."""
    ids = [f"{src}:{i}" for src in ("web", "webarchive", "books", "we") for i in range(500)] + ["web", "noprefix", None, ""]
    files = []
    for n, part in enumerate((ids[:900], ids[900:])):
        files.append(tmp_path / f"part-{n}.parquet")
        pq.write_table(pa.table({"record_id": pa.array(part, pa.string())}), files[-1])
    tombs = TombstoneSet(generation=3, record_ids={"books:7": "del-1", "webarchive:499": "del-1", "absent:1": "del-1",
                                                   "noprefix": "del-3"},
                         sources={"web": "del-2", **{f"gone{i}": "del-2" for i in range(other_sources)}},
                         request_ids=("del-1", "del-2", "del-3"))
    expected = {r: tombs.is_tombstoned(record_id=r) for r in ids if r and tombs.is_tombstoned(record_id=r)}
    assert TombstonedIds(tombs).hits(files, batch_rows=64) == expected
    assert len(expected) == 503 and expected["web:0"] == "del-2" and "webarchive:1" not in expected and "web" not in expected
