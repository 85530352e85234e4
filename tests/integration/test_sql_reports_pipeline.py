"""The SQL report models through Dagster: ``reports_job`` over a small release built by
``release_job``. Each model's result equals the same fact computed here, in plain Python, from the
layer tables (cluster sizes, split records / groups / tokens, the plan's realized shares) and from
the catalog (a filed and resolved deletion request, a revoked version). Before any release exists
the release-level models give empty results with a note instead of failing."""

import json
from collections import Counter, defaultdict

import dagster as dg
import pytest

from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.deletion.requests import file_request, get
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.release.registry import record_consumption, register_published, registry, revoke
from corpus_assets.domain.deletion.tombstones import resolve, write_tombstones
from release_fixture import DOCS, TOKENIZER, build_snapshots, run_release, setup_release
from stage_chain import check_stage_accounting

MIXTURE = ("mixture: {unit: documents, weights: {site_docs: 0.5, site_chat: 0.5}, budget: 40, replacement: true, "
           "seed: 7, target_weights: {site_docs: 0.7, site_chat: 0.3}}\n")
BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER + MIXTURE
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 512}\n")
EXTRA_DOCS = {
    "gc_copy": DOCS["gc"],  # exact duplicate of site_docs:gc
    "gc_edit": DOCS["gc"].replace("periodically walks", "regularly walks"),  # near duplicate
    "venv_copy": DOCS["venv"],
}
RELEASE_MODELS = ("duplicate_clusters", "split_balance", "mixture_vs_target")
REQUESTER, REASON = "owner@example.org", "a private reason that must never reach a report"


def _result(store, model):
    return store.require_current(model, "_all").read_table("result").to_pylist()


def _md(result, model):
    return result.asset_materializations_for_node(model)[0].metadata


