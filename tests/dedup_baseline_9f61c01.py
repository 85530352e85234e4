"""build_dedup as of commit 9f61c01 (before the columnar, streaming release inputs), frozen: the
reference the streaming implementation is checked against (tests/unit/test_dedup_streaming.py) and
the memory baseline of bench/bench_dedup_layer_memory.py. Not used by the pipeline."""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Mapping, Optional

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from corpus_assets.domain.dedup.exact import ExactGroup, alias_rows, exact_groups, exact_summary
from corpus_assets.domain.core.hashing import canonical_digest, dedup_normal_form
from corpus_assets.domain.core.progress import Progress
from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.dedup.lsh import LshPolicy
from corpus_assets.domain.dedup.minhash import (
    MinHashPolicy,
    exact_jaccard,
    minhash_policy_version,
    text_shingle_hashes,
)
from corpus_assets.domain.dedup.near import near_dedup, stable_order
from corpus_assets.domain.dedup.release_view import STAGE_OF, SUPERSEDED, Excluded, ReleaseView, release_view
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE, decisions_from_columns
from corpus_assets.domain.layers.registry import CLUSTERS_SCHEMA, CURATED_RECORDS, DEDUP_CLUSTERS, MINHASH_SIGNATURES, layer

# the label the pipeline writes today (5 changed only the file layout, which DEDUP_TABLES gives both)
DEDUP_CODE_VERSION = "dedup-5"


class ReleaseDedupPolicy(BaseModel):
    """The ``dedup`` section of a release spec."""

    model_config = ConfigDict(extra="forbid")
    exact: bool = True
    lsh: LshPolicy = Field(default_factory=LshPolicy)  # lsh.threshold is also tau of Algorithm 18.1


DEDUP_TABLES = layer(DEDUP_CLUSTERS).table_specs()


@dataclass
class DedupSummary:
    version: LayerVersion
    snapshots: list[str]
    records: int
    superseded: int
    exact: dict
    near_removed: int
    candidates: int
    lsh: dict
    cluster_sizes: dict[int, int] = field(default_factory=dict)
    largest: list[tuple[str, int]] = field(default_factory=list)


_CURATED_COLUMNS = ("source_id", "text", "governance_json", "schema_type", "domain", "lang", "char_count", "group_id")


def _load_release_records(store: LayerStore, snapshots: list[str], view: ReleaseView):
    """The copies the release uses (``view.chosen``), with texts and signatures, in record-id
    order; a light row (ids, source, type, language, size) for every copy it leaves out; and the
    content digest of each snapshot's signatures version."""
    rows: list[dict] = []
    left_out: dict[tuple[str, str], dict] = {}
    sig_digests: dict[str, str] = {}
    dtype = None
    excluded = {(e.snapshot, e.record_id) for e in view.excluded}
    for snap in sorted(snapshots):
        sig_v = store.require_current(MINHASH_SIGNATURES, snap)
        sig_digests[snap] = sig_v.content_digest
        dtype = sig_v.manifest.get("signature_dtype") or dtype
        used = set(view.chosen_ids(snap).to_pylist())
        texts = {}
        cur_v = store.require_current(CURATED_RECORDS, snap)
        for b in cur_v.iter_batches("records", columns=["record_id", *_CURATED_COLUMNS]):
            for rid, *values in zip(*(b.column(i).to_pylist() for i in range(b.num_columns))):
                row = dict(zip(_CURATED_COLUMNS, values))
                if rid in used:
                    texts[rid] = row
                elif (snap, rid) in excluded:
                    row.update(record_id=rid, snapshot=snap, text=None, governance_json=None)
                    left_out[(snap, rid)] = row
        if not used:
            continue
        for b in sig_v.iter_batches("signatures"):
            for r in b.to_pylist():
                if r["record_id"] in used:
                    r.update(texts[r["record_id"]])
                    rows.append(r)
    rows.sort(key=lambda r: r["record_id"])
    return rows, left_out, dtype, dict(sorted(sig_digests.items()))


def _eligible(governance_json: str) -> bool:
    gov = json.loads(governance_json)
    return bool(gov.get("license")) and bool(gov.get("rights_evidence"))


def via_symlink(record_id: str, group_id: Optional[str]) -> bool:
    """A local file captured through a symlink: canonicalization gives it the group of the file's
    own (resolved) path, ``doc:<source>:<resolved path>``, not ``doc:<record id>``."""
    return bool(group_id) and group_id.startswith("doc:") and group_id != "doc:" + record_id


_PATH_PARTS_RE = re.compile(r"[/.]")


def in_locale(record_id: str, source_id: str, locale: Optional[str]) -> bool:
    """Whether the record's path (its id after ``<source>:``) names ``locale``: a folder or a dotted
    part equal to it, or one of its regional forms either way (``en`` matches ``en-US/``,
    ``en_GB``, ``index.html.en``; ``en-US`` matches ``en/``). No locale declared: every path is in it."""
    if not locale:
        return True
    want = locale.lower().replace("_", "-")
    for part in _PATH_PARTS_RE.split(record_id[len(source_id) + 1:].lower()):
        part = part.replace("_", "-")
        if part and (part == want or part.startswith(want + "-") or want.startswith(part + "-")):
            return True
    return False


