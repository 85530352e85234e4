"""Deletion lineage: resolve a request to the record copies it covers, and keep tombstones.

``resolve`` walks the current layers — raw items, the record copies of every snapshot, exact
aliases and near duplicates, and the release layers (and shard spans) that mention them, all as the
layer registry describes them — and returns a ``Resolution``. ``write_tombstones`` appends it to
the ``tombstones`` table (ids and digests only, never text, one monotone generation per request);
``load_tombstones`` gives the ``TombstoneSet`` every later step asks. Withdrawals (record, URI,
source) remove that source's copies; a content takedown removes every copy, its exact duplicates
and, on request, its verified near duplicates in any snapshot, and every raw item that never
became a record but holds the content (``raw_match``; tombstoned by its bytes' digest in
``tombstoned_items``). Rules and why: docs/deletion.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus_assets.domain.core.reasons import Reason
from corpus_assets.domain.dedup.minhash import MinHashPolicy
from corpus_assets.domain.deletion.near_copies import near_copies, record_texts
from corpus_assets.domain.deletion.raw_match import RawMatcher
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.core.keys import InvalidKeyError, parse_snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.pack.shards_layer import shard_directory
from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, DEDUP_CLUSTERS, RAW_SNAPSHOT

__all__ = [
    "RecordCopy",
    "RawItemMatch",
    "Resolution",
    "TombstoneSet",
    "resolve",
    "write_tombstones",
    "tombstone_generation",
    "load_tombstones",
    "shard_spans_files",
]

_RECORD_COLUMNS = ["record_id", "source_id", "snapshot", "item_id", "text_sha256", "record_sha256", "dedup_key"]
_BATCH = 8192


@dataclass(frozen=True)
class RecordCopy:
    """One stored copy of a record: ids and digests only."""

    record_id: str
    snapshot: str
    source_id: str
    uri: str
    text_sha256: str
    record_sha256: str
    layers: tuple[str, ...]  # canonical_records and/or curated_records
    via: str  # record | uri | source | target | exact | near


@dataclass(frozen=True)
class RawItemMatch:
    """A raw item that holds taken-down content but is no record (quarantined, rejected, unparseable)."""

    snapshot: str
    item_index: int
    item_id: str
    uri: str
    raw_sha256: str
    match: str  # bytes | text | near (J=...)


@dataclass(frozen=True)
class Resolution:
    kind: str
    target: str
    scope: str  # record (withdrawal) | content (takedown)
    copies: tuple[RecordCopy, ...]
    record_ids: frozenset[str]
    items: tuple[tuple[str, int, str], ...]  # uri requests: (snapshot, item_index, item_id) of every matched raw item
    snapshots: tuple[str, ...]  # snapshot partitions holding something to purge
    releases: dict[str, tuple[str, ...]] = field(default_factory=dict)  # release -> assets mentioning a record
    raw_items: tuple[RawItemMatch, ...] = ()  # content takedowns: matched items that are no record

    def summary(self) -> dict:
        via: dict[str, int] = {}
        for _, v in {(c.record_id, c.via) for c in self.copies}:
            via[v] = via.get(v, 0) + 1
        return {
            "kind": self.kind,
            "scope": self.scope,
            "record_ids": len(self.record_ids),
            "copies": len(self.copies),
            "raw_items": len(self.items) + len(self.raw_items),
            "raw_items_matched": {m: n for m, n in sorted(_match_counts(self.raw_items).items())},
            "by_path": dict(sorted(via.items())),
            "snapshots": list(self.snapshots),
            "releases": {k: list(v) for k, v in sorted(self.releases.items())},
        }


def _match_counts(matches: Iterable[RawItemMatch]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in matches:
        key = m.match.split(" ", 1)[0]
        out[key] = out.get(key, 0) + 1
    return out


# --- reading the layers -----------------------------------------------------------------------


def _kind_target(request) -> tuple[str, str, bool, Optional[float]]:
    return request.kind, request.target, bool(request.near_duplicates), request.near_threshold


def _snapshot_partitions(store: LayerStore, source_id: Optional[str] = None) -> list[str]:
    parts: set[str] = set()
    for la in registry.snapshot_layers():
        parts.update(store.partitions(la.asset))
    out = []
    for p in sorted(parts):
        try:
            src, _ = parse_snapshot_key(p)
        except InvalidKeyError:
            continue
        if source_id is None or src == source_id:
            out.append(p)
    return out


def _release_record_layers() -> list[registry.Layer]:
    """Release layers whose tables (or shard spans) name records."""
    return [la for la in registry.release_layers() if la.record_tables() or la.shard_spans]


def _release_partitions(store: LayerStore) -> list[str]:
    parts: set[str] = set()
    for la in _release_record_layers():
        parts.update(store.partitions(la.asset))
    return sorted(parts)


def _filtered(version: LayerVersion, table: str, columns: list[str], column: str, values: Iterable[str]) -> Iterator[dict]:
    """Rows of ``table`` whose ``column`` is in ``values`` (streamed)."""
    wanted = pa.array(sorted(set(values)), pa.string())
    if len(wanted) == 0 or table not in version.manifest["tables"]:
        return
    for batch in version.iter_batches(table, batch_size=_BATCH, columns=columns):
        t = pa.Table.from_batches([batch])
        t = t.filter(pc.fill_null(pc.is_in(t.column(column), value_set=wanted), False))
        yield from t.to_pylist()


def _record_rows(store: LayerStore, snapshots: list[str], column: str, values: Iterable[str]) -> list[dict]:
    """Record rows (ids and digests) of every layer holding record copies (canonical, curated)
    whose ``column`` is in ``values``."""
    values = set(values)
    out = []
    for snap in snapshots:
        for la in registry.record_copy_layers():
            v = store.current(la.asset, snap)
            if v is None:
                continue
            for row in _filtered(v, la.main_table, _RECORD_COLUMNS, column, values):
                row["layer"] = la.asset
                out.append(row)
    return out


def _item_uris(store: LayerStore, snapshot: str, record_ids: set[str]) -> dict[str, str]:
    """record id -> URI of the raw item it came from (canonical decisions -> raw items)."""
    canon = store.current(CANONICAL_RECORDS, snapshot)
    raw = store.current(RAW_SNAPSHOT, snapshot)
    if canon is None or raw is None or not record_ids:
        return {}
    index_of = {r["item_index"]: r["record_id"] for r in _filtered(canon, "decisions", ["item_index", "record_id"], "record_id", record_ids)}
    out: dict[str, str] = {}
    for batch in raw.iter_batches("items", batch_size=_BATCH, columns=["item_index", "uri"]):
        for idx, uri in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            rid = index_of.get(idx)
            if rid is not None:
                out[rid] = uri or ""
    return out


def _items_with_uri(store: LayerStore, snapshots: list[str], uri: str) -> tuple[list[tuple[str, int, str]], set[str]]:
    """(snapshot, item_index, item_id) of raw items captured from ``uri``, and their record ids."""
    items: list[tuple[str, int, str]] = []
    ids: set[str] = set()
    for snap in snapshots:
        raw = store.current(RAW_SNAPSHOT, snap)
        if raw is None:
            continue
        found = {r["item_index"]: r["item_id"] for r in _filtered(raw, "items", ["item_index", "item_id", "uri"], "uri", [uri])}
        items.extend((snap, i, found[i]) for i in sorted(found))
        canon = store.current(CANONICAL_RECORDS, snap)
        if canon is None or not found:
            continue
        for batch in canon.iter_batches("decisions", batch_size=_BATCH, columns=["item_index", "record_id"]):
            for idx, rid in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                if idx in found and rid:
                    ids.add(rid)
    return items, ids


# --- content closure --------------------------------------------------------------------------


def _alias_groups(store: LayerStore) -> dict[str, set[str]]:
    """record id -> the other members of its exact group, over every current dedup version."""
    groups: dict[str, set[str]] = {}
    for release in store.partitions(DEDUP_CLUSTERS):
        v = store.current(DEDUP_CLUSTERS, release)
        if v is None or "aliases" not in v.manifest["tables"]:
            continue
        members: dict[str, set[str]] = {}
        for batch in v.iter_batches("aliases", batch_size=_BATCH, columns=["representative_id", "record_id"]):
            for rep, rid in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                members.setdefault(rep, set()).add(rid)
        for group in members.values():
            if len(group) > 1:
                for rid in group:
                    groups.setdefault(rid, set()).update(group - {rid})
    return groups


def _near_neighbours(store: LayerStore, threshold: float) -> dict[str, set[str]]:
    """Adjacency of verified near pairs with Jaccard >= threshold, over every current dedup version."""
    adj: dict[str, set[str]] = {}

    def add(a: str, b: str) -> None:
        if a and b and a != b:
            adj.setdefault(a, set()).add(b)
            adj.setdefault(b, set()).add(a)

    for release in store.partitions(DEDUP_CLUSTERS):
        v = store.current(DEDUP_CLUSTERS, release)
        if v is None:
            continue
        if "edges" in v.manifest["tables"]:
            for batch in v.iter_batches("edges", batch_size=_BATCH):
                t = pa.Table.from_batches([batch])
                t = t.filter(pc.greater_equal(t.column("jaccard"), threshold))
                for a, b in zip(t.column("record_id").to_pylist(), t.column("neighbour_id").to_pylist()):
                    add(a, b)
        if "clusters" in v.manifest["tables"]:
            cols = ["record_id", "representative_id", "kind", "jaccard"]
            for batch in v.iter_batches("clusters", batch_size=_BATCH, columns=cols):
                t = pa.Table.from_batches([batch])
                t = t.filter(pc.and_(pc.equal(t.column("kind"), "near"), pc.greater_equal(t.column("jaccard"), threshold)))
                for a, b in zip(t.column("record_id").to_pylist(), t.column("representative_id").to_pylist()):
                    add(a, b)
    return adj


def _content_closure(
    store: LayerStore, snapshots: list[str], digest: str, near: bool, threshold: Optional[float],
    policy: MinHashPolicy,
) -> dict[str, str]:
    """record id -> how it was reached (target | exact | near). Near copies come from the dedup
    edges of current releases and from the stored signatures of every snapshot (``near_copies``),
    each verified by real Jaccard."""
    via = {r["record_id"]: "target" for r in _record_rows(store, snapshots, "text_sha256", [digest])}
    if not via:
        return via
    aliases = _alias_groups(store)
    near = near and threshold is not None
    neighbours = _near_neighbours(store, threshold) if near else {}
    frontier = set(via)
    while frontier:
        keys = {r["dedup_key"] for r in _record_rows(store, snapshots, "record_id", frontier) if r["dedup_key"]}
        exact = {r["record_id"] for r in _record_rows(store, snapshots, "dedup_key", keys)}
        for rid in frontier:
            exact |= aliases.get(rid, set())
        nearby: set[str] = set()
        for rid in frontier:
            nearby |= neighbours.get(rid, set())
        if near:
            nearby |= set(near_copies(store, snapshots, frontier, threshold, policy))
        frontier = set()
        for rid in sorted(exact):
            if rid not in via:
                via[rid] = "exact"
                frontier.add(rid)
        for rid in sorted(nearby):
            if rid not in via:
                via[rid] = "near"
                frontier.add(rid)
    return via


# --- raw items that are no record -------------------------------------------------------------

_RAW_COLUMNS = ["item_index", "item_id", "uri", "status", "content_type", "raw_sha256", "content"]


def _record_items(store: LayerStore, snapshot: str) -> set[int]:
    """Item indexes of the snapshot that became a record (or were refused as deleted): their
    content is matched through the record path."""
    canon = store.current(CANONICAL_RECORDS, snapshot)
    if canon is None:
        return set()
    out: set[int] = set()
    for b in canon.iter_batches("decisions", batch_size=_BATCH, columns=["item_index", "outcome"]):
        out.update(i for i, o in zip(b.column(0).to_pylist(), b.column(1).to_pylist()) if o in ("accepted", "deleted"))
    return out


def _raw_item_matches(store: LayerStore, snapshots: list[str], matcher: RawMatcher) -> tuple[RawItemMatch, ...]:
    """Every raw item of ``snapshots`` that is no record (set aside at canonicalization, or never
    canonicalized) and holds the takedown's content."""
    out = []
    for snap in snapshots:
        raw = store.current(RAW_SNAPSHOT, snap)
        if raw is None:
            continue
        records = _record_items(store, snap)
        for b in raw.iter_batches("items", batch_size=256, columns=_RAW_COLUMNS):
            cols = [b.column(i).to_pylist() for i in range(len(_RAW_COLUMNS))]
            for idx, item_id, uri, status, ctype, digest, content in zip(*cols):
                if idx in records or content is None or status == Reason.DELETION_TOMBSTONED.value:
                    continue
                how = matcher.match(content, digest, ctype)
                if how is not None:
                    out.append(RawItemMatch(snap, idx, item_id or "", uri or "", digest or "", how))
    return tuple(out)


