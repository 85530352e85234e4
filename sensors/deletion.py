"""Deletion requests: the ``deletion_requests`` sensor and the ``deletion_purge_job`` it launches.

Every request moves through durable states in the catalog (``deletion_requests.status``), one
step per sensor tick, so a sensor restarted at any point resumes from the catalog and never
loses or repeats work:

1. ``received``  → resolve lineage (aliases, clusters, near edges, token views, shards, releases),
   write tombstones (ids and digests only) → ``resolved``. The builds it reaches (published or
   superseded, read from each build's own lineage file) are recorded in the request's detail.
2. ``resolved``  → request ONE purge run (``deletion_purge_job``, run key ``purge:<id>``) →
   ``runs_requested``. The purge rewrites every snapshot partition holding a tombstoned record
   (raw, canonical, curated, signatures) and the token-view cache, and drops old versions so the
   deleted text does not linger.
3. ``runs_requested`` + purge run succeeded → request a ``release_job`` run for every affected
   release (run key ``rebuild:<id>:<release>``).
4. every rebuild succeeded → revoke every build the request reaches, found again from the
   builds' lineage (so one published in the meantime is caught and its release rebuilt first),
   with a pointer to the successor, the request id and every training run that consumed any of
   them; withdraw their shards → ``applied``.

Whether a run exists is read from the Dagster instance by tag, not from the cursor, and run keys
make the daemon drop a duplicate request: applying a request twice is impossible, losing one
requires losing the catalog. Storage deletion does not undo what a model learned: the affected
runs are listed, and the detail says so.
"""

import functools
import json

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationTargetMaterializationData
from dagster._core.definitions.data_version import CODE_VERSION_TAG, DATA_VERSION_TAG
from pydantic import Field

from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.key_figures import stored_key_figures
from corpus_assets.metadata import standard_metadata
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.deletion.requests import get, load_drop_folder, pending, set_status
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.deletion.purge import purge_release_partitions, purge_snapshot
from corpus_assets.domain.layers import registry as layer_registry
from corpus_assets.domain.layers.registry import Partitioning
from corpus_assets.domain.release.build import drop_release_history, withdraw_revoked
from corpus_assets.domain.release.registry import PUBLISHED, consumers, current_published, reconcile, revoke
from corpus_assets.domain.core.settings import catalog_path, corpus_home, dedup_path
from corpus_assets.domain.dedup.signatures_layer import load_dedup_file
from corpus_assets.domain.deletion.builds import builds_reached
from corpus_assets.domain.deletion.tombstones import load_tombstones, resolve, write_tombstones
from corpus_assets.assets.curation.eval_registry import load_current_registry
from corpus_assets.domain.curate.decontam.eval_registry import EvalRegistry
from corpus_assets.layer_checks import stored_checks
from resources.curation import CurationResource
from sensors.jobs import release_job

TAG_REQUEST = "corpus/deletion_request"
TAG_STEP = "corpus/deletion_step"
MODEL_NOTE = ("Deleting data from storage does not remove what a model already learned from it; "
              "the training runs listed consumed a revoked version and need a separate assessment.")


def drop_folder():
    return DataRoot(corpus_home()).deletion_requests


def _catalog() -> Catalog:
    return Catalog.at(catalog_path())


class PurgeConfig(dg.Config):
    request_id: str = Field(description="the deletion request whose tombstones are applied")


@dg.op(description="Rewrite every snapshot partition and the token-view cache without tombstoned records; "
                   "drop every older version the request could reach, and abandoned staging.")
def purge_deleted_records(context: dg.OpExecutionContext, config: PurgeConfig) -> dict:
    home = corpus_home()
    store = LayerStore.from_env(home)
    cat = _catalog()
    tombs = load_tombstones(cat)
    request_ids = [config.request_id]
    req = get(cat, config.request_id)
    purged = []
    chain = layer_registry.rewritten_on_deletion(Partitioning.SNAPSHOTS)
    snapshots = sorted({p for la in chain for p in store.partitions(la.asset)})
    for i, snap in enumerate(snapshots, 1):
        result = purge_snapshot(store, snap, tombs, request_ids=request_ids)
        if result.get("affected"):
            purged.append(snap)
            for asset, moved in result["versions"].items():
                _log_purged(context, asset, snap, store, moved, config.request_id)
            context.log.info(f"purge {config.request_id}: {snap} rewritten ({i}/{len(snapshots)} partitions scanned)")
    # Older versions are history, not data: drop every one the request could reach, purged now or
    # not (an older version may hold what no current version does), in every snapshot layer.
    history = dropped_history(store, snapshots, req)
    cache = purge_release_partitions(store, tombs, request_ids)
    for asset, partitions in cache.items():
        for release, moved in partitions.items():  # every pointer the purge moved is a Dagster event
            _log_purged(context, asset, release, store, moved, config.request_id)
    for la in layer_registry.rewritten_on_deletion(Partitioning.RELEASES):
        for release in store.partitions(la.asset):
            history["versions"] += len(store.drop_versions(la.asset, release))
    if store.remote is not None:
        history["cache_entries"] = len(store.prune_cache())
    context.log.info(f"purge {config.request_id}: {len(purged)} snapshot partition(s) purged; release layers rewritten "
                     f"in place: {cache}; older versions dropped: {history['versions']} in {history['partitions']} "
                     f"partition(s)")
    rewritten = sorted({(asset, snap) for snap in purged for asset in (la.asset for la in chain)
                        if store.current_version_name(asset, snap) is not None})
    return {"snapshots": purged, "release_layers": cache, "history": history, "rewritten": rewritten}


