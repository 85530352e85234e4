"""The unit of the raw layer: one captured input item plus its provenance.

An item is a crawled page, a local file, one line of a JSONL dump, one row of a Parquet dump
or one WARC response record. Items that could not be captured (robots refusal, off-host
redirect, a truncated archive, a page that disappeared) are items too, with a capture status
and no content, so every input is accounted for downstream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Optional

import pyarrow as pa

from corpus_assets.domain.core.reasons import Reason

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


Clock = Callable[[], datetime]


def utc_timestamp(clock: Optional[Clock] = None) -> str:
    """``retrieved_at`` value: ISO-8601 UTC with a ``Z`` suffix. ``clock`` is injectable for reproducible runs."""
    now = clock() if clock is not None else datetime.now(timezone.utc)
    if now.tzinfo is None:
        raise ValueError("clock must return timezone-aware datetimes")
    return now.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def split_content_type(value: Optional[str]) -> tuple[str, Optional[str]]:
    """``'Text/HTML; charset=UTF-8'`` -> ``('text/html', 'utf-8')``.

    The bare type goes to ``RawItem.content_type``, the charset (if any) to ``extra["charset"]``.
    """
    if not value:
        return "", None
    main, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset" and val.strip():
            charset = val.strip().strip("\"'").lower()
    return main.strip().lower(), charset


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
