"""CORPUS_HOME on an object store, against a real S3 server (moto on 127.0.0.1, no mocks of s3fs/boto):

* ObjectStore: conditional create keeps the first writer, plain writes replace, listings and tree
  deletion agree with an independent boto3 listing, hostile keys are refused, the environment
  selects the store (or none) and bad options fail clearly;
* LayerStore with a remote: a commit puts every part file, the seal and the pointer in the bucket;
  another machine (an empty cache) reads the same bytes; tampered objects are refused and never
  cached; unsealed uploads are invisible and garbage-collected; a writer killed between the seal
  and the pointer leaves readers on the old version and the retry finishes the job; private tables
  stay owner-only when downloaded;
* release_mirror: push/pull of a published build, reuse, conflicts (sealed or claimed), stale and
  live claims, withdrawal, and a takeover after a publisher killed mid-upload;
* sealed trees: push/pull round trip, tampering refused without a partial directory.

Expected values come from boto3 listings and hashlib of local bytes, never from the code under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from corpus_assets.domain.release import signing
from corpus_assets.domain.storage.layer_store import LayerIntegrityError, LayerStore, TableSpec
from corpus_assets.domain.storage.object_store import (
    ObjectStore,
    ObjectStoreError,
    store_from_env,
    storage_options_from_env,
)
from corpus_assets.domain.release.publish import (
    STALE_AFTER_SECONDS,
    PublishError,
    ReleaseConflictError,
    build_id,
    publish_release,
    verify_release,
)
from corpus_assets.domain.release.mirror import pull_release, push_release, withdraw_remote
from processes import kill_at_pause_point
from publish_builds import FILES_A, FILES_B

PROJECT = Path(__file__).resolve().parents[2]


PREFIX = "corpus/home"  # the store is a prefix of the bucket, not its root

SCHEMA = pa.schema([("i", pa.int64()), ("text", pa.string())])
TABLES = {"rows": TableSpec(SCHEMA)}
# Small row groups and files so a version has several part files.
STORE_KW = {"rows_per_group": 10, "groups_per_file": 2}


def _rows(n: int) -> list[dict]:
    return [{"i": i, "text": f"row {i} " + "x" * (i % 13)} for i in range(n)]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree_digests(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path (hashlib on the local bytes)."""
    return {p.relative_to(root).as_posix(): _sha(p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}


def _remote(bucket: str) -> ObjectStore:
    return ObjectStore(f"s3://{bucket}/{PREFIX}")


def _commit(store: LayerStore, rows: list[dict]):
    with store.new_version("demo", "p1", TABLES, {"spec": 1}) as w:
        w.write("rows", rows)
        return w.commit()


def _get(s3, bucket: str, rel: str) -> bytes:
    return s3.client().get_object(Bucket=bucket, Key=f"{PREFIX}/{rel}")["Body"].read()


def _put(s3, bucket: str, rel: str, data: bytes) -> None:
    s3.client().put_object(Bucket=bucket, Key=f"{PREFIX}/{rel}", Body=data)


def _rels(s3, bucket: str, under: str = "") -> list[str]:
    """Keys below ``PREFIX/under`` as the bucket really holds them (boto3), relative to PREFIX."""
    prefix = f"{PREFIX}/{under}" if under else f"{PREFIX}/"
    return [k[len(PREFIX) + 1:] for k in s3.keys(bucket, prefix)]


# --- ObjectStore ----------------------------------------------------------------------------------


def test_conditional_create_keeps_the_first_writer_and_write_bytes_replaces(s3_env):
    """Seals: of two creators of one key the first wins; pointers: a plain write replaces."""
    bucket = s3_env.new_bucket()
    store = _remote(bucket)
    assert store.read_bytes("x/seal") is None and not store.exists("x/seal")
    assert store.create_bytes("x/seal", b"first") is True
    assert store.create_bytes("x/seal", b"second") is False
    assert _get(s3_env, bucket, "x/seal") == b"first"
    assert store.read_bytes("x/seal") == b"first" and store.exists("x/seal")
    store.write_bytes("x/CURRENT", b"v1\n")
    store.write_bytes("x/CURRENT", b"v2\n")
    assert _get(s3_env, bucket, "x/CURRENT") == b"v2\n"
    assert s3_env.keys(bucket) == [f"{PREFIX}/x/CURRENT", f"{PREFIX}/x/seal"]
    assert store.uri("x/seal") == f"s3://{bucket}/{PREFIX}/x/seal"


def test_listings_and_delete_tree_agree_with_boto3(s3_env, tmp_path):
    """list_dir / list_files show what the bucket holds; delete_tree removes exactly a subtree."""
    bucket = s3_env.new_bucket()
    store = _remote(bucket)
    rels = ["a/1.bin", "a/b/2.bin", "a/b/c/3.bin", "ab/4.bin", "top.txt"]
    for r in rels:
        _put(s3_env, bucket, r, r.encode())
    # a sibling outside the prefix must never show up
    s3_env.client().put_object(Bucket=bucket, Key="corpus/homeless/x", Body=b"x")
    local = tmp_path / "f.bin"
    local.write_bytes(b"uploaded")
    store.upload(local, "a/b/up.bin")
    assert _get(s3_env, bucket, "a/b/up.bin") == b"uploaded"

    listed = _rels(s3_env, bucket)
    assert store.list_files("") == listed
    assert store.list_files("a") == [r[2:] for r in listed if r.startswith("a/")]
    assert store.list_dir("") == sorted({r.split("/")[0] for r in listed}) == ["a", "ab", "top.txt"]
    assert store.list_dir("a") == ["1.bin", "b"]
    assert store.list_dir("missing") == [] and store.list_files("missing") == []

    store.download("a/b/c/3.bin", tmp_path / "dl" / "3.bin")
    assert (tmp_path / "dl/3.bin").read_bytes() == b"a/b/c/3.bin"
    with pytest.raises(FileNotFoundError, match="missing/x"):
        store.download("missing/x", tmp_path / "dl" / "x")

    expected_removed = len(_rels(s3_env, bucket, "a/"))
    assert store.delete_tree("a") == expected_removed == 4
    assert _rels(s3_env, bucket) == ["ab/4.bin", "top.txt"]
    assert "corpus/homeless/x" in s3_env.keys(bucket)
    store.delete("top.txt")
    store.delete("top.txt")  # deleting a missing object is not an error
    assert _rels(s3_env, bucket) == ["ab/4.bin"]
    assert store.delete_tree("nothing-here") == 0


@pytest.mark.parametrize("key", ["../x", "a//b", "/abs", "a/./b", "a/..", "a/b/", "a\\b"])
def test_hostile_keys_are_refused_before_touching_the_bucket(s3_env, tmp_path, key):
    """Keys that could escape or alias a prefix never reach the store, whatever the operation."""
    bucket = s3_env.new_bucket()
    store = _remote(bucket)
    local = tmp_path / "f"
    local.write_bytes(b"x")
    for op in (
        lambda: store.key(key),
        lambda: store.read_bytes(key),
        lambda: store.write_bytes(key, b"x"),
        lambda: store.create_bytes(key, b"x"),
        lambda: store.upload(local, key),
        lambda: store.exists(key),
    ):
        with pytest.raises(ObjectStoreError, match="refusing the object key"):
            op()
    assert s3_env.keys(bucket) == []


def test_store_from_env_selects_the_store_only_for_object_store_urls(s3_env, tmp_path, monkeypatch):
    """CORPUS_HOME as a path or file:// URL keeps the purely local deployment; s3:// selects the store."""
    assert store_from_env(str(tmp_path)) is None
    assert store_from_env(f"file://{tmp_path}") is None
    assert store_from_env("") is None
    bucket = s3_env.new_bucket()
    store = store_from_env(f"s3://{bucket}/{PREFIX}/")
    assert isinstance(store, ObjectStore) and store.url == f"s3://{bucket}/{PREFIX}"
    monkeypatch.setenv("CORPUS_HOME", f"s3://{bucket}/{PREFIX}")
    from_env = store_from_env()
    assert isinstance(from_env, ObjectStore)
    from_env.write_bytes("probe", b"ok")  # the env's credentials/endpoint really reach the server
    assert _get(s3_env, bucket, "probe") == b"ok"
    monkeypatch.setenv("CORPUS_HOME", str(tmp_path))
    assert store_from_env() is None
    with pytest.raises(ObjectStoreError, match="not an object-store URL"):
        ObjectStore(str(tmp_path))


def test_invalid_storage_options_fail_clearly(s3_env, monkeypatch):
    """A malformed CORPUS_STORAGE_OPTIONS names the variable instead of failing somewhere in fsspec."""
    monkeypatch.setenv("CORPUS_STORAGE_OPTIONS", '{"client_kwargs": ')
    with pytest.raises(ObjectStoreError, match="CORPUS_STORAGE_OPTIONS is not valid JSON"):
        store_from_env("s3://bucket/prefix")
    monkeypatch.setenv("CORPUS_STORAGE_OPTIONS", "[1, 2]")
    with pytest.raises(ObjectStoreError, match="must be a JSON object"):
        storage_options_from_env()
    monkeypatch.setenv("CORPUS_STORAGE_OPTIONS", '{"anon": false}')
    assert storage_options_from_env() == {"anon": False}
    # a local data root never reads the options, so a bad value cannot break it
    monkeypatch.setenv("CORPUS_STORAGE_OPTIONS", "{oops")
    assert store_from_env("/some/local/path") is None


# --- LayerStore with a remote ---------------------------------------------------------------------


def test_commit_puts_files_seal_and_pointer_in_the_bucket_and_another_machine_reads_them(s3_env, tmp_path):
    """After commit() the bucket alone is enough: a machine with an empty cache sees the same layer
    and reads byte-identical, verified files."""
    bucket = s3_env.new_bucket()
    writer = LayerStore(tmp_path / "a", remote=_remote(bucket), **STORE_KW)
    rows = _rows(95)
    v = _commit(writer, rows)
    base = f"layers/demo/p1/{v.version}"
    parts = [f["path"] for f in v.manifest["tables"]["rows"]["files"]]
    assert len(parts) >= 3  # several part files really went up
    # the bucket, listed independently, holds exactly: every part, the seal, the pointer
    assert _rels(s3_env, bucket) == sorted(
        [f"{base}/{p}" for p in parts] + [f"{base}/_manifest.json", "layers/demo/p1/CURRENT"]
    )
    assert _get(s3_env, bucket, "layers/demo/p1/CURRENT").decode().strip() == v.version
    assert _get(s3_env, bucket, f"{base}/_manifest.json") == (v.root / "_manifest.json").read_bytes()
    for f in v.manifest["tables"]["rows"]["files"]:
        assert _sha(_get(s3_env, bucket, f"{base}/{f['path']}")) == f["sha256"]
    assert v.location == f"s3://{bucket}/{PREFIX}/{base}"

    # another machine: empty local home, same bucket
    reader = LayerStore(tmp_path / "b", remote=_remote(bucket))
    assert not (tmp_path / "b").exists()
    assert reader.assets() == ["demo"]
    assert reader.partitions("demo") == ["p1"]
    assert reader.current_version_name("demo", "p1") == v.version
    assert reader.versions("demo", "p1") == [v.version]
    got = reader.current("demo", "p1")
    assert got.version == v.version and got.root == tmp_path / "b/layers/demo/p1" / v.version
    assert got.location == v.location
    assert _tree_digests(got.root) == _tree_digests(v.root)
    got.verify()
    assert got.read_table("rows").to_pylist() == rows
    assert [p.name for p in (tmp_path / "b/layers/demo/p1").iterdir()] == [v.version]  # no staging left


def test_a_tampered_object_is_refused_and_never_cached(s3_env, tmp_path):
    """An object altered in the bucket is refused by name and nothing of it lands in the cache."""
    bucket = s3_env.new_bucket()
    v = _commit(LayerStore(tmp_path / "a", remote=_remote(bucket), **STORE_KW), _rows(50))
    victim = v.manifest["tables"]["rows"]["files"][1]["path"]
    key = f"layers/demo/p1/{v.version}/{victim}"
    original = _get(s3_env, bucket, key)
    _put(s3_env, bucket, key, original[:-1] + bytes([original[-1] ^ 0xFF]))

    fresh = LayerStore(tmp_path / "b", remote=_remote(bucket))
    with pytest.raises(LayerIntegrityError, match=rf"{v.version}/{victim}.*does not match its manifest digest"):
        fresh.current("demo", "p1")
    partition_dir = tmp_path / "b/layers/demo/p1"
    leftovers = list(partition_dir.iterdir()) if partition_dir.is_dir() else []
    assert leftovers == []  # neither the version directory nor a .tmp-* staging directory
    # and it stays refused: a second read does not find a half-cached copy
    with pytest.raises(LayerIntegrityError):
        fresh.current("demo", "p1")


def test_unsealed_uploads_are_invisible_and_drop_versions_collects_them(s3_env, tmp_path):
    """A crashed writer's upload (no _manifest.json) is not a version; drop_versions() removes old
    sealed versions from the bucket and the cache at once, the unsealed upload once it is older
    than a live writer could be, and keeps the current one."""
    bucket = s3_env.new_bucket()
    store = LayerStore(tmp_path / "a", remote=_remote(bucket), **STORE_KW)
    old = _commit(store, _rows(30))
    new = _commit(store, _rows(31))
    assert old.version != new.version
    # a crashed writer's upload: data objects without _manifest.json
    crashed = "0123456789abcdef"
    _put(s3_env, bucket, f"layers/demo/p1/{crashed}/rows/part-00000.parquet", b"partial")
    _put(s3_env, bucket, f"layers/demo/p1/{crashed}/rows/part-00001.parquet", b"partial")

    assert store.versions("demo", "p1") == sorted([old.version, new.version])
    other = LayerStore(tmp_path / "b", remote=_remote(bucket))
    assert crashed not in other.versions("demo", "p1")
    assert other.current("demo", "p1").version == new.version

    # a young unsealed upload may be a live writer's: kept; an hour later it is a dead writer's
    assert store.drop_versions("demo", "p1") == [old.version]
    assert f"layers/demo/p1/{crashed}/rows/part-00000.parquet" in _rels(s3_env, bucket)
    assert store.drop_versions("demo", "p1", clock=lambda: time.time() + 3601) == []
    new_keys = [f"layers/demo/p1/{new.version}/{f['path']}" for f in new.manifest["tables"]["rows"]["files"]]
    assert _rels(s3_env, bucket) == sorted(
        new_keys + [f"layers/demo/p1/{new.version}/_manifest.json", "layers/demo/p1/CURRENT"]
    )
    assert store.versions("demo", "p1") == [new.version]
    assert not (tmp_path / "a/layers/demo/p1" / old.version).exists()  # local cache dropped too
    assert store.current("demo", "p1").version == new.version
    assert _get(s3_env, bucket, "layers/demo/p1/CURRENT").decode().strip() == new.version


_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import pyarrow as pa
    from corpus_assets.domain.storage.layer_store import LayerStore, TableSpec
    from corpus_assets.domain.storage.object_store import ObjectStore

    home, url, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    schema = pa.schema([("i", pa.int64()), ("text", pa.string())])
    rows = [{"i": i, "text": f"row {i} " + "x" * (i % 13)} for i in range(n)]
    store = LayerStore(home, remote=ObjectStore(url), rows_per_group=10, groups_per_file=2)
    with store.new_version("demo", "p1", {"rows": TableSpec(schema)}, {"spec": 1}) as w:
        w.write("rows", rows)
        w.commit()
    print("COMMITTED", flush=True)
    """
)


def test_writer_killed_between_seal_and_pointer_leaves_readers_on_the_old_version(s3_env, tmp_path):
    """SIGKILL after the seal, before the pointer: readers stay on the old version; the retry reuses
    the sealed upload (same version name) and moves the pointer."""
    bucket = s3_env.new_bucket()
    url = f"s3://{bucket}/{PREFIX}"
    home = tmp_path / "writer"
    first = _commit(LayerStore(home, remote=_remote(bucket), **STORE_KW), _rows(40))

    marker = tmp_path / "paused"
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    proc = kill_at_pause_point([sys.executable, str(script), str(home), url, "60"], "layer_store:sealed", marker,
                               env=dict(os.environ, PYTHONPATH=str(PROJECT)), cwd=PROJECT, timeout=60)
    assert marker.read_text().split()[0] == "layer_store:sealed"
    assert proc.returncode == -signal.SIGKILL

    # the killed writer's version is sealed in the bucket ...
    sealed = [r.split("/")[3] for r in _rels(s3_env, bucket, "layers/demo/p1/") if r.endswith("/_manifest.json")]
    second = next(n for n in sealed if n != first.version)
    assert sorted(sealed) == sorted([first.version, second])
    # ... but the pointer never moved: every reader still gets the first version
    assert _get(s3_env, bucket, "layers/demo/p1/CURRENT").decode().strip() == first.version
    reader = LayerStore(tmp_path / "reader", remote=_remote(bucket))
    got = reader.current("demo", "p1")
    assert got.version == first.version
    assert got.read_table("rows").to_pylist() == _rows(40)

    # the retry (same data, on the crashed writer's machine) reuses the seal and moves the pointer
    retry = _commit(LayerStore(home, remote=_remote(bucket), **STORE_KW), _rows(60))
    assert retry.version == second
    assert _get(s3_env, bucket, "layers/demo/p1/CURRENT").decode().strip() == second
    again = reader.current("demo", "p1")
    assert again.version == second and again.read_table("rows").to_pylist() == _rows(60)
    again.verify()


def test_private_tables_stay_owner_only_when_downloaded(s3_env, tmp_path):
    """Private tables keep 0700 directories and 0600 files on every machine that caches them."""
    bucket = s3_env.new_bucket()
    secret = pa.schema([("k", pa.string())])
    tables = {"rows": TableSpec(SCHEMA), "secret": TableSpec(secret, private=True)}
    writer = LayerStore(tmp_path / "a", remote=_remote(bucket), **STORE_KW)
    with writer.new_version("demo", "p1", tables, {"spec": 1}) as w:
        w.write("rows", _rows(5))
        w.write("secret", [{"k": f"v{i}"} for i in range(25)])
        v = w.commit()

    got = LayerStore(tmp_path / "b", remote=_remote(bucket)).current("demo", "p1")
    assert got.version == v.version
    secret_files = got.table_files("secret")
    assert len(secret_files) >= 2
    assert stat.S_IMODE((got.root / "secret").stat().st_mode) == 0o700
    for p in secret_files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "b/layers/demo/p1").stat().st_mode) == 0o700
    assert _tree_digests(got.root) == _tree_digests(v.root)


# --- release_mirror -------------------------------------------------------------------------------

SPEC = {"release_spec": {"name": "demo"}, "inputs": {"x": "c" * 64}, "tombstone_generation": 0}
# FILES_A / FILES_B: the same small builds as tests/test_publish.py (they differ in one shard's bytes)


def _publish(releases_root: Path, files=FILES_A, spec=SPEC):
    def stage(tmp: Path) -> None:
        for rel, data in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)

    return publish_release(releases_root, "demo", build_id(spec), stage,
                           lambda tmp, files: {"release": "demo"}, signing_key=None)


def test_push_and_pull_a_release(s3_env, tmp_path):
    """push_release mirrors every file of the published build and moves the store's CURRENT; a second
    push reuses it; another machine pulls a verified, byte-identical copy."""
    bucket = s3_env.new_bucket()
    remote = _remote(bucket)
    a = _publish(tmp_path / "A/releases")
    assert push_release(remote, a.path, "demo", a.build_id, a.content_digest) == "uploaded"
    local_files = sorted(_tree_digests(a.path))
    assert "manifest.json" in local_files
    base = f"releases/demo/{a.build_id}"
    # every file of the local build is in the bucket, byte for byte, and nothing else (no .claim)
    assert _rels(s3_env, bucket) == sorted([f"{base}/{f}" for f in local_files] + ["releases/demo/CURRENT"])
    for f, digest in _tree_digests(a.path).items():
        assert _sha(_get(s3_env, bucket, f"{base}/{f}")) == digest
    assert _get(s3_env, bucket, "releases/demo/CURRENT").decode().strip() == a.build_id

    before = {k: _get(s3_env, bucket, k) for k in _rels(s3_env, bucket)}
    assert push_release(remote, a.path, "demo", a.build_id, a.content_digest) == "reused"
    assert {k: _get(s3_env, bucket, k) for k in _rels(s3_env, bucket)} == before

    # another machine pulls it into an empty home
    b_root = tmp_path / "B/releases"
    assert pull_release(remote, b_root, "demo", "f" * 64) is None
    pulled = pull_release(remote, b_root, "demo", a.build_id)
    assert pulled == b_root / "demo" / a.build_id
    report = verify_release(pulled)
    assert report.content_digest == a.content_digest and report.build_id == a.build_id
    assert _tree_digests(pulled) == _tree_digests(a.path)
    assert sorted(p.name for p in (b_root / "demo").iterdir()) == [a.build_id]  # no .tmp-pull-* left


def test_same_build_id_with_different_content_is_refused_and_the_seal_kept(s3_env, tmp_path):
    """Algorithm 18.3 across machines: same build id, other content -> ReleaseConflictError, bucket untouched."""
    bucket = s3_env.new_bucket()
    remote = _remote(bucket)
    a = _publish(tmp_path / "A/releases")
    push_release(remote, a.path, "demo", a.build_id, a.content_digest)
    before = {k: _get(s3_env, bucket, k) for k in _rels(s3_env, bucket)}

    c = _publish(tmp_path / "C/releases", files=FILES_B)  # same spec, hence same build id
    assert c.build_id == a.build_id and c.content_digest != a.content_digest
    with pytest.raises(ReleaseConflictError) as info:
        push_release(remote, c.path, "demo", c.build_id, c.content_digest)
    assert info.value.ours == c.content_digest and info.value.theirs == a.content_digest
    # nothing changed in the bucket: manifest, artifacts and CURRENT are the first build's
    assert {k: _get(s3_env, bucket, k) for k in _rels(s3_env, bucket)} == before
    assert _sha(_get(s3_env, bucket, f"releases/demo/{a.build_id}/manifest.json")) == _sha(
        (a.path / "manifest.json").read_bytes())


def test_claims_conflict_stale_takeover_and_live_wait(s3_env, tmp_path):
    """The .claim decides between concurrent publishers: other content conflicts, a live claim of
    the same content makes us wait (here: give up at once), a stale one is taken over."""
    bucket = s3_env.new_bucket()
    remote = _remote(bucket)
    a = _publish(tmp_path / "A/releases")
    claim = f"releases/demo/{a.build_id}/.claim"

    # a claim by a publisher of other content: conflict, nothing uploaded, the claim untouched
    other = json.dumps({"content_digest": "0" * 64, "claimed_at": time.time(), "publisher": "x"}).encode()
    _put(s3_env, bucket, claim, other)
    with pytest.raises(ReleaseConflictError) as info:
        push_release(remote, a.path, "demo", a.build_id, a.content_digest, wait_seconds=0)
    assert info.value.theirs == "0" * 64
    assert _rels(s3_env, bucket) == [claim] and _get(s3_env, bucket, claim) == other

    # a live claim of the same content, and no waiting: the publisher is told to retry
    now = 1_000_000_000.0
    live = json.dumps({"content_digest": a.content_digest, "claimed_at": now - 10, "publisher": "y"}).encode()
    _put(s3_env, bucket, claim, live)
    with pytest.raises(PublishError) as info:
        push_release(remote, a.path, "demo", a.build_id, a.content_digest, wait_seconds=0, clock=lambda: now)
    assert not isinstance(info.value, ReleaseConflictError)
    assert "being uploaded" in str(info.value)
    assert _rels(s3_env, bucket) == [claim] and _get(s3_env, bucket, claim) == live

    # the same claim, now older than STALE_AFTER_SECONDS: its publisher died; we take over
    later = now + STALE_AFTER_SECONDS + 60
    assert push_release(remote, a.path, "demo", a.build_id, a.content_digest, wait_seconds=0,
                        clock=lambda: later) == "uploaded"
    base = f"releases/demo/{a.build_id}"
    assert _rels(s3_env, bucket) == sorted([f"{base}/{f}" for f in _tree_digests(a.path)] + ["releases/demo/CURRENT"])
    assert _get(s3_env, bucket, "releases/demo/CURRENT").decode().strip() == a.build_id


_CRASHED_PUBLISHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from corpus_assets.domain.storage.object_store import ObjectStore
    from corpus_assets.domain.release.publish import publish_release
    from corpus_assets.domain.release.mirror import push_release

    root, url, bid = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    files = {FILES!r}

    def stage(tmp):
        for rel, data in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)

    # signed (CORPUS_SIGNING_KEY is set for this machine), described at another time than the retry
    res = publish_release(root, "demo", bid, stage, lambda tmp, f: {{"release": "demo", "created_at": "machine X"}})
    assert res.signed
    push_release(ObjectStore(url), res.path, "demo", bid, res.content_digest)
    """
)


