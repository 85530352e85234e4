"""The layer registry: every layer the pipeline stores, in the order data flows, and what the rest
of the code must know about it.

For each layer: its asset name, how it is partitioned, its tables (schema, privacy, which columns
name record ids, how a purge treats their rows, what report models may read), how it takes part in
a release's build id, and what a deletion does to it. Deletion (tombstones, purge, the scans),
release inputs, the jobs and the report models iterate this registry instead of keeping lists of
their own, so a new layer is either described here or fails ``tests/unit/test_layer_registry.py``
— it cannot be skipped by deletion or left out of the build id silently.

Row-level schemas live with the code that builds the rows (``RAW_SCHEMA``, ``RECORDS_SCHEMA``,
``MIXTURE_PLAN_SCHEMA``, ``TOKEN_VIEWS_SCHEMA``); the layer-level table schemas are here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Iterator, Mapping, Optional

import pyarrow as pa

from corpus_assets.domain.canonical.records import RECORDS_SCHEMA
from corpus_assets.domain.ingest.raw_items import RAW_SCHEMA
from corpus_assets.domain.layers.decisions import DECISIONS_SCHEMA, DECISIONS_TABLE
from corpus_assets.domain.pack.mixture import MIXTURE_PLAN_SCHEMA
from corpus_assets.domain.storage.layer_store import PLAIN, UNPARTITIONED, TableSpec, plain_fields
from corpus_assets.domain.tokens.token_views import TOKEN_VIEWS_SCHEMA

# --- asset names: the one definition of each ------------------------------------------------------

RAW_SNAPSHOT = "raw_snapshot"
CANONICAL_RECORDS = "canonical_records"
EVAL_REGISTRY = "eval_registry"
CURATED_RECORDS = "curated_records"
MINHASH_SIGNATURES = "minhash_signatures"
DEDUP_CLUSTERS = "dedup_clusters"
SPLITS = "splits"
TOKENIZER = "tokenizer"
TOKEN_VIEWS = "token_views"
MIXTURE_PLAN = "mixture_plan"
PACKED_SHARDS = "packed_shards"
RELEASE_MANIFEST = "release_manifest"
RELEASE_INPUTS = "release_inputs"  # observed, never stored: see OBSERVED_ASSETS

# Columns that hold record ids wherever they occur (the default for tables whose schema is not
# known here: report model results, layers on disk that no longer exist in the code).
RECORD_ID_COLUMNS = ("record_id", "representative_id", "neighbour_id")
# Columns holding other deletion targets (content digests, URIs, source ids).
TARGET_COLUMNS = ("text_sha256", "uri", "source_id", "raw_sha256")


class Partitioning(str, Enum):
    SNAPSHOTS = "snapshots"  # one partition per captured source snapshot
    RELEASES = "releases"  # one partition per release spec
    NONE = "none"  # one unpartitioned version (partition key ``_all``)


class Purge(str, Enum):
    """What a purge does to the rows of a table that name a deleted record or raw item."""

    DROP = "drop"  # the rows go
    MARK = "mark"  # decision rows stay as content-free markers (outcome ``deleted``): accounting stays exact
    STUB = "stub"  # raw item rows stay as content-free stubs (status ``deletion.tombstoned``)
    NONE = "none"  # the table names no records


class BuildId(str, Enum):
    """How a layer's current version enters the build id of a release that reads it."""

    CONTENT = "content"  # its content digest, from the opened version
    MANIFEST = "manifest"  # its content digest, from the manifest only (its data is never downloaded)
    NO = "no"  # not an input of a build (the published release itself, the report models)


class OnDeletion(str, Enum):
    """What deletion propagation does to the layer."""

    REWRITE = "rewrite"  # its partitions are purged in place (new versions without the records, old ones dropped)
    REBUILD = "rebuild"  # a release reading it is rebuilt from purged inputs and the old build revoked
    REVOKE = "revoke"  # published builds are revoked and their shards withdrawn
    NONE = "none"  # holds no training records


