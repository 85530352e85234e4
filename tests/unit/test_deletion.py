"""Deletion requests (intake, drop folder) and tombstones (lineage resolution, generations).

The layers are real LayerStore versions with the real schemas, written directly by the small
builders below (``build_world``); ``tests/test_purge.py`` reuses them."""

from __future__ import annotations

import hashlib
import json
import shutil
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from corpus_assets.domain.deletion import requests as deletion

from corpus_assets.domain.deletion import tombstones
from corpus_assets.domain.canonical.canonical_layer import CANONICAL_TABLES
from corpus_assets.domain.layers.registry import (
    CANONICAL_RECORDS,
    CURATED_RECORDS,
    DEDUP_CLUSTERS,
    MINHASH_SIGNATURES,
    MIXTURE_PLAN,
    PACKED_SHARDS,
    RAW_SNAPSHOT,
    SPLITS,
    TOKEN_VIEWS,
)
from corpus_assets.domain.ingest.capture import RAW_TABLES, item_to_row
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.curate.curated_layer import CURATED_TABLES
from corpus_assets.domain.dedup.clusters_layer import DEDUP_TABLES
from corpus_assets.domain.dedup.signatures_layer import SIGNATURES_TABLES
from corpus_assets.domain.deletion.requests import DeletionRequestError, content_digest
from corpus_assets.domain.core.hashing import dedup_key, sha256_text
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.pack.mixture_layer import MIXTURE_TABLES
from corpus_assets.domain.pack.packing import PACKING_SPANS_SCHEMA
from corpus_assets.domain.ingest.raw_items import RawItem
from corpus_assets.domain.core.reasons import Reason
from corpus_assets.domain.canonical.records import SCHEMA_VERSIONS, DocumentPayload, Record, raw_parent_id, record_digest, record_to_row
from corpus_assets.domain.tokens.splits_layer import SPLITS_TABLES
from corpus_assets.domain.pack.shards_layer import SHARDS_TABLES
from corpus_assets.domain.ingest.sources_config import Governance
from corpus_assets.domain.tokens.token_views_layer import TOKEN_VIEWS_LAYER_VERSION, TOKEN_VIEWS_TABLES

GOV = Governance(license="CC-BY-4.0", rights_evidence="https://example.org/license")
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)

SHARED = "The quick brown fox jumps over the lazy dog near the river bank at dawn every single day."
EXACT = "the  QUICK brown fox jumps over the lazy dog near the river bank at dawn every single day."
NEAR1 = "The quick brown fox jumps over the lazy cat near the river bank at dawn every single day."
NEAR2 = "A quick red fox jumps over the lazy cat near the river bank at dusk every other day."
OTHER_B = "Lists keep their order; sets do not, and dictionaries remember insertion order since 3.7."
OTHER_D = "Write to me at alice@example.org about the release schedule of the next minor version."
REDACTED_D = "Write to me at [EMAIL] about the release schedule of the next minor version."
OTHER_X = "Context managers release resources deterministically when the with block ends."

WEB = "web.20260101T000000"
DUMP = "dump.20260101T000000"
OTHER = "other.20260101T000000"
DUMP_URI = "file:///data/dump.jsonl"
RELEASE = "rel"
# verified near pairs the test release's dedup "found" (when both records are present)
NEAR_PAIRS = {("web:a", "web:n1"): 0.9, ("web:n1", "dump:L3"): 0.7}

# snapshot -> [(item_id, uri, text or None, capture status, curated text or None = same / "REJECT")]
ITEMS = {
    WEB: [
        ("a", "https://web.example/a", SHARED, "captured", None),
        ("b", "https://web.example/b", OTHER_B, "captured", "REJECT"),
        ("c", "https://web.example/c", "   ", "captured", None),  # empty -> rejected
        ("d", "https://web.example/d", None, Reason.FETCH_ERROR.value, None),  # quarantined
        ("n1", "https://web.example/n1", NEAR1, "captured", None),
    ],
    DUMP: [
        ("L1", DUMP_URI, SHARED, "captured", None),
        ("L2", DUMP_URI, EXACT, "captured", None),
        ("L3", DUMP_URI, NEAR2, "captured", None),
        ("L4", DUMP_URI, OTHER_D, "captured", REDACTED_D),
    ],
    OTHER: [("x", "file:///docs/x.txt", OTHER_X, "captured", None)],
}
ALL_TEXTS = [SHARED, EXACT, NEAR1, NEAR2, OTHER_B, OTHER_D, REDACTED_D, OTHER_X]


