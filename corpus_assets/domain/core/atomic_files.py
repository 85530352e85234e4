"""Files that readers see whole or not at all: the one atomic-write helper.

A file is written to a temporary name next to its target (same directory, so the rename stays on
one filesystem), flushed and fsynced, given its final mode, renamed over the target with
``os.replace`` (atomic) and the directory is fsynced, so the rename itself survives a crash. On
any failure the temporary file is removed and the target is untouched. New files get the usual
``0o666 & ~umask``; pass ``mode`` for owner-only (0o600) or world-readable (0o644) files — the
mode is set before the first byte is written, so private content is never readable by others.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import IO, Callable, Optional

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "fsync_dir", "staged_write"]


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or new entry in it survives a crash (best effort: some
    filesystems refuse to open or sync directories)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_synced(path: Path, flags: int, write: Callable[[IO[bytes]], None], mode: Optional[int]) -> None:
    """Open ``path`` with ``flags``, set ``mode`` before the first byte, ``write(f)``, flush and
    fsync; on any failure the file is removed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        raise


def atomic_write(path: Path, write: Callable[[IO[bytes]], None], *, mode: Optional[int] = None) -> None:
    """Replace ``path`` with what ``write(f)`` writes to a binary file object."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    _write_synced(tmp, os.O_EXCL, write, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def staged_write(path: Path, write: Callable[[IO[bytes]], None], *, mode: Optional[int] = None) -> None:
    """Write ``path`` inside a staging directory that readers only ever see whole, because it is
    renamed into place when complete (a shard set): no temporary name and no rename of its own,
    the data fsynced; the caller fsyncs the directory once after its last file (``fsync_dir``),
    instead of once per file. A rerun of the same write (a retried task) replaces the file."""
    _write_synced(Path(path), os.O_TRUNC, write, mode)


def atomic_write_bytes(path: Path, data: bytes, *, mode: Optional[int] = None) -> None:
    atomic_write(path, lambda f: f.write(data), mode=mode)


def atomic_write_text(path: Path, text: str, mode: Optional[int] = None) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")), mode=mode)
