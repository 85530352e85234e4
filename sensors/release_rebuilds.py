"""The ``release_rebuilds`` sensor: published releases and the SQL reports kept current.

A release that was built at least once and whose spec says ``rebuild: on_new_snapshots`` (the
default) is rebuilt when what a rebuild would read — the snapshots its spec selects and their
layer versions, the evaluation registry, the tombstone generation, the spec itself — differs
from what its last build read (``release/freshness.py``; recorded in the latest
``release_manifest`` materialization). Debounced: at most one automatic rebuild per
``rebuild.min_interval_minutes``; never while a deletion request that may touch the release is
in flight (the deletion sensor rebuilds it itself), nor while a run of it is queued or running.
Every release with a valid spec (``manual`` ones too) has its fingerprint observed as the data
version of ``release_inputs[<release>]`` whenever it moves, which is what makes the release show
unsynced in the UI however many snapshot partitions it reads.
The reports are refreshed whenever a release was built, a snapshot materialized or a deletion
applied since the last refresh. Every run request carries its reason as a tag
(``corpus/rebuild_reason``) and in the tick log, so the UI's sensor page says why.
"""

import json
import time

import dagster as dg
from dagster._core.definitions.data_version import DATA_VERSION_TAG

from corpus_assets.domain.core.hashing import canonical_digest
from corpus_assets.domain.core.settings import catalog_path, corpus_home, releases_dir
from corpus_assets.domain.deletion.requests import pending
from corpus_assets.domain.deletion.tombstones import tombstone_generation
from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.registry import RELEASE_INPUTS, RELEASE_MANIFEST
from corpus_assets.domain.ingest.compacted import CompactedSelectionError
from corpus_assets.domain.release.freshness import INPUTS, fingerprint, input_components, what_changed
from corpus_assets.domain.release.registry import registry as release_registry
from corpus_assets.domain.release.spec import discover_release_specs
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.partitions import releases_partitions
from sensors.jobs import release_job, reports_job

TAG_REASON = "corpus/rebuild_reason"
_IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED]


def _last_build_inputs(instance: dg.DagsterInstance, release: str):
    """(inputs recorded by the latest release_manifest materialization of ``release``, its storage id)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(RELEASE_MANIFEST), asset_partitions=[release]), limit=1).records
    if not records:
        return None, None
    md = records[0].asset_materialization.metadata
    value = md.get(INPUTS)
    return (value.value if value is not None else {}), records[0].storage_id


def _last_observed(instance: dg.DagsterInstance, release: str):
    """The data version of the latest release_inputs observation of ``release`` (None: never observed)."""
    records = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(RELEASE_INPUTS), asset_partitions=[release]), limit=1).records
    return records[0].asset_observation.tags.get(DATA_VERSION_TAG) if records else None


def _deletions_in_flight(cat: Catalog) -> tuple[bool, set[str]]:
    """(a request not resolved yet, so any release may be affected; releases named by resolved ones)."""
    unresolved, named = False, set()
    for req in pending(cat):
        if req.status == "received":
            unresolved = True
            continue
        named |= set(req.detail().get("releases", []))
    return unresolved, named


def _in_flight(instance: dg.DagsterInstance, job: str, tags: dict) -> bool:
    return bool(instance.get_runs(filters=dg.RunsFilter(job_name=job, tags=tags, statuses=_IN_FLIGHT), limit=1))


def _reports_fingerprint(instance: dg.DagsterInstance, cat: Catalog) -> str:
    """Changes whenever a layer was materialized, a tombstone written or a build's status moved."""
    latest = {}
    for la in registry.LAYERS:
        records = instance.fetch_materializations(dg.AssetKey(la.asset), limit=1).records
        latest[la.asset] = records[0].storage_id if records else None
    statuses = sorted((r["release"], r["build_id"], r["status"]) for r in release_registry(cat))
    return canonical_digest({"layers": latest, "tombstones": tombstone_generation(cat), "registry": statuses})


