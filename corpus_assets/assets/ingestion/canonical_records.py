"""canonical_records: typed records (envelope + payload) with one decision per raw item."""


import dagster as dg
from pydantic import Field

from corpus_assets.domain.canonical.canonical_layer import CANONICAL_CODE_VERSION, build_canonical
from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, RAW_SNAPSHOT
from corpus_assets.domain.core.keys import parse_snapshot_key
from corpus_assets.domain.deletion.purge import purge_snapshot
from corpus_assets.domain.deletion.tombstones import load_tombstones
from corpus_assets.layer_checks import canonical_records_checks, partition_check
from corpus_assets.key_figures import stored_key_figures
from corpus_assets.metadata import counts_table, markdown_table, version_metadata
from corpus_assets.partitions import snapshots_partitions
from corpus_assets.assets.ingestion.raw_snapshot import raw_snapshot
from resources.catalog import CatalogResource
from resources.sources import SourcesResource
from resources.storage import StorageResource


class CanonicalConfig(dg.Config):
    batch_size: int = Field(default=256, ge=1, le=100_000, description="raw items per processing batch (memory bound)")


@dg.asset(
    partitions_def=snapshots_partitions,
    deps=[raw_snapshot],
    group_name="ingestion",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=CANONICAL_CODE_VERSION,
    description=(
        "Typed canonical records of one snapshot: HTML main-content extraction, normalization that "
        "leaves code whitespace alone, language ID, schema adapters for documents, messages, "
        "preferences, instructions, reasoning traces and tasks. Every raw item gets exactly one "
        "decision (accepted / rejected / quarantined) with a stable reason code; quarantined items "
        "and private task references are stored owner-only."
    ),
    check_specs=[
        partition_check("accounting", "canonical_records", snapshots_partitions,
                        "in = accepted + rejected + quarantined + deleted (by a deletion request), every raw item decided exactly once.")
    ],
)
def canonical_records(
    context: dg.AssetExecutionContext,
    config: CanonicalConfig,
    storage: StorageResource,
    sources: SourcesResource,
    catalog: CatalogResource,
) -> dg.MaterializeResult:
    key = context.partition_key
    source_id, _ = parse_snapshot_key(key)
    cfg = sources.load()
    source = cfg.get(source_id)
    store = storage.store()
    raw = store.require_current(RAW_SNAPSHOT, key)
    tombstones = load_tombstones(catalog.catalog())
    summary = build_canonical(
        store, source, key, cfg.canonical, raw_version=raw, batch_size=config.batch_size, log=context.log.info,
        tombstones=tombstones,
    )
    version = summary.version
    if summary.outcomes.get("deleted"):
        # a re-captured item that a deletion request covers: stub its raw bytes too (ids stay)
        purged = purge_snapshot(store, key, tombstones, request_ids=list(tombstones.request_ids))
        # the capture's own version still holds the full bytes: no version but the stubbed one stays
        dropped = {la.asset: len(store.drop_versions(la.asset, key)) for la in registry.snapshot_layers()
                   if store.current_version_name(la.asset, key) is not None}
        context.log.info(f"{key}: {summary.outcomes['deleted']} tombstoned record(s) refused; raw items stubbed: "
                         f"{purged.get('deleted_items', 0)}; older versions dropped: {dropped}")
        raw = store.require_current(RAW_SNAPSHOT, key)
        version = store.require_current(CANONICAL_RECORDS, key)
    reason_rows = sorted(summary.reasons.items(), key=lambda kv: (kv[0][0], -kv[1], kv[0][1]))
    return dg.MaterializeResult(
        data_version=dg.DataVersion(version.content_digest),
        metadata={
            **stored_key_figures(version),  # the KEY_FIGURES, from the stored version (as a purge reports them)
            "deleted": dg.MetadataValue.int(summary.outcomes.get("deleted", 0)),
            "decisions": dg.MetadataValue.md(
                markdown_table(["outcome", "reason", "items"], [(o, r, c) for (o, r), c in reason_rows])
            ),
            "schemas": dg.MetadataValue.md(counts_table(summary.schemas, "schema")),
            "languages": dg.MetadataValue.md(counts_table(summary.langs, "lang")),
            "policy_version": summary.policy_version,
            "raw_version": raw.version,
            **version_metadata(version),
        },
        check_results=canonical_records_checks(raw, version),
    )