@dataclass(frozen=True)
class Table:
    schema: Optional[pa.Schema]  # None: not known statically (report model results)
    private: bool = False  # owner-only on disk; never readable by report models
    record_ids: tuple[str, ...] = ()  # columns naming record ids
    purge: Purge = Purge.DROP
    readable: bool = True  # by report models (``ref('layer', 'table')``), unless private
    columns: Optional[tuple[str, ...]] = None  # the only columns report models see (None: every scalar column)
    count_by: tuple[str, ...] = ()  # columns whose value combinations the version's manifest counts
    rows_per_group: Optional[int] = None  # None: the store's

    def spec(self) -> TableSpec:
        if self.schema is None:
            raise ValueError("this table's schema is only known when it is written")
        return TableSpec(self.schema, private=self.private, count_by=self.count_by, rows_per_group=self.rows_per_group)

    @property
    def item_indexed(self) -> bool:
        """Rows name raw items by ``item_index`` (a purge drops or marks them by item too)."""
        return self.schema is not None and "item_index" in self.schema.names


@dataclass(frozen=True)
class Layer:
    asset: str
    partitioning: Partitioning
    group: str  # the Dagster asset group (the UI's layer)
    tables: Mapping[str, Table]
    main_table: Optional[str]  # what ``ref('layer')`` reads
    build_id: BuildId
    on_deletion: OnDeletion
    upstream_key: Optional[str] = None  # build-spec key naming the upstream version (a purge points it at the purged one)
    manifest_counts: Mapping[str, tuple[str, Optional[str]]] = field(default_factory=dict)
    # ^ manifest key -> (table, column): value counts of the column (None: the table's row count), recomputed by a purge
    shard_spans: bool = False  # its rows point at shard files whose provenance spans name record ids
    refable: bool = True  # report models may ref it

    @property
    def partition_column(self) -> Optional[str]:
        """The column under which report models see the partition key."""
        return {Partitioning.SNAPSHOTS: "snapshot", Partitioning.RELEASES: "release"}.get(self.partitioning)

    def table_specs(self) -> dict[str, TableSpec]:
        return {name: t.spec() for name, t in self.tables.items()}

    def record_tables(self) -> dict[str, Table]:
        """Tables whose rows name records (or raw items)."""
        return {name: t for name, t in self.tables.items() if t.record_ids or t.item_indexed}


# --- layer-level table schemas ----------------------------------------------------------------------

CANONICAL_QUARANTINE_SCHEMA = pa.schema(
    [
        ("item_index", pa.int64()),
        ("item_id", pa.string()),
        ("uri", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("raw_sha256", pa.string()),
    ]
)
REFERENCES_SCHEMA = pa.schema([("record_id", pa.string()), ("reference_json", pa.string())])
EVAL_ITEMS_SCHEMA = pa.schema(
    [("benchmark", pa.string()), ("item_id", pa.string()), ("field", pa.string()), ("text", pa.large_string())]
)
PII_AUDIT_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("field", pa.string()),
        ("pii_type", pa.string()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("detector_version", pa.string()),
    ]
)
CONTAMINATION_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("source_id", pa.string()),
        ("benchmark", pa.string()),
        ("item_id", pa.string()),
        ("field", pa.string()),
        ("containment", pa.float64()),
        ("matched_ngrams", pa.int64()),
        ("item_ngrams", pa.int64()),
        ("rule", pa.string()),  # containment | long_ngram (domain/curate/decontam/config.py)
        ("action", pa.string()),  # remove | mask, or none when another stage rejected the record first
        ("decided_by", pa.string()),  # the stage whose decision stands: decontam, or e.g. quality
    ]
)
CURATED_QUARANTINE_SCHEMA = pa.schema(
    [("record_id", pa.string()), ("reason", pa.string()), ("detail", pa.string()), ("record_json", pa.large_string())]
)
SIGNATURES_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("source_id", pa.string()),
        ("snapshot", pa.string()),
        ("domain", pa.string()),
        ("dedup_key", pa.string()),
        ("signature", pa.binary()),
    ]
)
CLUSTERS_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("source_id", pa.string()),
        ("snapshot", pa.string()),
        ("representative_id", pa.string()),
        ("kind", pa.string()),  # representative | exact | near
        ("jaccard", pa.float64()),
        ("group_id", pa.string()),
    ]
)
ALIASES_SCHEMA = pa.schema(
    [
        ("dedup_key", pa.string()),
        ("representative_id", pa.string()),
        ("record_id", pa.string()),
        ("source_id", pa.string()),
        ("is_representative", pa.bool_()),
    ]
)
EDGES_SCHEMA = pa.schema([("record_id", pa.string()), ("neighbour_id", pa.string()), ("jaccard", pa.float64())])
VERDICTS_SCHEMA = pa.schema([("a0", pa.uint64()), ("a1", pa.uint64()), ("b0", pa.uint64()), ("b1", pa.uint64()),
                             ("jaccard", pa.float64())])
