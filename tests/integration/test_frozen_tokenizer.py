"""A release with a trained, frozen tokenizer, rebuilt after an increment through the real jobs:
the tokenizer is kept (same digest, not retrained), so the token views of unchanged records come
from the cache and only the new records are tokenized; without freeze the same increment retrains
and reuses nothing. Changing a training setting retrains, says why and records it; from_build
takes a published build's tokenizer, or fails clearly when it cannot be verified."""

import json
import shutil
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest

from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.storage.layer_store import LayerStore
from release_fixture import T0, build_snapshots, run_release, setup_release, step_failure

TRAIN = "train: {vocab_size: 420, min_frequency: 1}, special_tokens: ['<|endoftext|>', '<|pad|>'], eos_token: '<|endoftext|>'"
SPLIT = "split: {fractions: [0.8, 0.1, 0.1]}\n"
NEW_DOCS = {  # arrive in the increment; distinct words, so a retrained tokenizer learns other merges
    "asyncio": (
        "Coroutines suspend at await expressions while the event loop schedules other tasks. The asyncio module "
        "gathers awaitables, cancels stragglers with timeouts and wraps blocking calls in executor threads, so a "
        "single thread can serve thousands of sockets. Queues hand work between producers and consumers, locks "
        "and semaphores guard shared state, and task groups make sure no child outlives its parent. Debug mode "
        "reports coroutines that were never awaited. Signals stop the loop cleanly."
    ),
    "sqlite3": (
        "The sqlite3 module opens a database file, executes parameterized statements through a cursor and commits "
        "transactions explicitly. Rows come back as tuples unless a row factory is configured, and adapters "
        "convert dates and decimals on the way in and out. Because the whole database is one ordinary file, "
        "backups are copies and tests can use a fresh file in memory. Placeholders keep quoting mistakes and "
        "injection out of queries. Connections close at exit."
    ),
    "zipfile": (
        "Zip archives hold compressed members with their names, sizes and checksums. The zipfile module lists "
        "them, extracts selected members, appends new ones and verifies every checksum on request, while "
        "shutil.make_archive builds whole archives from folders in one call. Members can be read as streams "
        "without unpacking the archive to disk, which keeps memory flat for large bundles. Paths inside an "
        "archive always use forward slashes. Encrypted members need a password."
    ),
}


# packing.order append and 2 blocks per shard: every split has several shards, and a rebuild keeps
# the ones before the new samples
APPEND_PACKING = ("packing: {seq_len: 16, mode: atomic, overlength: split, pad_token: '<|pad|>', order: append}\n"
                  "shards: {positions: 32}\n")


def _release_body(tokenizer: str) -> str:
    return SPLIT + f"tokenizer: {{{tokenizer}}}\n"


def _increment(tmp_path, defs, instance) -> None:
    """A new snapshot of site_docs: the same documents plus NEW_DOCS (a whole capture)."""
    path = tmp_path / "docs" / "docs.jsonl"
    path.write_text(path.read_text() + "".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in NEW_DOCS.items()))
    key = snapshot_key("site_docs", T0 + timedelta(hours=1))
    instance.add_dynamic_partitions("snapshots", [key])
    assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success


def _md(result, node):
    return result.asset_materializations_for_node(node)[0].metadata


def _tokenizer_logs(instance, result) -> str:
    return "\n".join(e.user_message for e in instance.all_logs(result.run_id) if e.step_key == "tokenizer" and e.user_message)


def _published_manifest(home, result) -> dict:
    bid = _md(result, "release_manifest")["build_id"].value
    return json.loads((home / "releases" / "r1" / bid / "manifest.json").read_text())


