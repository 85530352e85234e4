"""What the cheaper release_manifest step still guarantees: a release spec that changed is read
again, the check of a published release still notices a changed file, the staging verification
still reads every byte, and the catalog is not held longer than the operations that use it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corpus_assets.domain.core.config_files import ConfigError
from corpus_assets.domain.release.publish import (
    ReleaseVerificationError,
    VerifiedHashes,
    build_id,
    publish_release,
    verify_release,
)
from corpus_assets.domain.release.spec import load_release_spec
from corpus_assets.domain.storage.catalog import Catalog

FIXTURE_TOKENIZER = Path(__file__).resolve().parents[1] / "data" / "tokenizer" / "tiny_bpe.json"
SPEC = {"release_spec": {"name": "demo"}, "tombstone_generation": 0}


# --- release specs ----------------------------------------------------------------------------------


def _write(path: Path, body: str) -> None:
    path.write_text(body, encoding="utf-8")


def test_a_changed_release_spec_is_read_again_even_with_the_same_size_and_mtime(tmp_path):
    p = tmp_path / "demo.yaml"
    _write(p, "name: demo\ndescription: aaaa\nsnapshots: {sources: [s1]}\n")
    st = p.stat()
    assert load_release_spec(p).description == "aaaa"
    assert load_release_spec(p).description == "aaaa"  # a second read of the same file
    _write(p, "name: demo\ndescription: bbbb\nsnapshots: {sources: [s1]}\n")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime: only the bytes differ
    assert load_release_spec(p).description == "bbbb"


def test_a_spec_that_became_invalid_is_refused_after_a_valid_read(tmp_path):
    p = tmp_path / "demo.yaml"
    _write(p, "name: demo\nsnapshots: {sources: [s1]}\npacking: {seq_len: 64}\nshards: {positions: 128}\n")
    assert load_release_spec(p).packing.seq_len == 64
    _write(p, "name: demo\nsnapshots: {sources: [s1]}\npacking: {seq_len: 64}\nshards: {positions: 32}\n")
    with pytest.raises(ConfigError, match="shards.positions"):
        load_release_spec(p)


def test_a_removed_tokenizer_file_is_refused_though_the_spec_file_is_unchanged(tmp_path):
    tok = tmp_path / "tok.json"
    tok.write_bytes(FIXTURE_TOKENIZER.read_bytes())
    p = tmp_path / "demo.yaml"
    _write(p, "name: demo\nsnapshots: {sources: [s1]}\n"
              "tokenizer: {path: tok.json, special_tokens: ['<|endoftext|>', '<|pad|>']}\n")
    assert load_release_spec(p).tokenizer.path == Path("tok.json")
    tok.unlink()
    with pytest.raises(ConfigError, match="tokenizer.path"):
        load_release_spec(p)


def test_a_spec_read_twice_is_the_same_spec_and_changing_one_copy_does_not_change_the_next(tmp_path):
    p = tmp_path / "demo.yaml"
    _write(p, "name: demo\nsnapshots: {sources: [s1]}\nsplit: {fractions: [0.5, 0.25, 0.25]}\n")
    first = load_release_spec(p)
    first.split.fractions[0] = 0.9
    again = load_release_spec(p)
    assert again.split.fractions == [0.5, 0.25, 0.25]
    assert again.as_written()["split"] == {"fractions": [0.5, 0.25, 0.25]}


def test_a_spec_value_from_the_environment_follows_the_environment(tmp_path, monkeypatch):
    p = tmp_path / "demo.yaml"
    _write(p, "name: demo\ndescription: '${DEMO_DESCRIPTION}'\nsnapshots: {sources: [s1]}\n")
    monkeypatch.setenv("DEMO_DESCRIPTION", "one")
    assert load_release_spec(p).description == "one"
    monkeypatch.setenv("DEMO_DESCRIPTION", "two")
    assert load_release_spec(p).description == "two"


# --- publish and verify -----------------------------------------------------------------------------


def _stage(files: dict[str, bytes], age_seconds: float = 0.0):
    def stage(tmp: Path) -> None:
        for rel, data in files.items():
            q = tmp / rel
            q.parent.mkdir(parents=True, exist_ok=True)
            q.write_bytes(data)
        if age_seconds:
            # stands for the shard-set files release builds link: written well before the publish
            time.sleep(age_seconds)

    return stage


FILES = {"shards/train/a.bin": b"a" * 5000, "shards/train/b.bin": b"b" * 7000, "reports/r.json": b"{}"}


def _publish(root: Path, age_seconds: float = 0.1):
    return publish_release(root, "demo", build_id(SPEC), _stage(FILES, age_seconds), lambda _t, _f: {"release": "demo"},
                           render_card=lambda m: "# card\n", signing_key=None)


def test_the_release_check_after_a_publish_still_finds_a_file_changed_in_place(tmp_path):
    res = _publish(tmp_path)
    assert len(res.verified) > 0  # the publish's verification read the files it keeps for the check
    assert verify_release(res.path, known=res.verified).content_digest == res.content_digest
    p = res.path / "shards/train/a.bin"
    st = p.stat()
    with open(p, "r+b") as f:  # same size, and the mtime put back: only ctime and the bytes differ
        f.write(b"X")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(ReleaseVerificationError, match=r"shards/train/a\.bin was changed"):
        verify_release(res.path, known=res.verified)


def test_the_release_check_after_a_publish_still_finds_a_replaced_or_extra_file(tmp_path):
    res = _publish(tmp_path)
    p = res.path / "shards/train/b.bin"
    p.unlink()
    p.write_bytes(b"c" * 7000)  # a new inode with the same size
    with pytest.raises(ReleaseVerificationError, match=r"shards/train/b\.bin was changed"):
        verify_release(res.path, known=res.verified)
    p.write_bytes(b"b" * 7000)
    (res.path / "shards/train/extra.bin").write_bytes(b"e")
    with pytest.raises(ReleaseVerificationError, match="extra file"):
        verify_release(res.path, known=res.verified)


def test_a_file_changed_within_the_clock_tick_it_was_read_in_is_not_remembered(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"x" * 10)
    st = p.stat()
    memo = VerifiedHashes()
    memo.record(st, st, max(st.st_mtime_ns, st.st_ctime_ns) + 1_000_000, "0" * 64)  # read 1 ms after its last change
    assert memo.lookup(st) is None
    memo.record(st, st, max(st.st_mtime_ns, st.st_ctime_ns) + 5_000_000_000, "0" * 64)  # read 5 s after
    assert memo.lookup(st) == "0" * 64


def test_a_file_written_while_the_publish_hashes_it_is_refused(tmp_path):
    """The staged copy's verification reads the bytes again; it does not trust the first hash."""

    def make_manifest(tmp: Path, _files: list[dict]) -> dict:
        # an artifact changed after it was hashed for the manifest (its size and mtime kept)
        q = tmp / "shards/train/a.bin"
        st = q.stat()
        with open(q, "r+b") as f:
            f.write(b"Z")
        os.utime(q, ns=(st.st_atime_ns, st.st_mtime_ns))
        return {"release": "demo"}

    with pytest.raises(ReleaseVerificationError, match=r"shards/train/a\.bin was changed"):
        publish_release(tmp_path, "demo", build_id(SPEC), _stage(FILES, 0.1), make_manifest, signing_key=None)
    assert not (tmp_path / "demo" / "CURRENT").exists()


