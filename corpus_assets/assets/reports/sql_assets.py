"""Turn every ``dbt_like_sql/*.sql`` file into a Dagster asset wired from its refs.

A model is an unpartitioned asset of the ``reports`` group. ``ref('layer')`` adds a dependency on
the layer asset over *all* its partitions (snapshot or release), ``ref('model')`` one on the
other model, and ``catalog('table')`` one on the asset that writes that catalog table, if any
(``release_registry`` and ``consumption`` -> ``release_manifest``; deletion requests and
tombstones are written by the ``deletion_requests`` sensor, not by an asset). Which layers and
tables a model may read is the layer registry's answer (``domain/reports/sql_models.py``).
"""

from pathlib import Path

import dagster as dg
import pyarrow as pa

from corpus_assets.domain.core.hashing import sha256_text
from corpus_assets.domain.core.settings import catalog_path, project_root
from corpus_assets.domain.layers.registry import REPORT_GROUP
from corpus_assets.domain.reports.sql_models import (
    CATALOG_WRITERS,
    RESULT_TABLE,
    SqlModel,
    catalog_resolver,
    check_models,
    discover_models,
    make_resolver,
    ref_layer,
    run_model,
)
from corpus_assets.domain.storage.layer_store import UNPARTITIONED, TableSpec
from corpus_assets.metadata import markdown_table, version_metadata
from resources.storage import StorageResource

SQL_FOLDER = project_root() / "dbt_like_sql"
PREVIEW_ROWS = 30


def _deps(model: SqlModel) -> list[dg.AssetDep]:
    deps: dict[str, dg.AssetDep] = {}
    for up in model.upstream:
        deps[up] = dg.AssetDep(up, partition_mapping=dg.AllPartitionMapping()) if ref_layer(up) is not None else dg.AssetDep(up)
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
        group_name=REPORT_GROUP,
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
    check_models(models)
    by_name = {m.name: m for m in models}
    return [_model_asset(m, by_name) for m in models]
