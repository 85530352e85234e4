"""The ``token_views`` layer of a release: every kept record of every split, tokenized.

Tables ``views`` (one row per view: identity columns, ``cache_key``, token columns,
``label_tokens``) and ``decisions``. Rows are in a fixed order (snapshots sorted, then the curated
layer's record order); the records are cut into chunks of ``task_records`` by that order and
each chunk is tokenized by a task on the release engine (``token_views_tasks``), in bounded
batches, and appended in chunk order: memory does not grow with the release and the bytes depend
neither on the cache, nor on the worker count, chunk size or batch size. Views with the same
``cache_key`` in any release's current version are reused (token columns only), streamed into a
memory-mapped Arrow IPC file beside the partition. Consecutive snapshots' rows sit in their own
part files (a segment: one large snapshot, or a run of small ones cut by key hash); a segment whose
key (every input its bytes depend on) matches one stored in a current, unpurged version is adopted
whole — its files hard-linked, not rebuilt.

Inputs, tables and reuse: docs/tokens.md#token-views-layer
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_assets.domain.core.arrow_columns import run_bounds, sorted_groups
from corpus_assets.domain.core.compute import Engine
from corpus_assets.domain.core.hashing import canonical_json
from corpus_assets.domain.storage.dir_locks import new_staging_dir, unlock
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.tokens.token_views import TokenViewPolicy, cache_key, view_policy_version
from corpus_assets.domain.tokens.token_views_tasks import (
    PLAN_SCHEMA,
    ViewStats,
    ViewTask,
    frozen_tokenizer_of,
    map_in_windows,
    remove_files,
    view_task,
)
from corpus_assets.domain.tokens.tokenizer import FrozenTokenizer
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.layers.registry import CURATED_RECORDS, TOKEN_VIEWS, VIEW_TOKEN_COLUMNS, layer

__all__ = ["TOKEN_VIEWS_LAYER_VERSION", "TOKEN_VIEWS_TABLES", "build_token_views", "frozen_tokenizer_of", "segment_key",
           "segment_starts"]

# 5: segments of consecutive snapshots in their own part files (adoptable by key); 4: token columns
# without a Parquet dictionary; 3: decisions table
TOKEN_VIEWS_LAYER_VERSION = "token-views-layer-5"

TOKEN_VIEWS_TABLES = layer(TOKEN_VIEWS).table_specs()


def _kept_assignments(splits: LayerVersion) -> tuple[dict[str, pa.Table], int]:
    """{snapshot: table of (record_id, split), sorted by record id} of the kept records with a
    split, and the number of kept records without one (quarantined by a split conflict). Columns,
    not a dict per record: the layer plans every record of the release."""
    t = splits.read_table("assignments", columns=["record_id", "snapshot", "kept", "split"])
    t = t.filter(pc.fill_null(t.column("kept"), False))
    unassigned = t.column("split").null_count
    t = t.filter(pc.is_valid(t.column("split"))).select(["snapshot", "record_id", "split"])
    wanted = {snap: g.select(["record_id", "split"]) for snap, g in sorted_groups(t, "snapshot", ["record_id"]).items()}
    return wanted, unassigned


def _current_views_with(store: LayerStore, tokenizer_digest: str, policy_version: str,
                        releases: list[str]):
    """(release, peeked current version) of each of ``releases`` whose token views were made with
    this tokenizer and view policy — from the manifests only (nothing downloaded yet)."""
    for release in releases:
        peeked = store.peek(TOKEN_VIEWS, release)
        if peeked is None:
            continue
        b = peeked.manifest.get("build_spec", {})
        if b.get("tokenizer_digest") == tokenizer_digest and b.get("policy_version") == policy_version:
            yield release, peeked


def _reusable_views(
    store: LayerStore, matching: list[tuple[str, LayerVersion]], keys: pa.Array, spill_dir: Path
) -> Optional[pa.Table]:
    """Rows of earlier token views (``matching``: the releases' current versions made with this
    tokenizer and policy, ``_current_views_with``) whose cache_key is in ``keys``, token columns
    only — spilled to an Arrow IPC file in ``spill_dir`` and returned memory-mapped. The first
    release (in partition order) holding a key supplies all of its rows (both preference views)."""
    wanted = pc.unique(keys)
    seen: list[pa.Array] = []  # keys already supplied by an earlier release
    path = spill_dir / "reusable.arrow"
    writer = None
    try:
        # manifests first: only matching views are fetched
        for release, peeked in matching:
            v = store.open_version(TOKEN_VIEWS, release, peeked.version)
            done = pa.concat_arrays(seen) if seen else None
            # the keys first (one narrow column, tested at once: pc.is_in hashes its value set on
            # every call), then only the matching rows' token columns
            batches = [b.column(0) for b in v.iter_batches("views", batch_size=8192, columns=["cache_key"])]
            positions = np.empty(0, np.int64)
            if batches:
                col = pa.chunked_array(batches)
                m = pc.fill_null(pc.is_in(col, value_set=wanted), False)
                if seen:
                    m = pc.and_(m, pc.invert(pc.fill_null(pc.is_in(col, value_set=done), False)))
                positions = np.flatnonzero(m.to_numpy())
            del batches
            found_here: list[pa.Array] = []
            if positions.size:
                for _, _, t in v.take_rows("views", positions, columns=["cache_key", "variant", *VIEW_TOKEN_COLUMNS]):
                    if writer is None:
                        spill_dir.mkdir(parents=True, exist_ok=True)
                        writer = pa.ipc.new_file(str(path), t.schema)
                    writer.write_table(t)
                    found_here.append(t.column("cache_key").combine_chunks())
            seen += found_here
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return None
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()


@dataclass
class _SnapshotPlan:
    """The wanted records of one snapshot, in curated order: row, id, split, cache key (null: the
    record has no stored digest) — as columns."""

    snapshot: str
    curated: LayerVersion
    rows: np.ndarray  # int64, ascending
    record_ids: pa.Array
    splits: pa.Array
    keys: pa.Array  # string, nullable

    def __len__(self) -> int:
        return len(self.rows)


def _plan_snapshot(snap: str, cur: LayerVersion, ids: pa.Table, tokenizer_digest: str, pver: str) -> _SnapshotPlan:
    """Where every wanted record of ``snap`` is (from the ids and stored digests only: no payload parsing)."""
    records = cur.read_table("records", columns=["record_id", "record_sha256"])  # this snapshot only
    found = pc.index_in(records.column("record_id"), value_set=ids.column("record_id").combine_chunks()).combine_chunks()
    rows = np.flatnonzero(np.asarray(pc.is_valid(found).to_numpy(zero_copy_only=False), dtype=bool)).astype(np.int64)
    if rows.size != ids.num_rows:
        raise ValueError(
            f"{ids.num_rows - rows.size} record(s) of snapshot {snap!r} assigned by splits are missing from its "
            f"current curated_records version {cur.version}; rebuild the release (dedup_clusters, splits)"
        )
    take = pa.array(rows, pa.int64())
    split = ids.column("split").combine_chunks().take(found.take(take))
    shas = records.column("record_sha256").take(take)
    keys = pa.array([cache_key(sha, tokenizer_digest, pver) if sha else None  # sha256 per record: hashlib
                     for b in shas.chunks for sha in b.to_pylist()], pa.string())
    return _SnapshotPlan(snap, cur, rows, records.column("record_id").take(take).combine_chunks(), split, keys)


# Small snapshots (fewer wanted records than a row group) share a segment: one starts where a
# snapshot's key hashes to 0 mod this, so a release over thousands of hourly captures has about
# this many times fewer part files, and a new capture changes only the segment it lands in.
SMALL_SNAPSHOTS_PER_SEGMENT = 16


@dataclass
class _Segment:
    """Consecutive snapshots' part of the layer (one snapshot, or a run of small ones): its own
    part files in both tables, either adopted whole from a stored version built from the same
    inputs (``adopt``) or built from ``plans``."""

    snapshots: list[str]
    keys: list[str]  # each snapshot's segment_key
    records: int
    plans: list = field(default_factory=list)  # _SnapshotPlan of each snapshot, when built
    adopt: Optional[tuple[str, str, dict]] = None  # (release, version, segment entry) to take the files of
    tasks: list = field(default_factory=list)

    @property
    def key(self) -> str:
        """The segment's key: its snapshots' keys in order (one snapshot: that snapshot's key)."""
        if len(self.keys) == 1:
            return self.keys[0]
        return hashlib.sha256("\n".join(self.keys).encode()).hexdigest()


def segment_starts(snapshot: str, records: int, previous_records: Optional[int], rows_per_group: int) -> bool:
    """Whether ``snapshot`` opens a new segment. A snapshot that fills a row group on its own, the
    one after it, and a small snapshot whose key hashes to 0 mod ``SMALL_SNAPSHOTS_PER_SEGMENT``
    do: each boundary depends only on the snapshot and its predecessor, so adding, changing or
    removing one snapshot moves at most the boundaries next to it."""
    if previous_records is None or records >= rows_per_group or previous_records >= rows_per_group:
        return True
    h = int.from_bytes(hashlib.sha256(b"corpus-token-views-segment\0" + snapshot.encode()).digest()[:8], "big")
    return h % SMALL_SNAPSHOTS_PER_SEGMENT == 0


def segment_key(snapshot: str, curated: LayerVersion, ids: pa.Table, tokenizer_digest: str, pver: str,
                store: LayerStore) -> str:
    """What a snapshot's views and decisions files are a function of: its curated version, which of
    its records the release keeps in which split, the tokenizer, the view policy, this layer's
    code and the store's file layout. Equal keys mean byte-identical files (the layer is
    deterministic), so a later build may adopt them instead of writing them again."""
    h = hashlib.sha256(canonical_json({
        "code_version": TOKEN_VIEWS_LAYER_VERSION, "snapshot": snapshot, "curated_version": curated.content_digest,
        "tokenizer_digest": tokenizer_digest, "policy_version": pver,
        "layout": [store.rows_per_group, store.bytes_per_group, store.groups_per_file],
    }))
    # every "<record id>\0<split>\n" in record-id order, hashed straight from an Arrow buffer
    if ids.num_rows:
        lines = pc.binary_join_element_wise(ids.column("record_id").combine_chunks(), "\x00",
                                            ids.column("split").combine_chunks(), "\n", "")
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4)
        h.update(memoryview(lines.buffers()[2])[int(offsets[0]):int(offsets[-1])])
    return h.hexdigest()