@dg.op(description="Run the asset checks of every snapshot partition the purge rewrote, against the purge's "
                   "materializations: the same checks, through the same code (corpus_assets/layer_checks.py), as a "
                   "normal materialization.")
def check_purged_layers(context: dg.OpExecutionContext, purge: dict, curation: CurationResource) -> None:
    store = LayerStore.from_env(corpus_home())

    @functools.lru_cache(maxsize=1)
    def policy():
        cfg = curation.load()
        return cfg, (load_current_registry(store) if cfg.decontam.enabled else EvalRegistry(()))

    failed = []
    for asset, partition in purge["rewritten"]:
        results = stored_checks(asset, store, partition, curation=policy)
        if not results:
            continue
        records = context.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1).records
        target = AssetCheckEvaluationTargetMaterializationData(
            storage_id=records[0].storage_id, run_id=records[0].run_id, timestamp=records[0].timestamp) if records else None
        for r in results:
            context.log_event(dg.AssetCheckEvaluation(
                asset_key=dg.AssetKey(asset), check_name=r.check_name, passed=r.passed, metadata=r.metadata,
                severity=r.severity, partition=partition, target_materialization_data=target))
            if not r.passed:
                failed.append(f"{asset}[{partition}].{r.check_name}")
    context.log.info(f"checks of {len(purge['rewritten'])} purged partition version(s): "
                     + (f"FAILED {', '.join(failed)}" if failed else "all passed"))


@functools.lru_cache(maxsize=1)
def _code_versions() -> dict[str, str]:
    """asset -> code version, from the project's definitions (what a normal materialization records)."""
    from corpus_assets.definitions import build_definitions  # at call time: definitions imports this module

    graph = build_definitions().resolve_asset_graph()
    return {k.to_user_string(): graph.get(k).code_version for k in graph.get_all_asset_keys() if graph.get(k).code_version}


def _log_purged(context, asset: str, partition: str, store: LayerStore, moved: dict, request_id: str) -> None:
    """A materialization for a partition the purge rewrote, with what a normal one carries: data
    version (its content digest, so staleness stays right), code version, row counts and column
    schema, the key figures (key_figures.py, the code the assets use) and the registry's manifest
    counts. Its checks follow in check_purged_layers."""
    v = store.current(asset, partition)  # the key figures read its decision record
    if v is None:
        return
    la = layer_registry.layer(asset)
    tags = {DATA_VERSION_TAG: v.content_digest}
    code_version = _code_versions().get(asset)
    if code_version:
        tags[CODE_VERSION_TAG] = code_version
    metadata = {"version": v.version, "content_digest": v.content_digest, "deletion_request": request_id,
                "purged_from_version": moved.get("from", ""),
                "removed_rows": dg.MetadataValue.json(moved.get("removed_rows", {}))}
    metadata.update(standard_metadata(v))
    metadata.update(stored_key_figures(v))  # the same figures, from the same code, as the asset's own materialization
    for key in la.manifest_counts:
        value = v.manifest.get(key)
        if isinstance(value, int):
            metadata[key] = dg.MetadataValue.int(value)
        elif isinstance(value, (dict, list)):
            metadata[key] = dg.MetadataValue.json(value)
    context.log_event(dg.AssetMaterialization(asset_key=asset, partition=partition, tags=tags, metadata=metadata,
                                              description=f"purged by deletion request {request_id}"))


