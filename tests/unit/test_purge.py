"""Purge: new snapshot versions without tombstoned records, accounting kept, old versions dropped,
token view cache purged, and the scan for tombstoned records in every current artifact."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq

from corpus_assets.domain.deletion import tombstones
from corpus_assets.domain.canonical.accounting import check_canonical_accounting
from corpus_assets.domain.layers.registry import (
    CANONICAL_RECORDS,
    CURATED_RECORDS,
    DEDUP_CLUSTERS,
    MINHASH_SIGNATURES,
    PACKED_SHARDS,
    RAW_SNAPSHOT,
    TOKEN_VIEWS,
)
from corpus_assets.domain.core.hashing import sha256_text
from corpus_assets.domain.storage.layer_store import TableSpec
from corpus_assets.domain.deletion.purge import (
    DELETED_OUTCOME,
    DELETED_REASON,
    DELETED_STATUS,
    purge_snapshot,
    purge_release_partitions,
    scan_for_tombstoned,
)
from corpus_assets.domain.pack.shards_layer import SHARDS_TABLES
from corpus_assets.domain.tokens.token_views_layer import _adoptable_segments, _current_views_with
from test_deletion import (
    DUMP,
    DUMP_URI,
    EXACT,
    ITEMS,
    OTHER,
    RELEASE,
    SHARED,
    WEB,
    build_release,
    file_and_resolve,
    req,
)
from test_deletion import world  # noqa: F401  (fixture)

SNAPSHOT_ASSETS = (RAW_SNAPSHOT, CANONICAL_RECORDS, CURATED_RECORDS, MINHASH_SIGNATURES)


def current_versions(store, snapshot) -> dict[str, str]:
    return {a: store.current_version_name(a, snapshot) for a in SNAPSHOT_ASSETS}


def purge_all(store, catalog, request_ids) -> dict[str, dict]:
    ts = tombstones.load_tombstones(catalog)
    return {snap: purge_snapshot(store, snap, ts, request_ids=request_ids) for snap in ITEMS}


def assert_accounting(store, snapshot) -> Counter:
    """raw items = canonical decisions (0..n-1, once each) = accepted + rejected + quarantined + deleted;
    canonical records = accepted = curated decisions; curated records = curated accepted."""
    raw = store.current(RAW_SNAPSHOT, snapshot)
    canon = store.current(CANONICAL_RECORDS, snapshot)
    cur = store.current(CURATED_RECORDS, snapshot)
    sigs = store.current(MINHASH_SIGNATURES, snapshot)
    items = raw.read_table("items").to_pylist()
    dec = canon.read_table("decisions").to_pylist()
    out = Counter(d["outcome"] for d in dec)
    assert sorted(d["item_index"] for d in dec) == list(range(len(items)))
    assert len(items) == out["accepted"] + out["rejected"] + out["quarantined"] + out[DELETED_OUTCOME]
    assert canon.row_count("records") == out["accepted"] and canon.row_count("quarantine") == out["quarantined"]
    assert {i["item_index"] for i in items if i["status"] == DELETED_STATUS} == {
        d["item_index"] for d in dec if d["outcome"] == DELETED_OUTCOME}
    assert canon.manifest["outcomes"] == dict(sorted(out.items()))
    canon_ids = set(canon.read_table("records").column("record_id").to_pylist())
    cdec = cur.read_table("decisions").to_pylist()
    assert {d["record_id"] for d in cdec} == canon_ids and len(cdec) == len(canon_ids)
    assert cur.row_count("records") == sum(d["outcome"] == "accepted" for d in cdec)
    assert set(sigs.read_table("signatures").column("record_id").to_pylist()) == set(
        cur.read_table("records").column("record_id").to_pylist())
    # the canonical accounting check counts the new outcome: in = accepted + rejected + quarantined + deleted
    assert check_canonical_accounting(raw, canon).problems == []
    return out


def all_values(version) -> list:
    values = []
    for table in version.manifest["tables"]:
        for col in version.read_table(table).columns:
            values += col.to_pylist()
    return values


def holds_text(version, texts) -> bool:
    for v in all_values(version):
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if isinstance(v, str) and any(t in v for t in texts):
            return True
    return False


def test_takedown_purge_writes_new_versions_without_the_records(world):
    store, catalog = world
    rid, res, gen = file_and_resolve(store, catalog, req(kind="content", content_text=SHARED))
    assert res.snapshots == (DUMP, WEB)
    before = {snap: current_versions(store, snap) for snap in ITEMS}
    for snap in ITEMS:
        assert_accounting(store, snap)
    reports = purge_all(store, catalog, [rid])

    assert reports[OTHER]["affected"] is False and current_versions(store, OTHER) == before[OTHER]
    for snap, gone in ((WEB, {"web:a"}), (DUMP, {"dump:L1", "dump:L2"})):
        r = reports[snap]
        assert r["affected"] and r["deleted_records"] == len(gone) and r["deleted_items"] == len(gone)
        assert set(r["versions"]) == set(SNAPSHOT_ASSETS)
        now = current_versions(store, snap)
        assert all(now[a] != before[snap][a] for a in SNAPSHOT_ASSETS)
        out = assert_accounting(store, snap)
        assert out[DELETED_OUTCOME] == len(gone)
        for asset in SNAPSHOT_ASSETS:
            v = store.current(asset, snap)
            assert not holds_text(v, [SHARED, EXACT]), (asset, snap)
            (purge,) = v.manifest["build_spec"]["purges"]
            assert purge["request_ids"] == [rid] and purge["tombstone_generation"] == gen == 1
            assert purge["from_version"] == store.open_version(asset, snap, before[snap][asset]).content_digest
            assert v.manifest["deletion"]["matched_request_ids"] == [rid]
            v.verify()
        raw = store.current(RAW_SNAPSHOT, snap)
        canon = store.current(CANONICAL_RECORDS, snap)
        cur = store.current(CURATED_RECORDS, snap)
        sigs = store.current(MINHASH_SIGNATURES, snap)
        assert canon.manifest["build_spec"]["raw_version"] == raw.content_digest
        assert cur.manifest["build_spec"]["canonical_version"] == canon.content_digest
        assert sigs.manifest["build_spec"]["curated_version"] == cur.content_digest
        assert cur.manifest["records_in"] == canon.row_count("records")
        assert raw.manifest["status_counts"][DELETED_STATUS] == len(gone)
        for table in ("records", "decisions", "pii_audit", "contamination", "quarantine"):
            assert not gone & set(cur.read_table(table).column("record_id").to_pylist())
        stubs = [i for i in raw.read_table("items").to_pylist() if i["status"] == DELETED_STATUS]
        assert len(stubs) == len(gone)
        for s in stubs:
            assert s["content"] is None and s["raw_sha256"] is None and s["byte_length"] is None
            assert rid in s["status_detail"]
        deleted = [d for d in canon.read_table("decisions").to_pylist() if d["outcome"] == DELETED_OUTCOME]
        assert {(d["reason"], d["record_id"]) for d in deleted} == {(DELETED_REASON, None)}
        # rows of records that were not deleted are untouched
        old_raw = store.open_version(RAW_SNAPSHOT, snap, before[snap][RAW_SNAPSHOT]).read_table("items").to_pylist()
        kept = [i for i in raw.read_table("items").to_pylist() if i["status"] != DELETED_STATUS]
        assert kept == [i for i in old_raw if i["item_index"] in {k["item_index"] for k in kept}]
        # the old versions are still on disk (with the text) until the retention step
        old = store.open_version(CANONICAL_RECORDS, snap, before[snap][CANONICAL_RECORDS])
        assert holds_text(old, [SHARED, EXACT])

    # purging again finds nothing left to do
    again = purge_all(store, catalog, [rid])
    assert not any(r["affected"] for r in again.values())
    assert {s: current_versions(store, s) for s in ITEMS} != before


def test_withdrawal_purges_one_source_and_keeps_the_shared_text_elsewhere(world):
    store, catalog = world
    rid, _, _ = file_and_resolve(store, catalog, req(kind="uri", uri="https://web.example/a"))
    reports = purge_all(store, catalog, [rid])
    assert [s for s, r in reports.items() if r["affected"]] == [WEB]
    assert "web:a" not in store.current(CURATED_RECORDS, WEB).read_table("records").column("record_id").to_pylist()
    dump = store.current(CURATED_RECORDS, DUMP).read_table("records").to_pylist()
    assert any(r["record_id"] == "dump:L1" and r["text"] == SHARED for r in dump)
    assert_accounting(store, WEB)


def test_withdrawing_a_whole_dump_uri_and_a_source(world):
    store, catalog = world
    a, _, _ = file_and_resolve(store, catalog, req(kind="uri", uri=DUMP_URI))
    b, _, _ = file_and_resolve(store, catalog, req(kind="source", source_id="other"))
    reports = purge_all(store, catalog, [a, b])
    assert {s for s, r in reports.items() if r["affected"]} == {DUMP, OTHER}
    for snap in (DUMP, OTHER):
        out = assert_accounting(store, snap)
        assert out == Counter({DELETED_OUTCOME: len(ITEMS[snap])})
        assert store.current(CURATED_RECORDS, snap).row_count("records") == 0
        assert store.current(CURATED_RECORDS, snap).row_count("pii_audit") == 0
    assert store.current(RAW_SNAPSHOT, OTHER).manifest["deletion"]["matched_request_ids"] == [b]


def test_drop_versions_leaves_only_the_current_one(world):
    store, catalog = world
    rid, _, _ = file_and_resolve(store, catalog, req(kind="content", content_sha256=sha256_text(SHARED)))
    purge_all(store, catalog, [rid])
    for asset in SNAPSHOT_ASSETS:
        current = store.current_version_name(asset, WEB)
        old = [v for v in store.versions(asset, WEB) if v != current]
        assert len(old) == 1
        (store.partition_dir(asset, WEB) / ".tmp-stale").mkdir()
        assert store.drop_versions(asset, WEB) == old
        assert store.versions(asset, WEB) == [current]
        left = sorted(p.name for p in store.partition_dir(asset, WEB).iterdir() if p.name != ".lock")  # pointer lock: empty
        assert left == sorted(["CURRENT", current])
        assert not holds_text(store.current(asset, WEB), [SHARED])
    assert store.drop_versions(RAW_SNAPSHOT, OTHER) == []  # never purged: nothing old
    whole = store.versions(MINHASH_SIGNATURES, OTHER)
    assert store.drop_versions(MINHASH_SIGNATURES, OTHER, keep_current=False) == whole
    assert store.current(MINHASH_SIGNATURES, OTHER) is None and OTHER not in store.partitions(MINHASH_SIGNATURES)


def test_token_view_cache_is_purged(world):
    store, catalog = world
    before = store.current(TOKEN_VIEWS, RELEASE)
    assert "dump:L1" in before.read_table("views").column("record_id").to_pylist()
    assert set(_adoptable_segments(RELEASE, list(_current_views_with(store, "tok", "pv", store.partitions(TOKEN_VIEWS))))) == {"seg-all"}
    rid, _, gen = file_and_resolve(store, catalog, req(kind="record", record_id="dump:L1"))
    ts = tombstones.load_tombstones(catalog)
    out = purge_release_partitions(store, ts, [rid])
    after = store.current(TOKEN_VIEWS, RELEASE)
    assert out == {TOKEN_VIEWS: {RELEASE: {"from": before.version, "to": after.version, "records": 1,
                                          "removed_rows": {"decisions": 1, "views": 1}}}}
    ids = after.read_table("views").column("record_id").to_pylist()
    assert "dump:L1" not in ids and len(ids) == before.row_count("views") - 1
    # the cache stays findable by tokenizer digest and policy version
    for key in ("tokenizer_digest", "policy_version"):
        assert after.manifest["build_spec"][key] == before.manifest["build_spec"][key]
    assert after.manifest["build_spec"]["purges"][-1]["tombstone_generation"] == gen
    assert purge_release_partitions(store, ts, [rid]) == {}
    # the purge cut its own part files: the segments the old version recorded (files a rebuild may
    # adopt whole) are gone from the purged manifest, and nothing of it is offered for adoption
    assert [s["key"] for s in before.manifest["segments"]] == ["seg-all"] and "segments" not in after.manifest
    assert _adoptable_segments(RELEASE, list(_current_views_with(store, "tok", "pv", store.partitions(TOKEN_VIEWS)))) == {}


def findings_by_asset(findings) -> dict[str, set]:
    out: dict[str, set] = {}
    for f in findings:
        out.setdefault(f["asset"], set()).add((f["table"], f["column"], f["value"]))
    return out


def test_scan_finds_tombstoned_records_until_purge_and_rebuild(world):
    store, catalog = world
    assert scan_for_tombstoned(store, tombstones.load_tombstones(catalog)) == []
    rid, res, _ = file_and_resolve(store, catalog, req(kind="record", record_id="dump:L1"))
    ts = tombstones.load_tombstones(catalog)
    found = findings_by_asset(scan_for_tombstoned(store, ts))
    assert set(found) == {RAW_SNAPSHOT, CANONICAL_RECORDS, CURATED_RECORDS, MINHASH_SIGNATURES, DEDUP_CLUSTERS, "splits",
                          TOKEN_VIEWS, "mixture_plan", PACKED_SHARDS} - {RAW_SNAPSHOT}  # raw has no record id
    spans = [t for t, c, v in found[PACKED_SHARDS] if t.endswith(".spans.parquet")]
    assert len(spans) == 1 and (store.home / spans[0]).is_file()
    assert ("clusters", "representative_id", "dump:L1") in found[DEDUP_CLUSTERS]
    assert all(f["request_id"] == rid for f in scan_for_tombstoned(store, ts))

    for snap in res.snapshots:
        purge_snapshot(store, snap, ts, request_ids=[rid])
    purge_release_partitions(store, ts, [rid])
    left = findings_by_asset(scan_for_tombstoned(store, ts))
    assert set(left) == {DEDUP_CLUSTERS, "splits", "mixture_plan", PACKED_SHARDS}  # the release still names it

    build_release(store)  # the release rebuilt from the purged snapshots
    assert scan_for_tombstoned(store, ts) == []
    clusters = {c["record_id"]: c for c in store.current(DEDUP_CLUSTERS, RELEASE).read_table("clusters").to_pylist()}
    # the text stays, under its remaining aliases, with a new representative
    assert "dump:L1" not in clusters and clusters["dump:L2"]["kind"] == "representative"
    assert clusters["web:a"]["representative_id"] == "dump:L2"


def test_scan_finds_planted_ids_in_a_spans_file_and_a_layer_table(world):
    store, catalog = world
    rid, _, _ = file_and_resolve(store, catalog, req(kind="record", record_id="web:ghost"))
    ts = tombstones.load_tombstones(catalog)
    assert scan_for_tombstoned(store, ts) == []
    # a layer table of any asset
    with store.new_version("notes", "_all", {"t": TableSpec(pa.schema([("record_id", pa.string()), ("n", pa.int64())]))}, {}) as w:
        w.write("t", [{"record_id": "web:ghost", "n": 1}, {"record_id": "web:b", "n": 2}])
        w.commit()
    # a shard whose spans name the record
    d = store.home / "shards" / RELEASE / "planted" / "train"
    d.mkdir(parents=True)
    pq.write_table(pa.table({"block": [0, 0], "record_id": ["web:ghost", None]}), d / "train-00001.spans.parquet")
    shards = store.current(PACKED_SHARDS, RELEASE).read_table("shards").to_pylist()
    meta = {"name": "train-00001", "files": {"spans": {"path": "train-00001.spans.parquet"}}}
    shards.append({**shards[0], "name": "train-00001", "directory": f"shards/{RELEASE}/planted/train", "meta_json": json.dumps(meta)})
    with store.new_version(PACKED_SHARDS, RELEASE, SHARDS_TABLES, {}) as w:
        w.write("shards", shards)
        w.commit()
    found = scan_for_tombstoned(store, ts)
    assert [(f["asset"], f["table"], f["value"], f["rows"], f["request_id"]) for f in found] == [
        ("notes", "t", "web:ghost", 1, rid),
        (PACKED_SHARDS, f"shards/{RELEASE}/planted/train/train-00001.spans.parquet", "web:ghost", 1, rid),
    ]


def test_scan_flags_a_deletion_stub_that_still_holds_bytes(world):
    store, catalog = world
    rid, _, _ = file_and_resolve(store, catalog, req(kind="uri", uri="https://web.example/b"))
    ts = tombstones.load_tombstones(catalog)
    purge_snapshot(store, WEB, ts, request_ids=[rid])
    assert [f for f in scan_for_tombstoned(store, ts) if f["asset"] != DEDUP_CLUSTERS and f["asset"] != "splits"] == []
    raw = store.current(RAW_SNAPSHOT, WEB)
    rows = raw.read_table("items").to_pylist()
    for r in rows:
        if r["status"] == DELETED_STATUS:
            r["byte_length"] = 12
    specs = {"items": TableSpec(raw.read_table("items").schema, private=True)}
    with store.new_version(RAW_SNAPSHOT, WEB, specs, {}) as w:
        w.write("items", rows)
        w.commit()
    assert [(f["asset"], f["column"]) for f in scan_for_tombstoned(store, ts) if f["asset"] == RAW_SNAPSHOT] == [
        (RAW_SNAPSHOT, "byte_length")]


def test_successive_purges_keep_their_history(world):
    store, catalog = world
    a, _, _ = file_and_resolve(store, catalog, req(kind="content", content_text=SHARED))
    purge_all(store, catalog, [a])
    b, _, _ = file_and_resolve(store, catalog, req(kind="record", record_id="dump:L4"))
    reports = purge_all(store, catalog, [b])
    assert [s for s, r in reports.items() if r["affected"]] == [DUMP]
    assert reports[DUMP]["matched_request_ids"] == [b] and reports[DUMP]["tombstone_generation"] == 2
    for asset in SNAPSHOT_ASSETS:
        purges = store.current(asset, DUMP).manifest["build_spec"]["purges"]
        assert [p["request_ids"] for p in purges] == [[a], [b]]
    out = assert_accounting(store, DUMP)
    assert out[DELETED_OUTCOME] == 3 and out["accepted"] == 1
    assert store.current(CURATED_RECORDS, DUMP).row_count("pii_audit") == 0  # dump:L4's audit rows went with it
