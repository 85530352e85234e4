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
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.domain.deletion.tombstones import TombstoneSet
from corpus_assets.domain.release.build import LINEAGE_FILE
from corpus_assets.domain.release.registry import PUBLISHED, SUPERSEDED, registry
from corpus_assets.domain.storage.catalog import Catalog

if TYPE_CHECKING:  # only when a caller passes a bucket
    from corpus_assets.domain.storage.object_store import ObjectStore

__all__ = ["ReachedBuild", "build_inputs", "builds_reached", "remote_build_inputs", "TombstonedIds"]


@dataclass(frozen=True)
class ReachedBuild:
    release: str
    build_id: str
    status: str  # published | superseded
    records: int  # tombstoned record ids among its inputs
    request_ids: tuple[str, ...]  # the requests that tombstoned them
    evidence: str  # lineage | shard spans


def build_inputs(build_dir: Path) -> tuple[Optional[list], str]:
    """(the Parquet files whose ``record_id`` column names the records a build was made from,
    where they were found); (None, reason) when the build directory holds neither a lineage file
    nor shard spans."""
    lineage = build_dir / LINEAGE_FILE
    if lineage.is_file():
        return [lineage], "lineage"
    spans = sorted(build_dir.glob("shards/*/*.spans.parquet"))
    if spans:
        return spans, "shard spans"
    return None, f"{build_dir}: no {LINEAGE_FILE} and no shard spans"


def remote_build_inputs(remote: "ObjectStore", release: str, build: str) -> tuple[Optional[list], str]:
    """``build_inputs`` of a build in the bucket, read into memory without caching it: its lineage
    file, or its shards' provenance spans."""
    key = DataRoot.release_key(release, build)
    raw = remote.read_bytes(f"{key}/{LINEAGE_FILE}")
    if raw is not None:
        return [pa.BufferReader(raw)], "lineage (bucket)"
    spans = [f for f in remote.list_files(f"{key}/shards") if f.endswith(".spans.parquet")]
    if not spans:
        return None, f"{remote.uri(key)}: no {LINEAGE_FILE} and no shard spans"
    files = []
    for f in spans:
        raw = remote.read_bytes(f"{key}/shards/{f}")
        if raw is None:  # gone since the listing: the inputs are not known after all
            return None, f"{remote.uri(key)}/shards/{f} disappeared while it was read"
        files.append(pa.BufferReader(raw))
    return files, "shard spans (bucket)"


_PREFIX_SCANS = 8  # up to this many withdrawn sources, one starts_with pass each beats splitting every id


class TombstonedIds:
    """Finds the record ids a build's files name that a tombstone set covers (by record id, or by
    its source prefix). Matched in Arrow a batch at a time — a build of a billion records never
    becomes a billion Python strings; only candidates reach ``is_tombstoned`` — with the value sets
    built once per tombstone set, not once per build."""

    def __init__(self, tombstones: TombstoneSet) -> None:
        self.tombstones = tombstones
        self.ids = pa.array(sorted(tombstones.record_ids), pa.string())
        self.sources = pa.array(sorted(tombstones.sources), pa.string())
        self.prefixes = [f"{s}:" for s in sorted(tombstones.sources)] if len(self.sources) <= _PREFIX_SCANS else None

    def _candidates(self, col: pa.Array) -> pa.Array:
        mask = pc.is_in(col, value_set=self.ids)
        if self.prefixes is not None:  # a few withdrawn sources: a prefix test each
            for prefix in self.prefixes:
                mask = pc.or_kleene(mask, pc.starts_with(col, pattern=prefix))
        else:
            source = pc.list_element(pc.split_pattern(col, ":", max_splits=1), 0)
            by_source = pc.and_kleene(pc.match_substring(col, ":"), pc.is_in(source, value_set=self.sources))
            mask = pc.or_kleene(mask, by_source)
        return pc.filter(col, pc.fill_null(mask, False))

    def hits(self, files: list, batch_rows: int = 1 << 16) -> dict[str, str]:
        """record id -> request id for every covered record id the files' ``record_id`` columns name."""
        hits: dict[str, str] = {}
        if not len(self.ids) and not len(self.sources):
            return hits
        for f in files:
            for batch in pq.ParquetFile(f).iter_batches(columns=["record_id"], batch_size=batch_rows):
                col = batch.column(0)
                if col.type != pa.string():
                    col = col.cast(pa.string())
                for rid in self._candidates(col).to_pylist():
                    req = self.tombstones.is_tombstoned(record_id=rid)
                    if req is not None:
                        hits[rid] = req
        return hits


def builds_reached(catalog: Catalog, home: Path, tombstones: TombstoneSet, *,
                   releases: Optional[set[str]] = None, log=lambda _m: None,
                   remote: Optional["ObjectStore"] = None) -> list[ReachedBuild]:
    """Every published or superseded build (of ``releases``, default all) whose inputs name a
    record ``tombstones`` covers, in (release, published time) order. A build this machine does
    not hold under ``home`` is read from ``remote`` (an object-store data root) when given. A build
    whose inputs cannot be read is reported through ``log`` and counted as reached: withdrawing a
    clean build costs a rebuild, keeping a dirty one breaks the promise."""
    out = []
    covered = TombstonedIds(tombstones)
    for row in registry(catalog):
        if row["status"] not in (PUBLISHED, SUPERSEDED) or (releases is not None and row["release"] not in releases):
            continue
        files, evidence = build_inputs(Path(home) / row["path"])
        if files is None and remote is not None:
            files, evidence = remote_build_inputs(remote, row["release"], row["build_id"])
        if files is None:
            log(f"release {row['release']} build {row['build_id'][:16]}: inputs unknown ({evidence}); treated as reached")
            out.append(ReachedBuild(row["release"], row["build_id"], row["status"], 0, (), "unknown"))
            continue
        hits = covered.hits(files)
        if hits:
            out.append(ReachedBuild(row["release"], row["build_id"], row["status"], len(hits),
                                    tuple(sorted(set(hits.values()))), evidence))
    return out
