"""Idempotent, crash-safe publication of a release directory (Algorithm 18.3).

``<releases_root>/<release>/<build_id>/`` is one immutable published version (``manifest.json``,
optional ``manifest.sig`` and ``data_card.md``, the artifacts) and ``CURRENT`` names the build
consumers read; publishers stage in locked ``.tmp-<uuid>/`` directories. ``build_id`` names what
was asked for, ``content_digest`` what was produced (the manifest is never part of it). Same
build id and content → reuse (CURRENT still moves); same build id, different content → conflict,
nothing published. Stage, fsync, ``rename`` and an atomic CURRENT replace mean that a SIGKILL or
power loss at any instant leaves the previous or the new complete version (POSIX rename
semantics; object stores: ``mirror``). ``verify_release`` re-hashes a release directory.

Within one publish every artifact is read twice: hashed (and fsynced) for the manifest, then read
again by the verification of the staged copy, which is the safety check of step 4 and always reads
the bytes. What that verification read is remembered by inode (``VerifiedHashes``), so repeats in
the same process of the same hash of the same, unchanged inode are not read a third time: the
published copy after a reuse (hard links of the same shard-set files) and ``verify_release(path,
known=result.verified)`` right after the publish (the ``release_verifies`` check).

Protocol, crash argument and decisions: docs/releases.md#the-publish-protocol-algorithm-183
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Optional, Union

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.storage.dir_locks import STALE_AFTER_SECONDS, new_staging_dir, remove_abandoned
from corpus_assets.domain.storage.dir_locks import unlock as _unlock
from corpus_assets.domain.core.hashing import canonical_digest, canonical_json
from corpus_assets.domain.core.keys import PathEscapeError, confine, confine_plain, validate_release_name
from corpus_assets.domain.core.atomic_files import atomic_write_text, fsync_dir


__all__ = [
    "MANIFEST_NAME",
    "SIGNATURE_NAME",
    "DATA_CARD_NAME",
    "CURRENT_NAME",
    "CONTENT_DIGEST_FORMAT",
    "STALE_AFTER_SECONDS",
    "PublishError",
    "ReleaseConflictError",
    "ReleaseVerificationError",
    "PublishResult",
    "VerifyReport",
    "VerifiedHashes",
    "build_id",
    "validate_build_id",
    "hash_artifacts",
    "content_digest",
    "content_digest_of",
    "publish_release",
    "current_release",
    "verify_release",
]

MANIFEST_NAME = "manifest.json"
SIGNATURE_NAME = "manifest.sig"
DATA_CARD_NAME = "data_card.md"
CURRENT_NAME = "CURRENT"
CONFLICT_REPORT_NAME = "conflict.json"
CONTENT_DIGEST_FORMAT = "corpus-release-content/1"

_BUILD_ID_RE = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1 << 20

Artifact = dict  # {"path": str (relative, posix), "sha256": str, "bytes": int}


class PublishError(CorpusError, RuntimeError):
    """Publishing refused: bad input from ``stage`` / ``make_manifest``, or an unusable release root."""


class ReleaseConflictError(PublishError):
    """The same build id is already published with different content (Algorithm 18.3: stop)."""

    def __init__(self, message: str, *, build_id: str, ours: str, theirs: Optional[str], diagnostics: Path) -> None:
        super().__init__(message)
        self.build_id = build_id
        self.ours = ours
        self.theirs = theirs
        self.diagnostics = diagnostics


class ReleaseVerificationError(CorpusError, RuntimeError):
    """A release directory does not match its manifest (or its signature); the message names the file."""


@dataclass(frozen=True)
class PublishResult:
    release: str
    build_id: str
    content_digest: str
    path: Path  # <releases_root>/<release>/<build_id>
    reused: bool  # True: the build id was already published with the same content
    previous: Optional[str]  # build id CURRENT named before this call (None: no CURRENT)
    current_updated: bool  # CURRENT was (re)written by this call
    signed: bool  # the published directory has a manifest.sig
    artifacts: tuple[Artifact, ...]
    # what this publish's verification read and checked, for ``verify_release(path, known=...)``
    verified: Optional["VerifiedHashes"] = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class VerifyReport:
    path: Path
    release: Optional[str]
    build_id: str
    content_digest: str
    files: int
    bytes: int
    signed: bool  # manifest.sig present
    signature_checked: bool  # ... and verified against the given public key
    key_id: Optional[str]


# --- identities ---------------------------------------------------------------------------------


def build_id(build_spec: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON (sorted keys, UTF-8, no NaN) of the complete build spec."""
    if not isinstance(build_spec, Mapping) or not build_spec:
        raise ValueError("build spec must be a non-empty mapping (release spec, code versions, inputs, ...)")
    return canonical_digest(dict(build_spec))


