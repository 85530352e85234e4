"""Purge: write new layer versions without tombstoned records, drop old versions, scan for leftovers.

``purge_snapshot`` rewrites the four snapshot layers of one partition from their current versions
(``raw_snapshot``, ``canonical_records``, ``curated_records``, ``minhash_signatures``);
``purge_token_view_cache`` rewrites the current ``token_views`` of every release (the cache other
releases reuse tokens from); ``LayerStore.drop_versions`` removes superseded version directories so the
deleted text does not linger on disk; ``scan_for_tombstoned`` is the "no current artifact contains
a tombstoned record" check. Release layers other than the token view cache are not patched: an
affected release is rebuilt from the purged snapshots (and its old version revoked).

Decisions
---------
* **What is deleted in a snapshot.** A raw item whose URI or source is tombstoned, or whose record
  (through the canonical decision of the item) is; a record whose id, text digest (content scope)
  or source is tombstoned — in the canonical or the curated copy; the two sets are closed over each
  other (deleting a record deletes its item, and the reverse).
* **Accounting stays exact, and a deletion is decided once, at the first stage.**
  - ``raw_snapshot``: a deleted item keeps its row as a content-free stub (``status`` =
    ``deletion.tombstoned``; ``content``, ``raw_sha256``, ``byte_length``, ``etag``,
    ``last_modified``, ``extra_json`` null; ``status_detail`` names the request). Item positions
    (``item_index``) stay contiguous and raw items = canonical decisions still holds. Ids
    (``item_id``, ``uri``) are kept, like tombstones keep them: ids and digests, never content.
  - ``canonical_records``: the record row goes; the item's decision becomes outcome ``deleted``,
    reason ``deletion.tombstoned``, ``record_id`` null, detail naming the request (exactly what
    canonicalizing the stub gives once ``Reason.DELETION_TOMBSTONED`` maps to ``Outcome.DELETED``);
    its ``quarantine`` / ``references`` rows go. Identity: items in = accepted + rejected +
    quarantined + deleted (the canonical accounting check needs the ``deleted`` outcome).
  - ``curated_records``: its input (canonical records) lost the record, so the record, its
    decision, PII audit, contamination and quarantine rows go: canonical records in = curated
    decisions = accepted + rejected + quarantined holds unchanged. Same for ``minhash_signatures``.
  - Every other table is copied, dropping rows that name a deleted record id or item index.
* **Provenance.** The build spec of a purged version is the old one plus an entry appended to
  ``purges`` (code version, request ids, tombstone generation, the content digest it was purged
  from — the history survives ``LayerStore.drop_versions``), with
  its upstream digest (``raw_version`` / ``canonical_version`` / ``curated_version``) pointing at
  the purged upstream; the manifest keeps the old extras with recomputed counts plus ``deletion``
  (request ids given, request ids that matched, generation, rows removed per table).
* **Idempotent.** A partition with nothing (left) to delete is not written and is reported
  ``affected: False``; re-running after a crash finishes the layers not yet purged (stubs count as
  deleted items). Versions are content-addressed, so a purge equals a rebuild from purged inputs
  table for table.
* **Old versions.** Versions are immutable and stay on disk until ``LayerStore.drop_versions`` removes
  every non-current version directory of a partition (and stale ``.tmp-*``).
* **Scan** (``scan_for_tombstoned``): every table of the current version of every asset partition
  under ``layers/`` — columns ``record_id``, ``representative_id``, ``neighbour_id`` (record ids),
  ``text_sha256`` (content digests), ``uri`` and ``source_id`` — and the ``.spans.parquet`` files of
  every shard listed by the current ``packed_shards`` versions. Deletion markers (``outcome =
  'deleted'`` / ``status = 'deletion.tombstoned'``) are not findings, unless a raw stub still has a
  byte length or digest. Findings name ids, never text.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion, TableSpec
from corpus_assets.domain.deletion.tombstones import (
    CANONICAL_ASSET,
    CURATED_ASSET,
    RAW_ASSET,
    SHARDS_ASSET,
    SIGNATURES_ASSET,
    TombstoneSet,
    shard_spans_files,
)

__all__ = [
    "PURGE_CODE_VERSION",
    "DELETED_OUTCOME",
    "DELETED_REASON",
    "DELETED_STATUS",
    "purge_snapshot",
    "purge_token_view_cache",
    "scan_for_tombstoned",
]

PURGE_CODE_VERSION = "purge-1"
DELETED_OUTCOME = "deleted"
DELETED_REASON = "deletion.tombstoned"
DELETED_STATUS = DELETED_REASON  # raw capture status of a deletion stub
TOKEN_VIEWS_ASSET = "token_views"

_MANIFEST_KEYS = {"layout_version", "asset", "partition", "version", "content_digest", "tables", "build_spec"}
_UPSTREAM_KEY = {CANONICAL_ASSET: "raw_version", CURATED_ASSET: "canonical_version", SIGNATURES_ASSET: "curated_version"}
_ID_COLUMNS = ("record_id", "representative_id", "neighbour_id")
_BATCH = 2048


def _detail(request_id: str) -> str:
    return f"deleted under deletion request {request_id}"


# --- planning ---------------------------------------------------------------------------------


class _Plan:
    """Deleted item indexes and record ids of one snapshot, with the request behind each."""

    def __init__(self) -> None:
        self.items: dict[int, str] = {}  # item_index -> request id
        self.ids: dict[str, str] = {}  # record id -> request id
        self.stubs: set[int] = set()  # items already stubbed by an earlier purge


def _plan(raw: Optional[LayerVersion], canon: Optional[LayerVersion], curated: Optional[LayerVersion],
          sigs: Optional[LayerVersion], ts: TombstoneSet) -> _Plan:
    plan = _Plan()
    if raw is not None:
        for b in raw.iter_batches("items", batch_size=_BATCH, columns=["item_index", "uri", "source_id", "status"]):
            for idx, uri, src, status in zip(*(b.column(i).to_pylist() for i in range(4))):
                if status == DELETED_STATUS:
                    plan.stubs.add(idx)
                hit = ts.is_tombstoned(uri=uri, source_id=src)
                if hit is not None:
                    plan.items[idx] = hit
    for v, cols in ((canon, ["record_id", "text_sha256", "source_id"]), (curated, ["record_id", "text_sha256", "source_id"]),
                    (sigs, ["record_id", "source_id"])):
        if v is None:
            continue
        table = "signatures" if v.asset == SIGNATURES_ASSET else "records"
        for b in v.iter_batches(table, batch_size=_BATCH, columns=cols):
            d = b.to_pydict()
            digests = d.get("text_sha256") or [None] * b.num_rows
            for rid, digest, src in zip(d["record_id"], digests, d["source_id"]):
                hit = ts.is_tombstoned(record_id=rid, text_sha256=digest, source_id=src)
                if hit is not None:
                    plan.ids.setdefault(rid, hit)
    if canon is not None:
        for b in canon.iter_batches("decisions", batch_size=_BATCH, columns=["item_index", "record_id", "outcome", "detail"]):
            for idx, rid, outcome, detail in zip(*(b.column(i).to_pylist() for i in range(4))):
                if rid is None:
                    continue
                if outcome == DELETED_OUTCOME:
                    # refused at canonicalization (canonical_layer, tombstones given): the record id is
                    # kept on the decision so its raw item can be stubbed here
                    req = (detail or "").removeprefix("deletion request ").strip() or "tombstoned"
                    plan.ids.setdefault(rid, ts.is_tombstoned(record_id=rid) or req)
                    plan.items[idx] = plan.ids[rid]
                elif idx in plan.items:
                    plan.ids.setdefault(rid, plan.items[idx])
                elif rid in plan.ids:
                    plan.items[idx] = plan.ids[rid]
    return plan


# --- rewriting --------------------------------------------------------------------------------


def _table_specs(version: LayerVersion) -> dict[str, TableSpec]:
    specs = {}
    for name, meta in version.manifest["tables"].items():
        schema = pq.ParquetFile(version.table_files(name)[0]).schema_arrow
        specs[name] = TableSpec(schema.remove_metadata(), private=bool(meta.get("private")))
    return specs


Transform = Callable[[str, pa.Table], pa.Table]


def _rewrite(
    store: LayerStore,
    version: LayerVersion,
    transform: Transform,
    purge_info: dict,
    *,
    upstream: Optional[str] = None,
    extras: Optional[Callable[[dict[str, dict]], dict]] = None,
) -> tuple[LayerVersion, dict[str, int]]:
    """A new version of ``version``'s partition with every table passed through ``transform``.

    ``extras(stats)`` returns manifest keys to replace, from per-table stats of what was written:
    ``{table: {"rows": n, "outcome": {value: n}, "status": {value: n}}}``."""
    specs = _table_specs(version)
    build_spec = dict(version.manifest.get("build_spec", {}))
    if upstream is not None and version.asset in _UPSTREAM_KEY:
        build_spec[_UPSTREAM_KEY[version.asset]] = upstream
    build_spec["purges"] = [*build_spec.get("purges", []), {**purge_info, "from_version": version.content_digest}]
    removed: dict[str, int] = {}
    stats: dict[str, dict] = {}
    with store.new_version(version.asset, version.partition, specs, build_spec) as w:
        for name in sorted(specs):
            st = stats[name] = {"rows": 0, "outcome": {}, "status": {}}
            before = 0
            for batch in version.iter_batches(name, batch_size=_BATCH):
                t = pa.Table.from_batches([batch])
                out = transform(name, t)
                before += t.num_rows
                st["rows"] += out.num_rows
                for col in ("outcome", "status"):
                    for k, n in _counts(out, col).items():
                        st[col][k] = st[col].get(k, 0) + n
                if out.num_rows:
                    w.write(name, out)
            removed[name] = before - st["rows"]
            st["outcome"], st["status"] = dict(sorted(st["outcome"].items())), dict(sorted(st["status"].items()))
        manifest = {k: v for k, v in version.manifest.items() if k not in _MANIFEST_KEYS}
        if extras is not None:
            manifest.update(extras(stats))
        manifest["deletion"] = {**purge_info, "from_version": version.content_digest,
                                "removed_rows": {k: v for k, v in sorted(removed.items()) if v}}
        new = w.commit(extra_manifest=manifest)
    return new, removed


def _counts(table: pa.Table, column: str) -> dict[str, int]:
    if column not in table.column_names or table.num_rows == 0:
        return {}
    vc = pc.value_counts(table.column(column).combine_chunks())
    return dict(sorted((str(x["values"]), int(x["counts"])) for x in vc.to_pylist()))


def _drop(t: pa.Table, column: str, values: pa.Array) -> pa.Table:
    if column not in t.column_names or len(values) == 0:
        return t
    hit = pc.fill_null(pc.is_in(t.column(column), value_set=values), False)
    return t.filter(pc.invert(hit))


def _drop_named(t: pa.Table, ids: pa.Array, items: pa.Array) -> pa.Table:
    return _drop(_drop(t, "record_id", ids), "item_index", items)


def _mark_items(t: pa.Table, plan: _Plan, done: tuple[str, str], changes) -> pa.Table:
    """Rows of deleted items updated with ``changes(request)``, except rows already marked
    (``row[done[0]] == done[1]``); the table itself when no row names a deleted item."""
    idx = t.column("item_index").to_pylist()
    if not any(i in plan.items for i in idx):
        return t
    rows = t.to_pylist()
    for row in rows:
        request = plan.items.get(row["item_index"])
        if request is None or row[done[0]] == done[1]:
            continue
        row.update(changes(request))
    return pa.Table.from_pylist(rows, schema=t.schema)


def _stub_items(t: pa.Table, plan: _Plan) -> pa.Table:
    return _mark_items(t, plan, ("status", DELETED_STATUS), lambda request: dict(
        status=DELETED_STATUS, status_detail=_detail(request), content=None, raw_sha256=None,
        byte_length=None, etag=None, last_modified=None, extra_json=None))


def _mark_decisions(t: pa.Table, plan: _Plan) -> pa.Table:
    return _mark_items(t, plan, ("outcome", DELETED_OUTCOME), lambda request: dict(
        record_id=None, outcome=DELETED_OUTCOME, reason=DELETED_REASON, detail=_detail(request)))


def _schema_names(v: LayerVersion, table: str) -> list[str]:
    return pq.ParquetFile(v.table_files(table)[0]).schema_arrow.names


def _any_in(v: LayerVersion, table: str, column: str, values: pa.Array) -> bool:
    if len(values) == 0 or column not in _schema_names(v, table):
        return False
    for b in v.iter_batches(table, batch_size=_BATCH, columns=[column]):
        if pc.any(pc.fill_null(pc.is_in(b.column(0), value_set=values), False)).as_py():
            return True
    return False


def _changes(v: Optional[LayerVersion], plan: _Plan, ids: pa.Array, items: pa.Array) -> bool:
    """Would purging ``v`` change it?"""
    if v is None:
        return False
    if v.asset == RAW_ASSET:
        return any(i not in plan.stubs for i in plan.items)
    for name in v.manifest["tables"]:
        if v.asset == CANONICAL_ASSET and name == "decisions":
            # decisions of deleted items stay, as markers: a change unless already marked
            for b in v.iter_batches(name, batch_size=_BATCH, columns=["item_index", "outcome"]):
                named = pc.fill_null(pc.is_in(b.column(0), value_set=items), False)
                if pc.any(pc.and_(named, pc.not_equal(b.column(1), DELETED_OUTCOME))).as_py():
                    return True
        elif _any_in(v, name, "record_id", ids) or _any_in(v, name, "item_index", items):
            return True
    return False


def purge_snapshot(store: LayerStore, snapshot: str, tombstones: TombstoneSet, *, request_ids: Iterable[str]) -> dict:
    """Write new versions of the snapshot layers of ``snapshot`` without tombstoned records."""
    raw = store.current(RAW_ASSET, snapshot)
    canon = store.current(CANONICAL_ASSET, snapshot)
    curated = store.current(CURATED_ASSET, snapshot)
    sigs = store.current(SIGNATURES_ASSET, snapshot)
    plan = _plan(raw, canon, curated, sigs, tombstones)
    ids = pa.array(sorted(plan.ids), pa.string())
    items = pa.array(sorted(plan.items), pa.int64())
    report: dict = {"snapshot": snapshot, "affected": False, "deleted_items": len(plan.items),
                    "deleted_records": len(plan.ids), "versions": {}}
    todo = {v.asset: v for v in (raw, canon, curated, sigs) if _changes(v, plan, ids, items)}
    if not todo:
        return report
    info = {
        "code_version": PURGE_CODE_VERSION,
        "request_ids": sorted(set(request_ids)),
        "matched_request_ids": sorted(set(plan.items.values()) | set(plan.ids.values())),
        "tombstone_generation": tombstones.generation,
    }

    def record(asset: str, old: LayerVersion, new: LayerVersion, removed: dict[str, int]) -> str:
        report["versions"][asset] = {"from": old.version, "to": new.version,
                                     "removed_rows": {k: v for k, v in sorted(removed.items()) if v}}
        return new.content_digest

    upstream: Optional[str] = raw.content_digest if raw is not None else None
    if RAW_ASSET in todo:
        new, removed = _rewrite(
            store, raw, lambda name, t: _stub_items(t, plan) if name == "items" else t, info,
            extras=lambda st: {"status_counts": st["items"]["status"]},
        )
        upstream = record(RAW_ASSET, raw, new, removed)
    if canon is not None:
        if CANONICAL_ASSET in todo:
            def canon_t(name: str, t: pa.Table) -> pa.Table:
                return _mark_decisions(t, plan) if name == "decisions" else _drop_named(t, ids, items)

            new, removed = _rewrite(store, canon, canon_t, info, upstream=upstream,
                                    extras=lambda st: {"outcomes": st["decisions"]["outcome"]})
            upstream = record(CANONICAL_ASSET, canon, new, removed)
            canon = new
        else:
            upstream = canon.content_digest
    if curated is not None:
        if CURATED_ASSET in todo:
            records_in = canon.row_count("records") if canon is not None else None
            new, removed = _rewrite(
                store, curated, lambda name, t: _drop_named(t, ids, items), info, upstream=upstream,
                extras=lambda st: {"outcomes": st["decisions"]["outcome"],
                                   **({"records_in": records_in} if records_in is not None else {})},
            )
            upstream = record(CURATED_ASSET, curated, new, removed)
        else:
            upstream = curated.content_digest
    if SIGNATURES_ASSET in todo:
        new, removed = _rewrite(store, sigs, lambda name, t: _drop_named(t, ids, items), info, upstream=upstream)
        record(SIGNATURES_ASSET, sigs, new, removed)
    report["affected"] = bool(report["versions"])
    report.update(info)
    return report


def purge_token_view_cache(store: LayerStore, tombstones: TombstoneSet, request_ids: Iterable[str]) -> dict:
    """Rewrite every current ``token_views`` version that holds views (or rejections) of tombstoned
    records without them. Returns {release: {from, to, removed_rows}} for the releases rewritten."""
    out: dict = {}
    info = {"code_version": PURGE_CODE_VERSION, "request_ids": sorted(set(request_ids)),
            "tombstone_generation": tombstones.generation}
    for release in store.partitions(TOKEN_VIEWS_ASSET):
        v = store.current(TOKEN_VIEWS_ASSET, release)
        if v is None:
            continue
        hits: set[str] = set()
        for table in ("views", "rejected"):
            if table not in v.manifest["tables"]:
                continue
            for b in v.iter_batches(table, batch_size=_BATCH, columns=["record_id", "source_id"]):
                for rid, src in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
                    if tombstones.is_tombstoned(record_id=rid, source_id=src) is not None:
                        hits.add(rid)
        if not hits:
            continue
        ids = pa.array(sorted(hits), pa.string())
        new, removed = _rewrite(store, v, lambda name, t: _drop(t, "record_id", ids), info)
        out[release] = {"from": v.version, "to": new.version, "records": len(hits),
                        "removed_rows": {k: n for k, n in sorted(removed.items()) if n}}
    return out


# --- scan -------------------------------------------------------------------------------------


def _scan_table(ts: TombstoneSet, t: pa.Table) -> Iterable[tuple[str, str, str]]:
    """(column, value, request id) of every tombstoned id in a batch, markers excepted."""
    names = t.column_names
    marker = None
    if "outcome" in names:
        marker = pc.fill_null(pc.equal(t.column("outcome"), DELETED_OUTCOME), False)
    if "status" in names:
        m = pc.fill_null(pc.equal(t.column("status"), DELETED_STATUS), False)
        for c in ("byte_length", "raw_sha256"):
            if c in names:
                leak = pc.and_(m, pc.is_valid(t.column(c)))
                if pc.any(leak).as_py():
                    yield c, "deletion stub still has a value", ""
        marker = m if marker is None else pc.or_(marker, m)
    if marker is not None:
        t = t.filter(pc.invert(marker))
    checks = [(c, "record_id") for c in _ID_COLUMNS] + [("text_sha256", "text_sha256"), ("uri", "uri"), ("source_id", "source_id")]
    for column, arg in checks:
        if column not in names:
            continue
        for value in set(t.column(column).to_pylist()):
            if not value:
                continue
            hit = ts.is_tombstoned(**{arg: value})
            if hit is not None:
                yield column, value, hit


def _scan_version(ts: TombstoneSet, v: LayerVersion, findings: dict) -> None:
    wanted = set(_ID_COLUMNS) | {"text_sha256", "uri", "source_id", "outcome", "status", "byte_length", "raw_sha256"}
    for table in sorted(v.manifest["tables"]):
        files = v.table_files(table)
        names = pq.ParquetFile(files[0]).schema_arrow.names
        cols = [c for c in names if c in wanted]
        if not set(cols) - {"outcome", "status", "byte_length", "raw_sha256"}:
            continue
        for b in v.iter_batches(table, batch_size=8192, columns=cols):
            for column, value, request in _scan_table(ts, pa.Table.from_batches([b])):
                key = (v.asset, v.partition, v.version, table, column, value, request)
                findings[key] = findings.get(key, 0) + 1


def scan_for_tombstoned(store: LayerStore, tombstones: TombstoneSet) -> list[dict]:
    """Every tombstoned id still present in a current artifact: layer tables and shard spans."""
    findings: dict[tuple, int] = {}
    if len(tombstones) == 0:
        return []
    for asset in store.assets():
        for partition in store.partitions(asset):
            v = store.current(asset, partition)
            if v is None:
                continue
            _scan_version(tombstones, v, findings)
            if asset == SHARDS_ASSET and "shards" in v.manifest["tables"]:
                for path in shard_spans_files(store, v):
                    if not path.is_file():
                        continue
                    t = pq.read_table(path, columns=[c for c in ("record_id",) if c in pq.read_schema(path).names])
                    for column, value, request in _scan_table(tombstones, t):
                        rel = str(path.relative_to(store.home)) if path.is_relative_to(store.home) else str(path)
                        key = (asset, partition, v.version, rel, column, value, request)
                        findings[key] = findings.get(key, 0) + 1
    return [
        {"asset": a, "partition": p, "version": ver, "table": tbl, "column": c, "value": val, "request_id": r, "rows": n}
        for (a, p, ver, tbl, c, val, r), n in sorted(findings.items())
    ]
