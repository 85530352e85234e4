"""The demo's input dumps hold personal data on purpose: the tree is owner-only (0700 directories,
0600 files), whether it is new or left with wider modes by an earlier run; its bytes stay the same."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from corpus_assets.domain.demo.inputs import write_demo_inputs


@pytest.fixture(autouse=True)
def _permissive_umask():
    old = os.umask(0o002)  # a umask that would leave new files group/world-readable
    try:
        yield
    finally:
        os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.lstat().st_mode)}
    for p in sorted(root.rglob("*")):
        if not p.is_symlink():
            out[str(p.relative_to(root))] = stat.S_IMODE(p.lstat().st_mode)
    return out


def _assert_owner_only(root: Path) -> None:
    for rel, mode in _modes(root).items():
        p = root / rel
        assert mode == (0o700 if p.is_dir() else 0o600), f"{rel}: {oct(mode)}"


def _contents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_new_tree_is_owner_only(tmp_path):
    root = tmp_path / "home" / "demo_inputs"
    files = write_demo_inputs(root)
    assert files and all(p.is_file() and root in p.parents for p in files.values())
    _assert_owner_only(root)
    assert set(_contents(root)) == set(files)  # nothing else written (no temporary files left)
    assert b"maria.lopez@example.org" in files["chat/sharegpt.jsonl"].read_bytes()  # the PII this protects


def test_an_existing_tree_with_wider_modes_is_tightened_and_keeps_its_bytes(tmp_path):
    fresh = tmp_path / "fresh"
    write_demo_inputs(fresh)
    expected = _contents(fresh)

    root = tmp_path / "demo_inputs"
    write_demo_inputs(root)
    # an earlier run (older code) left everything world-readable, plus a stale file with other
    # content, a leftover file and directory the current demo no longer writes
    (root / "chat/sharegpt.jsonl").write_bytes(b'{"id": "old"}\n')
    (root / "old/nested").mkdir(parents=True)
    (root / "old/nested/legacy.jsonl").write_bytes(b'{"email": "someone@example.org"}\n')
    for p in [root, *root.rglob("*")]:
        os.chmod(p, 0o777 if p.is_dir() else 0o666)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not part of the demo")
    os.chmod(outside, 0o644)
    (root / "link.txt").symlink_to(outside)

    files = write_demo_inputs(root)
    _assert_owner_only(root)
    got = _contents(root)
    assert {rel: got[rel] for rel in files} == expected  # the stale file was rewritten; the rest unchanged
    assert got["old/nested/legacy.jsonl"] == b'{"email": "someone@example.org"}\n'  # tightened, not deleted
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644  # a symlink's target outside the tree is left alone


def test_rewriting_an_unchanged_tree_keeps_it_owner_only(tmp_path):
    root = tmp_path / "demo_inputs"
    write_demo_inputs(root)
    before = _contents(root)
    write_demo_inputs(root)
    _assert_owner_only(root)
    assert _contents(root) == before