def dropped_history(store: LayerStore, snapshots: list[str], req) -> dict:
    """Drop every non-current version of the snapshot layers in the partitions ``req`` can reach:
    its source's snapshots for a withdrawal, every snapshot for a content takedown."""
    source = req.target.split(":", 1)[0] if req.kind == "record" else req.target if req.kind == "source" else None
    out = {"partitions": 0, "versions": 0}
    for snap in snapshots:
        if source is not None and snap.split(".", 1)[0] != source:
            continue
        n = sum(len(store.drop_versions(la.asset, snap)) for la in layer_registry.snapshot_layers()
                if store.current_version_name(la.asset, snap) is not None)
        out["partitions"] += 1 if n else 0
        out["versions"] += n
    return out


@dg.job(name="deletion_purge_job",
        description="Apply one deletion request's tombstones to every snapshot layer and the token-view cache.")
def deletion_purge_job():
    check_purged_layers(purge_deleted_records())


def _runs(instance: dg.DagsterInstance, request_id: str, step: str) -> list:
    return list(instance.get_runs(filters=dg.RunsFilter(tags={TAG_REQUEST: request_id, TAG_STEP: step})))


def _succeeded(runs) -> bool:
    return any(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)


def _failed(runs) -> bool:
    return bool(runs) and all(r.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED) for r in runs)


@dg.sensor(
    name="deletion_requests",
    jobs=[deletion_purge_job, release_job],
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=(
        "Carries deletion requests (catalog and the `$CORPUS_HOME/deletion_requests` drop folder) to every "
        "derived artifact: resolve lineage, write tombstones, purge snapshot layers and the token-view "
        "cache, rebuild affected releases, revoke their old versions and list the training runs that "
        "consumed them. One durable step per request per tick; idempotent."
    ),
)
def deletion_requests_sensor(context: dg.SensorEvaluationContext):
    cat = _catalog()
    store = LayerStore.from_env(corpus_home())
    # a crash between publishing a build and registering it leaves the registry behind CURRENT:
    # settle that before this tick resolves or applies anything from the registry
    for line in reconcile(cat, store.root.releases, remote=store.remote).lines():
        context.log.warning(line)
    accepted, rejected = load_drop_folder(cat, drop_folder())
    done: list[str] = []  # what this tick did, for the tick's summary (the UI shows it, not "empty result")
    if rejected:
        done.append(f"rejected {len(rejected)} drop file(s)")
    for name, error in rejected:
        context.log.warning(f"deletion request file {name} rejected: {error}")
    if accepted:
        done.append(f"filed {', '.join(accepted)}")
        context.log.info(f"deletion requests filed from the drop folder: {', '.join(accepted)}")
    requests: list[dg.RunRequest] = []
    for req in pending(cat):
        rid = req.request_id
        if req.status == "received" or (req.status == "resolved" and not req.detail()):
            # (a crash after the tombstones were written but before the detail was: redo it —
            # write_tombstones is idempotent per request and the layers are not purged yet)
            _resolve(context, cat, store, req)
            done.append(f"resolved {rid}")
            continue
        detail = req.detail()
        purge_runs = _runs(context.instance, rid, "purge")
        if req.status == "resolved":
            set_status(cat, rid, "runs_requested", req.status_detail)
        if not purge_runs:
            # the run key makes the daemon drop a second request for the same purge
            requests.append(dg.RunRequest(
                run_key=f"purge:{rid}", job_name="deletion_purge_job",
                run_config={"ops": {"purge_deleted_records": {"config": {"request_id": rid}}}},
                tags={TAG_REQUEST: rid, TAG_STEP: "purge"},
            ))
            continue
        if _failed(purge_runs):
            context.log.error(f"{rid}: the purge run failed; fix the cause and re-execute run {purge_runs[0].run_id}")
            continue
        if not _succeeded(purge_runs):
            continue  # still running
        releases = detail.get("releases", [])
        waiting = False
        for release in releases:
            runs = [r for r in _runs(context.instance, rid, "rebuild") if r.tags.get("dagster/partition") == release]
            if not runs:
                requests.append(dg.RunRequest(
                    run_key=f"rebuild:{rid}:{release}", job_name="release_job", partition_key=release,
                    tags={TAG_REQUEST: rid, TAG_STEP: "rebuild"},
                ))
                waiting = True
            elif _failed(runs):
                context.log.error(f"{rid}: the rebuild of release {release} failed (run {runs[0].run_id})")
                waiting = True
            elif not _succeeded(runs):
                waiting = True
        if waiting:
            continue
        if not _apply(context, cat, store, rid, detail):
            continue
        done.append(f"applied {rid} ({sum(len(v) for v in detail['revoked'].values())} build(s) revoked)")
        context.log.info(f"{rid}: applied; releases rebuilt: {detail['releases'] or 'none'}; builds revoked: "
                         f"{sum(len(v) for v in detail['revoked'].values())}; "
                         f"affected training runs: {detail.get('affected_runs') or 'none'}")
    if requests:
        return dg.SensorResult(run_requests=requests)
    return dg.SensorResult(skip_reason="; ".join(done) if done else "no deletion request waits for a step")


