"""dedup_clusters through Dagster: exact aliases across sources, near duplicates, stable representatives."""

import json
from datetime import datetime, timedelta, timezone

import dagster as dg

from pathlib import Path

from conftest import write_sources
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore

FIXTURE_TOKENIZER = Path(__file__).resolve().parents[1] / "data" / "tokenizer" / "tiny_bpe.json"
TOKENIZER_SPEC = (
    f"tokenizer: {{path: '{FIXTURE_TOKENIZER}', special_tokens: ['<|endoftext|>', '<|pad|>'], eos_token: '<|endoftext|>'}}\n"
)

BASE = (
    "The garbage collector in CPython complements reference counting by finding reference cycles. "
    "Objects that refer to each other in a loop never reach a reference count of zero, so the cycle "
    "detector periodically walks the container objects of each generation, subtracts internal "
    "references and frees whatever is unreachable from outside the group. Generations keep the cost "
    "low because most objects die young, and the thresholds of each generation can be tuned with the "
    "gc module when an application allocates many long lived containers. Calling gc.collect() forces "
    "a full collection. Disabling the collector is safe only when the program creates no cycles. "
    "Debug flags print what the collector finds."
)
OTHER = (
    "A virtual environment isolates the packages of one project from every other project on the same "
    "machine. It holds its own interpreter link, its own site packages folder and its own scripts, so "
    "installing a library for one application never changes what another application imports. Create "
    "one with the venv module, activate it in the shell, and record the exact versions you depend on "
    "so that colleagues and continuous integration can rebuild the same environment later. Delete the "
    "folder to start over. Never commit it to version control. Each project gets its own."
)


def _docs(ids_texts):
    return "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in ids_texts)


def test_release_dedup_keeps_aliases_and_picks_stable_representatives(corpus_env, tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    near = BASE.replace("periodically walks", "regularly walks")  # one word changed: J well above 0.8
    (tmp_path / "a" / "docs.jsonl").write_text(_docs([("gc", BASE), ("venv", OTHER)]))
    (tmp_path / "b" / "docs.jsonl").write_text(_docs([("gc-copy", BASE), ("gc-edit", near)]))
    gov = "governance: {license: CC0-1.0, rights_evidence: https://example.org/rights}"
    write_sources(tmp_path / "sources.yaml", f"""
sources:
  - id: site_b
    kind: jsonl
    root: {tmp_path / 'b'}
    include: ["*.jsonl"]
    adapter: text_document
    priority: 50
    {gov}
  - id: site_a
    kind: jsonl
    root: {tmp_path / 'a'}
    include: ["*.jsonl"]
    adapter: text_document
    priority: 10
    {gov}
""")
    rel = tmp_path / "releases"
    rel.mkdir()
    (rel / "r1.yaml").write_text(
        "name: r1\nsnapshots: {sources: [site_a, site_b]}\ndedup: {lsh: {threshold: 0.8}}\n"
        "split: {fractions: [0.5, 0.25, 0.25]}\n" + TOKENIZER_SPEC
    )
    monkeypatch.setenv("CORPUS_RELEASES", str(rel))
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    t0 = datetime(2026, 11, 29, 14, 0, tzinfo=timezone.utc)
    with dg.instance_for_test() as instance:
        assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success
        # site_b is captured first: completion order must not decide representatives
        for i, src in enumerate(["site_b", "site_a"]):
            key = snapshot_key(src, t0 + timedelta(minutes=i))
            instance.add_dynamic_partitions("snapshots", [key])
            assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success
        instance.add_dynamic_partitions("releases", ["r1"])
        result = defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key="r1")
        assert result.success
    v = LayerStore(corpus_env).require_current("dedup_clusters", "r1")
    clusters = {r["record_id"]: r for r in v.read_table("clusters").to_pylist()}
    # site_a has the better (lower) priority: it represents the exact pair and the near duplicate
    assert clusters["site_a:gc"]["kind"] == "representative"
    assert (clusters["site_b:gc-copy"]["kind"], clusters["site_b:gc-copy"]["representative_id"]) == ("exact", "site_a:gc")
    assert (clusters["site_b:gc-edit"]["kind"], clusters["site_b:gc-edit"]["representative_id"]) == ("near", "site_a:gc")
    assert clusters["site_b:gc-edit"]["jaccard"] >= 0.8
    assert clusters["site_a:venv"]["kind"] == "representative"
    # one leakage group for the three GC texts, another for venv
    assert {clusters[k]["group_id"] for k in ("site_a:gc", "site_b:gc-copy", "site_b:gc-edit")} == {"site_a:gc"}
    assert clusters["site_a:venv"]["group_id"] == "site_a:venv"
    # every alias keeps its source (governance is never lost)
    aliases = [a for a in v.read_table("aliases").to_pylist() if a["representative_id"] == "site_a:gc"]
    assert {(a["record_id"], a["source_id"]) for a in aliases} == {("site_a:gc", "site_a"), ("site_b:gc-copy", "site_b")}
    mat = result.asset_materializations_for_node("dedup_clusters")[0]
    assert mat.metadata["exact_duplicates"].value == 1 and mat.metadata["near_duplicates"].value == 1
    assert "site_a:gc" in mat.metadata["largest_clusters"].value
    assert mat.metadata["capped_buckets"].value == 0 and "pairs_before_cap" in mat.metadata["lsh_buckets"].value
    # splits: the three GC texts form one leakage group, so they share one split
    store = LayerStore(corpus_env)
    assignments = {r["record_id"]: r for r in store.require_current("splits", "r1").read_table("assignments").to_pylist()}
    assert len({assignments[k]["split"] for k in ("site_a:gc", "site_b:gc-copy", "site_b:gc-edit")}) == 1
    assert len({assignments[k]["group_key"] for k in ("site_a:gc", "site_b:gc-copy", "site_b:gc-edit")}) == 1
    assert all(r["split"] in {"train", "validation", "test"} for r in assignments.values())
    # tokenizer: loaded from a tokenizer.json, frozen by its digest
    tok = store.require_current("tokenizer", "r1")
    assert tok.manifest["vocab_size"] == 300 and tok.manifest["loaded_from"] == str(FIXTURE_TOKENIZER)
    tmat = result.asset_materializations_for_node("tokenizer")[0]
    assert tmat.metadata["tokenizer_digest"].value == tok.manifest["tokenizer_digest"]


