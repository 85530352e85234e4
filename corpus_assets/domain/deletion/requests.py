"""Deletion requests: validation, durable intake (API and drop folder), status.

A request names WHAT must go (a record, the items of a URI, a whole source, or content by digest
or text); ``tombstones.py`` resolves it through lineage and ``purge.py`` rewrites the layers. This
module only records requests durably in the control plane: content text is hashed at intake and
never kept, errors name the field and change nothing, ids are stable so a drop-folder file seen
twice is filed once. Kinds, decisions and statuses: docs/deletion.md.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.core.hashing import canonical_json, sha256_bytes, sha256_text
from corpus_assets.domain.core.keys import InvalidKeyError, validate_source_id
from corpus_assets.domain.core.atomic_files import atomic_write_text
from corpus_assets.domain.canonical.normalize import normalize_text

__all__ = [
    "KINDS",
    "STATUSES",
    "OPEN_STATUSES",
    "MAX_REQUEST_FILE_BYTES",
    "DeletionRequestError",
    "DeletionRequest",
    "FiledRequest",
    "parse_request",
    "content_digest",
    "request_id_for",
    "file_request",
    "load_drop_folder",
    "pending",
    "set_status",
    "get",
]

KINDS = ("record", "uri", "source", "content")
STATUSES = ("received", "resolved", "runs_requested", "applied", "rejected")
OPEN_STATUSES = ("received", "resolved", "runs_requested")
MAX_REQUEST_FILE_BYTES = 1 << 20
MAX_TEXT_FIELD = 4096  # requester, reason, uri, record id
MAX_DETAIL = 1 << 20  # the sensor keeps a JSON detail (releases, builds, affected runs)

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TARGET_FIELD = {"record": "record_id", "uri": "uri", "source": "source_id", "content": "content_sha256"}
_TARGET_FIELDS = ("record_id", "uri", "source_id", "content_sha256", "content_text")


class DeletionRequestError(CorpusError, ValueError):
    """A request that cannot be filed; the message names the field(s) at fault, never their values."""


def content_digest(text: str) -> str:
    """``text_sha256`` of a record whose text view is ``text`` (normalized as canonical text is)."""
    return sha256_text(normalize_text(text))


def _plain(field: str, value: str) -> str:
    if not value.strip():
        raise ValueError(f"{field}: must not be empty or blank")
    if len(value) > MAX_TEXT_FIELD:
        raise ValueError(f"{field}: longer than {MAX_TEXT_FIELD} characters")
    return value


class DeletionRequest(BaseModel):
    """One deletion request as submitted (validated). ``target`` is what the catalog stores."""

    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)

    kind: Literal["record", "uri", "source", "content"]
    record_id: Optional[str] = None
    uri: Optional[str] = None
    source_id: Optional[str] = None
    content_sha256: Optional[str] = None
    content_text: Optional[str] = Field(default=None, exclude=True, repr=False)
    near_duplicates: bool = False
    near_threshold: Optional[float] = None
    requester: str
    reason: str

    @field_validator("requester", "reason")
    @classmethod
    def _non_blank(cls, v: str, info) -> str:
        return _plain(info.field_name, v).strip()

    @field_validator("record_id")
    @classmethod
    def _record_id(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        _plain("record_id", v)
        if _CONTROL.search(v):
            raise ValueError("record_id: contains control characters")
        source, sep, local = v.partition(":")
        if not sep or not local:
            raise ValueError("record_id: must be '<source_id>:<local_id>'")
        try:
            validate_source_id(source)
        except InvalidKeyError:
            raise ValueError("record_id: the part before ':' is not a valid source id") from None
        return v

    @field_validator("uri")
    @classmethod
    def _uri(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        _plain("uri", v)
        if _CONTROL.search(v) or v != v.strip():
            raise ValueError("uri: contains control characters or surrounding whitespace")
        return v

    @field_validator("source_id")
    @classmethod
    def _source_id(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        try:
            return validate_source_id(v)
        except InvalidKeyError:
            raise ValueError("source_id: use 1-64 characters from a-z, 0-9, '_' and '-'") from None

    @field_validator("content_sha256")
    @classmethod
    def _sha(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        v = v.lower()
        if not _HEX64.fullmatch(v):
            raise ValueError("content_sha256: must be 64 hexadecimal digits")
        return v

    @field_validator("content_text")
    @classmethod
    def _text(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not normalize_text(v):
            raise ValueError("content_text: empty after normalization")
        return v

    @field_validator("near_threshold")
    @classmethod
    def _threshold(cls, v: Optional[float]) -> Optional[float]:
        if v is not None and not (0.0 < v <= 1.0):
            raise ValueError("near_threshold: must be in (0, 1]")
        return v

    @model_validator(mode="after")
    def _one_target(self) -> "DeletionRequest":
        wanted = _TARGET_FIELD[self.kind]
        given = [f for f in _TARGET_FIELDS if getattr(self, f) is not None]
        if self.kind == "content":
            both = [f for f in given if f in ("content_sha256", "content_text")]
            if len(both) != 1:
                raise ValueError("content_sha256: a content request needs exactly one of content_sha256 or content_text")
            extra = [f for f in given if f not in ("content_sha256", "content_text")]
        else:
            if wanted not in given:
                raise ValueError(f"{wanted}: required when kind is {self.kind!r}")
            extra = [f for f in given if f != wanted]
        if extra:
            raise ValueError(f"{extra[0]}: not allowed when kind is {self.kind!r}")
        if self.kind != "content" and (self.near_duplicates or self.near_threshold is not None):
            raise ValueError("near_duplicates: only content requests can include near duplicates")
        if self.near_duplicates and self.near_threshold is None:
            raise ValueError("near_threshold: required when near_duplicates is true")
        if not self.near_duplicates and self.near_threshold is not None:
            raise ValueError("near_threshold: only allowed when near_duplicates is true")
        if self.content_text is not None:
            # hash once, keep only the digest
            self.content_sha256 = content_digest(self.content_text)
            self.content_text = None
        return self

    @property
    def target(self) -> str:
        return getattr(self, _TARGET_FIELD[self.kind])


class FiledRequest(BaseModel):
    """A request as stored in ``deletion_requests``."""

    model_config = ConfigDict(extra="forbid")

    request_id: str
    kind: Literal["record", "uri", "source", "content"]
    target: str
    near_duplicates: bool
    near_threshold: Optional[float]
    requester: str
    reason: str
    received_at: datetime
    status: str
    status_detail: str
    generation: Optional[int]
    updated_at: datetime

    def detail(self) -> dict:
        """``status_detail`` as the JSON object the sensor wrote ({} for a plain message or none)."""
        try:
            value = json.loads(self.status_detail) if self.status_detail.startswith("{") else {}
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


_COLUMNS = list(FiledRequest.model_fields)


def _format_errors(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors(include_input=False, include_url=False):
        msg = e["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        loc = ".".join(str(x) for x in e["loc"])
        parts.append(msg if not loc or msg.startswith(loc + ":") else f"{loc}: {msg}")
    return "; ".join(parts)


def parse_request(data: Any) -> DeletionRequest:
    """Validate a request given as a mapping (or a ``DeletionRequest``); ``DeletionRequestError`` names
    the field(s) at fault."""
    if isinstance(data, DeletionRequest):
        return data
    if not isinstance(data, dict):
        raise DeletionRequestError(f"request: must be a JSON object, got {type(data).__name__}")
    try:
        return DeletionRequest.model_validate(data)
    except ValidationError as exc:
        raise DeletionRequestError(_format_errors(exc)) from None


def _utc(now: Optional[datetime]) -> datetime:
    now = now or datetime.now(timezone.utc)
    if now.tzinfo is None:
        raise ValueError("now: must be timezone-aware")
    return now.astimezone(timezone.utc)


def request_id_for(request: DeletionRequest, received_at: datetime) -> str:
    """``del-`` + 16 hex digits of the canonical (kind, target, near flags, requester, reason, time)."""
    key = {
        "kind": request.kind,
        "target": request.target,
        "near_duplicates": request.near_duplicates,
        "near_threshold": request.near_threshold,
        "requester": request.requester,
        "reason": request.reason,
        "received_at": _utc(received_at).isoformat(timespec="microseconds"),
    }
    return "del-" + sha256_bytes(canonical_json(key))[:16]


def _file_request_id(name: str, data: bytes) -> str:
    return "del-" + sha256_bytes(canonical_json({"file": name, "sha256": sha256_bytes(data)}))[:16]


def _insert(catalog: Catalog, request_id: str, request: DeletionRequest, received_at: datetime) -> None:
    with catalog.transaction() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO deletion_requests VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'received', '', NULL, ?)",
            [request_id, request.kind, request.target, request.near_duplicates, request.near_threshold,
             request.requester, request.reason, received_at, received_at],
        )


def file_request(catalog: Catalog, request: DeletionRequest | dict, *, now: Optional[datetime] = None) -> str:
    """Validate and record a request (status ``received``); returns its request id. Filing the same
    request with the same ``now`` twice records it once."""
    req = parse_request(request)
    received_at = _utc(now)
    request_id = request_id_for(req, received_at)
    _insert(catalog, request_id, req, received_at)
    return request_id


# --- drop folder ------------------------------------------------------------------------------


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise DeletionRequestError(f"{k}: given twice")
        out[k] = v
    return out


def _parse_file(data: bytes) -> DeletionRequest:
    if len(data) > MAX_REQUEST_FILE_BYTES:
        raise DeletionRequestError(f"file: larger than {MAX_REQUEST_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DeletionRequestError("file: not UTF-8") from None
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise DeletionRequestError(f"file: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    return parse_request(obj)


def _redacted(data: bytes) -> Optional[bytes]:
    """The file with ``content_text`` replaced by its digest, or None if it cannot be parsed."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    text = obj.pop("content_text", None)
    if isinstance(text, str):
        obj["content_text_redacted"] = f"sha256 {content_digest(text)} (text not kept)"
    elif text is not None:
        obj["content_text_redacted"] = "not a string (not kept)"
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=2).encode("utf-8") + b"\n"


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _destination(directory: Path, name: str, tag: str, content: bytes) -> Path:
    """``directory/name``, unless a different file is already there (then the name gets ``tag``)."""
    dest = directory / name
    try:
        if not dest.exists() or dest.read_bytes() == content:
            return dest
    except OSError:
        pass
    stem, dot, suffix = name.rpartition(".")
    return directory / (f"{stem}.{tag}.{suffix}" if dot else f"{name}.{tag}")


