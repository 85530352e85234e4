"""The ``token_views`` layer of a release: every kept record of every split, tokenized.

Tables ``views`` (one row per view: identity columns, ``cache_key``, token columns,
``label_tokens``) and ``decisions``. Rows are in a fixed order and tokenized in bounded batches,
so memory does not grow with the release and the bytes do not depend on the cache. Views with
the same ``cache_key`` in any release's current version are reused (token columns only),
streamed into a memory-mapped Arrow IPC file beside the partition.

Inputs, tables and reuse: docs/tokens.md#token-views-layer
"""

from __future__ import annotations

import shutil
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.canonical.records import Record, record_digest, row_to_record
from corpus_assets.domain.tokens.token_views import (
    Rejected,
    TokenView,
    TokenViewPolicy,
    bounded_chunks,
    cache_key,
    payload_chars,
    token_views,
    view_policy_version,
    views_to_table,
)
from corpus_assets.domain.tokens.tokenizer import FrozenTokenizer, TokenizerSpec, thaw_tokenizer
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE, decision
from corpus_assets.domain.layers.registry import CURATED_RECORDS, TOKEN_VIEWS, VIEWS_SCHEMA, VIEW_TOKEN_COLUMNS, layer

TOKEN_VIEWS_LAYER_VERSION = "token-views-layer-3"  # 3: the decisions table replaces ``rejected``

TOKEN_VIEWS_TABLES = layer(TOKEN_VIEWS).table_specs()


def frozen_tokenizer_of(tokenizer_version: LayerVersion) -> FrozenTokenizer:
    """The tokenizer stored in a ``tokenizer`` layer version, re-frozen and checked against its digest."""
    row = tokenizer_version.read_table("tokenizer").to_pylist()[0]
    spec = TokenizerSpec.model_validate(tokenizer_version.manifest["tokenizer_spec"])
    return thaw_tokenizer(row["tokenizer_json"], spec, expected_digest=row["digest"])


@dataclass
class _Stats:
    splits: dict = field(default_factory=dict)  # split -> Counter(records, views, tokens, label_tokens)
    sources: dict = field(default_factory=dict)  # source -> Counter(records, tokens, label_tokens)
    rejected: Counter = field(default_factory=Counter)
    tokenized_records: int = 0
    reused_records: int = 0

    def add_view(self, split: str, source: str, n: int, labels: int, first_of_record: bool) -> None:
        s = self.splits.setdefault(split, Counter())
        src = self.sources.setdefault(source, Counter())
        s["views"] += 1
        s["tokens"] += n
        s["label_tokens"] += labels
        src["tokens"] += n
        src["label_tokens"] += labels
        if first_of_record:
            s["records"] += 1
            src["records"] += 1


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


def _iter_records(store: LayerStore, wanted: dict[str, dict[str, str]]) -> Iterator[tuple[Record, str]]:
    for snap in sorted(wanted):
        ids = wanted[snap]
        cur = store.require_current(CURATED_RECORDS, snap)
        found = 0
        for b in cur.iter_batches("records", batch_size=1024):
            for row in b.to_pylist():
                split = ids.get(row["record_id"])
                if split is not None:
                    found += 1
                    yield row_to_record(row), split
        if found != len(ids):
            raise ValueError(
                f"{len(ids) - found} record(s) of snapshot {snap!r} assigned by splits are missing from its "
                f"current curated_records version {cur.version}; rebuild the release (dedup_clusters, splits)"
            )


def _record_keys(store: LayerStore, wanted: dict[str, dict[str, str]], tokenizer_digest: str, pver: str) -> set[str]:
    """Cache keys of the wanted records, from the stored record digests (no payload parsing)."""
    keys: set[str] = set()
    for snap in sorted(wanted):
        ids = wanted[snap]
        cur = store.require_current(CURATED_RECORDS, snap)
        for b in cur.iter_batches("records", batch_size=8192, columns=["record_id", "record_sha256"]):
            for rid, sha in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
                if rid in ids and sha:
                    keys.add(cache_key(sha, tokenizer_digest, pver))
    return keys


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
) -> tuple[LayerVersion, dict]:
    """Write the release's token views; returns the version and a report (per split, per source,
    rejected by reason, records tokenized vs reused). ``progress(records_done, records_total,
    tokens_done)`` is called after every batch."""
    tok = frozen_tokenizer_of(tokenizer)
    pver = view_policy_version(policy)
    wanted, unassigned = _kept_assignments(splits)
    total = sum(len(v) for v in wanted.values())

    cached = None
    index: dict[str, list[int]] = {}
    partition = store.partition_dir(TOKEN_VIEWS, release)
    for stale in partition.glob(".reuse-*") if partition.is_dir() else []:
        shutil.rmtree(stale, ignore_errors=True)  # a crashed build's spill file
    spill = partition / f".reuse-{uuid.uuid4().hex}"
    try:
        if reuse:
            keys = _record_keys(store, wanted, tok.digest, pver)
            cached = _reusable_views(store, tok.digest, pver, keys, spill) if keys else None
            if cached is not None:
                for i, k in enumerate(cached.column("cache_key").to_pylist()):
                    index.setdefault(k, []).append(i)
        return _write_views(store, release, policy, tok, pver, wanted, unassigned, total, cached, index,
                            splits=splits, tokenizer=tokenizer, max_records=max_records, max_chars=max_chars,
                            progress=progress)
    finally:
        cached = None
        shutil.rmtree(spill, ignore_errors=True)