def make_record(snapshot: str, local: str, text: str) -> Record:
    source = snapshot.split(".")[0]
    rec = Record(
        record_id=f"{source}:{local}", source_id=source, snapshot=snapshot, item_id=local,
        schema_type="document", schema_version=SCHEMA_VERSIONS["document"], adapter="test", adapter_version="1",
        domain="prose", lang="en", lang_score=0.9, group_id=f"doc:{source}:{local}",
        parents=[raw_parent_id(source, local)], governance=GOV, payload=DocumentPayload(text=text),
    )
    rec.text_sha256 = sha256_text(text)
    rec.dedup_key = dedup_key(text, "prose")
    rec.raw_sha256 = hashlib.sha256(text.encode()).hexdigest()
    rec.record_sha256 = record_digest(rec)
    return rec


def build_snapshot(store: LayerStore, snapshot: str) -> None:
    source = SimpleNamespace(id=snapshot.split(".")[0], governance=GOV)
    raw_rows, records, decisions, quarantine, curated, cdec, pii, sigs = [], [], [], [], [], [], [], []
    for i, (item_id, uri, text, status, cur) in enumerate(ITEMS[snapshot]):
        content = None if text is None else text.encode()
        raw_rows.append(item_to_row(RawItem(item_id=item_id, uri=uri, retrieved_at="2026-01-01T00:00:00Z",
                                            content=content, status=status, content_type="text/plain"), i, source, snapshot))
        dec = {"item_index": i, "item_id": item_id, "source_id": source.id, "snapshot": snapshot, "record_id": None,
               "stage": "canonicalize", "detail": "", "policy_version": "p1"}
        if text is None:
            decisions.append({**dec, "outcome": "quarantined", "action": "quarantine", "reason": status})
            quarantine.append({"item_index": i, "item_id": item_id, "uri": uri, "reason": status, "detail": "", "raw_sha256": None})
            continue
        if not text.strip():
            decisions.append({**dec, "outcome": "rejected", "action": "reject", "reason": Reason.EMPTY_DOCUMENT.value})
            continue
        rec = make_record(snapshot, item_id, text)
        decisions.append({**dec, "record_id": rec.record_id, "outcome": "accepted", "action": "accept", "reason": "ok"})
        records.append(record_to_row(rec))
        cd = {"record_id": rec.record_id, "source_id": source.id, "snapshot": snapshot, "schema_type": "document",
              "domain": "prose", "lang": "en", "policy_version": "c1", "chars_in": len(text)}
        if cur == "REJECT":
            cdec.append({**cd, "stage": "quality", "outcome": "rejected", "action": "reject", "reason": "gopher.short",
                         "detail": "", "chars_out": 0})
            continue
        out = rec if cur is None else make_record(snapshot, item_id, cur)
        curated.append(record_to_row(out))
        cdec.append({**cd, "stage": "pii" if cur else "curate", "outcome": "accepted", "action": "modify" if cur else "accept",
                     "reason": "pii.redacted" if cur else "ok", "detail": "", "chars_out": len(out.payload.text)})
        if cur:
            pii.append({"record_id": rec.record_id, "field": "text", "pii_type": "email", "start": 15, "end": 32,
                        "detector_version": "1"})
        sigs.append({"record_id": rec.record_id, "source_id": source.id, "snapshot": snapshot, "domain": "prose",
                     "dedup_key": out.dedup_key, "signature": b"\x00" * 16})
    with store.new_version(RAW_SNAPSHOT, snapshot, RAW_TABLES, {"snapshot": snapshot}) as w:
        w.write("items", raw_rows)
        raw = w.commit(extra_manifest={"status_counts": {}})
    outcomes = {}
    for d in decisions:
        outcomes[d["outcome"]] = outcomes.get(d["outcome"], 0) + 1
    with store.new_version(CANONICAL_RECORDS, snapshot, CANONICAL_TABLES, {"raw_version": raw.content_digest}) as w:
        w.write("records", records)
        w.write("decisions", decisions)
        w.write("quarantine", quarantine)
        canon = w.commit(extra_manifest={"items_in": len(raw_rows), "outcomes": outcomes})
    with store.new_version(CURATED_RECORDS, snapshot, CURATED_TABLES, {"canonical_version": canon.content_digest}) as w:
        w.write("records", curated)
        w.write("decisions", cdec)
        w.write("pii_audit", pii)
        cur_v = w.commit(extra_manifest={"records_in": len(records)})
    with store.new_version(MINHASH_SIGNATURES, snapshot, SIGNATURES_TABLES, {"curated_version": cur_v.content_digest}) as w:
        w.write("signatures", sigs)
        w.commit()


