"""Algorithm 18.3 on real directories: identities, verify, reuse, conflict, crashes, concurrency, signing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from corpus_assets.domain.release import publish as pub
from corpus_assets.domain.release import signing
from corpus_assets.domain.release.publish import (
    ReleaseConflictError,
    ReleaseVerificationError,
    build_id,
    content_digest,
    current_release,
    publish_release,
    verify_release,
)

from publish_builds import FILES_A, FILES_B  # shared with integration/test_object_store.py

PROJECT = Path(__file__).resolve().parents[2]

SPEC = {
    "release_spec": {"name": "demo", "snapshots": ["a.20260101T000000"], "split": {"salt": "s"}},
    "code_versions": {"dedup_clusters": "3", "packed_shards": "2"},
    "inputs": {"curated_records/a.20260101T000000": "c" * 64},
    "tokenizer_digest": "t" * 64,
    "eval_registry_digest": "e" * 64,
    "tombstone_generation": 0,
}


def _stage_with(files: dict[str, bytes]):
    def stage(tmp: Path) -> None:
        for rel, data in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)

    return stage




def _manifest(note: str = "first"):
    def make(tmp: Path, files: list[dict]) -> dict:
        assert all(set(f) == {"path", "sha256", "bytes"} for f in files)
        return {"release": "demo", "note": note, "files_seen": len(files)}

    return make


def _publish(root: Path, files=FILES_A, spec=SPEC, note="first", signing_key=None, **kw):
    return publish_release(root, "demo", build_id(spec), _stage_with(files), _manifest(note), signing_key=signing_key, **kw)


# --- identities -----------------------------------------------------------------------------------


def test_build_id_is_stable_across_key_order_and_sensitive_to_every_field():
    reordered = {k: SPEC[k] for k in reversed(list(SPEC))}
    reordered["release_spec"] = {k: SPEC["release_spec"][k] for k in reversed(list(SPEC["release_spec"]))}
    assert build_id(reordered) == build_id(SPEC)
    assert len(build_id(SPEC)) == 64
    seen = {build_id(SPEC)}
    for key, value in SPEC.items():
        changed = dict(SPEC)
        changed[key] = value + 1 if isinstance(value, int) else (
            {**value, "extra": 1} if isinstance(value, dict) else value + "x"
        )
        seen.add(build_id(changed))
    nested = json.loads(json.dumps(SPEC))
    nested["release_spec"]["split"]["salt"] = "t"
    seen.add(build_id(nested))
    assert len(seen) == len(SPEC) + 2
    with pytest.raises(ValueError):
        build_id({})
    with pytest.raises(ValueError, match="64 lowercase hex"):
        pub.validate_build_id("../etc")


def test_content_digest_excludes_the_manifest(tmp_path):
    _stage_with(FILES_A)(tmp_path)
    files = sorted(FILES_A)
    d1 = content_digest(tmp_path, files)
    (tmp_path / "manifest.json").write_text('{"content_digest": "%s"}' % d1)
    assert content_digest(tmp_path, files + ["manifest.json"]) == d1
    (tmp_path / "manifest.json").write_text("anything else")
    assert content_digest(tmp_path, files + ["manifest.json"]) == d1
    # but every artifact byte, path and the set of files count
    (tmp_path / "reports/stage_counts.json").write_bytes(b'{"accepted": 11}')
    assert content_digest(tmp_path, files) != d1
    assert content_digest(tmp_path, files[:-1]) != content_digest(tmp_path, files)


# --- publish / verify -----------------------------------------------------------------------------


def test_publish_then_verify(tmp_path):
    res = _publish(tmp_path)
    assert not res.reused and res.current_updated and res.previous is None
    assert res.path == tmp_path / "demo" / res.build_id
    assert (tmp_path / "demo/CURRENT").read_text().strip() == res.build_id
    assert current_release(tmp_path, "demo") == res.path
    manifest = json.loads((res.path / "manifest.json").read_bytes())
    assert manifest["build_id"] == res.build_id and manifest["content_digest"] == res.content_digest
    assert [a["path"] for a in manifest["artifacts"]] == sorted(FILES_A)
    assert manifest["note"] == "first" and manifest["files_seen"] == len(FILES_A)
    # canonical JSON: sorted keys, compact
    assert (res.path / "manifest.json").read_bytes() == json.dumps(
        manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode()
    report = verify_release(res.path)
    assert report.content_digest == res.content_digest and report.files == len(FILES_A)
    assert report.bytes == sum(len(v) for v in FILES_A.values())
    assert not report.signed and not report.signature_checked
    assert not [p for p in (tmp_path / "demo").iterdir() if p.name.startswith(".")]
    assert current_release(tmp_path, "other") is None


def test_republish_same_build_and_content_is_reused_and_current_is_untouched(tmp_path):
    first = _publish(tmp_path)
    cur = tmp_path / "demo/CURRENT"
    before = (cur.read_bytes(), cur.stat().st_ino, cur.stat().st_mtime_ns)
    manifest_before = (first.path / "manifest.json").read_bytes()
    again = _publish(tmp_path, note="a descriptive field changed")
    assert again.reused and not again.current_updated
    assert again.content_digest == first.content_digest and again.path == first.path
    assert (cur.read_bytes(), cur.stat().st_ino, cur.stat().st_mtime_ns) == before
    # the published copy is never rewritten
    assert (first.path / "manifest.json").read_bytes() == manifest_before
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["CURRENT", first.build_id]


def test_same_build_id_with_different_content_is_a_conflict(tmp_path):
    first = _publish(tmp_path)
    with pytest.raises(ReleaseConflictError) as info:
        _publish(tmp_path, files=FILES_B)
    err = info.value
    assert err.theirs == first.content_digest and err.ours != first.content_digest
    msg = str(err)
    assert first.content_digest in msg and err.ours in msg and str(err.diagnostics) in msg
    assert "nothing was published" in msg
    # diagnostics kept, with the differing file named
    assert err.diagnostics.is_dir() and err.diagnostics.name.startswith(f".conflict-{first.build_id}-")
    report = json.loads((err.diagnostics / "conflict.json").read_bytes())
    assert report["changed"] == ["shards/train/train-00000.bin"]
    assert (err.diagnostics / "shards/train/train-00000.bin").read_bytes() == FILES_B["shards/train/train-00000.bin"]
    # nothing published: CURRENT and the existing version unchanged
    assert current_release(tmp_path, "demo") == first.path
    assert verify_release(first.path).content_digest == first.content_digest
    assert not list((tmp_path / "demo").glob(".tmp-*"))


def test_a_new_build_moves_current_and_reuse_repairs_a_pointer_left_behind(tmp_path):
    a = _publish(tmp_path)
    b = _publish(tmp_path, files=FILES_B, spec={**SPEC, "tombstone_generation": 1})
    assert b.previous == a.build_id and current_release(tmp_path, "demo") == b.path
    # a crash between rename and CURRENT leaves the complete version with the old pointer:
    (tmp_path / "demo/CURRENT").write_text(a.build_id + "\n")
    again = publish_release(
        tmp_path, "demo", b.build_id, _stage_with(FILES_B), _manifest(), signing_key=None
    )
    assert again.reused and again.current_updated and again.previous == a.build_id
    assert current_release(tmp_path, "demo") == b.path


def test_stage_failure_publishes_nothing(tmp_path):
    def stage(tmp):
        (tmp / "x.bin").write_bytes(b"x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        publish_release(tmp_path, "demo", build_id(SPEC), stage, _manifest(), signing_key=None)
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == []


def test_reserved_names_and_computed_fields_are_refused(tmp_path):
    bid = build_id(SPEC)
    with pytest.raises(pub.PublishError, match="manifest.json"):
        publish_release(tmp_path, "demo", bid, _stage_with({"manifest.json": b"{}"}), _manifest(), signing_key=None)
    with pytest.raises(pub.PublishError, match="content_digest"):
        publish_release(
            tmp_path, "demo", bid, _stage_with(FILES_A), lambda t, f: {"content_digest": "0" * 64}, signing_key=None
        )
    with pytest.raises(pub.PublishError, match="'release'"):
        publish_release(tmp_path, "demo", bid, _stage_with(FILES_A), lambda t, f: {"release": "other"}, signing_key=None)

    def symlink_stage(tmp):
        (tmp / "link").symlink_to("/etc/passwd")

    with pytest.raises(ReleaseVerificationError, match="symlink"):
        publish_release(tmp_path, "demo", bid, symlink_stage, _manifest(), signing_key=None)
    assert current_release(tmp_path, "demo") is None
    assert not [p for p in (tmp_path / "demo").iterdir()]


# --- verify refuses -------------------------------------------------------------------------------


def test_verify_names_a_tampered_shard(tmp_path):
    res = _publish(tmp_path)
    p = res.path / "shards/train/train-00000.bin"
    data = bytearray(p.read_bytes())
    data[100] ^= 1
    p.write_bytes(bytes(data))
    with pytest.raises(ReleaseVerificationError, match=r"shards/train/train-00000\.bin was changed"):
        verify_release(res.path)


def test_verify_refuses_a_missing_file(tmp_path):
    res = _publish(tmp_path)
    (res.path / "reports/stage_counts.json").unlink()
    with pytest.raises(ReleaseVerificationError, match=r"reports/stage_counts\.json is listed .* but missing"):
        verify_release(res.path)


def test_verify_refuses_a_truncated_file(tmp_path):
    res = _publish(tmp_path)
    p = res.path / "shards/validation/validation-00000.bin"
    p.write_bytes(p.read_bytes()[:10])
    with pytest.raises(ReleaseVerificationError, match=r"validation-00000\.bin has 10 bytes"):
        verify_release(res.path)


def test_verify_refuses_an_extra_file(tmp_path):
    res = _publish(tmp_path)
    (res.path / "shards/train/sneaky.bin").write_bytes(b"x")
    with pytest.raises(ReleaseVerificationError, match=r"shards/train/sneaky\.bin is not listed"):
        verify_release(res.path)


def test_verify_refuses_a_truncated_manifest(tmp_path):
    res = _publish(tmp_path)
    m = res.path / "manifest.json"
    m.write_bytes(m.read_bytes()[:50])
    with pytest.raises(ReleaseVerificationError, match=r"manifest\.json: not valid JSON"):
        verify_release(res.path)


def test_verify_refuses_a_partial_directory(tmp_path):
    res = _publish(tmp_path)
    (res.path / "manifest.json").unlink()
    with pytest.raises(ReleaseVerificationError, match=r"no manifest\.json .* partial"):
        verify_release(res.path)


def test_verify_refuses_a_manifest_whose_digest_does_not_match(tmp_path):
    res = _publish(tmp_path)
    m = res.path / "manifest.json"
    manifest = json.loads(m.read_bytes())
    manifest["content_digest"] = "0" * 64
    m.write_text(json.dumps(manifest))
    with pytest.raises(ReleaseVerificationError, match="content_digest 0{64} does not match"):
        verify_release(res.path)
    # a manifest edited consistently (entry + file) still cannot pass for another build id dir
    manifest["content_digest"] = res.content_digest
    manifest["build_id"] = "f" * 64
    m.write_text(json.dumps(manifest))
    with pytest.raises(ReleaseVerificationError, match="but the directory is build"):
        verify_release(res.path)


def test_verify_refuses_paths_escaping_the_release(tmp_path):
    res = _publish(tmp_path)
    m = res.path / "manifest.json"
    manifest = json.loads(m.read_bytes())
    manifest["artifacts"].append({"path": "../CURRENT", "sha256": "0" * 64, "bytes": 65})
    m.write_text(json.dumps(manifest))
    with pytest.raises(ReleaseVerificationError, match=r"invalid artifact path '\.\./CURRENT'"):
        verify_release(res.path)


def test_current_naming_a_missing_directory_is_an_error(tmp_path):
    res = _publish(tmp_path)
    (tmp_path / "demo/CURRENT").write_text("a" * 64)
    with pytest.raises(ReleaseVerificationError, match="does not exist"):
        current_release(tmp_path, "demo")
    (tmp_path / "demo/CURRENT").write_text("../../etc")
    with pytest.raises(ReleaseVerificationError, match="does not hold a build id"):
        current_release(tmp_path, "demo")
    assert res.path.is_dir()


# --- stale staging directories --------------------------------------------------------------------


def test_stale_staging_dirs_are_removed_only_when_their_owner_is_gone(tmp_path):
    rel = tmp_path / "demo"
    dead = rel / ".tmp-dead"
    (dead / "shards").mkdir(parents=True)
    (dead / "shards/x.bin").write_bytes(b"partial")
    live = rel / ".tmp-live"
    live.mkdir()
    from corpus_assets.domain.storage.dir_locks import lock_dir

    fd = lock_dir(live)  # a live publisher holds its lock
    try:
        res = _publish(tmp_path)
        assert not dead.exists()
        assert live.exists()
        assert current_release(tmp_path, "demo") == res.path
    finally:
        pub._unlock(fd)
    _publish(tmp_path)
    assert not live.exists()


# --- crash and concurrency (real processes) -------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from corpus_assets.domain.release.publish import publish_release

    root, bid, where = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    go = Path(sys.argv[4]) if len(sys.argv) > 4 else None

    def pause(point):
        if where == point:
            print("READY", flush=True)
            time.sleep(120)
        if where == "barrier" and point == "stage":
            print("READY", flush=True)
            while not go.exists():
                time.sleep(0.01)

    def stage(tmp):
        (tmp / "shards").mkdir()
        for i in range(20):
            (tmp / "shards" / f"part-{i:03d}.bin").write_bytes(bytes([i]) * 50_000)
            if i == 10:
                pause("mid_stage")
        pause("stage")

    def make_manifest(tmp, files):
        pause("manifest")
        return {"release": "demo", "files": len(files)}

    def card(manifest):
        pause("card")
        return "# demo card\\n" + manifest["content_digest"] + "\\n"

    res = publish_release(root, "demo", bid, stage, make_manifest, render_card=card, signing_key=None)
    print(json.dumps({"digest": res.content_digest, "reused": res.reused, "path": str(res.path)}), flush=True)
    """
)


