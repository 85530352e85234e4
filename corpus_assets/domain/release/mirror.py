"""Algorithm 18.3 on an object store: releases mirrored under ``<url>/releases/<release>/<build_id>/``.

The local publish (``publish.py``) stays where a build is staged, verified and made immutable.
``pull_release`` first brings down a build already sealed in the store, so the local publish
reuses or conflicts with that copy; ``push_release`` then claims the build id (a conditional
create of ``.claim``), uploads everything, seals it by creating ``manifest.json`` last and only
then replaces ``CURRENT``. A crash leaves an unsealed prefix nobody reads, or the old pointer.

Steps and crash cases: docs/releases.md#mirror
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable, Mapping, Optional

from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.domain.core.faults import pause_point
from corpus_assets.domain.core.keys import validate_release_name
from corpus_assets.domain.storage.object_store import ObjectStore
from corpus_assets.domain.release.publish import (
    CURRENT_NAME,
    MANIFEST_NAME,
    SIGNATURE_NAME,
    STALE_AFTER_SECONDS,
    PublishError,
    ReleaseConflictError,
    ReleaseVerificationError,
    validate_build_id,
    verify_release,
)

CLAIM_NAME = ".claim"
REVOKED_NAME = "REVOKED.json"
# releases/<release>/.revoked/<build id>: a copy of each revoked build's REVOKED.json, so one
# listing tells a reader which builds are revoked (registry.reconcile) instead of one read per build
REVOKED_INDEX = ".revoked"


def revoked_index_key(release: str, bid: str = "") -> str:
    """The release's revocation index in the bucket, or one build's entry in it."""
    key = f"{_base(release)}/{REVOKED_INDEX}"
    return f"{key}/{validate_build_id(bid)}" if bid else key


def build_ids_under(remote: ObjectStore, rel: str) -> list[str]:
    """The names under ``rel`` in the bucket that are build ids, sorted (CURRENT, claims, the
    revocation index and anything else are not)."""
    out = []
    for name in remote.list_dir(rel):
        try:
            out.append(validate_build_id(name))
        except ValueError:
            continue
    return sorted(out)


def revoked_in_index(remote: ObjectStore, release: str) -> set[str]:
    """Build ids the release's revocation index names (builds revoked before the index existed
    are not in it: ``corpus releases --audit`` reads every build's REVOKED.json)."""
    return set(build_ids_under(remote, revoked_index_key(release)))


def _base(release: str, bid: str = "") -> str:
    validate_release_name(release)
    return DataRoot.release_key(release, validate_build_id(bid) if bid else None)


def sealed_digest(remote: ObjectStore, release: str, bid: str) -> Optional[str]:
    """The content digest of the sealed build in the store, None when it is not sealed there."""
    raw = remote.read_bytes(f"{_base(release, bid)}/{MANIFEST_NAME}")
    if raw is None:
        return None
    try:
        return json.loads(raw)["content_digest"]
    except (ValueError, KeyError, TypeError):
        raise ReleaseVerificationError(f"{remote.uri(_base(release, bid))}/{MANIFEST_NAME} is not a release manifest") from None


def remote_current(remote: ObjectStore, release: str) -> Optional[str]:
    raw = remote.read_bytes(f"{_base(release)}/{CURRENT_NAME}")
    return None if raw is None else validate_build_id(raw.decode("utf-8").strip())


def pull_release(remote: ObjectStore, releases_root: Path, release: str, bid: str) -> Optional[Path]:
    """Download the sealed build into ``releases_root/<release>/<bid>/`` unless it is there
    already; the copy is verified against its manifest before it is renamed into place.
    Returns the local directory, or None when the store has no sealed build of that id."""
    local = Path(releases_root) / release / bid
    if (local / MANIFEST_NAME).is_file():
        return local
    base = _base(release, bid)
    raw = remote.read_bytes(f"{base}/{MANIFEST_NAME}")
    if raw is None:
        return None
    manifest = json.loads(raw)
    # Only what the manifest describes, plus the descriptors that describe it — never stray objects.
    present = set(remote.list_files(base))
    listed = {a["path"] for a in manifest.get("artifacts", [])}
    if isinstance(manifest.get("data_card"), dict):
        listed.add(manifest["data_card"]["path"])
    # (a listed file the store lacks — a revoked build's withdrawn shards — fails verification below)
    files = sorted((listed | {MANIFEST_NAME, SIGNATURE_NAME, REVOKED_NAME}) & present)
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.parent / f".tmp-pull-{uuid.uuid4().hex}"
    try:
        for f in files:
            remote.download(f"{base}/{f}", tmp / f)
        try:
            verify_release(tmp)
        except ReleaseVerificationError as exc:
            raise ReleaseVerificationError(f"{remote.uri(base)}: the stored build fails verification: {exc}") from None
        try:
            os.rename(tmp, local)
        except OSError:
            if not (local / MANIFEST_NAME).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return local


def _conflict(remote: ObjectStore, release: str, bid: str, ours: str, theirs: str, local: Path) -> ReleaseConflictError:
    return ReleaseConflictError(
        f"release {release!r} build {bid}: {remote.uri(_base(release, bid))} holds content {theirs}, "
        f"this build produced {ours}; nothing was published (Algorithm 18.3: same build id, different content)",
        build_id=bid, ours=ours, theirs=theirs, diagnostics=local,
    )


