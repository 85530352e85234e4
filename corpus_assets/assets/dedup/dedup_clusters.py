"""dedup_clusters: exact and near-duplicate clusters of a release, with aliases and leakage groups."""

import dagster as dg

from corpus_assets.domain.core.compute import engine_from_env
from corpus_assets.domain.dedup.clusters_layer import DEDUP_CODE_VERSION, build_dedup
from corpus_assets.domain.ingest.compacted import select_snapshots
from corpus_assets.domain.layers.registry import CANONICAL_RECORDS, CURATED_RECORDS, DEDUP_CLUSTERS, MINHASH_SIGNATURES
from corpus_assets.metadata import markdown_table, ratio, version_metadata
from corpus_assets.assets.releases.release_inputs import release_inputs
from corpus_assets.partitions import every_snapshot, releases_partitions
from resources.releases import ReleasesResource
from resources.sources import SourcesResource
from resources.storage import StorageResource


@dg.asset(
    partitions_def=releases_partitions,
    deps=[
        # one to one: the release's input fingerprint, so staleness holds past 100 snapshot partitions
        release_inputs,
        *every_snapshot(MINHASH_SIGNATURES, CURATED_RECORDS, CANONICAL_RECORDS),
    ],
    group_name="dedup",
    kinds={"python", "parquet"},
    owners=["team:corpus"],
    code_version=DEDUP_CODE_VERSION,
    description=(
        "Exact and near-duplicate clusters of the records a release sees: each source as of its latest "
        "selected snapshot (or every record's newest copy with snapshots.retain: union), sources whose "
        "allowed_uses cover the release's uses. Exact: dedup key with byte "
        "comparison, every alias kept. Near: LSH (bands x rows in the policy) over cached signatures, "
        "candidates verified by real Jaccard, Algorithm 18.1 in the stable total order (governance "
        "eligibility, quality, source priority, resolved path before symlinked copy, primary locale, record id). Leakage groups = connected components."
    ),
)
def dedup_clusters(
    context: dg.AssetExecutionContext,
    storage: StorageResource,
    releases: ReleasesResource,
    sources: SourcesResource,
) -> dg.MaterializeResult:
    name = context.partition_key
    spec = releases.spec(name)
    policy = spec.dedup  # typed and checked when the spec was read
    store = storage.store()
    snapshots = select_snapshots(spec.snapshots, store)  # refuses a selection compaction changed
    if not snapshots:
        raise ValueError(f"release {name!r} selects no snapshot with materialized minhash_signatures")
    declared = sources.load().sources
    engine = engine_from_env()
    priority = {s.id: s.priority for s in declared}
    s = build_dedup(store, name, snapshots, policy, releases.dedup().minhash, priority,
                    rule=spec.snapshots.retain, incremental_sources={s.id for s in declared if s.kind == "http_crawl"},
                    allowed_uses={s.id: s.governance.allowed_uses for s in declared}, uses=spec.uses,
                    log=context.log.info,
                    primary_locales={s.id: s.primary_locale for s in declared if getattr(s, "primary_locale", None)},
                    engine=engine, shards=policy.shards, previous=store.current(DEDUP_CLUSTERS, name))
    kept = s.version.manifest["kept"]
    return dg.MaterializeResult(
        data_version=dg.DataVersion(s.version.content_digest),
        metadata={
            "records": dg.MetadataValue.int(s.records),
            "kept": dg.MetadataValue.int(kept),
            "exact_duplicates": dg.MetadataValue.int(s.exact["duplicates_removed"]),
            "near_duplicates": dg.MetadataValue.int(s.near_removed),
            "duplicate_rate": dg.MetadataValue.float(ratio(s.records - kept, s.records)),
            "candidate_pairs": dg.MetadataValue.int(s.candidates),
            # of those, verified by the previous build (pair_verdicts): no text read, no Jaccard computed
            "candidate_pairs_known": dg.MetadataValue.int(s.memo_hits),
            "superseded_copies": dg.MetadataValue.int(s.superseded),
            "snapshot_rule": dg.MetadataValue.text(spec.snapshots.retain),
            "uses": dg.MetadataValue.text(", ".join(spec.uses)),
            "left_out": dg.MetadataValue.md(markdown_table(["reason", "copies"], sorted(s.version.manifest["left_out"].items()))
                                            if s.version.manifest["left_out"] else "_none_"),
            "snapshots": dg.MetadataValue.md("\n".join(f"- {k}" for k in s.snapshots)),
            "cluster_sizes": dg.MetadataValue.md(markdown_table(["cluster size", "clusters"], sorted(s.cluster_sizes.items()))),
            "largest_clusters": dg.MetadataValue.md(
                markdown_table(["representative", "members"], s.largest) if s.largest else "_no duplicates_"
            ),
            "lsh_policy": dg.MetadataValue.json({k: v for k, v in s.lsh.items() if k != "stats"}),
            # the bucket cap's effect, reported: buckets capped, pairs before/after, members left out
            "lsh_buckets": dg.MetadataValue.md(markdown_table(["statistic", "value"], sorted(s.lsh["stats"].items()))),
            "capped_buckets": dg.MetadataValue.int(s.lsh["stats"]["capped_buckets"]),
            **version_metadata(s.version),
        },
    )