def validate_build_id(value: object) -> str:
    if not isinstance(value, str) or not _BUILD_ID_RE.fullmatch(value):
        raise ValueError(f"invalid build id {value!r}: expected 64 lowercase hex digits (publish.build_id(spec))")
    return value


def _sha256_file(path: Path, *, fsync: bool = False) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
            size += len(chunk)
        if fsync:
            os.fsync(f.fileno())
    return h.hexdigest(), size


class VerifiedHashes:
    """sha256 of files this process read and found equal to a manifest entry, by inode.

    A file is looked up by ``(st_dev, st_ino)`` and used only while its size, ``st_mtime_ns`` and
    ``st_ctime_ns`` are those it had while it was read (a write, truncate, rename over or
    ``utime`` changes its ctime), and only when its timestamps were already older than the start
    of that read by more than the file system's timestamp granularity: a write in the same clock
    tick as the file's last change would leave them equal (git's "racy" entries), so such a file
    is not remembered and is read again. It makes repeats of one verification within a step cheap;
    it is never global: only a caller that holds the object (``PublishResult.verified``) skips
    reads, so ``corpus verify`` and every other ``verify_release`` call read every byte."""

    # Linux stamps files from a clock that ticks at most every 10 ms (HZ >= 100); file systems that
    # store whole seconds (ext3, FAT, some NFS servers) need the larger margin.
    FINE_MARGIN_NS = 20_000_000
    COARSE_MARGIN_NS = 2_000_000_000

    def __init__(self) -> None:
        self._files: dict[tuple[int, int], tuple[int, int, int, str]] = {}

    def __len__(self) -> int:
        return len(self._files)

    @staticmethod
    def _fingerprint(st: os.stat_result) -> tuple[int, int, int]:
        return st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def record(self, before: os.stat_result, after: os.stat_result, read_started_ns: int, sha: str) -> None:
        """Remember ``sha`` for a file whose stat was ``before`` / ``after`` around a read that began
        at ``read_started_ns`` (``time.time_ns()``), unless it may have changed unseen."""
        key = (before.st_dev, before.st_ino)
        fp = self._fingerprint(before)
        if (after.st_dev, after.st_ino) != key or self._fingerprint(after) != fp:
            self._files.pop(key, None)
            return
        coarse = before.st_mtime_ns % 1_000_000 == 0 and before.st_ctime_ns % 1_000_000 == 0
        margin = self.COARSE_MARGIN_NS if coarse else self.FINE_MARGIN_NS
        if max(before.st_mtime_ns, before.st_ctime_ns) >= read_started_ns - margin:
            self._files.pop(key, None)
            return
        self._files[key] = (*fp, sha)

    def lookup(self, st: os.stat_result) -> Optional[str]:
        """The remembered sha256 of the file with stat ``st``, or None (read it)."""
        seen = self._files.get((st.st_dev, st.st_ino))
        if seen is None or seen[:3] != self._fingerprint(st):
            return None
        return seen[3]


def _descriptor_names() -> frozenset[str]:
    return frozenset({MANIFEST_NAME, SIGNATURE_NAME})


