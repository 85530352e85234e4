"""Release registry and consumption records on a real DuckDB catalog file."""

from __future__ import annotations

import pytest

from corpus_assets.domain.release import registry as reg
from corpus_assets.domain.storage.catalog import Catalog

B1, B2, B3 = "1" * 64, "2" * 64, "3" * 64
D1, D2, D3 = "a" * 64, "b" * 64, "c" * 64


@pytest.fixture
def catalog(tmp_path):
    return Catalog.at(tmp_path / "catalog.duckdb")


def _status(catalog, release="demo"):
    return {r["build_id"]: r["status"] for r in reg.registry(catalog, release)}


def test_register_is_idempotent_and_supersedes_the_previous_version(catalog):
    first = reg.register_published(catalog, "demo", B1, D1, "releases/demo/" + B1)
    assert first["status"] == "published" and first["published_at"].endswith("+00:00")
    again = reg.register_published(catalog, "demo", B1, D1, "releases/demo/" + B1)
    assert again == first  # no-op: same row, same time
    assert len(reg.registry(catalog)) == 1
    reg.register_published(catalog, "demo", B2, D2, "releases/demo/" + B2)
    assert _status(catalog) == {B1: "superseded", B2: "published"}
    assert reg.current_published(catalog, "demo")["build_id"] == B2
    # another release is independent
    reg.register_published(catalog, "other", B1, D1, "releases/other/" + B1)
    assert _status(catalog) == {B1: "superseded", B2: "published"}
    assert reg.current_published(catalog, "other")["build_id"] == B1
    assert [r["release"] for r in reg.registry(catalog)] == ["demo", "demo", "other"]
    # rollback: registering a superseded build makes it the published one again
    reg.register_published(catalog, "demo", B1, D1, "releases/demo/" + B1)
    assert _status(catalog) == {B1: "published", B2: "superseded"}
    assert reg.current_published(catalog, "missing") is None


def test_same_build_with_other_content_is_a_conflict(catalog):
    reg.register_published(catalog, "demo", B1, D1, "p")
    with pytest.raises(reg.RegistryConflictError, match=f"build {B1} is registered with content digest {D1}, not {D2}"):
        reg.register_published(catalog, "demo", B1, D2, "p")
    with pytest.raises(reg.RegistryConflictError, match="path"):
        reg.register_published(catalog, "demo", B1, D1, "q")
    with pytest.raises(Exception, match="release name"):
        reg.register_published(catalog, "../x", B1, D1, "p")


def test_revoke_with_successor_request_ids_and_runs(catalog):
    reg.register_published(catalog, "demo", B1, D1, "p1")
    reg.record_consumption(catalog, "run-7", "demo", B1, "trainer-a", note="pretrain")
    reg.register_published(catalog, "demo", B2, D2, "p2")  # the successor, built without the deleted data
    row = reg.revoke(
        catalog, "demo", B1, successor_build_id=B2, request_ids=["del-2", "del-1"],
        affected_runs=["run-9"], note="takedown",
    )
    assert row["status"] == "revoked" and row["successor_build_id"] == B2 and row["revoked_at"]
    assert row["request_ids"] == ["del-1", "del-2"]
    assert row["affected_runs"] == ["run-7", "run-9"]  # recorded consumers are never dropped
    assert row["note"] == "takedown"
    assert _status(catalog) == {B1: "revoked", B2: "published"}
    # idempotent: same call again is a no-op
    assert reg.revoke(catalog, "demo", B1, successor_build_id=B2, request_ids=["del-1", "del-2"],
                      affected_runs=["run-9"], note="takedown") == row
    # a second request for the same revoked build adds to it
    more = reg.revoke(catalog, "demo", B1, successor_build_id=B2, request_ids=["del-3"], note="second request")
    assert more["request_ids"] == ["del-1", "del-2", "del-3"] and more["revoked_at"] == row["revoked_at"]
    assert more["note"] == "takedown\nsecond request"
    with pytest.raises(reg.RegistryConflictError, match="already revoked with successor"):
        reg.revoke(catalog, "demo", B1, successor_build_id=None, request_ids=["del-1"])
    # a revoked version is never registered as published again; a new publish does not un-revoke it
    with pytest.raises(reg.RevokedReleaseError, match="revoked"):
        reg.register_published(catalog, "demo", B1, D1, "p1")
    reg.register_published(catalog, "demo", B3, D3, "p3")
    assert _status(catalog) == {B1: "revoked", B2: "superseded", B3: "published"}


