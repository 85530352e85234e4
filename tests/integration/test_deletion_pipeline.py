"""Deletion requests end to end through the real sensor and the runs it requests: a withdrawal of
one source's copy of content another source also carries, and a content takedown; afterwards the
current release has neither as requested, the old version is revoked with a pointer to its
successor and the training run that consumed it, and `corpus verify` passes on the new release and
refuses a tampered copy."""

import json
import shutil

import dagster as dg
import pyarrow.parquet as pq

from corpus_assets.cli import main as corpus_main
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.deletion.purge import scan_for_tombstoned
from corpus_assets.domain.release.registry import record_consumption, registry
from corpus_assets.domain.deletion.tombstones import load_tombstones
from release_fixture import DOCS, TOKENIZER, build_snapshots, run_release, setup_release, tick_until_applied

BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\n")
GOV = "governance: {license: CC0-1.0, rights_evidence: https://example.org/rights}"


def _setup(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "m.jsonl").write_text(json.dumps({"id": "gc", "text": DOCS["gc"]}) + "\n")  # exact copy of site_docs:gc
    extra = (f"  - id: site_mirror\n    kind: jsonl\n    root: {mirror}\n    include: ['*.jsonl']\n"
             f"    adapter: text_document\n    priority: 200\n    {GOV}\n")
    setup_release(tmp_path, monkeypatch, BODY, extra_sources=extra,
                  sources_line="snapshots: {sources: [site_docs, site_chat, site_mirror]}\n")


def _release_record_ids(path) -> set:
    ids = set()
    for f in path.glob("shards/*/*.spans.parquet"):
        ids.update(r for r in pq.read_table(f, columns=["record_id"]).column(0).to_pylist() if r)
    return ids


