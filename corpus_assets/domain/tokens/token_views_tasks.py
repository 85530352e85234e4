"""One chunk of a release's token views, built as a task on the release engine (``core/compute.py``).

``token_views_layer.build_token_views`` cuts the record stream (snapshots sorted, then the
curated layer's record order) into chunks of ``task_records`` records — boundaries depend on the
records only, never on the worker count — and writes each chunk's plan (curated row, split, the
rows of a reusable view) to a file. :func:`view_task` (top level, one small picklable argument)
reads the chunk's records, tokenizes the cache misses in bounded batches and writes its ``views``
and ``decisions`` rows as Arrow IPC files; the layer appends the files in task order. Every row
depends on its record alone, and the layer store cuts row groups from the rows, so the version
is byte-identical whatever the worker count, chunk size or batch size.

Why and how: docs/tokens.md#parallel-build
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_assets.domain.canonical.records import Record, record_digest, row_to_record
from corpus_assets.domain.layers.decisions import DECISIONS_SCHEMA, decision
from corpus_assets.domain.layers.registry import VIEWS_SCHEMA, VIEW_TOKEN_COLUMNS
from corpus_assets.domain.storage.layer_store import LayerVersion
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

PLAN_SCHEMA = pa.schema([
    ("row", pa.int64()),  # the record's row in its snapshot's curated ``records`` table
    ("record_id", pa.string()),
    ("split", pa.string()),
    ("cached", pa.list_(pa.int64())),  # rows of the reusable-views spill holding its views; null = tokenize
])


def frozen_tokenizer_of(tokenizer_version: LayerVersion) -> FrozenTokenizer:
    """The tokenizer stored in a ``tokenizer`` layer version, re-frozen and checked against its digest."""
    row = tokenizer_version.read_table("tokenizer").to_pylist()[0]
    spec = TokenizerSpec.model_validate(tokenizer_version.manifest["tokenizer_spec"])
    return thaw_tokenizer(row["tokenizer_json"], spec, expected_digest=row["digest"])


@dataclass
class ViewStats:
    """Counts of a build (or of one task: ``merge`` adds them up, order-independent)."""

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

    def merge(self, other: "ViewStats") -> None:
        for mine, theirs in ((self.splits, other.splits), (self.sources, other.sources)):
            for k, c in theirs.items():
                mine.setdefault(k, Counter()).update(c)
        self.rejected.update(other.rejected)
        self.tokenized_records += other.tokenized_records
        self.reused_records += other.reused_records

    @property
    def tokens(self) -> int:
        return sum(s["tokens"] for s in self.splits.values())


@dataclass(frozen=True)
class ViewTask:
    """What one task needs, all small: file paths and versions (their manifests), never rows."""

    plan: str  # Arrow IPC file of PLAN_SCHEMA, rows ascending
    out: str  # prefix of the files this task writes (``<out>.views.arrow``, ``<out>.decisions.arrow``)
    snapshot: str
    curated: LayerVersion
    tokenizer: LayerVersion
    policy: TokenViewPolicy
    reusable: Optional[str]  # the reusable-views spill (memory-mapped), or None
    max_records: int
    max_chars: int


@dataclass
class ViewTaskResult:
    views: Optional[str]  # IPC file of VIEWS_SCHEMA rows, None when the chunk has no views
    decisions: str  # IPC file of DECISIONS_SCHEMA rows, one per record
    records: int
    stats: ViewStats


_cache_lock = threading.Lock()
_TOKENIZERS: dict[str, FrozenTokenizer] = {}  # per process: a worker thaws each tokenizer once


def _tokenizer(version: LayerVersion) -> FrozenTokenizer:
    with _cache_lock:
        tok = _TOKENIZERS.get(version.content_digest)
        if tok is None:
            tok = _TOKENIZERS[version.content_digest] = frozen_tokenizer_of(version)
        return tok


def _read_rows(version: LayerVersion, rows: np.ndarray) -> Iterator[dict]:
    """The ``records`` rows at ``rows`` (ascending), reading only the row groups that hold them."""
    i, base, n = 0, 0, rows.shape[0]
    for p in version.table_files("records"):
        pf = pq.ParquetFile(p)
        for g in range(pf.num_row_groups):
            size = pf.metadata.row_group(g).num_rows
            j = int(np.searchsorted(rows, base + size, side="left"))
            if j > i:
                group = pf.read_row_group(g)
                yield from group.take(pa.array(rows[i:j] - base, pa.int64())).to_pylist()
                i = j
            base += size
            if i >= n:
                return
    if i < n:
        raise ValueError(f"{version.asset}/{version.partition}@{version.version}: rows past the end of records")


def view_task(task: ViewTask) -> ViewTaskResult:
    """Tokenize one chunk (cache misses, in bounded batches), write its views and decisions."""
    tok = _tokenizer(task.tokenizer)
    pver = view_policy_version(task.policy)
    plan = pa.ipc.open_file(pa.memory_map(task.plan)).read_all()
    hits = plan.column("cached").to_pylist()
    # mapped per task (zero-copy), never kept: the build deletes the spill when it is done
    cached = (pa.ipc.open_file(pa.memory_map(task.reusable)).read_all()
              if task.reusable and any(h is not None for h in hits) else None)
    expected = plan.column("record_id").to_pylist()
    splits = plan.column("split").to_pylist()

    def items() -> Iterator[tuple[Record, str, Optional[list]]]:
        for k, row in enumerate(_read_rows(task.curated, plan.column("row").to_numpy())):
            if row["record_id"] != expected[k]:
                raise ValueError(f"curated_records of {task.snapshot!r}: row {k} is {row['record_id']!r}, "
                                 f"planned {expected[k]!r}")
            yield row_to_record(row), splits[k], hits[k]

    stats = ViewStats()
    views_path, dec_path = f"{task.out}.views.arrow", f"{task.out}.decisions.arrow"
    vw = None
    n = 0
    with pa.OSFile(dec_path, "wb") as dsink, pa.ipc.new_file(dsink, DECISIONS_SCHEMA) as dw:
        try:
            for chunk in bounded_chunks(items(), lambda it: payload_chars(it[0]),
                                        max_records=task.max_records, max_chars=task.max_chars):
                parts, decided = _chunk_rows(chunk, tok, pver, task.policy, cached, stats)
                if parts:
                    if vw is None:
                        vw = pa.ipc.new_file(views_path, VIEWS_SCHEMA)
                    # one record batch per encode batch, not per record: the layer store sizes rows per batch
                    vw.write_table(pa.concat_tables(parts).combine_chunks())
                dw.write_table(pa.Table.from_pylist(decided, schema=DECISIONS_SCHEMA))
                n += len(chunk)
        finally:
            if vw is not None:
                vw.close()
    return ViewTaskResult(views_path if vw is not None else None, dec_path, n, stats)


def _chunk_rows(chunk: Sequence[tuple[Record, str, Optional[list]]], tok: FrozenTokenizer, pver: str,
                policy: TokenViewPolicy, cached: Optional[pa.Table], stats: ViewStats) -> tuple[list, list]:
    """Views rows (one table per record) and decision rows of one encode batch."""
    misses = [r for r, _, hit in chunk if hit is None]
    fresh: dict[str, list] = {}
    if misses:
        for item in token_views(misses, tok, policy):
            fresh.setdefault(item.record_id, []).append(item)
    parts: list[pa.Table] = []
    decided: list[dict] = []
    for record, split, hit in chunk:
        key = record_key(record, tok, pver)
        about = dict(policy_version=pver, record_id=record.record_id, source_id=record.source_id,
                     snapshot=record.snapshot, split=split, schema_type=record.schema_type,
                     domain=record.domain, lang=record.lang)
        if hit is not None:
            stats.reused_records += 1
            rows = _cached_rows(cached, hit)
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
    return parts, decided


def _cached_rows(cached: pa.Table, rows: list[int]) -> pa.Table:
    """One record's cached views: a zero-copy slice when they are adjacent (the spill writes a
    record's views together), else a take — which concatenates every chunk of ``cached``, i.e.
    costs the whole spill file per call (issue 18: it made a cache hit slower than tokenizing)."""
    start = rows[0]
    if rows == list(range(start, start + len(rows))):
        return cached.slice(start, len(rows))
    return cached.take(pa.array(rows, pa.int64()))


def record_key(record: Record, tok: FrozenTokenizer, pver: str) -> str:
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


def _count(stats: ViewStats, split: str, source: str, table: pa.Table) -> None:
    ns = table.column("n_tokens").to_pylist()
    ls = table.column("label_tokens").to_pylist()
    for i, (n, lab) in enumerate(zip(ns, ls)):
        stats.add_view(split, source, n, lab, i == 0)


def map_in_windows(engine: Any, fn: Callable[[Any], Any], items: Sequence[Any], *, window: int,
                   name: str) -> Iterator[Any]:
    """``engine.map(fn, items)`` results in item order, ``window`` items per map call, so the
    caller can consume (and delete) the files of one window before the next is written. On a
    cluster the next window runs while the caller consumes this one; with the synchronous
    scheduler (or inside a Dask worker) windows run one after another in the calling thread."""
    windows = [list(items[i:i + window]) for i in range(0, len(items), max(window, 1))]
    if not windows:
        return
    if engine.kind not in ("local", "existing"):
        for w in windows:
            yield from engine.map(fn, w, name=name)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-window") as ex:
        pending = ex.submit(engine.map, fn, windows[0], name=name)
        for k in range(len(windows)):
            done = pending.result()
            if k + 1 < len(windows):
                pending = ex.submit(engine.map, fn, windows[k + 1], name=name)
            yield from done


def remove_files(*paths: Optional[str]) -> None:
    for p in paths:
        if p:
            Path(p).unlink(missing_ok=True)