def _setup_two_sources(tmp_path, monkeypatch):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    (tmp_path / "a" / "docs.jsonl").write_text(_docs([("gc", BASE), ("venv", OTHER)]))
    (tmp_path / "b" / "docs.jsonl").write_text(_docs([("gc-copy", BASE), ("gc-edit", BASE.replace("periodically", "regularly"))]))
    gov = "governance: {license: CC0-1.0, rights_evidence: https://example.org/rights}"
    body = "sources:\n" + "".join(
        f"  - id: {sid}\n    kind: jsonl\n    root: {tmp_path / d}\n    include: ['*.jsonl']\n    adapter: text_document\n    {gov}\n"
        for sid, d in (("site_a", "a"), ("site_b", "b"))
    )
    write_sources(tmp_path / "sources.yaml", body)
    rel = tmp_path / "releases"
    rel.mkdir(exist_ok=True)
    (rel / "r1.yaml").write_text(
        "name: r1\nsnapshots: {sources: [site_a, site_b]}\ndedup: {lsh: {threshold: 0.8, bands: 20, rows: 5}}\n"
        + TOKENIZER_SPEC
    )
    monkeypatch.setenv("CORPUS_RELEASES", str(rel))


def _build(order, t0):
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success
        for src, minute in order:
            key = snapshot_key(src, t0 + timedelta(minutes=minute))
            instance.add_dynamic_partitions("snapshots", [key])
            assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success
        instance.add_dynamic_partitions("releases", ["r1"])
        assert defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key="r1").success


def test_clusters_do_not_depend_on_materialization_order_and_new_snapshots_cost_only_themselves(tmp_path, monkeypatch, corpus_env):
    _setup_two_sources(tmp_path, monkeypatch)
    t0 = datetime(2026, 11, 29, 14, 0, tzinfo=timezone.utc)
    _build([("site_a", 0), ("site_b", 1)], t0)
    first = LayerStore(corpus_env).require_current("dedup_clusters", "r1")
    # a fresh home, the same snapshots materialized in the opposite order
    home_b = tmp_path / "home_b"
    (home_b / "dagster").mkdir(parents=True)
    monkeypatch.setenv("CORPUS_HOME", str(home_b))
    monkeypatch.setenv("DAGSTER_HOME", str(home_b / "dagster"))
    _build([("site_b", 1), ("site_a", 0)], t0)
    second = LayerStore(home_b).require_current("dedup_clusters", "r1")
    assert second.content_digest == first.content_digest
    assert second.read_table("clusters").to_pylist() == first.read_table("clusters").to_pylist()

    # a new snapshot of site_a: only its own signatures are computed; older ones keep their version
    store = LayerStore(home_b)
    before = {k: store.versions("minhash_signatures", k) for k in store.partitions("minhash_signatures")}
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    with dg.instance_for_test() as instance:
        key = snapshot_key("site_a", t0 + timedelta(hours=1))
        instance.add_dynamic_partitions("snapshots", [key])
        assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success
    after = {k: store.versions("minhash_signatures", k) for k in store.partitions("minhash_signatures")}
    assert set(after) - set(before) == {key}
    assert all(after[k] == before[k] for k in before)
