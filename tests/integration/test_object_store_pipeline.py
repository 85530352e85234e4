"""``CORPUS_HOME`` on an object store, end to end through Dagster against a real S3-compatible
server on 127.0.0.1 (moto in server mode): snapshots and a release built with the data root in a
bucket; a second machine with an empty local cache reads and verifies everything from the bucket
alone; a deletion request then reaches the bucket — the revoked build's shards and every layer
version holding the deleted text are gone from it, and the successor is sealed and current."""

import hashlib
import io
import json
import re

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from corpus_assets.cli import main as corpus_main
from corpus_assets.domain.storage.catalog import Catalog
from corpus_assets.domain.storage.layer_store import LayerStore
from corpus_assets.domain.release.registry import registry
from release_fixture import DOCS, TOKENIZER, build_snapshots, run_release, setup_release, step_failure, tick_until_applied

BODY = ("split: {fractions: [0.6, 0.2, 0.2]}\n" + TOKENIZER
        + "packing: {seq_len: 128, overlength: split, pad_token: '<|pad|>'}\nshards: {positions: 1024}\n")
LAYERS = ("raw_snapshot", "canonical_records", "curated_records", "minhash_signatures", "eval_registry",
          "dedup_clusters", "splits", "tokenizer", "token_views", "mixture_plan", "packed_shards")


def _body(s3, bucket: str, key: str) -> bytes:
    return s3.client().get_object(Bucket=bucket, Key=key)["Body"].read()


def _texts_in_parquet(data: bytes) -> list:
    """Every string / binary value of a Parquet object, decoded."""
    t = pq.read_table(io.BytesIO(data))
    out = []
    for col in t.columns:
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            out += [v for v in col.to_pylist() if v]
        elif pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            out += [v.decode("utf-8", "replace") for v in col.to_pylist() if v]
    return out


