"""release_manifest: publish the release (Algorithm 18.3) and register it."""

import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version as dist_version

import dagster as dg

from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.domain.core.faults import pause_point
from corpus_assets.domain.release.publish import ReleaseConflictError, ReleaseVerificationError, verify_release
from corpus_assets.domain.release.build import build_release
from corpus_assets.domain.deletion.clean_scans import known_clean, record_clean, tombstone_fingerprint
from corpus_assets.domain.deletion.purge import ScanCoverage, scan_for_tombstoned
from corpus_assets.domain.layers.registry import (
    CANONICAL_RECORDS, CURATED_RECORDS, DEDUP_CLUSTERS, EVAL_REGISTRY, MINHASH_SIGNATURES, MIXTURE_PLAN, RAW_SNAPSHOT, SPLITS,
    TOKEN_VIEWS, TOKENIZER,
)
from corpus_assets.domain.release.history import GRACE_VARIABLE, history_grace, prune_release_history
from corpus_assets.domain.release.freshness import INPUTS, INPUTS_FINGERPRINT, fingerprint, input_components
from corpus_assets.domain.release.inputs import release_snapshots
from corpus_assets.domain.release.registry import reconcile, register_published, registry
from corpus_assets.domain.deletion.tombstones import load_tombstones
from corpus_assets.domain.release.tombstone_history import earlier_tombstone_counts, record_build_tombstones
from corpus_assets.metadata import markdown_table
from corpus_assets.assets.mixtures_packing.packed_shards import packed_shards_asset
from corpus_assets.assets.releases.release_inputs import release_inputs
from corpus_assets.layer_checks import partition_check
from corpus_assets.partitions import every_snapshot, releases_partitions
from resources.catalog import CatalogResource
from resources.releases import ReleasesResource
from resources.sources import SourcesResource
from resources.storage import StorageResource

RELEASE_MANIFEST_CODE_VERSION = "release-manifest-1"


def package_version() -> str:
    try:
        return dist_version("corpus")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