def build_release(store: LayerStore, snapshots=(WEB, DUMP, OTHER), release: str = RELEASE) -> None:
    """A release over the CURRENT curated records: exact groups by dedup key (representative = the
    smallest record id), NEAR_PAIRS as verified near edges, the representatives kept and
    "tokenized", planned and packed into one shard with a spans file."""
    rows = []
    for snap in snapshots:
        rows += store.current(CURATED_RECORDS, snap).read_table("records").to_pylist()
    by_key: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["record_id"]):
        by_key.setdefault(r["dedup_key"], []).append(r)
    rep = {r["record_id"]: group[0]["record_id"] for group in by_key.values() for r in group}
    present = set(rep)
    edges = [{"record_id": a, "neighbour_id": b, "jaccard": j} for (a, b), j in NEAR_PAIRS.items() if a in present and b in present]
    near_rep = {e["neighbour_id"]: (e["record_id"], e["jaccard"]) for e in edges}
    clusters, aliases = [], []
    for r in rows:
        rid = r["record_id"]
        kind, target, jac = "representative", rid, 1.0
        if rep[rid] != rid:
            kind, target = "exact", rep[rid]
        elif rid in near_rep:
            kind, (target, jac) = "near", near_rep[rid]
        clusters.append({"record_id": rid, "source_id": r["source_id"], "snapshot": r["snapshot"], "representative_id": target,
                         "kind": kind, "jaccard": jac, "group_id": target})
        aliases.append({"dedup_key": r["dedup_key"], "representative_id": rep[rid], "record_id": rid,
                        "source_id": r["source_id"], "is_representative": rep[rid] == rid})
    kept = sorted(c["record_id"] for c in clusters if c["kind"] == "representative")
    info = {r["record_id"]: r for r in rows}
    with store.new_version(DEDUP_CLUSTERS, release, DEDUP_TABLES, {"snapshots": list(snapshots)}) as w:
        w.write("clusters", clusters)
        w.write("aliases", aliases)
        w.write("edges", edges)
        w.write("superseded", [])
        w.commit()
    with store.new_version(SPLITS, release, SPLITS_TABLES, {}) as w:
        w.write("assignments", [{"record_id": c["record_id"], "source_id": c["source_id"], "snapshot": c["snapshot"],
                                 "kept": c["kind"] == "representative", "group_key": c["group_id"], "u": 0.5,
                                 "split": "train"} for c in clusters])
        w.commit()
    views = []
    for rid in kept:
        r = info[rid]
        ids = list(r["text"].encode()[:8])
        views.append({"record_id": rid, "variant": None, "split": "train", "source_id": r["source_id"], "snapshot": r["snapshot"],
                      "domain": "prose", "cache_key": "ck-" + r["record_sha256"][:16], "n_tokens": len(ids),
                      "label_tokens": len(ids), "input_ids": ids, "loss_mask": [1] * len(ids),
                      "offsets": [0, 1] * len(ids), "segments_json": "[]"})
    with store.new_version(TOKEN_VIEWS, release, TOKEN_VIEWS_TABLES,
                           {"code_version": TOKEN_VIEWS_LAYER_VERSION, "tokenizer_digest": "tok", "policy_version": "pv"}) as w:
        w.write("views", views)
        w.write("decisions", [{"record_id": v["record_id"], "source_id": v["source_id"], "snapshot": v["snapshot"],
                               "split": "train", "stage": "token_views", "outcome": "accepted", "action": "accept",
                               "reason": "ok", "tokens_out": v["n_tokens"]} for v in views])
        w.commit(extra_manifest={"report": {"records": len(kept)},  # one segment (a snapshot's files, adoptable)
                                 "segments": [{"snapshot": "all", "key": "seg-all", "records": len(kept),
                                               "tables": {"views": {"files": ["part-00000.parquet"], "rows": len(views)}}}]})
    with store.new_version(MIXTURE_PLAN, release, MIXTURE_TABLES, {}) as w:
        w.write("plan", [{"position": i, "record_id": rid, "source": info[rid]["source_id"], "repeat": 0, "phase": 0,
                          "n_tokens": 8} for i, rid in enumerate(kept)])
        w.commit()
    set_digest = hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:16]
    directory = f"shards/{release}/{set_digest}/train"
    out = store.home / directory
    out.mkdir(parents=True, exist_ok=True)
    spans = pa.table(
        {"block": [0] * (len(kept) + 1), "start": list(range(len(kept) + 1)), "end": list(range(1, len(kept) + 2)),
         "record_id": kept + [None], "variant": [None] * (len(kept) + 1), "src_token_start": [0] * len(kept) + [None],
         "src_token_end": [1] * len(kept) + [None], "char_start": [0] * len(kept) + [None], "char_end": [1] * len(kept) + [None],
         "inserted": [False] * (len(kept) + 1), "pad": [False] * len(kept) + [True], "transform_version": ["t"] * (len(kept) + 1)},
        schema=PACKING_SPANS_SCHEMA,
    ).append_column("source", pa.array([info[k]["source_id"] for k in kept] + [None], pa.string()))
    pq.write_table(spans, out / "train-00000.spans.parquet")
    meta = {"name": "train-00000", "files": {"spans": {"path": "train-00000.spans.parquet"}}}
    with store.new_version(PACKED_SHARDS, release, SHARDS_TABLES, {}) as w:
        w.write("shards", [{"split": "train", "name": "train-00000", "directory": directory, "blocks": 1, "tokens": 8,
                            "content_tokens": 8, "loss_tokens": 8, "bin_sha256": "0" * 64, "meta_json": json.dumps(meta)}])
        w.commit()


