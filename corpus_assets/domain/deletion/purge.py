"""Purge: new layer versions without tombstoned records, and the scan for anything left.

Which layers are purged in place, which tables name records, and what happens to their rows
(dropped, kept as deletion markers, kept as content-free raw stubs) all come from the layer
registry (``layers/registry.py``); nothing here lists layers. ``purge_snapshot`` rewrites every
snapshot layer of one partition (deleting a record deletes its raw item and the reverse, so
accounting stays exact); ``purge_release_partitions`` rewrites the release layers that other
releases reuse (the token-view cache); releases themselves are rebuilt from purged inputs and
their old builds revoked. ``scan_for_tombstoned`` is the "no current artifact names a tombstoned
record" check. The rules and why: docs/deletion.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_assets.domain.deletion.tombstones import TombstoneSet, shard_spans_files
from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.decisions import DELETE
from corpus_assets.domain.layers.registry import Layer, Partitioning, Purge, Table
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion, TableSpec

__all__ = [
    "PURGE_CODE_VERSION",
    "DELETED_OUTCOME",
    "DELETED_REASON",
    "DELETED_STATUS",
    "purge_snapshot",
    "purge_release_partitions",
    "scan_for_tombstoned",
    "ScanCoverage",
]

PURGE_CODE_VERSION = "purge-1"
DELETED_OUTCOME = "deleted"
DELETED_REASON = "deletion.tombstoned"
DELETED_STATUS = DELETED_REASON  # raw capture status of a deletion stub

_MANIFEST_KEYS = {"layout_version", "asset", "partition", "version", "content_digest", "tables", "build_spec"}
# manifest entries that name part files of the version they were written with: a purge cuts its
# own part files, so they would name files the purged version does not have (token_views'
# "segments": a purged version is never adopted from, token_views_layer._adoptable_segments)
_FILE_LAYOUT_KEYS = {"segments"}
_BATCH = 2048


def _detail(request_id: str) -> str:
    return f"deleted under deletion request {request_id}"


def _names(v: LayerVersion, table: str) -> list[str]:
    return pq.ParquetFile(v.table_files(table)[0]).schema_arrow.names


def _tables(la: Layer, v: LayerVersion) -> Iterable[tuple[str, Table]]:
    """The registered tables a version holds (older versions may lack a newer table)."""
    return ((name, t) for name, t in la.tables.items() if name in v.manifest["tables"])


# --- planning ---------------------------------------------------------------------------------


class _Plan:
    """Deleted item indexes and record ids of one partition, with the request behind each."""

    def __init__(self) -> None:
        self.items: dict[int, str] = {}  # item_index -> request id
        self.ids: dict[str, str] = {}  # record id -> request id
        self.stubs: set[int] = set()  # items already stubbed by an earlier purge


def _plan(versions: Mapping[str, LayerVersion], ts: TombstoneSet) -> _Plan:
    plan = _Plan()
    # raw items: tombstoned by URI, source or (content takedowns of items that are no record) bytes
    for asset, v in versions.items():
        for name, t in _tables(registry.layer(asset), v):
            if t.purge is not Purge.STUB:
                continue
            cols = ["item_index", "uri", "source_id", "status", "raw_sha256"]
            for b in v.iter_batches(name, batch_size=_BATCH, columns=cols):
                for idx, uri, src, status, raw in zip(*(b.column(i).to_pylist() for i in range(5))):
                    if status == DELETED_STATUS:
                        plan.stubs.add(idx)
                    hit = ts.is_tombstoned(uri=uri, source_id=src, raw_sha256=raw)
                    if hit is not None:
                        plan.items[idx] = hit
    # records: tombstoned by id, content digest or source (in each layer's copy of them)
    for asset, v in versions.items():
        la = registry.layer(asset)
        if la.main_table is None or la.main_table not in la.record_tables():
            continue
        names = _names(v, la.main_table)
        cols = [c for c in ("record_id", "text_sha256", "source_id") if c in names]
        if "record_id" not in cols:
            continue
        for b in v.iter_batches(la.main_table, batch_size=_BATCH, columns=cols):
            d = b.to_pydict()
            digests = d.get("text_sha256") or [None] * b.num_rows
            sources = d.get("source_id") or [None] * b.num_rows
            for rid, digest, src in zip(d["record_id"], digests, sources):
                hit = ts.is_tombstoned(record_id=rid, text_sha256=digest, source_id=src)
                if hit is not None:
                    plan.ids.setdefault(rid, hit)
    # decisions tie items and records together: close the two sets over each other
    for asset, v in versions.items():
        for name, t in _tables(registry.layer(asset), v):
            if t.purge is not Purge.MARK or not t.item_indexed:
                continue
            for b in v.iter_batches(name, batch_size=_BATCH, columns=["item_index", "record_id", "outcome", "detail"]):
                for idx, rid, outcome, detail in zip(*(b.column(i).to_pylist() for i in range(4))):
                    if rid is None:
                        continue
                    if outcome == DELETED_OUTCOME:
                        # refused at canonicalization (tombstones given): the record id is kept on the
                        # decision so its raw item can be stubbed here
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
    """The version's own schemas (an older version keeps its columns when purged), and the counts
    its manifest kept (recounted over the purged rows)."""
    specs = {}
    for name, meta in version.manifest["tables"].items():
        schema = pq.ParquetFile(version.table_files(name)[0]).schema_arrow
        count_by = tuple((meta.get("counts") or {}).get("by") or ())
        specs[name] = TableSpec(schema.remove_metadata(), private=bool(meta.get("private")), count_by=count_by)
    return specs


Transform = Callable[[str, pa.Table], pa.Table]


def _rewrite(store: LayerStore, la: Layer, version: LayerVersion, transform: Transform, purge_info: dict, *,
             upstream: Optional[str] = None) -> tuple[LayerVersion, dict[str, int]]:
    """A new version of ``version``'s partition with every table passed through ``transform``; the
    manifest counts the registry names for the layer are recomputed from what was written."""
    specs = _table_specs(version)
    build_spec = dict(version.manifest.get("build_spec", {}))
    if upstream is not None and la.upstream_key:
        build_spec[la.upstream_key] = upstream
    build_spec["purges"] = [*build_spec.get("purges", []), {**purge_info, "from_version": version.content_digest}]
    counted = {(table, column) for table, column in la.manifest_counts.values() if column}
    removed: dict[str, int] = {}
    rows: dict[str, int] = {}
    values: dict[tuple[str, str], dict[str, int]] = {key: {} for key in counted}
    with store.new_version(version.asset, version.partition, specs, build_spec) as w:
        for name in sorted(specs):
            before = rows[name] = 0
            for batch in version.iter_batches(name, batch_size=_BATCH):
                t = pa.Table.from_batches([batch])
                out = transform(name, t)
                before += t.num_rows
                rows[name] += out.num_rows
                for table, column in counted:
                    if table == name:
                        for k, n in _counts(out, column).items():
                            values[(table, column)][k] = values[(table, column)].get(k, 0) + n
                if out.num_rows:
                    w.write(name, out)
            removed[name] = before - rows[name]
        manifest = {k: v for k, v in version.manifest.items() if k not in _MANIFEST_KEYS | _FILE_LAYOUT_KEYS}
        for key, (table, column) in la.manifest_counts.items():
            manifest[key] = dict(sorted(values[(table, column)].items())) if column else rows.get(table, 0)
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


def _drop_named(t: pa.Table, table: Table, ids: pa.Array, items: pa.Array) -> pa.Table:
    for column in table.record_ids:
        t = _drop(t, column, ids)
    return _drop(t, "item_index", items)


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
        record_id=None, outcome=DELETED_OUTCOME, action=DELETE, reason=DELETED_REASON, detail=_detail(request),
        schema_type=None, domain=None, lang=None, chars_out=None))


def _purged_rows(la: Layer, plan: _Plan, ids: pa.Array, items: pa.Array) -> Transform:
    def transform(name: str, t: pa.Table) -> pa.Table:
        table = la.tables.get(name)
        rule = table.purge if table is not None else Purge.DROP
        if rule is Purge.STUB:
            return _stub_items(t, plan)
        if rule is Purge.MARK:
            return _mark_decisions(t, plan)
        if rule is Purge.NONE:
            return t
        return _drop_named(t, table or Table(None, record_ids=registry.RECORD_ID_COLUMNS), ids, items)

    return transform


def _any_in(v: LayerVersion, table: str, column: str, values: pa.Array) -> bool:
    if len(values) == 0 or column not in _names(v, table):
        return False
    for b in v.iter_batches(table, batch_size=_BATCH, columns=[column]):
        if pc.any(pc.fill_null(pc.is_in(b.column(0), value_set=values), False)).as_py():
            return True
    return False


def _changes(la: Layer, v: Optional[LayerVersion], plan: _Plan, ids: pa.Array, items: pa.Array) -> bool:
    """Would purging ``v`` change it?"""
    if v is None:
        return False
    for name, t in _tables(la, v):
        if t.purge is Purge.STUB:
            if any(i not in plan.stubs for i in plan.items):
                return True
        elif t.purge is Purge.MARK:
            # decisions of deleted items stay, as markers: a change unless already marked
            for b in v.iter_batches(name, batch_size=_BATCH, columns=["item_index", "outcome"]):
                named = pc.fill_null(pc.is_in(b.column(0), value_set=items), False)
                if pc.any(pc.and_(named, pc.not_equal(b.column(1), DELETED_OUTCOME))).as_py():
                    return True
        elif t.purge is Purge.DROP:
            if any(_any_in(v, name, c, ids) for c in t.record_ids) or _any_in(v, name, "item_index", items):
                return True
    return False


def _purge_info(tombstones: TombstoneSet, request_ids: Iterable[str]) -> dict:
    return {"code_version": PURGE_CODE_VERSION, "request_ids": sorted(set(request_ids)),
            "tombstone_generation": tombstones.generation}


def purge_snapshot(store: LayerStore, snapshot: str, tombstones: TombstoneSet, *, request_ids: Iterable[str]) -> dict:
    """Write new versions of every snapshot layer of ``snapshot`` without tombstoned records."""
    chain = registry.rewritten_on_deletion(Partitioning.SNAPSHOTS)
    versions = {la.asset: v for la in chain if (v := store.current(la.asset, snapshot)) is not None}
    plan = _plan(versions, tombstones)
    ids = pa.array(sorted(plan.ids), pa.string())
    items = pa.array(sorted(plan.items), pa.int64())
    report: dict = {"snapshot": snapshot, "affected": False, "deleted_items": len(plan.items),
                    "deleted_records": len(plan.ids), "versions": {}}
    todo = {la.asset for la in chain if _changes(la, versions.get(la.asset), plan, ids, items)}
    if not todo:
        return report
    info = {**_purge_info(tombstones, request_ids),
            "matched_request_ids": sorted(set(plan.items.values()) | set(plan.ids.values()))}
    info = {k: info[k] for k in ("code_version", "request_ids", "matched_request_ids", "tombstone_generation")}
    # the layers form a chain (raw -> canonical -> curated -> signatures): each purged version
    # records the digest of the version it was built from, purged or not
    upstream: Optional[str] = None
    for la in chain:
        v = versions.get(la.asset)
        if v is None:
            continue
        if la.asset in todo:
            new, removed = _rewrite(store, la, v, _purged_rows(la, plan, ids, items), info, upstream=upstream)
            report["versions"][la.asset] = {"from": v.version, "to": new.version,
                                            "removed_rows": {k: n for k, n in sorted(removed.items()) if n}}
            upstream = new.content_digest
        else:
            upstream = v.content_digest
    report["affected"] = bool(report["versions"])
    report.update(info)
    return report


def purge_release_partitions(store: LayerStore, tombstones: TombstoneSet, request_ids: Iterable[str]) -> dict:
    """Rewrite the current version of every release partition of the layers the registry purges in
    place (the token-view cache other releases reuse) without rows of tombstoned records.
    Returns {asset: {release: {from, to, records, removed_rows}}} for the partitions rewritten."""
    out: dict = {}
    info = _purge_info(tombstones, request_ids)
    for la in registry.rewritten_on_deletion(Partitioning.RELEASES):
        for release in store.partitions(la.asset):
            v = store.current(la.asset, release)
            if v is None:
                continue
            hits: set[str] = set()
            for name, t in _tables(la, v):
                if not t.record_ids:
                    continue
                cols = [c for c in ("record_id", "source_id") if c in _names(v, name)]
                for b in v.iter_batches(name, batch_size=_BATCH, columns=cols):
                    d = b.to_pydict()
                    for rid, src in zip(d["record_id"], d.get("source_id") or [None] * b.num_rows):
                        if tombstones.is_tombstoned(record_id=rid, source_id=src) is not None:
                            hits.add(rid)
            if not hits:
                continue
            plan = _Plan()
            plan.ids = {rid: "" for rid in hits}
            ids = pa.array(sorted(hits), pa.string())
            new, removed = _rewrite(store, la, v, _purged_rows(la, plan, ids, pa.array([], pa.int64())), info)
            out.setdefault(la.asset, {})[release] = {"from": v.version, "to": new.version, "records": len(hits),
                                                     "removed_rows": {k: n for k, n in sorted(removed.items()) if n}}
    return out


# --- scan -------------------------------------------------------------------------------------


_ARGS = {"record_id": "record_ids", "text_sha256": "digests", "uri": "uris", "source_id": "sources",
         "raw_sha256": "raw_digests"}


class _IdSets:
    """A tombstone set's ids as Arrow value sets, built once per scan (per kind of id and column
    type), not once per batch and column: a set of a million ids is a second of conversion."""

    def __init__(self, ts: TombstoneSet) -> None:
        self.ts = ts
        self._arrays: dict[tuple[str, pa.DataType], Optional[pa.Array]] = {}

    def array(self, kind: str, type_: pa.DataType) -> Optional[pa.Array]:
        """The ids of ``TombstoneSet.<kind>`` (None: there are none)."""
        key = (kind, type_)
        if key not in self._arrays:
            ids = getattr(self.ts, kind)
            self._arrays[key] = pa.array(list(ids), type_) if ids else None
        return self._arrays[key]


def _possible_hits(ids: _IdSets, arg: str, column: pa.ChunkedArray) -> list[tuple[str, int]]:
    """The distinct values of a string ``column`` that may be tombstoned as ``arg``, each with its
    number of rows, by Arrow hash lookups: a superset of the hits (``is_tombstoned`` decides each),
    found without a Python object per row."""
    keys = ids.array(_ARGS[arg], column.type)
    mask = pc.is_in(column, value_set=keys) if keys is not None else None
    sources = ids.array("sources", column.type) if arg == "record_id" else None
    if sources is not None:  # a tombstoned source names every record id "<source>:..."
        prefix = pc.list_element(pc.split_pattern(column, ":", max_splits=1), 0)
        by_source = pc.and_(pc.match_substring(column, ":"), pc.is_in(prefix, value_set=sources))
        mask = by_source if mask is None else pc.or_(mask, by_source)
    if mask is None:
        return []
    counts = pc.value_counts(column.filter(pc.fill_null(mask, False)))
    return list(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))


def without_markers(t: pa.Table, table: Optional[Table]) -> tuple[pa.Table, list[tuple[str, str, str, int]]]:
    """The rows of a table that are not deletion markers (``mark`` tables' deleted outcomes, ``stub``
    tables' deletion stubs), and a finding for each column in which stubs still hold a value
    (column, what, "", how many stubs)."""
    names = t.column_names
    rule = table.purge if table is not None else None
    marker, leaks = None, []
    if "outcome" in names and rule in (Purge.MARK, None):
        marker = pc.fill_null(pc.equal(t.column("outcome"), DELETED_OUTCOME), False)
    if "status" in names and rule in (Purge.STUB, None):
        m = pc.fill_null(pc.equal(t.column("status"), DELETED_STATUS), False)
        for c in ("byte_length", "raw_sha256"):
            held = pc.sum(pc.and_(m, pc.is_valid(t.column(c)))).as_py() if c in names else 0
            if held:
                leaks.append((c, "deletion stub still has a value", "", int(held)))
        marker = m if marker is None else pc.or_(marker, m)
    return (t if marker is None else t.filter(pc.invert(marker))), leaks


def id_checks(table: Optional[Table]) -> list[tuple[str, str]]:
    """(column, ``is_tombstoned`` argument) of every column a table's ids may be looked up in."""
    id_columns = table.record_ids if table is not None and table.record_ids else registry.RECORD_ID_COLUMNS
    return [(c, "record_id") for c in id_columns] + [(c, c) for c in registry.TARGET_COLUMNS]


def _scan_table(ts: TombstoneSet, t: pa.Table, table: Optional[Table],
                ids: Optional[_IdSets] = None) -> Iterable[tuple[str, str, str, int]]:
    """(column, value, request id, rows) of every tombstoned id in a table, deletion markers
    excepted, and stubs that still hold a value (``without_markers``). ``ids``: the set's value
    sets, shared by the tables of one scan."""
    ids = ids or _IdSets(ts)
    t, leaks = without_markers(t, table)
    yield from leaks
    names = t.column_names
    for column, arg in id_checks(table):
        if column not in names:
            continue
        col = t.column(column)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            values = _possible_hits(ids, arg, col)
        else:  # not a string column: look every distinct value up
            values = Counter(col.to_pylist()).items()
        for value, rows in values:
            if not value:
                continue
            hit = ts.is_tombstoned(**{arg: value})
            if hit is not None:
                yield column, value, hit, int(rows)


_MARKER_COLUMNS = {"outcome", "status", "byte_length", "raw_sha256"}


def _scan_version(ts: TombstoneSet, la: Optional[Layer], v: LayerVersion, findings: dict, ids: _IdSets) -> None:
    for name in sorted(v.manifest["tables"]):
        table = la.tables.get(name) if la is not None else None
        wanted = {c for c, _arg in id_checks(table)} | _MARKER_COLUMNS
        cols = [c for c in _names(v, name) if c in wanted]
        if not set(cols) - _MARKER_COLUMNS:
            continue
        # a whole part file at a time (its id columns: at most groups_per_file row groups), so the
        # tombstones' value sets are hashed once per file, not once per row group
        for path in v.table_files(name):
            t = pq.ParquetFile(path).read(columns=cols)
            for column, value, request, rows in _scan_table(ts, t, table, ids):
                key = (v.asset, v.partition, v.version, name, column, value, request)
                findings[key] = findings.get(key, 0) + rows


@dataclass
class ScanCoverage:
    """What one ``scan_for_tombstoned`` call read: layer versions read, versions skipped as known
    clean, and ``(asset, partition, version, content_digest)`` of those read and found clean."""

    read: int = 0
    skipped: int = 0
    clean: list = field(default_factory=list)


def scan_for_tombstoned(store: LayerStore, tombstones: TombstoneSet, partitions: Optional[Iterable[str]] = None, *,
                        known_clean: Collection[tuple] = frozenset(), coverage: Optional["ScanCoverage"] = None) -> list[dict]:
    """Every tombstoned id still present in a current artifact: the tables of every layer on disk
    (registered layers by their record-id columns; anything else by the usual id column names) and
    the shard spans of layers that point at shard files. ``partitions``: only those partitions
    (snapshot keys and release names; a release's check names its own and its snapshots') — the
    same findings as filtering the whole store's, without reading every other partition.

    ``known_clean``: ``(asset, partition, version, content_digest)`` of versions an earlier scan
    against this same tombstone set found clean (deletion/clean_scans.py); they are not read.
    ``coverage``: receives what was read, skipped and found clean (to remember)."""
    findings: dict[tuple, int] = {}
    if len(tombstones) == 0:
        return []
    scope = None if partitions is None else set(partitions)
    ids = _IdSets(tombstones)
    for asset in store.assets():
        la = registry.layer(asset) if registry.is_layer(asset) else None
        for partition in store.partitions(asset):
            if scope is not None and partition not in scope:
                continue
            v = store.current(asset, partition)
            if v is None:
                continue
            ref = (asset, partition, v.version, v.content_digest)
            if ref in known_clean:
                if coverage is not None:
                    coverage.skipped += 1
                continue
            before = len(findings)  # finding keys name the version: more keys = a finding here
            _scan_version(tombstones, la, v, findings, ids)
            if la is not None and la.shard_spans:
                for path in shard_spans_files(store, v):
                    if not path.is_file():
                        continue
                    t = pq.read_table(path, columns=[c for c in ("record_id",) if c in pq.read_schema(path).names])
                    for column, value, request, rows in _scan_table(tombstones, t, None, ids):
                        rel = str(path.relative_to(store.home)) if path.is_relative_to(store.home) else str(path)
                        key = (asset, partition, v.version, rel, column, value, request)
                        findings[key] = findings.get(key, 0) + rows
            if coverage is not None:
                coverage.read += 1
                if len(findings) == before:
                    coverage.clean.append(ref)
    return [
        {"asset": a, "partition": p, "version": ver, "table": tbl, "column": c, "value": val, "request_id": r, "rows": n}
        for (a, p, ver, tbl, c, val, r), n in sorted(findings.items())
    ]
