"""One schedule per source that declares a cron in sources.yaml: scheduled incremental captures.

A tick captures the source against the crawl state (conditional GET, then content digest for
crawls). Only when something is new, changed or removed does it keep the capture, add the
snapshot partition and request the run that materializes it; otherwise it skips with the reason.
"""


from datetime import datetime, timezone

import dagster as dg

from corpus_assets.domain.ingest.capture import capture_snapshot
from corpus_assets.domain.layers.registry import RAW_SNAPSHOT
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.partitions import snapshots_partitions
from corpus_assets.assets.ingestion.raw_snapshot import commit_capture_to_catalog
from resources.catalog import CatalogResource
from resources.sources import SourcesResource
from resources.storage import StorageResource
from sensors.jobs import snapshot_job


def capture_schedule_name(source_id: str) -> str:
    return f"capture_{source_id}"


def build_capture_schedule(source_id: str, cron: str, kind: str) -> dg.ScheduleDefinition:
    @dg.schedule(
        name=capture_schedule_name(source_id),
        cron_schedule=cron,
        job=snapshot_job,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=(
            f"Incremental capture of source '{source_id}' ({kind}). Adds a snapshot partition and "
            "requests its run only when documents are new, changed or removed."
        ),
    )
    def _schedule(
        context: dg.ScheduleEvaluationContext,
        storage: StorageResource,
        catalog: CatalogResource,
        sources: SourcesResource,
    ):
        source = sources.load().get(source_id)
        when = context.scheduled_execution_time or datetime.now(timezone.utc)
        key = snapshot_key(source.id, when.astimezone(timezone.utc))
        store = storage.store()
        if context.instance.has_dynamic_partition(snapshots_partitions.name, key) or store.current(RAW_SNAPSHOT, key):
            return dg.SkipReason(f"snapshot {key} already exists")
        previous = catalog.catalog().crawl_state(source.id) if source.kind == "http_crawl" else None
        result = capture_snapshot(
            source, key, store, previous_state=previous, only_if_changed=True, log=context.log.info
        )
        if not result.committed:
            # Still remember refreshed validators and the frontier left for the next tick.
            if result.state_updates:
                catalog.catalog().upsert_crawl_state(source.id, key, result.state_updates)
            return dg.SkipReason(f"{source.id}: nothing new, changed or removed ({result.stats})")
        commit_capture_to_catalog(catalog, source, result)
        context.instance.add_dynamic_partitions(snapshots_partitions.name, [key])
        context.log.info(f"{source.id}: captured {result.items} items into {key}; requesting its run")
        return dg.RunRequest(run_key=key, partition_key=key, tags={"corpus/source": source.id})

    return _schedule


def build_capture_schedules(sources_file) -> list[dg.ScheduleDefinition]:
    return [
        build_capture_schedule(s.id, s.schedule, s.kind) for s in sources_file.sources if s.schedule is not None
    ]