SUPERSEDED_SCHEMA = pa.schema([("record_id", pa.string()), ("snapshot", pa.string()), ("superseded_by", pa.string())])
# One row per exact representative: its LSH band keys (``bands`` little-endian uint64), the next
# build's cache (``dedup/band_key_cache.py``)
BAND_KEYS_SCHEMA = pa.schema([("snapshot", pa.string()), ("record_id", pa.string()),
                              pa.field("keys", pa.binary(), metadata=PLAIN)])
ASSIGNMENTS_SCHEMA = pa.schema(
    [
        ("record_id", pa.string()),
        ("source_id", pa.string()),
        ("snapshot", pa.string()),
        ("kept", pa.bool_()),  # representative after dedup (what training uses)
        ("group_key", pa.string()),
        ("u", pa.float64()),
        ("split", pa.string()),  # null when quarantined by a split conflict
    ]
)
TOKENIZER_SCHEMA = pa.schema([("digest", pa.string()), ("tokenizer_json", pa.large_string())])
VIEW_IDENTITY_COLUMNS = [
    ("record_id", pa.string()),
    ("variant", pa.string()),
    ("split", pa.string()),
    ("source_id", pa.string()),
    ("snapshot", pa.string()),
    ("domain", pa.string()),  # prose | code: the "tag" a mixture can weight by
    ("cache_key", pa.string()),
]
VIEW_TOKEN_COLUMNS = ["n_tokens", "label_tokens", "input_ids", "loss_mask", "offsets", "segments_json"]
VIEWS_SCHEMA = pa.schema(
    VIEW_IDENTITY_COLUMNS
    + [("n_tokens", pa.int32()), ("label_tokens", pa.int32())]
    + [TOKEN_VIEWS_SCHEMA.field(n) for n in ("input_ids", "loss_mask", "offsets", "segments_json")]
)
# One row per source (or tag) of the plan: the report fields that SQL reports read (the ``plan``
# table holds the draws themselves). importance_weight / target_weight are null without
# ``target_weights``; shares are in [0, 1], effective epochs in the declared unit.
MIXTURE_SOURCES_SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("key", pa.string()),  # source | tag
        ("unit", pa.string()),  # documents | tokens
        ("target_share", pa.float64()),
        ("quota", pa.int64()),
        ("draws", pa.int64()),
        ("tokens", pa.int64()),
        ("document_share", pa.float64()),
        ("token_share", pa.float64()),
        ("available_records", pa.int64()),
        ("available_tokens", pa.int64()),
        ("unique_records", pa.int64()),
        ("effective_epochs", pa.float64()),
        ("epoch_limit", pa.float64()),
        ("max_repeat", pa.int64()),
        ("target_weight", pa.float64()),
        ("importance_weight", pa.float64()),
    ]
)
SHARDS_SCHEMA = pa.schema(
    [
        ("split", pa.string()),
        ("name", pa.string()),
        ("directory", pa.string()),  # relative to $CORPUS_HOME
        ("blocks", pa.int64()),
        ("tokens", pa.int64()),
        ("content_tokens", pa.int64()),
        ("loss_tokens", pa.int64()),
        ("bin_sha256", pa.string()),
        ("meta_json", pa.string()),  # the shard's complete metadata (shards.write_shards)
    ]
)

# the token views of the samples that reach the last shard of each split: what the next build of
# the release packs again (pack/view_tail.py); not for reports, dropped with a deleted record. The
# token columns are each view's values as little-endian bytes (int32 ids, uint8 mask, int32 offset
# pairs): every build writes the table and the next reads it, and list columns cost about twice as
# much both ways.
TAILS_SCHEMA = pa.schema(
    [("split", pa.string()), ("record_id", pa.string()), ("variant", pa.string()), ("cache_key", pa.string()),
     ("n_tokens", pa.int32())]
    + [pa.field(n, pa.large_binary(), metadata=PLAIN) for n in ("input_ids_le", "loss_mask_u8", "offsets_le")]
)