def test_takeover_after_a_crashed_upload_publishes_exactly_the_sealing_publishers_files(s3_env, tmp_path):
    """A publisher killed after uploading (before the seal) leaves objects behind; the publisher
    that takes the stale claim over seals its own manifest, and a consumer must pull exactly the
    build that manifest describes.

    (Found by this test: the crashed publisher's manifest.sig —
    machine X signs, machine Y does not — stayed in the sealed prefix and was pulled, a signature
    of another manifest. Now the claimant clears the prefix and pulls take only what the manifest
    describes.)"""
    bucket = s3_env.new_bucket()
    url = f"s3://{bucket}/{PREFIX}"
    remote = _remote(bucket)
    bid = build_id(SPEC)
    keypair = signing.generate_keypair()

    marker = tmp_path / "paused"
    script = tmp_path / "publisher.py"
    script.write_text(_CRASHED_PUBLISHER.format(FILES=FILES_A))
    kill_at_pause_point([sys.executable, str(script), str(tmp_path / "X/releases"), url, bid], "release_mirror:uploaded",
                        marker, env=dict(os.environ, PYTHONPATH=str(PROJECT), CORPUS_SIGNING_KEY=keypair.private_b64),
                        cwd=PROJECT, timeout=60)
    base = f"releases/demo/{bid}"
    left = _rels(s3_env, bucket)
    assert f"{base}/.claim" in left and f"{base}/manifest.sig" in left and f"{base}/manifest.json" not in left

    # machine Y: same build (same content), unsigned; an hour later the claim is stale
    y = _publish(tmp_path / "Y/releases")
    assert y.build_id == bid and not y.signed
    later = time.time() + STALE_AFTER_SECONDS + 60
    assert push_release(remote, y.path, "demo", bid, y.content_digest, wait_seconds=0, clock=lambda: later) == "uploaded"
    assert _get(s3_env, bucket, f"{base}/manifest.json") == (y.path / "manifest.json").read_bytes()
    assert f"{base}/.claim" not in _rels(s3_env, bucket)

    pulled = pull_release(remote, tmp_path / "Z/releases", "demo", bid)
    # consumers get exactly the sealed build: Y's files, byte for byte, and nothing else
    extra = sorted(set(_tree_digests(pulled)) - set(_tree_digests(y.path)))
    assert extra == [], f"the pulled build holds {extra}, which the sealing publisher never wrote"
    assert _tree_digests(pulled) == _tree_digests(y.path)
    assert not verify_release(pulled).signed


