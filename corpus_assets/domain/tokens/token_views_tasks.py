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
from itertools import islice
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.canonical.records import Record, record_digest, row_to_record
from corpus_assets.domain.layers.decisions import DECISIONS_SCHEMA, decision, decisions_from_columns
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
    adopted_records: int = 0  # records of segments whose stored files were adopted whole

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
        self.adopted_records += other.adopted_records

    def to_json(self) -> dict:
        """The counts of what was built, as plain JSON with sorted keys (a manifest's segment
        entry). How the rows were obtained (tokenized, reused, adopted) is left out: the
        manifest's bytes must not depend on the cache."""
        return {
            "splits": {k: dict(sorted(c.items())) for k, c in sorted(self.splits.items())},
            "sources": {k: dict(sorted(c.items())) for k, c in sorted(self.sources.items())},
            "rejected": dict(sorted(self.rejected.items())),
        }

    @classmethod
    def from_json(cls, d: dict) -> "ViewStats":
        return cls(splits={k: Counter(c) for k, c in d["splits"].items()},
                   sources={k: Counter(c) for k, c in d["sources"].items()},
                   rejected=Counter(d["rejected"]))

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
    for _, _, group in version.take_rows("records", rows):
        yield from group.to_pylist()


def view_task(task: ViewTask) -> ViewTaskResult:
    """Write one chunk's views and decisions, in plan order: runs of cache hits are built as
    columns (no Record parse, nothing per record in Python); only misses are parsed and tokenized,
    in bounded batches."""
    tok = _tokenizer(task.tokenizer)
    pver = view_policy_version(task.policy)
    plan = pa.ipc.open_file(pa.memory_map(task.plan)).read_all().combine_chunks()
    rows = plan.column("row").to_numpy()
    hit = plan.column("cached").is_valid().to_numpy(zero_copy_only=False)
    expected = plan.column("record_id").to_pylist()
    splits = plan.column("split").to_pylist()
    # mapped per task (zero-copy), never kept: the build deletes the spill when it is done
    cached = (pa.ipc.open_file(pa.memory_map(task.reusable)).read_all()
              if task.reusable and hit.any() else None)
    light = None
    if hit.any():
        if cached is None:
            raise ValueError(f"token views of {task.snapshot!r}: the plan names cached views but no spill")
        light = _read_columns(task.curated, rows[hit], LIGHT_COLUMNS)
        _check_ids(task.snapshot, light.column("record_id"), plan.column("record_id").filter(pa.array(hit)))
    miss_pos = np.flatnonzero(~hit)

    def misses() -> Iterator[tuple[Record, str, None]]:
        for k, row in zip(miss_pos.tolist(), _read_rows(task.curated, rows[miss_pos])):
            if row["record_id"] != expected[k]:
                raise ValueError(f"curated_records of {task.snapshot!r}: row {k} is {row['record_id']!r}, "
                                 f"planned {expected[k]!r}")
            yield row_to_record(row), splits[k], None

    stats = ViewStats()
    views_path, dec_path = f"{task.out}.views.arrow", f"{task.out}.decisions.arrow"
    vw = None
    n = 0
    miss_items = misses()
    hits_done = 0
    with pa.OSFile(dec_path, "wb") as dsink, pa.ipc.new_file(dsink, DECISIONS_SCHEMA) as dw:
        try:
            for lo, hi, is_hit in _runs(hit):
                if is_hit:
                    seg = plan.slice(lo, hi - lo)
                    views, decided = _hit_rows(seg, light.slice(hits_done, hi - lo), cached, pver, stats)
                    hits_done += hi - lo
                    batches = [(views, decided)]
                else:
                    batches = (_miss_rows(chunk, tok, pver, task.policy, stats)
                               for chunk in bounded_chunks(islice(miss_items, hi - lo), lambda it: payload_chars(it[0]),
                                                           max_records=task.max_records, max_chars=task.max_chars))
                for views, decided in batches:
                    if views is not None and views.num_rows:
                        if vw is None:
                            vw = pa.ipc.new_file(views_path, VIEWS_SCHEMA)
                        # one record batch per run or encode batch: the layer store sizes rows itself
                        vw.write_table(views)
                    dw.write_table(decided)
                    n += decided.num_rows
        finally:
            if vw is not None:
                vw.close()
    return ViewTaskResult(views_path if vw is not None else None, dec_path, n, stats)


# the curated columns a cache hit needs (identity of its views and its decision row)
LIGHT_COLUMNS = ("record_id", "source_id", "snapshot", "schema_type", "domain", "lang")


