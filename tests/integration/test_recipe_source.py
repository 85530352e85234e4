"""The `recipe` source kind: a recipe data job run by a snapshot capture, its tasks flowing through
the same layers as any other snapshot, references kept owner-only and never tokenized."""

import json
import stat
from datetime import datetime, timezone

import dagster as dg

from conftest import PROJECT, write_sources
from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.recipe.snapshot import load_snapshot

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
CONFIG = """
recipe: corpus_assets.domain.recipe.examples.tir:create_recipe
purpose: joint
seed: 5
target_count: 16
max_batches: 3
params: {candidate_count: 128, minimum_one_pass: 4, maximum_per_recipe: 2, minimum_per_type: 1}
calibration:
  implementation: corpus_assets.domain.recipe.examples.tir_calibration:rule_based_solver
  repeats: 2
  params: {seed: 3}
execution: {max_workers: 2, batch_size: 32}
"""


def test_recipe_source_snapshot_keeps_references_private_and_feeds_a_release(corpus_env, tmp_path, monkeypatch):
    (tmp_path / "tir.yaml").write_text(CONFIG)
    write_sources(tmp_path / "sources.yaml", f"""
sources:
  - id: tir
    kind: recipe
    config: tir.yaml
    governance: {{license: CC0-1.0, rights_evidence: generated, allowed_uses: [post_training]}}
""")
    rel = tmp_path / "releases"
    rel.mkdir()
    fixture = PROJECT / "tests" / "data" / "tokenizer" / "tiny_bpe.json"
    (rel / "r1.yaml").write_text(
        "name: r1\nuses: [post_training]\nsnapshots: {sources: [tir]}\nsplit: {fractions: [0.6, 0.2, 0.2]}\n"
        f"tokenizer: {{path: '{fixture}', special_tokens: ['<|endoftext|>', '<|pad|>'], eos_token: '<|endoftext|>'}}\n"
        "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 512}\n")
    monkeypatch.setenv("CORPUS_RELEASES", str(rel))
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    key = snapshot_key("tir", T0)
    with dg.instance_for_test() as instance:
        assert defs.resolve_job_def("registry_job").execute_in_process(instance=instance).success
        instance.add_dynamic_partitions("snapshots", [key])
        assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success
        instance.add_dynamic_partitions("releases", ["r1"])
        assert defs.resolve_job_def("release_job").execute_in_process(instance=instance, partition_key="r1").success

    job_dir = corpus_env / "recipes" / "tir" / key
    data = load_snapshot(job_dir / "dataset")  # verifies digests and alignment
    refs = data.references()
    assert len(refs) == 16
    store = LayerStore(corpus_env)
    canon = store.require_current("canonical_records", key)
    records = {r["record_id"]: r for r in canon.read_table("records").to_pylist()}
    assert set(records) == {f"tir:{t}" for t in refs}
    assert {r["schema_type"] for r in records.values()} == {"task"}
    # references: only in the owner-only references table, never in a public record
    private = {r["record_id"]: json.loads(r["reference_json"])["reference"] for r in canon.read_table("references").to_pylist()}
    assert private == {f"tir:{t}": ref for t, ref in refs.items()}
    ref_dir = canon.table_files("references")[0].parent
    assert stat.S_IMODE(ref_dir.stat().st_mode) == 0o700
    for rid, r in records.items():
        answer = private[rid]["answer"]
        assert f"\\boxed{{{answer}}}" not in r["payload_json"] and '"answer"' not in r["payload_json"]
    # the release: task views are the prompt only — nothing of a task is a training target
    views = store.require_current("token_views", "r1").read_table("views").to_pylist()
    assert views and all(v["label_tokens"] == 0 for v in views)
    # the capture records the dataset identity
    raw = store.require_current("raw_snapshot", key)
    assert all(json.loads(r["extra_json"])["recipe_dataset_id"] == data.dataset_id
               for r in raw.read_table("items", columns=["extra_json"]).to_pylist())