def build_world(tmp_path: Path) -> tuple[LayerStore, Catalog]:
    store = LayerStore(tmp_path / "home")
    for snap in ITEMS:
        build_snapshot(store, snap)
    build_release(store)
    return store, Catalog.at(tmp_path / "home" / "catalog.duckdb")


def req(**fields) -> dict:
    return {"requester": "legal@example.org", "reason": "takedown notice 42", **fields}


def file_and_resolve(store, catalog, request: dict, *, now=NOW) -> tuple[str, tombstones.Resolution, int]:
    rid = deletion.file_request(catalog, request, now=now)
    res = tombstones.resolve(store, deletion.get(catalog, rid))
    return rid, res, tombstones.write_tombstones(catalog, rid, res)


def count(catalog: Catalog, table: str) -> int:
    with catalog.transaction() as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.fixture
def world(tmp_path):
    return build_world(tmp_path)


# --- requests ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"record_id": "web:a"}, "kind"),
        ({"kind": "bogus", "record_id": "web:a"}, "kind"),
        ({"kind": "record"}, "record_id"),
        ({"kind": "record", "record_id": "no-colon"}, "record_id"),
        ({"kind": "record", "record_id": "Bad Source:x"}, "record_id"),
        ({"kind": "uri"}, "uri"),
        ({"kind": "uri", "uri": " https://x/ "}, "uri"),
        ({"kind": "uri", "uri": "https://x/", "content_sha256": "0" * 64}, "content_sha256"),
        ({"kind": "source", "source_id": "Bad Source"}, "source_id"),
        ({"kind": "content"}, "content_sha256"),
        ({"kind": "content", "content_sha256": "0" * 64, "content_text": "secret words"}, "content_sha256"),
        ({"kind": "content", "content_sha256": "xyz"}, "content_sha256"),
        ({"kind": "content", "content_text": " \r\n "}, "content_text"),
        ({"kind": "content", "content_sha256": "0" * 64, "near_duplicates": True}, "near_threshold"),
        ({"kind": "content", "content_sha256": "0" * 64, "near_duplicates": True, "near_threshold": 1.5}, "near_threshold"),
        ({"kind": "content", "content_sha256": "0" * 64, "near_duplicates": True, "near_threshold": 0.0}, "near_threshold"),
        ({"kind": "content", "content_sha256": "0" * 64, "near_threshold": 0.8}, "near_threshold"),
        ({"kind": "content", "content_sha256": "0" * 64, "near_duplicates": "yes", "near_threshold": 0.8}, "near_duplicates"),
        ({"kind": "record", "record_id": "web:a", "near_duplicates": True, "near_threshold": 0.8}, "near_duplicates"),
        ({"kind": "record", "record_id": "web:a", "requester": ""}, "requester"),
        ({"kind": "record", "record_id": "web:a", "reason": "   "}, "reason"),
        ({"kind": "record", "record_id": "web:a", "colour": "red"}, "colour"),
    ],
)
def test_invalid_requests_name_the_field_and_change_nothing(tmp_path, fields, field):
    catalog = Catalog.at(tmp_path / "c.duckdb")
    with pytest.raises(DeletionRequestError) as exc:
        deletion.file_request(catalog, req(**fields))
    assert str(exc.value).startswith(field + ":") or f"; {field}:" in str(exc.value), str(exc.value)
    assert count(catalog, "deletion_requests") == 0


