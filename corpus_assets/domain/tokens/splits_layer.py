"""The ``splits`` layer of a release: every record gets a leakage group and a split.

The leakage group is the declared group joined with the near-duplicate components of
``dedup_clusters``; the split comes from the salted group hash (``splits.assign``). ``previous``
keeps an earlier assignment when one is given (published splits never move).
"""

from __future__ import annotations

from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.tokens.splits import SplitPolicy, assign, leakage_groups, split_policy_version, unit_interval
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE, decisions_from_columns
from corpus_assets.domain.layers.registry import CURATED_RECORDS, SPLITS, layer

SPLITS_LAYER_CODE_VERSION = "splits-layer-2"  # 2: the decisions table (1 was release-layers-1)

SPLITS_TABLES = layer(SPLITS).table_specs()


def build_splits(
    store: LayerStore,
    release: str,
    policy: SplitPolicy,
    *,
    dedup: LayerVersion,
    previous: Optional[dict[str, str]] = None,
) -> tuple[LayerVersion, dict]:
    clusters = dedup.read_table("clusters", columns=["record_id", "source_id", "snapshot", "kind", "group_id"])
    ids = clusters.column("record_id").to_pylist()
    # declared groups come from the curated records of each snapshot the release used
    declared: dict[str, str] = {}
    for snap in sorted(set(clusters.column("snapshot").to_pylist())):
        cur = store.require_current(CURATED_RECORDS, snap)
        for b in cur.iter_batches("records", batch_size=65536, columns=["record_id", "group_id"]):
            declared.update(zip(b.column(0).to_pylist(), b.column(1).to_pylist()))
    keys = leakage_groups(ids, [declared.get(i) for i in ids], clusters.column("group_id").to_pylist())
    del declared
    result = assign(ids, keys, policy, previous=previous)
    u_of = {k: unit_interval(k, policy.salt) for k in set(keys)}  # one hash per group, not per record
    split_of = result.split
    splits = [split_of.get(r) for r in ids]
    kept = pc.fill_null(pc.equal(clusters.column("kind"), "representative"), False).combine_chunks()
    assignments = pa.table({
        "record_id": clusters.column("record_id"),
        "source_id": clusters.column("source_id"),
        "snapshot": clusters.column("snapshot"),
        "kept": kept,
        "group_key": pa.array(keys, pa.string()),
        "u": pa.array([u_of[k] for k in keys], pa.float64()),
        "split": pa.array(splits, pa.string()),
    })
    report = result.report()
    pver = split_policy_version(policy)
    spec = {
        "code_version": SPLITS_LAYER_CODE_VERSION,
        "policy_version": pver,
        "dedup_version": dedup.content_digest,
    }
    # the stage decides for the records dedup kept: a split, or quarantine (a group conflict)
    mine = assignments.filter(kept)
    assigned = pc.is_valid(mine.column("split"))
    decisions = decisions_from_columns(
        mine.num_rows, stage="splits", policy_version=pver,
        action=["accept" if a else "quarantine" for a in assigned.to_pylist()],
        reason=pc.if_else(assigned, "ok", "splits.group_conflict"),
        detail=pc.if_else(assigned, "", "its leakage group's published records are in other splits"),
        record_id=mine.column("record_id"), source_id=mine.column("source_id"), snapshot=mine.column("snapshot"),
        split=mine.column("split"),
    )
    with store.new_version(SPLITS, release, SPLITS_TABLES, spec) as w:
        w.write("assignments", assignments)
        w.write(DECISIONS_TABLE, decisions)
        version = w.commit(extra_manifest={"report": {k: v for k, v in report.items() if k != "quarantined"},
                                           "quarantined": len(result.quarantined)})
    return version, report
