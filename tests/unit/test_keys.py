"""Identifiers are validated before they touch a path."""

from datetime import datetime, timedelta, timezone

import pytest

from corpus_assets.domain.core.keys import (
    InvalidKeyError,
    PathEscapeError,
    confine,
    parse_snapshot_key,
    snapshot_key,
    validate_release_name,
    validate_source_id,
)


def test_snapshot_key_round_trip_in_utc():
    when = datetime(2026, 11, 29, 15, 0, 0, tzinfo=timezone(timedelta(hours=1)))
    key = snapshot_key("pydocs", when)
    assert key == "pydocs.20261129T140000"
    assert parse_snapshot_key(key) == ("pydocs", datetime(2026, 11, 29, 14, 0, tzinfo=timezone.utc))


@pytest.mark.parametrize(
    "key",
    ["../etc.20261129T140000", "a/b.20261129T140000", "pydocs", "pydocs.2026", "pydocs.20261329T140000",
     "Pydocs.20261129T140000", "pydocs.20261129T140000/..", "x" * 70 + ".20261129T140000", "", "pydocs.20261129T140000\n"],
)
def test_hostile_or_malformed_snapshot_keys_are_refused(key):
    with pytest.raises(InvalidKeyError):
        parse_snapshot_key(key)


@pytest.mark.parametrize("bad", ["ok\n", "..", "a/b", "a b", "A", "-x", "x" * 65, "a.b", "", None, 3])
def test_bad_source_ids_and_release_names(bad):
    with pytest.raises(InvalidKeyError):
        validate_source_id(bad)
    with pytest.raises(InvalidKeyError):
        validate_release_name(bad)


def test_naive_datetime_refused():
    with pytest.raises(InvalidKeyError):
        snapshot_key("s", datetime(2026, 1, 1))


def test_confine_refuses_escapes_including_symlinks(tmp_path):
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    (root / "link.txt").symlink_to(outside)
    assert confine(root, "sub") == (root / "sub").resolve()
    for bad in ["../outside.txt", "sub/../../outside.txt", str(outside), "link.txt"]:
        with pytest.raises(PathEscapeError):
            confine(root, bad)


def test_confine_plain_agrees_with_confine_and_refuses_a_symlinked_directory_out(tmp_path):
    from corpus_assets.domain.core.keys import confine_plain

    root = (tmp_path / "release").resolve()
    (root / "shards" / "train").mkdir(parents=True)
    (root / "shards" / "train" / "a.bin").write_bytes(b"x")
    for rel in ("shards/train/a.bin", "shards/train/missing.bin", "manifest.json"):
        assert confine_plain(root, rel) == confine(root, rel)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.bin").write_bytes(b"y")
    (root / "escape").symlink_to(outside)
    with pytest.raises(PathEscapeError):
        confine_plain(root, "escape/b.bin")
    (root / "inside").symlink_to(root / "shards")  # a link that stays inside resolves like confine
    assert confine_plain(root, "inside/train/a.bin") == confine(root, "inside/train/a.bin")
