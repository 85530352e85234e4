"""Turn every ``dbt_like_sql/*.sql`` file into a Dagster asset wired from its refs.

A model is an unpartitioned asset of the ``reports`` group. ``ref('layer')`` adds a dependency on
the layer asset over *all* its partitions (snapshot or release), ``ref('model')`` one on the
other model, and ``catalog('table')`` one on the asset that writes that catalog table, if any
(``release_registry`` and ``consumption`` -> ``release_manifest``; deletion requests and
tombstones are written by the ``deletion_requests`` sensor, not by an asset).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from corpus_assets.domain.canonical.canonical_layer import CANONICAL_ASSET, CANONICAL_TABLES
from corpus_assets.domain.ingest.capture import RAW_ASSET, RAW_TABLES
from corpus_assets.domain.curate.curated_layer import CURATED_ASSET, CURATED_TABLES
from corpus_assets.domain.dedup.clusters_layer import DEDUP_ASSET, DEDUP_TABLES
from corpus_assets.domain.core.hashing import sha256_text
from corpus_assets.domain.storage.layer_store import UNPARTITIONED, LayerStore, TableSpec
from corpus_assets.domain.pack.mixture_layer import MIXTURE_ASSET, MIXTURE_TABLES
from corpus_assets.domain.tokens.splits_layer import SPLITS_ASSET, SPLITS_TABLES
from corpus_assets.domain.core.settings import catalog_path, project_root
from corpus_assets.domain.pack.shards_layer import SHARDS_ASSET, SHARDS_TABLES
from corpus_assets.domain.reports.sql_models import (
    MANIFEST_TABLE,
    Ref,
    Relation,
    SqlModel,
    SqlModelError,
    catalog_resolver,
    discover_models,
    run_model,
)
from corpus_assets.domain.tokens.token_views_layer import TOKEN_VIEWS_ASSET, TOKEN_VIEWS_TABLES
from corpus_assets.metadata import markdown_table, version_metadata
from resources.storage import StorageResource

SQL_FOLDER = project_root() / "dbt_like_sql"
RESULT_TABLE = "result"
PREVIEW_ROWS = 30


@dataclass(frozen=True)
class RefLayer:
    """A layer asset models may ref: its readable tables, main table, partition key column and
    (per table) a restricted column list."""

    tables: dict[str, TableSpec]
    main: str
    partition_column: str  # "snapshot" | "release": the view exposes the partition key under it
    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)


_TOKEN_VIEW_SCALARS = ("record_id", "variant", "split", "source_id", "snapshot", "domain", "cache_key", "n_tokens", "label_tokens")

# Layer assets a model may ref. Token views expose their scalar columns only: never the token
# lists (input ids, loss masks, offsets) nor the segment layout.
LAYER_TABLES: dict[str, RefLayer] = {
    RAW_ASSET: RefLayer(RAW_TABLES, "items", "snapshot"),
    CANONICAL_ASSET: RefLayer(CANONICAL_TABLES, "records", "snapshot"),
    CURATED_ASSET: RefLayer(CURATED_TABLES, "records", "snapshot"),
    DEDUP_ASSET: RefLayer({t: DEDUP_TABLES[t] for t in ("clusters", "aliases", "edges")}, "clusters", "release"),
    SPLITS_ASSET: RefLayer(SPLITS_TABLES, "assignments", "release"),
    TOKEN_VIEWS_ASSET: RefLayer({"views": TOKEN_VIEWS_TABLES["views"]}, "views", "release", {"views": _TOKEN_VIEW_SCALARS}),
    MIXTURE_ASSET: RefLayer(MIXTURE_TABLES, "plan", "release"),
    SHARDS_ASSET: RefLayer(SHARDS_TABLES, "shards", "release"),
}
assert all(MANIFEST_TABLE not in layer.tables for layer in LAYER_TABLES.values())

# catalog table -> the asset whose materializations write it (a dependency of models reading it)
CATALOG_WRITERS: dict[str, Optional[str]] = {
    "release_registry": "release_manifest",
    "consumption": "release_manifest",
    "deletion_requests": None,
    "tombstones": None,
}

_MANIFEST_BASE = ("layout_version", "asset", "partition", "version", "content_digest", "tables", "build_spec")


def _manifest_relation(store: LayerStore, asset: str, layer: RefLayer) -> Relation:
    pcol = layer.partition_column
    schema = pa.schema([(pcol, pa.string()), ("version", pa.string()), ("content_digest", pa.string()),
                        ("rows_json", pa.string()), ("build_spec_json", pa.string()), ("extra_json", pa.string())])
    rows = []
    for part in store.partitions(asset):
        v = store.current(asset, part)
        if v is None:
            continue
        m = v.manifest
        rows.append({
            pcol: part, "version": v.version, "content_digest": v.content_digest,
            "rows_json": json.dumps({t: meta["rows"] for t, meta in m["tables"].items()}, sort_keys=True),
            "build_spec_json": json.dumps(m.get("build_spec", {}), sort_keys=True),
            "extra_json": json.dumps({k: val for k, val in m.items() if k not in _MANIFEST_BASE}, sort_keys=True),
        })
    note = None if rows else f"ref('{asset}', '{MANIFEST_TABLE}'): nothing materialized yet; read as an empty table"
    return Relation(schema=schema, rows=pa.Table.from_pylist(rows, schema=schema), note=note)


def make_resolver(store: LayerStore, models: dict[str, SqlModel]):
    def resolve(ref: Ref) -> Relation:
        if ref.asset in LAYER_TABLES:
            layer = LAYER_TABLES[ref.asset]
            table = ref.table or layer.main
            if table == MANIFEST_TABLE:
                return _manifest_relation(store, ref.asset, layer)
            if table not in layer.tables:
                raise KeyError(f"{ref.asset} has no readable table {table!r} (tables: {', '.join(sorted(layer.tables))}, {MANIFEST_TABLE})")
            if layer.tables[table].private:
                raise PermissionError(f"{ref.asset}.{table} is owner-only and cannot be read by report models")
            parts = []
            for part in store.partitions(ref.asset):
                files = store.current_files(ref.asset, table, [part])
                if files:
                    parts.append((part, tuple(files)))
            return Relation(
                schema=layer.tables[table].schema,
                parts=tuple(parts),
                partition_column=layer.partition_column,
                columns=layer.columns.get(table),
            )
        if ref.asset in models:
            if ref.table not in (None, RESULT_TABLE):
                raise KeyError(f"model {ref.asset} has only the table {RESULT_TABLE!r}")
            version = store.current(ref.asset, UNPARTITIONED)
            if version is None:
                raise FileNotFoundError(f"model {ref.asset} has not been materialized yet")
            files = version.table_files(RESULT_TABLE)
            return Relation(schema=pq.read_schema(files[0]), parts=((UNPARTITIONED, tuple(files)),))
        raise KeyError(f"unknown asset or model {ref.asset!r}")

    return resolve


def _deps(model: SqlModel) -> list[dg.AssetDep]:
    deps: dict[str, dg.AssetDep] = {}
    for up in model.upstream:
        deps[up] = dg.AssetDep(up, partition_mapping=dg.AllPartitionMapping()) if up in LAYER_TABLES else dg.AssetDep(up)
    for table in model.catalog_tables:
        writer = CATALOG_WRITERS.get(table)
        if writer and writer not in deps:
            deps[writer] = dg.AssetDep(writer, partition_mapping=dg.AllPartitionMapping())
    return [deps[k] for k in sorted(deps)]


def _preview(result: pa.Table) -> str:
    if not result.num_rows:
        return "_no rows_"
    rows = result.slice(0, PREVIEW_ROWS).to_pylist()
    md = markdown_table(result.schema.names, [[r[c] for c in result.schema.names] for r in rows])
    if result.num_rows > PREVIEW_ROWS:
        md += f"\n\n_{result.num_rows - PREVIEW_ROWS} more rows in the stored result_"
    return md


def _model_asset(model: SqlModel, all_models: dict[str, SqlModel]) -> dg.AssetsDefinition:
    @dg.asset(
        name=model.name,
        deps=_deps(model),
        group_name="reports",
        kinds={"sql", "duckdb"},
        owners=["team:corpus"],
        code_version=sha256_text(model.sql)[:12],
        description=f"{model.description} (dbt_like_sql/{model.path.name})",
    )
    def _asset(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
        store = storage.store()
        run = run_model(model, make_resolver(store, all_models), catalog_resolver(catalog_path()))
        result = run.table
        spec = {RESULT_TABLE: TableSpec(result.schema)}
        with store.new_version(model.name, UNPARTITIONED, spec, {"sql_sha256": sha256_text(model.sql)}) as w:
            w.write(RESULT_TABLE, result)
            version = w.commit(extra_manifest={"notes": run.notes})
        context.log.info(f"{model.name}: {result.num_rows} rows")
        for note in run.notes:
            context.log.warning(f"{model.name}: {note}")
        metadata = {
            "rows": dg.MetadataValue.int(result.num_rows),
            "preview": dg.MetadataValue.md(_preview(result)),
            "sql": dg.MetadataValue.md(f"```sql\n{model.sql}\n```"),
            **version_metadata(version),
        }
        if run.notes:
            metadata["note"] = dg.MetadataValue.md("\n".join(f"- {n}" for n in run.notes))
        return dg.MaterializeResult(data_version=dg.DataVersion(version.content_digest), metadata=metadata)

    return _asset


def load_sql_assets(folder: Path = SQL_FOLDER) -> list[dg.AssetsDefinition]:
    models = discover_models(folder)
    by_name = {m.name: m for m in models}
    for m in models:
        for r in m.refs:
            if r.asset not in LAYER_TABLES and r.asset not in by_name:
                raise SqlModelError(f"{m.path}:{r.line}: unknown asset or model {r.asset!r}")
            layer = LAYER_TABLES.get(r.asset)
            if layer is not None and r.table not in (None, MANIFEST_TABLE):
                if r.table not in layer.tables:
                    raise SqlModelError(f"{m.path}:{r.line}: {r.asset} has no readable table {r.table!r} "
                                        f"(tables: {', '.join(sorted(layer.tables))}, {MANIFEST_TABLE})")
                if layer.tables[r.table].private:
                    raise SqlModelError(f"{m.path}:{r.line}: {r.asset}.{r.table} is owner-only and cannot be read by report models")
    return [_model_asset(m, by_name) for m in models]