def _adoptable_segments(release: str, matching: list[tuple[str, LayerVersion]]) -> dict[str, tuple[str, str, dict]]:
    """{segment key: (release, version, entry)} of the current token views in ``matching`` (this
    release first), from their manifests only. A purged version is skipped: the purge cut its own
    part files (and drops the ``segments`` entry, ``deletion/purge.py``)."""
    found: dict[str, tuple[str, str, dict]] = {}
    for r, peeked in sorted(matching, key=lambda m: m[0] != release):  # stable: partition order after it
        b = peeked.manifest["build_spec"]
        if b.get("code_version") != TOKEN_VIEWS_LAYER_VERSION or b.get("purges"):
            continue
        for entry in peeked.manifest.get("segments", []):
            found.setdefault(entry["key"], (r, peeked.version, entry))
    return found


def build_token_views(
    store: LayerStore,
    release: str,
    policy: TokenViewPolicy,
    *,
    splits: LayerVersion,
    tokenizer: LayerVersion,
    max_records: int = 1024,
    max_chars: int = 4_000_000,
    reuse: bool = True,
    adopt: bool = True,
    progress: Optional[Callable[[int, int, int], None]] = None,
    engine: Optional[Engine] = None,
    task_records: int = 2048,
) -> tuple[LayerVersion, dict]:
    """Write the release's token views; returns the version and a report (per split, per source,
    rejected by reason, records tokenized vs reused vs adopted). Each segment (``segment_starts``)
    gets its own part files: a segment whose inputs are unchanged since a stored build (same key)
    adopts that build's files (``adopt``, with ``reuse``); the others' records are cut into
    chunks of ``task_records`` records run as tasks on ``engine`` (default: in process), reusing
    cached views row by row (``reuse``); ``max_records`` / ``max_chars`` bound one ``encode_batch``
    inside a task. ``progress(records_done, records_total, tokens_done)`` is called after every
    chunk or adopted segment."""
    if task_records < 1:
        raise ValueError(f"task_records must be >= 1, got {task_records}")
    engine = engine or Engine()
    tok = frozen_tokenizer_of(tokenizer)
    pver = view_policy_version(policy)
    wanted, unassigned = _kept_assignments(splits)
    total = sum(v.num_rows for v in wanted.values())
    # one scan of the manifests serves both the segment adoption and the row-by-row reuse
    matching = list(_current_views_with(store, tok.digest, pver, store.partitions(TOKEN_VIEWS))) if reuse else []
    adoptable = _adoptable_segments(release, matching) if adopt else {}
    segments: list[_Segment] = []
    curated: dict[str, LayerVersion] = {}
    previous: Optional[int] = None
    for snap in sorted(wanted):
        cur = curated[snap] = store.require_current(CURATED_RECORDS, snap)
        n = wanted[snap].num_rows
        if segment_starts(snap, n, previous, store.rows_per_group):
            segments.append(_Segment([], [], 0))
        seg = segments[-1]
        seg.snapshots.append(snap)
        seg.keys.append(segment_key(snap, cur, wanted[snap], tok.digest, pver, store))
        seg.records += n
        previous = n
    for seg in segments:
        seg.adopt = adoptable.get(seg.key)
        if seg.adopt is None:
            seg.plans = [_plan_snapshot(snap, curated[snap], wanted[snap], tok.digest, pver) for snap in seg.snapshots]
    del wanted, curated

    partition = store.partition_dir(TOKEN_VIEWS, release)
    partition.mkdir(parents=True, exist_ok=True)
    for stale in partition.glob(".reuse-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a crashed build's spill file (older builds)
    # the spill and the tasks' files, locked by this live build (a concurrent build's cleanup skips it)
    work, lock = new_staging_dir(partition, prefix=".tmp-views-")
    try:
        index: Optional[_CachedRows] = None
        reusable = None
        if reuse:
            plan_keys = [p.keys for s in segments for p in s.plans if len(p)]
            keys = pc.drop_null(pa.concat_arrays(plan_keys)) if plan_keys else pa.array([], pa.string())
            cached = _reusable_views(store, matching, keys, work) if len(keys) else None
            if cached is not None:
                reusable = str(work / "reusable.arrow")
                index = _CachedRows(cached.column("cache_key"))
                cached = None
        _write_task_plans(segments, index, work, tok, tokenizer, policy, reusable, task_records, max_records, max_chars)
        del index
        return _write_views(store, release, policy, tok, pver, segments, unassigned, total, engine,
                            splits=splits, tokenizer=tokenizer, progress=progress)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        unlock(lock)


class _CachedRows:
    """cache key -> the rows of the reusable-views spill holding its views (ascending), for many
    keys at once: one sort of the spill's keys, then a lookup per plan chunk."""

    def __init__(self, spill_keys) -> None:
        keys = spill_keys.combine_chunks() if isinstance(spill_keys, pa.ChunkedArray) else spill_keys
        t = pa.table({"k": keys, "i": pa.array(np.arange(len(keys), dtype=np.int64))}).sort_by([("k", "ascending"), ("i", "ascending")])
        self.positions = np.asarray(t.column("i").to_numpy(), dtype=np.int64)
        bounds = run_bounds(t.column("k"))
        self.starts, self.ends = bounds[:-1], bounds[1:]
        self.unique = t.column("k").combine_chunks().take(pa.array(self.starts))  # Arrow: no str per key

    def lists(self, keys: pa.Array) -> pa.Array:
        """For each key, the list of its spill rows (null: no key, or not in the spill)."""
        at = pc.index_in(keys, value_set=self.unique)
        valid = np.asarray(pc.is_valid(at).to_numpy(zero_copy_only=False), dtype=bool)
        u = np.asarray(pc.fill_null(at, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        lengths = np.where(valid, self.ends[u] - self.starts[u], 0) if len(u) else np.zeros(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        first = np.repeat(np.where(valid, self.starts[u], 0), lengths)
        within = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1].astype(np.int64), lengths)
        values = pa.array(self.positions[first + within] if first.size else np.zeros(0, np.int64), pa.int64())
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, mask=pa.array(~valid))


def _write_task_plans(segments: list[_Segment], index: Optional[_CachedRows], work: Path, tok: FrozenTokenizer,
                      tokenizer: LayerVersion, policy: TokenViewPolicy, reusable: Optional[str], task_records: int,
                      max_records: int, max_chars: int) -> None:
    """One plan file per chunk of ``task_records`` records of a built snapshot, in record order."""
    n = 0
    for seg in segments:
        for p in seg.plans:
            for lo in range(0, len(p), task_records):
                hi = min(lo + task_records, len(p))
                name = work / f"task-{n:06d}"
                n += 1
                keys = p.keys.slice(lo, hi - lo)
                table = pa.table({
                    "row": pa.array(p.rows[lo:hi]),
                    "record_id": p.record_ids.slice(lo, hi - lo),
                    "split": p.splits.slice(lo, hi - lo),
                    "cached": index.lists(keys) if index is not None else pa.nulls(hi - lo, pa.list_(pa.int64())),
                }, schema=PLAN_SCHEMA)
                with pa.ipc.new_file(f"{name}.plan.arrow", PLAN_SCHEMA) as w:
                    w.write_table(table)
                seg.tasks.append(ViewTask(plan=f"{name}.plan.arrow", out=str(name), snapshot=p.snapshot, curated=p.curated,
                                          tokenizer=tokenizer, policy=policy, reusable=reusable, max_records=max_records,
                                          max_chars=max_chars))
        seg.plans = []  # the plan files hold them now


def _read_ipc(path: str) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(path)).read_all()


