"""Everything a release manifest states, gathered from the current layer versions of a release.

Two products, kept apart on purpose (seed 000 §18.7):

* ``build_spec`` — what the build *is*: the release spec, code versions, the content digest of
  every input layer version, the tokenizer digest, the eval registry digest and the tombstone
  generation. Only content digests and versions go in (never absolute paths or times), so the
  same inputs give the same ``build_id`` on any machine.
* ``sections`` — what the manifest *reports*: sources with governance, stage counts with reasons,
  transforms with their policies, dedup stats, contamination, tokenizer, shards, sampling and the
  four denominators.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, Mapping


from corpus_assets.domain.layers import registry
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE
from corpus_assets.domain.layers.registry import (
    CURATED_RECORDS,
    DECISION_COUNT_COLUMNS,
    DEDUP_CLUSTERS,
    MIXTURE_PLAN,
    PACKED_SHARDS,
    RAW_SNAPSHOT,
    SPLITS,
    TOKEN_VIEWS,
    TOKENIZER,
    BuildId,
    Partitioning,
)
from corpus_assets.domain.storage.layer_store import UNPARTITIONED, LayerStore, LayerVersion
from corpus_assets.domain.tokens.tokenizer_layer import tokenizer_info


def release_snapshots(dedup: LayerVersion) -> list[str]:
    t = dedup.read_table("clusters", columns=["snapshot"])
    return sorted(set(t.column("snapshot").to_pylist()))


def _peek(store: LayerStore, asset: str, partition: str) -> LayerVersion:
    v = store.peek(asset, partition)
    if v is None:
        raise FileNotFoundError(f"{asset} has no materialized version for partition {partition!r}; materialize it first")
    return v


def _decision_counts(version: LayerVersion) -> Counter:
    """(stage, outcome, reason) -> decisions, from a layer version's decision record: the counts its
    manifest kept when the table was written, else (a version written before) the table itself."""
    by = list(DECISION_COUNT_COLUMNS)  # (stage, outcome, reason)
    kept = version.manifest["tables"][DECISIONS_TABLE].get("counts")
    if kept and kept.get("by") == by:
        rows = kept["rows"]
    else:
        g = version.read_table(DECISIONS_TABLE, columns=by).group_by(by).aggregate([([], "count_all")])
        rows = zip(*(g.column(c).to_pylist() for c in (*by, "count_all")))
    out: Counter = Counter()
    for st, oc, rs, n in rows:
        out[(st, oc, rs or "")] += int(n)  # a null and an empty reason are one reason
    return out


def _decontam_findings(curated: Mapping[str, LayerVersion]) -> dict:
    """What decontamination could and could not check, and what it found, over the release's
    curated versions (snapshot -> version): per benchmark the protected texts and the unchecked
    ones (from the manifests; the largest count, should the snapshots' policies differ) and the
    flagged records, acted on by decontamination or rejected by another stage first (from the
    ``contamination`` tables, which a purge rewrites)."""
    coverage: dict[str, dict[str, int]] = {}
    policies: set[str] = set()
    for s in sorted(curated):
        d = curated[s].manifest.get("decontam") or {}
        if d.get("policy_version"):
            policies.add(d["policy_version"])
        for b, c in d.get("coverage", {}).items():
            cur = coverage.setdefault(b, {})
            for k, v in c.items():
                cur[k] = max(cur.get(k, 0), int(v))
    flagged: dict[str, dict[str, set]] = {}
    for v in curated.values():
        t = v.read_table("contamination")
        if t.num_rows == 0:
            continue
        names = set(t.schema.names)
        bench = t.column("benchmark").to_pylist()
        rid = t.column("record_id").to_pylist()
        by = t.column("decided_by").to_pylist() if "decided_by" in names else ["decontam"] * t.num_rows
        for b, r, d in zip(bench, rid, by):
            key = "acted_on" if (d or "decontam") == "decontam" else "rejected_earlier"
            flagged.setdefault(b, {"acted_on": set(), "rejected_earlier": set()})[key].add(r)
    return {
        "coverage": dict(sorted(coverage.items())),
        "decontam_policies": sorted(policies),
        "flagged_records": {b: {k: len(ids) for k, ids in sorted(f.items())} for b, f in sorted(flagged.items())},
    }


def gather_release_inputs(
    store: LayerStore,
    release: str,
    *,
    release_spec: Mapping[str, Any],
    sources_governance: Mapping[str, Mapping[str, Any]],
    tombstone_generation: int,
    tombstone_requests: list[str],
    package_version: str,
) -> tuple[dict, dict]:
    """(build_spec, sections) of the release's current layer versions."""
    # the build's inputs are what the layer registry says enters a build id; layers named only by
    # their digest (raw bytes, signatures) are read from their manifests, so with an object-store
    # data root nothing of them is downloaded
    def opened(la: registry.Layer, partition: str) -> LayerVersion:
        return _peek(store, la.asset, partition) if la.build_id is BuildId.MANIFEST else store.require_current(la.asset, partition)

    layers = {la.asset: opened(la, release) for la in registry.build_inputs(Partitioning.RELEASES)}
    snapshots = release_snapshots(layers[DEDUP_CLUSTERS])
    snap_layers = {s: {la.asset: opened(la, s) for la in registry.build_inputs(Partitioning.SNAPSHOTS)} for s in snapshots}
    shared = {la.asset: opened(la, UNPARTITIONED) for la in registry.build_inputs(Partitioning.NONE)}
    registry_version = shared[registry.EVAL_REGISTRY]

    input_versions = {a: v.content_digest for a, v in layers.items()}
    input_versions.update({a: v.content_digest for a, v in shared.items()})
    for s, vs in snap_layers.items():
        for a, v in vs.items():
            input_versions[f"{a}/{s}"] = v.content_digest
    code_versions = {a: v.manifest.get("build_spec", {}).get("code_version", "") for a, v in layers.items()}
    for s, vs in snap_layers.items():
        for a, v in vs.items():
            code_versions.setdefault(a, v.manifest.get("build_spec", {}).get("code_version", ""))
    tok = layers[TOKENIZER].manifest
    build_spec = {
        "format": "corpus-build/1",
        "release": release,
        "release_spec": _portable(dict(release_spec)),
        "package_version": package_version,
        "code_versions": dict(sorted(code_versions.items())),
        "input_versions": dict(sorted(input_versions.items())),
        "tokenizer_digest": tok["tokenizer_digest"],
        "eval_registry_digest": registry_version.manifest.get("registry_digest", ""),
        "tombstone_generation": tombstone_generation,
        # licenses and rights evidence are part of what the release is: a change makes a new version
        "sources_governance": {src: _portable(dict(sources_governance.get(src, {})))
                               for src in sorted({s.split(".", 1)[0] for s in snapshots})},
    }

    # --- sources and snapshots ---
    by_source: dict[str, list[dict]] = {}
    for s, vs in snap_layers.items():
        source = s.split(".", 1)[0]
        cur = vs[CURATED_RECORDS].manifest
        by_source.setdefault(source, []).append({
            "snapshot": s,
            "raw_version": vs[RAW_SNAPSHOT].content_digest,
            "curated_version": vs[CURATED_RECORDS].content_digest,
            "items": vs[RAW_SNAPSHOT].row_count("items"),
            "records": int(cur.get("outcomes", {}).get("accepted", 0)),
        })
    sources = []
    for source, snaps in sorted(by_source.items()):
        gov = dict(sources_governance.get(source, {}))
        sources.append({
            "source_id": source,
            "kind": gov.pop("kind", ""),
            "license": gov.get("license", ""),
            "rights_evidence": gov.get("rights_evidence", ""),
            "allowed_uses": list(gov.get("allowed_uses", [])),
            "snapshots": snaps,
        })

    # --- stage counts with reasons: every stage's decision record, over the release's snapshots ---
    counts: Counter = Counter()
    for la in registry.decision_layers():
        versions = ([vs[la.asset] for vs in snap_layers.values()] if la.partitioning is Partitioning.SNAPSHOTS
                    else [layers[la.asset]] if la.asset in layers else [])
        for v in versions:
            counts.update(_decision_counts(v))
    dm = layers[DEDUP_CLUSTERS].manifest
    exact = dm.get("exact", {})
    tvr = layers[TOKEN_VIEWS].manifest.get("report", {})
    pk = layers[PACKED_SHARDS].manifest.get("report", {})
    stage_counts = [{"stage": st, "outcome": oc, "reason": rs, "count": n}
                    for (st, oc, rs), n in sorted(counts.items()) if n]

    # --- transforms ---
    transforms = []
    any_snap = next(iter(snap_layers.values()), None)
    if any_snap is not None:
        # the snapshot layers computed from another layer (raw capture is not a transform)
        for a in (la.asset for la in registry.snapshot_layers() if la.upstream_key):
            b = any_snap[a].manifest.get("build_spec", {})
            transforms.append({"name": a, "version": b.get("code_version", ""),
                               "policy_version": any_snap[a].manifest.get("policy_version", b.get("policy_digest", "")),
                               "policy": _portable(b.get("policy", b.get("curation", b.get("dedup", {}))))})
    for a, v in layers.items():
        b = v.manifest.get("build_spec", {})
        transforms.append({"name": a, "version": b.get("code_version", ""),
                           "policy_version": b.get("policy_version", v.manifest.get("policy_digest", v.manifest.get("report", {}).get("policy_version", ""))),
                           "policy": _portable(b.get("policy", b.get("lsh", b.get("spec", {}))))})

    # --- dedup, evaluation, tokenizer, shards, sampling ---
    dedup = {"policy": _portable(dm.get("build_spec", {})),
             "stats": {"records": int(dm.get("records", 0)), "kept": int(dm.get("kept", 0)),
                       "exact_removed": int(exact.get("duplicates_removed", 0)), "near_removed": int(dm.get("near_removed", 0)),
                       "candidates": int(dm.get("candidates", 0))}}
    curated_spec = any_snap[CURATED_RECORDS].manifest.get("build_spec", {}) if any_snap else {}
    evaluation = {"registry_digest": registry_version.manifest.get("registry_digest", ""),
                  "benchmarks": registry_version.manifest.get("benchmarks", {}),
                  "detector": _portable(curated_spec.get("curation", {}).get("decontam", {})),
                  **_decontam_findings({s: vs[CURATED_RECORDS] for s, vs in snap_layers.items()})}
    # digest, vocabulary, origin and provenance: trained here, frozen from an earlier build, loaded, from a build
    tokenizer = tokenizer_info(layers[TOKENIZER], layers[SPLITS].content_digest)
    shards = []
    for r in layers[PACKED_SHARDS].read_table("shards").to_pylist():
        meta = json.loads(r["meta_json"])
        shards.append({"split": r["split"], "name": r["name"], "blocks": r["blocks"], "tokens": r["tokens"],
                       "files": {role: f["sha256"] for role, f in meta["files"].items()}})
    mix = layers[MIXTURE_PLAN].manifest
    sampling = {"mixture": mix.get("build_spec", {}).get("spec", {}),
                "packing": layers[PACKED_SHARDS].manifest.get("build_spec", {}).get("policy", {}),
                "denominators": pk.get("denominators", {}),
                "splits": {s: {k: r.get(k) for k in ("samples", "blocks", "utilization", "padding", "dropped_tokens", "label_rate")}
                           for s, r in pk.get("splits", {}).items()},
                "token_views": {s: dict(r) for s, r in tvr.get("splits", {}).items()}}
    sections = {
        "sources": sources,
        "stage_counts": stage_counts,
        "transforms": transforms,
        "dedup": dedup,
        "release_view": {"retain": dm.get("build_spec", {}).get("snapshot_rule", "latest"),
                         "uses": list(dm.get("build_spec", {}).get("uses", [])),
                         "left_out": dict(dm.get("left_out", {}))},
        "evaluation": evaluation,
        "tokenizer": tokenizer,
        "shards": shards,
        "sampling": sampling,
        "tombstones": {"generation": tombstone_generation, "request_ids": list(tombstone_requests)},
        "layer_versions": dict(sorted(input_versions.items())),
        "shard_set": pk.get("shard_set", ""),
    }
    return build_spec, sections


def _portable(obj: Any) -> Any:
    """Policies as the manifest shows them: drop absolute paths (machine-specific)."""
    if isinstance(obj, dict):
        return {k: _portable(v) for k, v in obj.items() if not (isinstance(v, str) and v.startswith("/"))}
    if isinstance(obj, list):
        return [_portable(v) for v in obj if not (isinstance(v, str) and v.startswith("/"))]
    return obj