def _write_views(store: LayerStore, release: str, policy: TokenViewPolicy, tok: FrozenTokenizer, pver: str,
                 wanted: dict, unassigned: int, total: int, cached: Optional[pa.Table], index: dict, *,
                 splits: LayerVersion, tokenizer: LayerVersion, max_records: int, max_chars: int,
                 progress: Optional[Callable[[int, int, int], None]]) -> tuple[LayerVersion, dict]:

    stats = _Stats()
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
        chunks = bounded_chunks(_iter_records(store, wanted), lambda item: payload_chars(item[0]),
                                max_records=max_records, max_chars=max_chars)
        for chunk in chunks:
            keys = [_key(r, tok, pver) for r, _ in chunk]
            misses = [r for (r, _), key in zip(chunk, keys) if key not in index]
            fresh: dict[str, list] = {}
            if misses:
                for item in token_views(misses, tok, policy):
                    fresh.setdefault(item.record_id, []).append(item)
            parts: list[pa.Table] = []
            decided: list[dict] = []
            for (record, split), key in zip(chunk, keys):
                about = dict(policy_version=pver, record_id=record.record_id, source_id=record.source_id,
                             snapshot=record.snapshot, split=split, schema_type=record.schema_type,
                             domain=record.domain, lang=record.lang)
                if key in index:
                    stats.reused_records += 1
                    rows = _cached_rows(cached, index[key])
                    parts.append(_with_identity(rows.drop_columns(["cache_key"]), record, split, key))
                    _count(stats, split, record.source_id, rows)
                    # the same decision as tokenizing it here: a cache hit never changes a byte
                    decided.append(decision(stage="token_views", action="accept",
                                            tokens_out=int(pc.sum(rows.column("n_tokens")).as_py()), **about))
                    continue
                stats.tokenized_records += 1
                items = fresh[record.record_id]
                if isinstance(items[0], Rejected):
                    rej = items[0]
                    stats.rejected[rej.reason] += 1
                    decided.append(decision(stage="token_views", action="reject", reason=rej.reason, detail=rej.detail,
                                            tokens_out=0, **about))
                    continue
                table = _views_table([v for v in items if isinstance(v, TokenView)])
                parts.append(_with_identity(table.drop_columns(["cache_key", "record_id"]), record, split, key))
                _count(stats, split, record.source_id, table)
                decided.append(decision(stage="token_views", action="accept",
                                        tokens_out=int(pc.sum(table.column("n_tokens")).as_py()), **about))
            if parts:
                w.write("views", pa.concat_tables(parts).combine_chunks())  # one batch, not one per record
            w.write(DECISIONS_TABLE, decided)
            done += len(chunk)
            if progress is not None:
                progress(done, total, sum(s["tokens"] for s in stats.splits.values()))
        report = _report(stats, tok, pver, total, unassigned)
        version = w.commit(extra_manifest={"report": {k: v for k, v in report.items() if k not in ("tokenized_records", "reused_records")}})
    return version, report


def _cached_rows(cached: pa.Table, rows: list[int]) -> pa.Table:
    """One record's cached views: a zero-copy slice when they are adjacent (the spill writes a
    record's views together), else a take — which concatenates every chunk of ``cached``, i.e.
    costs the whole spill file per call (issue 18: it made a cache hit slower than tokenizing)."""
    start = rows[0]
    if rows == list(range(start, start + len(rows))):
        return cached.slice(start, len(rows))
    return cached.take(pa.array(rows, pa.int64()))


def _key(record: Record, tok: FrozenTokenizer, pver: str) -> str:
    return cache_key(record.record_sha256 or record_digest(record), tok.digest, pver)


def _views_table(views: list[TokenView]) -> pa.Table:
    t = views_to_table(views)
    labels = pa.array([int(v.loss_mask.sum()) for v in views], pa.int32())
    return t.append_column("label_tokens", labels)


def _with_identity(tokens: pa.Table, record: Record, split: str, key: str) -> pa.Table:
    n = tokens.num_rows
    cols = {
        "record_id": pa.array([record.record_id] * n, pa.string()),
        "variant": tokens.column("variant"),
        "split": pa.array([split] * n, pa.string()),
        "source_id": pa.array([record.source_id] * n, pa.string()),
        "snapshot": pa.array([record.snapshot] * n, pa.string()),
        "domain": pa.array([record.domain] * n, pa.string()),
        "cache_key": pa.array([key] * n, pa.string()),
    }
    for name in VIEW_TOKEN_COLUMNS:
        cols[name] = tokens.column(name)
    return pa.table(cols, schema=VIEWS_SCHEMA)


def _count(stats: _Stats, split: str, source: str, table: pa.Table) -> None:
    ns = table.column("n_tokens").to_pylist()
    ls = table.column("label_tokens").to_pylist()
    for i, (n, lab) in enumerate(zip(ns, ls)):
        stats.add_view(split, source, n, lab, i == 0)


def _report(stats: _Stats, tok: FrozenTokenizer, pver: str, total: int, unassigned: int) -> dict:
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