_SEGMENT_TABLES = ("views", DECISIONS_TABLE)


def _write_views(store: LayerStore, release: str, policy: TokenViewPolicy, tok: FrozenTokenizer, pver: str,
                 segments: list[_Segment], unassigned: int, total: int, engine: Engine, *,
                 splits: LayerVersion, tokenizer: LayerVersion,
                 progress: Optional[Callable[[int, int, int], None]]) -> tuple[LayerVersion, dict]:
    stats = ViewStats()
    build_spec = {
        "code_version": TOKEN_VIEWS_LAYER_VERSION,
        "tokenizer_digest": tok.digest,
        "policy_version": pver,
        "policy": policy.model_dump(mode="json"),
        "splits_version": splits.content_digest,
        "tokenizer_version": tokenizer.content_digest,
    }
    done = 0
    entries: list[dict] = []
    tasks = [t for seg in segments for t in seg.tasks]
    with store.new_version(TOKEN_VIEWS, release, TOKEN_VIEWS_TABLES, build_spec) as w:
        # results arrive in task order whatever finished first; one window of files on disk at a time
        results = map_in_windows(engine, view_task, tasks, window=max(4, 4 * engine.workers), name="token-views")
        for seg in segments:
            before = {t: (len(w.table(t).files), w.table(t).rows) for t in _SEGMENT_TABLES}
            if seg.adopt is not None:
                seg_stats = _adopt_segment(store, w, seg)
            else:
                seg_stats = ViewStats()
                for _ in seg.tasks:
                    res = next(results)
                    if res.views is not None:
                        w.write("views", _read_ipc(res.views))
                    w.write(DECISIONS_TABLE, _read_ipc(res.decisions))
                    remove_files(res.views, res.decisions)
                    seg_stats.merge(res.stats)
                    done += res.records
                    if progress is not None:
                        progress(done, total, stats.tokens + seg_stats.tokens)
            tables = {}
            for t in _SEGMENT_TABLES:
                w.table(t).end_file()
                n_files, n_rows = before[t]
                tables[t] = {"files": [p.name for p in w.table(t).files[n_files:]], "rows": w.table(t).rows - n_rows}
            entries.append({"snapshots": seg.snapshots, "key": seg.key, "records": seg.records, "tables": tables,
                            "stats": seg_stats.to_json()})
            stats.merge(seg_stats)
            if seg.adopt is not None:
                done += seg.records
                if progress is not None:
                    progress(done, total, stats.tokens)
        if next(results, None) is not None:
            raise RuntimeError("token views: more task results than planned chunks")
        report = _report(stats, tok, pver, total, unassigned)
        counts = ("tokenized_records", "reused_records", "adopted_records")
        version = w.commit(extra_manifest={"report": {k: v for k, v in report.items() if k not in counts},
                                           "segments": entries})
    return version, report


