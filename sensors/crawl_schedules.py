"""Scheduled incremental captures: the schedule only schedules, runs do the work.

One schedule per source that declares a cron in sources.yaml. A tick decides the snapshot key
from its scheduled time and requests one ``capture_job`` run for it (run key = the snapshot key,
so a retried tick requests nothing new); it crawls nothing, writes nothing and adds no partition,
so the UI's "Preview tick result" is free and a crawl of any size is bounded by its run, not by
the daemon's evaluation timeout.

The run captures the source against the crawl state (conditional GET, then content digest for
crawls). Only when something is new, changed or removed does it keep the capture, register it in
the catalog and add the snapshot partition; otherwise it remembers refreshed validators and ends
with the reason. The ``captured_snapshots`` sensor then requests the ``snapshot_job`` run that
materializes each captured partition (which reuses and verifies the captured raw version).
"""

from datetime import datetime, timezone

import dagster as dg
from pydantic import Field

from corpus_assets.assets.ingestion.raw_snapshot import commit_capture_to_catalog
from corpus_assets.domain.core.keys import InvalidKeyError, parse_snapshot_key, snapshot_key
from corpus_assets.domain.ingest.capture import capture_snapshot
from corpus_assets.domain.layers.registry import RAW_SNAPSHOT
from corpus_assets.domain.core.settings import corpus_home
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.partitions import snapshots_partitions
from resources.catalog import CatalogResource
from resources.sources import SourcesResource
from resources.storage import StorageResource
from sensors.jobs import snapshot_job

TAG_SOURCE = "corpus/source"
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED]
TAG_SNAPSHOT = "corpus/snapshot"


def capture_schedule_name(source_id: str) -> str:
    return f"capture_{source_id}"


class CaptureConfig(dg.Config):
    snapshot: str = Field(description="the snapshot key to capture into: <source_id>.<YYYYMMDDTHHMMSS> (UTC)")


@dg.op(description="Capture one source incrementally into a new snapshot; keep it (catalog row and "
                   "partition) only when documents are new, changed or removed.")
def capture_source(context: dg.OpExecutionContext, config: CaptureConfig, storage: StorageResource,
                   catalog: CatalogResource, sources: SourcesResource) -> dict:
    key = config.snapshot
    source_id, _ = parse_snapshot_key(key)  # a bad key fails here, before anything is written
    source = sources.load().get(source_id)
    store = storage.store()
    if context.instance.has_dynamic_partition(snapshots_partitions.name, key) or store.current(RAW_SNAPSHOT, key):
        context.log.info(f"snapshot {key} already exists; nothing to capture")
        return {"snapshot": key, "committed": False, "reason": "already exists"}
    previous = catalog.catalog().crawl_state(source.id) if source.kind == "http_crawl" else None
    result = capture_snapshot(source, key, store, previous_state=previous, only_if_changed=True, log=context.log.info)
    if not result.committed:
        if result.state_updates:  # still remember refreshed validators and the frontier for the next run
            catalog.catalog().upsert_crawl_state(source.id, key, result.state_updates)
        context.log.info(f"{source.id}: nothing new, changed or removed ({result.stats}); no snapshot kept")
        return {"snapshot": key, "committed": False, "reason": "nothing new, changed or removed", "stats": result.stats}
    commit_capture_to_catalog(catalog, source, result)
    context.instance.add_dynamic_partitions(snapshots_partitions.name, [key])
    context.log.info(f"{source.id}: captured {result.items} items into {key}; the captured_snapshots sensor "
                     "requests its materialization")
    return {"snapshot": key, "committed": True, "items": result.items}


@dg.job(name="capture_job", description="Capture one snapshot of a source (scheduled incremental crawl); "
                                        "adds the snapshot partition only when something changed.")
def capture_job():
    capture_source()


def build_capture_schedule(source_id: str, cron: str, kind: str) -> dg.ScheduleDefinition:
    @dg.schedule(
        name=capture_schedule_name(source_id),
        cron_schedule=cron,
        job=capture_job,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=(
            f"Incremental capture of source '{source_id}' ({kind}): requests a capture_job run; the run "
            "adds a snapshot partition only when documents are new, changed or removed."
        ),
    )
    def _schedule(context: dg.ScheduleEvaluationContext):
        when = context.scheduled_execution_time or datetime.now(timezone.utc)
        key = snapshot_key(source_id, when.astimezone(timezone.utc))
        if context.instance.has_dynamic_partition(snapshots_partitions.name, key):
            return dg.SkipReason(f"snapshot {key} already exists")
        return dg.RunRequest(
            run_key=key,
            run_config={"ops": {"capture_source": {"config": {"snapshot": key}}}},
            tags={TAG_SOURCE: source_id, TAG_SNAPSHOT: key},
        )

    return _schedule


def build_capture_schedules(sources_file) -> list[dg.ScheduleDefinition]:
    return [
        build_capture_schedule(s.id, s.schedule, s.kind) for s in sources_file.sources if s.schedule is not None
    ]


@dg.sensor(
    name="captured_snapshots",
    job=snapshot_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Requests the snapshot_job run of every snapshot partition that holds a captured raw "
                "version but was never materialized (a scheduled capture, a capture whose run was lost).",
)
def captured_snapshots_sensor(context: dg.SensorEvaluationContext):
    keys = context.instance.get_dynamic_partitions(snapshots_partitions.name)
    done = context.instance.get_materialized_partitions(dg.AssetKey(RAW_SNAPSHOT))
    store = LayerStore.from_env(corpus_home())
    captured = set(store.partitions(RAW_SNAPSHOT))  # one listing, not one lookup per key (100k keys: docs/benchmarks.md)
    requests, invalid = [], []
    for key in sorted(set(keys) - set(done)):
        try:
            parse_snapshot_key(key)
        except InvalidKeyError:
            invalid.append(key)
            continue
        if key not in captured:
            continue  # added by hand and never captured: materializing it is the user's call
        if context.instance.get_runs(filters=dg.RunsFilter(tags={"dagster/partition": key}, statuses=_IN_FLIGHT), limit=1):
            continue  # a run (a backfill, `corpus snapshot`) is materializing it right now
        requests.append(dg.RunRequest(run_key=f"materialize:{key}", partition_key=key,
                                      tags={TAG_SNAPSHOT: key, TAG_SOURCE: key.split(".", 1)[0]}))
    if invalid:
        context.log.warning(f"snapshot partitions that are not snapshot keys (remove them with "
                            f"`corpus partitions prune`): {', '.join(map(repr, invalid))}")
    if requests:
        context.log.info(f"materializing captured snapshot(s): {', '.join(r.partition_key for r in requests)}")
        return dg.SensorResult(run_requests=requests)
    return dg.SkipReason("no captured snapshot waits for its materialization")
