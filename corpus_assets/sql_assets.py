"""Turn every ``dbt_like_sql/*.sql`` file into a Dagster asset wired from its refs."""


from pathlib import Path

import dagster as dg
import pyarrow as pa

from corpus_assets.domain.canonical_layer import CANONICAL_ASSET, CANONICAL_TABLES
from corpus_assets.domain.capture import RAW_ASSET, RAW_TABLES
from corpus_assets.domain.curated_layer import CURATED_ASSET, CURATED_TABLES
from corpus_assets.domain.hashing import sha256_text
from corpus_assets.domain.layer_store import UNPARTITIONED, LayerStore, TableSpec
from corpus_assets.domain.settings import project_root
from corpus_assets.domain.sql_models import Ref, SqlModel, SqlModelError, discover_models, render_and_run
from corpus_assets.metadata import markdown_table, version_metadata
from resources.storage import StorageResource

SQL_FOLDER = project_root() / "dbt_like_sql"
RESULT_TABLE = "result"

# Layer assets a model may ref: name -> (tables, main table name, partitioned?)
LAYER_TABLES: dict[str, tuple[dict[str, TableSpec], str]] = {
    RAW_ASSET: (RAW_TABLES, "items"),
    CANONICAL_ASSET: (CANONICAL_TABLES, "records"),
    CURATED_ASSET: (CURATED_TABLES, "records"),
}


def make_resolver(store: LayerStore, models: dict[str, SqlModel]):
    def resolve(ref: Ref) -> tuple[list[Path], pa.Schema]:
        if ref.asset in LAYER_TABLES:
            tables, main = LAYER_TABLES[ref.asset]
            table = ref.table or main
            if table not in tables:
                raise KeyError(f"{ref.asset} has no table {table!r} (tables: {', '.join(sorted(tables))})")
            if tables[table].private:
                raise PermissionError(f"{ref.asset}.{table} is owner-only and cannot be read by report models")
            return store.current_files(ref.asset, table), tables[table].schema
        if ref.asset in models:
            if ref.table not in (None, RESULT_TABLE):
                raise KeyError(f"model {ref.asset} has only the table {RESULT_TABLE!r}")
            version = store.current(ref.asset, UNPARTITIONED)
            if version is None:
                raise FileNotFoundError(f"model {ref.asset} has not been materialized yet")
            return version.table_files(RESULT_TABLE), version.read_table(RESULT_TABLE).schema
        raise KeyError(f"unknown asset or model {ref.asset!r}")

    return resolve


def _model_asset(model: SqlModel, all_models: dict[str, SqlModel]) -> dg.AssetsDefinition:
    deps = [
        dg.AssetDep(up, partition_mapping=dg.AllPartitionMapping()) if up in LAYER_TABLES else dg.AssetDep(up)
        for up in model.upstream
    ]

    @dg.asset(
        name=model.name,
        deps=deps,
        group_name="reports",
        kinds={"sql", "duckdb"},
        owners=["team:corpus"],
        code_version=sha256_text(model.sql)[:12],
        description=f"{model.description} (dbt_like_sql/{model.path.name})",
    )
    def _asset(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
        store = storage.store()
        result = render_and_run(model, make_resolver(store, all_models))
        spec = {RESULT_TABLE: TableSpec(result.schema)}
        with store.new_version(model.name, UNPARTITIONED, spec, {"sql_sha256": sha256_text(model.sql)}) as w:
            w.write(RESULT_TABLE, result)
            version = w.commit()
        preview = result.slice(0, 30).to_pylist()
        context.log.info(f"{model.name}: {result.num_rows} rows")
        return dg.MaterializeResult(
            data_version=dg.DataVersion(version.content_digest),
            metadata={
                "rows": dg.MetadataValue.int(result.num_rows),
                "preview": dg.MetadataValue.md(
                    markdown_table(result.schema.names, [[r[c] for c in result.schema.names] for r in preview])
                    if preview
                    else "_no rows_"
                ),
                "sql": dg.MetadataValue.md(f"```sql\n{model.sql}\n```"),
                **version_metadata(version),
            },
        )

    return _asset


def load_sql_assets(folder: Path = SQL_FOLDER) -> list[dg.AssetsDefinition]:
    models = discover_models(folder)
    by_name = {m.name: m for m in models}
    for m in models:
        for r in m.refs:
            if r.asset not in LAYER_TABLES and r.asset not in by_name:
                raise SqlModelError(f"{m.path}:{r.line}: unknown asset or model {r.asset!r}")
    return [_model_asset(m, by_name) for m in models]
