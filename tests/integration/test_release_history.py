"""A release rebuilt after increments, through the real jobs, keeps only what a run can still
use: once a newer build is published and the grace period (``CORPUS_RELEASE_HISTORY_GRACE``) has
passed, the older builds' release-layer versions and shard sets are gone from disk, while every
published build still verifies and the next rebuild still reuses the current views and shards."""

import json
import time
from datetime import timedelta

import dagster as dg

from corpus_assets.domain.core.keys import snapshot_key
from corpus_assets.domain.layers import registry
from corpus_assets.domain.release.history import prune_release_history
from corpus_assets.domain.release.publish import verify_release
from corpus_assets.domain.storage.layer_store import LayerStore
from release_fixture import T0, build_snapshots, run_release, setup_release, step_failure

BODY = ("split: {fractions: [0.8, 0.1, 0.1]}\n"
        "tokenizer: {train: {vocab_size: 420, min_frequency: 1}, special_tokens: ['<|endoftext|>', '<|pad|>'], "
        "eos_token: '<|endoftext|>', freeze: true}\n"
        "packing: {seq_len: 16, mode: atomic, overlength: split, pad_token: '<|pad|>', order: append}\n"
        "shards: {positions: 32}\n")
NEW = {  # long enough to pass curation, so each increment reaches every release layer
    "heapq": (
        "Heaps keep the smallest item at the front of a plain list. The heapq module pushes and pops items in "
        "logarithmic time, merges sorted inputs lazily and picks the largest or smallest items of a long stream "
        "without sorting all of it. Priority queues built this way schedule timers, rank search results and run "
        "shortest path searches over weighted graphs. Ties are broken by adding a counter to each entry, so items "
        "that cannot be compared never meet. Replacing the root and sifting down is cheaper than a pop and a push."
    ),
    "bisect": (
        "Bisection finds where an item belongs in a sorted sequence by halving the search range at every step. "
        "The bisect module returns insertion points to the left or right of equal items, and insort keeps a list "
        "sorted as new items arrive, which suits leaderboards, histograms with fixed bucket edges and time-ordered "
        "event logs. A key function compares records by one field without building a separate list of keys. "
        "Because lookups are logarithmic, a sorted list often replaces a search tree for read-heavy workloads. "
        "Inserting into the middle of a long list still moves every later item."
    ),
}


def _increment(tmp_path, defs, instance, n: int) -> None:
    """A new capture of site_docs with one more document."""
    doc_id, text = list(NEW.items())[n]
    path = tmp_path / "docs" / "docs.jsonl"
    path.write_text(path.read_text() + json.dumps({"id": doc_id, "text": text}) + "\n")
    key = snapshot_key("site_docs", T0 + timedelta(hours=1 + n))
    instance.add_dynamic_partitions("snapshots", [key])
    assert defs.resolve_job_def("snapshot_job").execute_in_process(instance=instance, partition_key=key).success


def _on_disk(home, asset: str) -> set:
    """Everything in the release's partition directory but its writers' lock file (no staging left)."""
    d = home / "layers" / asset / "r1"
    return {p.name for p in d.iterdir() if p.name != ".lock"} if d.is_dir() else set()


def _md(result, node):
    return result.asset_materializations_for_node(node)[0].metadata


def test_older_builds_history_goes_after_the_grace_period_and_reuse_still_works(corpus_env, tmp_path, monkeypatch):
    setup_release(tmp_path, monkeypatch, BODY)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    store = LayerStore(corpus_env)
    layers = [la.asset for la in registry.release_layers() if la.tables]
    monkeypatch.setenv("CORPUS_RELEASE_HISTORY_GRACE", "0")
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        first = run_release(defs, instance)
        assert first.success, step_failure(first)
        first_set = {p.name for p in (corpus_env / "shards" / "r1").iterdir()}
        _increment(tmp_path, defs, instance, 0)
        second = run_release(defs, instance)
        assert second.success, step_failure(second)

        # grace 0: every byte of the release's layers and shard sets is the current build's
        for asset in layers:
            current = store.current_version_name(asset, "r1")
            assert _on_disk(corpus_env, asset) == {"CURRENT", current}, asset
        current_set = json.loads((corpus_env / "layers" / "packed_shards" / "r1" / store.current_version_name(
            "packed_shards", "r1") / "_manifest.json").read_text())["report"]["shard_set"]
        assert {p.name for p in (corpus_env / "shards" / "r1").iterdir()} == {current_set.rsplit("/", 1)[-1]}
        assert first_set.isdisjoint({current_set.rsplit("/", 1)[-1]})
        said = [e.user_message for e in instance.all_logs(second.run_id) if e.step_key == "release_manifest"]
        assert "release r1: dedup_clusters: dropped 1 superseded version(s), kept 0" in said
        pruned = _md(second, "release_manifest")["history_pruned"].value
        assert pruned["versions_dropped"] >= len(layers) - 1 and pruned["shard_sets_removed"] == 1
        assert pruned["versions_kept"] == 0 and pruned["shard_sets_kept"] == 0

        # an hour's grace: the next rebuild keeps what the second build used ...
        monkeypatch.setenv("CORPUS_RELEASE_HISTORY_GRACE", "1h")
        before = {asset: store.current_version_name(asset, "r1") for asset in layers}
        _increment(tmp_path, defs, instance, 1)
        third = run_release(defs, instance)
        assert third.success, step_failure(third)
    # ... which still reused the pruned build's views and shards (they were current)
    views = {k: _md(third, "token_views")[k].value for k in ("tokenized_records", "reused_records", "adopted_records")}
    assert views["tokenized_records"] == 1 and views["reused_records"] + views["adopted_records"] >= 5, views
    assert _md(third, "packed_shards")["shards_kept"].value >= 1
    kept = _md(third, "release_manifest")["history_pruned"].value
    assert kept["versions_dropped"] == 0 and kept["versions_kept"] >= 1 and kept["shard_sets_kept"] == 1
    for asset in layers:
        assert before[asset] in _on_disk(corpus_env, asset)
    # ... until the hour has passed
    later = prune_release_history(store, "r1", grace_seconds=3600, now=time.time() + 3601)
    assert later.summary()["versions_kept"] == 0 and len(later.shard_sets_removed) == 1
    for asset in layers:
        assert _on_disk(corpus_env, asset) == {"CURRENT", store.current_version_name(asset, "r1")}, asset
    # every published build still verifies: its shards are its own links, not the pruned sets
    builds = sorted(p for p in (corpus_env / "releases" / "r1").iterdir() if p.is_dir() and not p.name.startswith("."))
    assert len(builds) == 3
    for b in builds:
        assert verify_release(b).files > 0
