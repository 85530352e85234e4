"""The one Definitions object of corpus (loaded by workspace.yaml and [tool.dagster])."""


import dagster as dg

from corpus_assets.canonical_records import canonical_records
from corpus_assets.curated_records import curated_records
from corpus_assets.dedup_clusters import dedup_clusters
from corpus_assets.minhash_signatures import minhash_signatures
from corpus_assets.splits_asset import splits_asset
from corpus_assets.tokenizer_asset import tokenizer_asset
from corpus_assets.token_views_asset import token_views_asset
from corpus_assets.mixture_plan_asset import mixture_plan_asset
from corpus_assets.packed_shards_asset import packed_shards_asset
from corpus_assets.release_manifest_asset import release_manifest_asset
from corpus_assets.eval_registry import eval_registry
from corpus_assets.domain.settings import corpus_home
from corpus_assets.raw_snapshot import raw_snapshot
from corpus_assets.sql_assets import load_sql_assets
from resources.catalog import CatalogResource
from resources.curation import CurationResource
from resources.releases import ReleasesResource
from resources.sources import SourcesResource
from resources.storage import StorageResource
from sensors.crawl_schedules import build_capture_schedules
from sensors.jobs import registry_job, release_job, reports_job, snapshot_job
from sensors.deletion import deletion_purge_job, deletion_requests_sensor
from sensors.release_specs import release_specs_sensor


def build_definitions() -> dg.Definitions:
    sources = SourcesResource()
    return dg.Definitions(
        assets=[raw_snapshot, canonical_records, eval_registry, curated_records, minhash_signatures, dedup_clusters, splits_asset, tokenizer_asset, token_views_asset, mixture_plan_asset, packed_shards_asset, release_manifest_asset,
                *load_sql_assets()],
        jobs=[snapshot_job, registry_job, release_job, reports_job, deletion_purge_job],
        schedules=build_capture_schedules(sources.load()),
        sensors=[release_specs_sensor, deletion_requests_sensor],
        resources={
            "storage": StorageResource(),
            "catalog": CatalogResource(database=str(corpus_home() / "catalog.duckdb")),
            "sources": sources,
            "curation": CurationResource(),
            "releases": ReleasesResource(),
        },
    )


defs = build_definitions()