def _adopt_segment(store: LayerStore, w, seg: _Segment) -> ViewStats:
    """Link a stored build's files of this segment into the new version; its counts come along."""
    release, version, entry = seg.adopt
    src = store.open_version(TOKEN_VIEWS, release, version)
    for t in _SEGMENT_TABLES:
        listed = {f["path"]: f for f in src.manifest["tables"][t]["files"]}
        files = entry["tables"][t]["files"]
        rows = [pq.ParquetFile(src.root / t / name).metadata.num_rows for name in files]
        if sum(rows) != entry["tables"][t]["rows"]:
            raise ValueError(f"token views {release}@{version}: segment {seg.snapshots!r} of {t} lists "
                             f"{entry['tables'][t]['rows']} rows, its files hold {sum(rows)}")
        for name, n in zip(files, rows):
            f = listed[f"{t}/{name}"]
            w.table(t).adopt(src.root / t / name, rows=n, sha256=f["sha256"], size=f["bytes"])
    stats = ViewStats.from_json(entry["stats"])
    stats.adopted_records = seg.records
    return stats


def _report(stats: ViewStats, tok: FrozenTokenizer, pver: str, total: int, unassigned: int) -> dict:
    tokens = sum(s["tokens"] for s in stats.splits.values())
    labels = sum(s["label_tokens"] for s in stats.splits.values())
    return {
        "records": total,
        "records_with_views": sum(s["records"] for s in stats.splits.values()),
        "rejected": dict(sorted(stats.rejected.items())),
        "quarantined_by_split_conflict": unassigned,
        "views": sum(s["views"] for s in stats.splits.values()),
        "tokens": tokens,
        "label_tokens": labels,
        "label_token_rate": labels / tokens if tokens else 0.0,
        "splits": {k: dict(v) for k, v in sorted(stats.splits.items())},
        "sources": {k: dict(v) for k, v in sorted(stats.sources.items())},
        "tokenizer_digest": tok.digest,
        "vocab_size": tok.vocab_size,
        "policy_version": pver,
        "tokenized_records": stats.tokenized_records,
        "reused_records": stats.reused_records,
        "adopted_records": stats.adopted_records,
    }