def test_withdraw_deletes_the_shards_and_records_the_revocation(s3_env, tmp_path):
    """A revocation removes the shards from the store and leaves REVOKED.json next to the manifest."""
    bucket = s3_env.new_bucket()
    remote = _remote(bucket)
    a = _publish(tmp_path / "A/releases")
    push_release(remote, a.path, "demo", a.build_id, a.content_digest)
    base = f"releases/demo/{a.build_id}"
    shards = _rels(s3_env, bucket, f"{base}/shards/")
    assert len(shards) == 3
    note = b'{"reason": "takedown"}'
    assert withdraw_remote(remote, "demo", a.build_id, note) == len(shards)
    assert _rels(s3_env, bucket, f"{base}/shards/") == []
    assert _get(s3_env, bucket, f"{base}/REVOKED.json") == note
    assert _get(s3_env, bucket, f"releases/demo/.revoked/{a.build_id}") == note  # the release's revocation index
    # the audit trail stays
    assert _get(s3_env, bucket, f"{base}/manifest.json") == (a.path / "manifest.json").read_bytes()
    assert f"{base}/reports/stage_counts.json" in _rels(s3_env, bucket)


# --- sealed trees ---------------------------------------------------------------------------------


def _make_tree(root: Path) -> None:
    for rel, data in {"a.bin": b"a" * 1000, "sub/b.bin": b"b" * 10, "sub/deep/c.idx": bytes(range(200))}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def test_sealed_tree_round_trip(s3_env, tmp_path):
    """A shard set pushed as a sealed tree comes back identical; an unsealed tree cannot be pulled."""
    bucket = s3_env.new_bucket()
    remote = _remote(bucket)
    src = tmp_path / "src"
    _make_tree(src)
    assert remote.push_tree(src, "shards/set1") is True
    assert _rels(s3_env, bucket) == sorted([f"shards/set1/{f}" for f in _tree_digests(src)] + ["shards/set1/_tree.json"])
    assert remote.push_tree(src, "shards/set1") is False  # already sealed: nothing uploaded
    dst = tmp_path / "machine2/shards/set1"
    with pytest.raises(FileNotFoundError, match="not a complete"):
        remote.pull_tree("shards/unsealed", tmp_path / "machine2/shards/unsealed")
    assert remote.pull_tree("shards/set1", dst) == dst
    assert _tree_digests(dst) == _tree_digests(src)
    assert sorted(p.name for p in dst.parent.iterdir()) == ["set1"]