def test_reports_job_over_a_release_matches_the_layer_tables(corpus_env, tmp_path, monkeypatch):
    setup_release(tmp_path, monkeypatch, BODY, extra_docs=EXTRA_DOCS)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    store = LayerStore(corpus_env)
    cat = Catalog.at(corpus_env / "catalog.duckdb")
    with dg.instance_for_test() as instance:
        # resolve inside the entered instance (DAGSTER_NOTES: the instance weakref trap)
        reports = defs.resolve_job_def("reports_job")
        build_snapshots(defs, instance)

        # no release yet: the release-level models run, give no rows and say why
        early = reports.execute_in_process(instance=instance)
        assert early.success
        for model in RELEASE_MODELS:
            md = _md(early, model)
            assert md["rows"].value == 0 and "nothing materialized yet" in md["note"].value, model
        assert _result(store, "stage_accounting") == []  # it counts per release
        assert _result(store, "decision_reasons")  # snapshot-level decisions do have rows

        assert run_release(defs, instance).success

        # a deletion request, resolved into tombstones; the published version consumed, then revoked
        (published,) = [r for r in registry(cat, "r1") if r["status"] == "published"]
        record_consumption(cat, "train-run-1", "r1", published["build_id"], "trainer")
        request_id = file_request(cat, {"kind": "record", "record_id": "site_docs:pathlib", "requester": REQUESTER, "reason": REASON})
        resolution = resolve(store, get(cat, request_id))
        generation = write_tombstones(cat, request_id, resolution)
        register_published(cat, "r1", "successor-build", "0" * 64, "releases/r1/successor-build")
        revoke(cat, "r1", published["build_id"], successor_build_id="successor-build", request_ids=[request_id])

        result = reports.execute_in_process(instance=instance)
        assert result.success
    assert {e.asset_key.path[-1] for e in result.get_asset_materialization_events()} == {
        "stage_accounting", "decision_reasons", "curation_retention", "contamination_summary", "duplicate_clusters",
        "split_balance", "mixture_vs_target", "tombstones_and_revocations"}

    # --- stage accounting: one row per stage from raw items to packed tokens, adding up ------------
    check_stage_accounting(_result(store, "stage_accounting"), store, "r1")
    reasons = _result(store, "decision_reasons")
    dedup = [r for r in reasons if r["layer"] == "dedup_clusters"]
    assert {(r["reason"], r["decisions"]) for r in dedup if r["outcome"] == "rejected"} == {
        ("dedup.exact_duplicate", 2), ("dedup.near_duplicate", 1)}  # gc_copy and venv_copy, gc_edit

    # --- duplicate clusters: sizes from the clusters table ---------------------------------------
    clusters = store.require_current("dedup_clusters", "r1").read_table("clusters").to_pylist()
    size = Counter(c["representative_id"] for c in clusters)
    hist = Counter(size.values())
    rows = [r for r in _result(store, "duplicate_clusters") if r["release"] == "r1"]
    dist = {r["cluster_size"]: (r["clusters"], r["records"]) for r in rows if r["section"] == "size_distribution"}
    assert dist == {s: (n, s * n) for s, n in hist.items()}
    assert max(dist) == 3  # gc + its exact copy + its near edit
    largest = [(r["representative_id"], r["cluster_size"]) for r in rows if r["section"] == "largest"]
    assert largest == sorted(((rid, s) for rid, s in size.items() if s > 1), key=lambda t: (-t[1], t[0]))[:10]
    top = next(r for r in rows if r["section"] == "largest" and r["rank"] == 1)
    kinds = Counter(c["kind"] for c in clusters if c["representative_id"] == top["representative_id"])
    assert (top["exact_duplicates"], top["near_duplicates"]) == (kinds["exact"], kinds["near"]) == (1, 1)
    assert top["representative_source"] == "site_docs"
    assert "size_distribution" in _md(result, "duplicate_clusters")["preview"].value

    # --- split balance: records, groups and tokens per split ---------------------------------------
    assignments = store.require_current("splits", "r1").read_table("assignments").to_pylist()
    views = store.require_current("token_views", "r1").read_table(
        "views", columns=["record_id", "variant", "split", "source_id", "n_tokens", "label_tokens"]).to_pylist()
    tokens, labels = defaultdict(int), defaultdict(int)
    for v in views:
        tokens[v["record_id"]] += v["n_tokens"]
        labels[v["record_id"]] += v["label_tokens"]
    expected = {}
    for split in {a["split"] for a in assignments}:
        mine = [a for a in assignments if a["split"] == split]
        expected[split or "(quarantined)"] = {
            "records": len(mine), "kept_records": sum(a["kept"] for a in mine),
            "groups": len({a["group_key"] for a in mine}),
            "tokens": sum(tokens[a["record_id"]] for a in mine), "label_tokens": sum(labels[a["record_id"]] for a in mine),
        }
    got = {r["split"]: r for r in _result(store, "split_balance") if r["release"] == "r1"}
    assert set(got) == set(expected) | {"train", "validation", "test"}
    for split, facts in expected.items():
        assert {k: got[split][k] for k in facts} == facts, split
    assert {s: got[s]["target"] for s in ("train", "validation", "test")} == {"train": 0.6, "validation": 0.2, "test": 0.2}
    n_assigned = sum(1 for a in assignments if a["split"] is not None)
    for s in ("train", "validation", "test"):
        assert got[s]["record_share"] == pytest.approx(expected.get(s, {"records": 0})["records"] / n_assigned, abs=5e-5)
        assert got[s]["record_drift"] == pytest.approx(got[s]["record_share"] - got[s]["target"], abs=2e-4)
    assert sum(got[s]["tokens"] for s in got) == sum(v["n_tokens"] for v in views)

    # --- mixture vs target: realized shares from the plan table --------------------------------------
    plan = store.require_current("mixture_plan", "r1").read_table("plan").to_pylist()
    draws = Counter(p["source"] for p in plan)
    plan_tokens = Counter()
    for p in plan:
        plan_tokens[p["source"]] += p["n_tokens"]
    available = Counter(v["source_id"] for v in views if v["split"] == "train" and v["variant"] in (None, "chosen"))
    mix = {r["source"]: r for r in _result(store, "mixture_vs_target") if r["release"] == "r1"}
    assert set(mix) == {"site_chat", "site_docs"}
    for src, q in (("site_docs", 0.7), ("site_chat", 0.3)):
        r = mix[src]
        assert r["draws"] == draws[src] and r["tokens"] == plan_tokens[src]
        assert r["realized_document_share"] == pytest.approx(draws[src] / len(plan), abs=5e-5)
        assert r["realized_token_share"] == pytest.approx(plan_tokens[src] / sum(plan_tokens.values()), abs=5e-5)
        assert r["target_share"] == 0.5 and r["gap"] == pytest.approx(draws[src] / len(plan) - 0.5, abs=5e-5)
        assert r["available_records"] == available[src]
        assert r["effective_epochs"] == pytest.approx(draws[src] / available[src], abs=5e-5)
        assert r["over_epoch_limit"] == (draws[src] / available[src] > 4.0)
        assert r["importance_weight"] == pytest.approx(q / 0.5, abs=5e-5)
    assert sum(draws.values()) == 40

    # --- tombstones and revocations: the catalog, without any text ------------------------------------
    rows = _result(store, "tombstones_and_revocations")
    req = [r for r in rows if r["section"] == "deletion_requests"]
    assert [(r["kind"], r["status"], r["requests"]) for r in req] == [("record", "resolved", 1)]
    tomb = [r for r in rows if r["section"] == "tombstones"]
    assert [(r["generation"], r["scope"], r["requests"], r["record_ids"]) for r in tomb] == [
        (generation, "record", 1, len(resolution.record_ids))]
    with cat.transaction() as conn:
        (n_rows,) = conn.execute("SELECT count(*) FROM tombstones WHERE request_id = ?", [request_id]).fetchone()
    assert tomb[0]["tombstones"] == n_rows >= 1
    rev = [r for r in rows if r["section"] == "revoked_releases"]
    assert [(r["release"], r["build_id"], r["successor_build_id"], r["requests"], r["affected_runs"], r["consumers"])
            for r in rev] == [("r1", published["build_id"], "successor-build", 1, 1, 1)]
    stored = json.dumps(rows, default=str) + str(_md(result, "tombstones_and_revocations"))
    assert REQUESTER not in stored and REASON not in stored and "site_docs:pathlib" not in stored


def test_models_list_every_report_in_the_data_card_links():
    from corpus_assets.domain.release.build import REPORT_LINKS
    from corpus_assets.assets.reports.sql_assets import SQL_FOLDER

    models = sorted(p.stem for p in SQL_FOLDER.glob("*.sql"))
    assert len(models) >= 7
    links = " ".join(REPORT_LINKS.values())
    for m in models:
        assert f"dagster asset `{m}` (dbt_like_sql/{m}.sql)" in links
