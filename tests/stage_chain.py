"""What the stage_accounting report must say about one release, computed here from the layer
tables and the shard files themselves (not from the decision records the report counts): shared by
the SQL report pipeline test and the demo test."""

from __future__ import annotations

import json

import pyarrow.compute as pc
import pyarrow.parquet as pq

STAGES = ["canonical_records", "curated_records", "dedup_clusters", "splits", "token_views", "mixture_plan", "packed_shards"]


def _packable(views):
    variant = views.column("variant")
    return views.filter(pc.fill_null(pc.or_(pc.is_null(variant), pc.equal(variant, "chosen")), True))


def expected_chain(store, release: str) -> dict:
    """Per stage: records in and accepted (the unit each stage decides on), and tokens where the
    stage measures them."""
    dedup = store.require_current("dedup_clusters", release)
    snapshots = dedup.manifest["build_spec"]["snapshots"]
    raw_items = sum(store.require_current("raw_snapshot", s).row_count("items") for s in snapshots)
    canonical = sum(store.require_current("canonical_records", s).row_count("records") for s in snapshots)
    curated = sum(store.require_current("curated_records", s).row_count("records") for s in snapshots)
    kinds = dedup.read_table("clusters", columns=["kind"]).column("kind").to_pylist()
    kept = kinds.count("representative")
    assignments = store.require_current("splits", release).read_table("assignments").to_pylist()
    assigned = sum(1 for a in assignments if a["kept"] and a["split"] is not None)
    tv = store.require_current("token_views", release)
    views = tv.read_table("views", columns=["record_id", "variant", "split", "n_tokens"])
    with_views = len(set(views.column("record_id").to_pylist()))
    packable = _packable(views)
    train_split = store.require_current("mixture_plan", release).manifest["build_spec"]["train_split"]
    plan = store.require_current("mixture_plan", release).read_table("plan", columns=["record_id", "n_tokens"])
    others = packable.filter(pc.not_equal(packable.column("split"), train_split))
    drawn = len(set(plan.column("record_id").to_pylist()))
    mixed_tokens = int(pc.sum(plan.column("n_tokens")).as_py() or 0) + int(pc.sum(others.column("n_tokens")).as_py() or 0)
    samples = plan.num_rows + others.num_rows
    placed = 0
    for row in store.require_current("packed_shards", release).read_table("shards").to_pylist():
        meta = json.loads(row["meta_json"])
        spans = pq.read_table(store.home / row["directory"] / meta["files"]["spans"]["path"],
                              columns=["start", "end", "src_token_start"])
        spans = spans.filter(pc.is_valid(spans.column("src_token_start")))  # view tokens (no BOS, no padding)
        placed += int(pc.sum(pc.subtract(spans.column("end"), spans.column("start"))).as_py() or 0)
    return {
        "canonical_records": {"records_in": raw_items, "accepted": canonical},
        "curated_records": {"records_in": canonical, "accepted": curated},
        "dedup_clusters": {"records_in": curated, "accepted": kept},
        "splits": {"records_in": kept, "accepted": assigned},
        "token_views": {"records_in": assigned, "accepted": with_views,
                        "tokens_out": int(pc.sum(views.column("n_tokens")).as_py() or 0)},
        "mixture_plan": {"records_in": with_views, "accepted": drawn + others.num_rows, "tokens_out": mixed_tokens},
        "packed_shards": {"records_in": samples, "tokens_in": mixed_tokens, "tokens_out": placed},
    }


def check_stage_accounting(rows: list[dict], store, release: str) -> None:
    """The report's rows for ``release``: one per stage in data-flow order, each adding up, each
    stage's input the previous stage's output, and every figure equal to the layers'."""
    mine = [r for r in rows if r["release"] == release]
    assert [r["layer"] for r in mine] == STAGES, [r["layer"] for r in mine]
    assert [r["step"] for r in mine] == sorted(r["step"] for r in mine)
    for r in mine:
        assert r["records_in"] == r["accepted"] + r["rejected"] + r["quarantined"] + r["deleted"], r
        assert 0 <= r["modified"] <= r["accepted"], r
    by = {r["layer"]: r for r in mine}
    for before, after in zip(STAGES[:-2], STAGES[1:-1]):
        assert by[after]["records_in"] == by[before]["accepted"], (before, after)
    assert by["packed_shards"]["tokens_in"] == by["mixture_plan"]["tokens_out"]
    for layer, facts in expected_chain(store, release).items():
        got = {k: by[layer][k] for k in facts}
        assert got == facts, (layer, got, facts)
