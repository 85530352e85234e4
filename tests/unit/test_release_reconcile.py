"""The registry agrees with the published builds: ``registry.reconcile`` against real release
directories (Algorithm 18.3 publishes, ``withdraw_revoked`` revokes) and against an object store
(fsspec's memory file system, the same ``ObjectStore`` code as s3://), and ``corpus consume`` /
``corpus verify`` / ``corpus releases`` acting on it (``corpus_assets.cli.main`` in-process)."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from corpus_assets.cli import main
from corpus_assets.domain.release import registry as reg
from corpus_assets.domain.release.build import withdraw_revoked
from corpus_assets.domain.release.mirror import push_release
from corpus_assets.domain.release.publish import build_id, publish_release
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.storage.object_store import ObjectStore

SPECS = [{"release_spec": {"name": "demo", "build": i}} for i in range(3)]
B1, B2, B3 = (build_id(s) for s in SPECS)


def _publish(releases_root: Path, spec: dict, payload: bytes, release: str = "demo"):
    def stage(tmp: Path) -> None:
        (tmp / "shards" / "train").mkdir(parents=True)
        (tmp / "shards" / "train" / "train-00000.bin").write_bytes(payload)
        (tmp / "reports").mkdir()
        (tmp / "reports" / "stage_counts.json").write_bytes(b'{"accepted": 3}')

    created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return publish_release(releases_root, release, build_id(spec), stage,
                           lambda _t, _a: {"release": release, "created_at": created}, signing_key=None)


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("CORPUS_HOME", str(home))
    monkeypatch.delenv("CORPUS_CATALOG", raising=False)
    monkeypatch.delenv("CORPUS_LOCAL", raising=False)
    return home


def _cat(home: Path) -> Catalog:
    return Catalog.at(home / "catalog.duckdb")


def _status(cat, release="demo"):
    return {r["build_id"]: r["status"] for r in reg.registry(cat, release)}


def _crash_after_publishing(home: Path):
    """B1 published and registered; B2 published (CURRENT names it) but the process died before
    registering it — what a SIGKILL at ``release_manifest:published`` leaves."""
    cat = _cat(home)
    one = _publish(home / "releases", SPECS[0], b"one" * 100)
    reg.register_published(cat, "demo", one.build_id, one.content_digest, f"releases/demo/{one.build_id}")
    two = _publish(home / "releases", SPECS[1], b"two" * 100)
    assert (home / "releases" / "demo" / "CURRENT").read_text().strip() == B2
    assert reg.current_published(cat, "demo")["build_id"] == B1  # the registry disagrees with CURRENT
    return cat, one, two


def _consume(capsys, *argv):
    code = main(["consume", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- reconcile ----------------------------------------------------------------------------------------


def test_reconcile_registers_what_current_names_and_is_idempotent(home):
    cat, one, two = _crash_after_publishing(home)
    three = _publish(home / "releases", SPECS[2], b"three" * 100)  # a third sealed build ...
    (home / "releases" / "demo" / "CURRENT").write_text(B2 + "\n")  # ... that CURRENT does not name

    result = reg.reconcile(cat, home / "releases")
    rows = {r["build_id"]: r for r in reg.registry(cat, "demo")}
    assert {b: r["status"] for b, r in rows.items()} == {B1: "superseded", B2: "published", B3: "superseded"}
    assert rows[B2]["content_digest"] == two.content_digest and rows[B2]["path"] == f"releases/demo/{B2}"
    assert rows[B3]["content_digest"] == three.content_digest
    assert reg.current_published(cat, "demo")["build_id"] == B2
    assert sorted((c["build_id"], c["from"], c["to"]) for c in result.changes) == sorted(
        [(B1, "published", "superseded"), (B2, None, "superseded"), (B2, None, "published"), (B3, None, "superseded")])
    assert result.problems == ()
    # idempotent: nothing left to do, and the rows (times included) are unchanged
    before = reg.registry(cat)
    assert reg.reconcile(cat, home / "releases") == reg.Reconciliation()
    assert reg.registry(cat) == before
    # the regular registration that follows a rerun of the build is a no-op on the reconciled row
    assert reg.register_published(cat, "demo", B2, two.content_digest, f"releases/demo/{B2}") == rows[B2]


def test_reconcile_records_revocations_from_revoked_json_and_never_deletes_rows(home):
    cat, one, two = _crash_after_publishing(home)
    reg.record_consumption(cat, "run-7", "demo", B1, "trainer")
    gone = withdraw_revoked(LayerStore(home), home / "releases", "demo", B1, successor=B2, request_ids=["del-2", "del-1"])
    assert gone["shards_removed"] == 1
    note = json.loads((home / "releases" / "demo" / B1 / "REVOKED.json").read_text())
    assert note["revoked_at"].endswith("+00:00") and note["successor_build_id"] == B2

    reg.reconcile(cat, home / "releases")
    rows = {r["build_id"]: r for r in reg.registry(cat, "demo")}
    assert rows[B1]["status"] == "revoked" and rows[B2]["status"] == "published"
    assert rows[B1]["successor_build_id"] == B2 and rows[B1]["request_ids"] == ["del-1", "del-2"]
    assert rows[B1]["affected_runs"] == ["run-7"]  # the recorded consumer, never forgotten
    assert rows[B1]["revoked_at"][:19] == note["revoked_at"][:19] and rows[B1]["note"] == note["note"]
    # a build revoked on disk that the registry never knew is registered revoked, not superseded
    three = _publish(home / "releases", SPECS[2], b"three" * 100)
    (home / "releases" / "demo" / "CURRENT").write_text(B2 + "\n")
    withdraw_revoked(LayerStore(home), home / "releases", "demo", B3, successor=None, request_ids=["del-3"])
    reg.reconcile(cat, home / "releases")
    assert _status(cat) == {B1: "revoked", B2: "published", B3: "revoked"}
    # the second note of a build keeps its first time
    again = withdraw_revoked(LayerStore(home), home / "releases", "demo", B1, successor=B2, request_ids=["del-1"])
    assert again["shards_removed"] == 0
    assert json.loads((home / "releases" / "demo" / B1 / "REVOKED.json").read_text())["revoked_at"] == note["revoked_at"]
    # a registered build whose directory is gone stays registered as it was
    shutil.rmtree(home / "releases" / "demo" / B3)
    reg.reconcile(cat, home / "releases")
    assert _status(cat) == {B1: "revoked", B2: "published", B3: "revoked"}
    shutil.rmtree(home / "releases" / "demo")
    assert reg.reconcile(cat, home / "releases").changes == ()
    assert _status(cat) == {B1: "revoked", B2: "published", B3: "revoked"}


def test_reconcile_never_unrevokes_and_reports_a_digest_it_cannot_settle(home):
    cat, one, two = _crash_after_publishing(home)
    reg.reconcile(cat, home / "releases")
    reg.revoke(cat, "demo", B2, successor_build_id=None, request_ids=["del-9"])  # CURRENT still names B2
    reg.reconcile(cat, home / "releases")
    assert _status(cat) == {B1: "superseded", B2: "revoked"}
    assert reg.current_published(cat, "demo") is None
    # a registry row whose content digest is not the sealed manifest's: reported, left alone
    with cat.transaction() as conn:
        conn.execute("UPDATE release_registry SET content_digest = ? WHERE build_id = ?", ["f" * 64, B1])
    (home / "releases" / "demo" / "CURRENT").write_text(B1 + "\n")
    result = reg.reconcile(cat, home / "releases")
    assert result.changes == ()
    assert [(p["build_id"], "content digest" in p["problem"]) for p in result.problems] == [(B1, True), (None, False)]
    assert result.problems_of("demo", B2) == [result.problems[1]]  # the release-level one: CURRENT
    assert _status(cat) == {B1: "superseded", B2: "revoked"}
    # a CURRENT that is not a build id is reported, nothing is registered from it
    (home / "releases" / "demo" / "CURRENT").write_text("../../etc\n")
    result = reg.reconcile(cat, home / "releases")
    assert result.changes == () and [p["build_id"] for p in result.problems_of("demo")] == [None]
    assert "does not hold a build id ('../../etc')" in result.problems_of("demo")[0]["problem"]


def test_reconcile_reads_only_new_builds_and_currents_manifest_and_an_audit_reads_all(home, capsys):
    """Reconcile runs on every release run and deletion-sensor tick, and a release rebuilt for
    months keeps every build: a registered build's sealed manifest is not read again (only with
    ``audit``), while its revocation is still picked up."""
    cat, one, two = _crash_after_publishing(home)
    root = home / "releases"
    _publish(root, SPECS[2], b"three" * 100)  # CURRENT names B3
    assert reg.reconcile(cat, root).manifests_read == 2  # B2 and B3: new; B1 is registered
    again = reg.reconcile(cat, root)
    assert again == reg.Reconciliation() and again.manifests_read == 1  # CURRENT's
    # a registered build's manifest changed on disk: the fast path does not see it, an audit does
    manifest = root / "demo" / B1 / "manifest.json"
    manifest.write_text(json.dumps(dict(json.loads(manifest.read_text()), content_digest="e" * 64)))
    assert reg.reconcile(cat, root).problems == ()
    audited = reg.reconcile(cat, root, audit=True)
    assert audited.manifests_read == 3 and [p["build_id"] for p in audited.problems] == [B1]
    assert "content digest" in audited.problems[0]["problem"] and _status(cat)[B1] == "superseded"
    assert main(["releases", "--audit"]) == 0
    err = capsys.readouterr().err
    assert "audit: 3 sealed manifest(s) read, 1 problem(s)" in err and f"build {B1[:16]}" in err
    # a registered build revoked on disk is still found without reading its manifest
    withdraw_revoked(LayerStore(home), root, "demo", B2, successor=B3, request_ids=["del-5"])
    result = reg.reconcile(cat, root)
    assert [(c["build_id"], c["to"]) for c in result.changes] == [(B2, "revoked")] and result.manifests_read == 1
    assert {r["build_id"]: r["successor_build_id"] for r in reg.registry(cat, "demo")}[B2] == B3


def test_reconcile_reads_the_object_store_as_the_authority(tmp_path):
    remote = ObjectStore(f"memory://corpus-{uuid.uuid4().hex[:10]}/data")
    cat = Catalog.at(tmp_path / "catalog.duckdb")
    builds = {}
    for i, spec in enumerate(SPECS[:2]):
        r = _publish(tmp_path / "publisher" / "releases", spec, bytes([i]) * 500)
        push_release(remote, r.path, "demo", r.build_id, r.content_digest)
        builds[r.build_id] = r
    # only what the bucket holds counts: a local build this machine never pushed is not registered
    _publish(tmp_path / "local" / "releases", SPECS[2], b"local only")
    reg.register_published(cat, "demo", B1, builds[B1].content_digest, f"releases/demo/{B1}")
    withdraw_revoked(LayerStore(tmp_path / "local", remote=remote), tmp_path / "local" / "releases", "demo", B1,
                     successor=B2, request_ids=["del-1"])
    assert remote.read_bytes(f"releases/demo/{B1}/REVOKED.json") is not None
    assert remote.list_files(f"releases/demo/{B1}/shards") == []

    result = reg.reconcile(cat, tmp_path / "local" / "releases", remote=remote)
    rows = {r["build_id"]: r for r in reg.registry(cat, "demo")}
    assert {b: r["status"] for b, r in rows.items()} == {B1: "revoked", B2: "published"}
    assert rows[B1]["successor_build_id"] == B2 and rows[B1]["request_ids"] == ["del-1"]
    assert rows[B2]["content_digest"] == builds[B2].content_digest
    assert result.problems == ()
    assert reg.reconcile(cat, tmp_path / "local" / "releases", remote=remote).changes == ()


def test_reconcile_learns_a_buckets_revocations_from_its_index_and_an_audit_from_every_build(tmp_path):
    """In a bucket a registered build's revocation is found by one listing of the release's
    revocation index (``withdraw_remote`` writes it), not by a read per build; a build revoked
    before the index existed (REVOKED.json alone) is found by the audit."""
    from corpus_assets.domain.release.mirror import revoked_index_key

    remote = ObjectStore(f"memory://corpus-{uuid.uuid4().hex[:10]}/data")
    cat = Catalog.at(tmp_path / "catalog.duckdb")
    digests = {}
    for i, spec in enumerate(SPECS):
        r = _publish(tmp_path / "publisher" / "releases", spec, bytes([i]) * 500)
        push_release(remote, r.path, "demo", r.build_id, r.content_digest)
        digests[r.build_id] = r.content_digest
    local = tmp_path / "local" / "releases"
    reg.reconcile(cat, local, remote=remote)
    assert _status(cat) == {B1: "superseded", B2: "superseded", B3: "published"}

    withdraw_revoked(LayerStore(tmp_path / "local", remote=remote), local, "demo", B1, successor=B3, request_ids=["del-1"])
    assert remote.read_bytes(revoked_index_key("demo", B1)) == remote.read_bytes(f"releases/demo/{B1}/REVOKED.json")
    result = reg.reconcile(cat, local, remote=remote)
    assert [(c["build_id"], c["to"]) for c in result.changes] == [(B1, "revoked")] and result.manifests_read == 1
    assert {r["build_id"]: r["request_ids"] for r in reg.registry(cat, "demo")}[B1] == ["del-1"]

    # a revocation written before the index existed: not seen without reading every build, seen by the audit
    remote.write_bytes(f"releases/demo/{B2}/REVOKED.json", json.dumps({"successor_build_id": B3}).encode())
    assert reg.reconcile(cat, local, remote=remote).changes == ()
    audited = reg.reconcile(cat, local, remote=remote, audit=True)
    assert [(c["build_id"], c["to"]) for c in audited.changes] == [(B2, "revoked")] and audited.manifests_read == 3
    assert _status(cat) == {B1: "revoked", B2: "revoked", B3: "published"}


# --- corpus consume -----------------------------------------------------------------------------------


def test_consume_records_the_build_current_names_after_a_crash(home, capsys):
    cat, one, two = _crash_after_publishing(home)
    code, out, err = _consume(capsys, "demo", "--run-id", "pretrain-2026.11@a100+1")
    assert code == 0, err
    assert json.loads(out)["build_id"] == B2  # not B1, which the registry still called published
    assert f"reconciled release demo build {B2[:16]}: unregistered -> published" in err
    assert [c["build_id"] for c in reg.consumers(cat, "demo")] == [B2]
    # what a deletion resolved now reads: the build CURRENT names is the published one
    assert [r["build_id"] for r in reg.registry(cat) if r["status"] == "published"] == [B2]


def test_consume_refuses_superseded_and_revoked_builds_unless_forced(home, capsys):
    cat, one, two = _crash_after_publishing(home)
    code, _, err = _consume(capsys, "demo", "--run-id", "run-1", "--build-id", B1)
    assert code == 2 and f"build {B1} is superseded; the published build is {B2}" in err and "--force" in err
    assert reg.consumers(cat, "demo") == []
    code, out, err = _consume(capsys, "demo", "--run-id", "run-1", "--build-id", B1, "--force", "--note", "ablation")
    assert code == 0 and "forced: consumed a superseded build" in err
    assert json.loads(out)["note"] == "forced: consumed a superseded build; ablation"

    withdraw_revoked(LayerStore(home), home / "releases", "demo", B1, successor=B2, request_ids=["del-1"])
    code, _, err = _consume(capsys, "demo", "--run-id", "run-2", "--build-id", B1)
    assert code == 2 and f"build {B1} is revoked; consume its successor {B2}" in err
    code, out, _ = _consume(capsys, "demo", "--run-id", "run-2", "--build-id", B1, "--force")
    assert code == 0 and json.loads(out)["note"] == "forced: consumed a revoked build"
    # the published build needs no force, and --force on it records nothing special
    code, out, err = _consume(capsys, "demo", "--run-id", "run-3", "--force")
    assert code == 0 and json.loads(out)["note"] == "" and json.loads(out)["build_id"] == B2 and "forced" not in err
    assert {c["run_id"]: c["note"].split(";")[0] for c in reg.consumers(cat, "demo")} == {
        "run-1": "forced: consumed a superseded build", "run-2": "forced: consumed a revoked build", "run-3": ""}
    # the revocation reconciled from REVOKED.json lists the run that had read B1 (forced, but recorded)
    assert {r["build_id"]: r["affected_runs"] for r in reg.registry(cat, "demo")}[B1] == ["run-1"]


@pytest.mark.parametrize("run_id, why", [
    ("run\n7", "control character"), ("run\x1b[2J", "control character"), ("run 7", "whitespace"),
    ("run\t7", "control character"), ("a/b", "path separator"), ("a\\b", "path separator"), ("a..b", "'..'"),
    ("", "empty"), ("r" * 201, "201 characters"), ("-run", "only letters, digits"),
    ("run#7", "only letters, digits"), ("rün", "only letters, digits"),
])
def test_consume_refuses_a_bad_run_id_naming_the_field(home, capsys, run_id, why):
    cat, one, two = _crash_after_publishing(home)
    code, out, err = _consume(capsys, "demo", f"--run-id={run_id}")
    assert code == 2 and out == ""
    assert err.startswith("corpus: error: invalid --run-id ") and why in err
    assert "\n" not in err.rstrip("\n")  # the message itself never carries the newline
    with pytest.raises(reg.RegistryError, match=f"invalid run_id .*{why}"):
        reg.record_consumption(cat, run_id, "demo", B2, "trainer")
    assert reg.consumers(cat, "demo") == []


def test_consume_records_nothing_while_current_and_the_registry_disagree(home, capsys):
    cat, one, two = _crash_after_publishing(home)
    with cat.transaction() as conn:  # a row for B2 with another content digest
        conn.execute("INSERT INTO release_registry VALUES ('demo', ?, ?, ?, 'superseded', now(), NULL, NULL, NULL)",
                     [B2, "f" * 64, f"releases/demo/{B2}"])
    code, _, err = _consume(capsys, "demo", "--run-id", "run-1")
    assert code == 2 and "disagree" in err and "nothing recorded" in err
    assert reg.consumers(cat, "demo") == []


# --- corpus verify, corpus releases -------------------------------------------------------------------


def test_verify_says_revoked_and_exits_1(home, capsys):
    cat, one, two = _crash_after_publishing(home)
    withdraw_revoked(LayerStore(home), home / "releases", "demo", B1, successor=B2, request_ids=["del-2", "del-1"])
    note = json.loads((home / "releases" / "demo" / B1 / "REVOKED.json").read_text())
    expected = (f"REVOKED {home / 'releases' / 'demo' / B1}: revoked {note['revoked_at']} by deletion request(s) "
                f"del-1, del-2; successor {B2}")
    for target in (f"demo@{B1}", str(home / "releases" / "demo" / B1)):
        assert main(["verify", target]) == 1
        out = capsys.readouterr()
        assert out.out.splitlines() == [expected] and "missing" not in out.err
    assert main(["verify", "demo"]) == 0  # CURRENT: B2, intact
    assert capsys.readouterr().out.startswith(f"OK {home / 'releases' / 'demo' / B2}: 2 files")
    # a revocation without successor, CURRENT still naming it
    withdraw_revoked(LayerStore(home), home / "releases", "demo", B2, successor=None, request_ids=["del-3"])
    assert main(["verify", "demo"]) == 1
    assert capsys.readouterr().out.strip().endswith("by deletion request(s) del-3; successor none")
    assert _status(cat) == {B1: "revoked", B2: "revoked"}  # verify reconciled the registry first


def test_verify_of_a_revoked_build_in_the_object_store(tmp_path, monkeypatch, capsys):
    url = f"memory://corpus-{uuid.uuid4().hex[:10]}/data"
    monkeypatch.setenv("CORPUS_HOME", url)
    monkeypatch.setenv("CORPUS_LOCAL", str(tmp_path / "machine_a"))
    monkeypatch.delenv("CORPUS_CATALOG", raising=False)
    remote = ObjectStore(url)
    for i, spec in enumerate(SPECS[:2]):
        r = _publish(tmp_path / "machine_a" / "releases", spec, bytes([i]) * 500)
        push_release(remote, r.path, "demo", r.build_id, r.content_digest)
    withdraw_revoked(LayerStore(tmp_path / "machine_a", remote=remote), tmp_path / "machine_a" / "releases",
                     "demo", B1, successor=B2, request_ids=["del-1"])
    # machine C: nothing local; the bucket's REVOKED.json answers
    monkeypatch.setenv("CORPUS_LOCAL", str(tmp_path / "machine_c"))
    assert main(["verify", f"demo@{B1}"]) == 1
    out = capsys.readouterr()
    assert out.out.startswith(f"REVOKED {url}/releases/demo/{B1}: revoked 20")
    assert out.out.rstrip().endswith(f"by deletion request(s) del-1; successor {B2}")
    assert main(["verify", "demo"]) == 0
    assert capsys.readouterr().out.startswith(f"OK {tmp_path / 'machine_c' / 'releases' / 'demo' / B2}")
    assert _status(Catalog.at(tmp_path / "machine_c" / "catalog.duckdb")) == {B1: "revoked", B2: "published"}


@pytest.mark.parametrize("target", ["demo@../..", "demo@..", "demo@", "demo@" + B1[:-1] + "/", "../demo",
                                    "demo/../../x", "demo@" + "../" * 5 + "etc", "de mo", "demo@" + B1.upper()])
def test_verify_refuses_targets_that_would_leave_the_releases_folder(home, capsys, target):
    _crash_after_publishing(home)
    assert main(["verify", target]) == 1
    out = capsys.readouterr()
    refused = [line for line in out.err.splitlines() if line.startswith("corpus verify: ")]
    assert out.out == "" and len(refused) == 1 and refused[0].startswith(f"corpus verify: REFUSED {target}: invalid ")


def test_verify_refuses_a_release_folder_symlinked_outside(home, tmp_path, capsys):
    outside = tmp_path / "outside"
    one = _publish(outside, SPECS[0], b"one" * 100)
    (home / "releases").mkdir()
    (home / "releases" / "demo").symlink_to(outside / "demo")
    assert main(["verify", f"demo@{one.build_id}"]) == 1
    assert "resolves outside its root" in capsys.readouterr().err
    assert main(["verify", "demo"]) == 1


def test_releases_lists_the_reconciled_registry(home, capsys):
    cat, one, two = _crash_after_publishing(home)
    assert main(["releases", "demo"]) == 0
    out = capsys.readouterr()
    assert [line.split()[1:3] for line in out.out.splitlines()] == [[B1[:16], "superseded"], [B2[:16], "published"]]
    assert "reconciled release demo" in out.err
    assert main(["releases"]) == 0
    assert capsys.readouterr().err == ""  # nothing left to reconcile