def _archive(path: Path, dest: Path, data: bytes, replacement: Optional[bytes]) -> None:
    """Move ``path`` to ``dest`` (or write ``replacement`` there and remove ``path``)."""
    if replacement is None:
        os.replace(path, dest)
    else:
        atomic_write_text(dest, replacement.decode("utf-8"), mode=0o600)
        path.unlink(missing_ok=True)


def _reject(folder: Path, path: Path, data: bytes, error: str) -> str:
    """Move a rejected file aside with its error file; returns the error (plus a note if it could
    not be moved — it is then reported again on the next load)."""
    try:
        _move_rejected(folder, path, data, error)
    except FileNotFoundError:
        pass  # another loader took it
    except OSError as exc:
        return f"{error} (could not move it to rejected/: {exc.strerror or exc})"
    return error


def _move_rejected(folder: Path, path: Path, data: bytes, error: str) -> None:
    rejected = _private_dir(folder / "rejected")
    replacement: Optional[bytes] = None
    note = ""
    if b"content_text" in data:
        replacement = _redacted(data)
        if replacement is None:
            note = "the file was not kept because it may hold content_text; fix it and submit it again\n"
    dest = _destination(rejected, path.name, sha256_bytes(data)[:12], data if replacement is None else replacement)
    lines = f"file: {path.name}\nsha256: {sha256_bytes(data)}\nerror: {error}\n{note}"
    atomic_write_text(dest.with_name(dest.name + ".error.txt"), lines, mode=0o600)
    if note:
        path.unlink(missing_ok=True)
    else:
        _archive(path, dest, data, replacement)


