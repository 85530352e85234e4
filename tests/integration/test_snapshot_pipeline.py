"""Snapshots through Dagster for real: capture, canonicalize, account for every item, stay deterministic."""

from __future__ import annotations

import gzip
import shutil
from datetime import datetime, timezone

import dagster as dg
import pyarrow.parquet as pq

from conftest import write_sources
from corpus_assets.domain.demo.inputs import write_demo_inputs
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore

def _registry(defs, instance):
    """curated_records (in snapshot_job) needs the frozen evaluation registry first."""
    assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success


GOV = "governance: {license: CC0-1.0, rights_evidence: https://example.org/rights}"


def _defs():
    from corpus_assets.definitions import build_definitions

    return build_definitions()


def _snapshot(defs, instance, source_id, when=None, run_config=None, selection=None):
    key = snapshot_key(source_id, when or datetime.now(timezone.utc))
    instance.add_dynamic_partitions("snapshots", [key])
    job = defs.resolve_job_def("snapshot_job")
    kwargs = {"instance": instance, "partition_key": key, "run_config": run_config or {}}
    if selection is not None:
        kwargs["asset_selection"] = selection
    result = job.execute_in_process(**kwargs)
    assert result.success
    return key, result


def _checks(result):
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _decisions(home, key):
    v = LayerStore(home).require_current("canonical_records", key)
    return v, v.read_table("decisions").to_pylist()


def test_demo_dumps_through_dagster_account_for_every_line(corpus_env):
    write_demo_inputs(corpus_env / "demo_inputs")
    defs = _defs()
    with dg.instance_for_test() as instance:
        _registry(defs, instance)
        key, result = _snapshot(defs, instance, "demo_chat")
        checks = _checks(result)
        assert checks["accounting"].passed and checks["raw_integrity"].passed
        version, decisions = _decisions(corpus_env, key)
        by_reason = {}
        for d in decisions:
            by_reason[(d["outcome"], d["reason"])] = by_reason.get((d["outcome"], d["reason"]), 0) + 1
        # 5 conversations (one with an unpaired tool result) + malformed JSON + blank + invalid UTF-8
        assert by_reason == {
            ("accepted", "ok"): 4,
            ("quarantined", "schema_violation"): 1,
            ("quarantined", "malformed_json"): 1,
            ("rejected", "empty_document"): 1,
            ("quarantined", "invalid_utf8"): 1,
        }
        records = version.read_table("records").to_pylist()
        assert [r["record_id"] for r in records] == ["demo_chat:chat-0001", "demo_chat:chat-0002", "demo_chat:chat-0003", "demo_chat:chat-0004"]
        assert {r["schema_type"] for r in records} == {"messages"}
        # metadata a user reads in the UI
        mat = result.asset_materializations_for_node("canonical_records")[0]
        assert mat.metadata["accepted"].value == 4 and mat.metadata["quarantined"].value == 3
        assert "malformed_json" in mat.metadata["decisions"].value

        # task references stay private: stored owner-only, absent from every public table
        tkey, _ = _snapshot(defs, instance, "demo_tasks")
        tv = LayerStore(corpus_env).require_current("canonical_records", tkey)
        refs = tv.read_table("references").to_pylist()
        assert {r["record_id"] for r in refs} == {"demo_tasks:t-gcd-01", "demo_tasks:t-frac-02", "demo_tasks:t-mod-03"}
        public = b"".join(p.read_bytes() for t in ("records", "decisions") for p in tv.table_files(t))
        for f in tv.table_files("records"):
            for row in pq.read_table(f).to_pylist():
                assert "\\boxed{}" in row["text"]
                assert row["text"].rstrip().endswith("\\boxed{}.")
        assert (tv.root / "references").stat().st_mode & 0o077 == 0


def test_canonical_digest_is_independent_of_home_and_batch_size(corpus_env, tmp_path, monkeypatch):
    write_demo_inputs(corpus_env / "demo_inputs")
    defs = _defs()
    with dg.instance_for_test() as instance:
        _registry(defs, instance)
        key, first = _snapshot(
            defs, instance, "demo_instructions",
            run_config={"ops": {"canonical_records": {"config": {"batch_size": 1}}}},
        )
    digest_a = LayerStore(corpus_env).require_current("canonical_records", key).content_digest
    # a fresh home holding only the same raw snapshot, canonicalized with another batch size
    home_b = tmp_path / "home_b"
    shutil.copytree(corpus_env / "layers" / "raw_snapshot", home_b / "layers" / "raw_snapshot")
    shutil.copytree(corpus_env / "demo_inputs", home_b / "demo_inputs")
    (home_b / "dagster").mkdir()
    monkeypatch.setenv("CORPUS_HOME", str(home_b))
    monkeypatch.setenv("DAGSTER_HOME", str(home_b / "dagster"))
    defs_b = _defs()
    with dg.instance_for_test() as instance:
        _registry(defs_b, instance)
        instance.add_dynamic_partitions("snapshots", [key])
        result = defs_b.resolve_job_def("snapshot_job").execute_in_process(
            instance=instance, partition_key=key,
            run_config={"ops": {"canonical_records": {"config": {"batch_size": 1000}}}},
        )
        assert result.success
        # raw_snapshot reused the copied capture instead of re-reading the source
        raw_mat = result.asset_materializations_for_node("raw_snapshot")[0]
    digest_b = LayerStore(home_b).require_current("canonical_records", key).content_digest
    assert digest_a == digest_b
    can_mat = result.asset_materializations_for_node("canonical_records")[0]
    assert can_mat.metadata["content_digest"].value == digest_a
    assert raw_mat.metadata["content_digest"].value == LayerStore(corpus_env).require_current("raw_snapshot", key).content_digest