def _references(store: LayerStore, snapshots: list[str], ids: Iterable[str]) -> list[tuple[str, str]]:
    """(text, domain) of the taken-down records, one per distinct text."""
    seen: dict[str, tuple[str, str]] = {}
    for text, domain in record_texts(store, snapshots, set(ids)).values():
        seen.setdefault(text, (text, domain))
    return [seen[t] for t in sorted(seen)]


# --- releases ---------------------------------------------------------------------------------


def shard_spans_files(store: LayerStore, shards_version: LayerVersion) -> list[Path]:
    """The ``.spans.parquet`` files of every shard a ``packed_shards`` version lists (local paths;
    shard sets only in the object store are fetched first)."""
    out = []
    for batch in shards_version.iter_batches("shards", columns=["directory", "meta_json"]):
        for directory, meta_json in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            spans = json.loads(meta_json).get("files", {}).get("spans")
            if spans:
                out.append(shard_directory(store, directory) / spans["path"])
    return out


def _mentions(ids: pa.Array, prefix: Optional[str], column: pa.ChunkedArray) -> bool:
    if len(ids) and pc.any(pc.is_in(column, value_set=ids)).as_py():
        return True
    if prefix is not None:
        return bool(pc.any(pc.starts_with(pc.fill_null(column, ""), prefix)).as_py())
    return False


