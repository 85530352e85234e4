"""The ``splits`` layer of a release: every record gets a leakage group and a split.

The leakage group is the declared group joined with the near-duplicate components of
``dedup_clusters``; the split comes from the salted group hash (``splits.assign``). ``previous``
keeps an earlier assignment when one is given (published splits never move).
"""

from __future__ import annotations

from typing import Optional


from corpus_assets.domain.storage.layer_store import LayerStore, LayerVersion
from corpus_assets.domain.tokens.splits import SplitPolicy, assign, leakage_groups, split_policy_version, unit_interval
from corpus_assets.domain.layers.decisions import DECISIONS_TABLE, decision
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
    clusters = dedup.read_table("clusters").to_pylist()
    # declared groups come from the curated records of each snapshot the release used
    declared: dict[str, str] = {}
    for snap in sorted({c["snapshot"] for c in clusters}):
        cur = store.require_current(CURATED_RECORDS, snap)
        for b in cur.iter_batches("records", columns=["record_id", "group_id"]):
            declared.update(zip(b.column(0).to_pylist(), b.column(1).to_pylist()))
    ids = [c["record_id"] for c in clusters]
    keys = leakage_groups(ids, [declared.get(i) for i in ids], [c["group_id"] for c in clusters])
    result = assign(ids, keys, policy, previous=previous)
    rows = [
        {
            "record_id": c["record_id"],
            "source_id": c["source_id"],
            "snapshot": c["snapshot"],
            "kept": c["kind"] == "representative",
            "group_key": k,
            "u": unit_interval(k, policy.salt),
            "split": result.split.get(c["record_id"]),
        }
        for c, k in zip(clusters, keys)
    ]
    report = result.report()
    pver = split_policy_version(policy)
    spec = {
        "code_version": SPLITS_LAYER_CODE_VERSION,
        "policy_version": pver,
        "dedup_version": dedup.content_digest,
    }
    # the stage decides for the records dedup kept: a split, or quarantine (a group conflict)
    decisions = [
        decision(stage="splits", action="accept" if r["split"] is not None else "quarantine",
                 reason="ok" if r["split"] is not None else "splits.group_conflict",
                 detail="" if r["split"] is not None else "its leakage group's published records are in other splits",
                 policy_version=pver, record_id=r["record_id"], source_id=r["source_id"], snapshot=r["snapshot"],
                 split=r["split"])
        for r in rows if r["kept"]
    ]
    with store.new_version(SPLITS, release, SPLITS_TABLES, spec) as w:
        w.write("assignments", rows)
        w.write(DECISIONS_TABLE, decisions)
        version = w.commit(extra_manifest={"report": {k: v for k, v in report.items() if k != "quarantined"},
                                           "quarantined": len(result.quarantined)})
    return version, report
