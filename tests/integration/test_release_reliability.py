"""Reliability of publishing and deletion, with real processes:

* SIGKILL in the middle of packed_shards and of release_manifest: nothing partial is visible, and
  the rerun publishes the same content digest as an uninterrupted build;
* SIGKILL between publishing a release (CURRENT moved) and registering it: ``corpus consume``
  reconciles the registry first and records the build CURRENT names, which a deletion's
  resolution then sees as the published one;
* two processes materializing the same release at once publish one version, the other reuses it;
* the deletion sensor dying between resolving a request and requesting its runs loses nothing and
  applies nothing twice.
"""

import os
import shutil
import subprocess
import sys

import dagster as dg
import pytest

from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.release.registry import registry
from processes import kill_at_pause_point
from release_fixture import TOKENIZER, build_snapshots, setup_release

BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 512}\n")


def _built(tmp_path, monkeypatch, corpus_env):
    """Snapshots and the whole release built once in the persistent instance at DAGSTER_HOME."""
    setup_release(tmp_path, monkeypatch, BODY)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.DagsterInstance.get() as instance:
        build_snapshots(defs, instance)
        instance.add_dynamic_partitions("releases", ["r1"])
        assert defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key="r1").success
    store = LayerStore(corpus_env)
    return defs, store


def _materialize_cmd(select: str) -> list[str]:
    return [sys.executable, "-m", "dagster", "asset", "materialize", "-m", "corpus_assets.definitions",
            "--select", select, "--partition", "r1"]


def _run_and_kill_at(point: str, select: str, tmp_path) -> None:
    kill_at_pause_point(_materialize_cmd(select), point, tmp_path / f"paused-{point.replace(':', '-')}",
                        env=dict(os.environ))


def _forget(store: LayerStore, corpus_env, *, shards: bool, release: bool, cat: Catalog) -> None:
    """Remove what an earlier build left, so the next build is a first build again."""
    if shards:
        shutil.rmtree(store.partition_dir("packed_shards", "r1"))
        shutil.rmtree(corpus_env / "shards" / "r1")
    if release:
        shutil.rmtree(corpus_env / "releases" / "r1")
        with cat.transaction() as conn:
            conn.execute("DELETE FROM release_registry WHERE release = 'r1'")