def test_release_and_deletion_with_the_data_root_in_a_bucket(corpus_env, s3_env, tmp_path, monkeypatch, capsys):
    s3 = s3_env
    bucket = s3.new_bucket()
    monkeypatch.setenv("CORPUS_HOME", f"s3://{bucket}/corpus")
    monkeypatch.setenv("CORPUS_LOCAL", str(corpus_env))  # machine A's cache, catalog and Dagster home
    setup_release(tmp_path, monkeypatch, BODY)
    from corpus_assets.definitions import build_definitions

    defs = build_definitions()
    cat = Catalog.at(corpus_env / "catalog.duckdb")
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        result = run_release(defs, instance)
        assert result.success, step_failure(result)
        mats = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
        # the release's shards are copied inside the store from the sealed shard set, not uploaded twice
        logs = [e.user_message for e in instance.all_logs(result.run_id)]
        (upload,) = [m for m in logs if "copied inside the store" in m]
        copied = int(re.search(r"(\d+) copied inside the store", upload).group(1))
        uploaded = int(re.search(r"(\d+) files \(\d+ bytes\) uploaded", upload).group(1))

        keys = s3.keys(bucket, "corpus/")
        # every layer is sealed and pointed at in the bucket; the catalog and Dagster's home stay local
        for asset in LAYERS:
            assert any(k.startswith(f"corpus/layers/{asset}/") and k.endswith("/CURRENT") for k in keys), asset
            assert any(k.startswith(f"corpus/layers/{asset}/") and k.endswith("/_manifest.json") for k in keys), asset
        assert not [k for k in keys if "catalog" in k or "/dagster/" in k]
        assert not [k for k in keys if k.endswith("/.claim")]  # the publisher released its claim
        bid = _body(s3, bucket, "corpus/releases/r1/CURRENT").decode().strip()
        (published,) = [r for r in registry(cat, "r1") if r["status"] == "published"]
        assert published["build_id"] == bid
        assert mats["release_manifest"]["object_store"].value == f"s3://{bucket}/corpus/releases/r1/{bid}"
        # the bucket holds the published build byte for byte
        local = corpus_env / published["path"]
        files = sorted(p for p in local.rglob("*") if p.is_file())
        assert any(p.suffix == ".bin" for p in files)
        shard_files = [p for p in files if p.relative_to(local).parts[0] == "shards"]
        assert copied == len(shard_files) and uploaded == len(files) - len(shard_files) - 1  # manifest.json: the seal
        for p in files:
            key = f"corpus/releases/r1/{bid}/{p.relative_to(local).as_posix()}"
            assert hashlib.sha256(_body(s3, bucket, key)).digest() == hashlib.sha256(p.read_bytes()).digest(), key

        # machine B: nothing local; the bucket alone answers `corpus layers` and `corpus verify`
        machine_b = tmp_path / "machine_b"
        capsys.readouterr()
        assert corpus_main(["layers"]) == 0
        layers_a = capsys.readouterr().out
        monkeypatch.setenv("CORPUS_LOCAL", str(machine_b))
        assert corpus_main(["layers"]) == 0
        assert capsys.readouterr().out == layers_a
        assert not list(machine_b.rglob("*.parquet"))  # listing reads manifests only, downloads no data
        assert corpus_main(["verify", "r1"]) == 0
        assert f"OK {machine_b / 'releases' / 'r1' / bid}" in capsys.readouterr().out
        store_b = LayerStore.from_env(machine_b)
        for part in store_b.partitions("canonical_records"):  # machine B reads (and caches) a layer
            assert store_b.require_current("canonical_records", part).read_table("records").num_rows
        shards_b = store_b.require_current("packed_shards", "r1")
        assert shards_b.location == f"s3://{bucket}/corpus/layers/packed_shards/r1/{shards_b.version}"
        shards_b.verify()
        monkeypatch.setenv("CORPUS_LOCAL", str(corpus_env))

        # a deletion request: the sensor and the runs it requests reach the bucket
        assert corpus_main(["delete", "--record-id", "site_docs:venv", "--requester", "owner@example.org",
                            "--reason", "author withdrew consent"]) == 0
        request = capsys.readouterr().out.strip().splitlines()[-1]
        tick_until_applied(defs, instance, cat, [request])

    rows = {r["build_id"]: r for r in registry(cat, "r1")}
    assert rows[bid]["status"] == "revoked"
    (new,) = [r for r in rows.values() if r["status"] == "published"]
    assert _body(s3, bucket, "corpus/releases/r1/CURRENT").decode().strip() == new["build_id"] != bid
    keys = s3.keys(bucket, "corpus/")
    # the revoked build: shards withdrawn from the bucket, manifest and data card kept, REVOKED.json added
    assert not [k for k in keys if k.startswith(f"corpus/releases/r1/{bid}/shards/")]
    revoked_note = json.loads(_body(s3, bucket, f"corpus/releases/r1/{bid}/REVOKED.json"))
    assert revoked_note["successor_build_id"] == new["build_id"] and request in revoked_note["request_ids"]
    assert f"corpus/releases/r1/{bid}/manifest.json" in keys
    # no object in the bucket — any layer version, shard set or release — still holds the deleted text
    needle = DOCS["venv"][:60]
    for k in keys:
        if k.endswith(".parquet"):
            assert not any(needle in v for v in _texts_in_parquet(_body(s3, bucket, k))), k
        elif k.endswith((".jsonl", ".json", ".md")):
            assert needle not in _body(s3, bucket, k).decode("utf-8", "replace"), k
    for k in keys:
        if k.endswith(".spans.parquet"):
            ids = set(pq.read_table(io.BytesIO(_body(s3, bucket, k)), columns=["record_id"]).column(0).to_pylist())
            assert "site_docs:venv" not in ids, k
    # machine B still caches what it read before the deletion; `corpus cache prune` applies it there
    def cached_texts(root):
        return [v for f in root.rglob("*.parquet") for v in _texts_in_parquet(f.read_bytes())]

    assert any(needle in v for v in cached_texts(machine_b))
    assert (machine_b / "releases" / "r1" / bid / "shards").is_dir()
    monkeypatch.setenv("CORPUS_LOCAL", str(machine_b))
    capsys.readouterr()
    assert corpus_main(["cache", "prune"]) == 0
    out = capsys.readouterr().out
    assert f"withdrew the shards of revoked build r1/{bid}" in out and "removed layers/canonical_records/" in out
    assert not any(needle in v for v in cached_texts(machine_b))
    assert not (machine_b / "releases" / "r1" / bid / "shards").exists()
    assert (machine_b / "releases" / "r1" / bid / "REVOKED.json").is_file()
    assert corpus_main(["verify", "r1"]) == 0  # the successor, fetched into the pruned cache

    # machine C, from the bucket alone: the successor verifies, the revoked build is refused
    monkeypatch.setenv("CORPUS_LOCAL", str(tmp_path / "machine_c"))
    capsys.readouterr()
    assert corpus_main(["verify", "r1"]) == 0
    assert corpus_main(["verify", f"r1@{bid}"]) == 1


def _build_and_list(defs, capsys) -> tuple[str, str]:
    with dg.instance_for_test() as instance:
        build_snapshots(defs, instance)
        result = run_release(defs, instance)
        assert result.success, step_failure(result)
        digest = {e.asset_key.to_user_string(): e.materialization.metadata
                  for e in result.get_asset_materialization_events()}["release_manifest"]["content_digest"].value
    capsys.readouterr()
    assert corpus_main(["layers"]) == 0
    return digest, capsys.readouterr().out


def test_the_bucket_holds_the_same_bytes_as_a_local_data_root(corpus_env, s3_env, tmp_path, monkeypatch, capsys):
    """The storage backend is not an input: every layer version and the release content digest
    are the same whether CORPUS_HOME is a directory or a bucket."""
    setup_release(tmp_path, monkeypatch, BODY)
    from corpus_assets.definitions import build_definitions

    local_digest, local_layers = _build_and_list(build_definitions(), capsys)
    bucket = s3_env.new_bucket()
    monkeypatch.setenv("CORPUS_HOME", f"s3://{bucket}/corpus")
    monkeypatch.setenv("CORPUS_LOCAL", str(tmp_path / "bucket_cache"))
    bucket_digest, bucket_layers = _build_and_list(build_definitions(), capsys)
    assert bucket_digest == local_digest

    def derived(listing):  # raw_snapshot records when each item was fetched, so it differs by design
        return [line for line in listing.splitlines() if not line.startswith("raw_snapshot")]

    assert derived(bucket_layers) == derived(local_layers) and "packed_shards" in bucket_layers
