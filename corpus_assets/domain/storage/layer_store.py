"""Versioned Parquet layers: the storage contract of the architecture guide.

``layers/<asset>/<partition>/<version>/<table>/part-*.parquet`` plus ``_manifest.json``, and
``CURRENT`` naming the current version. A version is staged under a locked ``.tmp-*``
(``dir_locks``), verified, renamed into place and published by replacing ``CURRENT`` only if it
still names what it named when the writer started (else ``ConcurrentUpdateError``), so readers
only ever see complete versions. With an object store the store is the authority (files, then the
``_manifest.json`` seal, then ``CURRENT``) and the local directory a cache of immutable,
content-named versions. Row groups depend on the row sequence only, so the bytes (and the version
name) do not depend on the caller's batch size.

Layout, publication and determinism: docs/storage.md#layer-store
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

try:  # POSIX advisory locks; without them (Windows) the compare is not atomic
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms CI runs
    fcntl = None  # type: ignore[assignment]

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.domain.core.atomic_files import atomic_write_text, fsync_dir
from corpus_assets.domain.storage.dir_locks import new_staging_dir, remove_abandoned, unlock
from corpus_assets.domain.core.faults import pause_point
from corpus_assets.domain.core.hashing import canonical_json, sha256_file
from corpus_assets.domain.core.keys import InvalidKeyError
from corpus_assets.domain.storage.object_store import ObjectStore, store_from_env

CURRENT = "CURRENT"
MANIFEST = "_manifest.json"
UNPARTITIONED = "_all"
UNSEALED_STALE_SECONDS = 3600  # an unsealed upload older than this belongs to a dead writer
LAYOUT_VERSION = 1

_PRIVATE_DIR_MODE = 0o700
_PRIVATE_FILE_MODE = 0o600


class LayerIntegrityError(CorpusError, RuntimeError):
    """A stored version does not match its manifest (missing, extra or altered files)."""


class ConcurrentUpdateError(CorpusError, RuntimeError):
    """Another writer moved the partition's CURRENT while this version was being built (a purge,
    or another run of the same partition): publishing ours would silently undo theirs."""


_ANY = object()  # set_current without a compare step


def _check_component(kind: str, value: str) -> str:
    if (
        not value
        or value in (".", "..")
        or "/" in value
        or "\\" in value
        or "\x00" in value
        or len(value) > 128
        or value.startswith(".")
    ):
        raise InvalidKeyError(f"invalid {kind} {value!r} for a storage path")
    return value


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive ``flock`` on ``path`` (created if needed) for a read-compare-replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _row_sizes(table: pa.Table) -> np.ndarray:
    """Approximate bytes per row, computed from the row's values only (never from buffer layout):
    string and binary lengths, 8 for any other column."""
    total = np.full(table.num_rows, 8 * table.num_columns, np.int64)
    for col in table.columns:
        t = col.type
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
            total += np.asarray(pc.fill_null(pc.binary_length(col), 0).to_numpy(), np.int64) - 8
    return total


# field metadata of a column whose values are never repeated (token payloads as bytes, record
# ids): written plain. In the schema, so a file says it and a rewrite (a purge) keeps it.
PLAIN = {b"parquet_encoding": b"plain"}


def plain_fields(schema: pa.Schema, *names: str) -> pa.Schema:
    """``schema`` with the fields ``names`` marked ``PLAIN``."""
    return pa.schema([f.with_metadata(PLAIN) if f.name in names else f for f in schema], metadata=schema.metadata)


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns Parquet dictionary-encodes: scalar ones not marked ``PLAIN``. Nested lists
    (token ids, loss masks, offsets) are written plain: on 22,740 token views a dictionary made
    them 2.3x larger under zstd (87 vs 38 MB) and the write 1.4x slower (docs/benchmarks.md)."""
    return [f.name for f in schema
            if not (pa.types.is_list(f.type) or pa.types.is_large_list(f.type) or (f.metadata or {}) == PLAIN)]


@dataclass
class TableSpec:
    schema: pa.Schema
    private: bool = False  # owner-only (0700 dir, 0600 files): raw bytes, quarantine, private references
    # columns whose value combinations the manifest counts (``tables.<name>.counts``: rows of
    # [values..., n], sorted): a reader of the counts (a release's decision totals) need not read the table
    count_by: tuple[str, ...] = ()
    # rows per row group when not the store's (narrow per-record tables: fewer, larger groups)
    rows_per_group: Optional[int] = None


