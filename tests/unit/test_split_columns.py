"""The splits layer's column path gives what the record-level rules give: the same leakage group,
u and split for every record and the same report, on releases with chains of near-duplicate
components across declared groups, records without a declared group, and none with a component."""

import random

import pyarrow as pa
import pytest

from corpus_assets.domain.tokens.split_columns import assign_columns, leakage_group_column
from corpus_assets.domain.tokens.splits import SplitPolicy, assign, leakage_groups, unit_interval


def _release(seed: int, n: int):
    rng = random.Random(seed)
    ids = [f"src:{rng.randrange(10**9):09d}/{i}" for i in range(n)]
    rng.shuffle(ids)
    declared = [None if rng.random() < 0.3 else f"doc:{rng.randrange(max(1, n // 3))}" for _ in ids]
    comps = [None if rng.random() < 0.6 else f"c{rng.randrange(max(1, n // 5))}" for _ in ids]
    return ids, declared, comps


@pytest.mark.parametrize("seed,n", [(0, 1), (1, 7), (2, 200), (3, 3000)])
def test_column_path_matches_record_rules(seed, n):
    ids, declared, comps = _release(seed, n)
    policy = SplitPolicy(fractions=[0.7, 0.2, 0.1], salt=f"salt-{seed}")
    want_keys = leakage_groups(ids, declared, comps)
    keys = leakage_group_column(pa.array(ids), pa.array(declared, pa.string()), pa.array(comps, pa.string()))
    assert keys.to_pylist() == want_keys
    got = assign_columns(keys, policy)
    want = assign(ids, want_keys, policy)
    assert got.split.to_pylist() == [want.split[r] for r in ids]
    assert got.u.to_pylist() == [unit_interval(k, policy.salt) for k in want_keys]
    assert got.report == want.report()


def test_a_chain_of_components_joins_declared_groups_and_takes_the_smallest_key():
    ids = ["r1", "r2", "r3", "r4", "r5"]
    declared = ["doc:b", "doc:b", "doc:a", None, "doc:c"]
    comps = [None, "x", "x", "y", "y"]  # r2 ~ r3 joins doc:b with doc:a; r4 ~ r5 joins r4 with doc:c
    keys = leakage_group_column(pa.array(ids), pa.array(declared, pa.string()), pa.array(comps, pa.string()))
    assert keys.to_pylist() == ["doc:a", "doc:a", "doc:a", "doc:c", "doc:c"]


def test_bad_columns_are_refused():
    with pytest.raises(ValueError, match="unique"):
        leakage_group_column(pa.array(["a", "a"]), pa.array([None, None], pa.string()), pa.array([None, None], pa.string()))
    with pytest.raises(ValueError, match="same length"):
        leakage_group_column(pa.array(["a", "b"]), pa.array([None], pa.string()), pa.array([None, None], pa.string()))


def test_known_u_is_taken_and_only_new_groups_are_hashed(monkeypatch):
    import corpus_assets.domain.tokens.split_columns as sc

    policy = SplitPolicy(fractions=[0.7, 0.2, 0.1], salt="s")
    keys = pa.array([f"g{i % 40}" for i in range(100)])
    fresh = assign_columns(keys, policy)
    earlier = assign_columns(pa.array([f"g{i}" for i in range(30)] + ["gone"]), policy)
    hashed = []
    monkeypatch.setattr(sc, "unit_interval", lambda k, salt: hashed.append(k) or unit_interval(k, salt))
    got = assign_columns(keys, policy, known=(earlier.group_key, earlier.u))
    assert sorted(hashed) == sorted(f"g{i}" for i in range(30, 40))
    assert (got.group_key, got.u, got.split, got.report) == (fresh.group_key, fresh.u, fresh.split, fresh.report)


def _clusters_version(store, snapshots: dict[str, range]):
    from corpus_assets.domain.layers.registry import CLUSTERS_SCHEMA, DEDUP_CLUSTERS
    from corpus_assets.domain.storage.layer_store import TableSpec

    rows = [{"record_id": f"docs:{i:04d}", "source_id": "docs", "snapshot": snap, "representative_id": f"docs:{i:04d}",
             "kind": "representative", "jaccard": 1.0, "group_id": f"c{i // 7}" if i % 3 else None}
            for snap, ids in snapshots.items() for i in ids]
    with store.new_version(DEDUP_CLUSTERS, "r1", {"clusters": TableSpec(CLUSTERS_SCHEMA)}, {"n": len(rows)}) as w:
        w.write("clusters", rows)
        return w.commit()


def _curated(store, snapshot: str, ids: range) -> None:
    """Curated records with only what the splits read: ids and declared groups."""
    from corpus_assets.domain.curate.curated_layer import CURATED_TABLES
    from corpus_assets.domain.layers.registry import CURATED_RECORDS

    rows = [{"record_id": f"docs:{i:04d}", "group_id": f"doc:{i // 4}" if i % 2 else None} for i in ids]
    with store.new_version(CURATED_RECORDS, snapshot, {"records": CURATED_TABLES["records"]}, {"s": snapshot}) as w:
        w.write("records", rows)
        w.commit()


@pytest.mark.parametrize("salt_before", ["same", "another"])
def test_a_rebuild_with_the_earlier_splits_writes_what_a_fresh_build_writes(tmp_path, salt_before):
    import shutil

    from corpus_assets.domain.storage.layer_store import LayerStore
    from corpus_assets.domain.tokens.splits_layer import build_splits

    policy = SplitPolicy(fractions=[0.7, 0.2, 0.1], salt="same")
    before = {"docs.20260101T000000": range(0, 80)}
    after = {**before, "docs.20260102T000000": range(80, 96)}
    inc = LayerStore(tmp_path / "inc")
    for snap, ids in after.items():
        _curated(inc, snap, ids)
    shutil.copytree(tmp_path / "inc", tmp_path / "fresh")
    fresh = LayerStore(tmp_path / "fresh")
    earlier, _ = build_splits(inc, "r1", policy.model_copy(update={"salt": salt_before}), dedup=_clusters_version(inc, before))
    again, report = build_splits(inc, "r1", policy, dedup=_clusters_version(inc, after), earlier=earlier)
    want, want_report = build_splits(fresh, "r1", policy, dedup=_clusters_version(fresh, after))
    assert report == want_report
    assert again.version == want.version
    for table in ("assignments", "decisions"):
        assert again.read_table(table).equals(want.read_table(table))
    assert {f["path"]: f["sha256"] for t in again.manifest["tables"].values() for f in t["files"]} == \
        {f["path"]: f["sha256"] for t in want.manifest["tables"].values() for f in t["files"]}