def load_drop_folder(
    catalog: Catalog, folder: Path | str, *, now: Optional[datetime] = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """File every ``*.json`` request in ``folder``; returns (accepted request ids, [(file name, error)]).

    Accepted files go to ``folder/processed/``, rejected ones to ``folder/rejected/`` with a
    ``<name>.error.txt``. Filing is idempotent per file (name + bytes), so a crash between filing
    and moving never files a request twice."""
    folder = Path(folder)
    accepted: list[str] = []
    rejected: list[tuple[str, str]] = []
    received_at = _utc(now)
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            if path.is_symlink() or not path.is_file():
                raise DeletionRequestError("file: not a regular file")
            if path.stat().st_size > MAX_REQUEST_FILE_BYTES:
                raise DeletionRequestError(f"file: larger than {MAX_REQUEST_FILE_BYTES} bytes")
            data = path.read_bytes()
        except FileNotFoundError:
            continue  # another loader took it
        except DeletionRequestError as exc:
            rejected.append((path.name, _reject(folder, path, b"", str(exc))))
            continue
        try:
            request = _parse_file(data)
        except DeletionRequestError as exc:
            rejected.append((path.name, _reject(folder, path, data, str(exc))))
            continue
        request_id = _file_request_id(path.name, data)
        _insert(catalog, request_id, request, received_at)
        processed = _private_dir(folder / "processed")
        replacement = _redacted(data) if b"content_text" in data else None
        try:
            dest = _destination(processed, path.name, request_id, data if replacement is None else replacement)
            _archive(path, dest, data, replacement)
        except FileNotFoundError:
            pass  # moved by a concurrent loader after both filed the same id
        accepted.append(request_id)
    return accepted, rejected


# --- reading and status -----------------------------------------------------------------------


def _rows(catalog: Catalog, where: str, params: list) -> list[FiledRequest]:
    with catalog.transaction() as conn:
        rows = conn.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM deletion_requests {where} ORDER BY received_at, request_id", params
        ).fetchall()
    return [FiledRequest.model_validate(dict(zip(_COLUMNS, r))) for r in rows]