@dataclass
class _TableWriter:
    name: str
    spec: TableSpec
    directory: Path
    rows_per_group: int
    bytes_per_group: int
    groups_per_file: int
    _pending: list = field(default_factory=list)
    _pending_rows: int = 0
    _pending_bytes: int = 0
    _writer: Optional[pq.ParquetWriter] = None
    _file_index: int = 0
    _groups_in_file: int = 0
    rows: int = 0
    files: list = field(default_factory=list)
    known_sha256: dict = field(default_factory=dict)  # adopted file -> its digest in the version it came from
    counts: dict = field(default_factory=dict)  # spec.count_by values -> rows (written and adopted)

    def write(self, data: pa.Table | pa.RecordBatch | Iterable[Mapping]) -> None:
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        elif not isinstance(data, pa.Table):
            data = pa.Table.from_pylist(list(data), schema=self.spec.schema)
        if data.schema != self.spec.schema:
            try:
                data = data.select(self.spec.schema.names).cast(self.spec.schema)
            except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
                raise ValueError(f"table {self.name!r}: data does not match the declared schema: {exc}") from None
        # Regroup by row group boundaries that depend on the rows only (count and size), whatever
        # the calls' and chunks' boundaries were.
        self._add_rows(data)
        self._count(data)

    def _count(self, data: pa.Table) -> None:
        if not self.spec.count_by or not data.num_rows:
            return
        g = data.select(list(self.spec.count_by)).group_by(list(self.spec.count_by)).aggregate([([], "count_all")])
        for row in zip(*(g.column(c).to_pylist() for c in (*self.spec.count_by, "count_all"))):
            self.counts[row[:-1]] = self.counts.get(row[:-1], 0) + int(row[-1])

    def count_rows(self) -> Optional[list]:
        """``[[values..., n], ...]`` over ``spec.count_by``, sorted (None sorts first); None without ``count_by``."""
        if not self.spec.count_by:
            return None
        return [[*k, n] for k, n in sorted(self.counts.items(), key=lambda kv: tuple((v is not None, v) for v in kv[0]))]

    def _add_rows(self, data: pa.Table) -> None:
        """Fill row groups greedily: a group takes rows while it has fewer than ``rows_per_group``
        and their sizes stay within ``bytes_per_group`` (its first row always goes in)."""
        sizes = _row_sizes(data)
        start, n = 0, data.num_rows
        while start < n:
            room = min(self.rows_per_group - self._pending_rows, n - start)
            cum = self._pending_bytes + np.cumsum(sizes[start:start + room])
            take = int(np.searchsorted(cum, self.bytes_per_group, side="right"))
            if take == 0 and not self._pending_rows:
                take = 1
            if take:
                self._pending_bytes = int(cum[take - 1])
                self._pending.append(data.slice(start, take))
                self._pending_rows += take
                start += take
            if start < n or self._pending_rows >= self.rows_per_group:
                self._flush_group()

    def _flush_group(self) -> None:
        if not self._pending_rows:
            return
        table = pa.concat_tables(self._pending).combine_chunks()
        if self._writer is None:
            path = self.directory / f"part-{self._file_index:05d}.parquet"
            self._writer = pq.ParquetWriter(
                path, self.spec.schema, compression="zstd", write_statistics=True,
                use_dictionary=_dictionary_columns(self.spec.schema),
            )
            self.files.append(path)
        self._writer.write_table(table, row_group_size=table.num_rows)
        self.rows += table.num_rows
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0
        self._groups_in_file += 1
        if self._groups_in_file >= self.groups_per_file:
            self._close_file()

    def end_file(self) -> None:
        """Close the open part file: rows written next start a new one. A caller that ends a file
        at every input partition can later ``adopt`` that partition's files whole."""
        self._flush_group()
        self._close_file()

    def adopt(self, src: Path, *, rows: int, sha256: str, size: int) -> str:
        """Take a part file of a committed version as this table's next file, hard-linked (copied
        across file systems): its bytes are what writing its rows again would produce, so a
        rebuild need not. Returns the file's name in this version."""
        self.end_file()
        dst = self.directory / f"part-{self._file_index:05d}.parquet"
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
        if dst.stat().st_size != size:
            raise LayerIntegrityError(f"table {self.name!r}: adopted file {src} is {dst.stat().st_size} bytes, "
                                      f"its manifest says {size}")
        self.files.append(dst)
        self.known_sha256[dst] = sha256
        self.rows += rows
        if self.spec.count_by:
            self._count(pq.ParquetFile(dst).read(columns=list(self.spec.count_by)))
        self._file_index += 1
        return dst.name

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._file_index += 1
            self._groups_in_file = 0

    def close(self) -> None:
        self._flush_group()
        self._close_file()
        if not self.files:
            # An empty table is still a table: write one file with the schema and no rows.
            path = self.directory / "part-00000.parquet"
            pq.write_table(self.spec.schema.empty_table(), path, compression="zstd",
                           use_dictionary=_dictionary_columns(self.spec.schema))
            self.files.append(path)