def _rel_path(root: Path, rel: str, real_root: Optional[Path] = None) -> Path:
    """``root / rel`` for a manifest path, refusing absolute paths, ``..`` and symlink escapes
    (``real_root``: ``root`` already resolved, for the many paths of one release)."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        raise ReleaseVerificationError(f"{root}: invalid artifact path {rel!r} in {MANIFEST_NAME}")
    if any(part in ("", ".", "..") for part in rel.split("/")):
        raise ReleaseVerificationError(f"{root}: invalid artifact path {rel!r} in {MANIFEST_NAME}")
    try:
        return confine(root, rel) if real_root is None else confine_plain(real_root, rel)
    except PathEscapeError as exc:
        raise ReleaseVerificationError(f"{root}: artifact {rel!r} resolves outside the release: {exc}") from None


def _list_files(root: Path) -> list[str]:
    """Every regular file under ``root`` as a sorted relative posix path; symlinks are refused."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in list(dirnames) + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                raise ReleaseVerificationError(f"{root}: {p.relative_to(root).as_posix()} is a symlink; releases hold regular files only")
        for name in filenames:
            p = Path(dirpath) / name
            if not p.is_file():
                raise ReleaseVerificationError(f"{root}: {p.relative_to(root).as_posix()} is not a regular file")
            out.append(p.relative_to(root).as_posix())
    return sorted(out)


def hash_artifacts(root: Path, files: Iterable[Union[str, Mapping[str, Any]]], *, fsync: bool = False,
                   claimed: Optional[Mapping[str, tuple[str, int]]] = None) -> list[Artifact]:
    """``[{"path", "sha256", "bytes"}]`` for the given relative paths (or entries with a ``path``),
    sorted by path, read from disk. The manifest and its signature are skipped.

    ``claimed``: path -> (sha256, bytes) that the file's producer recorded (a shard's digests in
    ``packed_shards``); such a file of that size is not read here, its claimed digest is listed.
    Only for a caller that reads every byte against the listed digests afterwards (publish's
    staged verification): a wrong claim is found there, before anything is published."""
    root = Path(root)
    paths = sorted({(f["path"] if isinstance(f, Mapping) else f) for f in files} - _descriptor_names())
    entries: list[Artifact] = []
    real_root = root.resolve()
    claimed = claimed or {}
    for rel in paths:
        p = _rel_path(root, rel, real_root)
        if not p.is_file():
            raise ReleaseVerificationError(f"{root}: artifact {rel} is missing")
        claim = claimed.get(rel)
        if claim is not None and p.stat().st_size == claim[1]:
            if fsync:
                _fsync_file(p)
            entries.append({"path": rel, "sha256": claim[0], "bytes": int(claim[1])})
            continue
        sha, size = _sha256_file(p, fsync=fsync)
        entries.append({"path": rel, "sha256": sha, "bytes": size})
    return entries


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def content_digest_of(entries: Iterable[Mapping[str, Any]]) -> str:
    """sha256 of the canonical JSON of the sorted ``[path, sha256, bytes]`` triples (manifest excluded)."""
    triples = sorted(
        [str(e["path"]), str(e["sha256"]), int(e["bytes"])] for e in entries if e["path"] not in _descriptor_names()
    )
    paths = [t[0] for t in triples]
    if len(paths) != len(set(paths)):
        raise ValueError("artifact list names a path twice")
    return canonical_digest({"format": CONTENT_DIGEST_FORMAT, "artifacts": triples})


def content_digest(root: Path, files: Iterable[Union[str, Mapping[str, Any]]]) -> str:
    """Content digest of the files under ``root`` (re-hashed from disk), the manifest excluded."""
    return content_digest_of(hash_artifacts(Path(root), files))


# --- staging directory + locks ------------------------------------------------------------------


def _remove_stale(release_dir: Path) -> list[str]:
    """Dead publishers' staging directories (dir_locks) and pointer temp files older than an hour."""
    removed = remove_abandoned(release_dir)
    now = time.time()
    for p in sorted(release_dir.glob(f".{CURRENT_NAME}.*.tmp")) if release_dir.is_dir() else []:
        try:
            if now - p.stat().st_mtime > STALE_AFTER_SECONDS:
                p.unlink(missing_ok=True)
                removed.append(p.name)
        except FileNotFoundError:
            continue  # another publisher cleaned it first
    return removed


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirnames, _files in os.walk(root, topdown=False):
        fsync_dir(Path(dirpath))


# --- pointer --------------------------------------------------------------------------------------


