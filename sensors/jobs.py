"""Jobs shared by schedules and sensors."""

import dagster as dg

from corpus_assets.assets.ingestion.canonical_records import canonical_records
from corpus_assets.assets.curation.curated_records import curated_records
from corpus_assets.assets.dedup.dedup_clusters import dedup_clusters
from corpus_assets.assets.dedup.minhash_signatures import minhash_signatures
from corpus_assets.assets.splits_tokens.splits import splits_asset
from corpus_assets.assets.splits_tokens.tokenizer import tokenizer_asset
from corpus_assets.assets.splits_tokens.token_views import token_views_asset
from corpus_assets.assets.mixtures_packing.mixture_plan import mixture_plan_asset
from corpus_assets.assets.mixtures_packing.packed_shards import packed_shards_asset
from corpus_assets.assets.releases.release_manifest import release_manifest_asset
from corpus_assets.assets.curation.eval_registry import eval_registry
from corpus_assets.assets.ingestion.raw_snapshot import raw_snapshot

snapshot_job = dg.define_asset_job(
    "snapshot_job",
    selection=dg.AssetSelection.assets(raw_snapshot, canonical_records, curated_records, minhash_signatures),
    description="Capture (or verify) one snapshot partition, canonicalize, curate and sign it.",
)

registry_job = dg.define_asset_job(
    "registry_job",
    selection=dg.AssetSelection.assets(eval_registry),
    description="Rebuild the frozen evaluation registry from the benchmark files in curation.yaml.",
)

release_job = dg.define_asset_job(
    "release_job",
    selection=dg.AssetSelection.assets(dedup_clusters, splits_asset, tokenizer_asset, token_views_asset, mixture_plan_asset, packed_shards_asset, release_manifest_asset),
    description="Build the release-level layers of one release partition: dedup clusters, splits, tokenizer, token views, mixture plan, packed shards, and publish it (release manifest).",
)

reports_job = dg.define_asset_job(
    "reports_job",
    selection=dg.AssetSelection.groups("reports"),
    description="Recompute the SQL report models over the current layer versions.",
)
