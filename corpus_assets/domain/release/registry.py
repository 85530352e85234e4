"""The release registry and consumption records, on the control-plane catalog.

The file system says what a release version *contains*; the registry says its *status*
(``published``, ``superseded``, ``revoked``) and which training runs consumed it, so a deletion
request can name the runs a revoked version affects. One published version per release;
writes are idempotent and each function is one catalog transaction; revocations never forget a
recorded consumer; consuming a revoked or superseded version is refused unless ``force=True``
(and the record's note then says so).

``reconcile`` makes the registry agree with the release directories (or, with an object-store
data root, with the bucket): run it before anything trusts the registry, since a crash between
publishing a build and registering it leaves CURRENT and the registry disagreeing.

Tables, calls and decisions: docs/releases.md#registry-and-consumption-records
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

from corpus_assets.domain.core.data_root import RELEASES, DataRoot
from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.core.keys import InvalidKeyError, PathEscapeError, confine, validate_release_name
from corpus_assets.domain.release.mirror import REVOKED_NAME, build_ids_under, revoked_in_index, revoked_index_key
from corpus_assets.domain.release.publish import CURRENT_NAME, MANIFEST_NAME, validate_build_id

if TYPE_CHECKING:  # the object store is only needed when a caller passes one
    from corpus_assets.domain.storage.object_store import ObjectStore

__all__ = [
    "PUBLISHED",
    "SUPERSEDED",
    "REVOKED",
    "RegistryError",
    "UnknownReleaseError",
    "RevokedReleaseError",
    "RegistryConflictError",
    "SupersededReleaseError",
    "Reconciliation",
    "MAX_RUN_ID_LENGTH",
    "validate_run_id",
    "read_revocation_note",
    "reconcile",
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


class SupersededReleaseError(RegistryError):
    """The version is superseded by a later published one (the message names it)."""


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


MAX_RUN_ID_LENGTH = 200
_RUN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]*")


def validate_run_id(value: object, field: str = "run_id") -> str:
    """A training run id as recorded in ``consumption``: 1-200 characters from letters, digits and
    ``._:@+-``, starting with a letter or digit; never whitespace, control characters, path
    separators or ``..``. ``field`` names the argument in the error (e.g. ``--run-id``)."""
    if not isinstance(value, str):
        raise RegistryError(f"invalid {field}: must be a string, got {type(value).__name__}")
    shown = repr(value if len(value) <= 80 else value[:77] + "...")
    if not value:
        why = "it is empty"
    elif len(value) > MAX_RUN_ID_LENGTH:
        why = f"it is {len(value)} characters long (at most {MAX_RUN_ID_LENGTH})"
    elif any(ord(c) < 32 or ord(c) == 127 for c in value):
        why = "it contains a newline or another control character"
    elif any(c.isspace() for c in value):
        why = "it contains whitespace"
    elif "/" in value or "\\" in value:
        why = "it contains a path separator"
    elif ".." in value:
        why = "it contains '..'"
    elif not _RUN_ID_RE.fullmatch(value):
        why = "only letters, digits and '._:@+-' are allowed, starting with a letter or digit"
    else:
        return value
    raise RegistryError(
        f"invalid {field} {shown}: {why} (use 1-{MAX_RUN_ID_LENGTH} characters from letters, digits and "
        "'._:@+-', starting with a letter or digit)"
    )


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
    force: bool = False,
    allow_revoked: bool = False,
) -> dict:
    """Record that training run ``run_id`` consumed (release, build_id). Idempotent per (run, release, build).

    A revoked or superseded build is refused unless ``force=True`` (``allow_revoked=True``, the
    older spelling, forces a revoked build only); a forced record's note starts with
    ``forced: consumed a <status> build``, so it is never silent."""
    validate_run_id(run_id)
    validate_release_name(release)
    _check_id("build_id", build_id)
    _check_id("consumer", consumer)
    with catalog.transaction() as conn:
        row = _require(conn, release, build_id)
        status = row["status"]
        if status == REVOKED and not (force or allow_revoked):
            succ = row["successor_build_id"]
            raise RevokedReleaseError(
                f"release {release!r}: build {build_id} is revoked"
                + (f"; consume its successor {succ}" if succ else " and has no successor")
                + " (force it with `corpus consume --force` / force=True to record it anyway)"
            )
        if status == SUPERSEDED and not force:
            now = conn.execute(
                "SELECT build_id FROM release_registry WHERE release = ? AND status = ? ORDER BY published_at DESC",
                [release, PUBLISHED],
            ).fetchone()
            raise SupersededReleaseError(
                f"release {release!r}: build {build_id} is superseded"
                + (f"; the published build is {now[0]}" if now else " and the release has no published build")
                + " (force it with `corpus consume --force` / force=True to record it anyway)"
            )
        if status in (REVOKED, SUPERSEDED):
            forced = f"forced: consumed a {status} build"
            note = f"{forced}; {note}" if note else forced
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


# --- reconciliation with the data root ------------------------------------------------------------


@dataclass(frozen=True)
class _SealedBuild:
    build_id: str
    content_digest: str
    created_at: Optional[datetime]
    revocation: Optional[dict]  # what REVOKED.json says; None when the build is not revoked (or was not asked)


@dataclass
class _ReleaseOnDisk:
    current: Optional[str] = None  # the build id CURRENT names
    builds: dict = field(default_factory=dict)  # build id -> _SealedBuild, for every build whose manifest was read
    revocations: dict = field(default_factory=dict)  # build id -> REVOKED.json note, registered builds not read


@dataclass(frozen=True)
class Reconciliation:
    """What ``reconcile`` changed and what it could not settle.

    ``changes``: ``{"release", "build_id", "from", "to", "why"}`` (``from`` None: newly registered).
    ``problems``: ``{"release", "build_id", "problem"}`` (``build_id`` None: the release itself,
    e.g. an unreadable CURRENT); their rows are left as they were.
    ``manifests_read``: sealed manifests read (the new builds, CURRENT's, and with ``audit`` every one)."""

    changes: tuple = ()
    problems: tuple = ()
    manifests_read: int = field(default=0, compare=False)  # what it cost, not what it found

    def problems_of(self, release: str, build_id: Optional[str] = None) -> list[dict]:
        """Problems of ``release`` as a whole (e.g. its CURRENT) and of its build ``build_id``."""
        return [p for p in self.problems
                if p["release"] == release and (p["build_id"] is None or p["build_id"] == build_id)]

    def lines(self) -> list[str]:
        out = [f"reconciled release {c['release']} build {c['build_id'][:16]}: "
               f"{c['from'] or 'unregistered'} -> {c['to']} ({c['why']})" for c in self.changes]
        out += [f"registry and data root disagree: release {p['release']}"
                + (f" build {p['build_id'][:16]}" if p["build_id"] else "") + f": {p['problem']}" for p in self.problems]
        return out


def read_revocation_note(raw: Optional[bytes]) -> Optional[dict]:
    """A build's ``REVOKED.json`` as a dict (``{}`` when unreadable: still revoked), None when absent."""
    if raw is None:
        return None
    try:
        note = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    return note if isinstance(note, dict) else {}


def _parse_time(value: object) -> Optional[datetime]:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def _revocation(release: str, bid: str, raw: Optional[bytes], problems: list) -> Optional[dict]:
    note = read_revocation_note(raw)
    if note == {}:
        problems.append({"release": release, "build_id": bid,
                         "problem": f"{REVOKED_NAME} is unreadable; the build is treated as revoked"})
    return note


def _sealed_build(release: str, bid: str, manifest_raw: bytes, revoked_raw: Optional[bytes],
                  problems: list) -> Optional[_SealedBuild]:
    try:
        manifest = json.loads(manifest_raw)
        digest = manifest["content_digest"]
        validate_build_id(digest)  # a content digest has the same shape: 64 lowercase hex digits
        if manifest["build_id"] != bid:
            raise ValueError(f"its manifest names build {manifest['build_id']!r}")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        problems.append({"release": release, "build_id": bid,
                         "problem": f"{MANIFEST_NAME} is not a sealed release manifest ({exc}); not registered"})
        return None
    return _SealedBuild(bid, digest, _parse_time(manifest.get("created_at")),
                        _revocation(release, bid, revoked_raw, problems))


class _LocalBuilds:
    """The release directories under a local releases root (the authority without an object store)."""

    def __init__(self, releases_root: Union[str, Path]) -> None:
        self.root = Path(releases_root)

    def releases(self) -> list[str]:
        if not self.root.is_dir():
            return []
        out = []
        for rdir in sorted(self.root.iterdir()):
            if rdir.name.startswith(".") or not rdir.is_dir():
                continue
            try:
                validate_release_name(rdir.name)
                confine(self.root, rdir)
            except (InvalidKeyError, PathEscapeError):
                continue  # not a release directory this project wrote
            out.append(rdir.name)
        return out

    def current(self, release: str) -> Optional[bytes]:
        return _read(self.root / release / CURRENT_NAME)

    def builds(self, release: str) -> list[str]:
        out = []
        for entry in sorted(os.scandir(self.root / release), key=lambda e: e.name):
            try:
                validate_build_id(entry.name)
            except ValueError:
                continue  # CURRENT, staging (.tmp-*), conflict diagnostics
            if entry.is_dir(follow_symlinks=False):
                out.append(entry.name)
        return out

    def manifest(self, release: str, bid: str) -> Optional[bytes]:
        return _read(self.root / release / bid / MANIFEST_NAME)

    def revoked(self, release: str, bid: str) -> Optional[bytes]:
        return _read(self.root / release / bid / REVOKED_NAME)

    def revoked_registered(self, release: str, bid: str) -> Optional[bytes]:
        """The revocation note of a registered build (a stat when there is none)."""
        return self.revoked(release, bid)

    def where(self, release: str) -> str:
        return str(self.root / release)


class _RemoteBuilds:
    """The releases in an object-store data root (the authority there: a build only this machine's
    cache holds does not count)."""

    def __init__(self, remote: "ObjectStore") -> None:
        self.remote = remote
        self._index: dict[str, set] = {}

    def releases(self) -> list[str]:
        out = []
        for name in self.remote.list_dir(RELEASES):
            try:
                validate_release_name(name)
            except InvalidKeyError:
                continue
            out.append(name)
        return out

    def current(self, release: str) -> Optional[bytes]:
        return self.remote.read_bytes(f"{DataRoot.release_key(release)}/{CURRENT_NAME}")

    def builds(self, release: str) -> list[str]:
        return build_ids_under(self.remote, DataRoot.release_key(release))

    def manifest(self, release: str, bid: str) -> Optional[bytes]:
        return self.remote.read_bytes(f"{DataRoot.release_key(release, bid)}/{MANIFEST_NAME}")

    def revoked(self, release: str, bid: str) -> Optional[bytes]:
        return self.remote.read_bytes(f"{DataRoot.release_key(release, bid)}/{REVOKED_NAME}")

    def revoked_registered(self, release: str, bid: str) -> Optional[bytes]:
        """The revocation note of a registered build, from the release's revocation index (one
        listing per release, not a read per build); a build revoked before the index existed is
        found by the audit, which reads its REVOKED.json."""
        if release not in self._index:
            self._index[release] = revoked_in_index(self.remote, release)
        if bid not in self._index[release]:
            return None
        return self.remote.read_bytes(revoked_index_key(release, bid)) or self.revoked(release, bid)

    def where(self, release: str) -> str:
        return self.remote.uri(DataRoot.release_key(release))


def _read(path: Path) -> Optional[bytes]:
    try:
        return path.read_bytes() if path.is_file() else None
    except FileNotFoundError:
        return None


def _observe(root, known: dict, audit: bool, problems: list) -> tuple[dict[str, _ReleaseOnDisk], int]:
    """What the data root says, reading only what can change the registry: CURRENT, the manifest of
    every build the registry lacks and of the build CURRENT names, and whether a registered build
    not yet revoked has a revocation note (locally a stat of its ``REVOKED.json``; in a bucket one
    listing of the release's revocation index). A registered build's sealed manifest is immutable (its build
    id names its spec, its row holds its content digest), so it is read again only with ``audit``:
    a release rebuilt hourly for a year has thousands of builds, and reading them all on every
    release run and deletion-sensor tick made both grow with the release's history."""
    out: dict[str, _ReleaseOnDisk] = {}
    read = 0
    for release in root.releases():
        state = out.setdefault(release, _ReleaseOnDisk())
        raw = root.current(release)
        if raw is not None:
            text = raw.decode("utf-8", "replace").strip()
            try:
                state.current = validate_build_id(text)
            except ValueError:
                problems.append({"release": release, "build_id": None,
                                 "problem": f"{root.where(release)}/{CURRENT_NAME} does not hold a build id ({text[:80]!r})"})
        for bid in root.builds(release):
            status = known.get((release, bid))
            if status is None or audit or bid == state.current:
                manifest = root.manifest(release, bid)
                if manifest is None:
                    continue  # not sealed: staging, or an upload in progress or abandoned; nobody reads it
                read += 1
                b = _sealed_build(release, bid, manifest, root.revoked(release, bid) if status != REVOKED else None,
                                  problems)
                if b is not None:
                    state.builds[bid] = b
            elif status != REVOKED:
                note = _revocation(release, bid, root.revoked_registered(release, bid), problems)
                if note is not None:
                    state.revocations[bid] = note
    return out, read


def _runs_of(conn, release: str, build_id: str) -> set:
    return {r[0] for r in conn.execute(
        "SELECT run_id FROM consumption WHERE release = ? AND build_id = ?", [release, build_id]).fetchall()}


def _revocation_of(conn, release: str, build_id: str, note: Optional[dict]) -> tuple:
    """(revoked_at, successor, revocation_json) from the build's REVOKED.json, runs united with its consumers."""
    note = note or {}
    successor = note.get("successor_build_id")
    try:
        successor = validate_build_id(successor) if successor is not None and successor != build_id else None
    except ValueError:
        successor = None
    request_ids = note.get("request_ids")
    request_ids = sorted({str(r) for r in request_ids}) if isinstance(request_ids, list) else []
    runs = sorted(_runs_of(conn, release, build_id))
    text = note.get("note") if isinstance(note.get("note"), str) else ""
    revocation = {"request_ids": request_ids, "affected_runs": runs, "note": text}
    return _parse_time(note.get("revoked_at")) or _now(), successor, json.dumps(revocation, sort_keys=True)


def _mark_revoked(conn, release: str, bid: str, note: dict, row: dict, changes: list) -> None:
    revoked_at, successor, revocation_json = _revocation_of(conn, release, bid, note)
    conn.execute(
        "UPDATE release_registry SET status = ?, revoked_at = ?, successor_build_id = ?, revocation_json = ? "
        "WHERE release = ? AND build_id = ?",
        [REVOKED, revoked_at, successor, revocation_json, release, bid],
    )
    changes.append({"release": release, "build_id": bid, "from": row["status"], "to": REVOKED,
                    "why": f"its directory holds {REVOKED_NAME}"})


def _reconcile_release(conn, release: str, state: _ReleaseOnDisk, changes: list, problems: list) -> None:
    rows = {r[1]: _registry_row(r) for r in conn.execute(
        f"SELECT {', '.join(_REGISTRY_COLS)} FROM release_registry WHERE release = ?", [release]).fetchall()}
    settled = set()
    for bid, b in sorted(state.builds.items()):
        row = rows.get(bid)
        if row is not None and row["content_digest"] != b.content_digest:
            problems.append({"release": release, "build_id": bid, "problem": (
                f"registered with content digest {row['content_digest']}, but its sealed manifest says "
                f"{b.content_digest}; the row is left as it is")})
            continue
        settled.add(bid)
        if row is None:
            status = REVOKED if b.revocation is not None else SUPERSEDED
            revoked_at, successor, revocation_json = (_revocation_of(conn, release, bid, b.revocation)
                                                      if status == REVOKED else (None, None, None))
            conn.execute(
                "INSERT INTO release_registry VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [release, bid, b.content_digest, DataRoot.release_key(release, bid), status,
                 b.created_at or _now(), revoked_at, successor, revocation_json],
            )
            changes.append({"release": release, "build_id": bid, "from": None, "to": status,
                            "why": f"its directory holds {REVOKED_NAME}" if status == REVOKED
                            else "a sealed build the registry did not know"})
        elif b.revocation is not None and row["status"] != REVOKED:
            _mark_revoked(conn, release, bid, b.revocation, row, changes)
    for bid, note in sorted(state.revocations.items()):
        row = rows.get(bid)
        if row is not None and row["status"] != REVOKED:  # (rows are never deleted: it is there)
            _mark_revoked(conn, release, bid, note, row, changes)
    current = state.current
    if current is None:
        return
    if current not in state.builds:
        if not any(p["build_id"] == current for p in problems if p["release"] == release):
            problems.append({"release": release, "build_id": None,
                             "problem": f"{CURRENT_NAME} names build {current}, which has no sealed build directory"})
        return
    if current not in settled:
        problems.append({"release": release, "build_id": None,
                         "problem": f"{CURRENT_NAME} names build {current}, whose registry row disagrees with it"})
        return
    # CURRENT is what consumers read: no other build is the published one
    for r in conn.execute(
            "SELECT build_id FROM release_registry WHERE release = ? AND status = ? AND build_id <> ? ORDER BY build_id",
            [release, PUBLISHED, current]).fetchall():
        conn.execute("UPDATE release_registry SET status = ? WHERE release = ? AND build_id = ?",
                     [SUPERSEDED, release, r[0]])
        changes.append({"release": release, "build_id": r[0], "from": PUBLISHED, "to": SUPERSEDED,
                        "why": f"{CURRENT_NAME} names {current[:16]}"})
    status = conn.execute("SELECT status FROM release_registry WHERE release = ? AND build_id = ?",
                          [release, current]).fetchone()[0]
    if status == SUPERSEDED:
        conn.execute("UPDATE release_registry SET status = ? WHERE release = ? AND build_id = ?",
                     [PUBLISHED, release, current])
        changes.append({"release": release, "build_id": current,
                        "from": None if rows.get(current) is None else SUPERSEDED, "to": PUBLISHED,
                        "why": f"{CURRENT_NAME} names it"})
    # (a revoked build CURRENT still names stays revoked: a revocation is never undone)


