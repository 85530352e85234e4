"""The one Definitions object of corpus (loaded by workspace.yaml and [tool.dagster]).

The executor is chosen by configuration, never by code (docs/operations.md, "Distributed executor"):

- ``CORPUS_EXECUTOR`` unset, ``default`` or ``multiprocess``: Dagster's default executor (one
  process per step; run config may pick ``in_process``).
- ``CORPUS_EXECUTOR=in_process``: every step in the run's own process.
- ``CORPUS_EXECUTOR=k8s``: dagster-k8s ``k8s_job_executor`` (the ``k8s`` extra), one Kubernetes
  Job per step; see the Kubernetes section of docs/operations.md.
- ``CORPUS_EXECUTOR=dask``: ``resources/dask_executor.py`` (the ``distributed`` extra). Steps run
  on a Dask cluster: the scheduler at ``CORPUS_DASK_SCHEDULER`` (``tcp://host:8786``) when set,
  otherwise a ``LocalCluster`` started per run with ``CORPUS_DASK_WORKERS`` worker processes
  (default 2) on 127.0.0.1. Steps hand nothing to each other in memory: every asset reads and
  writes its layers through the LayerStore under ``CORPUS_HOME`` and returns a
  ``MaterializeResult``, so any worker that sees the same ``CORPUS_HOME`` (and ``DAGSTER_HOME``)
  can run any step.
"""

import os
from collections.abc import Mapping

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
from corpus_assets.assets.releases.release_inputs import release_inputs
from corpus_assets.assets.curation.eval_registry import eval_registry
from corpus_assets.domain.core.settings import catalog_path
from corpus_assets.assets.ingestion.raw_snapshot import raw_snapshot
from corpus_assets.assets.reports.sql_assets import load_sql_assets
from resources.catalog import CatalogResource
from resources.curation import CurationResource
from resources.releases import ReleasesResource
from resources.sources import SourcesResource
from resources.storage import StorageResource
from sensors.release_rebuilds import release_rebuilds_sensor
from sensors.crawl_schedules import build_capture_schedules, capture_job, captured_snapshots_sensor
from sensors.jobs import registry_job, release_job, reports_job, snapshot_job
from sensors.deletion import deletion_purge_job, deletion_requests_sensor
from sensors.release_specs import release_specs_sensor


EXECUTORS = ("default", "multiprocess", "in_process", "dask", "k8s")


def executor_from_env(env: Mapping[str, str] = os.environ) -> dg.ExecutorDefinition | None:
    """The executor named by ``CORPUS_EXECUTOR``. Unset / ``default``: in process — the layers of
    a run form a chain, so step processes buy no parallelism and cost a Python start and imports
    per step (docs/benchmarks.md#executor); ``multiprocess``: Dagster's (None)."""
    name = (env.get("CORPUS_EXECUTOR") or "default").strip().lower().replace("-", "_")
    if name not in EXECUTORS:
        raise ValueError(f"CORPUS_EXECUTOR={env.get('CORPUS_EXECUTOR')!r}: expected one of {', '.join(EXECUTORS)}")
    if name == "multiprocess":
        return None
    if name in ("default", "in_process"):
        return dg.in_process_executor
    if name == "k8s":
        try:
            from dagster_k8s import k8s_job_executor
        except ImportError as exc:
            raise ImportError("CORPUS_EXECUTOR=k8s needs dagster-k8s: pip install -e '.[k8s]'") from exc
        return k8s_job_executor  # one Kubernetes Job per step; configured by run config (docs/operations.md)
    try:
        from resources.dask_executor import corpus_dask_executor
    except ImportError as exc:
        raise ImportError("CORPUS_EXECUTOR=dask needs dask.distributed: pip install -e '.[distributed]'") from exc
    scheduler = (env.get("CORPUS_DASK_SCHEDULER") or "").strip()
    if scheduler:
        cluster = {"existing": {"address": scheduler}}
    else:
        workers = int(env.get("CORPUS_DASK_WORKERS") or 2)
        if workers < 1:
            raise ValueError(f"CORPUS_DASK_WORKERS={workers}: expected at least 1")
        cluster = {"local": {"n_workers": workers}}
    return corpus_dask_executor.configured({"cluster": cluster}, name="dask")


def build_definitions() -> dg.Definitions:
    sources = SourcesResource()
    return dg.Definitions(
        executor=executor_from_env(),
        assets=[raw_snapshot, canonical_records, eval_registry, curated_records, minhash_signatures, release_inputs, dedup_clusters, splits_asset, tokenizer_asset, token_views_asset, mixture_plan_asset, packed_shards_asset, release_manifest_asset,
                *load_sql_assets()],
        jobs=[snapshot_job, registry_job, release_job, reports_job, deletion_purge_job, capture_job],
        schedules=build_capture_schedules(sources.load()),
        sensors=[release_specs_sensor, deletion_requests_sensor, captured_snapshots_sensor, release_rebuilds_sensor],
        resources={
            "storage": StorageResource(),
            "catalog": CatalogResource(database=str(catalog_path())),
            "sources": sources,
            "curation": CurationResource(),
            "releases": ReleasesResource(),
        },
    )


defs = build_definitions()