def _read_current(release_dir: Path) -> Optional[str]:
    try:
        text = (release_dir / CURRENT_NAME).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    try:
        return validate_build_id(text)
    except ValueError:
        raise ReleaseVerificationError(f"{release_dir / CURRENT_NAME}: does not hold a build id ({text[:80]!r})") from None


def current_release(releases_root: Path, release: str) -> Optional[Path]:
    """The directory CURRENT points at, or None when the release was never published.

    A CURRENT naming a directory that does not exist raises ``ReleaseVerificationError``."""
    release_dir = Path(releases_root) / validate_release_name(release)
    bid = _read_current(release_dir)
    if bid is None:
        return None
    path = release_dir / bid
    if not path.is_dir():
        raise ReleaseVerificationError(f"{release_dir / CURRENT_NAME} names build {bid} but {path} does not exist")
    return path


# --- verification -------------------------------------------------------------------------------


def _load_manifest(path: Path) -> tuple[dict, bytes]:
    mpath = path / MANIFEST_NAME
    try:
        raw = mpath.read_bytes()
    except FileNotFoundError:
        raise ReleaseVerificationError(
            f"{path}: no {MANIFEST_NAME} — a partial or foreign directory, not a published release"
        ) from None
    try:
        manifest = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReleaseVerificationError(f"{mpath}: not valid JSON (truncated or altered?): {exc}") from None
    if not isinstance(manifest, dict):
        raise ReleaseVerificationError(f"{mpath}: must hold a JSON object")
    for key in ("build_id", "content_digest", "artifacts"):
        if key not in manifest:
            raise ReleaseVerificationError(f"{mpath}: missing field {key!r}")
    if not isinstance(manifest["artifacts"], list):
        raise ReleaseVerificationError(f"{mpath}: field 'artifacts' must be a list")
    return manifest, raw


def _check_entry(root: Path, entry: Any, field: str, real_root: Optional[Path] = None, *,
                 memo: Optional[VerifiedHashes] = None, reuse: bool = False) -> Artifact:
    """Check one manifest entry against the file on disk. With ``memo``: a file read here that
    matches is remembered in it; with ``reuse`` too, a file ``memo`` holds unchanged is not read."""
    if not isinstance(entry, Mapping) or set(entry) != {"path", "sha256", "bytes"}:
        raise ReleaseVerificationError(f"{root / MANIFEST_NAME}: {field} entry {entry!r} must have exactly path, sha256, bytes")
    rel = entry["path"]
    p = _rel_path(root, rel, real_root)
    if p.is_symlink():
        raise ReleaseVerificationError(f"{root}: {rel} is a symlink; releases hold regular files only")
    if not p.is_file():
        raise ReleaseVerificationError(f"{root}: {rel} is listed in {MANIFEST_NAME} but missing")
    if memo is None:
        sha, size = _sha256_file(p)
    else:
        before = os.stat(p)
        sha = memo.lookup(before) if reuse else None
        if sha is not None:
            size = before.st_size
        else:
            started = time.time_ns()
            sha, size = _sha256_file(p)
            if size == entry["bytes"] and sha == entry["sha256"]:
                memo.record(before, os.stat(p), started, sha)
    if size != entry["bytes"]:
        raise ReleaseVerificationError(f"{root}: {rel} has {size} bytes, {MANIFEST_NAME} says {entry['bytes']}")
    if sha != entry["sha256"]:
        raise ReleaseVerificationError(f"{root}: {rel} was changed (sha256 {sha} != {entry['sha256']} in {MANIFEST_NAME})")
    return {"path": rel, "sha256": sha, "bytes": size}