def test_raw_snapshot_is_immutable_once_captured(corpus_env):
    write_demo_inputs(corpus_env / "demo_inputs")
    defs = _defs()
    with dg.instance_for_test() as instance:
        _registry(defs, instance)
        key, _ = _snapshot(defs, instance, "demo_reasoning")
        store = LayerStore(corpus_env)
        before = store.require_current("raw_snapshot", key).content_digest
        # the source changes after the capture; re-materializing the partition must not re-read it
        p = corpus_env / "demo_inputs/reasoning/math.jsonl"
        p.write_bytes(p.read_bytes() + b'{"id": "late", "problem": "1+1?", "solution": "2", "answer": "2"}\n')
        result = defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key)
        assert result.success
        assert store.require_current("raw_snapshot", key).content_digest == before
        assert len(store.versions("raw_snapshot", key)) == 1
        # a new snapshot sees the new line
        key2, _ = _snapshot(defs, instance, "demo_reasoning", when=datetime(2030, 1, 1, tzinfo=timezone.utc))
        assert store.require_current("raw_snapshot", key2).row_count("items") == 4


def test_bad_inputs_each_get_a_reason_and_lose_nothing_else(corpus_env, tmp_path):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "good.html").write_text("<html><head><title>Good</title></head><body><main><h1>Reading files</h1>"
                                    + "<p>Open the file with a context manager so it is closed even when an error occurs. " * 20
                                    + "</p></main></body></html>")
    (docs / "image.html").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)
    (docs / "empty.txt").write_bytes(b"")
    (docs / "nested.html").write_text("<html><body>" + "<div>" * 100_000 + "deep" + "</div>" * 100_000 + "</body></html>")
    (docs / "big.txt").write_bytes(b"All work and no play makes a dull corpus. " * (50 * 1024 * 1024 // 42))
    (docs / "notes.md").write_text("# Notes\n\nCanonical records keep code whitespace:\n\n    def f():\n        return 1\n")
    outside = tmp_path / "secret.txt"
    outside.write_text("must never be read")
    (docs / "sub" / "escape.txt").symlink_to(outside)
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    good = b'{"text": "A complete and valid document about Python dictionaries and their views."}\n'
    (dumps / "a.jsonl").write_bytes(good + b"{not json\n" + b"\xff\xfe bad utf8\n" + b"[1, 2]\n" + b'{"no_text": 1}\n' + good)
    gz = gzip.compress(good * 3)
    (dumps / "b.jsonl.gz").write_bytes(gz[: len(gz) - 12])  # truncated archive
    (dumps / "c.jsonl").write_bytes(good)
    same_id = b'{"id": "doc-7", "text": "Two different rows that claim the same record id in one dump."}\n'
    (dumps / "d.jsonl").write_bytes(same_id + same_id.replace(b"Two different", b"Another"))
    write_sources(tmp_path / "sources.yaml", f"""
canonical: {{max_document_bytes: 20000000, max_html_depth: 2000}}
sources:
  - id: docs
    kind: local_dir
    root: {docs}
    include: ["**/*.html", "**/*.txt", "**/*.md"]
    {GOV}
  - id: dumps
    kind: jsonl
    root: {dumps}
    include: ["*.jsonl", "*.jsonl.gz"]
    adapter: text_document
    {GOV}
""")
    defs = _defs()
    with dg.instance_for_test() as instance:
        _registry(defs, instance)
        key, result = _snapshot(defs, instance, "docs")
        assert _checks(result)["accounting"].passed
        _, decisions = _decisions(corpus_env, key)
        reasons = {d["item_id"]: (d["outcome"], d["reason"]) for d in decisions}
        assert reasons["good.html"] == ("accepted", "ok")
        assert reasons["notes.md"] == ("accepted", "ok")
        assert reasons["image.html"] == ("quarantined", "binary_content")
        assert reasons["empty.txt"] == ("rejected", "empty_document")
        assert reasons["big.txt"] == ("quarantined", "too_large")
        assert reasons["nested.html"][0] == "quarantined"
        assert reasons["sub/escape.txt"] == ("quarantined", "unreadable_input")
        raw = LayerStore(corpus_env).require_current("raw_snapshot", key)
        assert b"must never be read" not in b"".join(p.read_bytes() for p in raw.table_files("items"))

        key, result = _snapshot(defs, instance, "dumps")
        assert _checks(result)["accounting"].passed
        _, decisions = _decisions(corpus_env, key)
        got = [(d["item_id"], d["outcome"], d["reason"]) for d in decisions]
        assert got[:6] == [
            ("a.jsonl#L1", "accepted", "ok"),
            ("a.jsonl#L2", "quarantined", "malformed_json"),
            ("a.jsonl#L3", "quarantined", "invalid_utf8"),
            ("a.jsonl#L4", "quarantined", "not_an_object"),
            ("a.jsonl#L5", "quarantined", "unknown_schema"),
            ("a.jsonl#L6", "accepted", "ok"),
        ]
        assert [g[1:] for g in got if g[0].startswith("b.jsonl.gz")][-1] == ("quarantined", "truncated_archive")
        assert got[-3] == ("c.jsonl#L1", "accepted", "ok")
        # the first claimant of a record id keeps it; a later one is quarantined, not silently merged
        assert got[-2:] == [("d.jsonl#L1", "accepted", "ok"), ("d.jsonl#L2", "quarantined", "duplicate_record_id")]