def _child(tmp_path: Path, root: Path, bid: str, where: str, go: Path | None = None) -> subprocess.Popen:
    script = tmp_path / "child_publish.py"
    script.write_text(_CHILD)
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    env.pop("CORPUS_SIGNING_KEY", None)
    args = [sys.executable, str(script), str(root), bid, where] + ([str(go)] if go else [])
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=PROJECT)


def _run_child(tmp_path, root, bid, where="none") -> dict:
    proc = _child(tmp_path, root, bid, where)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _wait_ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    assert line.strip() == "READY", (line, proc.stderr.read() if proc.poll() is not None else "")


@pytest.mark.parametrize("where", ["mid_stage", "manifest", "card"])
def test_sigkill_mid_publish_leaves_the_previous_version_or_nothing(tmp_path, where):
    reference = _run_child(tmp_path, tmp_path / "reference", build_id(SPEC))
    root = tmp_path / "releases"
    old = None
    if where != "mid_stage":  # one case with no previous version, two with one
        old = _publish(root, spec={**SPEC, "previous": True})
    bid = build_id(SPEC)
    proc = _child(tmp_path, root, bid, where)
    _wait_ready(proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    rel = root / "demo"
    # consumers: CURRENT is still the old version (or absent), no partial <build_id> dir
    assert not (rel / bid).exists()
    if old is None:
        assert current_release(root, "demo") is None
    else:
        assert current_release(root, "demo") == old.path
        verify_release(old.path)
    assert [p.name for p in rel.glob(".tmp-*")]  # the killed publisher's staging dir is left behind
    # a rerun removes it and publishes the same content
    again = _run_child(tmp_path, root, bid)
    assert again["digest"] == reference["digest"] and again["reused"] is False
    assert current_release(root, "demo") == rel / bid
    assert verify_release(rel / bid).content_digest == reference["digest"]
    assert not list(rel.glob(".tmp-*"))


def test_two_processes_publishing_the_same_build_concurrently(tmp_path):
    root = tmp_path / "releases"
    for round_ in range(3):
        bid = build_id({**SPEC, "round": round_})
        go = tmp_path / f"go-{round_}"
        procs = [_child(tmp_path, root, bid, "barrier", go) for _ in range(2)]
        for p in procs:
            _wait_ready(p)  # both have staged everything before either renames
        go.touch()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        assert results[0]["digest"] == results[1]["digest"]
        assert sorted(r["reused"] for r in results) == [False, True]
        rel = root / "demo"
        assert current_release(root, "demo") == rel / bid
        verify_release(rel / bid)
        assert not [p.name for p in rel.iterdir() if p.name.startswith((".tmp-", ".new-", ".conflict-"))]
    assert len([p for p in (root / "demo").iterdir() if not p.name.startswith(".") and p.is_dir()]) == 3


@pytest.mark.parametrize("rival_files,expect_conflict", [(FILES_A, False), (FILES_B, True)])
def test_losing_the_rename_race_falls_back_to_compare(tmp_path, monkeypatch, rival_files, expect_conflict):
    """A rival publishes the same build between our existence check and our rename."""
    real_rename = os.rename
    bid = build_id(SPEC)
    rival: dict = {}

    def racing_rename(src, dst):
        if Path(dst).name == bid and not rival:
            rival["started"] = True
            rival["result"] = _publish(tmp_path, files=rival_files)  # the rival wins the rename
        return real_rename(src, dst)  # ours now fails with ENOTEMPTY / EEXIST

    monkeypatch.setattr(os, "rename", racing_rename)
    if expect_conflict:
        with pytest.raises(ReleaseConflictError):
            _publish(tmp_path)
    else:
        res = _publish(tmp_path)
        assert res.reused and res.content_digest == rival["result"].content_digest
    published = verify_release(tmp_path / "demo" / bid)
    assert published.content_digest == rival["result"].content_digest
    assert current_release(tmp_path, "demo") == tmp_path / "demo" / bid
    assert not list((tmp_path / "demo").glob(".tmp-*"))


# --- signing --------------------------------------------------------------------------------------


@pytest.fixture
def keypair():
    return signing.generate_keypair()


def test_signing_round_trip_from_the_environment(tmp_path, monkeypatch, keypair):
    monkeypatch.setenv(signing.KEY_ENV, keypair.private_b64)
    res = _publish(tmp_path / "releases", signing_key="env")
    assert res.signed and (res.path / "manifest.sig").is_file()
    key_file = keypair.write_public(tmp_path / "trusted.pub")
    report = verify_release(res.path, public_key=key_file)
    assert report.signature_checked and report.key_id == keypair.key_id
    sig = json.loads((res.path / "manifest.sig").read_bytes())
    assert sig["key_id"] == keypair.key_id and sig["algorithm"] == "ed25519"
    # raw public key bytes and a PEM private key in the environment work too
    assert verify_release(res.path, public_key=keypair.public_raw).signature_checked
    monkeypatch.setenv(signing.KEY_ENV, keypair.private_pem.decode())
    res2 = _publish(tmp_path / "releases2", signing_key="env")
    assert verify_release(res2.path, public_key=key_file).key_id == keypair.key_id
    # without a key the signature is reported but not checked
    plain = verify_release(res.path)
    assert plain.signed and not plain.signature_checked and plain.key_id == keypair.key_id


def test_wrong_key_is_refused(tmp_path, keypair):
    res = _publish(tmp_path / "releases", signing_key=signing.load_private_key(keypair.private_b64))
    other = signing.generate_keypair().write_public(tmp_path / "other.pub")
    with pytest.raises(ReleaseVerificationError, match=r"manifest\.sig: signed by key .* trusted public key is"):
        verify_release(res.path, public_key=other)


def test_a_manifest_edited_after_signing_is_refused(tmp_path, keypair):
    res = _publish(tmp_path / "releases", signing_key=signing.load_private_key(keypair.private_b64))
    m = res.path / "manifest.json"
    manifest = json.loads(m.read_bytes())
    manifest["note"] = "edited"  # digests still consistent: only the signature can tell
    m.write_bytes(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
    verify_release(res.path)  # hashes alone pass
    with pytest.raises(ReleaseVerificationError, match="signature is for manifest sha256"):
        verify_release(res.path, public_key=keypair.write_public(tmp_path / "k.pub"))


def test_key_inside_the_release_dir_is_refused(tmp_path, keypair):
    root = tmp_path / "releases"
    res = _publish(root, signing_key=signing.load_private_key(keypair.private_b64))
    for inside in (res.path / "trusted.pub", root / "demo" / "trusted.pub"):
        keypair.write_public(inside)
        with pytest.raises(signing.SigningKeyError, match="inside the release directory"):
            verify_release(res.path, public_key=inside)
        inside.unlink()


def test_missing_signature_is_refused_when_a_key_is_given(tmp_path, keypair):
    res = _publish(tmp_path / "releases")
    with pytest.raises(ReleaseVerificationError, match=r"no manifest\.sig"):
        verify_release(res.path, public_key=keypair.write_public(tmp_path / "k.pub"))


def test_bad_signing_key_in_environment_is_refused_without_echoing_it(monkeypatch):
    monkeypatch.setenv(signing.KEY_ENV, "not-a-key-SECRETVALUE")
    with pytest.raises(signing.SigningKeyError) as info:
        signing.private_key_from_env()
    assert "SECRETVALUE" not in str(info.value) and signing.KEY_ENV in str(info.value)
    monkeypatch.setenv(signing.KEY_ENV, "")
    assert signing.private_key_from_env() is None


# --- digests the producer recorded ----------------------------------------------------------------

def _claiming(files: dict[str, bytes], claims: dict[str, tuple[str, int]]):
    write = _stage_with(files)

    def stage(tmp: Path):
        write(tmp)
        return claims

    return stage


def test_claimed_digests_give_the_same_release_as_hashing(tmp_path):
    import hashlib

    plain = _publish(tmp_path / "plain")
    claims = {rel: (hashlib.sha256(data).hexdigest(), len(data)) for rel, data in FILES_A.items()}
    claims["not/staged.bin"] = ("0" * 64, 3)  # a claim for a file that was not staged is ignored
    res = publish_release(tmp_path / "claimed", "demo", build_id(SPEC), _claiming(FILES_A, claims), _manifest(),
                          signing_key=None)
    assert res.content_digest == plain.content_digest and res.artifacts == plain.artifacts
    assert (res.path / "manifest.json").read_bytes() == (plain.path / "manifest.json").read_bytes()
    assert verify_release(res.path).content_digest == res.content_digest


def test_a_file_that_does_not_hold_its_claimed_digest_is_never_published(tmp_path):
    import hashlib

    first = _publish(tmp_path)
    rel = "shards/train/train-00000.bin"
    damaged = bytes([FILES_B[rel][0] ^ 1]) + FILES_B[rel][1:]  # same size, one bit off: a damaged shard set
    claims = {rel: (hashlib.sha256(FILES_B[rel]).hexdigest(), len(FILES_B[rel]))}
    spec = {**SPEC, "tombstone_generation": 1}
    with pytest.raises(pub.PublishError, match="does not hold the digest its producer recorded") as info:
        publish_release(tmp_path, "demo", build_id(spec), _claiming({**FILES_B, rel: damaged}, claims), _manifest(),
                        signing_key=None)
    assert rel in str(info.value)
    # nothing published: the previous build stays current, no directory or staging left
    assert current_release(tmp_path, "demo") == first.path
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["CURRENT", first.build_id]
    # a claim of another size is not used: the file is hashed as it is
    res = publish_release(tmp_path, "demo", build_id(spec), _claiming(FILES_B, {rel: ("0" * 64, len(FILES_B[rel]) + 1)}),
                          _manifest(), signing_key=None)
    assert verify_release(res.path).content_digest == res.content_digest