def _claim(remote: ObjectStore, release: str, bid: str, digest: str, local: Path, *,
           wait_seconds: float, clock: Callable[[], float]) -> bool:
    """Take the build id's claim. False when a concurrent publisher sealed the same content meanwhile."""
    key = f"{_base(release, bid)}/{CLAIM_NAME}"
    body = json.dumps({"content_digest": digest, "claimed_at": clock(), "publisher": uuid.uuid4().hex}).encode()
    deadline = clock() + wait_seconds
    took_over = False
    while True:
        if remote.create_bytes(key, body):
            return True
        raw = remote.read_bytes(key)
        other = json.loads(raw) if raw else {}
        if other and other.get("content_digest") != digest:
            raise _conflict(remote, release, bid, digest, str(other.get("content_digest")), local)
        theirs = sealed_digest(remote, release, bid)
        if theirs is not None:
            if theirs != digest:
                raise _conflict(remote, release, bid, digest, theirs, local)
            return False
        if other and clock() - float(other.get("claimed_at", 0)) > STALE_AFTER_SECONDS and not took_over:
            remote.delete(key)  # its publisher died mid-upload; the same content is ours to finish
            took_over = True
            continue
        if clock() >= deadline:
            raise PublishError(
                f"release {release!r} build {bid} is being uploaded to {remote.uri(_base(release, bid))} by another "
                f"publisher (claimed at {other.get('claimed_at')}); retry after it finishes"
            )
        time.sleep(0.5)


def push_release(remote: ObjectStore, local: Path, release: str, bid: str, digest: str, *,
                 copy_from: Optional[Mapping[str, str]] = None,
                 wait_seconds: float = 60.0, clock: Callable[[], float] = time.time,
                 log: Callable[[str], None] = lambda _m: None) -> str:
    """Upload a locally published build and point the store's CURRENT at it.

    ``copy_from`` maps a build file (relative path) to an object already in the store with the
    same bytes — the shards, which the sealed shard set holds — copied server-side instead of
    uploaded again. Returns "uploaded" or "reused" (the store already held the same content)."""
    base = _base(release, bid)
    theirs = sealed_digest(remote, release, bid)
    if theirs is not None and theirs != digest:
        raise _conflict(remote, release, bid, digest, theirs, local)
    status = "reused"
    if theirs is None and _claim(remote, release, bid, digest, local, wait_seconds=wait_seconds, clock=clock):
        # Whatever a crashed claimant left under the prefix goes first: the sealed build must hold
        # exactly what this publisher uploads (a stray manifest.sig would sign another manifest).
        for stray in remote.list_files(base):
            if stray != CLAIM_NAME:
                remote.delete(f"{base}/{stray}")
        files = sorted(p for p in Path(local).rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
        copies = dict(copy_from or {})
        sent = [p for p in files if p.relative_to(local).as_posix() not in copies]
        log(f"release {release} build {bid[:16]} to {remote.uri(base)}: {len(sent)} files "
            f"({sum(p.stat().st_size for p in sent)} bytes) uploaded, {len(files) - len(sent)} copied inside the store")
        for p in files:
            rel = p.relative_to(local).as_posix()
            if rel in copies:
                remote.copy(copies[rel], f"{base}/{rel}")
            else:
                remote.upload(p, f"{base}/{rel}")
        pause_point("release_mirror:uploaded")  # artifacts uploaded, build not sealed
        if remote.create_bytes(f"{base}/{MANIFEST_NAME}", (Path(local) / MANIFEST_NAME).read_bytes()):
            status = "uploaded"
        else:
            theirs = sealed_digest(remote, release, bid)
            if theirs != digest:
                raise _conflict(remote, release, bid, digest, str(theirs), local)
        remote.delete(f"{base}/{CLAIM_NAME}")
    if remote_current(remote, release) != bid:
        remote.write_bytes(f"{_base(release)}/{CURRENT_NAME}", (bid + "\n").encode())
    return status


def withdraw_remote(remote: ObjectStore, release: str, bid: str, note: bytes) -> int:
    """Mirror a revocation: delete the build's shards from the store and write its REVOKED.json,
    and the same note in the release's revocation index (manifest and data card stay as the audit
    trail). Returns the objects removed."""
    base = _base(release, bid)
    removed = remote.delete_tree(f"{base}/shards")
    if sealed_digest(remote, release, bid) is not None:
        remote.write_bytes(revoked_index_key(release, bid), note)  # first: an entry always has its note
        remote.write_bytes(f"{base}/{REVOKED_NAME}", note)
    return removed


def prune_revoked(remote: ObjectStore, releases_root: Path) -> list[str]:
    """Apply revocations made on other machines to this machine's copies: a locally cached build
    the store marks ``REVOKED.json`` loses its shards and gets the note. Returns the builds pruned."""
    pruned = []
    root = Path(releases_root)
    if not root.is_dir():
        return pruned
    for build in sorted(root.glob("*/*")):
        if not build.is_dir() or build.name.startswith(".") or not (build / MANIFEST_NAME).is_file():
            continue
        release = build.parent.name
        try:
            note = remote.read_bytes(f"{_base(release, build.name)}/{REVOKED_NAME}")
        except ValueError:
            continue  # not a build directory name
        if note is None:
            continue
        if (build / "shards").exists():
            shutil.rmtree(build / "shards")
            pruned.append(f"{release}/{build.name}")
        (build / REVOKED_NAME).write_bytes(note)
    return pruned
