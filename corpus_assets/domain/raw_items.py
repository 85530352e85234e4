"""The unit of the raw layer: one captured input item plus its provenance.

An item is a crawled page, a local file, one line of a JSONL dump, one row of a Parquet dump
or one WARC response record. Items that could not be captured (robots refusal, off-host
redirect, a truncated archive, a page that disappeared) are items too, with a capture status
and no content, so every input is accounted for downstream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pyarrow as pa

from corpus_assets.domain.reasons import Reason

# capture statuses: "captured" or one of the Reason codes below
CAPTURED = "captured"
CAPTURE_FAILURES = {
    Reason.SOURCE_REMOVED,
    Reason.ROBOTS_DISALLOWED,
    Reason.REDIRECT_OFF_HOST,
    Reason.HTTP_ERROR,
    Reason.FETCH_ERROR,
    Reason.TOO_LARGE,
    Reason.TRUNCATED_ARCHIVE,
    Reason.UNREADABLE_INPUT,
}

# robots decisions recorded in provenance
ROBOTS_ALLOWED = "allowed"
ROBOTS_DISALLOWED = "disallowed"
ROBOTS_NOT_APPLICABLE = "not_applicable"


@dataclass
class RawItem:
    """One input item. ``item_id`` is stable within the source (URL, relative path, ``path#L12``)."""

    item_id: str
    uri: str
    retrieved_at: str  # ISO-8601 UTC; provenance, never part of canonical content
    content: Optional[bytes]
    status: str = CAPTURED  # CAPTURED or a Reason value from CAPTURE_FAILURES
    status_detail: str = ""  # short, safe explanation (never content)
    content_type: str = ""  # HTTP content type or a format hint: text/html, text/plain, application/x-jsonl-line ...
    http_status: Optional[int] = None
    robots: str = ROBOTS_NOT_APPLICABLE
    etag: Optional[str] = None
    last_modified: Optional[str] = None
    extra: dict = field(default_factory=dict)  # small, JSON-serializable provenance (e.g. line number, warc id)


RAW_SCHEMA = pa.schema(
    [
        ("item_index", pa.int64()),
        ("item_id", pa.string()),
        ("source_id", pa.string()),
        ("snapshot", pa.string()),
        ("uri", pa.string()),
        ("retrieved_at", pa.string()),
        ("status", pa.string()),
        ("status_detail", pa.string()),
        ("http_status", pa.int32()),
        ("content_type", pa.string()),
        ("robots", pa.string()),
        ("etag", pa.string()),
        ("last_modified", pa.string()),
        ("license", pa.string()),
        ("rights_evidence", pa.string()),
        ("raw_sha256", pa.string()),
        ("byte_length", pa.int64()),
        ("extra_json", pa.string()),
        ("content", pa.large_binary()),
    ]
)