def representative_order_key(
    row: Mapping, source_priority: Mapping[str, int], primary_locales: Mapping[str, str] = {}
) -> tuple:
    """The stable total order of Algorithm 18.1 (smaller first): governance eligibility, quality
    (not scored yet: 0), source priority, a resolved path before a copy reached through a symlink,
    the source's primary locale before other paths, record id (unique: the order is total)."""
    rid, src = row["record_id"], row["source_id"]
    return (
        0 if _eligible(row["governance_json"]) else 1,
        0,
        source_priority.get(src, 1_000_000),
        1 if via_symlink(rid, row.get("group_id")) else 0,
        0 if in_locale(rid, src, primary_locales.get(src)) else 1,
        rid,
    )


def build_dedup(
    store: LayerStore,
    release: str,
    snapshots: list[str],
    policy: ReleaseDedupPolicy,
    minhash: MinHashPolicy,
    source_priority: dict[str, int],
    *,
    rule: str = "latest",
    incremental_sources: Iterable[str] = (),
    allowed_uses: Optional[Mapping[str, Iterable[str]]] = None,
    uses: Iterable[str] = (),
    log: Optional[Callable[[str], None]] = None,
    primary_locales: Optional[Mapping[str, str]] = None,
) -> DedupSummary:
    """Cluster the copies the release sees (``release_view``: each source as of its latest selected
    snapshot under rule ``latest``; ``union`` keeps every record id's newest accepted copy).
    ``primary_locales``: source -> locale its representatives should be in (local_dir's
    ``primary_locale``)."""
    primary_locales = dict(sorted((primary_locales or {}).items()))
    started = time.monotonic()
    view = release_view(store, snapshots, rule=rule, incremental_sources=incremental_sources,
                        allowed_uses=allowed_uses, uses=uses)
    rows, left_out, dtype, sig_digests = _load_release_records(store, snapshots, view)
    superseded = [e for e in view.excluded if e.reason == SUPERSEDED]
    if log and view.excluded:
        log(f"dedup {release}: {len(view.excluded)} copies left out by the snapshot rule {rule!r} and the release's uses: "
            + ", ".join(f"{r} {n}" for r, n in sorted(view.counts.items())))
    n = len(rows)
    ids = [r["record_id"] for r in rows]
    sources = [r["source_id"] for r in rows]
    # stable total order: eligible first, quality (not scored yet: 0), source priority, resolved
    # path, primary locale, record id
    order_keys = [representative_order_key(r, source_priority, primary_locales) for r in rows]
    normal = [dedup_normal_form(r["text"], r["domain"]) for r in rows]
    if policy.exact:
        groups = exact_groups([r["dedup_key"] for r in rows], lambda i: normal[i].encode("utf-8"), order_keys)
    else:
        groups = [ExactGroup(r["dedup_key"], i, (i,)) for i, r in enumerate(rows)]
    reps = sorted(g.representative for g in groups)
    exact_rep = np.arange(n)
    for g in groups:
        for m in g.members:
            exact_rep[m] = g.representative
    if log:
        log(f"dedup {release}: {n} records from {len(snapshots)} snapshots; {len(reps)} after exact dedup")

    # near dedup among exact representatives
    sig_dtype = np.dtype(dtype or "uint64")
    sigs = (
        np.stack([np.frombuffer(rows[i]["signature"], dtype=sig_dtype) for i in reps])
        if reps
        else np.zeros((0, minhash.num_perm), dtype=sig_dtype)
    )
    shingle_cache: dict[int, np.ndarray] = {}

    def shingle_hashes(k: int) -> np.ndarray:
        if k not in shingle_cache:
            shingle_cache[k] = text_shingle_hashes(normal[reps[k]], minhash)
        return shingle_cache[k]

    progress = Progress(log, f"dedup {release}: LSH candidate pairs verified", unit="pairs") if log else None
    verified = 0

    def jaccard(a: int, b: int) -> float:
        nonlocal verified
        verified += 1
        if progress is not None:
            progress.update(verified)  # logs at most every 10 s, with the rate
        return exact_jaccard(shingle_hashes(a), shingle_hashes(b))

    lsh = policy.lsh if policy.lsh.num_perm == minhash.num_perm else policy.lsh.model_copy(update={"num_perm": minhash.num_perm})
    order = stable_order([order_keys[i] for i in reps])
    result = near_dedup(sigs, order, lsh, jaccard=jaccard)

    # final representative and leakage group per record
    final_rep = np.arange(n)
    final_j = np.ones(n)
    kind = ["representative"] * n
    group = np.arange(n)
    for k, i in enumerate(reps):
        r = reps[int(result.representative[k])]
        final_rep[i] = r
        final_j[i] = float(result.rep_jaccard[k])
        if r != i:
            kind[i] = "near"
        group[i] = reps[int(result.component[k])]
    for i in range(n):
        e = exact_rep[i]
        if e != i:
            final_rep[i] = final_rep[e]
            final_j[i] = 1.0 if final_rep[e] == e else final_j[e]
            kind[i] = "exact"
            group[i] = group[e]

    sizes: dict[str, int] = {}
    for i in range(n):
        sizes[ids[final_rep[i]]] = sizes.get(ids[final_rep[i]], 0) + 1
    size_hist: dict[int, int] = {}
    for s in sizes.values():
        size_hist[s] = size_hist.get(s, 0) + 1
    largest = sorted(((rid, s) for rid, s in sizes.items() if s > 1), key=lambda t: (-t[1], t[0]))[:10]

    build_spec = {
        "code_version": DEDUP_CODE_VERSION,
        "snapshots": sorted(snapshots),
        "signatures": sig_digests,
        "policy": policy.model_dump(mode="json"),
        "snapshot_rule": rule,
        "uses": list(view.uses),
        "lsh": result.policy,
        "minhash_policy": minhash_policy_version(minhash),
        # what decides representatives besides the records themselves
        "representative_order": {"source_priority": dict(sorted(source_priority.items())),
                                 "primary_locales": primary_locales},
    }
    with store.new_version(DEDUP_CLUSTERS, release, DEDUP_TABLES, build_spec) as w:
        w.write(
            "clusters",
            pa.table(
                {
                    "record_id": ids,
                    "source_id": sources,
                    "snapshot": [r["snapshot"] for r in rows],
                    "representative_id": [ids[j] for j in final_rep],
                    "kind": kind,
                    "jaccard": final_j.tolist(),
                    "group_id": [ids[j] for j in group],
                },
                schema=CLUSTERS_SCHEMA,
            ),
        )
        w.write("aliases", list(alias_rows(groups, ids, sources)))
        w.write(
            "edges",
            [
                {"record_id": ids[reps[int(x)]], "neighbour_id": ids[reps[int(y)]], "jaccard": float(j)}
                for (x, y), j in zip(result.edges.tolist(), result.edge_jaccard.tolist())
            ],
        )
        w.write("superseded", [{"record_id": e.record_id, "snapshot": e.snapshot, "superseded_by": e.superseded_by}
                               for e in superseded])
        w.write(DECISIONS_TABLE, _decisions(rows, ids, kind, final_rep, final_j, view.excluded, left_out,
                                            canonical_digest(build_spec)[:16]))
        ex = exact_summary(groups)
        version = w.commit(
            extra_manifest={
                "records": n,
                "exact": ex,
                "near_removed": result.removed,
                "candidates": result.candidates,
                "kept": int(sum(1 for k in kind if k == "representative")),
                "left_out": dict(sorted(view.counts.items())),
                "policy_digest": canonical_digest(build_spec)[:16],
            }
        )
    if log:
        log(f"dedup {release}: done in {time.monotonic() - started:.1f}s; exact removed {ex['duplicates_removed']}, "
            f"near removed {result.removed}, {result.candidates} candidate pairs")
    return DedupSummary(
        version, sorted(snapshots), n, len(superseded), ex, result.removed, result.candidates,
        {**result.policy, "stats": asdict(result.stats)},
        dict(sorted(size_hist.items())), largest,
    )


