"""Publish one release: gather its inputs, compute the build id, stage its shards, write the
manifest and data card, publish by Algorithm 18.3 and register the version.

The build directory holds ``manifest.json``, optional ``manifest.sig`` and ``data_card.md``,
``shards/<split>/``, hard links into the immutable shard set of ``packed_shards`` where the
filesystem allows (else copies), and ``lineage/records.parquet``: every record copy the build was
built from (ids only), which is how a deletion finds every build it reaches. With an object-store data root the build is published locally
and mirrored by ``mirror``, which first pulls a build already sealed there.

Layout: docs/releases.md#building-a-release
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from corpus_assets.domain.core.data_root import DataRoot
from corpus_assets.domain.core.faults import pause_point
from corpus_assets.domain.storage.dir_locks import remove_abandoned
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.release.publish import PublishResult, build_id as compute_build_id, publish_release
from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.registry import DEDUP_CLUSTERS, PACKED_SHARDS
from corpus_assets.domain.pack.shards_layer import shard_set_name
from corpus_assets.domain.release.inputs import gather_release_inputs
from corpus_assets.domain.release.manifest import data_card_renderer, environment_digest, validate_manifest
from corpus_assets.domain.release.mirror import pull_release, push_release, withdraw_remote

KNOWN_LIMITS = [
    "Decontamination is n-gram containment against the frozen evaluation registry only; benchmarks "
    "outside it were not checked, and a pass is not a proof of absence.",
    "Quality filters are heuristics (Gopher, C4, FineWeb rules); they remove some good text and keep some bad.",
    "Near-duplicate detection is MinHash LSH with the recorded bands x rows; pairs below the threshold "
    "(or missed by LSH with the probability the policy states) remain.",
    "Deleting data from storage does not remove what a model already learned from it; runs that "
    "consumed a revoked release are listed in the release registry.",
]
REPORT_LINKS = {
    "stage accounting": "dagster asset `stage_accounting` (dbt_like_sql/stage_accounting.sql)",
    "decisions by reason": "dagster asset `decision_reasons` (dbt_like_sql/decision_reasons.sql)",
    "curation retention": "dagster asset `curation_retention` (dbt_like_sql/curation_retention.sql)",
    "contamination summary": "dagster asset `contamination_summary` (dbt_like_sql/contamination_summary.sql)",
    "duplicate clusters": "dagster asset `duplicate_clusters` (dbt_like_sql/duplicate_clusters.sql)",
    "split balance": "dagster asset `split_balance` (dbt_like_sql/split_balance.sql)",
    "mixture vs target": "dagster asset `mixture_vs_target` (dbt_like_sql/mixture_vs_target.sql)",
    "tombstones and revocations": "dagster asset `tombstones_and_revocations` (dbt_like_sql/tombstones_and_revocations.sql)",
}


@dataclass(frozen=True)
class ReleaseBuild:
    result: PublishResult
    build_spec: dict
    manifest: dict
    mirror: Optional[str] = None  # object store only: "uploaded" or "reused"


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def stage_shards(store: LayerStore, shard_rows: list[dict], tmp: Path) -> dict[str, tuple[str, int]]:
    """Link every file of every shard into ``tmp/shards/<split>/`` plus each split's shards.json.
    Returns the digests ``packed_shards`` recorded for the shard files (release path -> (sha256,
    bytes)): publish lists them without hashing the files again, then reads every byte against them."""
    from corpus_assets.domain.pack.shards_layer import shard_directory

    splits: dict[str, Path] = {}
    claimed: dict[str, tuple[str, int]] = {}
    for r in shard_rows:
        meta = json.loads(r["meta_json"])
        src_dir = shard_directory(store, r["directory"])
        for f in meta["files"].values():
            rel = f"shards/{r['split']}/{f['path']}"
            _link_or_copy(src_dir / f["path"], tmp / rel)
            if isinstance(f.get("sha256"), str) and isinstance(f.get("bytes"), int):
                claimed[rel] = (f["sha256"], f["bytes"])
        splits[r["split"]] = src_dir
    for split, src_dir in splits.items():
        if (src_dir / "shards.json").is_file():
            _link_or_copy(src_dir / "shards.json", tmp / "shards" / split / "shards.json")
    return claimed


LINEAGE_FILE = "lineage/records.parquet"
LINEAGE_SCHEMA = pa.schema([("record_id", pa.string()), ("source_id", pa.string()), ("snapshot", pa.string()),
                            ("kind", pa.string())])


def stage_lineage(store: LayerStore, release: str, tmp: Path) -> int:
    """Write ``lineage/records.parquet``: the record copies the release's dedup stage clustered
    (representatives and the duplicates they stand for), sorted; ids only, never text."""
    t = store.require_current(DEDUP_CLUSTERS, release).read_table("clusters", columns=LINEAGE_SCHEMA.names)
    t = t.cast(LINEAGE_SCHEMA).sort_by([("record_id", "ascending"), ("snapshot", "ascending")])
    path = tmp / LINEAGE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, path, compression="zstd", write_statistics=False, store_schema=False)
    return t.num_rows


def _shard_set_objects(shard_rows: list[dict]) -> dict[str, str]:
    """Release path -> object of the sealed shard set holding the same bytes (what stage_shards links)."""
    out = {}
    for r in shard_rows:
        meta = json.loads(r["meta_json"])
        for f in meta["files"].values():
            out[f"shards/{r['split']}/{f['path']}"] = f"{r['directory']}/{f['path']}"
        out[f"shards/{r['split']}/shards.json"] = f"{r['directory']}/shards.json"
    return out


def build_release(
    store: LayerStore,
    release: str,
    *,
    release_spec: Mapping[str, Any],
    sources_governance: Mapping[str, Mapping[str, Any]],
    releases_root: Path,
    package_version: str,
    tombstone_generation: int = 0,
    tombstone_requests: Optional[list[str]] = None,
    tombstone_count: int = 0,
    signing_key: Any = "env",
    log: Any = lambda _m: None,
) -> ReleaseBuild:
    build_spec, sections = gather_release_inputs(
        store, release, release_spec=release_spec, sources_governance=sources_governance,
        tombstone_generation=tombstone_generation, tombstone_requests=list(tombstone_requests or []),
        package_version=package_version,
    )
    bid = compute_build_id(build_spec)
    shard_rows = store.require_current(PACKED_SHARDS, release).read_table("shards").to_pylist()

    def stage(tmp: Path) -> dict[str, tuple[str, int]]:
        claimed = stage_shards(store, shard_rows, tmp)
        stage_lineage(store, release, tmp)
        pause_point("release_manifest:staged")  # artifacts staged, manifest and pointer not written
        return claimed

    def make_manifest(_tmp: Path, _artifacts: list[dict]) -> dict:
        return {"version": bid, **_manifest(release, release_spec, sections, package_version, tombstone_count)}

    if store.remote is not None and pull_release(store.remote, Path(releases_root), release, bid) is not None:
        log(f"release {release} build {bid[:16]} is already sealed in {store.remote.url}; comparing with it")
    result = publish_release(
        Path(releases_root), release, bid, stage, make_manifest,
        render_card=data_card_renderer(known_limits=KNOWN_LIMITS, report_links=REPORT_LINKS),
        validate_manifest=validate_manifest, signing_key=signing_key,
    )
    mirror = None
    if store.remote is not None:
        mirror = push_release(store.remote, result.path, release, bid, result.content_digest,
                              copy_from=_shard_set_objects(shard_rows), log=log)
    manifest = json.loads((result.path / "manifest.json").read_text(encoding="utf-8"))
    return ReleaseBuild(result, build_spec, manifest, mirror)


RETAIN_STATEMENTS = {
    "latest": "each source as of its latest selected snapshot: a record removed from it, or rejected or quarantined "
              "in it, is not in the release, whatever older snapshots held",
    "union": "every record's newest accepted copy in any selected snapshot, even if a later snapshot no longer holds it",
}


def _manifest(release: str, spec: Mapping[str, Any], sec: dict, package_version: str, tombstone_count: int) -> dict:
    shards = []
    for s in sec["shards"]:
        shards.append({"split": s["split"], "name": s["name"], "blocks": s["blocks"], "tokens": s["tokens"],
                       "files": s["files"]})
    sampling = sec["sampling"]
    per_source = [{"source_id": k, **v} for k, v in sorted(sampling["denominators"].items())]
    split_stats = [{"split": k, "records": int(v.get("records", 0)), "tokens": int(v.get("tokens", 0)),
                    "label_tokens": int(v.get("label_tokens", 0))} for k, v in sampling["token_views"].items()]
    return {
        "corpus_id": spec.get("corpus_id") or f"corpus/{release}",
        "release": release,
        "owner": spec.get("owner") or "team:corpus",
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        # the uses dedup_clusters enforced (sources whose allowed_uses miss one are left out)
        "intended_uses": sec["release_view"]["uses"],
        "excluded_uses": list(spec.get("excluded_uses") or []),
        "snapshot_rule": {"retain": sec["release_view"]["retain"], "statement": RETAIN_STATEMENTS[sec["release_view"]["retain"]],
                          "left_out": sec["release_view"]["left_out"]},
        "sources": [
            {"source_id": s["source_id"], "kind": s["kind"], "license": s["license"],
             "rights_evidence": s["rights_evidence"], "allowed_uses": s["allowed_uses"],
             "snapshots": [{"snapshot": x["snapshot"], "raw_version_digest": x["raw_version"],
                            "curated_version_digest": x["curated_version"], "items": x["items"], "records": x["records"]}
                           for x in s["snapshots"]]}
            for s in sec["sources"]
        ],
        "pipeline": {"code_version": package_version, "environment_digest": environment_digest(),
                     "transforms": sec["transforms"]},
        "stage_counts": sec["stage_counts"],
        "dedup": {"policy": sec["dedup"]["policy"], "clusters": sec["dedup"]["stats"]},
        "evaluation": {"registry_digest": sec["evaluation"]["registry_digest"],
                       "detector_policy": sec["evaluation"]["detector"],
                       "contamination": {"benchmarks": sec["evaluation"]["benchmarks"],
                                         "removed": sum(c["count"] for c in sec["stage_counts"] if c["stage"] == "decontam" and c["outcome"] == "rejected"),
                                         # per benchmark: protected texts checked and not checked, flagged records
                                         "coverage": sec["evaluation"]["coverage"],
                                         "flagged_records": sec["evaluation"]["flagged_records"],
                                         "unchecked_protected_texts": sum(
                                             c.get("too_short", 0) + c.get("all_ngrams_suppressed", 0)
                                             for c in sec["evaluation"]["coverage"].values())}},
        "tokenizer": sec["tokenizer"],
        "shards": shards,
        "split_stats": split_stats,
        "sampling": {"policy": {"mixture": sampling["mixture"], "packing": sampling["packing"]}, "per_source": per_source},
        "tombstones": {"generation": sec["tombstones"]["generation"], "request_ids": sec["tombstones"]["request_ids"],
                       "count": tombstone_count},
        "consumed_by_runs": [],
        "layer_versions": sec["layer_versions"],
    }


def withdraw_revoked(store: LayerStore, releases_root: Path, release: str, build_id: str, *, successor: Optional[str],
                     request_ids: list[str]) -> dict:
    """After a deletion revoked ``build_id``: delete its shards (they hold tokens of deleted records),
    keep manifest.json and data_card.md as the audit trail, write ``REVOKED.json`` (successor,
    request ids, ``revoked_at``: UTC ISO time, kept from an earlier note of the same build), drop
    non-current versions of the release's layers and shard sets no current ``packed_shards``
    version points at. ``corpus verify`` then reports the build as revoked and exits 1."""
    out = {"build_id": build_id, "shards_removed": 0}
    d = Path(releases_root) / release / build_id
    earlier = (d / "REVOKED.json").read_bytes() if (d / "REVOKED.json").is_file() else None
    if earlier is None and store.remote is not None:
        earlier = store.remote.read_bytes(f"{DataRoot.release_key(release, build_id)}/REVOKED.json")
    try:
        revoked_at = json.loads(earlier).get("revoked_at") if earlier is not None else None
    except (ValueError, AttributeError):
        revoked_at = None
    note = {"release": release, "build_id": build_id, "status": "revoked", "successor_build_id": successor,
            "request_ids": sorted(request_ids),
            "revoked_at": revoked_at or datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "note": "artifacts withdrawn after a deletion request; use the successor build"}
    note_bytes = (json.dumps(note, indent=2, sort_keys=True) + "\n").encode("utf-8")
    if d.is_dir():
        shards = d / "shards"
        if shards.is_dir():
            out["shards_removed"] = sum(1 for p in shards.rglob("*") if p.is_file())
            shutil.rmtree(shards)
        (d / "REVOKED.json").write_bytes(note_bytes)
    if store.remote is not None:
        out["shards_removed"] = max(out["shards_removed"], withdraw_remote(store.remote, release, build_id, note_bytes))
    out.update(drop_release_history(store, release))
    return out


def drop_release_history(store: LayerStore, release: str) -> dict:
    """Delete what only older builds of ``release`` used: every non-current version of its layers,
    every shard set no current ``packed_shards`` version points at, and abandoned staging (a live
    writer's is locked and stays). Published builds are unaffected: their shards are their own
    links or copies. Run after a deletion, so older versions do not keep what it deleted."""
    out = {"layer_versions_dropped": 0, "shard_sets_removed": 0}
    for la in registry.release_layers():
        if la.tables and store.current_version_name(la.asset, release) is not None:  # nothing downloaded to ask
            out["layer_versions_dropped"] += len(store.drop_versions(la.asset, release))
    keep = shard_set_name(store.current_manifest(PACKED_SHARDS, release))
    for name in store.trees(DataRoot.shard_sets_key(release)):
        if name != keep:
            store.drop_tree(f"{DataRoot.shard_sets_key(release)}/{name}")
            out["shard_sets_removed"] += 1
    remove_abandoned(store.root.shard_sets(release))
    remove_abandoned(store.root.releases / release)
    return out