@dg.asset(
    name="release_manifest",
    partitions_def=releases_partitions,
    pool="catalog_writer",  # opens catalog.duckdb, which one process at a time may hold (docs/operations.md)
    # the input fingerprint too (one to one), so the published release itself shows unsynced when it moves
    # and every layer whose digest enters the build id, or that the tombstone check scans
    deps=[packed_shards_asset, release_inputs, DEDUP_CLUSTERS, SPLITS, TOKENIZER, TOKEN_VIEWS, MIXTURE_PLAN, EVAL_REGISTRY,
          *every_snapshot(RAW_SNAPSHOT, CANONICAL_RECORDS, CURATED_RECORDS, MINHASH_SIGNATURES)],
    group_name="releases",
    kinds={"python", "json"},
    owners=["team:corpus"],
    code_version=RELEASE_MANIFEST_CODE_VERSION,
    description=(
        "Publishes the release by Algorithm 18.3: build id = digest of the complete build spec (release "
        "spec, code versions, input layer digests, tokenizer, eval registry, tombstone generation); the "
        "shards, manifest.json and data card are staged, verified and exposed by an atomic CURRENT "
        "pointer under `$CORPUS_HOME/releases/<release>/`. Same build id and content: reused; same build id "
        "with different content: conflict, nothing published. Registered in the release registry."
    ),
    check_specs=[
        partition_check("release_verifies", "release_manifest", releases_partitions,
                          description="every artifact re-hashes to its manifest digest (corpus verify)."),
        partition_check("no_tombstoned_records", "release_manifest", releases_partitions,
                          description="no current artifact of this release (its layers, its snapshots' layers, its "
                                      "shard spans) names a tombstoned record, URI, source or content digest."),
        partition_check("tombstones_never_shrink", "release_manifest", releases_partitions,
                          description="the tombstone table holds at least as many tombstones as any earlier build of "
                                      "this release applied: a rebuild never empties it."),
    ],
)
def release_manifest_asset(
    context: dg.AssetExecutionContext,
    storage: StorageResource,
    releases: ReleasesResource,
    sources: SourcesResource,
    catalog: CatalogResource,
):
    name = context.partition_key
    spec = releases.spec(name)
    grace = history_grace()  # a bad CORPUS_RELEASE_HISTORY_GRACE fails here, before anything is published
    store = storage.store()
    cat = catalog.catalog()
    # a crash after an earlier publish but before its registration left CURRENT and the registry
    # disagreeing: settle that before anything (the tombstone check below) trusts the registry.
    # One catalog connection for both (opened after reconcile has read the release directories).
    with cat.session():
        reconciled = reconcile(cat, store.root.releases, remote=store.remote)
        tombs = load_tombstones(cat)
        tombs_fp = tombstone_fingerprint(tombs) if len(tombs) else ""
        clean_before = known_clean(cat, tombs_fp) if len(tombs) else frozenset()
    for line in reconciled.lines():
        context.log.warning(line)
    governance = {s.id: {"kind": s.kind, **s.governance.model_dump(mode="json")} for s in sources.load().sources}
    try:
        built = build_release(
            store, name, release_spec=spec.as_written(), sources_governance=governance,
            releases_root=store.root.releases, package_version=package_version(),
            tombstone_generation=tombs.generation, tombstone_requests=list(tombs.request_ids), tombstone_count=len(tombs),
            log=context.log.info,
        )
    except ReleaseConflictError as exc:
        raise dg.Failure(description=str(exc), metadata={"diagnostics": dg.MetadataValue.path(str(exc.diagnostics))}) from exc
    r = built.result
    pause_point("release_manifest:published")  # CURRENT names the build (mirrored too), registry not written
    scan = _tombstone_scan(store, name, tombs, clean_before)
    # the registry rows tombstones_never_shrink reads are read on the same connection, right after
    with cat.session():
        row = register_published(cat, name, r.build_id, r.content_digest, str(r.path.relative_to(store.home)))
        record_build_tombstones(cat, name, r.build_id, built.manifest["tombstones"]["count"])
        registered = registry(cat, name)
        earlier = earlier_tombstone_counts(cat, name, r.build_id, registered, lambda row: _manifest_bytes(store, name, row))
        if scan.clean:
            record_clean(cat, tombs_fp, scan.clean)
    context.log.info(f"release {name}: build {r.build_id[:16]} {'reused' if r.reused else 'published'} at {r.path}")
    # what only older builds used goes once no run can still be reading it (domain/release/history.py)
    pruned = None if grace is None else prune_release_history(store, name, grace_seconds=grace, now=time.time(),
                                                                 log=context.log.info)
    if pruned is not None and (pruned.shard_sets_removed or any(pruned.dropped.values())):
        context.log.info(f"release {name}: older builds' history pruned ({GRACE_VARIABLE} {grace:g} s): {pruned.summary()}")
    try:
        # every check of `corpus verify` on the published directory; a file that is the same,
        # unchanged inode the publish's own verification just read and checked is not read again
        report = verify_release(r.path, known=r.verified)
        verify_error = None
    except ReleaseVerificationError as exc:
        report, verify_error = None, str(exc)
    m = built.manifest
    # what this build read, for the release_rebuilds sensor to compare with what a rebuild would read
    used = store.require_current(DEDUP_CLUSTERS, name).manifest["build_spec"]["snapshots"]
    inputs = input_components(store, spec, tombs.generation, snapshots=used)
    per_source = [(s["source_id"], s["source_records"], s["sampled_records"], s["materialized_tokens"], s["label_tokens"])
                  for s in m["sampling"]["per_source"]]
    yield dg.MaterializeResult(
        data_version=dg.DataVersion(r.content_digest),
        metadata={
            "build_id": r.build_id,
            "content_digest": r.content_digest,
            "reused": dg.MetadataValue.bool(r.reused),
            "status": row.get("status", "published"),
            "path": dg.MetadataValue.path(str(r.path)),
            "artifacts": dg.MetadataValue.int(len(r.artifacts)),
            "signed": dg.MetadataValue.bool(r.signed),
            "shards": dg.MetadataValue.int(len(m["shards"])),
            "tokenizer_digest": m["tokenizer"]["digest"],
            "tombstone_generation": dg.MetadataValue.int(m["tombstones"]["generation"]),
            "snapshots": dg.MetadataValue.md("\n".join(f"- {k}" for k in used)),
            INPUTS_FINGERPRINT: fingerprint(inputs),
            INPUTS: dg.MetadataValue.json(inputs),
            # the four denominators summed over sources, as numbers the UI plots per build
            **{k: dg.MetadataValue.int(sum(s[k] for s in m["sampling"]["per_source"]))
               for k in ("source_records", "sampled_records", "materialized_tokens", "label_tokens")},
            "four_denominators": dg.MetadataValue.md(markdown_table(
                ["source", "source records", "sampled records", "materialized tokens", "effective label tokens"], per_source)),
            "data_card": dg.MetadataValue.path(str(r.path / "data_card.md")),
            "history_pruned": dg.MetadataValue.json(pruned.summary() if pruned is not None else {"kept": "all (keep)"}),
            **({"object_store": dg.MetadataValue.url(store.remote.uri(DataRoot.release_key(name, r.build_id))),
                "object_store_upload": built.mirror} if store.remote is not None else {}),
        },
    )
    yield dg.AssetCheckResult(
        check_name="release_verifies", passed=verify_error is None,
        metadata={"files": dg.MetadataValue.int(report.files), "bytes": dg.MetadataValue.int(report.bytes)}
        if report else {"error": verify_error},
    )
    yield dg.AssetCheckResult(
        check_name="no_tombstoned_records", passed=not scan.hits,
        metadata={"tombstones": dg.MetadataValue.int(len(tombs)), "hits": dg.MetadataValue.json(scan.hits[:20]),
                  "versions_scanned": dg.MetadataValue.int(scan.scanned),
                  "versions_known_clean": dg.MetadataValue.int(scan.known)})
    above = {bid[:16]: n for bid, n in sorted(earlier.items()) if n > len(tombs)}
    yield dg.AssetCheckResult(
        check_name="tombstones_never_shrink", passed=not above,
        metadata={"tombstones_now": dg.MetadataValue.int(len(tombs)),
                  "earlier_builds": dg.MetadataValue.int(len(earlier)),
                  "earlier_max": dg.MetadataValue.int(max(earlier.values(), default=0)),
                  "builds_with_more": dg.MetadataValue.json(dict(list(above.items())[:20]))},
    )