def _version_mentions(version: LayerVersion, table: str, ids: pa.Array, prefix: Optional[str]) -> bool:
    if table not in version.manifest["tables"] or "record_id" not in pq.read_schema(version.table_files(table)[0]).names:
        return False
    for batch in version.iter_batches(table, batch_size=_BATCH, columns=["record_id"]):
        if _mentions(ids, prefix, pa.chunked_array([batch.column(0)])):
            return True
    return False


def _releases_mentioning(store: LayerStore, record_ids: Iterable[str], prefix: Optional[str]) -> dict[str, tuple[str, ...]]:
    ids = pa.array(sorted(set(record_ids)), pa.string())
    if len(ids) == 0 and prefix is None:
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for release in _release_partitions(store):
        hit = []
        for la in _release_record_layers():
            v = store.current(la.asset, release)
            if v is None:
                continue
            if any(_version_mentions(v, t, ids, prefix) for t in la.record_tables()):
                hit.append(la.asset)
            elif la.shard_spans:
                files = shard_spans_files(store, v)
                if any(p.is_file() and _mentions(ids, prefix, pq.read_table(p, columns=["record_id"]).column(0)) for p in files):
                    hit.append(la.asset)
        if hit:
            out[release] = tuple(hit)
    return out


# --- resolve ----------------------------------------------------------------------------------