_REASONS = {"representative": ("accept", "ok"), "exact": ("reject", "dedup.exact_duplicate"),
            "near": ("reject", "dedup.near_duplicate")}


def _decisions(rows: list[dict], ids: list[str], kind: list[str], final_rep: np.ndarray, final_j: np.ndarray,
               excluded: list[Excluded], left_out: dict[tuple[str, str], dict], policy_version: str) -> pa.Table:
    """The dedup stage's decision per input copy: every accepted copy of the release's snapshots,
    the copies it clusters in record-id order, then the copies the release view leaves out."""
    chars = [r["char_count"] for r in rows]
    actions = [_REASONS[k][0] for k in kind]
    details = ["" if k == "representative" else
               f"{'exact copy' if k == 'exact' else 'near duplicate'} of {ids[j]}" + (f" (J={jac:.3f})" if k == "near" else "")
               for k, j, jac in zip(kind, final_rep.tolist(), final_j.tolist())]
    old = [left_out[(e.snapshot, e.record_id)] for e in excluded]
    return decisions_from_columns(
        len(rows) + len(old),
        stage=["dedup"] * len(rows) + [STAGE_OF[e.reason] for e in excluded],
        record_id=ids + [e.record_id for e in excluded],
        source_id=[r["source_id"] for r in rows + old],
        snapshot=[r["snapshot"] for r in rows + old],
        schema_type=[r["schema_type"] for r in rows + old],
        domain=[r["domain"] for r in rows + old],
        lang=[r["lang"] for r in rows + old],
        action=actions + ["reject"] * len(old),
        reason=[_REASONS[k][1] for k in kind] + [e.reason for e in excluded],
        detail=details + [e.detail for e in excluded],
        policy_version=policy_version,
        chars_in=chars + [r["char_count"] for r in old],
        chars_out=[c if a == "accept" else 0 for c, a in zip(chars, actions)] + [0] * len(old),
    )