def test_errors_never_echo_content_text():
    with pytest.raises(DeletionRequestError) as exc:
        deletion.parse_request(req(kind="content", content_text="my very private words", colour=1))
    assert "private" not in str(exc.value) and "colour" in str(exc.value)


def test_valid_requests_and_stable_ids(tmp_path):
    catalog = Catalog.at(tmp_path / "c.duckdb")
    r = deletion.parse_request(req(kind="content", content_sha256="AB" * 32, near_duplicates=True, near_threshold=1))
    assert r.target == "ab" * 32 and r.near_threshold == 1.0
    a = deletion.file_request(catalog, req(kind="record", record_id="web:a"), now=NOW)
    b = deletion.file_request(catalog, req(kind="record", record_id="web:a"), now=NOW)
    assert a == b and a.startswith("del-") and len(a) == 20
    assert count(catalog, "deletion_requests") == 1
    filed = deletion.get(catalog, a)
    assert (filed.kind, filed.target, filed.status, filed.generation) == ("record", "web:a", "received", None)
    c = deletion.file_request(catalog, req(kind="source", source_id="web"), now=NOW)
    assert [f.request_id for f in deletion.pending(catalog)] == sorted([a, c])
    deletion.set_status(catalog, c, "rejected", "not our data")
    assert [f.request_id for f in deletion.pending(catalog)] == [a]
    assert deletion.pending(catalog, ["rejected"])[0].status_detail == "not our data"
    with pytest.raises(ValueError, match="^status:"):
        deletion.set_status(catalog, a, "done", "")
    with pytest.raises(KeyError, match="request_id"):
        deletion.set_status(catalog, "del-0000000000000000", "applied", "")
    assert deletion.get(catalog, "del-0000000000000000") is None


