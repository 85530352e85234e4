"""Staging directories owned by a live process: how concurrent writers and crash recovery agree
on which ``.tmp-*`` directory may be deleted.

A writer creates its staging directory as ``.new-<uuid>``, takes an exclusive ``flock`` on the
directory itself and renames it to ``.tmp-<uuid>`` (a rename keeps the inode, so the lock follows).
A ``.tmp-*`` directory is therefore always locked by a live writer or left by a dead one — the
kernel drops ``flock`` locks when a process dies, even under SIGKILL — and cleanup removes exactly
those whose lock it can take. Why not age: a slow, healthy writer can be older than any
threshold; why not a pid file: pids are reused and mean nothing across hosts. A ``.new-*``
directory only exists between ``mkdir`` and ``flock``; leftovers older than an hour are removed.
Without ``fcntl`` (Windows) the fallback is age: ``.tmp-*`` older than ``STALE_AFTER_SECONDS``.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Optional

try:  # POSIX advisory locks; absent on Windows (then stale staging dirs are found by age)
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms CI runs
    fcntl = None  # type: ignore[assignment]

STALE_AFTER_SECONDS = 3600


def lock_dir(path: Path) -> Optional[int]:
    """Open ``path`` and take an exclusive, non-blocking flock on it; returns the fd (None
    without fcntl). OSError when another process holds it."""
    if fcntl is None:  # pragma: no cover
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def unlock(fd: Optional[int]) -> None:
    if fd is not None:
        try:
            os.close(fd)  # closing the last fd of the open file description releases the flock
        except OSError:
            pass


def new_staging_dir(parent: Path, prefix: str = ".tmp-") -> tuple[Path, Optional[int]]:
    """A fresh ``<parent>/<prefix><uuid>`` directory, locked by this process (keep the fd open
    while using it; ``unlock`` when done)."""
    token = uuid.uuid4().hex
    new = parent / f".new-{token}"
    new.mkdir()
    try:
        fd = lock_dir(new)
    except OSError:
        shutil.rmtree(new, ignore_errors=True)
        raise
    tmp = parent / f"{prefix}{token}"
    os.rename(new, tmp)  # same inode: the lock follows the directory
    return tmp, fd


def remove_if_abandoned(path: Path) -> bool:
    """Delete a staging directory whose owner is gone (its lock can be taken). True if removed."""
    if fcntl is None:  # pragma: no cover
        try:
            if time.time() - path.stat().st_mtime > STALE_AFTER_SECONDS:
                shutil.rmtree(path, ignore_errors=True)
                return True
        except FileNotFoundError:
            pass
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # a live writer holds it
    # We hold the lock now: nobody else can be using the directory. Keep the fd until removed.
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(fd)
    return True


def remove_abandoned(parent: Path) -> list[str]:
    """Remove every abandoned ``.tmp-*`` under ``parent`` and ``.new-*`` older than an hour."""
    removed: list[str] = []
    if not parent.is_dir():
        return removed
    now = time.time()
    for p in sorted(parent.iterdir()):
        try:
            if p.name.startswith(".tmp-") and p.is_dir() and not p.is_symlink():
                if remove_if_abandoned(p):
                    removed.append(p.name)
            elif p.name.startswith(".new-") and p.is_dir() and now - p.stat().st_mtime > STALE_AFTER_SECONDS:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p.name)
        except FileNotFoundError:
            continue  # another writer cleaned it first
    return removed