def _verify_dir(path: Path, *, expected_build_id: Optional[str], public_key: Any,
                memo: Optional[VerifiedHashes] = None, reuse: bool = False) -> VerifyReport:
    path = Path(path)
    if not path.is_dir():
        raise ReleaseVerificationError(f"{path}: no such release directory")
    key_obj = None
    if public_key is not None:
        from corpus_assets.domain.release import signing

        if isinstance(public_key, (str, Path)):
            signing.refuse_key_inside(Path(public_key), path)
        key_obj = signing.load_public_key(public_key)

    manifest, raw = _load_manifest(path)
    bid = manifest["build_id"]
    if expected_build_id is not None and bid != expected_build_id:
        raise ReleaseVerificationError(f"{path / MANIFEST_NAME}: build_id {bid!r} but the directory is build {expected_build_id}")

    listed: dict[str, Artifact] = {}
    real_root = path.resolve()
    for entry in manifest["artifacts"]:
        e = _check_entry(path, entry, "artifacts", real_root, memo=memo, reuse=reuse)
        if e["path"] in listed or e["path"] in _descriptor_names():
            raise ReleaseVerificationError(f"{path / MANIFEST_NAME}: artifact {e['path']!r} listed twice or reserved")
        listed[e["path"]] = e
    allowed = set(listed) | {MANIFEST_NAME}
    card = manifest.get("data_card")
    if card is not None:
        c = _check_entry(path, card, "data_card", memo=memo, reuse=reuse)
        if c["path"] in listed:
            raise ReleaseVerificationError(f"{path / MANIFEST_NAME}: data card {c['path']!r} is also listed as an artifact")
        allowed.add(c["path"])
    sig_path = path / SIGNATURE_NAME
    signed = sig_path.is_file()
    if signed:
        allowed.add(SIGNATURE_NAME)
    for rel in _list_files(path):
        if rel not in allowed:
            raise ReleaseVerificationError(f"{path}: {rel} is not listed in {MANIFEST_NAME} (extra file)")

    recomputed = content_digest_of(listed.values())
    if recomputed != manifest["content_digest"]:
        raise ReleaseVerificationError(
            f"{path / MANIFEST_NAME}: content_digest {manifest['content_digest']} does not match the listed "
            f"artifacts (recomputed {recomputed})"
        )

    key_id = None
    checked = False
    if key_obj is not None:
        from corpus_assets.domain.release import signing

        if not signed:
            raise ReleaseVerificationError(f"{path}: no {SIGNATURE_NAME}, but a public key was given (unsigned release refused)")
        try:
            key_id = signing.verify_manifest_signature(raw, sig_path.read_bytes(), key_obj)
        except signing.SignatureError as exc:
            raise ReleaseVerificationError(f"{sig_path}: {exc}") from None
        checked = True
    elif signed:
        from corpus_assets.domain.release import signing

        key_id = signing.signature_key_id(sig_path.read_bytes())

    return VerifyReport(
        path=path,
        release=manifest.get("release"),
        build_id=bid,
        content_digest=recomputed,
        files=len(listed),
        bytes=sum(e["bytes"] for e in listed.values()),
        signed=signed,
        signature_checked=checked,
        key_id=key_id,
    )


def verify_release(path: Path, *, public_key: Union[bytes, str, Path, None] = None,
                   known: Optional[VerifiedHashes] = None) -> VerifyReport:
    """Re-hash every artifact of a release directory against its manifest.

    Refuses (``ReleaseVerificationError`` naming the file) a missing manifest (partial directory),
    an unreadable manifest, a missing, changed or unlisted file, a content digest that does not
    match the artifacts, and a manifest whose build id is not the directory's name. With
    ``public_key`` (a file outside the release, or the key bytes), ``manifest.sig`` is required and
    checked.

    ``known``: hashes this process has just verified (``PublishResult.verified`` of the publish
    that wrote ``path``); a file that is the same unchanged inode one of them was read from is not
    read again. Everything else (manifest, listing, extra files, digests, signature) is checked
    as without it."""
    path = Path(path)
    expected = path.name if _BUILD_ID_RE.fullmatch(path.name) else None
    return _verify_dir(path, expected_build_id=expected, public_key=public_key, memo=known, reuse=known is not None)


# --- publish ------------------------------------------------------------------------------------