@pytest.mark.parametrize("freeze", [True, False], ids=["frozen", "retrained"])
def test_increment_rebuild_keeps_a_frozen_tokenizer_and_tokenizes_only_new_records(corpus_env, tmp_path, monkeypatch, freeze):
    setup_release(tmp_path, monkeypatch, _release_body(TRAIN + (", freeze: true" if freeze else "")))
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    store = LayerStore(corpus_env)
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        first = run_release(defs, instance)
        assert first.success
        tok1 = store.require_current("tokenizer", "r1")
        splits1 = store.require_current("splits", "r1").content_digest
        assert _md(first, "tokenizer")["how"].value == "trained"
        assert tok1.manifest["provenance"]["splits_version"] == splits1
        views1 = _md(first, "token_views")
        assert (views1["tokenized_records"].value, views1["reused_records"].value) == (6, 0)
        manifest1 = _published_manifest(corpus_env, first)
        assert manifest1["tokenizer"]["provenance"]["how"] == "trained"
        segment_keys1 = {e["key"] for e in store.require_current("token_views", "r1").manifest["segments"]}

        _increment(tmp_path, defs, instance)
        second = run_release(defs, instance)
        assert second.success
        logs = _tokenizer_logs(instance, second)

    assignments = store.require_current("splits", "r1").read_table("assignments").to_pylist()
    new_ids = {f"site_docs:{k}" for k in NEW_DOCS}
    new_splits = {r["record_id"]: r["split"] for r in assignments if r["record_id"] in new_ids and r["kept"]}
    assert set(new_splits) == new_ids and "train" in new_splits.values()  # the increment changes the training split
    splits2 = store.require_current("splits", "r1").content_digest
    assert splits2 != splits1
    tok2 = store.require_current("tokenizer", "r1")
    views2 = _md(second, "token_views")
    records2 = views2["records"].value
    assert records2 == 6 + len(NEW_DOCS)
    manifest2 = _published_manifest(corpus_env, second)
    assert manifest2["build_id"] != manifest1["build_id"]
    if freeze:
        # the stored trained tokenizer is kept: same version, same digest, trained on the first build's splits
        assert tok2.version == tok1.version and tok2.manifest["tokenizer_digest"] == tok1.manifest["tokenizer_digest"]
        assert tok2.manifest["provenance"]["splits_version"] == splits1
        assert _md(second, "tokenizer")["how"].value == "frozen"
        assert "frozen: reusing version" in logs and "not retrained" in logs
        assert "training records" not in logs  # what a training run logs: "trained on N training records"
        prov = manifest2["tokenizer"]["provenance"]
        assert prov["how"] == "frozen" and prov["trained_on_splits_version"] == splits1 != splits2
        assert prov["tokenizer_version"] == tok1.content_digest and prov["release"] == "r1"
        assert manifest2["layer_versions"]["tokenizer"] == manifest1["layer_versions"]["tokenizer"]
        assert manifest2["tokenizer"]["digest"] == manifest1["tokenizer"]["digest"]
        # only the new records were tokenized; every unchanged one came from the first build's views
        assert views2["tokenized_records"].value == len(NEW_DOCS)
        # a segment (site_chat's unchanged snapshot, with the small snapshots it shares files with)
        # whose inputs did not change is adopted whole; site_docs' new capture repeats the old
        # documents, whose views come from the first build row by row
        segments2 = store.require_current("token_views", "r1").manifest["segments"]
        assert views2["adopted_records"].value == sum(e["records"] for e in segments2 if e["key"] in segment_keys1)
        assert views2["reused_records"].value > 0
        assert views2["reused_records"].value + views2["adopted_records"].value == records2 - len(NEW_DOCS)
    else:
        assert tok2.manifest["tokenizer_digest"] != tok1.manifest["tokenizer_digest"]
        assert tok2.manifest["provenance"]["splits_version"] == splits2
        assert _md(second, "tokenizer")["how"].value == "trained" and "trained on" in logs
        assert manifest2["tokenizer"]["provenance"]["how"] == "trained"
        assert (views2["tokenized_records"].value, views2["reused_records"].value) == (records2, 0)
        assert views2["adopted_records"].value == 0  # a new tokenizer digest: no stored file matches


def test_changing_a_training_setting_retrains_and_says_why(corpus_env, tmp_path, monkeypatch):
    rel = setup_release(tmp_path, monkeypatch, _release_body(TRAIN + ", freeze: true"))
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    store = LayerStore(corpus_env)
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        assert run_release(defs, instance).success
        before = store.require_current("tokenizer", "r1")
        spec = (rel / "r1.yaml").read_text()
        (rel / "r1.yaml").write_text(spec.replace("vocab_size: 420", "vocab_size: 440"))
        changed = run_release(defs, instance)
        assert changed.success
        warnings = [e.user_message for e in instance.all_logs(changed.run_id)
                    if e.step_key == "tokenizer" and e.level == 30]  # logging.WARNING
    after = store.require_current("tokenizer", "r1")
    assert after.manifest["tokenizer_digest"] != before.manifest["tokenizer_digest"]
    prov = after.manifest["provenance"]
    assert prov["how"] == "trained" and prov["replaces"] == {"tokenizer_digest": before.manifest["tokenizer_digest"],
                                                             "version": before.content_digest}
    assert "train: " in prov["retrained_because"] and '"vocab_size": 420' in prov["retrained_because"] \
        and '"vocab_size": 440' in prov["retrained_because"]
    assert len(warnings) == 1 and "was replaced: training settings changed" in warnings[0]
    manifest = _published_manifest(corpus_env, changed)
    assert manifest["tokenizer"]["provenance"]["retrained_because"] == prov["retrained_because"]
    assert "retrained" in manifest["tokenizer"]["origin"]