def resolve(store: LayerStore, request, *, near_policy: Optional[MinHashPolicy] = None) -> Resolution:
    """The record copies a request covers, across every current snapshot partition, and the
    releases that mention them. ``request``: a ``deletion.DeletionRequest`` or ``FiledRequest``.
    ``near_policy``: the MinHash policy near copies are compared with (the project's dedup.yaml;
    its shingles decide the real Jaccard), default ``MinHashPolicy()``."""
    kind, target, near, threshold = _kind_target(request)
    policy = near_policy or MinHashPolicy()
    items: list[tuple[str, int, str]] = []
    raw_items: tuple[RawItemMatch, ...] = ()
    prefix: Optional[str] = None
    if kind == "record":
        snapshots = _snapshot_partitions(store, target.split(":", 1)[0])
        via = {r["record_id"]: "record" for r in _record_rows(store, snapshots, "record_id", [target])}
    elif kind == "uri":
        snapshots = _snapshot_partitions(store)
        items, ids = _items_with_uri(store, snapshots, target)
        via = {rid: "uri" for rid in ids}
    elif kind == "source":
        snapshots = _snapshot_partitions(store, target)
        prefix = target + ":"
        via = {}
        for snap in snapshots:
            for la in registry.record_copy_layers():
                v = store.current(la.asset, snap)
                if v is not None:
                    for b in v.iter_batches(la.main_table, batch_size=_BATCH, columns=["record_id"]):
                        via.update({rid: "source" for rid in b.column(0).to_pylist()})
    elif kind == "content":
        snapshots = _snapshot_partitions(store)
        via = _content_closure(store, snapshots, target, near, threshold, policy)
        refs = _references(store, snapshots, via) if near and threshold is not None else []
        matcher = RawMatcher(target, threshold if near else None, refs, policy)
        raw_items = _raw_item_matches(store, snapshots, matcher)
    else:
        raise ValueError(f"kind: unknown request kind {kind!r}")

    copies = _copies(store, snapshots, via)
    touched = {c.snapshot for c in copies} | {s for s, _, _ in items} | {m.snapshot for m in raw_items}
    if kind == "source":
        touched |= set(snapshots)
    return Resolution(
        kind=kind,
        target=target,
        scope="content" if kind == "content" else "record",
        copies=copies,
        record_ids=frozenset(via),
        items=tuple(items),
        snapshots=tuple(sorted(touched)),
        releases=_releases_mentioning(store, via, prefix),
        raw_items=raw_items,
    )