def _runs(mask: np.ndarray) -> Iterator[tuple[int, int, bool]]:
    """Maximal runs ``[lo, hi)`` of equal values of ``mask``, in order."""
    if mask.shape[0] == 0:
        return
    cuts = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    bounds = [0, *cuts.tolist(), mask.shape[0]]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        yield lo, hi, bool(mask[lo])


def _check_ids(snapshot: str, found: pa.ChunkedArray, planned: pa.ChunkedArray) -> None:
    same = pc.equal(found, planned)
    if not pc.all(same).as_py():
        k = int(np.flatnonzero(~same.to_numpy(zero_copy_only=False))[0])
        raise ValueError(f"curated_records of {snapshot!r}: cached record {k} is {found[k].as_py()!r}, "
                         f"planned {planned[k].as_py()!r}")


def _read_columns(version: LayerVersion, rows: np.ndarray, columns: Sequence[str]) -> pa.Table:
    """``columns`` of the ``records`` rows at ``rows`` (ascending), reading only the row groups that hold them."""
    parts = [group for _, _, group in version.take_rows("records", rows, columns=list(columns))]
    return pa.concat_tables(parts).combine_chunks()


def _spill_rows(cached: pa.Table, flat: np.ndarray) -> pa.Table:
    """Rows ``flat`` of the spill, in that order: one zero-copy slice per run of adjacent rows (a
    record's views are adjacent, and so are consecutive records' mostly), then one copy. A single
    ``take`` would concatenate every chunk of the spill, i.e. cost the whole file per call."""
    if flat.shape[0] == 0:
        return cached.slice(0, 0)
    cuts = np.flatnonzero(flat[1:] != flat[:-1] + 1) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [flat.shape[0]]))
    return pa.concat_tables([cached.slice(int(flat[a]), int(b - a)) for a, b in zip(starts, ends)]).combine_chunks()


def _hit_rows(plan: pa.Table, light: pa.Table, cached: pa.Table, pver: str,
              stats: ViewStats) -> tuple[pa.Table, pa.Table]:
    """Views and decisions of a run of records whose views are all cached: the same rows, in the
    same order, as parsing and tokenizing them (a cache hit never changes a byte)."""
    lists = plan.column("cached").combine_chunks()
    counts = pc.list_value_length(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    if (counts < 1).any():
        raise ValueError("token views plan: a cache hit without cached rows")
    tokens = _spill_rows(cached, pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64))
    owner = pa.array(np.repeat(np.arange(plan.num_rows, dtype=np.int64), counts))
    split = plan.column("split")
    of_record = {name: light.column(name) for name in ("record_id", "source_id", "snapshot", "domain")}
    views = _views_table(owner, {**of_record, "split": split}, tokens, tokens.column("cache_key"))
    n_tok = tokens.column("n_tokens").to_numpy().astype(np.int64)
    labels = tokens.column("label_tokens").to_numpy().astype(np.int64)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    decided = decisions_from_columns(
        plan.num_rows, stage="token_views", action="accept", detail="", policy_version=pver,
        record_id=light.column("record_id"), source_id=light.column("source_id"), snapshot=light.column("snapshot"),
        split=split, schema_type=light.column("schema_type"), domain=light.column("domain"),
        lang=light.column("lang"), tokens_out=pa.array(np.add.reduceat(n_tok, starts), pa.int64()))
    stats.reused_records += plan.num_rows
    _count_columns(stats, split.to_pylist(), light.column("source_id").to_pylist(), n_tok, labels, counts, starts)
    return views, decided


def _count_columns(stats: ViewStats, splits: list, sources: list, n_tok: np.ndarray, labels: np.ndarray,
                   counts: np.ndarray, starts: np.ndarray) -> None:
    """``ViewStats.add_view`` for every view of a run, summed per (split, source) in numpy."""
    rec_tokens = np.add.reduceat(n_tok, starts)
    rec_labels = np.add.reduceat(labels, starts)
    groups: dict[tuple, list[int]] = {}
    for k, key in enumerate(zip(splits, sources)):
        groups.setdefault(key, []).append(k)
    for (split, source), ks in groups.items():
        idx = np.asarray(ks, np.int64)
        views, toks, labs = int(counts[idx].sum()), int(rec_tokens[idx].sum()), int(rec_labels[idx].sum())
        s = stats.splits.setdefault(split, Counter())
        src = stats.sources.setdefault(source, Counter())
        # the key order add_view gives a new Counter (it reaches the report as a dict)
        s["views"] += views
        s["tokens"] += toks
        s["label_tokens"] += labs
        src["tokens"] += toks
        src["label_tokens"] += labs
        s["records"] += len(ks)
        src["records"] += len(ks)