# --- catalog ----------------------------------------------------------------------------------------


def _other_process_opens(path: Path) -> bool:
    code = ("import duckdb, sys\n"
            "try:\n    duckdb.connect(sys.argv[1]).close()\nexcept Exception:\n    sys.exit(3)\n")
    return subprocess.run([sys.executable, "-c", code, str(path)], timeout=60).returncode == 0


def test_a_catalog_session_holds_the_file_only_from_its_first_operation_to_its_end(tmp_path):
    db = tmp_path / "catalog.duckdb"
    cat = Catalog.at(db)
    cat.snapshots()  # creates the tables
    with cat.session():
        assert _other_process_opens(db)  # nothing opened yet: work before the first operation blocks nobody
        cat.register_snapshot("s1.20260101T000000", "s1", "jsonl", _utc(), 1, "v", {})
        assert [r["snapshot"] for r in cat.snapshots()] == ["s1.20260101T000000"]
    assert _other_process_opens(db)  # closed when the block ends


def test_an_operation_failing_in_a_session_rolls_back_alone(tmp_path):
    db = tmp_path / "catalog.duckdb"
    cat = Catalog.at(db)
    with pytest.raises(RuntimeError, match="boom"):
        with cat.session():
            cat.register_snapshot("s1.20260101T000000", "s1", "jsonl", _utc(), 1, "v", {})
            with cat.transaction() as conn:
                conn.execute("INSERT INTO catalog_meta VALUES ('k', 'v')")
                raise RuntimeError("boom")
    assert [r["snapshot"] for r in Catalog.at(db).snapshots()] == ["s1.20260101T000000"]
    with Catalog.at(db).transaction() as conn:
        assert conn.execute("SELECT count(*) FROM catalog_meta WHERE key = 'k'").fetchone()[0] == 0
    assert _other_process_opens(db)


def _utc():
    from datetime import datetime, timezone

    return datetime(2026, 1, 1, tzinfo=timezone.utc)