@dataclass(frozen=True)
class _TombstoneScan:
    hits: list
    clean: list  # versions read and found clean, to remember
    scanned: int  # layer versions read
    known: int  # layer versions skipped: found clean against the same tombstones before


def _tombstone_scan(store, release: str, tombs, known) -> _TombstoneScan:
    """The no_tombstoned_records scan over the release's layers (its shard spans included: the
    published shards are hard links of the current shard set) and its snapshots' layers, skipping
    versions found clean against the same tombstone set before (deletion/clean_scans.py)."""
    if not len(tombs):
        return _TombstoneScan([], [], 0, 0)
    scope = {release, *release_snapshots(store.require_current(DEDUP_CLUSTERS, release))}
    cov = ScanCoverage()
    found = scan_for_tombstoned(store, tombs, partitions=scope, known_clean=known, coverage=cov)
    hits = [{k: f[k] for k in ("asset", "partition", "column", "value") if k in f} for f in found]
    return _TombstoneScan(hits, cov.clean, cov.read, cov.skipped)


def _manifest_bytes(store, release: str, row: dict):
    """A registered build's manifest: the local copy, or the object store's when this machine never
    held the build (None: neither)."""
    m = store.home / row["path"] / "manifest.json"
    if m.is_file():
        return m.read_bytes()
    if store.remote is not None:
        return store.remote.read_bytes(f"{DataRoot.release_key(release, row['build_id'])}/manifest.json")
    return None
