"""The one atomic-write helper: readers see the old file or the new one, never a mix, a failed
write leaves nothing behind, and the mode is the final one from the first byte on."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from corpus_assets.domain.core.atomic_files import atomic_write, atomic_write_bytes, atomic_write_text, staged_write

DOMAIN = Path(__file__).resolve().parents[2] / "corpus_assets" / "domain"


def test_replaces_whole_and_keeps_the_requested_mode(tmp_path):
    target = tmp_path / "CURRENT"
    atomic_write_text(target, "v1\n")
    atomic_write_bytes(target, b"v2\n", mode=0o600)
    assert target.read_bytes() == b"v2\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    atomic_write_text(target, "v3\n", mode=0o644)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CURRENT"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "job.json"
    atomic_write_text(target, "old")
    seen_modes = []

    def write(f):
        seen_modes.append(stat.S_IMODE(os.fstat(f.fileno()).st_mode))
        f.write(b"half of the new conte")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, write, mode=0o600)
    assert target.read_text() == "old" and seen_modes == [0o600]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json"]


def test_a_staged_write_names_the_file_directly_replaces_a_rerun_and_removes_a_failure(tmp_path):
    """Inside a staging directory (renamed whole when complete) a file needs no temporary name:
    it is written under its own, a retried task's rewrite replaces it, a failed one leaves nothing."""
    target = tmp_path / "train-00000.bin"
    seen = []

    def write(f):
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        f.write(b"first")

    staged_write(target, write, mode=0o644)
    assert seen == [["train-00000.bin"]] and target.read_bytes() == b"first"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    staged_write(target, lambda f: f.write(b"2"))
    assert target.read_bytes() == b"2"

    def fail(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        staged_write(tmp_path / "train-00001.bin", fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train-00000.bin"]


def test_no_other_domain_module_writes_files_with_its_own_replace():
    """Files are written through the helper; ``os.replace`` elsewhere only moves files (the
    deletion drop folder), directories are renamed into place by their own protocols."""
    users = []
    for path in sorted(DOMAIN.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "replace" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "os":
                users.append(path.relative_to(DOMAIN).as_posix())
    assert sorted(set(users)) == ["core/atomic_files.py", "deletion/requests.py"], users