@dg.sensor(
    name="release_rebuilds",
    jobs=[release_job, reports_job],
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "Rebuilds a published release (spec `rebuild: on_new_snapshots`, the default) when its inputs "
        "changed — new or rebuilt snapshots, the evaluation registry, tombstones, the spec — at most once "
        "per `rebuild.min_interval_minutes` and never during a deletion; refreshes the SQL reports after "
        "builds, captures and deletions. The reason is in each run's `corpus/rebuild_reason` tag."
    ),
)
def release_rebuilds_sensor(context: dg.SensorEvaluationContext):
    instance = context.instance
    cat = Catalog.at(catalog_path())
    store = LayerStore.from_env(corpus_home())
    state = json.loads(context.cursor) if context.cursor else {}
    last_requested: dict = state.get("releases", {})
    now = time.time()
    specs, _ = discover_release_specs(releases_dir())  # invalid specs are the release_specs sensor's to report
    generation = tombstone_generation(cat)
    unresolved, deleting = _deletions_in_flight(cat)
    requests: list[dg.RunRequest] = []
    observations: list[dg.AssetObservation] = []
    for name in sorted(instance.get_dynamic_partitions(releases_partitions.name)):
        spec = specs.get(name)
        if spec is None:
            continue
        try:
            inputs = input_components(store, spec, generation)
        except CompactedSelectionError as exc:  # the spec names what compaction folded: the other releases go on
            context.log.warning(f"{name}: {exc}")
            continue
        built, _ = _last_build_inputs(instance, name)
        reasons = what_changed(built, inputs) if built is not None else ["never built"]
        current = fingerprint(inputs)
        if current != _last_observed(instance, name):
            # what the UI's staleness reads, past Dagster's 100-partition walk (assets/releases/release_inputs.py)
            observations.append(dg.AssetObservation(
                asset_key=RELEASE_INPUTS, partition=name, tags={DATA_VERSION_TAG: current},
                metadata={"changed_since_last_build": dg.MetadataValue.md(
                    "\n".join(f"- {r}" for r in reasons) if reasons else "_nothing_"),
                    "snapshots": dg.MetadataValue.int(len(inputs["snapshots"]))}))
            context.log.info(f"{name}: observed release_inputs {current[:16]} ({'; '.join(reasons) or 'as last built'})")
        if spec.rebuild.mode == "manual" or built is None:
            continue  # manual: the user rebuilds; never built: the first build is the user's call
        if not reasons or not inputs["snapshots"]:
            continue
        reason = "; ".join(reasons)
        wait = last_requested.get(name, 0) + 60 * spec.rebuild.min_interval_minutes - now
        if unresolved or name in deleting:
            context.log.info(f"{name}: inputs changed ({reason}); waiting for the deletion in flight to rebuild it")
        elif _in_flight(instance, "release_job", {"dagster/partition": name}):
            context.log.info(f"{name}: inputs changed ({reason}); a run of it is already queued or running")
        elif wait > 0:
            context.log.info(f"{name}: inputs changed ({reason}); debounced, next rebuild in {wait / 60:.1f} min")
        else:
            requests.append(dg.RunRequest(
                run_key=f"rebuild:{name}:{fingerprint(inputs)[:16]}", job_name="release_job", partition_key=name,
                tags={TAG_REASON: reason[:500]}))
            last_requested[name] = now
            context.log.info(f"{name}: rebuilding: {reason}")
    reports = _reports_fingerprint(instance, cat)
    built_any = bool(instance.fetch_materializations(dg.AssetKey(RELEASE_MANIFEST), limit=1).records)
    if built_any and reports != state.get("reports") and not requests and not _in_flight(instance, "release_job", {}) \
            and not _in_flight(instance, "reports_job", {}):
        requests.append(dg.RunRequest(run_key=f"reports:{reports[:16]}", job_name="reports_job",
                                      tags={TAG_REASON: "layers, tombstones or the registry changed"}))
        state["reports"] = reports
        context.log.info("refreshing the SQL reports: layers, tombstones or the registry changed")
    state["releases"] = last_requested
    cursor = json.dumps(state, sort_keys=True)
    if not requests and not observations:
        return dg.SensorResult(skip_reason="every published release is current (or waiting, see the log)", cursor=cursor)
    return dg.SensorResult(run_requests=requests, asset_events=observations, cursor=cursor)
