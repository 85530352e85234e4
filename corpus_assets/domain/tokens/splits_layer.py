"""The ``splits`` layer of a release: every record gets a leakage group and a split.

The leakage group is the declared group joined with the near-duplicate components of
``dedup_clusters``; the split comes from the salted group hash (``splits.assign``). ``previous``
keeps an earlier assignment when one is given (published splits never move).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.tokens.split_columns import assign_columns, leakage_group_column
from corpus_assets.domain.tokens.splits import SplitPolicy, assign, leakage_groups, split_policy_version, unit_interval
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE, decisions_from_columns
from corpus_assets.domain.layers.registry import CURATED_RECORDS, SPLITS, layer

# 2: the decisions table (1 was release-layers-1); 3: narrow tables in 65536-row groups
SPLITS_LAYER_CODE_VERSION = "splits-layer-3"

SPLITS_TABLES = layer(SPLITS).table_specs()


def build_splits(
    store: LayerStore,
    release: str,
    policy: SplitPolicy,
    *,
    dedup: LayerVersion,
    previous: Optional[dict[str, str]] = None,
    earlier: Optional[LayerVersion] = None,
) -> tuple[LayerVersion, dict]:
    """``previous``: published splits to keep (record id -> split). ``earlier``: a splits version
    of this release (the current one) whose group keys' u this build takes instead of hashing
    them again, when it was built under the same salt; the result does not depend on it."""
    clusters = dedup.read_table("clusters", columns=["record_id", "source_id", "snapshot", "kind", "group_id"])
    ids = clusters.column("record_id")
    declared = _declared_groups(store, clusters)
    if previous is None:  # columns all the way (every build the splits asset runs)
        keys = leakage_group_column(ids, declared, clusters.column("group_id"))
        result = assign_columns(keys, policy, known=_known_u(earlier, policy))
        group_key, u, splits, report = result.group_key, result.u, result.split, result.report
    else:  # published splits to keep: the record-level rules of splits.assign
        id_list = ids.to_pylist()
        keys = leakage_groups(id_list, declared.to_pylist(), clusters.column("group_id").to_pylist())
        assignment = assign(id_list, keys, policy, previous=previous)
        u_of = {k: unit_interval(k, policy.salt) for k in set(keys)}  # one hash per group, not per record
        group_key, u = pa.array(keys, pa.string()), pa.array([u_of[k] for k in keys], pa.float64())
        splits = pa.array([assignment.split.get(r) for r in id_list], pa.string())
        report = assignment.report()
    kept = pc.fill_null(pc.equal(clusters.column("kind"), "representative"), False).combine_chunks()
    assignments = pa.table({
        "record_id": clusters.column("record_id"),
        "source_id": clusters.column("source_id"),
        "snapshot": clusters.column("snapshot"),
        "kept": kept,
        "group_key": group_key,
        "u": u,
        "split": splits,
    })
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
        action=pc.if_else(assigned, "accept", "quarantine"),
        reason=pc.if_else(assigned, "ok", "splits.group_conflict"),
        detail=pc.if_else(assigned, "", "its leakage group's published records are in other splits"),
        record_id=mine.column("record_id"), source_id=mine.column("source_id"), snapshot=mine.column("snapshot"),
        split=mine.column("split"),
    )
    with store.new_version(SPLITS, release, SPLITS_TABLES, spec) as w:
        w.write("assignments", assignments)
        w.write(DECISIONS_TABLE, decisions)
        version = w.commit(extra_manifest={"report": {k: v for k, v in report.items() if k != "quarantined"},
                                           "quarantined": report["quarantined"]["records"]})
    return version, report


def _known_u(earlier: Optional[LayerVersion], policy: SplitPolicy) -> Optional[tuple[pa.Array, pa.Array]]:
    """(group key, u) of ``earlier``'s records when it hashed them with this salt and this code."""
    if earlier is None:
        return None
    spec, report = earlier.manifest.get("build_spec", {}), earlier.manifest.get("report", {})
    if spec.get("code_version") != SPLITS_LAYER_CODE_VERSION or report.get("salt") != policy.salt:
        return None
    t = earlier.read_table("assignments", columns=["group_key", "u"])
    return t.column("group_key").combine_chunks(), t.column("u").combine_chunks()


def _declared_groups(store: LayerStore, clusters: pa.Table) -> pa.Array:
    """The declared group of each clusters row (null: none), from the curated records of the
    snapshots the release used, joined on (snapshot, record id) in Arrow."""
    parts = []
    for snap in pc.unique(clusters.column("snapshot")).to_pylist():
        cur = store.require_current(CURATED_RECORDS, snap)
        t = cur.read_table("records", columns=["record_id", "group_id"])
        parts.append(t.append_column("snapshot", pa.repeat(pa.scalar(snap, pa.string()), t.num_rows)))
    rows = clusters.select(["record_id", "snapshot"]).append_column(
        "_row", pa.array(np.arange(clusters.num_rows, dtype=np.int64)))
    if not parts:
        return pa.nulls(clusters.num_rows, pa.string())
    joined = rows.join(pa.concat_tables(parts, promote_options="permissive"), ["snapshot", "record_id"], join_type="left outer")
    if joined.num_rows != clusters.num_rows:
        raise ValueError(f"splits: {joined.num_rows - clusters.num_rows} clusters row(s) match more than one curated "
                         "record of their snapshot (a record id twice in a curated_records version)")
    joined = joined.sort_by("_row")
    return joined.column("group_id").combine_chunks().cast(pa.string())
