"""The release registry and consumption records, on the control-plane catalog.

The file system says what a release version *contains*; the registry says its *status*
(``published``, ``superseded``, ``revoked``) and which training runs consumed it, so a deletion
request can name the runs a revoked version affects. One published version per release;
writes are idempotent and each function is one catalog transaction; revocations never forget a
recorded consumer; consuming a revoked version is refused unless ``allow_revoked=True``.

Tables, calls and decisions: docs/releases.md#registry-and-consumption-records
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.core.keys import validate_release_name

__all__ = [
    "PUBLISHED",
    "SUPERSEDED",
    "REVOKED",
    "RegistryError",
    "UnknownReleaseError",
    "RevokedReleaseError",
    "RegistryConflictError",
    "register_published",
    "revoke",
    "registry",
    "current_published",
    "record_consumption",
    "consumers",
]

PUBLISHED = "published"
SUPERSEDED = "superseded"
REVOKED = "revoked"

_REGISTRY_COLS = [
    "release",
    "build_id",
    "content_digest",
    "path",
    "status",
    "published_at",
    "revoked_at",
    "successor_build_id",
    "revocation_json",
]
_CONSUMPTION_COLS = ["run_id", "release", "build_id", "consumer", "consumed_at", "note"]


class RegistryError(CorpusError, ValueError):
    """A registry operation refused (the message names release and build id)."""


class UnknownReleaseError(RegistryError):
    """The (release, build_id) is not registered."""


class RevokedReleaseError(RegistryError):
    """The version is revoked (the message names its successor)."""


class RegistryConflictError(RegistryError):
    """The request contradicts what is registered (other content digest, other successor)."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat()
    return str(value)


def _registry_row(r: Sequence[Any]) -> dict:
    d = dict(zip(_REGISTRY_COLS, r))
    rev = json.loads(d.pop("revocation_json")) if d["revocation_json"] else {}
    d["published_at"] = _iso(d["published_at"])
    d["revoked_at"] = _iso(d["revoked_at"])
    d["request_ids"] = rev.get("request_ids", [])
    d["affected_runs"] = rev.get("affected_runs", [])
    d["note"] = rev.get("note", "")
    return d


def _consumption_row(r: Sequence[Any]) -> dict:
    d = dict(zip(_CONSUMPTION_COLS, r))
    d["consumed_at"] = _iso(d["consumed_at"])
    return d


def _get(conn, release: str, build_id: str) -> Optional[dict]:
    row = conn.execute(
        f"SELECT {', '.join(_REGISTRY_COLS)} FROM release_registry WHERE release = ? AND build_id = ?",
        [release, build_id],
    ).fetchone()
    return None if row is None else _registry_row(row)


def _require(conn, release: str, build_id: str, what: str = "build") -> dict:
    row = _get(conn, release, build_id)
    if row is None:
        raise UnknownReleaseError(f"release {release!r}: {what} {build_id} is not registered (publish and register it first)")
    return row


