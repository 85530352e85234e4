"""A data root on an object store (``s3://``, ``gs://``, ``memory://`` ...) through fsspec.

The store is the durable, shared copy and a local directory a cache of immutable,
content-addressed versions plus the working area, because our readers want local files and
object stores have no atomic rename. Readers never see partial data because of *order*: data
objects first, then the seal (a conditional create), then the ``CURRENT`` pointer (one atomic PUT).
Selected by ``CORPUS_HOME=s3://...``; ``CORPUS_STORAGE_OPTIONS`` and ``CORPUS_LOCAL`` configure it.

Why and how: docs/storage.md#object-store
Operating it: docs/operations.md#the-data-root-on-an-object-store
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import uuid
from pathlib import Path
from typing import Mapping, Optional

from corpus_assets.domain.core.errors import CorpusError
from corpus_assets.domain.core.hashing import sha256_file
from corpus_assets.domain.core.settings import data_url, is_url

TREE_SEAL = "_tree.json"


class ObjectStoreError(CorpusError, RuntimeError):
    """The object store refused or failed an operation; the message names the URL."""


def parse_url(value: str) -> Optional[tuple[str, str]]:
    """(protocol, path) of an fsspec URL, or None for a plain (local) path or a ``file://`` URL
    (settings.is_url decides which is which, for the whole project)."""
    if not is_url(value):
        return None
    protocol, _, path = value.partition("://")
    return protocol.lower(), path.rstrip("/")


def _check_rel(rel: str) -> str:
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") or "\x00" in p or "\\" in p for p in parts):
        raise ObjectStoreError(f"refusing the object key {rel!r}: relative keys without '.', '..' or empty parts only")
    return rel


class ObjectStore:
    """One prefix of an fsspec file system, addressed by relative POSIX keys (``layers/a/p/CURRENT``)."""

    def __init__(self, url: str, storage_options: Optional[Mapping] = None) -> None:
        parsed = parse_url(url)
        if parsed is None:
            raise ObjectStoreError(f"{url!r} is not an object-store URL (expected e.g. s3://bucket/prefix)")
        import fsspec  # imported here: a purely local deployment never needs it

        self.url = url.rstrip("/")
        self.protocol, self.root = parsed
        options = dict(storage_options or {})
        if self.protocol in ("s3", "s3a"):
            # Never answer "exists?" or "list" from a cache: another process may have written since.
            options.setdefault("use_listings_cache", False)
        try:
            self.fs = fsspec.filesystem(self.protocol, **options)
        except (ImportError, ValueError) as exc:
            raise ObjectStoreError(f"cannot open {self.url}: {exc} (for s3:// install s3fs)") from None
        # The file system's own spelling of the root (memory:// paths start with "/", s3 ones do not),
        # so listings and keys compare equal.
        self.root = self.fs._strip_protocol(self.url).rstrip("/")
        self._exists_error: Optional[type] = None

    # --- addressing -------------------------------------------------------------------------

    def key(self, rel: str) -> str:
        """The file system path of ``rel`` ("" is the root itself)."""
        if rel == "":
            return self.root
        return posixpath.join(self.root, _check_rel(rel)) if self.root else _check_rel(rel)

    def uri(self, rel: str = "") -> str:
        return f"{self.url}/{rel}" if rel else self.url

    def _rel_of(self, full: str) -> str:
        full = full.rstrip("/")
        prefix = self.root + "/" if self.root else ""
        if not full.startswith(prefix):
            raise ObjectStoreError(f"{full!r} is outside {self.url}")
        return full[len(prefix):]

    def _fresh(self, rel: str) -> None:
        try:
            self.fs.invalidate_cache(self.key(rel))
        except Exception:  # noqa: BLE001 - cache invalidation is an optimisation hint only
            pass

    # --- small objects ----------------------------------------------------------------------

    def read_bytes(self, rel: str) -> Optional[bytes]:
        """The object's bytes, or None when it does not exist."""
        try:
            return self.fs.cat_file(self.key(rel))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ObjectStoreError(f"reading {self.uri(rel)}: {exc}") from exc

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Replace the object in one PUT (readers see the old or the new bytes)."""
        try:
            self.fs.pipe_file(self.key(rel), data)
        except OSError as exc:
            raise ObjectStoreError(f"writing {self.uri(rel)}: {exc}") from exc

    def create_bytes(self, rel: str, data: bytes) -> bool:
        """Create the object only if absent (conditional put). True when this call created it."""
        if not data:  # s3fs writes an empty body with a plain (unconditional) touch
            raise ObjectStoreError(f"conditional create of {self.uri(rel)} needs a non-empty body")
        key = self.key(rel)
        try:
            with self.fs.open(key, "xb") as f:
                f.write(data)
        except FileExistsError:
            return False
        except OSError as exc:
            raise ObjectStoreError(f"conditional create of {self.uri(rel)}: {exc}") from exc
        return True

    def read_versioned(self, rel: str) -> tuple[Optional[bytes], Optional[str]]:
        """(bytes, ETag) of the object, (None, None) when it does not exist. The ETag is taken
        first: a write in between makes a later ``replace_if`` with it fail, never succeed wrongly."""
        self._fresh(rel)
        try:
            etag = self.fs.info(self.key(rel)).get("ETag")
        except FileNotFoundError:
            return None, None
        data = self.read_bytes(rel)
        return (None, None) if data is None else (data, etag)

    def replace_if(self, rel: str, data: bytes, etag: Optional[str]) -> bool:
        """Replace the object only if it still has ``etag`` (``If-Match``), or create it only if
        absent when ``etag`` is None. False when another writer got there first. Stores without
        ETags (not S3) fall back to compare-then-write, which is not atomic."""
        if etag is None:
            return self.create_bytes(rel, data)
        key = self.key(rel)
        if self.protocol in ("s3", "s3a"):
            try:
                self.fs.pipe_file(key, data, IfMatch=etag)
            except (FileExistsError, OSError) as exc:
                _, now = self.read_versioned(rel)
                if now != etag:
                    return False  # 412 Precondition Failed: it changed since we read it
                raise ObjectStoreError(f"conditional replace of {self.uri(rel)}: {exc}") from exc
            return True
        _, now = self.read_versioned(rel)
        if now != etag:
            return False
        self.write_bytes(rel, data)
        return True

    def exists(self, rel: str) -> bool:
        self._fresh(rel)
        return bool(self.fs.exists(self.key(rel)))

    # --- files and trees --------------------------------------------------------------------

    def upload(self, local: Path, rel: str) -> None:
        key = self.key(rel)
        try:
            self.fs.put_file(str(local), key)
        except OSError as exc:
            raise ObjectStoreError(f"uploading {local} to {self.uri(rel)}: {exc}") from exc

    def copy(self, src: str, dst: str) -> None:
        """Copy an object inside the store (server-side on S3: no bytes through this machine)."""
        try:
            self.fs.copy(self.key(src), self.key(dst))
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.uri(src)} does not exist") from None
        except OSError as exc:
            raise ObjectStoreError(f"copying {self.uri(src)} to {self.uri(dst)}: {exc}") from exc

    def download(self, rel: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.fs.get_file(self.key(rel), str(local))
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.uri(rel)} does not exist") from None
        except OSError as exc:
            raise ObjectStoreError(f"downloading {self.uri(rel)}: {exc}") from exc

    def list_dir(self, rel: str) -> list[str]:
        """Names of the immediate children (objects and prefixes) of ``rel``; [] when absent."""
        self._fresh(rel)
        try:
            entries = self.fs.ls(self.key(rel), detail=False)
        except FileNotFoundError:
            return []
        names = sorted({posixpath.basename(e.rstrip("/")) for e in entries})
        return [n for n in names if n]

    def list_files(self, rel: str) -> list[str]:
        """Every object under ``rel``, as keys relative to ``rel``, sorted."""
        self._fresh(rel)
        base = self.key(rel)
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        return sorted(posixpath.relpath(f, base) for f in found if f.rstrip("/") != base)

    def newest_change(self, rel: str) -> Optional[float]:
        """The latest modification time (epoch seconds) of the objects under ``rel``; None when
        there are none or the store does not report times."""
        self._fresh(rel)
        try:
            found = self.fs.find(self.key(rel), detail=True)
        except FileNotFoundError:
            return None
        times = []
        for info in found.values():
            t = info.get("LastModified", info.get("mtime", info.get("created")))
            if t is None:
                continue
            times.append(t.timestamp() if hasattr(t, "timestamp") else float(t))
        return max(times) if times else None

    def delete(self, rel: str) -> None:
        try:
            self.fs.rm_file(self.key(rel))
        except FileNotFoundError:
            pass

    def delete_tree(self, rel: str) -> int:
        """Remove every object under ``rel``; returns how many were removed. Checked by listing
        again: a bulk delete may report success for objects it could not remove (s3fs ignores
        per-object errors), and a deletion that silently failed must not be reported as done."""
        files = self.list_files(rel)
        if files:
            self.fs.rm([posixpath.join(self.key(rel), f) for f in files])
            left = self.list_files(rel)
            if left:
                raise ObjectStoreError(f"could not delete {len(left)} object(s) under {self.uri(rel)}, e.g. {left[0]}")
        return len(files)

    # --- sealed trees (content-addressed directories) ---------------------------------------

    def push_tree(self, local_dir: Path, rel: str, *, seal: str = TREE_SEAL) -> bool:
        """Upload a finished local directory under ``rel``; the seal (file list with digests) last.

        Returns False when the remote tree was already sealed (same content-addressed name:
        nothing uploaded)."""
        if self.exists(f"{rel}/{seal}"):
            return False
        files = sorted(p for p in local_dir.rglob("*") if p.is_file() and p.name != seal)
        listing = []
        for p in files:
            sub = p.relative_to(local_dir).as_posix()
            self.upload(p, f"{rel}/{sub}")
            listing.append({"path": sub, "sha256": sha256_file(p), "bytes": p.stat().st_size})
        body = json.dumps({"files": listing}, sort_keys=True, separators=(",", ":")).encode()
        return self.create_bytes(f"{rel}/{seal}", body)

    def pull_tree(self, rel: str, local_dir: Path, *, seal: str = TREE_SEAL, private: bool = False) -> Path:
        """Download a sealed tree into ``local_dir`` (via a staging directory, renamed into place),
        checking every file against the seal. FileNotFoundError when the tree is not sealed."""
        if local_dir.is_dir():
            return local_dir
        raw = self.read_bytes(f"{rel}/{seal}")
        if raw is None:
            raise FileNotFoundError(f"{self.uri(rel)} is not a complete (sealed) tree")
        listing = json.loads(raw)["files"]
        local_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = local_dir.parent / f".tmp-pull-{uuid.uuid4().hex}"
        try:
            for f in listing:
                _check_rel(f["path"])
                dst = tmp / f["path"]
                self.download(f"{rel}/{f['path']}", dst)
                if sha256_file(dst) != f["sha256"]:
                    raise ObjectStoreError(f"{self.uri(rel)}/{f['path']} does not match its sealed digest")
            tmp.mkdir(parents=True, exist_ok=True)
            if private:
                os.chmod(tmp, 0o700)
            try:
                os.rename(tmp, local_dir)
            except OSError:
                if not local_dir.is_dir():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return local_dir


def store_from_env(value: Optional[str] = None) -> Optional[ObjectStore]:
    """The object store named by ``CORPUS_HOME`` (or ``value``), None for a local data root."""
    url = value if value is not None else data_url()
    if url is None or parse_url(url) is None:
        return None
    return ObjectStore(url, storage_options_from_env())


def storage_options_from_env() -> dict:
    raw = os.environ.get("CORPUS_STORAGE_OPTIONS", "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ObjectStoreError(f"CORPUS_STORAGE_OPTIONS is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ObjectStoreError("CORPUS_STORAGE_OPTIONS must be a JSON object of fsspec options")
    return value
