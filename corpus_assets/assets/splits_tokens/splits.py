"""splits: leakage-safe train / validation / test assignment of a release's records."""

import dagster as dg

from corpus_assets.assets.dedup.dedup_clusters import dedup_clusters
from corpus_assets.domain.tokens.splits_layer import SPLITS_LAYER_CODE_VERSION, build_splits
from corpus_assets.domain.layers.registry import DEDUP_CLUSTERS, SPLITS
from corpus_assets.metadata import markdown_table, version_metadata
from corpus_assets.domain.layers.registry import CURATED_RECORDS
from corpus_assets.partitions import every_snapshot, releases_partitions
from resources.releases import ReleasesResource
from resources.storage import StorageResource


@dg.asset(
    name="splits",
    partitions_def=releases_partitions,
    deps=[dedup_clusters, *every_snapshot(CURATED_RECORDS)],  # the kept records' text, for split keys
    group_name="splits_tokens",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=SPLITS_LAYER_CODE_VERSION,
    description=(
        "Train / validation / test assignment by a salted hash of each leakage group (declared group "
        "joined with near-duplicate components), so no group straddles two splits. Realized record "
        "shares are reported next to the targets: they drift when groups differ in size."
    ),
)
def splits_asset(context: dg.AssetExecutionContext, storage: StorageResource, releases: ReleasesResource) -> dg.MaterializeResult:
    name = context.partition_key
    policy = releases.spec(name).split  # typed and checked when the spec was read
    store = storage.store()
    version, report = build_splits(store, name, policy, dedup=store.require_current(DEDUP_CLUSTERS, name),
                                   earlier=store.current(SPLITS, name))  # u of known groups: not hashed again
    rows = [
        (split, r["target"], r["records"], f"{r['record_share']:.3f}", r["groups"], f"{r['group_share']:.3f}", r["max_group_size"])
        for split, r in report["splits"].items()
    ]
    return dg.MaterializeResult(
        data_version=dg.DataVersion(version.content_digest),
        metadata={
            "records": dg.MetadataValue.int(report["records"]),
            "leakage_groups": dg.MetadataValue.int(report["groups"]),
            "quarantined": dg.MetadataValue.int(report["quarantined"]["records"]),
            "conflicts": dg.MetadataValue.int(len(report.get("conflicts", []))),
            "per_split": dg.MetadataValue.md(markdown_table(
                ["split", "target", "records", "record share", "groups", "group share", "largest group"], rows)),
            "policy_version": report["policy_version"],
            **{f"{split}_records": dg.MetadataValue.int(r["records"]) for split, r in report["splits"].items()},
            **version_metadata(version),
        },
    )
