"""Stable reason codes and outcomes. Codes are part of the data contract: never rename one.

Every input item of a stage ends as exactly one outcome (accepted / rejected / quarantined) with
one reason code. "rejected" means the item was understood and is not kept (empty, removed
upstream, refused by robots); "quarantined" means it could not be interpreted reliably (parse
failures, unknown schemas, limits exceeded) and is kept aside, owner-only, for a human.
"""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    QUARANTINED = "quarantined"
    DELETED = "deleted"  # removed by a deletion request (tombstone); the decision keeps ids only


class Reason(str, Enum):
    OK = "ok"
    # capture (raw layer) statuses that canonicalization turns into decisions
    SOURCE_REMOVED = "source_removed"  # 404/410 for a previously captured URI
    ROBOTS_DISALLOWED = "robots_disallowed"
    REDIRECT_OFF_HOST = "redirect_off_host"
    HTTP_ERROR = "http_error"  # other non-2xx status
    FETCH_ERROR = "fetch_error"  # connection failure, timeout
    TOO_LARGE = "too_large"  # exceeded a byte limit at capture or canonicalization
    TRUNCATED_ARCHIVE = "truncated_archive"  # gzip / WARC ended early; what followed is unknowable
    UNREADABLE_INPUT = "unreadable_input"  # file could not be opened/read
    CONTENT_DECODING_FAILED = "content_decoding_failed"  # HTTP body's content/transfer coding corrupt; raw bytes kept
    # canonicalization
    EMPTY_DOCUMENT = "empty_document"
    BINARY_CONTENT = "binary_content"
    INVALID_UTF8 = "invalid_utf8"
    MALFORMED_JSON = "malformed_json"
    NOT_AN_OBJECT = "not_an_object"
    UNKNOWN_SCHEMA = "unknown_schema"
    SCHEMA_VIOLATION = "schema_violation"
    UNSUPPORTED_CONTENT_TYPE = "unsupported_content_type"
    EXTRACTION_FAILED = "extraction_failed"
    DUPLICATE_RECORD_ID = "duplicate_record_id"  # a second item claims a record id already used in the snapshot
    # deletion (purge of a tombstoned item or record)
    DELETION_TOMBSTONED = "deletion.tombstoned"


# Which outcome each non-OK reason implies, so stages cannot disagree about it.
OUTCOME_OF: dict[Reason, Outcome] = {
    Reason.OK: Outcome.ACCEPTED,
    Reason.SOURCE_REMOVED: Outcome.REJECTED,
    Reason.ROBOTS_DISALLOWED: Outcome.REJECTED,
    Reason.REDIRECT_OFF_HOST: Outcome.REJECTED,
    Reason.HTTP_ERROR: Outcome.REJECTED,
    Reason.EMPTY_DOCUMENT: Outcome.REJECTED,
    Reason.FETCH_ERROR: Outcome.QUARANTINED,
    Reason.TOO_LARGE: Outcome.QUARANTINED,
    Reason.TRUNCATED_ARCHIVE: Outcome.QUARANTINED,
    Reason.UNREADABLE_INPUT: Outcome.QUARANTINED,
    Reason.CONTENT_DECODING_FAILED: Outcome.QUARANTINED,
    Reason.BINARY_CONTENT: Outcome.QUARANTINED,
    Reason.INVALID_UTF8: Outcome.QUARANTINED,
    Reason.MALFORMED_JSON: Outcome.QUARANTINED,
    Reason.NOT_AN_OBJECT: Outcome.QUARANTINED,
    Reason.UNKNOWN_SCHEMA: Outcome.QUARANTINED,
    Reason.SCHEMA_VIOLATION: Outcome.QUARANTINED,
    Reason.UNSUPPORTED_CONTENT_TYPE: Outcome.QUARANTINED,
    Reason.EXTRACTION_FAILED: Outcome.QUARANTINED,
    Reason.DUPLICATE_RECORD_ID: Outcome.QUARANTINED,
    Reason.DELETION_TOMBSTONED: Outcome.DELETED,
}