def test_sigkill_mid_packed_shards_and_mid_release_manifest_leaves_nothing_partial(tmp_path, monkeypatch, corpus_env):
    defs, store = _built(tmp_path, monkeypatch, corpus_env)
    cat = Catalog.at(corpus_env / "catalog.duckdb")
    shards_digest = store.require_current("packed_shards", "r1").content_digest
    (published,) = [r for r in registry(cat, "r1") if r["status"] == "published"]

    # 1) killed after every shard was written, before the shard set was renamed and the layer committed
    _forget(store, corpus_env, shards=True, release=True, cat=cat)
    _run_and_kill_at("packed_shards:staged", "packed_shards", tmp_path)
    assert store.current("packed_shards", "r1") is None  # no CURRENT: nothing visible
    leftovers = [p.name for p in (corpus_env / "shards" / "r1").iterdir()]
    assert leftovers and all(n.startswith(".tmp-") for n in leftovers)  # only staging, never a set
    # 2) the rerun (with release_manifest) publishes exactly what an uninterrupted build did
    proc = subprocess.run(_materialize_cmd("packed_shards,release_manifest"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert store.require_current("packed_shards", "r1").content_digest == shards_digest
    assert [p.name for p in (corpus_env / "shards" / "r1").iterdir()] == [
        store.require_current("packed_shards", "r1").manifest["report"]["shard_set"].rsplit("/", 1)[1]]
    (again,) = [r for r in registry(cat, "r1") if r["status"] == "published"]
    assert (again["build_id"], again["content_digest"]) == (published["build_id"], published["content_digest"])

    # 3) killed while the release is staged: no CURRENT, no build directory, nothing registered
    _forget(store, corpus_env, shards=False, release=True, cat=cat)
    _run_and_kill_at("release_manifest:staged", "release_manifest", tmp_path)
    rdir = corpus_env / "releases" / "r1"
    assert not (rdir / "CURRENT").exists()
    assert all(p.name.startswith((".tmp-", ".new-")) for p in rdir.iterdir())
    assert registry(cat, "r1") == []
    proc = subprocess.run(_materialize_cmd("release_manifest"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (final,) = [r for r in registry(cat, "r1") if r["status"] == "published"]
    assert final["content_digest"] == published["content_digest"]
    assert sorted(p.name for p in rdir.iterdir()) == sorted(["CURRENT", final["build_id"]])  # staging cleaned up


def test_sigkill_between_publishing_and_registering_is_reconciled_before_the_registry_is_trusted(
        tmp_path, monkeypatch, corpus_env, capsys):
    import json

    from corpus_assets.cli import main as corpus_main
    from corpus_assets.domain.deletion.requests import get

    defs, store = _built(tmp_path, monkeypatch, corpus_env)
    cat = Catalog.at(corpus_env / "catalog.duckdb")
    (first,) = [r for r in registry(cat, "r1") if r["status"] == "published"]
    # a new build of the release (another spec text, another build id), killed right after it was
    # published by Algorithm 18.3, before the registry was written
    spec = tmp_path / "releases" / "r1.yaml"
    spec.write_text(spec.read_text() + "description: the second build\n")
    _run_and_kill_at("release_manifest:published", "release_manifest", tmp_path)
    rdir = corpus_env / "releases" / "r1"
    current = (rdir / "CURRENT").read_text().strip()
    assert current != first["build_id"] and (rdir / current / "manifest.json").is_file()
    assert [(r["build_id"], r["status"]) for r in registry(cat, "r1")] == [(first["build_id"], "published")]

    # a trainer declares what it read: the build CURRENT names, not the registry's stale row
    capsys.readouterr()
    assert corpus_main(["consume", "r1", "--run-id", "train-run-9"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["build_id"] == current
    assert f"reconciled release r1 build {current[:16]}: unregistered -> published" in out.err
    rows = {r["build_id"]: r for r in registry(cat, "r1")}
    assert {b: r["status"] for b, r in rows.items()} == {first["build_id"]: "superseded", current: "published"}
    manifest = json.loads((rdir / current / "manifest.json").read_text())
    assert (rows[current]["content_digest"], rows[current]["path"]) == (manifest["content_digest"], f"releases/r1/{current}")
    # the rows the deletion sensor reads when it resolves a request
    assert [r["build_id"] for r in registry(cat) if r["release"] == "r1" and r["status"] == "published"] == [current]

    # a deletion resolved now names the real published build and the run that consumed it
    assert corpus_main(["delete", "--record-id", "site_docs:venv", "--requester", "a@example.org", "--reason", "withdrawn"]) == 0
    request = capsys.readouterr().out.strip().splitlines()[-1]
    with dg.DagsterInstance.get() as instance:
        ctx = dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
        defs.resolve_sensor_def("deletion_requests")(ctx)
    req = get(cat, request)
    assert req.status == "resolved"
    detail = json.loads(req.status_detail)
    assert detail["published_builds"] == {"r1": [current]} and detail["affected_runs"] == ["train-run-9"]
    # and the release still verifies as what CURRENT names
    assert corpus_main(["verify", "r1"]) == 0
    assert capsys.readouterr().out.startswith(f"OK {rdir / current}: ")


def test_two_processes_publishing_the_same_release_publish_one_version(tmp_path, monkeypatch, corpus_env):
    defs, store = _built(tmp_path, monkeypatch, corpus_env)
    cat = Catalog.at(corpus_env / "catalog.duckdb")
    (published,) = [r for r in registry(cat, "r1") if r["status"] == "published"]
    _forget(store, corpus_env, shards=False, release=True, cat=cat)
    procs = [subprocess.Popen(_materialize_cmd("release_manifest"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read().decode()[-3000:]
    rows = registry(cat, "r1")
    assert [(r["build_id"], r["content_digest"], r["status"]) for r in rows] == [
        (published["build_id"], published["content_digest"], "published")]
    rdir = corpus_env / "releases" / "r1"
    assert sorted(p.name for p in rdir.iterdir()) == sorted(["CURRENT", published["build_id"]])
    with dg.DagsterInstance.get() as instance:
        events = instance.fetch_materializations(dg.AssetKey("release_manifest"), limit=10).records
        reused = sorted(e.asset_materialization.metadata["reused"].value for e in events[:2])
    assert reused == [False, True]  # one published, the other reused it


def test_sensor_dying_between_resolving_and_requesting_runs_loses_nothing_and_applies_nothing_twice(
        tmp_path, monkeypatch, corpus_env):
    defs, store = _built(tmp_path, monkeypatch, corpus_env)
    cat = Catalog.at(corpus_env / "catalog.duckdb")
    from corpus_assets.cli import main as corpus_main

    assert corpus_main(["delete", "--record-id", "site_docs:venv", "--requester", "a@example.org", "--reason", "withdrawn"]) == 0
    import sensors.deletion as deletion_sensor_module

    real_set_status = deletion_sensor_module.set_status

    def dying_set_status(catalog, request_id, status, detail, generation=None):
        if status == "resolved":
            raise SystemExit("killed between writing tombstones and recording the resolution")
        return real_set_status(catalog, request_id, status, detail, generation)

    launched: list[str] = []
    with dg.DagsterInstance.get() as instance:
        def tick():
            ctx = dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
            return defs.resolve_sensor_def("deletion_requests")(ctx).run_requests or []

        monkeypatch.setattr(deletion_sensor_module, "set_status", dying_set_status)
        with pytest.raises(SystemExit):
            tick()
        monkeypatch.setattr(deletion_sensor_module, "set_status", real_set_status)
        with cat.transaction() as conn:
            (tombstones_after_crash,) = conn.execute("SELECT count(*) FROM tombstones").fetchone()
        assert tombstones_after_crash > 0  # the tombstones were durable before the "crash"
        # a restarted sensor (fresh context, no cursor) finishes the request; each run exactly once
        for _ in range(8):
            requests = tick()
            if requests:  # a second evaluation before the runs are launched asks for the same run keys
                assert [r.run_key for r in tick()] == [r.run_key for r in requests]
            for rr in requests:
                assert rr.run_key not in launched
                launched.append(rr.run_key)
                kwargs = {"partition_key": rr.partition_key} if rr.partition_key else {}
                assert defs.resolve_job_def(rr.job_name).execute_in_process(
                    instance=instance, run_config=rr.run_config or {}, tags=rr.tags, **kwargs).success
            if not requests and not tick():
                break
    with cat.transaction() as conn:
        (tombstones_final,) = conn.execute("SELECT count(*) FROM tombstones").fetchone()
        statuses = conn.execute("SELECT status FROM deletion_requests").fetchall()
    assert tombstones_final == tombstones_after_crash  # never written twice
    assert statuses == [("applied",)]
    assert sorted(k.split(":")[0] for k in launched) == ["purge", "rebuild"]
    rows = registry(cat, "r1")
    assert sorted(r["status"] for r in rows) == ["published", "revoked"]
    new = [r for r in rows if r["status"] == "published"][0]
    ids = set()
    import pyarrow.parquet as pq

    for f in (corpus_env / new["path"]).glob("shards/*/*.spans.parquet"):
        ids.update(pq.read_table(f, columns=["record_id"]).column(0).to_pylist())
    assert "site_docs:venv" not in ids and "site_docs:gc" in ids


def test_a_damaged_shard_set_is_refused_at_publish_and_names_the_file(tmp_path, monkeypatch, corpus_env):
    """The release lists the digests packed_shards recorded for its shard files and publish reads
    every staged byte against them: a shard file damaged in place after packing (same size) fails
    release_manifest with its name, and the published build stays as it was."""
    defs, store = _built(tmp_path, monkeypatch, corpus_env)
    cat = Catalog.at(corpus_env / "catalog.duckdb")
    (published,) = [r for r in registry(cat, "r1") if r["status"] == "published"]
    manifest_before = (corpus_env / published["path"] / "manifest.json").read_bytes()
    # one shard file of the current shard set damaged (a new inode: the published build's hard
    # link keeps the good bytes)
    victim = sorted((corpus_env / "shards" / "r1").rglob("*.bin"))[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.unlink()
    victim.write_bytes(bytes(data))
    with dg.DagsterInstance.get() as instance:
        result = defs.resolve_job_def("release_job").execute_in_process(
            instance=instance, partition_key="r1", asset_selection=[dg.AssetKey("release_manifest")], raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error.cause or failure.event_specific_data.error)
    assert "does not hold the digest its producer recorded" in message and victim.name in message
    assert [r["build_id"] for r in registry(cat, "r1") if r["status"] == "published"] == [published["build_id"]]
    assert (corpus_env / published["path"] / "manifest.json").read_bytes() == manifest_before
    assert not [p for p in (corpus_env / "releases" / "r1").iterdir() if p.name.startswith(".tmp")]