def test_from_build_takes_a_published_builds_tokenizer_or_fails_clearly(corpus_env, tmp_path, monkeypatch):
    rel = setup_release(tmp_path, monkeypatch, _release_body(TRAIN))
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    store = LayerStore(corpus_env)
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        first = run_release(defs, instance)
        assert first.success
        bid = _md(first, "release_manifest")["build_id"].value
        tok1 = store.require_current("tokenizer", "r1")
        head = "name: r2\nsnapshots: {sources: [site_docs, site_chat]}\n" + SPLIT
        (rel / "r2.yaml").write_text(head + f"tokenizer: {{from_build: 'r1@{bid}'}}\n")
        second = run_release(defs, instance, "r2")
        assert second.success
        tok2 = store.require_current("tokenizer", "r2")
        assert tok2.manifest["tokenizer_digest"] == tok1.manifest["tokenizer_digest"]
        assert tok2.manifest["provenance"]["from_build"] == f"r1@{bid}"
        assert tok2.manifest["tokenizer_spec"]["special_tokens"] == ["<|endoftext|>", "<|pad|>"]  # came with it
        views = _md(second, "token_views")
        # the same snapshots, splits and tokenizer as r1: every snapshot's files are r1's, adopted whole
        assert [views[k].value for k in ("tokenized_records", "reused_records", "adopted_records")] == [0, 0, 6]
        bid2 = _md(second, "release_manifest")["build_id"].value
        prov = json.loads((corpus_env / "releases" / "r2" / bid2 / "manifest.json").read_text())["tokenizer"]["provenance"]
        assert prov["how"] == "from_build" and prov["from_build"] == f"r1@{bid}"
        assert prov["tokenizer_version"] == tok1.content_digest and prov["release"] == "r1"
        assert prov["trained_on_splits_version"] == store.require_current("splits", "r1").content_digest

        def fails(ref: str, words: str) -> None:
            (rel / "r2.yaml").write_text(head + f"tokenizer: {{from_build: '{ref}'}}\n")
            result = run_release(defs, instance, "r2", raise_on_error=False)
            failed = [ev.step_key for ev in result.all_events if ev.event_type_value == "STEP_FAILURE"]
            assert failed == ["tokenizer"], failed
            assert words in step_failure(result), step_failure(result)

        fails(f"r1@{'0' * 64}", f"release 'r1' has no published build {'0' * 64}")
        # the stored tokenizer no longer matches the digest the build recorded: never used
        version_dir = store.partition_dir("tokenizer", "r1") / tok1.version
        saved = tmp_path / "saved_tokenizer_version"
        shutil.copytree(version_dir, saved)
        manifest_path = version_dir / "_manifest.json"
        m = json.loads(manifest_path.read_text())
        m["tokenizer_digest"] = "f" * 64
        manifest_path.write_text(json.dumps(m))
        fails(f"r1@{bid}", "the recorded digests disagree")
        shutil.rmtree(version_dir)
        fails(f"r1@{bid}", f"the tokenizer version {tok1.version} that build was made with is no longer stored")
        shutil.copytree(saved, version_dir)