def _conflict(
    release_dir: Path, tmp: Path, bid: str, ours: list[Artifact], our_digest: str, theirs: Optional[dict], why: str
) -> ReleaseConflictError:
    diag = release_dir / f".conflict-{bid}-{uuid.uuid4().hex[:12]}"
    os.rename(tmp, diag)
    their_entries = {e["path"]: e for e in (theirs or {}).get("artifacts", []) if isinstance(e, Mapping)}
    our_entries = {e["path"]: e for e in ours}
    report = {
        "build_id": bid,
        "ours": our_digest,
        "published": (theirs or {}).get("content_digest"),
        "reason": why,
        "only_ours": sorted(set(our_entries) - set(their_entries)),
        "only_published": sorted(set(their_entries) - set(our_entries)),
        "changed": sorted(p for p in set(our_entries) & set(their_entries) if our_entries[p] != their_entries[p]),
    }
    (diag / CONFLICT_REPORT_NAME).write_bytes(canonical_json(report))
    return ReleaseConflictError(
        f"release {release_dir.name}: build {bid} is already published with content digest "
        f"{report['published']} but this build produced {our_digest} ({why}); nothing was published; "
        f"diagnostics kept in {diag}",
        build_id=bid,
        ours=our_digest,
        theirs=report["published"],
        diagnostics=diag,
    )


def _compare_with_published(
    release_dir: Path, target: Path, tmp: Path, bid: str, entries: list[Artifact], digest: str,
    memo: Optional[VerifiedHashes] = None,
) -> None:
    """Return if ``target`` is a valid copy of the same content; raise ReleaseConflictError otherwise.

    ``memo``: what the staged copy's verification read; the published copy's shards are often hard
    links of the same shard-set files (the same inodes), which are then not read again."""
    try:
        report = _verify_dir(target, expected_build_id=bid, public_key=None, memo=memo, reuse=memo is not None)
    except ReleaseVerificationError as exc:
        try:
            theirs, _ = _load_manifest(target)
        except ReleaseVerificationError:
            theirs = None
        raise _conflict(release_dir, tmp, bid, entries, digest, theirs, f"published copy fails verification: {exc}") from None
    if report.content_digest != digest:
        theirs, _ = _load_manifest(target)
        raise _conflict(release_dir, tmp, bid, entries, digest, theirs, "different content for the same build id")


def _set_current(release_dir: Path, bid: str) -> bool:
    if _read_current(release_dir) == bid:
        return False
    atomic_write_text(release_dir / CURRENT_NAME, bid + "\n")
    return True


SigningKeyArg = Union[Literal["env"], None, Any]