def test_content_text_is_hashed_and_never_stored(tmp_path):
    secret = "Zebra quartz violet: the unmistakable passage that must never be stored!"
    catalog = Catalog.at(tmp_path / "db" / "c.duckdb")
    rid = deletion.file_request(catalog, req(kind="content", content_text=secret + "\r\n  "), now=NOW)
    filed = deletion.get(catalog, rid)
    assert filed.target == content_digest(secret) == sha256_text(secret)
    parsed = deletion.parse_request(req(kind="content", content_text=secret))
    assert parsed.content_text is None and secret not in repr(parsed) and secret not in parsed.model_dump_json()
    for path in (tmp_path / "db").iterdir():
        data = path.read_bytes()
        assert secret.encode() not in data and b"Zebra quartz" not in data, path


def test_drop_folder_accepts_rejects_moves_and_never_files_twice(tmp_path):
    catalog = Catalog.at(tmp_path / "c.duckdb")
    drop = tmp_path / "drop"
    drop.mkdir()
    secret = "A takedown text that must not be kept in processed files."
    (drop / "a_record.json").write_text(json.dumps(req(kind="record", record_id="web:a")))
    (drop / "b_content.json").write_text(json.dumps(req(kind="content", content_text=secret)))
    (drop / "c_missing.json").write_text(json.dumps({"kind": "uri", "uri": "https://x/", "reason": "r"}))
    (drop / "d_broken.json").write_text('{"kind": "content", "content_text": "half a secret')
    (drop / "e_dup.json").write_text('{"kind": "source", "source_id": "web", "source_id": "dump", "requester": "x", "reason": "y"}')
    (drop / "notes.txt").write_text("ignored")
    (drop / "f.json.tmp").write_text("{")

    accepted, rejected = deletion.load_drop_folder(catalog, drop, now=NOW)
    assert len(accepted) == 2
    assert dict(rejected).keys() == {"c_missing.json", "d_broken.json", "e_dup.json"}
    assert dict(rejected)["c_missing.json"].startswith("requester:")
    assert dict(rejected)["d_broken.json"].startswith("file: not valid JSON")
    assert dict(rejected)["e_dup.json"] == "source_id: given twice"
    assert sorted(p.name for p in drop.iterdir() if p.is_file()) == ["f.json.tmp", "notes.txt"]
    assert sorted(p.name for p in (drop / "processed").iterdir()) == ["a_record.json", "b_content.json"]
    rej = sorted(p.name for p in (drop / "rejected").iterdir())
    assert rej == ["c_missing.json", "c_missing.json.error.txt", "d_broken.json.error.txt", "e_dup.json", "e_dup.json.error.txt"]
    assert "requester" in (drop / "rejected" / "c_missing.json.error.txt").read_text()
    assert "not kept" in (drop / "rejected" / "d_broken.json.error.txt").read_text()
    for p in list((drop / "processed").iterdir()) + list((drop / "rejected").iterdir()):
        assert b"secret" not in p.read_bytes() and secret.encode() not in p.read_bytes(), p
    assert json.loads((drop / "processed" / "b_content.json").read_text())["content_text_redacted"].startswith("sha256 ")
    assert count(catalog, "deletion_requests") == 2

    # nothing left to file; a crash between filing and moving (file still in the folder) files nothing new
    assert deletion.load_drop_folder(catalog, drop, now=NOW) == ([], [])
    shutil.copy(drop / "processed" / "a_record.json", drop / "a_record.json")
    again, _ = deletion.load_drop_folder(catalog, drop, now=datetime(2027, 1, 1, tzinfo=timezone.utc))
    assert again == [accepted[0]] and count(catalog, "deletion_requests") == 2
    assert sorted(p.name for p in (drop / "processed").iterdir())[0] == "a_record.json"


# --- resolution -------------------------------------------------------------------------------