def get(catalog: Catalog, request_id: str) -> Optional[FiledRequest]:
    rows = _rows(catalog, "WHERE request_id = ?", [request_id])
    return rows[0] if rows else None


def pending(catalog: Catalog, statuses: Iterable[str] = OPEN_STATUSES) -> list[FiledRequest]:
    """Requests in one of ``statuses`` (default: the open ones), oldest first."""
    statuses = list(statuses)
    for s in statuses:
        if s not in STATUSES:
            raise ValueError(f"statuses: unknown status {s!r} (one of {', '.join(STATUSES)})")
    if not statuses:
        return []
    return _rows(catalog, f"WHERE status IN ({', '.join('?' for _ in statuses)})", statuses)


def set_status(
    catalog: Catalog, request_id: str, status: str, detail: str, generation: Optional[int] = None
) -> FiledRequest:
    """Set a request's status and detail (and its tombstone generation when given); ``KeyError`` for an
    unknown request."""
    if status not in STATUSES:
        raise ValueError(f"status: unknown status {status!r} (one of {', '.join(STATUSES)})")
    if not isinstance(detail, str):
        raise ValueError("detail: must be a string")
    if generation is not None and (not isinstance(generation, int) or generation < 1):
        raise ValueError("generation: must be a positive integer")
    now = datetime.now(timezone.utc)
    with catalog.transaction() as conn:
        found = conn.execute("SELECT count(*) FROM deletion_requests WHERE request_id = ?", [request_id]).fetchone()[0]
        if not found:
            raise KeyError(f"request_id: no deletion request {request_id!r}")
        conn.execute(
            "UPDATE deletion_requests SET status = ?, status_detail = ?, generation = coalesce(?, generation), "
            "updated_at = ? WHERE request_id = ?",
            [status, detail[:MAX_DETAIL], generation, now, request_id],
        )
    filed = get(catalog, request_id)
    assert filed is not None
    return filed
