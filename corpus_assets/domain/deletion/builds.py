"""Which published builds a deletion reaches: every build, current or superseded, whose inputs
name a tombstoned record.

A build's inputs are read from its own directory — ``lineage/records.parquet`` (every record copy
it was built from), or, for builds published before lineage files existed, the record ids of its
shards' provenance spans — never from the current layers, which have moved on since an older
build was made. With an object-store data root, a build this machine does not hold is read from
the bucket (a daemon's machine rarely holds the builds other machines published). Rules and why:
docs/deletion.md#builds-a-deletion-reaches
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.domain.deletion.tombstones import TombstoneSet
from corpus_assets.domain.release.build import LINEAGE_FILE
from corpus_assets.domain.release.registry import PUBLISHED, SUPERSEDED, registry
from corpus_assets.domain.storage.catalog import Catalog

if TYPE_CHECKING:  # only when a caller passes a bucket
    from corpus_assets.domain.storage.object_store import ObjectStore

__all__ = ["ReachedBuild", "build_record_ids", "builds_reached", "remote_build_record_ids"]


@dataclass(frozen=True)
class ReachedBuild:
    release: str
    build_id: str
    status: str  # published | superseded
    records: int  # tombstoned record ids among its inputs
    request_ids: tuple[str, ...]  # the requests that tombstoned them
    evidence: str  # lineage | shard spans


def build_record_ids(build_dir: Path) -> tuple[Optional[set[str]], str]:
    """(record ids a build was built from, where they were read); (None, reason) when the build
    directory holds neither a lineage file nor shard spans."""
    lineage = build_dir / LINEAGE_FILE
    if lineage.is_file():
        return set(pq.read_table(lineage, columns=["record_id"]).column(0).to_pylist()), "lineage"
    spans = sorted(build_dir.glob("shards/*/*.spans.parquet"))
    if spans:
        ids: set[str] = set()
        for p in spans:
            ids.update(r for r in pq.read_table(p, columns=["record_id"]).column(0).to_pylist() if r)
        return ids, "shard spans"
    return None, f"{build_dir}: no {LINEAGE_FILE} and no shard spans"


def _ids(raw: bytes) -> list:
    return pq.read_table(pa.BufferReader(raw), columns=["record_id"]).column(0).to_pylist()


def remote_build_record_ids(remote: "ObjectStore", release: str, build: str) -> tuple[Optional[set[str]], str]:
    """``build_record_ids`` of a build in the bucket, read without caching it: its lineage file, or
    its shards' provenance spans."""
    key = DataRoot.release_key(release, build)
    raw = remote.read_bytes(f"{key}/{LINEAGE_FILE}")
    if raw is not None:
        return set(_ids(raw)), "lineage (bucket)"
    spans = [f for f in remote.list_files(f"{key}/shards") if f.endswith(".spans.parquet")]
    if spans:
        ids: set[str] = set()
        for f in spans:
            raw = remote.read_bytes(f"{key}/shards/{f}")
            if raw is None:  # gone since the listing: the inputs are not known after all
                return None, f"{remote.uri(key)}/shards/{f} disappeared while it was read"
            ids.update(r for r in _ids(raw) if r)
        return ids, "shard spans (bucket)"
    return None, f"{remote.uri(key)}: no {LINEAGE_FILE} and no shard spans"


def builds_reached(catalog: Catalog, home: Path, tombstones: TombstoneSet, *,
                   releases: Optional[set[str]] = None, log=lambda _m: None,
                   remote: Optional["ObjectStore"] = None) -> list[ReachedBuild]:
    """Every published or superseded build (of ``releases``, default all) whose inputs name a
    record ``tombstones`` covers, in (release, published time) order. A build this machine does
    not hold under ``home`` is read from ``remote`` (an object-store data root) when given. A build
    whose inputs cannot be read is reported through ``log`` and counted as reached: withdrawing a
    clean build costs a rebuild, keeping a dirty one breaks the promise."""
    out = []
    for row in registry(catalog):
        if row["status"] not in (PUBLISHED, SUPERSEDED) or (releases is not None and row["release"] not in releases):
            continue
        ids, evidence = build_record_ids(Path(home) / row["path"])
        if ids is None and remote is not None:
            ids, evidence = remote_build_record_ids(remote, row["release"], row["build_id"])
        if ids is None:
            log(f"release {row['release']} build {row['build_id'][:16]}: inputs unknown ({evidence}); treated as reached")
            out.append(ReachedBuild(row["release"], row["build_id"], row["status"], 0, (), "unknown"))
            continue
        hits = {}
        for rid in ids:
            req = tombstones.is_tombstoned(record_id=rid)
            if req is not None:
                hits[rid] = req
        if hits:
            out.append(ReachedBuild(row["release"], row["build_id"], row["status"], len(hits),
                                    tuple(sorted(set(hits.values()))), evidence))
    return out
