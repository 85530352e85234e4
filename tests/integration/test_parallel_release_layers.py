"""A whole release through Dagster with the release engine in process and with
``CORPUS_RELEASE_WORKERS=2`` (a real two-process LocalCluster), token views in chunks of a few
records and packing in ranges of one shard: every file of every release layer and of the shard
set is byte-identical. (Published builds are not compared: their build id covers the snapshots'
raw captures, which record their own capture times in each home.)"""

import hashlib
from pathlib import Path

import dagster as dg

from corpus_assets.domain.storage.layer_store import LayerStore
from release_fixture import TOKENIZER, build_snapshots, run_release, setup_release

BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "mixture: {unit: documents, weights: {site_docs: 0.5, site_chat: 0.5}, budget: 40, replacement: true, seed: 7}\n"
        + "packing: {seq_len: 32, mode: atomic, fit: best_fit, open_blocks: 4, overlength: split, boundary: mask, "
        + "tail: drop, pad_token: '<|pad|>'}\nshards: {positions: 64}\n")
SMALL_TASKS = {"ops": {"token_views": {"config": {"task_records": 2}},
                       "packed_shards": {"config": {"task_positions": 64}}}}
RELEASE_LAYERS = ("dedup_clusters", "splits", "tokenizer", "token_views", "mixture_plan", "packed_shards")


def _files(home: Path, sub: str) -> dict[str, str]:
    root = home / sub
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not any(part.startswith(".") for part in p.parts)}


def test_a_release_with_two_workers_is_byte_identical_to_the_serial_release(corpus_env, tmp_path, monkeypatch):
    setup_release(tmp_path, monkeypatch, BODY)
    from corpus_assets.definitions import build_definitions

    homes = {}
    for workers, home in (("1", corpus_env), ("2", tmp_path / "home_2")):
        (home / "dagster").mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv("CORPUS_HOME", str(home))
        monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
        monkeypatch.setenv("CORPUS_RELEASE_WORKERS", workers)
        defs = build_definitions()
        with dg.instance_for_test() as instance:
            build_snapshots(defs, instance)
            result = run_release(defs, instance, run_config=SMALL_TASKS)
            assert result.success
            logs = [e.user_message for e in instance.all_logs(result.run_id)]
        homes[workers] = home
        engine = "Dask LocalCluster of 2 worker processes" if workers == "2" else "Dask synchronous scheduler"
        assert any(f"on the {engine}" in m for m in logs if m.startswith("token_views[r1]")), workers
        assert any(f"on the {engine}" in m for m in logs if m.startswith("packed_shards r1:")), workers

    serial, parallel = LayerStore(homes["1"]), LayerStore(homes["2"])
    for layer in RELEASE_LAYERS:
        a, b = serial.require_current(layer, "r1"), parallel.require_current(layer, "r1")
        assert a.content_digest == b.content_digest, layer
    report = serial.require_current("packed_shards", "r1").manifest["report"]
    assert report["splits"]["train"]["shards"] >= 3  # several ranges of one shard each
    assert serial.require_current("token_views", "r1").manifest["report"]["records"] > 2  # several chunks
    for layer in RELEASE_LAYERS:  # every file of the release's layers (snapshot captures carry their own times)
        files = _files(homes["1"], f"layers/{layer}/r1")
        assert files == _files(homes["2"], f"layers/{layer}/r1") and files, layer
    shards = _files(homes["1"], "shards")
    assert shards == _files(homes["2"], "shards") and len(shards) > 10