def _check_id(field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise RegistryError(f"{field} must be a non-empty string, got {value!r}")
    return value


# --- releases -----------------------------------------------------------------------------------


def register_published(
    catalog: Catalog, release: str, build_id: str, content_digest: str, path: Union[str, Path]
) -> dict:
    """Register a published version and supersede the release's previously published one."""
    validate_release_name(release)
    _check_id("build_id", build_id)
    _check_id("content_digest", content_digest)
    path_s = Path(path).as_posix() if isinstance(path, Path) else _check_id("path", path)
    with catalog.transaction() as conn:
        existing = _get(conn, release, build_id)
        if existing is not None:
            if existing["content_digest"] != content_digest:
                raise RegistryConflictError(
                    f"release {release!r}: build {build_id} is registered with content digest "
                    f"{existing['content_digest']}, not {content_digest}"
                )
            if existing["path"] != path_s:
                raise RegistryConflictError(
                    f"release {release!r}: build {build_id} is registered at path {existing['path']!r}, not {path_s!r}"
                )
            if existing["status"] == REVOKED:
                raise RevokedReleaseError(
                    f"release {release!r}: build {build_id} was revoked"
                    + (f" (successor {existing['successor_build_id']})" if existing["successor_build_id"] else "")
                    + "; a revoked version is not published again — build a successor"
                )
            if existing["status"] == PUBLISHED:
                return existing  # idempotent no-op
        conn.execute(
            "UPDATE release_registry SET status = ? WHERE release = ? AND status = ? AND build_id <> ?",
            [SUPERSEDED, release, PUBLISHED, build_id],
        )
        if existing is None:
            conn.execute(
                "INSERT INTO release_registry VALUES (?, ?, ?, ?, ?, ?, NULL, NULL, NULL)",
                [release, build_id, content_digest, path_s, PUBLISHED, _now()],
            )
        else:  # a superseded build published again (rollback)
            conn.execute(
                "UPDATE release_registry SET status = ? WHERE release = ? AND build_id = ?",
                [PUBLISHED, release, build_id],
            )
        return _get(conn, release, build_id)  # type: ignore[return-value]


def revoke(
    catalog: Catalog,
    release: str,
    build_id: str,
    *,
    successor_build_id: Optional[str],
    request_ids: Sequence[str],
    affected_runs: Optional[Sequence[str]] = None,
    note: str = "",
) -> dict:
    """Revoke a version, pointing at its successor; stores request ids and affected runs.

    ``affected_runs`` is united with every run recorded as a consumer of the build."""
    validate_release_name(release)
    _check_id("build_id", build_id)
    request_ids = sorted({_check_id("request id", r) for r in request_ids})
    given_runs = {_check_id("run id", r) for r in (affected_runs or [])}
    with catalog.transaction() as conn:
        row = _require(conn, release, build_id)
        if successor_build_id is not None:
            if successor_build_id == build_id:
                raise RegistryError(f"release {release!r}: build {build_id} cannot be its own successor")
            succ = _require(conn, release, successor_build_id, what="successor build")
            if succ["status"] == REVOKED:
                raise RevokedReleaseError(
                    f"release {release!r}: successor {successor_build_id} is itself revoked; name a live successor"
                )
        recorded = {
            r[0]
            for r in conn.execute(
                "SELECT run_id FROM consumption WHERE release = ? AND build_id = ?", [release, build_id]
            ).fetchall()
        }
        runs = given_runs | recorded
        if row["status"] == REVOKED:
            if row["successor_build_id"] != successor_build_id:
                raise RegistryConflictError(
                    f"release {release!r}: build {build_id} is already revoked with successor "
                    f"{row['successor_build_id']}, not {successor_build_id}"
                )
            merged_req = sorted(set(row["request_ids"]) | set(request_ids))
            merged_runs = sorted(set(row["affected_runs"]) | runs)
            merged_note = row["note"]
            if note and note not in merged_note.split("\n"):
                merged_note = f"{merged_note}\n{note}" if merged_note else note
            if (merged_req, merged_runs, merged_note) == (row["request_ids"], row["affected_runs"], row["note"]):
                return row  # idempotent no-op
            revocation = {"request_ids": merged_req, "affected_runs": merged_runs, "note": merged_note}
            conn.execute(
                "UPDATE release_registry SET revocation_json = ? WHERE release = ? AND build_id = ?",
                [json.dumps(revocation, sort_keys=True), release, build_id],
            )
        else:
            revocation = {"request_ids": request_ids, "affected_runs": sorted(runs), "note": note}
            conn.execute(
                "UPDATE release_registry SET status = ?, revoked_at = ?, successor_build_id = ?, revocation_json = ? "
                "WHERE release = ? AND build_id = ?",
                [REVOKED, _now(), successor_build_id, json.dumps(revocation, sort_keys=True), release, build_id],
            )
        return _get(conn, release, build_id)  # type: ignore[return-value]


def registry(catalog: Catalog, release: Optional[str] = None) -> list[dict]:
    """Every registered version (of one release, or all), oldest first."""
    sql = f"SELECT {', '.join(_REGISTRY_COLS)} FROM release_registry"
    params: list = []
    if release is not None:
        validate_release_name(release)
        sql += " WHERE release = ?"
        params.append(release)
    with catalog.transaction() as conn:
        rows = conn.execute(sql + " ORDER BY release, published_at, build_id", params).fetchall()
    return [_registry_row(r) for r in rows]


def current_published(catalog: Catalog, release: str) -> Optional[dict]:
    """The release's ``published`` version, or None (never published, or revoked without successor)."""
    validate_release_name(release)
    with catalog.transaction() as conn:
        rows = conn.execute(
            f"SELECT {', '.join(_REGISTRY_COLS)} FROM release_registry WHERE release = ? AND status = ? "
            "ORDER BY published_at DESC, build_id",
            [release, PUBLISHED],
        ).fetchall()
    return _registry_row(rows[0]) if rows else None


# --- consumption ----------------------------------------------------------------------------------


def record_consumption(
    catalog: Catalog,
    run_id: str,
    release: str,
    build_id: str,
    consumer: str,
    note: str = "",
    *,
    allow_revoked: bool = False,
) -> dict:
    """Record that training run ``run_id`` consumed (release, build_id). Idempotent per (run, release, build)."""
    _check_id("run_id", run_id)
    validate_release_name(release)
    _check_id("build_id", build_id)
    _check_id("consumer", consumer)
    with catalog.transaction() as conn:
        row = _require(conn, release, build_id)
        if row["status"] == REVOKED and not allow_revoked:
            succ = row["successor_build_id"]
            raise RevokedReleaseError(
                f"release {release!r}: build {build_id} is revoked"
                + (f"; consume its successor {succ}" if succ else " and has no successor")
                + " (pass allow_revoked=True to record it anyway)"
            )
        conn.execute(
            "INSERT INTO consumption VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            [run_id, release, build_id, consumer, _now(), note],
        )
        got = conn.execute(
            f"SELECT {', '.join(_CONSUMPTION_COLS)} FROM consumption WHERE run_id = ? AND release = ? AND build_id = ?",
            [run_id, release, build_id],
        ).fetchone()
    return _consumption_row(got)


def consumers(catalog: Catalog, release: str, build_id: Optional[str] = None) -> list[dict]:
    """Consumption records of a release (or of one of its builds), oldest first."""
    validate_release_name(release)
    sql = f"SELECT {', '.join(_CONSUMPTION_COLS)} FROM consumption WHERE release = ?"
    params: list = [release]
    if build_id is not None:
        sql += " AND build_id = ?"
        params.append(build_id)
    with catalog.transaction() as conn:
        rows = conn.execute(sql + " ORDER BY consumed_at, run_id, build_id", params).fetchall()
    return [_consumption_row(r) for r in rows]