def _copies(store: LayerStore, snapshots: list[str], via: dict[str, str]) -> tuple[RecordCopy, ...]:
    rows = _record_rows(store, snapshots, "record_id", via)
    by_key: dict[tuple[str, str, str], dict] = {}
    for r in rows:
        key = (r["record_id"], r["snapshot"], r["text_sha256"] or "")
        entry = by_key.setdefault(key, {**r, "layers": set()})
        entry["layers"].add(r["layer"])
    uris: dict[tuple[str, str], str] = {}
    for snap in sorted({k[1] for k in by_key}):
        for rid, uri in _item_uris(store, snap, {k[0] for k in by_key if k[1] == snap}).items():
            uris[(rid, snap)] = uri
    return tuple(
        RecordCopy(
            record_id=rid,
            snapshot=snap,
            source_id=e["source_id"] or "",
            uri=uris.get((rid, snap), ""),
            text_sha256=digest,
            record_sha256=e["record_sha256"] or "",
            layers=tuple(sorted(e["layers"])),
            via=via[rid],
        )
        for (rid, snap, digest), e in sorted(by_key.items())
    )


# --- tombstone table --------------------------------------------------------------------------

_TS_COLUMNS = ["request_id", "generation", "scope", "record_id", "snapshot", "source_id", "uri",
               "text_sha256", "record_sha256", "created_at"]


def _request_row(resolution: Resolution) -> dict:
    row = {"record_id": "", "snapshot": "", "source_id": "", "uri": "", "text_sha256": "", "record_sha256": ""}
    if resolution.kind == "record":
        row.update(record_id=resolution.target, source_id=resolution.target.split(":", 1)[0])
    elif resolution.kind == "uri":
        row["uri"] = resolution.target
    elif resolution.kind == "source":
        row["source_id"] = resolution.target
    else:
        row["text_sha256"] = resolution.target
    return row


def _rows_of(resolution: Resolution) -> list[dict]:
    rows = {}
    for c in resolution.copies:
        row = {"record_id": c.record_id, "snapshot": c.snapshot, "source_id": c.source_id, "uri": c.uri,
               "text_sha256": c.text_sha256, "record_sha256": c.record_sha256}
        rows[(c.record_id, c.snapshot, c.text_sha256)] = row
    req = _request_row(resolution)
    rows[(req["record_id"], req["snapshot"], req["text_sha256"])] = req
    return [rows[k] for k in sorted(rows)]


def tombstone_generation(catalog: Catalog) -> int:
    """The highest tombstone generation written (0 when there is none)."""
    with catalog.transaction() as conn:
        return int(conn.execute("SELECT coalesce(max(generation), 0) FROM tombstones").fetchone()[0])