def copies(res) -> set[tuple[str, str]]:
    return {(c.record_id, c.snapshot) for c in res.copies}


def test_withdrawing_one_source_keeps_the_other_sources_copy(world):
    store, catalog = world
    rid, res, gen = file_and_resolve(store, catalog, req(kind="uri", uri="https://web.example/a"))
    assert res.scope == "record" and copies(res) == {("web:a", WEB)}
    (c,) = res.copies
    assert c.uri == "https://web.example/a" and c.text_sha256 == sha256_text(SHARED)
    assert c.layers == ("canonical_records", "curated_records") and c.via == "uri"
    assert res.items == ((WEB, 0, "a"),)
    # web:a is an exact alias of the representative dump:L1: only the dedup tables and splits name it
    assert res.releases == {RELEASE: ("dedup_clusters", "splits")}
    ts = tombstones.load_tombstones(catalog)
    assert ts.is_tombstoned(record_id="web:a") == rid
    assert ts.is_tombstoned(uri="https://web.example/a") == rid
    assert ts.is_tombstoned(record_id="dump:L1") is None
    assert ts.is_tombstoned(text_sha256=sha256_text(SHARED)) is None  # withdrawal: the text itself is not refused
    assert deletion.get(catalog, rid).status == "resolved" and deletion.get(catalog, rid).generation == gen == 1


def test_record_and_source_withdrawals_refuse_future_copies(world):
    store, catalog = world
    rid, res, _ = file_and_resolve(store, catalog, req(kind="record", record_id="dump:L4"))
    # curated redacted the text: two copies (canonical and curated digests)
    assert {(c.record_id, c.text_sha256, c.layers) for c in res.copies} == {
        ("dump:L4", sha256_text(OTHER_D), ("canonical_records",)),
        ("dump:L4", sha256_text(REDACTED_D), ("curated_records",)),
    }
    assert res.releases == {RELEASE: ("dedup_clusters", "splits", "token_views", "mixture_plan", "packed_shards")}
    sid, sres, _ = file_and_resolve(store, catalog, req(kind="source", source_id="other"))
    assert copies(sres) == {("other:x", OTHER)} and sres.snapshots == (OTHER,)
    nid, nres, _ = file_and_resolve(store, catalog, req(kind="record", record_id="web:never-captured"))
    assert nres.copies == () and nres.releases == {}
    ts = tombstones.load_tombstones(catalog)
    assert ts.is_tombstoned(record_id="dump:L4") == rid
    assert ts.is_tombstoned(record_id="other:a-later-item") == sid  # future records of a withdrawn source
    assert ts.is_tombstoned(source_id="other") == sid
    assert ts.is_tombstoned(record_id="web:never-captured") == nid  # a withdrawn id never comes back
    assert ts.is_tombstoned(uri=DUMP_URI) is None and ts.is_tombstoned(source_id="dump") is None


def test_uri_of_a_dump_withdraws_every_line(world):
    store, catalog = world
    _, res, _ = file_and_resolve(store, catalog, req(kind="uri", uri=DUMP_URI))
    assert {c.record_id for c in res.copies} == {"dump:L1", "dump:L2", "dump:L3", "dump:L4"}
    assert len(res.items) == 4


def test_takedown_removes_every_copy_and_exact_duplicates_only(world):
    store, catalog = world
    rid, res, _ = file_and_resolve(store, catalog, req(kind="content", content_text=SHARED))
    assert res.scope == "content"
    assert copies(res) == {("web:a", WEB), ("dump:L1", DUMP), ("dump:L2", DUMP)}
    assert {c.record_id: c.via for c in res.copies} == {"web:a": "target", "dump:L1": "target", "dump:L2": "exact"}
    ts = tombstones.load_tombstones(catalog)
    for text in (SHARED, EXACT):
        assert ts.is_tombstoned(text_sha256=sha256_text(text)) == rid  # later captures of the text are refused
    assert ts.is_tombstoned(record_id="web:n1") is None


