"""Capture a source into an immutable raw snapshot version.

One function serves every source kind: it streams items from the crawler (``http_crawl``) or the
file readers (everything else) into the private ``raw_snapshot`` layer in bounded batches. For
incremental crawls ``only_if_changed`` discards the staged version when nothing new, changed or
removed was seen, so an idle schedule tick leaves no trace but its log line.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterator, Optional

from corpus_assets.domain.storage.catalog import CrawlStateRow
from corpus_assets.domain.core.hashing import sha256_bytes
from corpus_assets.domain.core.keys import parse_snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.ingest.raw_items import RawItem
from corpus_assets.domain.layers.registry import RAW_SNAPSHOT, layer

RAW_TABLE = "items"
CAPTURE_CODE_VERSION = "capture-1"
RAW_TABLES = layer(RAW_SNAPSHOT).table_specs()

Log = Optional[Callable[[str], None]]


@dataclass
class CaptureResult:
    snapshot: str
    committed: bool
    version: Optional[LayerVersion]
    items: int
    status_counts: dict[str, int]
    stats: dict = field(default_factory=dict)
    state_updates: list[CrawlStateRow] = field(default_factory=list)


def item_to_row(item: RawItem, index: int, source, snapshot: str) -> dict:
    content = item.content
    return {
        "item_index": index,
        "item_id": item.item_id,
        "source_id": source.id,
        "snapshot": snapshot,
        "uri": item.uri,
        "retrieved_at": item.retrieved_at,
        "status": str(item.status.value if hasattr(item.status, "value") else item.status),
        "status_detail": item.status_detail,
        "http_status": item.http_status,
        "content_type": item.content_type,
        "robots": item.robots,
        "etag": item.etag,
        "last_modified": item.last_modified,
        "license": source.governance.license,
        "rights_evidence": source.governance.rights_evidence,
        "raw_sha256": sha256_bytes(content) if content is not None else None,
        "byte_length": len(content) if content is not None else None,
        "extra_json": json.dumps(item.extra, sort_keys=True, ensure_ascii=False) if item.extra else None,
        "content": content,
    }


def row_to_item(row: dict) -> RawItem:
    return RawItem(
        item_id=row["item_id"],
        uri=row["uri"],
        retrieved_at=row["retrieved_at"],
        content=row["content"],
        status=row["status"],
        status_detail=row["status_detail"] or "",
        content_type=row["content_type"] or "",
        http_status=row["http_status"],
        robots=row["robots"],
        etag=row["etag"],
        last_modified=row["last_modified"],
        extra=json.loads(row["extra_json"]) if row["extra_json"] else {},
    )


def _source_items(source, previous_state, clock, log, snapshot=""):
    """(items iterator, finisher) where finisher() returns (has_changes, stats, state updates)."""
    if source.kind == "http_crawl":
        from corpus_assets.domain.ingest.crawl import Crawler

        crawler = Crawler(source, dict(previous_state or {}), clock=clock, log=log)

        def finish():
            updates = [
                CrawlStateRow(e.uri, e.etag, e.last_modified, e.content_sha256, e.status)
                for _, e in sorted(crawler.state_updates.items())
            ]
            return crawler.has_changes, crawler.stats.as_dict(), updates

        return crawler.run(), finish
    if source.kind == "recipe":
        from corpus_assets.domain.ingest.recipe_source import run_recipe_capture
        from corpus_assets.domain.core.settings import corpus_home

        return run_recipe_capture(source, snapshot, home=corpus_home(), clock=clock, log=log)
    from corpus_assets.domain.ingest.file_readers import read_source_items

    return read_source_items(source, clock=clock, log=log), lambda: (True, {}, [])


def capture_snapshot(
    source,
    snapshot: str,
    store: LayerStore,
    *,
    previous_state: Optional[dict] = None,
    clock: Optional[Callable[[], datetime]] = None,
    log: Log = None,
    only_if_changed: bool = False,
    flush_items: int = 256,
    flush_bytes: int = 32 << 20,
) -> CaptureResult:
    snap_source, _ = parse_snapshot_key(snapshot)
    if snap_source != source.id:
        raise ValueError(f"snapshot {snapshot!r} does not belong to source {source.id!r}")
    clock = clock or (lambda: datetime.now(timezone.utc))
    build_spec = {
        "capture_code_version": CAPTURE_CODE_VERSION,
        "source": source.model_dump(mode="json"),
        "snapshot": snapshot,
    }
    items, finish = _source_items(source, previous_state, clock, log, snapshot)
    counts: dict[str, int] = {}
    n = 0
    started = time.monotonic()
    last_log = started
    with store.new_version(RAW_SNAPSHOT, snapshot, RAW_TABLES, build_spec) as writer:
        batch: list[dict] = []
        batch_bytes = 0
        for item in items:
            row = item_to_row(item, n, source, snapshot)
            counts[row["status"]] = counts.get(row["status"], 0) + 1
            batch.append(row)
            batch_bytes += row["byte_length"] or 0
            n += 1
            if len(batch) >= flush_items or batch_bytes >= flush_bytes:
                writer.write(RAW_TABLE, batch)
                batch, batch_bytes = [], 0
            now = time.monotonic()
            if log and now - last_log >= 10:
                log(f"capture {snapshot}: {n} items so far ({n / (now - started):.1f} items/s)")
                last_log = now
        if batch:
            writer.write(RAW_TABLE, batch)
        has_changes, stats, updates = finish()
        if only_if_changed and not has_changes:
            writer.abort()
            if log:
                log(f"capture {snapshot}: nothing new, changed or removed; no snapshot created ({stats})")
            return CaptureResult(snapshot, False, None, n, counts, stats, updates)
        version = writer.commit(extra_manifest={"status_counts": dict(sorted(counts.items()))})
    if log:
        log(f"capture {snapshot}: committed {n} items as version {version.version} in {time.monotonic() - started:.1f}s")
    return CaptureResult(snapshot, True, version, n, counts, stats, updates)


def iter_raw_items(version: LayerVersion, batch_size: int) -> Iterator[tuple[int, RawItem]]:
    """Stream (item_index, RawItem) from a raw snapshot version in bounded batches."""
    for batch in version.iter_batches(RAW_TABLE, batch_size=batch_size):
        for row in batch.to_pylist():
            yield row["item_index"], row_to_item(row)