@dataclass(frozen=True)
class LayerVersion:
    """A committed, immutable version of one partition of one asset."""

    root: Path  # the version directory
    asset: str
    partition: str
    version: str
    manifest: dict
    location: Optional[str] = None  # the object-store URL of the version, when the data root is one

    @property
    def content_digest(self) -> str:
        return self.manifest["content_digest"]

    def table_files(self, table: str) -> list[Path]:
        if table not in self.manifest["tables"]:
            raise KeyError(f"{self.asset}/{self.partition}@{self.version} has no table {table!r}")
        return [self.root / f["path"] for f in self.manifest["tables"][table]["files"]]

    def row_count(self, table: str) -> int:
        return int(self.manifest["tables"][table]["rows"])

    def read_table(self, table: str, columns: Optional[list[str]] = None) -> pa.Table:
        files = self.table_files(table)
        # ParquetFile.read, not pq.read_table: the same table without a dataset discovery per file
        # (about 0.4 ms each, on the ~70 reads of a release run)
        return pa.concat_tables([pq.ParquetFile(p).read(columns=columns) for p in files])

    def iter_batches(self, table: str, batch_size: int = 1024, columns: Optional[list[str]] = None) -> Iterator[pa.RecordBatch]:
        """Batches of at most ``batch_size`` rows, read one row group at a time: resident memory
        is bounded by the writer's row-group budget (``ParquetFile.iter_batches`` buffers more —
        about twice as much on large list columns, measured by bench/bench_packed_shards_memory.py)."""
        for p in self.table_files(table):
            pf = pq.ParquetFile(p)
            for i in range(pf.num_row_groups):
                yield from pf.read_row_group(i, columns=columns).to_batches(max_chunksize=batch_size)

    def take_rows(self, table: str, positions, columns: Optional[list[str]] = None) -> Iterator[tuple[int, int, pa.Table]]:
        """For ascending row ``positions`` of ``table``: ``(lo, hi, rows)`` per row group holding
        ``positions[lo:hi]``, those rows in that order; only such row groups are read, and reading
        stops after the last one. Raises ``ValueError`` naming the version when a position is past
        the table's end."""
        import numpy as np

        positions = np.asarray(positions, dtype=np.int64)
        n, done, start = positions.shape[0], 0, 0
        for p in self.table_files(table):
            if done >= n:
                break
            pf = pq.ParquetFile(p)
            for g in range(pf.num_row_groups):
                if done >= n:
                    break
                size = pf.metadata.row_group(g).num_rows
                hi = int(np.searchsorted(positions, start + size, side="left"))
                if hi > done:
                    rows = pf.read_row_group(g, columns=columns).take(pa.array(positions[done:hi] - start, pa.int64()))
                    yield done, hi, rows
                    done = hi
                start += size
        if done < n:
            raise ValueError(f"{self.asset}/{self.partition}@{self.version}: rows past the end of {table}")

    def verify(self) -> None:
        """Re-hash every file against the manifest; raise LayerIntegrityError on any difference."""
        listed = set()
        for tname, t in self.manifest["tables"].items():
            for f in t["files"]:
                p = self.root / f["path"]
                listed.add(p)
                if not p.is_file():
                    raise LayerIntegrityError(f"{self.asset}/{self.partition}@{self.version}: missing {f['path']}")
                if sha256_file(p) != f["sha256"]:
                    raise LayerIntegrityError(
                        f"{self.asset}/{self.partition}@{self.version}: {f['path']} does not match its manifest digest"
                    )
        for p in self.root.rglob("*.parquet"):
            if p not in listed:
                raise LayerIntegrityError(f"{self.asset}/{self.partition}@{self.version}: unexpected file {p.name}")


