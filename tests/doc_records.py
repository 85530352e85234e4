"""Document records from page texts, and a canonical_records version of them: for the tests that
run the curated layer on real pages (test_templates.py, test_profiles.py)."""

from __future__ import annotations

from typing import Optional

from corpus_assets.domain.canonical.canonical_layer import CANONICAL_TABLES
from corpus_assets.domain.canonical.records import (
    SCHEMA_VERSIONS,
    DocumentPayload,
    Record,
    raw_parent_id,
    record_digest,
    record_to_row,
)
from corpus_assets.domain.core.hashing import dedup_key, sha256_text
from corpus_assets.domain.ingest.sources_config import Governance
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS

GOV = Governance(license="see debian/copyright", rights_evidence="Debian documentation packages")


def doc_record(source: str, local: str, text: str, *, title: Optional[str] = None, lang: str = "en",
               snapshot: str = "s.1") -> Record:
    rec = Record(
        record_id=f"{source}:{local}", source_id=source, snapshot=snapshot, item_id=local,
        schema_type="document", schema_version=SCHEMA_VERSIONS["document"], adapter="test", adapter_version="1",
        domain="prose", lang=lang, lang_score=0.9, group_id=f"doc:{source}:{local}",
        parents=[raw_parent_id(source, local)], governance=GOV, payload=DocumentPayload(text=text, title=title),
    )
    rec.text_sha256 = rec.raw_sha256 = sha256_text(text)
    rec.dedup_key = dedup_key(text, "prose")
    rec.record_sha256 = record_digest(rec)
    return rec


def canonical_version(store, snapshot: str, source: str, pages: list[dict]):
    """A canonical_records version of ``pages`` (``path``, ``text``, ``title``, ``lang``) of one source."""
    rows = [record_to_row(doc_record(source, p["path"], p["text"], title=p.get("title"), lang=p["lang"],
                                     snapshot=snapshot)) for p in pages]
    with store.new_version(CANONICAL_RECORDS, snapshot, CANONICAL_TABLES, {"test": snapshot}) as w:
        w.write("records", rows)
        return w.commit(extra_manifest={"items_in": len(rows)})