def test_withdrawal_and_takedown_reach_every_artifact_and_revoke_the_old_release(corpus_env, tmp_path, monkeypatch, capsys):
    _setup(tmp_path, monkeypatch)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    cat = Catalog.at(corpus_env / "catalog.duckdb")
    store = LayerStore(corpus_env)
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance, sources=("site_docs", "site_chat", "site_mirror"))
        assert run_release(defs, instance).success
        (old,) = [r for r in registry(cat, "r1") if r["status"] == "published"]
        old_path = corpus_env / old["path"]
        before = _release_record_ids(old_path)
        assert {"site_docs:pathlib"} <= before and ({"site_docs:gc", "site_mirror:gc"} & before)
        record_consumption(cat, "train-run-7", "r1", old["build_id"], "trainer")

        # 1) withdraw site_docs' copy of the GC text (site_mirror carries the same text) — through the CLI
        assert corpus_main(["delete", "--record-id", "site_docs:gc", "--requester", "owner@example.org",
                            "--reason", "author withdrew consent"]) == 0
        withdraw = capsys.readouterr().out.strip().splitlines()[-1]
        # 2) take the pathlib text down everywhere — through the drop folder, as text (hashed, never stored)
        drop = corpus_env / "deletion_requests"
        drop.mkdir(parents=True, exist_ok=True)
        (drop / "takedown.json").write_text(json.dumps({
            "kind": "content", "content_text": DOCS["pathlib"], "requester": "legal@example.org", "reason": "DMCA notice"}))

        launched = tick_until_applied(defs, instance, cat, [withdraw])
        takedown = [r for r in load_tombstones(cat).request_ids if r != withdraw]
        assert len(takedown) == 1
        launched += tick_until_applied(defs, instance, cat, takedown)
        # each request: one purge run and one rebuild, never twice
        assert len(launched) == len(set(launched)) == 4
        checks = {}
        for ev in instance.get_records_for_run(
                [r for r in instance.get_runs() if r.tags.get("corpus/deletion_step") == "rebuild"][0].run_id).records:
            e = ev.event_log_entry.dagster_event
            if e is not None and e.event_type_value == "ASSET_CHECK_EVALUATION":
                checks[e.event_specific_data.check_name] = e.event_specific_data.passed
        assert checks["no_tombstoned_records"] is True and checks["tombstones_never_shrink"] is True
        # further ticks request nothing
        ctx = dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def())
        assert not (defs.resolve_sensor_def("deletion_requests")(ctx).run_requests or [])
        # a rebuild under the same tombstones does not read again the versions the last one found clean
        again = run_release(defs, instance)
        (check,) = [e.event_specific_data for e in again.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
                    and e.event_specific_data.check_name == "no_tombstoned_records"]
        assert check.passed and check.metadata["versions_known_clean"].value > 0
        assert check.metadata["versions_scanned"].value < check.metadata["versions_known_clean"].value

    rows = {r["build_id"]: r for r in registry(cat, "r1")}
    (new,) = [r for r in rows.values() if r["status"] == "published"]
    assert new["build_id"] != old["build_id"]
    assert rows[old["build_id"]]["status"] == "revoked"
    assert rows[old["build_id"]]["successor_build_id"] in rows  # a successor that is registered
    revoked = rows[old["build_id"]]
    assert withdraw in revoked["request_ids"] and "train-run-7" in revoked["affected_runs"]
    assert "does not remove what a model already learned" in revoked["note"]

    new_path = corpus_env / new["path"]
    after = _release_record_ids(new_path)
    assert "site_docs:gc" not in after and "site_mirror:gc" in after  # the other source's copy stays
    assert "site_docs:pathlib" not in after  # taken down
    # no current artifact of any layer names a tombstoned record; deleted text is gone from disk
    assert scan_for_tombstoned(store, load_tombstones(cat)) == []
    # every decision record's counts, kept in its manifest (release inputs total them from there),
    # are the table's, purged versions included
    from collections import Counter

    from corpus_assets.domain.release.inputs import _decision_counts

    checked = 0
    for asset in store.assets():
        for part in store.partitions(asset):
            v = store.current(asset, part)
            if v is None or "decisions" not in v.manifest["tables"]:
                continue
            rows = v.read_table("decisions", columns=["stage", "outcome", "reason"]).to_pylist()
            assert _decision_counts(v) == Counter((r["stage"], r["outcome"], r["reason"] or "") for r in rows), (asset, part)
            assert "counts" in v.manifest["tables"]["decisions"]
            checked += 1
    assert checked >= 10
    for asset in ("canonical_records", "curated_records"):
        for part in store.partitions(asset):
            for version in store.versions(asset, part):  # every version kept on disk, not only the current
                texts = store.open_version(asset, part, version).read_table("records", columns=["text"]).column(0).to_pylist()
                assert not any(DOCS["pathlib"][:80] in t for t in texts), (asset, part, version)
    for version in store.versions("token_views", "r1"):
        ids = store.open_version("token_views", "r1", version).read_table("views", columns=["record_id"]).column(0).to_pylist()
        assert "site_docs:pathlib" not in ids and "site_docs:gc" not in ids
    # the catalog holds digests only: the takedown text never reached it
    assert DOCS["pathlib"][:40].encode() not in (corpus_env / "catalog.duckdb").read_bytes()

    # the revoked build keeps its manifest and data card as the audit trail; its shards are gone
    assert (old_path / "REVOKED.json").is_file() and not (old_path / "shards").exists()
    assert corpus_main(["verify", str(old_path)]) == 1
    # no shard file on disk (release or shard set) names a deleted record any more
    for f in corpus_env.rglob("*.spans.parquet"):
        ids = set(pq.read_table(f, columns=["record_id"]).column(0).to_pylist())
        assert not ids & {"site_docs:gc", "site_docs:pathlib"}, f
    assert corpus_main(["verify", "r1"]) == 0
    # a later capture of the same files cannot bring either back: refused at canonicalization
    # with a reason code, and the raw bytes stubbed
    from datetime import timedelta

    from corpus_assets.domain.core.keys import snapshot_key
    from release_fixture import T0

    with dg.instance_for_test() as instance:
        key = snapshot_key("site_docs", T0 + timedelta(hours=2))
        instance.add_dynamic_partitions("snapshots", [key])
        assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success
    item = {"gc": "docs.jsonl#L1", "venv": "docs.jsonl#L2", "pathlib": "docs.jsonl#L4"}  # lines of docs.jsonl
    decisions = {d["item_id"]: d for d in store.require_current("canonical_records", key).read_table("decisions").to_pylist()}
    assert {(decisions[item[k]]["outcome"], decisions[item[k]]["reason"]) for k in ("gc", "pathlib")} == {("deleted", "deletion.tombstoned")}
    assert decisions[item["venv"]]["outcome"] == "accepted"
    raw = {r["item_id"]: r for r in store.require_current("raw_snapshot", key).read_table("items").to_pylist()}
    assert raw[item["pathlib"]]["content"] is None and raw[item["gc"]]["content"] is None and raw[item["venv"]]["content"]
    assert scan_for_tombstoned(store, load_tombstones(cat)) == []
    tampered = tmp_path / "tampered"
    shutil.copytree(new_path, tampered)
    victim = sorted(tampered.glob("shards/train/*.bin"))[0]
    data = bytearray(victim.read_bytes())
    data[0] ^= 1
    victim.write_bytes(bytes(data))
    assert corpus_main(["verify", str(tampered)]) == 1
    assert victim.name in capsys.readouterr().err