class VersionWriter:
    """Stage one new version of a partition; ``commit()`` publishes it, anything else discards it."""

    def __init__(
        self,
        store: "LayerStore",
        asset: str,
        partition: str,
        tables: Mapping[str, TableSpec],
        build_spec: Mapping,
        *,
        rows_per_group: int,
        bytes_per_group: int,
        groups_per_file: int,
    ) -> None:
        self.store = store
        self.asset = asset
        self.partition = partition
        self.build_spec = dict(build_spec)
        # what CURRENT named when this version started: commit() publishes only over that
        self._expected = store.current_version_name(asset, partition)
        self._partition_dir = store.partition_dir(asset, partition)
        self._partition_dir.mkdir(parents=True, exist_ok=True)
        if any(spec.private for spec in tables.values()):
            os.chmod(self._partition_dir, _PRIVATE_DIR_MODE)
        self._tmp, self._lock_fd = new_staging_dir(self._partition_dir)  # locked: cleanup skips it
        self._tables: dict[str, _TableWriter] = {}
        for name, spec in tables.items():
            _check_component("table name", name)
            d = self._tmp / name
            d.mkdir()
            if spec.private:
                os.chmod(d, _PRIVATE_DIR_MODE)
            self._tables[name] = _TableWriter(
                name, spec, d, spec.rows_per_group or rows_per_group, bytes_per_group, groups_per_file
            )
        self._done = False
        self.result: Optional[LayerVersion] = None

    def table(self, name: str) -> _TableWriter:
        return self._tables[name]

    def write(self, table: str, data) -> None:
        self._tables[table].write(data)

    def commit(self, extra_manifest: Optional[Mapping] = None) -> LayerVersion:
        """Close files, digest them, move the version into place and flip CURRENT atomically."""
        if self._done:
            raise RuntimeError("version already committed or aborted")
        tables_meta: dict[str, dict] = {}
        digest = hashlib.sha256()
        for name in sorted(self._tables):
            tw = self._tables[name]
            tw.close()
            files = []
            for p in tw.files:
                if tw.spec.private:
                    os.chmod(p, _PRIVATE_FILE_MODE)
                sha = tw.known_sha256.get(p) or sha256_file(p)
                rel = f"{name}/{p.name}"
                files.append({"path": rel, "sha256": sha, "bytes": p.stat().st_size})
                digest.update(f"{rel}\x00{sha}\n".encode())
            tables_meta[name] = {
                "rows": tw.rows,
                "private": tw.spec.private,
                "schema": [f"{f.name}:{f.type}" for f in tw.spec.schema],
                "files": files,
            }
            counts = tw.count_rows()
            if counts is not None:
                tables_meta[name]["counts"] = {"by": list(tw.spec.count_by), "rows": counts}
        content_digest = digest.hexdigest()
        version = content_digest[:16]
        manifest = {
            "layout_version": LAYOUT_VERSION,
            "asset": self.asset,
            "partition": self.partition,
            "version": version,
            "content_digest": content_digest,
            "tables": tables_meta,
            "build_spec": self.build_spec,
            **(dict(extra_manifest) if extra_manifest else {}),
        }
        (self._tmp / MANIFEST).write_bytes(canonical_json(manifest))
        final = self._partition_dir / version
        if final.exists():
            # Same content already stored (a rebuild of identical inputs): keep the existing copy.
            shutil.rmtree(self._tmp, ignore_errors=True)
        else:
            fsync_dir(self._tmp)
            os.rename(self._tmp, final)
            fsync_dir(self._partition_dir)
        unlock(self._lock_fd)
        self._done = True
        self.store.set_current(self.asset, self.partition, version, expected=self._expected)
        self.result = self.store.open_version(self.asset, self.partition, version)
        return self.result

    def abort(self) -> None:
        if not self._done:
            for tw in self._tables.values():
                if tw._writer is not None:
                    try:
                        tw._writer.close()
                    except Exception:  # noqa: BLE001 - best effort cleanup on an already failing path
                        pass
            shutil.rmtree(self._tmp, ignore_errors=True)
            unlock(self._lock_fd)
            self._done = True
            try:  # a partition this writer created and nothing else uses: leave no empty folder behind
                self._tmp.parent.rmdir()
            except OSError:
                pass

    def __enter__(self) -> "VersionWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or not self._done:
            # Leaving the block without commit() (or with an error) publishes nothing.
            self.abort()