def write_tombstones(catalog: Catalog, request_id: str, resolution: Resolution, *, now: Optional[datetime] = None) -> int:
    """Append the tombstones of a resolved request; returns its generation (idempotent per request)."""
    now = now or datetime.now(timezone.utc)
    with catalog.transaction() as conn:
        req = conn.execute("SELECT kind, target FROM deletion_requests WHERE request_id = ?", [request_id]).fetchone()
        if req is None:
            raise KeyError(f"request_id: no deletion request {request_id!r}; file it first")
        if tuple(req) != (resolution.kind, resolution.target):
            raise ValueError(f"resolution: resolves {resolution.kind} {resolution.target!r}, not request {request_id!r}")
        existing = conn.execute("SELECT max(generation) FROM tombstones WHERE request_id = ?", [request_id]).fetchone()[0]
        if existing is not None:
            return int(existing)
        generation = int(conn.execute("SELECT coalesce(max(generation), 0) FROM tombstones").fetchone()[0]) + 1
        conn.executemany(
            "INSERT INTO tombstones VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (request_id, generation, resolution.scope, r["record_id"], r["snapshot"], r["source_id"], r["uri"],
                 r["text_sha256"], r["record_sha256"], now)
                for r in _rows_of(resolution)
            ],
        )
        matched = [(request_id, generation, m.snapshot, m.item_index, m.item_id, m.uri, m.raw_sha256, m.match, now)
                   for m in resolution.raw_items if m.raw_sha256]
        if matched:
            conn.executemany("INSERT INTO tombstoned_items VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING", matched)
        s = resolution.summary()
        detail = f"generation {generation}: {s['record_ids']} record id(s), {s['copies']} copies, {len(s['releases'])} release(s)"
        conn.execute(
            "UPDATE deletion_requests SET generation = ?, status = CASE WHEN status = 'received' THEN 'resolved' ELSE status END, "
            "status_detail = CASE WHEN status = 'received' THEN ? ELSE status_detail END, updated_at = ? WHERE request_id = ?",
            [generation, detail, now, request_id],
        )
    return generation


@dataclass
class TombstoneSet:
    """Fast membership over every tombstone written (see docs/deletion.md for what counts)."""

    generation: int = 0
    record_ids: dict[str, str] = field(default_factory=dict)
    uris: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    raw_digests: dict[str, str] = field(default_factory=dict)  # sha256 of raw items' bytes
    request_ids: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.record_ids) + len(self.uris) + len(self.sources) + len(self.digests) + len(self.raw_digests)

    def is_tombstoned(
        self,
        *,
        record_id: Optional[str] = None,
        text_sha256: Optional[str] = None,
        uri: Optional[str] = None,
        source_id: Optional[str] = None,
        raw_sha256: Optional[str] = None,
    ) -> Optional[str]:
        """The request id that tombstoned any of the given ids, else None."""
        if record_id:
            hit = self.record_ids.get(record_id)
            if hit is None and self.sources and ":" in record_id:
                hit = self.sources.get(record_id.split(":", 1)[0])
            if hit is not None:
                return hit
        if uri and uri in self.uris:
            return self.uris[uri]
        if source_id and source_id in self.sources:
            return self.sources[source_id]
        if text_sha256 and text_sha256 in self.digests:
            return self.digests[text_sha256]
        if raw_sha256 and raw_sha256 in self.raw_digests:
            return self.raw_digests[raw_sha256]
        return None


def load_tombstones(catalog: Catalog, request_ids: Optional[Iterable[str]] = None) -> TombstoneSet:
    """Every tombstone written, or only those of ``request_ids``."""
    ts = TombstoneSet()
    where, params = "", []
    if request_ids is not None:
        wanted = sorted(set(request_ids))
        if not wanted:
            return ts
        where, params = f" WHERE request_id IN ({', '.join('?' for _ in wanted)})", wanted
    with catalog.transaction() as conn:
        rows = conn.execute(
            "SELECT request_id, generation, scope, record_id, source_id, uri, text_sha256 FROM tombstones" + where
            + " ORDER BY generation, request_id, record_id, snapshot, text_sha256", params
        ).fetchall()
        items = conn.execute(
            "SELECT request_id, generation, raw_sha256 FROM tombstoned_items" + where
            + " ORDER BY generation, request_id, snapshot, item_index", params
        ).fetchall()
    requests: dict[str, None] = {}
    for request_id, generation, scope, record_id, source_id, uri, digest in rows:
        requests.setdefault(request_id, None)
        ts.generation = max(ts.generation, int(generation))
        if record_id:
            ts.record_ids.setdefault(record_id, request_id)
        elif scope == "record" and uri:
            ts.uris.setdefault(uri, request_id)
        elif scope == "record" and source_id and not digest:
            ts.sources.setdefault(source_id, request_id)
        if scope == "content" and digest:
            ts.digests.setdefault(digest, request_id)
    for request_id, generation, raw_sha256 in items:
        requests.setdefault(request_id, None)
        ts.generation = max(ts.generation, int(generation))
        ts.raw_digests.setdefault(raw_sha256, request_id)
    ts.request_ids = tuple(requests)
    return ts