_ID = ("record_id",)
# the decision record every deciding stage writes: one row per unit of its input (layers/decisions.py)
DECISION_COUNT_COLUMNS = ("stage", "outcome", "reason")  # what release manifests total per layer
_DECISIONS = Table(DECISIONS_SCHEMA, record_ids=_ID, count_by=DECISION_COUNT_COLUMNS)

# A release layer's narrow per-record tables (a few short columns per record) are rewritten for the
# whole release by every build, increments included, and read whole (band keys: nearly whole), so
# they are written in row groups of this many rows instead of the store's 2048 (sized for token
# views), with their unique id columns outside the dictionary: a 34k-row decisions table writes in
# 8-11 ms instead of 19-23 ms and is 1.4-3.9x smaller (docs/storage.md#layer-store).
# Token views keep the store's layout: their segment key names it (``token_views_layer.segment_key``).
NARROW_ROWS_PER_GROUP = 65536
_RELEASE_DECISIONS = replace(_DECISIONS, schema=plain_fields(DECISIONS_SCHEMA, "record_id", "item_id", "detail"),
                             rows_per_group=NARROW_ROWS_PER_GROUP)


def _narrow(schema: pa.Schema, *, plain: tuple[str, ...] = ("record_id",), **kw) -> Table:
    """A release layer's narrow per-record table (``NARROW_ROWS_PER_GROUP``), its ``plain``
    columns marked ``PLAIN``."""
    return Table(plain_fields(schema, *plain), rows_per_group=NARROW_ROWS_PER_GROUP, **kw)

# --- the registry ------------------------------------------------------------------------------------