def test_an_appended_increment_keeps_the_earlier_shards_through_the_jobs(corpus_env, tmp_path, monkeypatch):
    """``packing.order: append`` with a frozen tokenizer, through release_job: the rebuild after an
    increment keeps the first build's shards before the new samples (the same files, linked), packs
    the rest, and the published build verifies."""
    setup_release(tmp_path, monkeypatch, _release_body(TRAIN + ", freeze: true") + APPEND_PACKING)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    store = LayerStore(corpus_env)
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        first = run_release(defs, instance)
        assert first.success, step_failure(first)
        v1 = store.require_current("packed_shards", "r1")
        _increment(tmp_path, defs, instance)
        second = run_release(defs, instance)
        assert second.success, step_failure(second)
    assert _md(first, "packed_shards")["shards_kept"].value == 0
    kept = _md(second, "packed_shards")["shards_kept"].value
    assert kept >= 1
    v2 = store.require_current("packed_shards", "r1")
    assert v2.content_digest != v1.content_digest

    def order(v, split):
        d = [r for r in v.read_table("decisions").to_pylist() if r["split"] == split]
        return [r["record_id"] for r in sorted(d, key=lambda r: r["item_index"])]

    before, after = order(v1, "train"), order(v2, "train")
    assert after[:len(before)] == before and set(after[len(before):]) <= {f"site_docs:{k}" for k in NEW_DOCS}
    rows1 = {r["name"]: r for r in v1.read_table("shards").to_pylist() if r["split"] == "train"}
    rows2 = [r for r in v2.read_table("shards").to_pylist() if r["split"] == "train"]
    same = [r for r in rows2 if r["name"] in rows1 and r["bin_sha256"] == rows1[r["name"]]["bin_sha256"]]
    assert same and same[0]["name"] == "train-00000"
    old = corpus_env / rows1["train-00000"]["directory"] / "train-00000.bin"
    new = corpus_env / rows2[0]["directory"] / "train-00000.bin"
    assert old.stat().st_ino == new.stat().st_ino  # linked, not written again
    assert _md(second, "release_manifest")["build_id"].value != _md(first, "release_manifest")["build_id"].value
    checks = [e for e in second.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert checks and all(e.event_specific_data.passed for e in checks)


def test_a_kept_shard_changed_on_disk_is_packed_again_not_kept(corpus_env, tmp_path, monkeypatch):
    """A byte of a shard flipped in place (same size: bit rot, a stray write) after the first
    build. Kept shards are linked when their files have their recorded sizes, so the rebuild after
    an increment takes the damaged file again and the span check's re-read finds it; the step then
    moves that shard set aside and packs every shard afresh, once. The release builds, the check
    passes on the second reading, the materialization says what the first found, the damaged file
    is kept aside for inspection, and the shards are the bytes the first build recorded."""
    import hashlib

    setup_release(tmp_path, monkeypatch, _release_body(TRAIN + ", freeze: true") + APPEND_PACKING)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    store = LayerStore(corpus_env)
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        assert run_release(defs, instance).success
        v1 = store.require_current("packed_shards", "r1")
        first = next(r for r in v1.read_table("shards").to_pylist() if r["split"] == "train" and r["name"] == "train-00000")
        damaged = corpus_env / first["directory"] / "train-00000.bin"
        raw = bytearray(damaged.read_bytes())
        raw[len(raw) // 2] ^= 0x5A
        with open(damaged, "r+b") as f:  # in place: the same inode, the same size
            f.seek(len(raw) // 2)
            f.write(bytes([raw[len(raw) // 2]]))
        _increment(tmp_path, defs, instance)
        second = run_release(defs, instance)
        assert second.success, step_failure(second)
        warnings = [e.user_message for e in instance.all_logs(second.run_id)
                    if e.step_key == "packed_shards" and e.level >= 30]
    md = _md(second, "packed_shards")
    assert md["shards_kept"].value == 0  # the second packing kept nothing
    found = md["repacked_after_reread"].value
    assert any("train-00000" in p and "sha256" in p for p in found["problems"])
    (aside,) = found["set_aside"]
    assert (Path(aside) / "train" / "train-00000.bin").stat().st_ino == damaged.stat().st_ino  # kept for inspection
    assert any("failed its re-read" in w and "train-00000" in w for w in warnings)
    checks = {e.event_specific_data.check_name: e.event_specific_data for e in second.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert checks["span_coverage"].passed and "repacked_after" in checks["span_coverage"].metadata
    v2 = store.require_current("packed_shards", "r1")
    now = next(r for r in v2.read_table("shards").to_pylist() if r["split"] == "train" and r["name"] == "train-00000")
    rewritten = corpus_env / now["directory"] / "train-00000.bin"
    assert now["bin_sha256"] == first["bin_sha256"]  # the same samples packed again: the bytes first recorded
    assert hashlib.sha256(rewritten.read_bytes()).hexdigest() == first["bin_sha256"]
    assert rewritten.stat().st_ino != damaged.stat().st_ino  # written afresh, not the damaged inode
    assert hashlib.sha256(damaged.read_bytes()).hexdigest() != first["bin_sha256"]  # that one is left as it was