class LayerStore:
    """All versioned layers under one data root (``$CORPUS_HOME``)."""

    def __init__(
        self,
        home: Path | str,
        *,
        remote: Optional[ObjectStore] = None,
        rows_per_group: int = 2048,
        bytes_per_group: int = 64 << 20,
        groups_per_file: int = 16,
    ) -> None:
        self.home = Path(home)
        self.root = DataRoot(self.home)
        self.layers_root = self.root.layers
        self.remote = remote
        self.rows_per_group = rows_per_group
        self.bytes_per_group = bytes_per_group
        self.groups_per_file = groups_per_file

    @classmethod
    def from_env(cls, home: Path | str, **kwargs) -> "LayerStore":
        """The store of this deployment: ``home`` locally, mirrored to ``CORPUS_HOME`` when that is a URL."""
        return cls(home, remote=store_from_env(), **kwargs)

    @property
    def data_root(self) -> str:
        """Where the durable copy lives: the object-store URL, or the local root."""
        return self.remote.url if self.remote is not None else str(self.home)

    def partition_dir(self, asset: str, partition: str) -> Path:
        return self.layers_root / _check_component("asset name", asset) / _check_component("partition", partition)

    @staticmethod
    def _rel(asset: str, partition: Optional[str] = None, *rest: str) -> str:
        parts = ["layers", _check_component("asset name", asset)]
        if partition is not None:
            parts.append(_check_component("partition", partition))
        return "/".join(parts + list(rest))

    # --- sealed trees: immutable, content-addressed directories beside the layers (shard sets)

    def _tree_rel(self, rel: str) -> str:
        for part in rel.split("/"):
            _check_component("tree path component", part)
        return rel

    def seal_tree(self, rel: str) -> None:
        """Publish a finished local directory ``home/rel`` to the object store (no-op locally)."""
        if self.remote is not None:
            self.remote.push_tree(self.home / self._tree_rel(rel), rel)

    def tree_dir(self, rel: str) -> Path:
        """The local directory of a sealed tree, downloaded (and checked) first when only the
        object store holds it."""
        local = self.home / self._tree_rel(rel)
        if self.remote is not None and not local.is_dir():
            self.remote.pull_tree(rel, local)
        return local

    def trees(self, parent: str) -> list[str]:
        """Names of the trees under ``parent``, local or remote."""
        names: set[str] = set()
        local = self.home / self._tree_rel(parent)
        if local.is_dir():
            names |= {p.name for p in local.iterdir() if p.is_dir() and not p.name.startswith(".")}
        if self.remote is not None:
            names |= {n for n in self.remote.list_dir(parent) if not n.startswith(".")}
        return sorted(names)

    def drop_tree(self, rel: str) -> None:
        """Delete a tree locally and from the object store."""
        shutil.rmtree(self.home / self._tree_rel(rel), ignore_errors=True)
        if self.remote is not None:
            self.remote.delete_tree(rel)

    def set_aside_tree(self, rel: str, label: str) -> Optional[Path]:
        """Take a tree out of use without losing its bytes: its local copy (never fetched for this)
        is renamed to ``.<label>-<name>-<UTC time>-<id>`` beside it (hidden from :meth:`trees`)
        and returned, None when there is none; the object store's copy is deleted, because its
        seal would make a fresh tree of the same name a no-op to upload (``push_tree``)."""
        local = self.home / self._tree_rel(rel)
        moved = None
        if local.is_dir():
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            moved = local.parent / f".{label}-{local.name}-{stamp}-{uuid.uuid4().hex[:6]}"
            local.rename(moved)
        if self.remote is not None:
            self.remote.delete_tree(rel)
        return moved

    def prune_cache(self) -> list[str]:
        """Object store only: delete cached layer versions and shard sets the store no longer holds
        (dropped by a purge or retention run on another machine), so deleted data does not linger
        in this machine's cache. Returns the local paths removed, relative to ``home``."""
        if self.remote is None:
            return []
        removed: list[str] = []
        candidates: list[tuple[Path, str]] = []
        if self.layers_root.is_dir():
            for vdir in sorted(self.layers_root.glob("*/*/*")):
                if vdir.is_dir() and not vdir.name.startswith(".") and not vdir.parent.name.startswith("."):
                    candidates.append((vdir, f"{vdir.relative_to(self.home).as_posix()}/{MANIFEST}"))
        shard_root = self.root.shards
        if shard_root.is_dir():
            for sdir in sorted(shard_root.glob("*/*")):
                if sdir.is_dir() and not sdir.name.startswith("."):
                    candidates.append((sdir, f"{sdir.relative_to(self.home).as_posix()}/_tree.json"))
        for local, seal in candidates:
            if not self.remote.exists(seal):
                shutil.rmtree(local)
                removed.append(local.relative_to(self.home).as_posix())
        return removed

    # --- pointers and the remote mirror ---------------------------------------------------

    def set_current(self, asset: str, partition: str, version: str, *, expected=_ANY) -> None:
        """Make ``version`` (already committed locally) the current one: locally an atomic file
        replace; with an object store, upload and seal the version, then replace ``CURRENT``.

        With ``expected`` (the version, or None, that was current when the writer started), the
        pointer moves only if it still names that — or already names ``version`` — and
        ``ConcurrentUpdateError`` is raised otherwise (locally under an ``flock``; on S3 by a
        conditional ``If-Match`` put). The version itself stays stored either way."""
        _check_component("version", version)
        if self.remote is None:
            d = self.partition_dir(asset, partition)
            with _locked(d / ".lock"):
                if expected is not _ANY:
                    self._check_expected(asset, partition, version, expected, self.current_version_name(asset, partition))
                atomic_write_text(d / CURRENT, version + "\n")
            return
        self._push_version(asset, partition, version)
        pause_point("layer_store:sealed")  # version uploaded and sealed, remote pointer not moved
        key = self._rel(asset, partition, CURRENT)
        body = (version + "\n").encode()
        if expected is _ANY:
            self.remote.write_bytes(key, body)
            return
        raw, etag = self.remote.read_versioned(key)
        now = None if raw is None else raw.decode("utf-8").strip()
        if now == version:
            return
        self._check_expected(asset, partition, version, expected, now)
        if not self.remote.replace_if(key, body, etag):
            raw, _ = self.remote.read_versioned(key)
            self._check_expected(asset, partition, version, expected, None if raw is None else raw.decode().strip())
            raise ConcurrentUpdateError(f"{asset}/{partition}: CURRENT changed while {version} was being published")

    def _check_expected(self, asset: str, partition: str, version: str, expected, now: Optional[str]) -> None:
        if now not in (expected, version):
            raise ConcurrentUpdateError(
                f"{asset}/{partition}: CURRENT moved from {expected or '(none)'} to {now or '(none)'} while "
                f"version {version} was being built (a purge or another run of this partition); "
                f"{version} is stored but not current — rerun to build on the new state"
            )

    def _push_version(self, asset: str, partition: str, version: str) -> None:
        remote = self.remote
        seal = self._rel(asset, partition, version, MANIFEST)
        if remote.exists(seal):
            return  # content-addressed: the same bytes are already sealed there
        root = self.partition_dir(asset, partition) / version
        manifest_bytes = (root / MANIFEST).read_bytes()
        manifest = json.loads(manifest_bytes)
        for t in manifest["tables"].values():
            for f in t["files"]:
                remote.upload(root / f["path"], self._rel(asset, partition, version, f["path"]))
        remote.create_bytes(seal, manifest_bytes)  # False: a concurrent writer sealed the same content

    def _pull_version(self, asset: str, partition: str, version: str) -> Path:
        """Download a sealed remote version into the local cache (checked, staged, renamed)."""
        d = self.partition_dir(asset, partition)
        final = d / version
        raw = self.remote.read_bytes(self._rel(asset, partition, version, MANIFEST))
        if raw is None:
            raise FileNotFoundError(f"{asset}/{partition}: version {version} does not exist in {self.remote.url}")
        manifest = json.loads(raw)
        private = any(t.get("private") for t in manifest["tables"].values())
        d.mkdir(parents=True, exist_ok=True)
        if private:
            os.chmod(d, _PRIVATE_DIR_MODE)
        tmp, lock_fd = new_staging_dir(d)
        try:
            for tname, t in manifest["tables"].items():
                (tmp / _check_component("table name", tname)).mkdir(parents=True, exist_ok=True)
                if t.get("private"):
                    os.chmod(tmp / tname, _PRIVATE_DIR_MODE)
                for f in t["files"]:
                    dst = tmp / tname / _check_component("file name", Path(f["path"]).name)
                    self.remote.download(self._rel(asset, partition, version, f["path"]), dst)
                    if sha256_file(dst) != f["sha256"]:
                        raise LayerIntegrityError(
                            f"{asset}/{partition}@{version}: {self.remote.uri(self._rel(asset, partition, version, f['path']))} "
                            "does not match its manifest digest; refusing to cache it"
                        )
                    if t.get("private"):
                        os.chmod(dst, _PRIVATE_FILE_MODE)
            (tmp / MANIFEST).write_bytes(raw)
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / MANIFEST).is_file():  # a concurrent reader cached it first: fine
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            unlock(lock_fd)
        return final

    def new_version(self, asset: str, partition: str, tables: Mapping[str, TableSpec], build_spec: Mapping) -> VersionWriter:
        self._remove_stale_tmp(asset, partition)
        return VersionWriter(
            self,
            asset,
            partition,
            tables,
            build_spec,
            rows_per_group=self.rows_per_group,
            bytes_per_group=self.bytes_per_group,
            groups_per_file=self.groups_per_file,
        )

    def _remove_stale_tmp(self, asset: str, partition: str) -> None:
        """Staging directories of writers that died (a live writer's is locked and kept)."""
        remove_abandoned(self.partition_dir(asset, partition))

    def current_version_name(self, asset: str, partition: str) -> Optional[str]:
        if self.remote is not None:
            raw = self.remote.read_bytes(self._rel(asset, partition, CURRENT))
            return None if raw is None else _check_component("version", raw.decode("utf-8").strip())
        p = self.partition_dir(asset, partition) / CURRENT
        try:
            name = p.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return _check_component("version", name)

    def open_version(self, asset: str, partition: str, version: str) -> LayerVersion:
        root = self.partition_dir(asset, partition) / _check_component("version", version)
        if self.remote is not None and not (root / MANIFEST).is_file():
            self._pull_version(asset, partition, version)
        try:
            manifest = json.loads((root / MANIFEST).read_bytes())
        except FileNotFoundError:
            raise FileNotFoundError(f"{asset}/{partition}: version {version} does not exist") from None
        return self._version(asset, partition, version, manifest)

    def _version(self, asset: str, partition: str, version: str, manifest: dict) -> LayerVersion:
        location = self.remote.uri(self._rel(asset, partition, version)) if self.remote is not None else None
        return LayerVersion(self.partition_dir(asset, partition) / version, asset, partition, version, manifest, location)

    def current_manifest(self, asset: str, partition: str) -> Optional[dict]:
        """The current version's manifest without its data (no download from an object store)."""
        name = self.current_version_name(asset, partition)
        if name is None:
            return None
        local = self.partition_dir(asset, partition) / name / MANIFEST
        if self.remote is not None and not local.is_file():
            raw = self.remote.read_bytes(self._rel(asset, partition, name, MANIFEST))
            if raw is None:
                raise FileNotFoundError(f"{asset}/{partition}: CURRENT names {name}, which {self.remote.url} does not hold")
            return json.loads(raw)
        return json.loads(local.read_bytes())

    def peek(self, asset: str, partition: str) -> Optional[LayerVersion]:
        """The current version for its manifest only (digest, row counts, report): nothing is
        downloaded from an object store, so its tables are readable only if already cached —
        use ``current()`` to read data."""
        manifest = self.current_manifest(asset, partition)
        if manifest is None:
            return None
        return self._version(asset, partition, _check_component("version", manifest["version"]), manifest)

    def current(self, asset: str, partition: str) -> Optional[LayerVersion]:
        name = self.current_version_name(asset, partition)
        return None if name is None else self.open_version(asset, partition, name)

    def require_current(self, asset: str, partition: str) -> LayerVersion:
        v = self.current(asset, partition)
        if v is None:
            raise FileNotFoundError(
                f"{asset} has no materialized version for partition {partition!r}; materialize it first"
            )
        return v

    def assets(self) -> list[str]:
        """Every asset with at least one stored partition."""
        if self.remote is not None:
            return [n for n in self.remote.list_dir("layers") if not n.startswith(".")]
        if not self.layers_root.is_dir():
            return []
        return sorted(p.name for p in self.layers_root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def partitions(self, asset: str) -> list[str]:
        if self.remote is not None:
            rel = self._rel(asset)
            return sorted(f.split("/")[0] for f in self.remote.list_files(rel) if f.count("/") == 1 and f.endswith("/" + CURRENT))
        d = self.layers_root / _check_component("asset name", asset)
        if not d.is_dir():
            return []
        return sorted(p.name for p in d.iterdir() if p.is_dir() and (p / CURRENT).is_file())

    def current_files(self, asset: str, table: str, partitions: Optional[Iterable[str]] = None) -> list[Path]:
        """Parquet files of the current versions of ``asset`` (all partitions unless given)."""
        files: list[Path] = []
        for part in partitions if partitions is not None else self.partitions(asset):
            v = self.current(asset, part)
            if v is not None and table in v.manifest["tables"]:
                files.extend(v.table_files(table))
        return files

    def versions(self, asset: str, partition: str) -> list[str]:
        """Complete (sealed) versions of a partition, current or not."""
        if self.remote is not None:
            names = self.remote.list_dir(self._rel(asset, partition))
            return [n for n in names if not n.startswith(".") and n != CURRENT
                    and self.remote.exists(self._rel(asset, partition, n, MANIFEST))]
        d = self.partition_dir(asset, partition)
        if not d.is_dir():
            return []
        return sorted(p.name for p in d.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST).is_file())

    def version_manifest(self, asset: str, partition: str, version: str) -> Optional[dict]:
        """A sealed version's manifest without its data (no download from an object store); None
        when the version does not exist."""
        local = self.partition_dir(asset, partition) / _check_component("version", version) / MANIFEST
        if local.is_file():
            return json.loads(local.read_bytes())
        if self.remote is not None:
            raw = self.remote.read_bytes(self._rel(asset, partition, version, MANIFEST))
            return None if raw is None else json.loads(raw)
        return None

    def sealed_at(self, asset: str, partition: str, version: str) -> Optional[float]:
        """When a version was sealed (epoch seconds): locally the modification time of its
        ``_manifest.json``, in the object store that of its newest object (the manifest is uploaded
        last); None when unknown."""
        _check_component("version", version)
        if self.remote is not None:
            return self.remote.newest_change(self._rel(asset, partition, version))
        try:
            return (self.partition_dir(asset, partition) / version / MANIFEST).stat().st_mtime
        except FileNotFoundError:
            return None

    def tree_changed_at(self, rel: str) -> Optional[float]:
        """The latest change to a tree (epoch seconds): of its objects in the object store, else of
        its local directory (a file added or removed changes it); None when there is none."""
        if self.remote is not None:
            return self.remote.newest_change(self._tree_rel(rel))
        try:
            return (self.home / self._tree_rel(rel)).stat().st_mtime
        except FileNotFoundError:
            return None

    def drop_version(self, asset: str, partition: str, version: str) -> None:
        """Delete one sealed version that is not the current one, in the object store and in the
        local cache (the seal goes first in the store, so a reader never sees half a version)."""
        _check_component("version", version)
        if version == self.current_version_name(asset, partition):
            raise ValueError(f"{asset}/{partition}: version {version} is current; it is not dropped")
        if self.remote is not None:
            self.remote.delete(self._rel(asset, partition, version, MANIFEST))
            self.remote.delete_tree(self._rel(asset, partition, version))
        shutil.rmtree(self.partition_dir(asset, partition) / version, ignore_errors=True)

    def drop_versions(self, asset: str, partition: str, keep_current: bool = True, *,
                      unsealed_after: float = UNSEALED_STALE_SECONDS, clock=time.time) -> list[str]:
        """Delete every version of a partition except the current one (and stale staging data and
        unsealed uploads); with ``keep_current=False`` the whole partition — in the object store
        and in the local cache. Returns the complete versions removed.

        In the object store an unsealed upload is removed only once it is ``unsealed_after``
        seconds old: a younger one may be a live writer's, which would otherwise seal a version
        whose files were deleted under it."""
        current = self.current_version_name(asset, partition) if keep_current else None
        removed: set[str] = set()
        if self.remote is not None:
            rel = self._rel(asset, partition)
            sealed = set(self.versions(asset, partition))
            if not keep_current:
                self.remote.delete(self._rel(asset, partition, CURRENT))
            for name in self.remote.list_dir(rel):
                if name == CURRENT or name == current:
                    continue
                if name not in sealed:
                    changed = self.remote.newest_change(f"{rel}/{name}")
                    if changed is not None and clock() - changed < unsealed_after:
                        continue  # possibly a live writer's upload
                self.remote.delete_tree(f"{rel}/{name}")
                if name in sealed:
                    removed.add(name)
        d = self.partition_dir(asset, partition)
        if d.is_dir():
            remove_abandoned(d)  # a live writer's staging directory stays
            for p in sorted(d.iterdir()):
                if p.is_dir() and p.name != current and not p.name.startswith((".tmp-", ".new-")):
                    shutil.rmtree(p)
                    if not p.name.startswith("."):
                        removed.add(p.name)
            if not keep_current:
                (d / CURRENT).unlink(missing_ok=True)
                shutil.rmtree(d, ignore_errors=True)
        return sorted(removed)