LAYERS: tuple[Layer, ...] = (
    Layer(
        RAW_SNAPSHOT, Partitioning.SNAPSHOTS, "ingestion",
        {"items": Table(RAW_SCHEMA, private=True, purge=Purge.STUB)},
        main_table="items", build_id=BuildId.MANIFEST, on_deletion=OnDeletion.REWRITE,
        manifest_counts={"status_counts": ("items", "status")},
    ),
    Layer(
        CANONICAL_RECORDS, Partitioning.SNAPSHOTS, "ingestion",
        {
            "records": Table(RECORDS_SCHEMA, record_ids=_ID),
            DECISIONS_TABLE: Table(DECISIONS_SCHEMA, record_ids=_ID, purge=Purge.MARK, count_by=DECISION_COUNT_COLUMNS),
            "quarantine": Table(CANONICAL_QUARANTINE_SCHEMA, private=True),
            "references": Table(REFERENCES_SCHEMA, private=True, record_ids=_ID),
        },
        main_table="records", build_id=BuildId.CONTENT, on_deletion=OnDeletion.REWRITE, upstream_key="raw_version",
        manifest_counts={"outcomes": ("decisions", "outcome")},
    ),
    Layer(
        EVAL_REGISTRY, Partitioning.NONE, "curation",
        # owner-only: evaluation answers must not drift into anything a crawler or a report could read
        {"items": Table(EVAL_ITEMS_SCHEMA, private=True, purge=Purge.NONE)},
        main_table="items", build_id=BuildId.CONTENT, on_deletion=OnDeletion.NONE, refable=False,
    ),
    Layer(
        CURATED_RECORDS, Partitioning.SNAPSHOTS, "curation",
        {
            "records": Table(RECORDS_SCHEMA, record_ids=_ID),
            DECISIONS_TABLE: _DECISIONS,
            "pii_audit": Table(PII_AUDIT_SCHEMA, record_ids=_ID),
            "contamination": Table(CONTAMINATION_SCHEMA, record_ids=_ID),
            "quarantine": Table(CURATED_QUARANTINE_SCHEMA, private=True, record_ids=_ID),
        },
        main_table="records", build_id=BuildId.CONTENT, on_deletion=OnDeletion.REWRITE, upstream_key="canonical_version",
        # the curated layer has one decision per canonical record: records_in is their count
        manifest_counts={"outcomes": ("decisions", "outcome"), "records_in": ("decisions", None)},
    ),
    Layer(
        MINHASH_SIGNATURES, Partitioning.SNAPSHOTS, "dedup",
        {"signatures": Table(SIGNATURES_SCHEMA, record_ids=_ID)},
        main_table="signatures", build_id=BuildId.MANIFEST, on_deletion=OnDeletion.REWRITE,
        upstream_key="curated_version", refable=False,
    ),
    Layer(
        DEDUP_CLUSTERS, Partitioning.RELEASES, "dedup",
        {
            "clusters": _narrow(CLUSTERS_SCHEMA, record_ids=("record_id", "representative_id")),
            "aliases": _narrow(ALIASES_SCHEMA, record_ids=("representative_id", "record_id")),
            "edges": _narrow(EDGES_SCHEMA, record_ids=("record_id", "neighbour_id")),
            "superseded": _narrow(SUPERSEDED_SCHEMA, record_ids=_ID, readable=False),
            # candidate pairs' Jaccard by content key (dedup_key prefixes): the next build's memo
            "pair_verdicts": Table(VERDICTS_SCHEMA, purge=Purge.NONE, readable=False),
            # band keys of the exact representatives: the next build keys only what it has not seen
            "band_keys": _narrow(BAND_KEYS_SCHEMA, record_ids=_ID, readable=False),
            DECISIONS_TABLE: _RELEASE_DECISIONS,
        },
        main_table="clusters", build_id=BuildId.CONTENT, on_deletion=OnDeletion.REBUILD,
    ),
    Layer(
        SPLITS, Partitioning.RELEASES, "splits_tokens",
        {"assignments": _narrow(ASSIGNMENTS_SCHEMA, record_ids=_ID, plain=("record_id", "group_key")),
         DECISIONS_TABLE: _RELEASE_DECISIONS},
        main_table="assignments", build_id=BuildId.CONTENT, on_deletion=OnDeletion.REBUILD,
    ),
    Layer(
        TOKENIZER, Partitioning.RELEASES, "splits_tokens",
        {"tokenizer": Table(TOKENIZER_SCHEMA, purge=Purge.NONE)},
        main_table="tokenizer", build_id=BuildId.CONTENT, on_deletion=OnDeletion.REBUILD, refable=False,
    ),
    Layer(
        TOKEN_VIEWS, Partitioning.RELEASES, "splits_tokens",
        # the views are also the cache other releases take tokens from: purged in place, then rebuilt
        {
            "views": Table(VIEWS_SCHEMA, record_ids=_ID,
                           columns=tuple(n for n, _ in VIEW_IDENTITY_COLUMNS) + ("n_tokens", "label_tokens")),
            DECISIONS_TABLE: _DECISIONS,
        },
        main_table="views", build_id=BuildId.CONTENT, on_deletion=OnDeletion.REWRITE,
    ),
    Layer(
        MIXTURE_PLAN, Partitioning.RELEASES, "mixtures_packing",
        {"plan": _narrow(MIXTURE_PLAN_SCHEMA, record_ids=_ID),
         "sources": Table(MIXTURE_SOURCES_SCHEMA, purge=Purge.NONE),
         DECISIONS_TABLE: _RELEASE_DECISIONS},
        main_table="plan", build_id=BuildId.CONTENT, on_deletion=OnDeletion.REBUILD,
    ),
    Layer(
        PACKED_SHARDS, Partitioning.RELEASES, "mixtures_packing",
        {"shards": Table(SHARDS_SCHEMA, purge=Purge.NONE), DECISIONS_TABLE: _RELEASE_DECISIONS,
         "tails": Table(TAILS_SCHEMA, record_ids=_ID, readable=False)},
        main_table="shards", build_id=BuildId.CONTENT, on_deletion=OnDeletion.REBUILD, shard_spans=True,
    ),
    Layer(
        # publishes under releases/<release>/<build id>/ (Algorithm 18.3), not as layer versions
        RELEASE_MANIFEST, Partitioning.RELEASES, "releases", {},
        main_table=None, build_id=BuildId.NO, on_deletion=OnDeletion.REVOKE, refable=False,
    ),
)

REPORT_GROUP = "reports"
REPORT_TABLE = "result"

_BY_ASSET = {layer.asset: layer for layer in LAYERS}
assert len(_BY_ASSET) == len(LAYERS), "an asset is registered twice"

# Dagster assets that store nothing (only observations, whose data version is a fingerprint):
# no tables, nothing to purge, nothing in a build id. asset -> (partitioning, group).
OBSERVED_ASSETS = {RELEASE_INPUTS: (Partitioning.RELEASES, "dedup")}