def _miss_rows(chunk: Sequence[tuple[Record, str, None]], tok: FrozenTokenizer, pver: str,
               policy: TokenViewPolicy, stats: ViewStats) -> tuple[Optional[pa.Table], pa.Table]:
    """Views rows and decision rows of one encode batch of cache misses, built as columns for the
    whole batch (one table, not one per record): the same rows, in record order, as a record at a time."""
    records = [r for r, _, _ in chunk]
    fresh: dict[str, list] = {}
    for item in token_views(records, tok, policy):
        fresh.setdefault(item.record_id, []).append(item)
    views: list[TokenView] = []
    accepted: list[int] = []  # chunk positions of the records that have views
    counts: list[int] = []  # views per accepted record
    decided: list[dict] = []
    for k, (record, split, _) in enumerate(chunk):
        stats.tokenized_records += 1
        items = fresh[record.record_id]
        if isinstance(items[0], Rejected):
            rej = items[0]
            stats.rejected[rej.reason] += 1
            decided.append(decision(stage="token_views", action="reject", reason=rej.reason, detail=rej.detail,
                                    tokens_out=0, **_about(record, split, pver)))
            continue
        mine = [v for v in items if isinstance(v, TokenView)]
        accepted.append(k)
        counts.append(len(mine))
        views.extend(mine)
        decided.append({})  # filled below, once the record's token count is known
    if not accepted:
        return None, pa.Table.from_pylist(decided, schema=DECISIONS_SCHEMA)
    table = views_to_table(views)
    n_tok = table.column("n_tokens").to_numpy().astype(np.int64)
    labels = np.fromiter((int(v.loss_mask.sum()) for v in views), np.int64, count=len(views))
    per_record = np.asarray(counts, np.int64)
    starts = np.concatenate(([0], np.cumsum(per_record)[:-1]))
    rec_tokens = np.add.reduceat(n_tok, starts)
    owner = pa.array(np.repeat(np.arange(len(accepted), dtype=np.int64), per_record))  # per view: its record in ``acc``
    acc = [chunk[k] for k in accepted]
    split_of = [split for _, split, _ in acc]
    source_of = [r.source_id for r, _, _ in acc]
    of_record = {
        "record_id": pa.array([r.record_id for r, _, _ in acc], pa.string()),
        "split": pa.array(split_of, pa.string()),
        "source_id": pa.array(source_of, pa.string()),
        "snapshot": pa.array([r.snapshot for r, _, _ in acc], pa.string()),
        "domain": pa.array([r.domain for r, _, _ in acc], pa.string()),
    }
    keys = pa.array([record_key(r, tok, pver) for r, _, _ in acc], pa.string()).take(owner)
    out = _views_table(owner, of_record, table.append_column("label_tokens", pa.array(labels, pa.int32())), keys)
    for j, (k, (record, split, _)) in enumerate(zip(accepted, acc)):
        decided[k] = decision(
            stage="token_views", action="accept", tokens_out=int(rec_tokens[j]), **_about(record, split, pver))
    _count_columns(stats, split_of, source_of, n_tok, labels, per_record, starts)
    return out, pa.Table.from_pylist(decided, schema=DECISIONS_SCHEMA)


def _views_table(owner: pa.Array, of_record: dict, tokens: pa.Table, cache_key: pa.Array) -> pa.Table:
    """Rows of ``VIEWS_SCHEMA`` for a run of views: the record columns (``of_record``: record_id,
    split, source_id, snapshot, domain, one value per record) taken by ``owner`` (each view's
    record), then each view's cache key, variant and token columns (``tokens``, one row per view)."""
    cols = {name: column.take(owner) for name, column in of_record.items()}
    cols["variant"] = tokens.column("variant")
    cols["cache_key"] = cache_key
    for name in VIEW_TOKEN_COLUMNS:
        cols[name] = tokens.column(name)
    return pa.table({k: cols[k].cast(VIEWS_SCHEMA.field(k).type) for k in VIEWS_SCHEMA.names}, schema=VIEWS_SCHEMA)


def _about(record: Record, split: str, pver: str) -> dict:
    return dict(policy_version=pver, record_id=record.record_id, source_id=record.source_id, snapshot=record.snapshot,
                split=split, schema_type=record.schema_type, domain=record.domain, lang=record.lang)


def record_key(record: Record, tok: FrozenTokenizer, pver: str) -> str:
    return cache_key(record.record_sha256 or record_digest(record), tok.digest, pver)


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