def test_a_tampered_tree_object_is_refused_without_a_partial_directory(s3_env, tmp_path):
    """A sealed tree whose object was altered is refused by name and leaves no directory behind."""
    bucket = s3_env.new_bucket()
    remote = _remote(bucket)
    src = tmp_path / "src"
    _make_tree(src)
    remote.push_tree(src, "shards/set1")
    _put(s3_env, bucket, "shards/set1/sub/b.bin", b"B" * 10)
    dst = tmp_path / "machine2/shards/set1"
    with pytest.raises(ObjectStoreError, match=r"shards/set1/sub/b\.bin does not match its sealed digest"):
        remote.pull_tree("shards/set1", dst)
    assert not dst.exists()
    assert [p.name for p in dst.parent.iterdir()] == []  # no .tmp-pull-* left behind


def test_a_writer_on_another_machine_cannot_move_the_bucket_pointer_back(s3_env, tmp_path):
    """Machine B starts a version, machine A publishes another meanwhile (a purge, say): B's
    commit is refused with ConcurrentUpdateError and the bucket's CURRENT keeps A's version."""
    from corpus_assets.domain.storage.layer_store import ConcurrentUpdateError

    bucket = s3_env.new_bucket()
    a = LayerStore(tmp_path / "a", remote=_remote(bucket), **STORE_KW)
    b = LayerStore(tmp_path / "b", remote=_remote(bucket), **STORE_KW)
    base = _commit(a, _rows(5))
    wb = b.new_version("demo", "p1", TABLES, {"spec": "b"})
    wb.write("rows", _rows(9))
    moved = _commit(a, _rows(10))
    with pytest.raises(ConcurrentUpdateError, match=f"from {base.version} to {moved.version}"):
        wb.commit()
    assert _get(s3_env, bucket, "layers/demo/p1/CURRENT").decode().strip() == moved.version
    assert b.current("demo", "p1").version == moved.version
    assert len(b.versions("demo", "p1")) == 3  # B's version is sealed in the bucket, just not current


