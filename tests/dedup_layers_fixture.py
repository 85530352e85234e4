"""Snapshot layers written straight through the LayerStore (canonical decisions, curated records,
MinHash signatures), for dedup tests and bench/bench_dedup_layer_memory.py: no Dagster run, any
size."""

from __future__ import annotations

import json
from typing import Iterable, Iterator, Mapping

import pyarrow as pa

from corpus_assets.domain.canonical.records import RECORDS_SCHEMA
from corpus_assets.domain.core.hashing import dedup_key
from corpus_assets.domain.dedup.minhash import MinHashPolicy
from corpus_assets.domain.dedup.signatures_layer import build_signatures
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE, decisions_from_columns
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, CURATED_RECORDS, layer
from corpus_assets.domain.storage.layer_store import LayerStore

GOV_OK = json.dumps({"license": "CC0-1.0", "rights_evidence": "https://example.org/rights"})
GOV_MISSING = json.dumps({"license": "CC0-1.0", "rights_evidence": None})


def record_row(record_id: str, source_id: str, snapshot: str, text: str, *, domain: str = "prose",
               lang: str = "en", schema_type: str = "document", governance_json: str = GOV_OK,
               group_id: str | None = None) -> dict:
    """One curated record (the columns dedup reads are real, the others plausible)."""
    return {
        "record_id": record_id, "source_id": source_id, "snapshot": snapshot, "item_id": record_id.split(":", 1)[1],
        "schema_type": schema_type, "schema_version": "1", "adapter": "text_document", "adapter_version": "1",
        "domain": domain, "lang": lang, "lang_score": 0.99, "group_id": group_id or f"doc:{record_id}",
        "parents_json": "[]", "governance_json": governance_json, "raw_sha256": "", "text_sha256": "",
        "record_sha256": "", "dedup_key": dedup_key(text, domain), "char_count": len(text), "text": text,
        "payload_json": "{}",
    }


def write_snapshot(store: LayerStore, snapshot: str, batches: Iterable[list[dict]], minhash: MinHashPolicy,
                   refused: Mapping[str, str] = {}) -> int:
    """canonical_records (decisions only: ``refused`` record id -> reason), curated_records and
    minhash_signatures of one snapshot from batches of ``record_row`` dicts. Returns the record count."""
    spec = {"fixture": snapshot}
    n = 0
    with store.new_version(CURATED_RECORDS, snapshot, layer(CURATED_RECORDS).table_specs(), spec) as w:
        for rows in batches:
            n += len(rows)
            w.write("records", pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA))
            w.write(DECISIONS_TABLE, decisions_from_columns(
                len(rows), stage="curation", action="accept", record_id=[r["record_id"] for r in rows],
                source_id=[r["source_id"] for r in rows], snapshot=snapshot))
        curated = w.commit()
    with store.new_version(CANONICAL_RECORDS, snapshot, layer(CANONICAL_RECORDS).table_specs(), spec) as w:
        ids = sorted(refused)
        w.write(DECISIONS_TABLE, decisions_from_columns(
            len(ids), stage="canonicalize", action="reject", record_id=ids, reason=[refused[i] for i in ids],
            snapshot=snapshot))
        w.commit()
    build_signatures(store, snapshot, minhash, curated=curated)
    return n


def chunked(rows: Iterable[dict], size: int = 4096) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for r in rows:
        batch.append(r)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