def reconcile(catalog: Catalog, releases_root: Union[str, Path], remote: Optional["ObjectStore"] = None, *,
              audit: bool = False) -> Reconciliation:
    """Make the registry agree with the published builds: the release directories under
    ``releases_root`` or, with ``remote`` (an object-store data root), the bucket, which is the
    authority there.

    * the build CURRENT names is registered and ``published`` (any other ``published`` row of the
      release becomes ``superseded``) — unless it is revoked, which is never undone;
    * every other sealed build (a build directory with its ``manifest.json``) the registry lacks is
      registered ``superseded``;
    * a build holding ``REVOKED.json`` is ``revoked``, with its successor, request ids, note and
      time from that file, and every recorded consumer as an affected run;
    * a registered build whose directory is gone stays as it is; rows are never deleted; a row
      whose content digest disagrees with the build's manifest is left alone and reported — for
      CURRENT's build always, for the other registered builds with ``audit`` (``corpus releases
      --audit``), which reads every sealed manifest.

    Reads pointers, the manifests of new builds and of CURRENT's, and the revocation notes of
    builds not yet revoked (no artifact is hashed, no registered manifest is read again without
    ``audit``), writes in one catalog transaction, and a second call changes nothing. Paths are
    registered as ``releases/<release>/<build_id>`` (relative to the data root, as
    ``release_manifest`` registers them)."""
    root = _RemoteBuilds(remote) if remote is not None else _LocalBuilds(releases_root)
    with catalog.transaction() as conn:
        known = {(r, b): s for r, b, s in conn.execute("SELECT release, build_id, status FROM release_registry").fetchall()}
    problems: list[dict] = []
    observed, read = _observe(root, known, audit, problems)
    changes: list[dict] = []
    if observed:
        with catalog.transaction() as conn:
            for release, state in sorted(observed.items()):
                _reconcile_release(conn, release, state, changes, problems)
    return Reconciliation(tuple(changes), tuple(problems), read)
