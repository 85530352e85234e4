"""raw_snapshot: immutable raw bytes plus a provenance record per item, one version per snapshot."""


import dagster as dg

from corpus_assets.domain.ingest.capture import CAPTURE_CODE_VERSION, capture_snapshot
from corpus_assets.domain.layers.registry import RAW_SNAPSHOT
from corpus_assets.domain.core.keys import parse_snapshot_key
from corpus_assets.layer_checks import partition_check, raw_snapshot_checks
from corpus_assets.key_figures import stored_key_figures
from corpus_assets.metadata import counts_table, version_metadata
from corpus_assets.partitions import snapshots_partitions
from resources.catalog import CatalogResource
from resources.sources import SourcesResource
from resources.storage import StorageResource


def commit_capture_to_catalog(catalog, source, result) -> None:
    """Record a committed capture in the control plane (snapshot registry, then crawl state)."""
    _, captured_at = parse_snapshot_key(result.snapshot)
    cat = catalog.catalog()
    cat.register_snapshot(
        result.snapshot, source.id, source.kind, captured_at, result.items, result.version.version,
        {"status_counts": result.status_counts, "crawl": result.stats},
    )
    if result.state_updates:
        cat.upsert_crawl_state(source.id, result.snapshot, result.state_updates)


@dg.asset(
    partitions_def=snapshots_partitions,
    pool="catalog_writer",  # opens catalog.duckdb, which one process at a time may hold (docs/operations.md)
    group_name="ingestion",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=CAPTURE_CODE_VERSION,
    description=(
        "Immutable raw bytes of one captured source snapshot, with provenance per item (URI, retrieval "
        "time, HTTP status, content type, raw-bytes digest, license and evidence, robots decision). "
        "Owner-only on disk. Capturing happens once per partition: crawl schedules capture before "
        "requesting the run; file sources are read on first materialization; later materializations "
        "verify and reuse the stored version."
    ),
    check_specs=[
        partition_check("raw_integrity", "raw_snapshot", snapshots_partitions, "Every file matches its manifest digest.")
    ],
)
def raw_snapshot(
    context: dg.AssetExecutionContext,
    storage: StorageResource,
    catalog: CatalogResource,
    sources: SourcesResource,
) -> dg.MaterializeResult:
    key = context.partition_key
    source_id, _ = parse_snapshot_key(key)
    source = sources.load().get(source_id)
    store = storage.store()
    version = store.current(RAW_SNAPSHOT, key)
    if version is None:
        previous = catalog.catalog().crawl_state(source.id) if source.kind == "http_crawl" else None
        result = capture_snapshot(source, key, store, previous_state=previous, log=context.log.info)
        commit_capture_to_catalog(catalog, source, result)
        version = result.version
    else:
        context.log.info(f"{key}: raw snapshot already captured as {version.version}; verifying and reusing it")
    counts = version.manifest.get("status_counts", {})
    return dg.MaterializeResult(
        data_version=dg.DataVersion(version.content_digest),
        metadata={
            **stored_key_figures(version),  # the KEY_FIGURES, from the stored version (as a purge reports them)
            "source_id": source.id,
            "source_kind": source.kind,
            "captured": dg.MetadataValue.int(counts.get("captured", 0)),
            "capture_status": dg.MetadataValue.md(counts_table(counts, "status")),
            **version_metadata(version),
        },
        check_results=raw_snapshot_checks(version),
    )
