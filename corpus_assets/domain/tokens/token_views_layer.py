"""The ``token_views`` layer of a release: every kept record of every split, tokenized.

Tables ``views`` (one row per view: identity columns, ``cache_key``, token columns,
``label_tokens``) and ``decisions``. Rows are in a fixed order (snapshots sorted, then the curated
layer's record order); the records are cut into chunks of ``task_records`` by that order and
each chunk is tokenized by a task on the release engine (``token_views_tasks``), in bounded
batches, and appended in chunk order: memory does not grow with the release and the bytes depend
neither on the cache, nor on the worker count, chunk size or batch size. Views with the same
``cache_key`` in any release's current version are reused (token columns only), streamed into a
memory-mapped Arrow IPC file beside the partition.

Inputs, tables and reuse: docs/tokens.md#token-views-layer
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.core.compute import Engine
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

__all__ = ["TOKEN_VIEWS_LAYER_VERSION", "TOKEN_VIEWS_TABLES", "build_token_views", "frozen_tokenizer_of"]

TOKEN_VIEWS_LAYER_VERSION = "token-views-layer-4"  # 4: token columns without a Parquet dictionary (3: decisions table)

TOKEN_VIEWS_TABLES = layer(TOKEN_VIEWS).table_specs()


def _kept_assignments(splits: LayerVersion) -> tuple[dict[str, dict[str, str]], int]:
    """{snapshot: {record_id: split}} of the kept records with a split, and the number of kept
    records without one (quarantined by a split conflict)."""
    wanted: dict[str, dict[str, str]] = {}
    unassigned = 0
    for b in splits.iter_batches("assignments", batch_size=8192, columns=["record_id", "snapshot", "kept", "split"]):
        for rid, snap, kept, split in zip(*(b.column(i).to_pylist() for i in range(4))):
            if not kept:
                continue
            if split is None:
                unassigned += 1
                continue
            wanted.setdefault(snap, {})[rid] = split
    return wanted, unassigned


def _reusable_views(
    store: LayerStore, tokenizer_digest: str, policy_version: str, keys: set[str], spill_dir: Path
) -> Optional[pa.Table]:
    """Rows of earlier token views (any release) whose cache_key is in ``keys``, token columns
    only — spilled to an Arrow IPC file in ``spill_dir`` and returned memory-mapped. The first
    release (in partition order) holding a key supplies all of its rows (both preference views)."""
    wanted = pa.array(sorted(keys), pa.string())
    seen: set[str] = set()
    path = spill_dir / "reusable.arrow"
    writer = None
    try:
        for release in store.partitions(TOKEN_VIEWS):
            peeked = store.peek(TOKEN_VIEWS, release)  # manifest first: only matching views are fetched
            if peeked is None:
                continue
            b = peeked.manifest.get("build_spec", {})
            if b.get("tokenizer_digest") != tokenizer_digest or b.get("policy_version") != policy_version:
                continue
            v = store.open_version(TOKEN_VIEWS, release, peeked.version)
            done = pa.array(sorted(seen), pa.string())
            found_here: set[str] = set()
            for batch in v.iter_batches("views", batch_size=2048, columns=["cache_key", "variant", *VIEW_TOKEN_COLUMNS]):
                t = pa.Table.from_batches([batch])
                t = t.filter(pc.is_in(t.column("cache_key"), value_set=wanted))
                if seen:
                    t = t.filter(pc.invert(pc.is_in(t.column("cache_key"), value_set=done)))
                if t.num_rows:
                    if writer is None:
                        spill_dir.mkdir(parents=True, exist_ok=True)
                        writer = pa.ipc.new_file(str(path), t.schema)
                    writer.write_table(t)
                    found_here.update(t.column("cache_key").to_pylist())
            seen |= found_here
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return None
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()


class _SnapshotPlan:
    """The wanted records of one snapshot, in curated order: row, id, split, cache key (or None)."""

    def __init__(self, snapshot: str, curated: LayerVersion) -> None:
        self.snapshot, self.curated = snapshot, curated
        self.rows: list[int] = []
        self.record_ids: list[str] = []
        self.splits: list[str] = []
        self.keys: list[Optional[str]] = []


def _plan_records(store: LayerStore, wanted: dict[str, dict[str, str]], tokenizer_digest: str,
                  pver: str) -> list[_SnapshotPlan]:
    """Where every wanted record is (from the ids and stored digests only: no payload parsing)."""
    plans = []
    for snap in sorted(wanted):
        ids = wanted[snap]
        cur = store.require_current(CURATED_RECORDS, snap)
        plan = _SnapshotPlan(snap, cur)
        row = 0
        for b in cur.iter_batches("records", batch_size=8192, columns=["record_id", "record_sha256"]):
            for rid, sha in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
                split = ids.get(rid)
                if split is not None:
                    plan.rows.append(row)
                    plan.record_ids.append(rid)
                    plan.splits.append(split)
                    plan.keys.append(cache_key(sha, tokenizer_digest, pver) if sha else None)
                row += 1
        if len(plan.rows) != len(ids):
            raise ValueError(
                f"{len(ids) - len(plan.rows)} record(s) of snapshot {snap!r} assigned by splits are missing from its "
                f"current curated_records version {cur.version}; rebuild the release (dedup_clusters, splits)"
            )
        plans.append(plan)
    return plans


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
    progress: Optional[Callable[[int, int, int], None]] = None,
    engine: Optional[Engine] = None,
    task_records: int = 2048,
) -> tuple[LayerVersion, dict]:
    """Write the release's token views; returns the version and a report (per split, per source,
    rejected by reason, records tokenized vs reused). Chunks of ``task_records`` records run as
    tasks on ``engine`` (default: in process); ``max_records`` / ``max_chars`` bound one
    ``encode_batch`` inside a task. ``progress(records_done, records_total, tokens_done)`` is
    called after every chunk."""
    if task_records < 1:
        raise ValueError(f"task_records must be >= 1, got {task_records}")
    engine = engine or Engine()
    tok = frozen_tokenizer_of(tokenizer)
    pver = view_policy_version(policy)
    wanted, unassigned = _kept_assignments(splits)
    total = sum(len(v) for v in wanted.values())
    plans = _plan_records(store, wanted, tok.digest, pver)
    del wanted

    partition = store.partition_dir(TOKEN_VIEWS, release)
    partition.mkdir(parents=True, exist_ok=True)
    for stale in partition.glob(".reuse-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a crashed build's spill file (older builds)
    # the spill and the tasks' files, locked by this live build (a concurrent build's cleanup skips it)
    work, lock = new_staging_dir(partition, prefix=".tmp-views-")
    try:
        index: dict[str, list[int]] = {}
        reusable = None
        if reuse:
            keys = {k for p in plans for k in p.keys if k is not None}
            cached = _reusable_views(store, tok.digest, pver, keys, work) if keys else None
            if cached is not None:
                reusable = str(work / "reusable.arrow")
                for i, k in enumerate(cached.column("cache_key").to_pylist()):
                    index.setdefault(k, []).append(i)
                cached = None
        tasks = _write_task_plans(plans, index, work, tok, tokenizer, policy, reusable, task_records,
                                  max_records, max_chars)
        del plans, index
        return _write_views(store, release, policy, tok, pver, tasks, unassigned, total, engine,
                            splits=splits, tokenizer=tokenizer, progress=progress)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        unlock(lock)


def _write_task_plans(plans: list[_SnapshotPlan], index: dict[str, list[int]], work: Path, tok: FrozenTokenizer,
                      tokenizer: LayerVersion, policy: TokenViewPolicy, reusable: Optional[str], task_records: int,
                      max_records: int, max_chars: int) -> list[ViewTask]:
    """One plan file per chunk of ``task_records`` records of a snapshot, in record order."""
    tasks: list[ViewTask] = []
    for p in plans:
        for lo in range(0, len(p.rows), task_records):
            hi = min(lo + task_records, len(p.rows))
            name = work / f"task-{len(tasks):06d}"
            table = pa.table({
                "row": pa.array(np.asarray(p.rows[lo:hi], np.int64)),
                "record_id": pa.array(p.record_ids[lo:hi], pa.string()),
                "split": pa.array(p.splits[lo:hi], pa.string()),
                "cached": pa.array([index.get(k) if k is not None else None for k in p.keys[lo:hi]],
                                   pa.list_(pa.int64())),
            }, schema=PLAN_SCHEMA)
            with pa.ipc.new_file(f"{name}.plan.arrow", PLAN_SCHEMA) as w:
                w.write_table(table)
            tasks.append(ViewTask(plan=f"{name}.plan.arrow", out=str(name), snapshot=p.snapshot, curated=p.curated,
                                  tokenizer=tokenizer, policy=policy, reusable=reusable, max_records=max_records,
                                  max_chars=max_chars))
    return tasks


def _read_ipc(path: str) -> pa.Table:
    return pa.ipc.open_file(pa.memory_map(path)).read_all()


def _write_views(store: LayerStore, release: str, policy: TokenViewPolicy, tok: FrozenTokenizer, pver: str,
                 tasks: list[ViewTask], unassigned: int, total: int, engine: Engine, *,
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
    with store.new_version(TOKEN_VIEWS, release, TOKEN_VIEWS_TABLES, build_spec) as w:
        # results arrive in task order whatever finished first; one window of files on disk at a time
        for res in map_in_windows(engine, view_task, tasks, window=max(4, 4 * engine.workers), name="token-views"):
            if res.views is not None:
                w.write("views", _read_ipc(res.views))
            w.write(DECISIONS_TABLE, _read_ipc(res.decisions))
            remove_files(res.views, res.decisions)
            stats.merge(res.stats)
            done += res.records
            if progress is not None:
                progress(done, total, stats.tokens)
        report = _report(stats, tok, pver, total, unassigned)
        version = w.commit(extra_manifest={"report": {k: v for k, v in report.items() if k not in ("tokenized_records", "reused_records")}})
    return version, report


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
    }