def report_layer(model: str) -> Layer:
    """The layer of a SQL report model (``dbt_like_sql/<model>.sql``): one unpartitioned ``result``
    table whose columns are what the SQL selects, rebuilt (never purged) when its inputs change."""
    return Layer(
        model, Partitioning.NONE, REPORT_GROUP,
        {REPORT_TABLE: Table(None, record_ids=RECORD_ID_COLUMNS, purge=Purge.NONE)},
        main_table=REPORT_TABLE, build_id=BuildId.NO, on_deletion=OnDeletion.REBUILD, refable=False,
    )


def layer(asset: str) -> Layer:
    try:
        return _BY_ASSET[asset]
    except KeyError:
        raise KeyError(f"{asset!r} is not a registered layer (corpus_assets/domain/layers/registry.py)") from None


def is_layer(asset: str) -> bool:
    return asset in _BY_ASSET


def layers(*, partitioning: Optional[Partitioning] = None) -> Iterator[Layer]:
    """The pipeline's layers in data-flow order, optionally of one partitioning."""
    return (la for la in LAYERS if partitioning is None or la.partitioning is partitioning)


def snapshot_layers() -> list[Layer]:
    return list(layers(partitioning=Partitioning.SNAPSHOTS))


def release_layers() -> list[Layer]:
    return list(layers(partitioning=Partitioning.RELEASES))


def decision_layers() -> list[Layer]:
    """Layers that write the decision record (``layers/decisions.py``), in data-flow order."""
    return [la for la in LAYERS if la.tables.get(DECISIONS_TABLE) is not None
            and la.tables[DECISIONS_TABLE].schema == DECISIONS_SCHEMA]


def record_copy_layers() -> list[Layer]:
    """Snapshot layers whose main table holds copies of the records themselves (ids, digests,
    text): where a deletion request looks for what it covers."""
    return [la for la in snapshot_layers()
            if la.main_table is not None and la.tables[la.main_table].schema == RECORDS_SCHEMA]


def build_inputs(partitioning: Partitioning) -> list[Layer]:
    """Layers of one partitioning whose versions are inputs of a release's build id."""
    return [la for la in layers(partitioning=partitioning) if la.build_id is not BuildId.NO]


def rewritten_on_deletion(partitioning: Optional[Partitioning] = None) -> list[Layer]:
    """Layers a purge rewrites in place."""
    return [la for la in layers(partitioning=partitioning) if la.on_deletion is OnDeletion.REWRITE]


def partition_of(la: Layer, key: Optional[str] = None) -> str:
    """The partition key of a version of ``la`` (``_all`` for unpartitioned layers)."""
    if la.partitioning is Partitioning.NONE:
        return UNPARTITIONED
    if key is None:
        raise ValueError(f"{la.asset} is partitioned by {la.partitioning.value}: give the partition key")
    return key


def undescribed(assets: Mapping[str, tuple[Optional[str], Optional[str]]], report_models: set[str]) -> list[str]:
    """Problems for Dagster assets the registry does not describe. ``assets``: asset name ->
    (partitions definition name or None, group name); ``report_models``: the SQL model names."""
    problems = []
    for name, (partitions, group) in sorted(assets.items()):
        if name in report_models:
            expected = report_layer(name)
        elif name in _BY_ASSET:
            expected = _BY_ASSET[name]
        elif name in OBSERVED_ASSETS:
            partitioning, expected_group = OBSERVED_ASSETS[name]
            if (partitions, group) != (partitioning.value, expected_group):
                problems.append(f"{name}: partitioned by {partitions!r} in group {group!r} in Dagster, "
                                f"{partitioning.value!r} in group {expected_group!r} in the registry")
            continue
        else:
            problems.append(f"{name}: a Dagster asset the layer registry does not describe; add it to "
                            "corpus_assets/domain/layers/registry.py (tables, record ids, purge, build id)")
            continue
        want = None if expected.partitioning is Partitioning.NONE else expected.partitioning.value
        if partitions != want:
            problems.append(f"{name}: partitioned by {partitions!r} in Dagster, {want!r} in the registry")
        if group != expected.group:
            problems.append(f"{name}: group {group!r} in Dagster, {expected.group!r} in the registry")
    for la in LAYERS:
        if la.asset not in assets:
            problems.append(f"{la.asset}: registered but no Dagster asset has that name")
    return problems