@pytest.mark.parametrize("threshold, expected", [
    (0.8, {"web:a", "dump:L1", "dump:L2", "web:n1"}),  # n1 at 0.9; L3 only through a 0.7 edge
    (0.6, {"web:a", "dump:L1", "dump:L2", "web:n1", "dump:L3"}),  # transitively through n1
    (0.95, {"web:a", "dump:L1", "dump:L2"}),
])
def test_takedown_near_duplicates_only_at_or_above_the_threshold(world, threshold, expected):
    store, catalog = world
    _, res, _ = file_and_resolve(store, catalog, req(kind="content", content_sha256=sha256_text(SHARED),
                                                     near_duplicates=True, near_threshold=threshold))
    assert {c.record_id for c in res.copies} == expected
    assert all(c.via == "near" for c in res.copies if c.record_id in {"web:n1", "dump:L3"})


def test_takedown_of_a_content_nobody_holds_still_refuses_it(world):
    store, catalog = world
    digest = sha256_text("never seen anywhere")
    rid, res, gen = file_and_resolve(store, catalog, req(kind="content", content_sha256=digest))
    assert res.copies == () and res.releases == {}
    with catalog.transaction() as conn:
        rows = conn.execute("SELECT record_id, snapshot, text_sha256, scope FROM tombstones").fetchall()
    assert rows == [("", "", digest, "content")]
    assert tombstones.load_tombstones(catalog).is_tombstoned(text_sha256=digest) == rid


# --- tombstone table --------------------------------------------------------------------------


def test_generations_are_monotone_idempotent_and_the_table_never_shrinks(world):
    store, catalog = world
    assert tombstones.tombstone_generation(catalog) == 0
    seen = []
    r1, res1, g1 = file_and_resolve(store, catalog, req(kind="content", content_text=SHARED))
    seen.append(count(catalog, "tombstones"))
    r2, res2, g2 = file_and_resolve(store, catalog, req(kind="record", record_id="dump:L4"))
    seen.append(count(catalog, "tombstones"))
    assert (g1, g2) == (1, 2) and tombstones.tombstone_generation(catalog) == 2
    assert tombstones.write_tombstones(catalog, r1, res1) == 1  # same request again: same generation, no rows
    seen.append(count(catalog, "tombstones"))
    assert tombstones.write_tombstones(catalog, r1, tombstones.resolve(store, deletion.get(catalog, r1))) == 1
    seen.append(count(catalog, "tombstones"))
    deletion.set_status(catalog, r1, "applied", "purged and rebuilt")
    seen.append(count(catalog, "tombstones"))
    assert seen == sorted(seen) and seen[0] < seen[1] == seen[-1]
    assert deletion.get(catalog, r1).generation == 1
    with pytest.raises(ValueError, match="^resolution:"):
        tombstones.write_tombstones(catalog, r1, res2)
    with pytest.raises(KeyError, match="request_id"):
        tombstones.write_tombstones(catalog, "del-ffffffffffffffff", res1)
    ts = tombstones.load_tombstones(catalog)
    assert ts.generation == 2 and ts.request_ids == (r1, r2)
    # append-only by construction: no code path deletes or updates tombstones
    domain = Path(tombstones.__file__).parents[1]
    modules = sorted(domain.rglob("*.py"))
    assert len(modules) > 50
    for module in modules:
        text = module.read_text().upper()
        assert "DELETE FROM TOMBSTONES" not in text and "UPDATE TOMBSTONES" not in text and "DROP TABLE" not in text, module


def test_tombstones_hold_ids_and_digests_never_text(world):
    store, catalog = world
    file_and_resolve(store, catalog, req(kind="content", content_text=SHARED, near_duplicates=True, near_threshold=0.6))
    file_and_resolve(store, catalog, req(kind="record", record_id="dump:L4"))
    data = (store.home / "catalog.duckdb").read_bytes()
    for text in ALL_TEXTS:
        assert text.encode() not in data and text[:30].encode() not in data
