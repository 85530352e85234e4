"""Validation of identifiers that end up in file paths: source ids, snapshot keys, release names.

Every id is checked here before it touches a path, so a hostile partition key or source id
(path separators, ``..``, control characters, absurd lengths) is refused with a clear error
instead of escaping the data root.
"""

from __future__ import annotations

import os
import re
import stat
from datetime import datetime, timezone
from pathlib import Path

from corpus_assets.domain.core.errors import CorpusError

MAX_ID_LENGTH = 64
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_SNAPSHOT_TIME_FORMAT = "%Y%m%dT%H%M%S"
_SNAPSHOT_RE = re.compile(r"^(?P<source>[a-z0-9][a-z0-9_-]{0,63})\.(?P<ts>\d{8}T\d{6})$")


class InvalidKeyError(CorpusError, ValueError):
    """An identifier that would be unsafe or ambiguous as a path component."""


class PathEscapeError(CorpusError, ValueError):
    """A path that resolves outside the root it is confined to."""


def _check_id(kind: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidKeyError(f"{kind} must be a string, got {type(value).__name__}")
    if not _ID_RE.fullmatch(value):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise InvalidKeyError(
            f"invalid {kind} {shown!r}: use 1-{MAX_ID_LENGTH} characters from a-z, 0-9, '_' and '-', "
            "starting with a letter or digit (no path separators, dots or spaces)"
        )
    return value


def validate_source_id(value: object) -> str:
    return _check_id("source id", value)


def validate_release_name(value: object) -> str:
    return _check_id("release name", value)


def snapshot_key(source_id: str, captured_at: datetime) -> str:
    """``<source_id>.<UTC timestamp>``, e.g. ``pydocs.20261129T140000``."""
    validate_source_id(source_id)
    if captured_at.tzinfo is None:
        raise InvalidKeyError("snapshot time must be timezone-aware (UTC)")
    return f"{source_id}.{captured_at.astimezone(timezone.utc).strftime(_SNAPSHOT_TIME_FORMAT)}"


def parse_snapshot_key(key: object) -> tuple[str, datetime]:
    """Split a snapshot key into (source_id, UTC time), refusing anything that is not exactly that."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"snapshot key must be a string, got {type(key).__name__}")
    m = _SNAPSHOT_RE.fullmatch(key)
    if not m:
        shown = key if len(key) <= 80 else key[:77] + "..."
        raise InvalidKeyError(
            f"invalid snapshot key {shown!r}: expected '<source_id>.<YYYYMMDDTHHMMSS>' "
            "(UTC), e.g. 'pydocs.20261129T140000'"
        )
    try:
        ts = datetime.strptime(m["ts"], _SNAPSHOT_TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError as exc:
        raise InvalidKeyError(f"invalid snapshot key {key!r}: {exc}") from None
    return m["source"], ts


def validate_snapshot_key(key: object) -> str:
    parse_snapshot_key(key)
    return key  # type: ignore[return-value]


def confine(root: Path, candidate: Path | str) -> Path:
    """Resolve ``candidate`` (relative to ``root`` if relative) and refuse it unless it stays inside ``root``.

    Symlinks are resolved first, so a link pointing out of the root is refused too.
    """
    root_resolved = Path(root).resolve()
    cand = Path(candidate)
    full = (cand if cand.is_absolute() else root_resolved / cand).resolve()
    if full != root_resolved and root_resolved not in full.parents:
        raise PathEscapeError(f"path {str(candidate)!r} resolves outside its root {str(root_resolved)!r}")
    return full


def confine_plain(real_root: Path, rel: str) -> Path:
    """``confine(real_root, rel)`` for a ``rel`` of plain names (no empty, ``.`` or ``..`` parts;
    the caller checked) under an already resolved root: one ``lstat`` per component of ``rel``
    instead of resolving the root and the whole path on every call; a symlink on the way is
    resolved and checked by ``confine``. Release verification confines every artifact this way."""
    p = Path(real_root)
    for part in rel.split("/"):
        p = p / part
        try:
            mode = os.lstat(p).st_mode
        except FileNotFoundError:
            return p  # nothing there to follow (the caller reports it missing)
        if stat.S_ISLNK(mode):
            return confine(real_root, rel)
    return p