def test_conditional_replace_fails_when_the_object_changed_since_it_was_read(s3_env):
    bucket = s3_env.new_bucket()
    remote = _remote(bucket)
    remote.write_bytes("p/CURRENT", b"v1\n")
    data, etag = remote.read_versioned("p/CURRENT")
    assert data == b"v1\n" and etag
    remote.write_bytes("p/CURRENT", b"v2\n")  # another writer, between our read and our write
    assert remote.replace_if("p/CURRENT", b"v3\n", etag) is False
    assert _get(s3_env, bucket, "p/CURRENT") == b"v2\n"
    _, etag = remote.read_versioned("p/CURRENT")
    assert remote.replace_if("p/CURRENT", b"v3\n", etag) is True
    assert _get(s3_env, bucket, "p/CURRENT") == b"v3\n"
    assert remote.read_versioned("p/absent") == (None, None)
    assert remote.replace_if("p/absent", b"x", None) is True and remote.replace_if("p/absent", b"y", None) is False


def test_a_shard_set_set_aside_leaves_the_bucket_too_so_the_fresh_set_is_uploaded(s3_env, tmp_path):
    """A shard set that failed the span check's re-read is moved aside locally (kept for
    inspection) and dropped from the bucket; the set written afresh under the same name is then
    uploaded, and another machine reads the fresh bytes, not the changed ones."""
    from corpus_assets.domain.pack.shards_layer import SHARDS_TABLES, set_aside_shard_set

    bucket = s3_env.new_bucket()
    store = LayerStore(tmp_path / "a", remote=_remote(bucket))
    rel = "shards/r1/0123456789abcdef"
    shard = tmp_path / "a" / rel / "train" / "train-00000.bin"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"changed bytes")
    store.seal_tree(rel)
    with store.new_version("packed_shards", "r1", SHARDS_TABLES, {"spec": 1}) as w:
        w.write("shards", [{"split": "train", "name": "train-00000", "directory": f"{rel}/train", "blocks": 1,
                            "tokens": 2, "content_tokens": 2, "loss_tokens": 1, "bin_sha256": "0" * 64, "meta_json": "{}"}])
        version = w.commit()
    assert _rels(s3_env, bucket, rel)

    (aside,) = set_aside_shard_set(store, version)
    assert aside.parent == tmp_path / "a" / "shards" / "r1" and aside.name.startswith(".altered-0123456789abcdef-")
    assert (aside / "train" / "train-00000.bin").read_bytes() == b"changed bytes"
    assert not (tmp_path / "a" / rel).exists() and _rels(s3_env, bucket, rel) == []
    assert store.trees("shards/r1") == []  # the set aside is not a set

    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"fresh bytes")
    store.seal_tree(rel)
    other = LayerStore(tmp_path / "b", remote=_remote(bucket))
    assert (other.tree_dir(rel) / "train" / "train-00000.bin").read_bytes() == b"fresh bytes"