def _reached(context, cat: Catalog, store: LayerStore, rid: str):
    # builds other machines published are read from the bucket, not counted as unknown (reached)
    return builds_reached(cat, corpus_home(), load_tombstones(cat, [rid]), log=context.log.warning, remote=store.remote)


def _apply(context, cat: Catalog, store: LayerStore, rid: str, detail: dict) -> bool:
    """Revoke every build the request reaches — published or superseded, of any release — once
    the releases it names are rebuilt; False (and the reason logged) while that is not the case."""
    reached = _reached(context, cat, store, rid)
    current = {b.release: current_published(cat, b.release) for b in reached}
    live = [b for b in reached if current[b.release] is not None and current[b.release]["build_id"] == b.build_id]
    late = sorted({b.release for b in live} - set(detail.get("releases", [])))
    if late:
        # published after the request was resolved, from layers not yet purged: rebuild those too
        detail["releases"] = sorted(set(detail.get("releases", [])) | set(late))
        set_status(cat, rid, "runs_requested", json.dumps(detail, sort_keys=True))
        context.log.warning(f"{rid}: the current build of {', '.join(late)} names tombstoned records; rebuilding")
        return False
    if live:
        names = ", ".join(f"{b.release} {b.build_id[:16]}" for b in live)
        context.log.error(f"{rid}: the rebuilt build(s) {names} still name tombstoned records; the purge missed "
                          "something — inspect `corpus layers` and the purge run before re-executing")
        return False
    for release in detail.get("releases", []):
        context.log.info(f"{rid}: release {release}: older layer versions and shard sets dropped: "
                         f"{drop_release_history(store, release)}")
    runs = set(detail.get("affected_runs", []))
    for b in reached:
        runs |= {c["run_id"] for c in consumers(cat, b.release, b.build_id)}
    revoked: dict[str, list[str]] = {}
    for b in reached:
        successor = current[b.release]["build_id"] if current[b.release] is not None else None
        revoke(cat, b.release, b.build_id, successor_build_id=successor, request_ids=[rid],
               affected_runs=sorted(runs), note=MODEL_NOTE)
        gone = withdraw_revoked(store, store.root.releases, b.release, b.build_id, successor=successor, request_ids=[rid])
        revoked.setdefault(b.release, []).append(b.build_id)
        context.log.info(f"{rid}: release {b.release} build {b.build_id[:16]} ({b.status}; {b.records} tombstoned "
                         f"record(s), from its {b.evidence}) revoked -> {str(successor)[:16]}; {gone}")
    detail.update(applied=True, revoked=revoked, affected_runs=sorted(runs), note=MODEL_NOTE if runs else "")
    set_status(cat, rid, "applied", json.dumps(detail, sort_keys=True))
    return True


def _resolve(context, cat: Catalog, store: LayerStore, req) -> None:
    rid = req.request_id
    resolution = resolve(store, req, near_policy=load_dedup_file(dedup_path()).minhash)
    generation = write_tombstones(cat, rid, resolution)
    summary = resolution.summary()
    reached = _reached(context, cat, store, rid)
    builds: dict[str, list[str]] = {}
    published: dict[str, list[str]] = {}
    for b in reached:
        builds.setdefault(b.release, []).append(b.build_id)
        if b.status == PUBLISHED:
            published.setdefault(b.release, []).append(b.build_id)
    # rebuilt: releases whose current layers name a tombstoned record, and those whose published build does
    rebuild = sorted(set(summary["releases"]) | {b.release for b in reached if b.status == PUBLISHED})
    runs = sorted({c["run_id"] for b in reached for c in consumers(cat, b.release, b.build_id)})
    detail = {"copies": summary["copies"], "record_ids": summary["record_ids"], "scope": summary["scope"],
              "raw_items": summary["raw_items_matched"],
              "releases": rebuild, "builds": builds, "published_builds": published, "affected_runs": runs, "note": MODEL_NOTE if runs else ""}
    set_status(cat, rid, "resolved", json.dumps(detail, sort_keys=True), generation=generation)
    context.log.info(f"{rid}: {summary['copies']} record copies and {len(resolution.raw_items)} raw item(s) that are "
                     f"no record {summary['raw_items_matched'] or ''} tombstoned (generation {generation}); "
                     f"releases to rebuild: {rebuild or 'none'}; builds reached: "
                     f"{ {r: [b[:16] for b in v] for r, v in builds.items()} or 'none'}; training runs affected: {runs or 'none'}")