def publish_release(
    releases_root: Path,
    release: str,
    build_id: str,
    stage: Callable[[Path], Optional[Mapping[str, tuple[str, int]]]],
    make_manifest: Callable[[Path, list[dict]], dict],
    *,
    render_card: Optional[Callable[[dict], str]] = None,
    validate_manifest: Optional[Callable[[dict], dict]] = None,
    signing_key: SigningKeyArg = "env",
) -> PublishResult:
    """Algorithm 18.3: stage, digest, describe, verify, then publish atomically or reuse.

    ``stage(tmp)`` writes the artifacts into ``tmp`` and may return the digests their producer
    recorded (relative path -> (sha256, bytes)): those files are not hashed in step 2, and step 4
    (which reads every staged byte) refuses the publish if one does not hold them.
    ``make_manifest(tmp, artifacts)`` returns the
    manifest dict (publish adds ``build_id``, ``content_digest``, ``artifacts`` and, with
    ``render_card``, ``data_card``); ``validate_manifest(dict) -> dict`` may normalize / validate it
    (e.g. ``release_manifest.validate_manifest``); ``render_card(manifest) -> str`` writes
    ``data_card.md``. ``signing_key``: ``"env"`` signs with ``CORPUS_SIGNING_KEY`` when it is set,
    ``None`` never signs, a private key object signs with it.
    """
    validate_release_name(release)
    bid = validate_build_id(build_id)
    release_dir = Path(releases_root) / release
    release_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale(release_dir)
    previous = _read_current(release_dir)
    target = release_dir / bid

    tmp, lock_fd = new_staging_dir(release_dir)
    try:
        staged_claims = stage(tmp)
        claimed = staged_claims if isinstance(staged_claims, Mapping) else {}  # anything else is no claim
        files = _list_files(tmp)
        for reserved in (MANIFEST_NAME, SIGNATURE_NAME):
            if reserved in files:
                raise PublishError(f"stage() wrote {reserved}; publish writes it (return fields from make_manifest)")
        if render_card is not None and DATA_CARD_NAME in files:
            raise PublishError(f"stage() wrote {DATA_CARD_NAME} and render_card was given; choose one")
        entries = hash_artifacts(tmp, files, fsync=True, claimed=claimed)
        digest = content_digest_of(entries)

        manifest = make_manifest(tmp, [dict(e) for e in entries])
        if not isinstance(manifest, dict):
            raise PublishError(f"make_manifest must return a dict, got {type(manifest).__name__}")
        manifest = dict(manifest)
        if _list_files(tmp) != files:
            raise PublishError("make_manifest changed the staged files; only stage() may write artifacts")
        for key, value in (("build_id", bid), ("content_digest", digest), ("artifacts", entries)):
            if key in manifest and manifest[key] != value:
                raise PublishError(f"make_manifest set {key!r} to {manifest[key]!r}; publish computes it ({value!r})")
            manifest[key] = value
        if manifest.get("data_card") is not None:
            raise PublishError("make_manifest set 'data_card'; publish fills it from render_card")
        manifest.pop("data_card", None)
        if "release" in manifest and manifest["release"] != release:
            raise PublishError(f"manifest field 'release' is {manifest['release']!r}, publishing {release!r}")
        if validate_manifest is not None:
            manifest = validate_manifest(manifest)
        if render_card is not None:
            card = render_card(manifest).encode("utf-8")
            (tmp / DATA_CARD_NAME).write_bytes(card)
            sha, size = _sha256_file(tmp / DATA_CARD_NAME, fsync=True)
            manifest["data_card"] = {"path": DATA_CARD_NAME, "sha256": sha, "bytes": size}
        manifest_bytes = canonical_json(manifest)
        with open(tmp / MANIFEST_NAME, "wb") as f:
            f.write(manifest_bytes)
            f.flush()
            os.fsync(f.fileno())

        key = signing_key
        if isinstance(key, str) and key == "env":
            from corpus_assets.domain.release import signing

            key = signing.private_key_from_env()
        if key is not None:
            from corpus_assets.domain.release import signing

            with open(tmp / SIGNATURE_NAME, "wb") as f:
                f.write(signing.sign_manifest(manifest_bytes, key))
                f.flush()
                os.fsync(f.fileno())

        # Step 4: the one verification that always reads every staged byte again (never from
        # ``verified``): the hashes above and the manifest on disk must agree with the files.
        verified = VerifiedHashes()
        try:
            staged = _verify_dir(tmp, expected_build_id=bid, public_key=None, memo=verified)
        except ReleaseVerificationError as exc:
            if not claimed:
                raise
            raise PublishError(f"release {release} build {bid[:16]}: a staged file does not hold the digest its "
                               f"producer recorded (a damaged shard set?); nothing published: {exc}") from None
        if staged.content_digest != digest:  # pragma: no cover - a file changed under us
            raise PublishError(f"{tmp}: staged files changed while publishing")
        _fsync_tree(tmp)

        reused = False
        if target.exists():
            _compare_with_published(release_dir, target, tmp, bid, entries, digest, verified)
            reused = True
        else:
            try:
                os.rename(tmp, target)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not target.exists():
                    raise
                # A concurrent publisher of the same build id won the rename.
                _compare_with_published(release_dir, target, tmp, bid, entries, digest, verified)
                reused = True
            else:
                fsync_dir(release_dir)
        if reused:
            shutil.rmtree(tmp, ignore_errors=True)
        updated = _set_current(release_dir, bid)
        return PublishResult(
            release=release,
            build_id=bid,
            content_digest=digest,
            path=target,
            reused=reused,
            previous=previous,
            current_updated=updated,
            signed=(target / SIGNATURE_NAME).is_file(),
            artifacts=tuple(entries),
            verified=verified,
        )
    finally:
        if tmp.exists():  # failure before the rename: publish nothing, leave nothing
            shutil.rmtree(tmp, ignore_errors=True)
        _unlock(lock_fd)