def test_revoke_refuses_unknown_builds_and_bad_successors(catalog):
    reg.register_published(catalog, "demo", B1, D1, "p1")
    with pytest.raises(reg.UnknownReleaseError, match=f"build {B2} is not registered"):
        reg.revoke(catalog, "demo", B2, successor_build_id=None, request_ids=[])
    with pytest.raises(reg.UnknownReleaseError, match=f"successor build {B2} is not registered"):
        reg.revoke(catalog, "demo", B1, successor_build_id=B2, request_ids=["r"])
    with pytest.raises(reg.RegistryError, match="own successor"):
        reg.revoke(catalog, "demo", B1, successor_build_id=B1, request_ids=["r"])
    assert _status(catalog) == {B1: "published"}


def test_consumption_refuses_unknown_superseded_and_revoked_builds_unless_forced(catalog):
    reg.register_published(catalog, "demo", B1, D1, "p1")
    first = reg.record_consumption(catalog, "run-1", "demo", B1, "trainer", note="n")  # B1 is published
    assert reg.record_consumption(catalog, "run-1", "demo", B1, "trainer", note="other") == first  # idempotent
    reg.register_published(catalog, "demo", B2, D2, "p2")
    with pytest.raises(reg.UnknownReleaseError, match=f"build {B3} is not registered"):
        reg.record_consumption(catalog, "run-1", "demo", B3, "trainer")
    with pytest.raises(reg.SupersededReleaseError, match=f"build {B1} is superseded; the published build is {B2}"):
        reg.record_consumption(catalog, "run-4", "demo", B1, "trainer")
    forced = reg.record_consumption(catalog, "run-4", "demo", B1, "ablation", note="old tokenizer", force=True)
    assert forced["note"] == "forced: consumed a superseded build; old tokenizer"
    with pytest.raises(reg.SupersededReleaseError):  # allow_revoked does not cover a superseded build
        reg.record_consumption(catalog, "run-5", "demo", B1, "trainer", allow_revoked=True)
    reg.record_consumption(catalog, "run-2", "demo", B2, "trainer")
    reg.revoke(catalog, "demo", B1, successor_build_id=B2, request_ids=["del-1"])
    with pytest.raises(reg.RevokedReleaseError, match=f"build {B1} is revoked; consume its successor {B2}"):
        reg.record_consumption(catalog, "run-3", "demo", B1, "trainer")
    assert reg.record_consumption(catalog, "run-3", "demo", B1, "repro", allow_revoked=True)["note"] == \
        "forced: consumed a revoked build"
    assert reg.record_consumption(catalog, "run-6", "demo", B1, "repro", force=True)["note"] == \
        "forced: consumed a revoked build"
    assert [c["run_id"] for c in reg.consumers(catalog, "demo", B1)] == ["run-1", "run-4", "run-3", "run-6"]
    assert {c["run_id"] for c in reg.consumers(catalog, "demo")} == {"run-1", "run-2", "run-3", "run-4", "run-6"}
    assert first["note"] == "n" and first["consumer"] == "trainer" and first["consumed_at"]
    assert reg.consumers(catalog, "other") == []


@pytest.mark.parametrize("run_id", ["run-7", "a", "R2D2", "pretrain.v3:seed@node+1", "x" * 200, "0_run"])
def test_run_ids_that_are_accepted(catalog, run_id):
    reg.register_published(catalog, "demo", B1, D1, "p1")
    assert reg.validate_run_id(run_id) == run_id
    assert reg.record_consumption(catalog, run_id, "demo", B1, "trainer")["run_id"] == run_id


@pytest.mark.parametrize("run_id", ["", "x" * 201, "a\nb", "a\rb", "a\x00b", "a b", " a", "a/b", "a\\b", "..", "a..b",
                                    ".hidden", "_a", "a;b", "a*", None, 7])
def test_run_ids_that_are_refused_name_the_field(catalog, run_id):
    reg.register_published(catalog, "demo", B1, D1, "p1")
    with pytest.raises(reg.RegistryError, match="invalid run_id"):
        reg.record_consumption(catalog, run_id, "demo", B1, "trainer")
    with pytest.raises(ValueError, match="invalid --run-id"):
        reg.validate_run_id(run_id, "--run-id")
    assert reg.consumers(catalog, "demo") == []


def test_registry_survives_reopening_the_catalog_file(tmp_path):
    path = tmp_path / "catalog.duckdb"
    reg.register_published(Catalog.at(path), "demo", B1, D1, "p1")
    reg.record_consumption(Catalog.at(path), "run-1", "demo", B1, "trainer")
    reopened = Catalog.at(path)
    assert reg.current_published(reopened, "demo")["content_digest"] == D1
    assert reg.consumers(reopened, "demo")[0]["run_id"] == "run-1"
