"""mixture_plan: the ordered sampling plan of a release's training split."""

import dagster as dg

from corpus_assets.domain.pack.mixture_layer import MIXTURE_LAYER_VERSION, build_mixture_plan
from corpus_assets.domain.layers.registry import TOKEN_VIEWS
from corpus_assets.metadata import markdown_table, version_metadata
from corpus_assets.partitions import releases_partitions
from corpus_assets.assets.splits_tokens.token_views import token_views_asset
from resources.releases import ReleasesResource
from resources.storage import StorageResource


@dg.asset(
    name="mixture_plan",
    partitions_def=releases_partitions,
    deps=[token_views_asset],
    group_name="mixtures_packing",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=MIXTURE_LAYER_VERSION,
    description=(
        "Ordered sampling plan of the training split (record, repeat index, phase): explicit weights or "
        "temperature alpha over a declared unit (documents or tokens), exact quotas, optional curriculum "
        "phases and importance weights q/p. Reports target vs realized document and token shares and "
        "effective epochs per source. Validation and test are not mixed."
    ),
)
def mixture_plan_asset(context: dg.AssetExecutionContext, storage: StorageResource, releases: ReleasesResource) -> dg.MaterializeResult:
    name = context.partition_key
    rspec = releases.spec(name)
    spec, train = rspec.mixture, rspec.split.names[0]  # typed and checked when the spec was read
    store = storage.store()
    version, report = build_mixture_plan(store, name, spec, token_views=store.require_current(TOKEN_VIEWS, name),
                                         train_split=train, declared_sources=rspec.snapshots.sources)
    for w in report["warnings"]:
        context.log.warning(f"mixture {name}: {w}")
    rows = [
        (s, f"{r['target_share']:.3f}", f"{r['document_share']:.3f}", f"{r['token_share']:.3f}", r["available_records"],
         r["draws"], r["unique_records"], f"{r['effective_epochs']:.2f}",
         f"{r['importance_weight']:.3f}" if r.get("importance_weight") is not None else "-")
        for s, r in report["sources"].items()
    ]
    return dg.MaterializeResult(
        data_version=dg.DataVersion(version.content_digest),
        metadata={
            "draws": dg.MetadataValue.int(report["draws"]),
            "tokens": dg.MetadataValue.int(report["tokens"]),
            "unit": report["unit"],
            "budget": dg.MetadataValue.int(report["budget"]),
            "phases": dg.MetadataValue.int(len(report["phases"])),
            "warnings": dg.MetadataValue.int(len(report["warnings"])),
            "per_source": dg.MetadataValue.md(markdown_table(
                ["source", "target share", "document share", "token share", "records", "draws", "unique drawn",
                 "effective epochs", "importance weight"], rows)),
            "max_effective_epochs": dg.MetadataValue.float(
                round(max((r["effective_epochs"] for r in report["sources"].values()), default=0.0), 6)),
            **version_metadata(version),
        },
    )