def test_older_builds_history_is_pruned_in_the_bucket_after_the_grace_period(s3_env, tmp_path):
    """prune_release_history on an object-store data root: superseded packed_shards versions and
    the shard sets only they name go from the bucket (and this machine's cache) once their
    successor is older than the grace period; another machine then finds only the current ones."""
    from corpus_assets.domain.pack.shards_layer import SHARDS_TABLES
    from corpus_assets.domain.release.history import prune_release_history

    bucket = s3_env.new_bucket()
    store = LayerStore(tmp_path / "a", remote=_remote(bucket))
    versions, sets = [], []
    for i in range(3):
        rel = f"shards/r1/{i:016x}"
        shard = tmp_path / "a" / rel / "train" / "train-00000.bin"
        shard.parent.mkdir(parents=True)
        shard.write_bytes(bytes([i]) * 64)
        store.seal_tree(rel)
        with store.new_version("packed_shards", "r1", SHARDS_TABLES, {"spec": i}) as w:
            w.write("shards", [{"split": "train", "name": "train-00000", "directory": f"{rel}/train", "blocks": 1,
                                "tokens": 2 + i, "content_tokens": 2, "loss_tokens": 1, "bin_sha256": "0" * 64,
                                "meta_json": "{}"}])
            versions.append(w.commit({"report": {"shard_set": rel}}).version)
        sets.append(rel.rsplit("/", 1)[-1])
    assert len(set(versions)) == 3 and store.current_version_name("packed_shards", "r1") == versions[2]

    young = prune_release_history(store, "r1", grace_seconds=3600, now=time.time())
    assert young.summary() == {"versions_dropped": 0, "versions_kept": 2, "shard_sets_removed": 0,
                               "shard_sets_kept": 2, "per_layer_dropped": {}}
    assert sorted(store.versions("packed_shards", "r1")) == sorted(versions)

    later = prune_release_history(store, "r1", grace_seconds=3600, now=time.time() + 7200)
    assert later.dropped["packed_shards"] == 2 and sorted(later.shard_sets_removed) == sets[:2]
    other = LayerStore(tmp_path / "b", remote=_remote(bucket))
    assert other.versions("packed_shards", "r1") == [versions[2]] and other.trees("shards/r1") == [sets[2]]
    assert not any(v in r for r in _rels(s3_env, bucket, "layers/packed_shards/r1") for v in versions[:2])
    assert [p.name for p in (tmp_path / "a" / "layers" / "packed_shards" / "r1").iterdir()
            if not p.name.startswith(".")] == [versions[2]]  # this machine's cache too (CURRENT is the bucket's)
    assert (other.tree_dir(f"shards/r1/{sets[2]}") / "train" / "train-00000.bin").read_bytes() == bytes([2]) * 64
